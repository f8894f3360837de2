//! The example trained as a user runs it, twice: a first run that stalls in
//! one iteration (longer than the hang watchdog's timeout) and stops after
//! iteration 10 (a preemption), then a run that resumes from its checkpoint
//! to the end. One shared pair of runs for every assertion; the expected
//! values come from the schedule and the model's size below, not from the
//! export.
//!
//! With the example's `otel` feature each run exports to files in a
//! directory of its own under one parent (`telemetry/attempt-1`,
//! `telemetry/attempt-2`, as `lens analyze` reads a stopped and a resumed
//! attempt), read directly (OTLP/JSON lines: span parentage, metric
//! points), the goodput progress record through lens-training, and the
//! viewer command (`analyze`, `trace-view`) runs on it. Without the feature
//! the same two runs train the same schedule and write no telemetry.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use lens_training::goodput::ProgressRecord;

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_lens-example-candle");
/// The command that analyzes and views a file export (`lens analyze DIR`,
/// `lens trace-view DIR`), found next to the example's binary (same target
/// directory and profile; CI's workspace test builds it: crate lens-command).
#[cfg(feature = "otel")]
const VIEWER: &str = "lens";
/// The export directory of each run, under the export's parent.
const ATTEMPTS: [&str; 2] = ["attempt-1", "attempt-2"];

/// The schedule of the two runs.
const ITERATIONS: u64 = 12;
const STOP_AFTER: u64 = 10;
const CHECKPOINT_EVERY: u64 = 4;
const EVAL_EVERY: u64 = 4;
const STALL_AT_ITERATION: u64 = 3;
const STALL_S: f64 = 2.5;
/// Every data phase lasts this long, so that the watchdog (which looks a
/// quarter of its timeout apart) sees the iterations after the stall.
const DATA_MS: u64 = 60;
/// The watchdog's timeout: the stall is longer.
const HANG_TIMEOUT_S: f64 = 1.0;
/// The peak MFU divides by (1 GFLOP/s: this tiny model's MFU is then a
/// readable fraction on one CPU core).
const PEAK_TFLOPS: f64 = 0.001;

/// The newest durable checkpoint at the stop: where the second run resumes.
fn resume_point() -> u64 {
    STOP_AFTER / CHECKPOINT_EVERY * CHECKPOINT_EVERY
}

/// The two runs and what they left.
struct Runs {
    export: PathBuf,
    first: Output,
    second: Output,
    /// The goodput progress record after each run (with telemetry).
    records: [Option<ProgressRecord>; 2],
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        // Under the target directory, replaced by each run of this test.
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("candle-export");
        let _ = std::fs::remove_dir_all(&root);
        let export = root.join("telemetry");
        let checkpoints = root.join("checkpoints");
        let run = |attempt: &str, extra: &[String]| {
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
                    ("CANDLE_OTEL_RANK_METRICS", "1"),
                    ("CANDLE_OTEL_RUN_ID", "candle-ci"),
                    ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
                ])
                .env("CANDLE_OTEL_FILE_DIR", export.join(attempt))
                .env("CANDLE_OTEL_HANG_TIMEOUT_S", HANG_TIMEOUT_S.to_string())
                .env("CANDLE_OTEL_PEAK_TFLOPS", PEAK_TFLOPS.to_string())
                .arg("--checkpoint-dir")
                .arg(&checkpoints)
                .args(["--iterations", &ITERATIONS.to_string()])
                .args(["--eval-every", &EVAL_EVERY.to_string()])
                .args(["--checkpoint-every", &CHECKPOINT_EVERY.to_string()])
                .args(["--data-ms", &DATA_MS.to_string()])
                .args(extra);
            let output = command.output().expect("the example runs");
            assert!(
                output.status.success(),
                "the example failed: {}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            let record = ProgressRecord::read(&checkpoints).expect("a readable progress record, if any");
            (output, record)
        };
        let (first, first_record) = run(
            ATTEMPTS[0],
            &[
                "--stop-after".into(),
                STOP_AFTER.to_string(),
                "--stall-at-iteration".into(),
                STALL_AT_ITERATION.to_string(),
                "--stall-s".into(),
                STALL_S.to_string(),
            ],
        );
        let (second, second_record) = run(ATTEMPTS[1], &[]);
        Runs { export, first, second, records: [first_record, second_record] }
    })
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The `.lens` spool files directly in `dir`.
#[cfg(feature = "otel")]
fn spools_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".lens"))
        .collect()
}

