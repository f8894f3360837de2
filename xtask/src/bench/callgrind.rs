//! Instruction counts under `valgrind --tool=callgrind`, which are
//! repeatable where wall time on a shared machine is not.
//!
//! A program that calls one helper `N` times is run for `N` and `2N`; the
//! difference divided by `N` is what one more iteration costs, with start-up
//! and shutdown cancelled out. [`per_iteration`] counts the whole process
//! (the disabled paths start no thread); [`per_iteration_main_thread`] counts
//! the main thread alone (`--separate-threads=yes`), so that the background
//! threads of a recorded span (the batch processor's export worker) do not
//! count: what decides a budget is the cost to the thread that calls lens.

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
pub(crate) fn collected(stderr: &str) -> Option<u64> {
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

/// Instructions of the main thread (callgrind's thread 1) over a whole run
/// of `program args`, with `--separate-threads=yes`; `scratch` holds the
/// per-thread output files.
pub(crate) fn main_thread_total(program: &Path, args: &[&str], scratch: &Path) -> Result<u64> {
    main_thread_total_in(program, args, scratch, &[])
}

/// [`main_thread_total`], counting only inside the functions named in
/// `only` (callgrind's `--toggle-collect`, by exact name; none: the whole
/// run).
fn main_thread_total_in(program: &Path, args: &[&str], scratch: &Path, only: &[&str]) -> Result<u64> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).with_context(|| format!("could not create {}", scratch.display()))?;
    let out_file = scratch.join("cg.out");
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--separate-threads=yes"])
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .args(only.iter().map(|name| format!("--toggle-collect={name}")))
        .arg(program)
        .args(args)
        .output()
        .with_context(|| format!("could not run valgrind on {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "callgrind run of {} {} failed ({}):\n{}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let main_file = scratch.join("cg.out-01");
    let text = std::fs::read_to_string(&main_file).with_context(|| format!("no {}", main_file.display()))?;
    totals(&text).with_context(|| format!("no totals line in {}", main_file.display()))
}

/// Instructions of every thread together in the per-thread files that
/// [`main_thread_total`] left in `scratch` (its last run).
pub(crate) fn all_threads_total(scratch: &Path) -> Result<u64> {
    let mut sum = 0;
    for entry in std::fs::read_dir(scratch).with_context(|| format!("could not read {}", scratch.display()))? {
        let path = entry?.path();
        if path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("cg.out-")) {
            let text = std::fs::read_to_string(&path).with_context(|| format!("could not read {}", path.display()))?;
            sum += totals(&text).with_context(|| format!("no totals line in {}", path.display()))?;
        }
    }
    Ok(sum)
}

/// The `totals:` (or `summary:`) line of a callgrind output file.
pub(crate) fn totals(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("totals:").or_else(|| line.strip_prefix("summary:")))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
}

/// Instructions one more loop iteration of `program <mode> N` costs the
/// main thread; with `only`, counted inside those functions alone (the
/// loops: what runs before `main`, such as fastrace's clock calibration,
/// which spins for a stretch of wall time, is then not counted).
pub(crate) fn per_iteration_main_thread(
    program: &Path,
    mode: &str,
    n: u64,
    scratch: &Path,
    only: &[&str],
) -> Result<f64> {
    let once = main_thread_total_in(program, &[mode, &n.to_string()], scratch, only)?;
    if once == 0 && !only.is_empty() {
        bail!(
            "callgrind counted nothing inside {} in {} {mode} (a loop inlined or renamed?)",
            only.join(", "),
            program.display()
        );
    }
    let twice = main_thread_total_in(program, &[mode, &(2 * n).to_string()], scratch, only)?;
    Ok((twice as f64 - once as f64) / n as f64)
}

#[cfg(test)]
mod tests {
    use super::{collected, totals};

    #[test]
    fn reads_the_totals_line() {
        assert_eq!(totals("version: 1\nevents: Ir\nfn=main\n3 4\ntotals: 98765\n"), Some(98_765));
        assert_eq!(totals("events: Ir\n"), None);
    }

    #[test]
    fn reads_the_collected_line() {
        let stderr = "==12== Events    : Ir\n==12== Collected : 1234567\n==12==\n==12== I   refs:      1,234,567\n";
        assert_eq!(collected(stderr), Some(1_234_567));
        assert_eq!(collected("nothing"), None);
    }
}
