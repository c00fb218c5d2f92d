//! The Python checkers under tests/ (the real Helm library, cel-python, ...), run with the
//! interpreter `scripts/test` prepares.

use std::ffi::OsStr;
use std::process::Command;

/// Runs `tests/<script>` with `args`; returns (success, stdout and stderr).
pub fn run<S: AsRef<OsStr>>(script: &str, args: &[S]) -> (bool, String) {
    let python = std::env::var("PREVIEWD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(python)
        .arg(format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR")))
        .args(args)
        .output()
        .expect("running python");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !text.contains("ModuleNotFoundError"),
        "{script} needs the packages of tests/requirements.txt: run scripts/test\n{text}"
    );
    (output.status.success(), text)
}