#[cfg(feature = "otel")]
#[test]
fn the_crash_spool_is_kept_beside_the_checkpoints_where_the_next_attempt_looks() {
    let runs = runs();
    let root = runs.export.parent().expect("the export's parent");
    // Each clean shutdown leaves its spool with only its progress record;
    // the second attempt took the first's, so one is left: the second's.
    let beside = spools_in(&root.join("checkpoints").join("lens-spool"));
    assert_eq!(beside.len(), 1, "one spool beside the checkpoints: {beside:?}");
    assert!(beside[0].starts_with("spool-rank0-"), "{beside:?}");
    for attempt in ATTEMPTS {
        let under_export = runs.export.join(attempt).join("lens-spool");
        assert!(!under_export.exists(), "no spool under the attempt's own export directory {}", under_export.display());
    }
}

#[test]
fn the_first_run_stops_and_the_second_resumes_from_its_checkpoint() {
    let runs = runs();
    let first = stdout(&runs.first);
    let second = stdout(&runs.second);
    assert!(first.contains(&format!("stopped after iteration {STOP_AFTER} (resumed after 0)")), "{first}");
    assert!(first.contains(&format!("checkpoint at iteration {}", resume_point())), "{first}");
    let resumed = format!("finished after iteration {ITERATIONS} (resumed after {})", resume_point());
    assert!(second.contains(&resumed), "{second}");
    assert!(second.contains(&format!("checkpoint at iteration {ITERATIONS}")), "{second}");
}

#[cfg(not(feature = "otel"))]
#[test]
fn without_otel_the_same_schedule_records_nothing_and_says_why() {
    let runs = runs();
    for output in [&runs.first, &runs.second] {
        let stderr = stderr(output);
        assert!(
            stderr.contains("CANDLE_OTEL_ENABLED enables telemetry, but this program was built without"),
            "{stderr}"
        );
        assert!(!stderr.contains("no iteration completed"), "no watchdog without otel: {stderr}");
        assert!(!stdout(output).contains("telemetry:"));
    }
    assert!(!runs.export.exists(), "{} was written with telemetry compiled out", runs.export.display());
    assert_eq!(runs.records, [None, None], "no progress record with telemetry compiled out");
}

#[cfg(feature = "otel")]
mod export {
    use std::collections::BTreeMap;

    use lens_training::names::{self, spans as span_names};

    use super::*;

    /// The model (examples/candle-train/src/model.rs): vocabulary, widths and
    /// batch, hence its parameters and the FLOP count it reports for MFU,
    /// 6 × parameters × tokens per iteration.
    const VOCAB: u64 = 32;
    const EMBED: u64 = 16;
    const HIDDEN: u64 = 32;
    const BATCH: u64 = 16;
    const PARAMETERS: u64 =
        VOCAB * EMBED + (EMBED * HIDDEN + HIDDEN) + (HIDDEN * HIDDEN + HIDDEN) + (HIDDEN * VOCAB + VOCAB);
    const FLOPS_PER_ITERATION: f64 = 6.0 * PARAMETERS as f64 * BATCH as f64;
    /// The `with_tracing` spans one forward pass enters: the embedding and three
    /// linear layers.
    const LAYER_SPANS_PER_FORWARD: usize = 4;
    /// candle's layer span names.
    const CANDLE_SPANS: [&str; 2] = ["embedding", "linear"];

