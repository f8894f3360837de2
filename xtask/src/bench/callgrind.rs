//! Instruction counts under `valgrind --tool=callgrind`, which are
//! repeatable where wall time on a shared machine is not.
//!
//! A program that calls one helper `N` times is run for `N` and `2N`; the
//! difference divided by `N` is what one more iteration costs, with start-up
//! and shutdown cancelled out.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Whether valgrind can be run here.
pub(crate) fn available() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok_and(|out| out.status.success())
}

/// The instructions callgrind collected over a whole run of `program args`.
pub(crate) fn total(program: &Path, args: &[&str], envs: &[(&str, &str)]) -> Result<u64> {
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--callgrind-out-file=/dev/null"]).arg(program).args(args);
    for (key, value) in envs {
        cmd.env(key, value);
    }
    let out = cmd.output().with_context(|| format!("could not run valgrind on {}", program.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("callgrind run of {} {} failed ({}):\n{stderr}", program.display(), args.join(" "), out.status);
    }
    collected(&stderr).with_context(|| format!("no `Collected :` line from callgrind:\n{stderr}"))
}

/// The `==PID== Collected : N` line of callgrind's summary.
fn collected(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|line| line.split_once("Collected :").map(|(_, n)| n.trim().replace(',', "")))
        .and_then(|n| n.parse().ok())
}

/// Instructions one more loop iteration of `program <mode> N` costs.
pub(crate) fn per_iteration(program: &Path, mode: &str, n: u64) -> Result<f64> {
    let once = total(program, &[mode, &n.to_string()], &[])?;
    let twice = total(program, &[mode, &(2 * n).to_string()], &[])?;
    Ok((twice as f64 - once as f64) / n as f64)
}

#[cfg(test)]
mod tests {
    use super::collected;

    #[test]
    fn reads_the_collected_line() {
        let stderr = "==12== Events    : Ir\n==12== Collected : 1234567\n==12==\n==12== I   refs:      1,234,567\n";
        assert_eq!(collected(stderr), Some(1_234_567));
        assert_eq!(collected("nothing"), None);
    }
}
