//! `cargo xtask tidy`: the invariants of `docs/architecture.md`, checked
//! from `cargo tree` so that a change that breaks one fails CI.

use anyhow::{Result, bail};

use crate::{cargo, output, say};

/// Crates that must never be built when `otel` is off (SPEC A11).
const FORBIDDEN_WITHOUT_OTEL: &[&str] = &["opentelemetry", "tonic", "prost", "reqwest", "hyper", "tokio"];

/// The library crates whose `otel`-off build must stay free of them.
const LIBRARY_CRATES: &[&str] = &["lens-core", "lens-fallbacks", "megatron-telemetry"];

/// Which workspace crates each crate may depend on (dependencies flow one
/// way: sim → megatron-telemetry → lens-fallbacks → lens-core, lens-instruments).
const ALLOWED_INTERNAL: &[(&str, &[&str])] = &[
    ("lens-core", &[]),
    ("lens-instruments", &[]),
    ("lens-macros", &[]),
    ("lens-fallbacks", &["lens-core", "lens-instruments", "lens-macros"]),
    ("megatron-telemetry", &["lens-fallbacks", "lens-core", "lens-instruments", "lens-macros"]),
    ("megatron-train-sim", &["megatron-telemetry", "lens-fallbacks", "lens-core", "lens-instruments", "lens-macros"]),
];

pub(crate) fn run() -> Result<()> {
    no_otel_without_feature()?;
    dependency_direction()?;
    say("xtask tidy: ok");
    Ok(())
}

/// Names of the crates in `cargo tree` output (one `name vX` per line).
fn tree_crates(args: &[&str]) -> Result<Vec<String>> {
    let mut full = vec!["tree", "--prefix", "none", "--format", "{p}"];
    full.extend_from_slice(args);
    let text = output(cargo(&full))?;
    Ok(text.lines().filter_map(|line| line.split_whitespace().next()).map(str::to_string).collect())
}

fn no_otel_without_feature() -> Result<()> {
    let mut problems = Vec::new();
    for krate in LIBRARY_CRATES {
        let crates = tree_crates(&["-p", krate, "--no-default-features", "-e", "normal,build"])?;
        for name in &crates {
            if FORBIDDEN_WITHOUT_OTEL.iter().any(|bad| name == bad || name.starts_with(&format!("{bad}-")))
                || name.starts_with("opentelemetry")
            {
                problems.push(format!("{krate} (otel off) depends on {name}"));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "architecture invariant broken: with `otel` off no OpenTelemetry crate is built\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

fn dependency_direction() -> Result<()> {
    let mut problems = Vec::new();
    let members: Vec<&str> = ALLOWED_INTERNAL.iter().map(|(name, _)| *name).collect();
    for (krate, allowed) in ALLOWED_INTERNAL {
        if !crate::workspace_root().join(krate).join("Cargo.toml").exists() {
            continue;
        }
        let crates = tree_crates(&["-p", krate, "--all-features", "-e", "normal,build", "--depth", "1"])?;
        for name in crates.iter().skip(1) {
            if members.contains(&name.as_str()) && !allowed.contains(&name.as_str()) {
                problems.push(format!("{krate} must not depend on {name}"));
            }
        }
    }
    if !problems.is_empty() {
        bail!("architecture invariant broken: dependencies flow one way\n  {}", problems.join("\n  "));
    }
    Ok(())
}