    /// Iterations the first run trains.
    fn first_run() -> std::ops::RangeInclusive<u64> {
        1..=STOP_AFTER
    }
    /// Iterations the second run trains.
    fn second_run() -> std::ops::RangeInclusive<u64> {
        resume_point() + 1..=ITERATIONS
    }
    /// Iterations trained in all: the lost ones (after the resume point, up to
    /// the stop) twice.
    fn trained() -> usize {
        first_run().count() + second_run().count()
    }
    fn lost() -> u64 {
        STOP_AFTER - resume_point()
    }
    fn evaluations() -> usize {
        let evaluates = |i: &u64| i.is_multiple_of(EVAL_EVERY) || *i == ITERATIONS;
        first_run().filter(evaluates).count() + second_run().filter(evaluates).count()
    }
    fn checkpoints() -> usize {
        let saves = |i: &u64| i.is_multiple_of(CHECKPOINT_EVERY) || *i == ITERATIONS;
        first_run().filter(saves).count() + second_run().filter(saves).count()
    }

    /// The attribute lens puts on the copies of spans still open when the
    /// watchdog fires (the flight recorder); not the spans of the schedule.
    const OPEN_SPAN_COPY: &str = "nemo.span.open";

    /// One span of the export.
    #[derive(Debug)]
    struct Span {
        name: String,
        id: String,
        parent: String,
        start: u64,
        end: u64,
        attributes: Vec<String>,
    }

    /// Every span of the traces files of `dir`, flight-recorder copies
    /// left out.
    fn spans(dir: &Path) -> Vec<Span> {
        let mut spans = Vec::new();
        for line in lines(dir, &ATTEMPTS, "traces-rank") {
            for resource in array(&line, "resourceSpans") {
                for scope in array(resource, "scopeSpans") {
                    for span in array(scope, "spans") {
                        let text = |key: &str| span.get(key).and_then(|v| v.as_str()).unwrap_or("").to_string();
                        let time = |key: &str| text(key).parse::<u64>().expect("a time in nanoseconds");
                        let attributes: Vec<String> = array(span, "attributes")
                            .iter()
                            .filter_map(|kv| Some(kv.get("key")?.as_str()?.to_string()))
                            .collect();
                        spans.push(Span {
                            name: text("name"),
                            id: text("spanId"),
                            parent: text("parentSpanId"),
                            start: time("startTimeUnixNano"),
                            end: time("endTimeUnixNano"),
                            attributes,
                        });
                    }
                }
            }
        }
        spans.retain(|span| !span.attributes.iter().any(|key| key == OPEN_SPAN_COPY));
        spans
    }

    /// The points of metric `name` in the metrics files of `attempts` under
    /// `dir` whose attributes include `with` (key, string value), in file
    /// order.
    fn points(dir: &Path, attempts: &[&str], name: &str, with: Option<(&str, &str)>) -> Vec<f64> {
        let mut values = Vec::new();
        for line in lines(dir, attempts, "metrics-rank") {
            for resource in array(&line, "resourceMetrics") {
                for scope in array(resource, "scopeMetrics") {
                    for metric in array(scope, "metrics").iter().filter(|m| m["name"] == name) {
                        let data = metric.get("gauge").or_else(|| metric.get("sum")).expect("a gauge or a sum");
                        for point in array(data, "dataPoints") {
                            let matches = with.is_none_or(|(key, value)| {
                                array(point, "attributes")
                                    .iter()
                                    .any(|kv| kv["key"] == key && kv["value"]["stringValue"] == value)
                            });
                            if !matches {
                                continue;
                            }
                            let value = point.get("asDouble").and_then(|v| v.as_f64()).or_else(|| {
                                let int = point.get("asInt")?;
                                int.as_str().and_then(|s| s.parse::<f64>().ok()).or(int.as_f64())
                            });
                            values.push(value.expect("a point with a value"));
                        }
                    }
                }
            }
        }
        values
    }

