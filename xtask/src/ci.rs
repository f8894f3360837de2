//! `cargo xtask ci`: what CI runs, in the order that fails fastest.
//!
//! Feature sets: everything on (`--all-features`: the `otel` runtime with
//! every transport and the `testing` exporters), `otel` off for every crate
//! that follows the facade's feature, each crate built alone so that no
//! other member turns it back on, and the file-only facade (`otel` without a
//! transport feature), whose missing-transport errors are tested.
//! The candle example ([`CANDLE_EXAMPLE`]) is in the first set (the
//! workspace's steps) and has a step of its own for the second.

use anyhow::Result;

use crate::commands::{CANDLE_EXAMPLE, MAIN_COMMAND};
use crate::{cargo, codegen, run_cmd, say, tidy};

/// The crates tested with `otel` off: those with an `otel` feature, and
/// lens-instruments, lens-tracing and lens-training, which have none of their own and
/// follow the facade's (alone, with no default features, nothing turns it
/// on). lens-core has no features that change it (its one build is the
/// workspace run's) and lens-otel-runtime is the runtime itself.
pub(crate) const OTEL_OFF_CRATES: &[&str] = &[
    "lens-instruments",
    "lens-fallbacks",
    "lens-tracing",
    "lens-training",
    "megatron-telemetry",
    "lens-command",
    "megatron-train-sim",
];

/// Workspace members that only `cargo xtask bench` builds (fastrace beside
/// a lens span): `--workspace` would otherwise compile them in CI.
pub(crate) const BENCH_ONLY: &[&str] = &["fastrace-compare"];

/// `cargo <args> --workspace` without the [`BENCH_ONLY`] members.
fn workspace(args: &[&str]) -> std::process::Command {
    let mut all: Vec<&str> = vec![args[0], "--workspace"];
    for krate in BENCH_ONLY {
        all.extend(["--exclude", krate]);
    }
    all.extend_from_slice(&args[1..]);
    cargo(&all)
}

pub(crate) fn run() -> Result<()> {
    run_cmd(cargo(&["fmt", "--all", "--check"]))?;
    tidy::run()?;
    codegen::run(true)?;
    run_cmd(workspace(&["clippy", "--all-targets", "--all-features", "--", "-D", "warnings"]))?;
    for krate in OTEL_OFF_CRATES {
        run_cmd(cargo(&["clippy", "-p", krate, "--all-targets", "--no-default-features", "--", "-D", "warnings"]))?;
    }
    run_cmd(workspace(&["test", "--all-features"]))?;
    // The GPU device alone (debug, same target dir), so it cannot rot.
    run_cmd(cargo(&["build", "-p", "megatron-train-sim", "--features", "cuda"]))?;
    for krate in OTEL_OFF_CRATES {
        run_cmd(cargo(&["test", "-p", krate, "--no-default-features"]))?;
    }
    // The candle example without `otel` (same profile): the same schedule
    // trains, warns once that telemetry is compiled out, writes nothing.
    run_cmd(cargo(&["clippy", "-p", CANDLE_EXAMPLE, "--all-targets", "--", "-D", "warnings"]))?;
    run_cmd(cargo(&["test", "-p", CANDLE_EXAMPLE]))?;
    // A program that only writes files: the facade with `otel` and no
    // transport; a configuration that selects one is a setup error.
    run_cmd(cargo(&[
        "test",
        "-p",
        "lens-fallbacks",
        "--no-default-features",
        "--features",
        "otel",
        "--test",
        "default_destination",
    ]))?;
    // The same instrumented program builds and runs in both modes, set up
    // from its environment with telemetry enabled (with `otel` it exports its
    // spans and its counter, gauge and histogram to files; without it, it
    // warns once that telemetry is compiled out), and the README's main
    // command runs.
    for mode in [&["--example", "instrumented"][..], &["--no-default-features", "--example", "instrumented"]] {
        let mut example = cargo(&["run", "-p", "lens-fallbacks"]);
        example.args(mode);
        example.envs([
            ("EXAMPLE_OTEL_ENABLED", "1"),
            ("EXAMPLE_OTEL_SPAN_GROUPS", "all"),
            ("EXAMPLE_OTEL_EXPORTER", "file"),
            ("EXAMPLE_OTEL_FILE_DIR", "target/example-telemetry"),
        ]);
        run_cmd(example)?;
    }
    run_cmd(cargo(MAIN_COMMAND))?;
    let mut doc = workspace(&["doc", "--all-features", "--no-deps"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    run_cmd(doc)?;
    say("xtask ci: all checks passed");
    Ok(())
}
