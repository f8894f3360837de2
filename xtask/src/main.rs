//! Project tasks, run as `cargo xtask <task>` (the alias lives in
//! `.cargo/config.toml`). One module per task; no shell scripts.
//!
//! - `bench`: the benches and their overhead budgets (`xtask/budgets.toml`).
//! - `ci`: everything CI checks (format, clippy, tests in every supported
//!   feature set, doc tests, docs, tidy checks).
//! - `tidy`: the architecture invariants and doc-drift checks alone.
//! - `codegen`: regenerates the docs tables that come from code (`--check`
//!   only compares, and fails when a file is out of date).
//! - `gpu-check`: packs the simulator built with `--features cuda` and a
//!   script for a GPU machine, and runs it where there is a GPU.

mod bench;
mod ci;
mod codegen;
mod gpu_check;
mod tidy;

use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  ci      format check, clippy, tests in every feature set, docs, tidy
  tidy    architecture invariants and doc-drift checks only
  bench [--rounds N] [--only PART,...] [--update-docs]
          benches and overhead budgets (xtask/budgets.toml); prints the
          table, writes target/bench-report.md (docs/performance.md)
  codegen [--check]
          regenerate the docs tables from code (--check: fail if stale)
  gpu-check [--build] [--debug]
          build the cuda simulator and pack target/gpu-check/ (a binary and
          gpu-check.sh for a GPU machine); without --build, also run it
          when nvidia-smi is present (docs/gpu.md)";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci::run(),
        Some("tidy") => tidy::run(),
        Some("codegen") => match args.get(1).map(String::as_str) {
            None => codegen::run(false),
            Some("--check") => codegen::run(true),
            Some(other) => bail!("unknown option '{other}' for codegen\n\n{USAGE}"),
        },
        Some("bench") => bench::run(&args[1..]),
        Some("gpu-check") => gpu_check::run(&args[1..]),
        Some("-h" | "--help") | None => {
            say(USAGE);
            Ok(())
        }
        Some(other) => bail!("unknown task '{other}'\n\n{USAGE}"),
    }
}

/// Prints a line of progress on standard error.
fn say(line: &str) {
    #[expect(clippy::print_stderr, reason = "xtask reports progress on standard error")]
    {
        eprintln!("{line}");
    }
}

/// The workspace root (the parent of this crate's directory).
fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(ToOwned::to_owned).unwrap_or_default()
}

/// A `cargo` command run in the workspace root.
fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    cmd.args(args).current_dir(workspace_root());
    cmd
}

/// Runs `cmd`, echoing it first, and fails when it fails.
fn run_cmd(mut cmd: Command) -> Result<()> {
    say(&format!("$ {}", display(&cmd)));
    let status = cmd.status().with_context(|| format!("could not start {}", display(&cmd)))?;
    if !status.success() {
        bail!("{} failed with {status}", display(&cmd));
    }
    Ok(())
}

/// Runs `cmd` and returns its standard output.
fn output(mut cmd: Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("could not start {}", display(&cmd)))?;
    if !out.status.success() {
        bail!("{} failed with {}:\n{}", display(&cmd), out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}
