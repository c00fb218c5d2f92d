//! What a test's child process left: its output when it had to succeed, or its stderr when
//! it had to fail, the test failing with the other side's words.

use std::process::Output;

/// `output`'s stdout and stderr, which must have succeeded (`what` names it).
pub fn ok(output: &Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{what} failed: {text}");
    text
}

/// `output`'s stderr, which a failure must have been.
pub fn failed(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "succeeded: {text}");
    text
}
