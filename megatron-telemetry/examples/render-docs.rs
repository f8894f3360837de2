//! Prints one generated docs fragment on standard output, for
//! `cargo xtask codegen` (which must not depend on workspace crates, so it
//! runs this example instead).
//!
//! Usage: `cargo run -p megatron-telemetry --example render-docs -- <fragment>`,
//! where `<fragment>` is `taxonomy` (the whole of `docs/span-taxonomy.md`),
//! `metrics` and `goodput` (the tables of `docs/metrics-megatron.md`) or `groups` (the
//! reference part of `docs/span-groups.md`).

use std::io::Write as _;
use std::process::ExitCode;

use megatron_telemetry::markdown;

fn main() -> ExitCode {
    let fragment = std::env::args().nth(1).unwrap_or_default();
    let text = match fragment.as_str() {
        "taxonomy" => markdown::span_taxonomy(),
        "metrics" => markdown::training_metrics(),
        "goodput" => markdown::goodput_metrics(),
        "rank-metrics" => markdown::rank_metrics(),
        "groups" => markdown::groups_reference(),
        other => {
            let _ = writeln!(
                std::io::stderr(),
                "render-docs: unknown fragment '{other}'; expected taxonomy, metrics, goodput, rank-metrics or groups"
            );
            return ExitCode::FAILURE;
        }
    };
    match std::io::stdout().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
