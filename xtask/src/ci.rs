//! `cargo xtask ci`: what CI runs, in the order that fails fastest.
//!
//! Feature sets: everything on (`--all-features`: the `otel` runtime and the
//! `testing` exporters), and `otel` off for every crate that has the
//! feature, each crate built alone so that no other member turns it back on.

use anyhow::Result;

use crate::{cargo, codegen, run_cmd, say, tidy};

/// The crates with an `otel` feature, tested with it off.
pub(crate) const OTEL_OFF_CRATES: &[&str] =
    &["lens-core", "lens-fallbacks", "megatron-telemetry", "megatron-train-sim"];

pub(crate) fn run() -> Result<()> {
    run_cmd(cargo(&["fmt", "--all", "--check"]))?;
    tidy::run()?;
    codegen::run(true)?;
    run_cmd(cargo(&["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"]))?;
    for krate in OTEL_OFF_CRATES {
        run_cmd(cargo(&["clippy", "-p", krate, "--all-targets", "--no-default-features", "--", "-D", "warnings"]))?;
    }
    run_cmd(cargo(&["test", "--workspace", "--all-features"]))?;
    for krate in OTEL_OFF_CRATES {
        run_cmd(cargo(&["test", "-p", krate, "--no-default-features"]))?;
    }
    let mut doc = cargo(&["doc", "--workspace", "--all-features", "--no-deps"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    run_cmd(doc)?;
    say("xtask ci: all checks passed");
    Ok(())
}
