//! The `previewd` binary: parses the command line and hands over to `previewd::cli`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    previewd::cli::main()
}
