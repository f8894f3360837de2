//! Running the criterion benches and reading their results.
//!
//! Each suite (one `cargo bench` invocation) writes to its own
//! `target/criterion/xtask-<suite>` (`CRITERION_HOME`), and its medians are
//! read from `<group>/<id>/new/estimates.json` after every round, so a pair
//! of ids measured in the same round can be compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::{cargo, run_cmd, workspace_root};

/// Short but stable settings: the whole `cargo xtask bench` fits in 15 minutes
/// on 2 cores.
const CRITERION_ARGS: &[&str] = &["--warm-up-time", "1", "--measurement-time", "3", "--noplot"];

/// One `cargo bench` invocation and the criterion group it fills.
pub(crate) struct Suite {
    pub(crate) name: &'static str,
    pub(crate) cargo_args: &'static [&'static str],
    pub(crate) group: &'static str,
    pub(crate) ids: &'static [&'static str],
}

/// The suites whose pairs the budgets compare.
pub(crate) const SUITES: &[Suite] = &[
    Suite {
        name: "span",
        cargo_args: &["-p", "lens-fallbacks", "--features", "testing", "--bench", "span"],
        group: "span",
        ids: &[
            "baseline_empty_closure",
            "gate_disabled",
            "managed_span_disabled",
            "managed_span_enabled",
            "raw_sdk_span",
            "managed_span_enabled_5_attrs",
            "raw_sdk_span_5_attrs",
        ],
    },
    Suite {
        name: "facade-otel",
        cargo_args: &["-p", "lens-fallbacks", "--bench", "facade"],
        group: "facade",
        ids: &["baseline_empty_closure", "managed_span_disabled_5_attrs"],
    },
    Suite {
        name: "facade-noop",
        cargo_args: &["-p", "lens-fallbacks", "--no-default-features", "--bench", "facade"],
        group: "facade",
        ids: &["baseline_empty_closure", "managed_span_disabled", "in_managed_span_disabled"],
    },
    Suite {
        name: "metric_records",
        cargo_args: &["-p", "megatron-telemetry", "--features", "testing", "--bench", "metric_records"],
        group: "metric_records",
        ids: &["lens_gauge", "raw_gauge", "lens_histogram", "raw_histogram", "lens_counter", "raw_counter"],
    },
    Suite {
        name: "tracing",
        cargo_args: &["-p", "lens-tracing", "--features", "testing", "--bench", "bridge"],
        group: "tracing",
        ids: &[
            "bridge_span",
            "tracing_opentelemetry_lean",
            "tracing_opentelemetry_default",
            "registry_noop_layer",
            "bridge_disabled_callsite",
            "no_subscriber_callsite",
        ],
    },
    Suite {
        name: "fastrace",
        cargo_args: &["-p", "fastrace-compare", "--features", "testing", "--bench", "compare"],
        group: "fastrace",
        ids: &["lens_span", "fastrace_local_span", "lens_span_5_attrs", "fastrace_local_span_5_props"],
    },
    Suite {
        name: "training_metrics",
        cargo_args: &["-p", "megatron-telemetry", "--features", "testing", "--bench", "training_metrics"],
        group: "training_metrics",
        ids: &["record_all_eight", "raw_sdk_eight"],
    },
];

/// The medians of every round, by `suite/id`, in nanoseconds.
#[derive(Debug, Default)]
pub(crate) struct Medians {
    by_id: BTreeMap<String, Vec<f64>>,
}

impl Medians {
    /// The medians of `suite/id`, one per round.
    pub(crate) fn rounds(&self, suite: &str, id: &str) -> &[f64] {
        self.by_id.get(&format!("{suite}/{id}")).map(Vec::as_slice).unwrap_or(&[])
    }
}

fn home(suite: &Suite) -> PathBuf {
    workspace_root().join("target").join("criterion").join(format!("xtask-{}", suite.name))
}

fn bench_cmd(suite: &Suite, extra: &[&str]) -> std::process::Command {
    let mut args = vec!["bench"];
    args.extend_from_slice(suite.cargo_args);
    args.extend_from_slice(extra);
    let mut cmd = cargo(&args);
    // Criterion's own output goes to standard error: standard output is the table.
    cmd.env("CRITERION_HOME", home(suite)).stdout(std::io::stderr());
    cmd
}

/// Builds every suite's bench binary (so that no round waits on a compile).
pub(crate) fn build(suites: &[&Suite]) -> Result<()> {
    for suite in suites {
        run_cmd(bench_cmd(suite, &["--no-run"]))?;
    }
    Ok(())
}

/// Runs `rounds` rounds of every suite, alternating suites within a round,
/// and collects each id's median per round.
pub(crate) fn run(suites: &[&Suite], rounds: usize) -> Result<Medians> {
    let mut medians = Medians::default();
    for round in 0..rounds {
        for suite in suites {
            crate::say(&format!("xtask bench: round {}/{rounds}, suite {}", round + 1, suite.name));
            let mut extra = vec!["--"];
            extra.extend_from_slice(CRITERION_ARGS);
            run_cmd(bench_cmd(suite, &extra))?;
            for id in suite.ids {
                let median = read_median(&home(suite), suite.group, id)?;
                medians.by_id.entry(format!("{}/{id}", suite.name)).or_default().push(median);
            }
        }
    }
    Ok(medians)
}

/// The median point estimate (ns) of `group/id` in criterion's output.
fn read_median(home: &Path, group: &str, id: &str) -> Result<f64> {
    let path = home.join(group).join(id).join("new").join("estimates.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("no criterion result at {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    json["median"]["point_estimate"].as_f64().with_context(|| format!("no median.point_estimate in {}", path.display()))
}
