//! The command's lines on standard error (a leaf: every subcommand's
//! module writes through it, and the crate root dispatches to them).

use std::io::Write as _;

/// The name this process was started as (`lens`, or the simulator that
/// aliases these commands), for its error lines.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|arg0| std::path::Path::new(&arg0).file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "lens".to_string())
}

/// Prints `<program>: warning: <message>` on standard error, in one write.
pub(crate) fn warn(message: &dyn std::fmt::Display) {
    let line = format!("{}: warning: {message}\n", program_name());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Prints `<program>: error: <message>` on standard error, in one write.
pub(crate) fn error(message: &dyn std::fmt::Display) {
    let line = format!("{}: error: {message}\n", program_name());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