    /// The OTLP/JSON requests of the files named `prefix*` of `attempts`
    /// under `export`, in that order.
    fn lines(export: &Path, attempts: &[&str], prefix: &str) -> Vec<serde_json::Value> {
        let mut files = Vec::new();
        for attempt in attempts {
            let dir = export.join(attempt);
            let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)))
                .collect();
            assert!(!found.is_empty(), "no {prefix}*.jsonl in {}", dir.display());
            found.sort();
            files.extend(found);
        }
        files
            .iter()
            .flat_map(|file| std::fs::read_to_string(file).unwrap().lines().map(str::to_string).collect::<Vec<_>>())
            .map(|line| serde_json::from_str(&line).expect("one OTLP/JSON request a line"))
            .collect()
    }

    fn array<'a>(value: &'a serde_json::Value, key: &str) -> &'a [serde_json::Value] {
        value.get(key).and_then(|v| v.as_array()).map_or(&[], Vec::as_slice)
    }

    fn count(spans: &[Span], name: &str) -> usize {
        spans.iter().filter(|span| span.name == name).count()
    }

    #[test]
    fn every_trained_iteration_has_its_iteration_forward_backward_and_optimizer_spans() {
        let spans = spans(&runs().export);
        for name in [span_names::ITERATION, span_names::FORWARD, span_names::BACKWARD, span_names::OPTIMIZER] {
            assert_eq!(count(&spans, name), trained(), "{name}");
        }
        assert_eq!(count(&spans, span_names::EVALUATION), evaluations());
        assert_eq!(count(&spans, span_names::CHECKPOINT_SAVE), checkpoints());
        assert_eq!(count(&spans, span_names::CHECKPOINT_LOAD), 1, "the second run loads");
        assert_eq!(count(&spans, span_names::STARTUP), 2, "one startup per attempt");
        assert_eq!(count(&spans, span_names::SHUTDOWN), 1, "only the second run ends normally");
    }

    #[test]
    fn candle_s_layer_spans_sit_under_forward_one_per_layer_and_pass() {
        let spans = spans(&runs().export);
        let names: BTreeMap<&str, &str> = spans.iter().map(|span| (span.id.as_str(), span.name.as_str())).collect();
        let candle = || spans.iter().filter(|span| CANDLE_SPANS.contains(&span.name.as_str()));
        let under = |parent: &str| candle().filter(|span| names.get(span.parent.as_str()) == Some(&parent)).count();
        assert_eq!(under(span_names::FORWARD), LAYER_SPANS_PER_FORWARD * trained());
        assert_eq!(under(span_names::EVALUATION), LAYER_SPANS_PER_FORWARD * evaluations());
        assert_eq!(candle().count(), LAYER_SPANS_PER_FORWARD * (trained() + evaluations()), "none elsewhere");
        // The rule matched candle's callsites: no "matched nothing" warning.
        for output in [&runs().first, &runs().second] {
            assert!(!stderr(output).contains("matched nothing"), "{}", stderr(output));
        }
    }

    #[test]
    fn goodput_keeps_the_checkpointed_iterations_and_counts_the_rest_as_lost() {
        let [first, second] = &runs().records;
        let first = first.as_ref().expect("the stopped run wrote its progress record");
        assert_eq!(first.checkpoint_iteration, Some(resume_point()));
        assert_eq!(first.totals.productive_iterations, resume_point());
        assert_eq!(first.totals.pending_iterations, lost());
        assert_eq!(first.totals.lost_iterations, 0);
        let second = second.as_ref().expect("the resumed run wrote its progress record");
        assert_eq!(second.run_id, "candle-ci");
        assert_eq!(second.totals.attempts, 2);
        assert_eq!(second.totals.productive_iterations, ITERATIONS, "kept");
        assert_eq!(second.totals.lost_iterations, lost(), "lost");
        assert_eq!(second.totals.pending_iterations, 0);
        let ratio = points(&runs().export, &ATTEMPTS[1..], names::GOODPUT_RATIO.name, None);
        let last = *ratio.last().expect("dl.goodput.ratio points");
        assert!(last > 0.0 && last < 1.0, "{ratio:?}");
    }

    #[test]
    fn the_watchdog_flags_the_stall_then_clears_it() {
        let runs = runs();
        let said = stderr(&runs.first);
        assert!(said.contains("no iteration completed for"), "{said}");
        assert!(said.contains(&format!("in phase data at iteration {STALL_AT_ITERATION}")), "{said}");
        // The recovery names the stalled iteration, even when a later one
        // completed before the watchdog's next look.
        assert!(
            said.contains(&format!("rank 0: iteration {STALL_AT_ITERATION} completed after ")),
            "the recovery names the stalled iteration: {said}"
        );
        assert!(said.contains("hang suspicion cleared"), "the recovery: {said}");
        // The stopped attempt's gauge: 0 once armed, 1 in the stall, 0 again.
        let hang = points(&runs.export, &ATTEMPTS[..1], names::HANG_SUSPECTED.name, None);
        let raised = hang.iter().position(|v| *v == 1.0).unwrap_or_else(|| panic!("never 1: {hang:?}"));
        assert!(hang[..raised].iter().all(|v| *v == 0.0), "{hang:?}");
        assert!(hang[raised..].contains(&0.0), "back to 0 after the stall: {hang:?}");
        assert_eq!(hang.last(), Some(&0.0), "{hang:?}");
        // The stall is the data phase's, in the per-rank counter.
        let data = points(&runs.export, &ATTEMPTS[..1], names::PHASE_TIME.name, Some((names::PHASE_ATTRIBUTE, "data")));
        let data_s = data.iter().copied().fold(0.0, f64::max);
        assert!(data_s >= STALL_S, "data phase {data_s} s: {data:?}");
        // Each attempt counts the iterations it completed.
        let completed = |attempt| points(&runs.export, &ATTEMPTS[attempt..=attempt], names::ITERATIONS.name, None);
        assert_eq!(completed(0).last(), Some(&(first_run().count() as f64)), "{:?}", completed(0));
        assert_eq!(completed(1).last(), Some(&(second_run().count() as f64)), "{:?}", completed(1));
        assert!(!stderr(&runs.second).contains("no iteration completed"), "no stall in the resumed attempt");
    }

    /// The program's own metrics: the loss as the run printed it, the
    /// evaluation, and the tokens each attempt trained on (the throughput
    /// is their rate).
    #[test]
    fn the_loss_the_evaluation_and_the_tokens_are_time_series() {
        let runs = runs();
        let tokens = |attempt| points(&runs.export, &ATTEMPTS[attempt..=attempt], "candle.train.tokens", None);
        assert_eq!(tokens(0).last(), Some(&((first_run().count() as u64 * BATCH) as f64)), "{:?}", tokens(0));
        assert_eq!(tokens(1).last(), Some(&((second_run().count() as u64 * BATCH) as f64)), "{:?}", tokens(1));
        // The last loss point is the loss the resumed run printed.
        let printed = stdout(&runs.second);
        let loss = points(&runs.export, &ATTEMPTS[1..], "candle.train.loss", None);
        let last = loss.last().expect("candle.train.loss points");
        assert!(printed.contains(&format!("; loss {last:.4}")), "{last} against: {printed}");
        let accuracy = points(&runs.export, &ATTEMPTS[1..], "candle.eval.accuracy", None);
        assert!(accuracy.last().is_some_and(|a| (0.0..=1.0).contains(a)), "{accuracy:?}");
        let eval_loss = points(&runs.export, &ATTEMPTS[1..], "candle.eval.loss", None);
        let last = eval_loss.last().expect("candle.eval.loss points");
        assert!(printed.contains(&format!("eval loss {last:.4}")), "{last} against: {printed}");
    }

    #[test]
    fn mfu_is_the_flop_count_over_the_iteration_time_and_the_peak() {
        let spans = spans(&runs().export);
        let last = spans
            .iter()
            .filter(|span| span.name == span_names::ITERATION)
            .max_by_key(|span| span.end)
            .expect("iteration spans");
        let seconds = (last.end - last.start) as f64 / 1e9;
        let expected = FLOPS_PER_ITERATION / seconds / (PEAK_TFLOPS * 1e12);
        let mfu = points(&runs().export, &ATTEMPTS[1..], names::MFU.name, None);
        let reported = *mfu.last().expect("dl.training.mfu points");
        // Every iteration is a log interval: the last MFU is the last
        // iteration's, timed by lens-training a few microseconds inside its span.
        assert!((reported - expected).abs() <= 0.02 * expected, "reported {reported}, expected {expected}");
    }

    /// Runs the viewer command's `subcommand` on `dir`.
    fn viewer(subcommand: &str, dir: &Path) -> String {
        let binary = Path::new(EXAMPLE).with_file_name(VIEWER);
        assert!(binary.exists(), "{} is not built: run `cargo build -p lens-command` first", binary.display());
        let output = Command::new(&binary).arg(subcommand).arg(dir).output().expect("the viewer runs");
        let text = format!("{}{}", stdout(&output), stderr(&output));
        assert!(output.status.success(), "{VIEWER} {subcommand} {} failed:\n{text}", dir.display());
        text
    }

    #[test]
    fn trace_view_counts_the_spans_of_the_schedule() {
        // `trace-view` reads one attempt's directory: the counts of both add up.
        let tables: Vec<String> = ATTEMPTS.iter().map(|a| viewer("trace-view", &runs().export.join(a))).collect();
        let count_of = |name: &str| -> usize {
            tables
                .iter()
                .map(|table| {
                    let line = table
                        .lines()
                        .find(|line| line.split_whitespace().next() == Some(name))
                        .unwrap_or_else(|| panic!("no line for {name} in\n{table}"));
                    line.split_whitespace()
                        .nth(1)
                        .and_then(|n| n.parse::<usize>().ok())
                        .unwrap_or_else(|| panic!("{line}"))
                })
                .sum()
        };
        assert_eq!(count_of(span_names::FORWARD), trained());
        assert_eq!(count_of(span_names::OPTIMIZER), trained());
        assert_eq!(count_of("linear"), (LAYER_SPANS_PER_FORWARD - 1) * (trained() + evaluations()));
        assert_eq!(count_of("embedding"), trained() + evaluations());
    }

    #[test]
    fn analyze_counts_kept_and_lost_iterations_without_megatron_advice() {
        // The parent directory: one attempt per subdirectory, in time order.
        let report = viewer("analyze", &runs().export);
        let iterations = format!("iterations: {ITERATIONS} kept, 0 pending, {} lost, over 2 attempt(s)", lost());
        assert!(report.contains(&iterations), "{iterations}\n{report}");
        assert!(report.contains(&format!("iterations 1-{STOP_AFTER}, last save at {}", resume_point())), "{report}");
        assert!(!report.to_lowercase().contains("megatron"), "{report}");
    }
}

