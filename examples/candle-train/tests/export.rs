//! The example trained as a user runs it, twice: a first run that stalls in
//! one iteration (longer than the hang watchdog's timeout) and stops after
//! iteration 10, then a run that resumes from its checkpoint to the end. One
//! shared pair of runs for every assertion; the expected values come from
//! the schedule below, not from the export.
//!
//! With the example's `otel` feature the export (files, in a temporary
//! directory) is read twice: directly (OTLP/JSON lines: span parentage,
//! metric points) and through the viewer command (`analyze`, `trace-view`).
//! Without it, the same two runs train the same schedule and write nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_lens-example-candle");
/// The command that analyzes and views a file export, found next to the
/// example's binary (same target directory and profile; CI builds it first).
const VIEWER: &str = "megatron-train-sim";

/// The schedule of the two runs.
const ITERATIONS: u64 = 12;
const STOP_AFTER: u64 = 10;
const CHECKPOINT_EVERY: u64 = 4;
const EVAL_EVERY: u64 = 4;
const STALL_AT_ITERATION: u64 = 3;
const STALL_S: f64 = 2.5;
/// The watchdog's timeout: the stall is longer.
const HANG_TIMEOUT_S: f64 = 1.0;
/// The `with_tracing` spans one forward pass enters (embedding, three linear).
const LAYER_SPANS_PER_FORWARD: usize = 4;

/// The example's span names.
const ITERATION_SPAN: &str = "candle_example.iteration";
const FORWARD_SPAN: &str = "candle_example.forward";
const BACKWARD_SPAN: &str = "candle_example.backward";
const OPTIMIZER_SPAN: &str = "candle_example.optimizer";
const EVAL_SPAN: &str = "candle_example.eval";
const CHECKPOINT_SPAN: &str = "candle_example.checkpoint";
/// candle's layer spans.
const CANDLE_SPANS: [&str; 2] = ["embedding", "linear"];

/// Iterations each run trains.
fn first_run() -> std::ops::RangeInclusive<u64> {
    1..=STOP_AFTER
}
/// The newest durable checkpoint at the stop: the resume point.
fn resume_point() -> u64 {
    STOP_AFTER / CHECKPOINT_EVERY * CHECKPOINT_EVERY
}
fn second_run() -> std::ops::RangeInclusive<u64> {
    resume_point() + 1..=ITERATIONS
}
/// Iterations trained in all: the lost ones (after the resume point, before
/// the stop) twice.
fn trained() -> usize {
    first_run().count() + second_run().count()
}
fn evaluations() -> usize {
    let evaluates = |i: &u64| i % EVAL_EVERY == 0 || *i == ITERATIONS;
    first_run().filter(evaluates).count() + second_run().filter(evaluates).count()
}
fn checkpoints() -> usize {
    let saves = |i: &u64| i % CHECKPOINT_EVERY == 0 || *i == ITERATIONS;
    first_run().filter(saves).count() + second_run().filter(saves).count()
}

/// The two runs and where they wrote.
struct Runs {
    export: PathBuf,
    first: Output,
    second: Output,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("lens-example-candle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let export = root.join("telemetry");
        let checkpoints = root.join("checkpoints");
        let run = |extra: &[String]| {
            let mut command = Command::new(EXAMPLE);
            for (name, _) in std::env::vars() {
                if name.starts_with("CANDLE_OTEL_") || name.starts_with("NEMO_LENS_") || name.starts_with("OTEL_") {
                    command.env_remove(name);
                }
            }
            command
                .envs([
                    ("CANDLE_OTEL_ENABLED", "1"),
                    ("CANDLE_OTEL_EXPORTER", "file"),
                    ("CANDLE_OTEL_SPAN_GROUPS", "all"),
                    ("CANDLE_OTEL_TRACING_GROUPS", "candle_transformers=forward_backward:per_entry"),
                    ("CANDLE_OTEL_RUN_ID", "candle-ci"),
                    ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
                ])
                .env("CANDLE_OTEL_FILE_DIR", &export)
                .env("CANDLE_OTEL_HANG_TIMEOUT_S", HANG_TIMEOUT_S.to_string())
                .arg("--checkpoint-dir")
                .arg(&checkpoints)
                .args(["--iterations", &ITERATIONS.to_string()])
                .args(["--eval-every", &EVAL_EVERY.to_string()])
                .args(["--checkpoint-every", &CHECKPOINT_EVERY.to_string()])
                .args(extra);
            let output = command.output().expect("the example runs");
            assert!(
                output.status.success(),
                "the example failed: {}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            output
        };
        let first = run(&[
            "--stop-after".into(),
            STOP_AFTER.to_string(),
            "--stall-at-iteration".into(),
            STALL_AT_ITERATION.to_string(),
            "--stall-s".into(),
            STALL_S.to_string(),
        ]);
        let second = run(&[]);
        Runs { export, first, second }
    })
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_first_run_stops_and_the_second_resumes_from_the_checkpoint() {
    let runs = runs();
    let first = stdout(&runs.first);
    let second = stdout(&runs.second);
    assert!(first.contains(&format!("stopped after iteration {STOP_AFTER} (resumed after 0)")), "{first}");
    assert!(first.contains(&format!("checkpoint at iteration {}", resume_point())), "{first}");
    assert!(
        second.contains(&format!("finished after iteration {ITERATIONS} (resumed after {})", resume_point())),
        "{second}"
    );
    assert!(second.contains(&format!("checkpoint at iteration {ITERATIONS}")), "{second}");
}

#[cfg(not(feature = "otel"))]
#[test]
fn without_otel_the_same_schedule_records_nothing_and_says_why() {
    let runs = runs();
    for output in [&runs.first, &runs.second] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("built without the `otel` feature"), "{stderr}");
        assert!(!stdout(output).contains("telemetry:"));
    }
    assert!(!runs.export.exists(), "{} was written with telemetry compiled out", runs.export.display());
}

