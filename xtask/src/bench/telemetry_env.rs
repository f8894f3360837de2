//! What `--telemetry-env` set, for the simulator's and the server's
//! telemetry-on runs (which otherwise start from a clean environment).

use std::process::Command;
use std::sync::OnceLock;

static TELEMETRY_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Records the variables (once per bench run).
pub(crate) fn set(pairs: Vec<(String, String)>) {
    let _ = TELEMETRY_ENV.set(pairs);
}

/// Sets the recorded variables on a telemetry-on child.
pub(crate) fn apply(cmd: &mut Command) {
    for (key, value) in TELEMETRY_ENV.get().map_or(&[][..], Vec::as_slice) {
        cmd.env(key, value);
    }
}