/// A bad flag is exit 2 naming the flag; a bad telemetry value with
/// telemetry enabled is exit 2 naming the variable where telemetry is
/// compiled in, and a warning (the training runs) where it is not.
#[test]
fn bad_input_is_refused_naming_the_flag_or_the_variable() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("candle-bad-input");
    let _ = std::fs::remove_dir_all(&root);
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(EXAMPLE);
        for (name, _) in std::env::vars() {
            if name.starts_with("CANDLE_OTEL_") || name.starts_with("NEMO_LENS_") || name.starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command.envs(env.iter().copied()).arg("--checkpoint-dir").arg(&root).args(args);
        command.output().expect("the example runs")
    };
    let flag = run(&[], &["--iterations", "many"]);
    assert_eq!(flag.status.code(), Some(2));
    assert!(stderr(&flag).contains("--iterations: `many` is not a whole number, 1 or more"), "{}", stderr(&flag));

    let env = [("CANDLE_OTEL_ENABLED", "1"), ("CANDLE_OTEL_EXPORTER", "file"), ("CANDLE_OTEL_HANG_TIMEOUT_S", "soon")];
    let variable = run(&env, &["--iterations", "1"]);
    assert!(stderr(&variable).contains("CANDLE_OTEL_HANG_TIMEOUT_S"), "{}", stderr(&variable));
    if cfg!(feature = "otel") {
        assert_eq!(variable.status.code(), Some(2), "{}", stderr(&variable));
    } else {
        assert!(variable.status.success(), "{}", stderr(&variable));
        assert!(stdout(&variable).contains("finished after iteration 1"), "{}", stdout(&variable));
    }
}