/// One span of the export.
#[cfg(feature = "otel")]
#[derive(Debug)]
struct Span {
    name: String,
    id: String,
    parent: String,
}

/// Every span of the traces files of `dir`.
#[cfg(feature = "otel")]
fn spans(dir: &Path) -> Vec<Span> {
    let mut spans = Vec::new();
    for line in lines(dir, "traces-rank") {
        for resource in array(&line, "resourceSpans") {
            for scope in array(resource, "scopeSpans") {
                for span in array(scope, "spans") {
                    let text = |key: &str| span.get(key).and_then(|v| v.as_str()).unwrap_or("").to_string();
                    spans.push(Span { name: text("name"), id: text("spanId"), parent: text("parentSpanId") });
                }
            }
        }
    }
    spans
}

/// The points of metric `name` in the metrics files of `dir`, in file order.
#[cfg(feature = "otel")]
fn points(dir: &Path, name: &str) -> Vec<f64> {
    let mut values = Vec::new();
    for line in lines(dir, "metrics-rank") {
        for resource in array(&line, "resourceMetrics") {
            for scope in array(resource, "scopeMetrics") {
                for metric in array(scope, "metrics").iter().filter(|m| m["name"] == name) {
                    let data = metric.get("gauge").or_else(|| metric.get("sum")).expect("a gauge or a sum");
                    for point in array(data, "dataPoints") {
                        let value = point.get("asDouble").and_then(|v| v.as_f64()).or_else(|| {
                            point.get("asInt").and_then(|v| v.as_str()?.parse::<f64>().ok().or(v.as_f64()))
                        });
                        values.push(value.expect("a point with a value"));
                    }
                }
            }
        }
    }
    values
}

#[cfg(feature = "otel")]
fn lines(dir: &Path, prefix: &str) -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no {prefix}*.jsonl in {}", dir.display());
    files
        .iter()
        .flat_map(|file| std::fs::read_to_string(file).unwrap().lines().map(str::to_string).collect::<Vec<_>>())
        .map(|line| serde_json::from_str(&line).expect("one OTLP/JSON request a line"))
        .collect()
}

#[cfg(feature = "otel")]
fn array<'a>(value: &'a serde_json::Value, key: &str) -> &'a [serde_json::Value] {
    value.get(key).and_then(|v| v.as_array()).map_or(&[], Vec::as_slice)
}

#[cfg(feature = "otel")]
fn count(spans: &[Span], name: &str) -> usize {
    spans.iter().filter(|span| span.name == name).count()
}

#[cfg(feature = "otel")]
#[test]
fn every_trained_iteration_has_its_iteration_forward_backward_and_optimizer_spans() {
    let spans = spans(&runs().export);
    for name in [ITERATION_SPAN, FORWARD_SPAN, BACKWARD_SPAN, OPTIMIZER_SPAN] {
        assert_eq!(count(&spans, name), trained(), "{name}");
    }
    assert_eq!(count(&spans, EVAL_SPAN), evaluations());
    assert_eq!(count(&spans, CHECKPOINT_SPAN), checkpoints());
}

#[cfg(feature = "otel")]
#[test]
fn candle_s_layer_spans_sit_under_forward_one_per_layer_and_pass() {
    let spans = spans(&runs().export);
    let names: BTreeMap<&str, &str> = spans.iter().map(|span| (span.id.as_str(), span.name.as_str())).collect();
    let under = |parent_name: &str| {
        spans
            .iter()
            .filter(|span| CANDLE_SPANS.contains(&span.name.as_str()))
            .filter(|span| names.get(span.parent.as_str()) == Some(&parent_name))
            .count()
    };
    assert_eq!(under(FORWARD_SPAN), LAYER_SPANS_PER_FORWARD * trained());
    assert_eq!(under(EVAL_SPAN), LAYER_SPANS_PER_FORWARD * evaluations());
    let candle = spans.iter().filter(|span| CANDLE_SPANS.contains(&span.name.as_str())).count();
    assert_eq!(candle, LAYER_SPANS_PER_FORWARD * (trained() + evaluations()), "no candle span elsewhere");
}

/// Runs the viewer command on the export.
#[cfg(feature = "otel")]
fn viewer(subcommand: &str, dir: &Path) -> String {
    let binary = Path::new(EXAMPLE).with_file_name(VIEWER);
    assert!(binary.exists(), "{} is not built: run `cargo build -p {VIEWER}` first", binary.display());
    let output = Command::new(&binary).arg(subcommand).arg(dir).output().expect("the viewer runs");
    let text = format!("{}{}", stdout(&output), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{VIEWER} {subcommand} {} failed:\n{text}", dir.display());
    text
}

#[cfg(feature = "otel")]
#[test]
fn trace_view_counts_the_spans_of_the_schedule() {
    let table = viewer("trace-view", &runs().export);
    let count_of = |name: &str| -> usize {
        let line = table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name} in\n{table}"));
        line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
    };
    assert_eq!(count_of(FORWARD_SPAN), trained());
    assert_eq!(count_of("linear"), (LAYER_SPANS_PER_FORWARD - 1) * (trained() + evaluations()));
    assert_eq!(count_of("embedding"), trained() + evaluations());
}

#[cfg(feature = "otel")]
#[test]
fn analyze_gives_no_megatron_advice() {
    let report = viewer("analyze", &runs().export);
    assert!(!report.contains("MEGATRON"), "{report}");
    assert!(!report.to_lowercase().contains("megatron"), "{report}");
}
