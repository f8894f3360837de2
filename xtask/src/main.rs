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
mod circles;
mod cmd;
mod codegen;
mod commands;
mod doc_links;
mod gpu_check;
mod tidy;

use anyhow::{Result, bail};

// The helpers every task uses, reachable as `crate::say` and so on.
use cmd::{cargo, output, run_cmd, say, workspace_root};

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
