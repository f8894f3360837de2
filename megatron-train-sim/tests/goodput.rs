//! Goodput across a crash and a resume, as a job owner sees it (issue #13,
//! "Done means"): a run saving every 10 iterations crashes after iteration
//! 17; the next attempt loads the checkpoint of iteration 10 and finishes the
//! 40 iterations. The second attempt's summary and its exported gauges
//! charge the 7 iterations after the checkpoint as lost progress, keep 40
//! iterations, report a ratio strictly between 0 and 1, and the buckets sum
//! to both attempts' wall time (within the tolerance of docs/goodput.md).
//! A clean run loses nothing, and MFU is exported only when a peak is
//! known (the CPU device has none unless `MEGATRON_OTEL_PEAK_TFLOPS` is set).
//! The viewer (`analyze` on the telemetry directory) computes the same
//! breakdown from the spans of `per_step` groups, within the tolerance of
//! docs/goodput.md, and says what is missing under the `default` groups.
//! Only durable checkpoints keep iterations (issue 20): a crash before an
//! asynchronous save's finalize loses everything after the previous
//! durable checkpoint, and a save that fails keeps nothing.

// Goodput accounting runs while telemetry does: it needs `otel` compiled in.
#![cfg(feature = "otel")]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::{BIN, SMALL, Span, command, read_traces, run_command, temp_dir, with};

/// The stated tolerance (docs/goodput.md): what a crashed attempt does after
/// its last progress record (here: nothing but exiting, the record is
/// written every iteration) and the process start before the program's first
/// line are not seen; generous, for a loaded machine.
const TOLERANCE_S: f64 = 3.0;

/// The stated tolerance of the viewer against the summary (docs/goodput.md):
/// per bucket, in seconds, and on the ratio. The spans are the export
/// rank's, the summary's dead attempt is rank 0's record: a rank that waits
/// for another inside a save moves time between `productive` and
/// `checkpoint_save`; and a dead attempt's tail after its last iteration is
/// `other` in the viewer, unseen by the summary.
const VIEW_TOLERANCE_S: f64 = 1.0;
const VIEW_RATIO_TOLERANCE: f64 = 0.08;

/// The lost-time bound's allowance for the skew between rank 0 (which
/// writes the progress record) and rank 1 (whose spans are exported): both
/// leave each iteration through the same all-reduce, so they differ by a
/// few milliseconds, more when one is descheduled on a loaded machine.
const RANK_SKEW_S: f64 = 0.2;

fn iteration_attribute(span: &Span) -> Option<u64> {
    span.attributes.get("megatron.iteration")?.as_u64()
}

fn seconds_between(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e9
}

/// `analyze DIR`: its exit status and standard output.
fn analyze(dir: &Path) -> (bool, String) {
    let output = Command::new(BIN).arg("analyze").arg(dir).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(stderr.is_empty() || output.status.success(), "{stderr}");
    (output.status.success(), stdout)
}

/// The viewer's goodput section: seconds per bucket (and `total`, `ratio`).
fn viewer_figures(text: &str) -> BTreeMap<String, f64> {
    let section = text.split("goodput (from the spans").nth(1).unwrap_or_else(|| panic!("no goodput section: {text}"));
    section
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (name, value) = (words.next()?, words.next()?.parse().ok()?);
            Some((name.to_string(), value))
        })
        .collect()
}

/// Runs one attempt with telemetry on (file exporter under `dir`), run id
/// `run_id`; its exit status, stderr and wall time.
fn attempt(dir: &Path, run_id: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, f64) {
    let mut cmd = command(dir, args);
    cmd.env("MEGATRON_OTEL_RUN_ID", run_id);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let (status, stderr) = run_command(cmd, Duration::from_secs(180));
    (status.success(), stderr, started.elapsed().as_secs_f64())
}

/// The last exported value of each goodput gauge series of `run_id`'s last
/// rank: `dl.goodput.time` by bucket, and the ratio and MFU.
fn exported(dir: &Path, run_id: &str, rank: u32) -> (BTreeMap<String, f64>, Option<f64>, Option<f64>) {
    let path = dir.join("telemetry").join(run_id).join(format!("metrics-rank{rank}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (mut buckets, mut ratio, mut mfu) = (BTreeMap::new(), None, None);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let request: Value = serde_json::from_str(line).unwrap();
        for resource in request["resourceMetrics"].as_array().into_iter().flatten() {
            for scope in resource["scopeMetrics"].as_array().into_iter().flatten() {
                for metric in scope["metrics"].as_array().into_iter().flatten() {
                    let name = metric["name"].as_str().unwrap();
                    if !name.starts_with("dl.goodput.") && name != "dl.training.mfu" {
                        continue; // other gauges (the watchdog's, integers) are not ours to read
                    }
                    let points = metric["gauge"]["dataPoints"].as_array().cloned().unwrap_or_default();
                    for point in points {
                        let value = point["asDouble"].as_f64().unwrap();
                        match metric["name"].as_str().unwrap() {
                            "dl.goodput.time" => {
                                assert_eq!(metric["unit"], "s");
                                let bucket = point["attributes"][0]["value"]["stringValue"].as_str().unwrap();
                                assert_eq!(point["attributes"][0]["key"], "dl.goodput.bucket");
                                buckets.insert(bucket.to_string(), value);
                            }
                            "dl.goodput.ratio" => ratio = Some(value),
                            "dl.training.mfu" => mfu = Some(value),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    (buckets, ratio, mfu)
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_crash_and_resume_charges_the_lost_iterations_and_keeps_forty() {
    let dir = temp_dir("goodput-crash");
    // Two ranks (pipeline stages): rank 0 writes the progress record, rank 1
    // (the last) exports and writes the summary.
    let base = with(
        SMALL,
        &[
            "--otel-enabled",
            "--nproc-per-node",
            "2",
            "--pipeline-model-parallel-size",
            "2",
            "--train-iters",
            "40",
            "--log-interval",
            "1",
            "--save",
            "D",
            "--save-interval",
            "10",
        ],
    );
    // `per_step` groups: the viewer's breakdown needs the iteration spans.
    let groups = [("MEGATRON_OTEL_SPAN_GROUPS", "per_step")];
    let (ok, stderr, first_wall) = attempt(&dir, "attempt-1", &with(&base, &["--inject-crash-at", "17"]), &groups);
    assert!(!ok, "the crashed attempt must fail: {stderr}");
    assert!(stderr.contains("injected crash after iteration 17"), "{stderr}");
    // The exporting rank that failed still says where its telemetry went
    // and what it dropped.
    let report = stderr.lines().find(|l| l.contains("telemetry (rank 1) -> ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(report.contains(" exported, 0 dropped "), "{report}");
    let tracker = std::fs::read_to_string(dir.join("D").join("latest_checkpointed_iteration.txt")).unwrap();
    assert_eq!(tracker.trim(), "10", "no save after the crash");
    let record: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("D/goodput.json")).unwrap()).unwrap();
    assert_eq!((record["iteration"].as_u64(), record["checkpoint_iteration"].as_u64()), (Some(17), Some(10)));
    assert_eq!(record["pending_iterations"], 7);

    let (ok, stderr, second_wall) =
        attempt(&dir, "attempt-2", &with(&base, &["--load", "D", "--summary-json", "summary.json"]), &groups);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("goodput: ") && stderr.contains("7 lost"), "{stderr}");
    let s = summary(&dir);
    let g = &s["goodput"];
    assert_eq!(g["attempts"], 2);
    assert_eq!(g["productive_iterations"], 40);
    assert_eq!(g["lost_iterations"], 7);
    assert_eq!(g["pending_iterations"], 0);
    let seconds = |bucket: &str| g["seconds"][bucket].as_f64().unwrap();
    let lost = seconds("lost_progress");
    // The bound from the schedule: the lost time is the first attempt's
    // loop time from the end of the save of iteration 10 to its last
    // progress record, written in the log of iteration 17 (every iteration
    // logs). So it holds the seven steps 11 to 17, and no more than that
    // window: both read from the exported spans of rank 1 (the record is
    // rank 0's: RANK_SKEW_S either side).
    let first_spans: Vec<Span> =
        read_traces(&dir.join("telemetry/attempt-1")).into_iter().flat_map(|r| r.spans).collect();
    let save_10_end = first_spans
        .iter()
        .filter(|s| s.name == "megatron.checkpoint.exposed_save" && iteration_attribute(s) == Some(10))
        .map(|s| s.end)
        .max()
        .expect("the save of iteration 10 in the first attempt's spans");
    // `megatron.iteration` is the counter at the step's start: 10 to 16 are steps 11 to 17.
    let steps: Vec<&Span> = first_spans
        .iter()
        .filter(|s| {
            s.name == "megatron.train.iteration" && iteration_attribute(s).is_some_and(|i| (10..17).contains(&i))
        })
        .collect();
    assert_eq!(steps.len(), 7, "steps 11 to 17 of the first attempt");
    let steps_s: f64 = steps.iter().map(|s| seconds_between(s.start, s.end)).sum();
    let last_step_end = steps.iter().map(|s| s.end).max().unwrap();
    let report_17_end = first_spans
        .iter()
        .filter(|s| s.name == "megatron.train.iteration_report" && s.start >= last_step_end)
        .map(|s| s.end)
        .min()
        .expect("the report of iteration 17");
    let window_s = seconds_between(save_10_end, report_17_end);
    assert!(
        lost >= steps_s - RANK_SKEW_S && lost <= window_s + RANK_SKEW_S,
        "lost {lost} s: the seven steps take {steps_s} s, the window from the save of 10 to the report of 17 is {window_s} s"
    );
    let ratio = g["ratio"].as_f64().unwrap();
    assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
    assert!(seconds("checkpoint_save") > 0.0 && seconds("checkpoint_load") > 0.0 && seconds("startup") > 0.0);
    let total: f64 = g["seconds"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
    let wall = first_wall + second_wall;
    assert!(total <= wall + 0.1 && total >= wall - TOLERANCE_S, "buckets {total} s, wall {wall} s");
    assert_eq!(g["mfu"], Value::Null, "the CPU device has no known peak");

    // The export rank's gauges say the same (at its normal end).
    let (buckets, exported_ratio, mfu) = exported(&dir, "attempt-2", 1);
    assert_eq!(buckets.len(), 8, "{buckets:?}");
    assert_eq!(buckets["lost_progress"], lost);
    assert_eq!(buckets["pending"], 0.0);
    assert!(buckets["productive"] > 0.0 && buckets["productive"] <= seconds("productive"));
    let exported_ratio = exported_ratio.expect("dl.goodput.ratio exported");
    assert!(exported_ratio > 0.0 && exported_ratio < 1.0);
    assert_eq!(mfu, None, "no MFU without a peak");
    // Rank 0 exports nothing under the default rank strategy.
    assert!(!dir.join("telemetry/attempt-2/metrics-rank0.jsonl").exists());

    // The viewer, on the telemetry directory of both attempts, computes the
    // same breakdown from the spans.
    let (ok, text) = analyze(&dir.join("telemetry"));
    assert!(ok, "{text}");
    assert!(
        text.contains("attempt attempt-1: rank 1") && text.contains("iterations 1-17, last save at 10, no normal end"),
        "{text}"
    );
    assert!(
        text.contains("attempt attempt-2: rank 1") && text.contains("iterations 11-40, last save at 40, normal end"),
        "{text}"
    );
    assert!(text.contains("iterations: 40 kept, 0 pending, 7 lost, over 2 attempt(s)"), "{text}");
    let view = viewer_figures(&text);
    for (bucket, value) in g["seconds"].as_object().unwrap() {
        let summary_value = value.as_f64().unwrap();
        let viewed = view.get(bucket.as_str()).copied().unwrap_or_else(|| panic!("no {bucket} in {text}"));
        assert!(
            (viewed - summary_value).abs() <= VIEW_TOLERANCE_S,
            "{bucket}: viewer {viewed} s, summary {summary_value} s\n{text}"
        );
    }
    assert!(
        (view["ratio"] - ratio).abs() <= VIEW_RATIO_TOLERANCE,
        "viewer ratio {}, summary {ratio}\n{text}",
        view["ratio"]
    );
    assert!(view["lost_progress"] > 0.0 && view["productive"] > 0.0, "{text}");
}

#[test]
fn a_clean_run_loses_nothing_and_exports_mfu_with_a_configured_peak() {
    let dir = temp_dir("goodput-clean");
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--num-layers",
            "4",
            "--global-batch-size",
            "8",
            "--train-iters",
            "12",
            "--log-interval",
            "4",
            "--save",
            "D",
            "--save-interval",
            "5",
            "--summary-json",
            "summary.json",
        ],
    );
    let (ok, stderr, _) = attempt(&dir, "clean", &args, &[("MEGATRON_OTEL_PEAK_TFLOPS", "0.000001")]);
    assert!(ok, "{stderr}");
    // The startup output names the peak and where it comes from.
    assert!(stderr.contains("MFU peak: 0.000001 TFLOP/s, from MEGATRON_OTEL_PEAK_TFLOPS"), "{stderr}");
    let s = summary(&dir);
    let g = &s["goodput"];
    assert_eq!(g["seconds"]["lost_progress"], 0.0);
    assert_eq!(g["lost_iterations"], 0);
    assert_eq!(g["productive_iterations"], 12);
    assert_eq!(g["attempts"], 1);
    // MFU = model FLOPs per iteration / (step time × peak) per GPU, the step
    // time being the mean of the last log interval (iterations 9 to 12).
    // FLOPs per iteration (docs/simulator.md): (6 × parameters − 2·256·h) ×
    // tokens, parameters = 256·h + L·(h² + h) + 256·h + 256; h 32, L 4,
    // tokens = global batch 8 × sequence 16.
    let (h, layers, tokens) = (32.0, 4.0, 8.0 * 16.0);
    let parameters = 256.0 * h + layers * (h * h + h) + 256.0 * h + 256.0;
    let flops = (6.0 * parameters - 2.0 * 256.0 * h) * tokens;
    assert_eq!(s["flops_per_iteration"].as_f64(), Some(flops));
    let steps: Vec<f64> = s["step_times_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(steps.len(), 12);
    let last_interval_s = steps[8..].iter().sum::<f64>() / 4.0 / 1e3;
    let expected = flops / last_interval_s / (0.000001 * 1e12);
    let mfu = g["mfu"].as_f64().expect("an MFU with MEGATRON_OTEL_PEAK_TFLOPS set");
    assert!((mfu - expected).abs() <= 1e-9 * expected, "MFU {mfu}, formula {expected}");
    // A peak this low (a millionth of a TFLOP/s; MFU about 100 here) puts
    // MFU above 1: the impossible value is exported as computed, and said
    // once (by the rank that computes it), not at every interval.
    assert!(mfu > 1.0, "MFU {mfu}");
    assert_eq!(stderr.matches("MFU came out at").count(), 1, "{stderr}");
    assert!(stderr.contains("the peak (0.000001 TFLOP/s) is one GPU's; one of them is off"), "{stderr}");
    let (buckets, _, exported_mfu) = exported(&dir, "clean", 0);
    // Under the `default` groups there are no iteration spans: the viewer
    // says what is missing instead of a breakdown.
    let (ok, text) = analyze(&dir.join("telemetry/clean"));
    assert!(ok, "{text}");
    assert!(text.contains("not computed") && text.contains("MEGATRON_OTEL_SPAN_GROUPS=per_step"), "{text}");
    assert!(!text.contains("productive"), "{text}");
    assert_eq!(buckets["lost_progress"], 0.0);
    assert_eq!(exported_mfu, Some(mfu));
    // The record of a normal end has nothing pending: a later resume loses nothing.
    let record: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("D/goodput.json")).unwrap()).unwrap();
    assert_eq!(record["pending_iterations"], 0);
    assert_eq!(record["productive_iterations"], 12);

    // A bad peak is a configuration error naming the variable.
    let (ok, stderr, _) = attempt(&dir, "bad", &args, &[("MEGATRON_OTEL_PEAK_TFLOPS", "-3")]);
    assert!(!ok);
    assert!(stderr.contains("MEGATRON_OTEL_PEAK_TFLOPS"), "{stderr}");
}

#[test]
fn a_foreign_progress_record_is_a_warning_and_the_totals_start_fresh() {
    let dir = temp_dir("goodput-foreign");
    let base = with(SMALL, &["--otel-enabled", "--log-interval", "2", "--save", "D"]);
    let (ok, stderr, _) = attempt(&dir, "first", &with(&base, &["--train-iters", "4"]), &[]);
    assert!(ok, "{stderr}");
    std::fs::write(dir.join("D/goodput.json"), "{\"schema\": \"someone-else/3\"}").unwrap();
    let (ok, stderr, _) = attempt(
        &dir,
        "second",
        &with(&base, &["--load", "D", "--train-iters", "6", "--summary-json", "summary.json"]),
        &[],
    );
    assert!(ok, "{stderr}");
    assert!(stderr.contains("is not a goodput progress record") && stderr.contains("start fresh"), "{stderr}");
    // The first attempt shut down cleanly: its spool held only a progress
    // record, taken quietly, with no "replayed 0 span(s)" line.
    assert!(!stderr.contains("replayed"), "{stderr}");
    let g = &summary(&dir)["goodput"];
    assert_eq!(g["attempts"], 1);
    assert_eq!(g["productive_iterations"], 2);
}

/// Issue 20's run: 20 iterations, an asynchronous save every 5, a crash
/// after iteration 16, before the save of 15 was finalized (its finalize
/// would come at the top of the next pass). The tracker points at 10, so
/// iterations 11 to 16 are lost and the resumed run keeps 20, not 25.
#[test]
fn a_crash_before_an_async_save_is_finalized_loses_everything_after_the_last_durable_checkpoint() {
    let dir = temp_dir("goodput-async-crash");
    let base = with(
        SMALL,
        &[
            "--otel-enabled",
            "--train-iters",
            "20",
            "--log-interval",
            "1",
            "--save",
            "D",
            "--save-interval",
            "5",
            "--async-save",
        ],
    );
    let (ok, stderr, _) = attempt(&dir, "async-1", &with(&base, &["--inject-crash-at", "16"]), &[]);
    assert!(!ok, "the crashed attempt must fail: {stderr}");
    let tracker = std::fs::read_to_string(dir.join("D").join("latest_checkpointed_iteration.txt")).unwrap();
    assert_eq!(tracker.trim(), "10", "the save of 15 was never finalized");
    let record: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("D/goodput.json")).unwrap()).unwrap();
    assert_eq!((record["iteration"].as_u64(), record["checkpoint_iteration"].as_u64()), (Some(16), Some(10)));
    assert_eq!((record["productive_iterations"].as_u64(), record["pending_iterations"].as_u64()), (Some(10), Some(6)));

    let (ok, stderr, _) =
        attempt(&dir, "async-2", &with(&base, &["--load", "D", "--summary-json", "summary.json"]), &[]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("6 lost"), "{stderr}");
    let g = &summary(&dir)["goodput"];
    assert_eq!(g["productive_iterations"], 20);
    assert_eq!(g["lost_iterations"], 6);
    assert_eq!(g["pending_iterations"], 0);
    assert_eq!(g["attempts"], 2);
}

/// A save that fails keeps nothing: the iteration directory of the save of
/// 10 is taken by a file, so writing it fails and the attempt dies. Its
/// last progress record still keeps only what the save of 5 covered, and
/// names 5 as the latest checkpoint: synchronously, the record of the log
/// of 10 (just before the save); asynchronously, the worker's write fails
/// and the finalize reports it at the top of the pass after the one whose
/// all-reduce saw the worker done (11 at the earliest, by 14 at the end).
#[test]
fn a_failed_save_keeps_nothing() {
    for (mode, extra) in [("sync", None), ("async", Some("--async-save"))] {
        let dir = temp_dir(&format!("goodput-failed-save-{mode}"));
        std::fs::create_dir_all(dir.join("D")).unwrap();
        std::fs::write(dir.join("D/iter_0000010"), "not a directory").unwrap();
        let mut args = with(
            SMALL,
            &["--otel-enabled", "--train-iters", "14", "--log-interval", "1", "--save", "D", "--save-interval", "5"],
        );
        args.extend(extra);
        let (ok, stderr, _) = attempt(&dir, mode, &args, &[]);
        assert!(!ok, "{mode}: the save of 10 must fail: {stderr}");
        assert!(stderr.contains("iteration 10"), "{mode}: {stderr}");
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("D/goodput.json")).unwrap()).unwrap();
        let last = record["iteration"].as_u64().unwrap();
        match extra {
            None => assert_eq!(last, 10, "{mode}: {record}"),
            Some(_) => assert!((11..=14).contains(&last), "{mode}: {record}"),
        }
        assert_eq!(record["checkpoint_iteration"], 5, "{mode}: {record}");
        assert_eq!(record["productive_iterations"], 5, "{mode}: {record}");
        assert_eq!(record["pending_iterations"], last - 5, "{mode}: {record}");
    }
}

/// Copies the directory `from` to `to` (files and subdirectories).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Iteration spans but not the `checkpoint` group (`job,step`): the saves
/// are not seen, so the viewer says what is missing rather than a
/// breakdown with every iteration pending (the simulator stamps its spans,
/// which the view's own test of a missing group cannot see past; the
/// export's recorded groups can).
#[test]
fn the_viewer_says_the_checkpoint_group_is_missing_rather_than_all_pending() {
    let dir = temp_dir("goodput-no-checkpoint-group");
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "job,step",
            "--train-iters",
            "6",
            "--save",
            "D",
            "--save-interval",
            "3",
        ],
    );
    let (ok, stderr, _) = attempt(&dir, "no-ckpt", &args, &[]);
    assert!(ok, "{stderr}");
    let (ok, text) = analyze(&dir.join("telemetry/no-ckpt"));
    assert!(ok, "{text}");
    assert!(text.contains("not computed") && text.contains("no-ckpt: no checkpoint spans"), "{text}");
    assert!(text.contains("lack `checkpoint`; run with MEGATRON_OTEL_SPAN_GROUPS=per_step"), "{text}");
    assert!(!text.contains("pending"), "{text}");
}

/// Issue 22's run, as a new user tries it: saves every 10, the default log
/// interval (10), the process killed with `SIGKILL` inside iteration 18
/// (`--inject-kill`: after iteration 17, nothing flushed). Its last progress
/// record is the one of the checkpoint of 10, with nothing pending; the
/// spool has every iteration. The resume charges exactly 7 iterations
/// (11 to 17) and their time, and says lost progress is known to the
/// iteration. The same dead attempt resumed with the spool off charges
/// nothing, and says lost progress is known only to a log interval.
#[test]
fn a_kill_after_17_at_the_default_log_interval_charges_exactly_seven() {
    let dir = temp_dir("goodput-kill");
    let base = with(
        SMALL,
        &["--otel-enabled", "--otel-span-groups", "per_step", "--train-iters", "30", "--save-interval", "10"],
    );
    let in_d = with(&base, &["--save", "D"]);
    let (ok, stderr, first_wall) = attempt(&dir, "kill-1", &with(&in_d, &["--inject-kill", "0:forward:18"]), &[]);
    assert!(!ok, "the killed attempt must fail: {stderr}");
    assert!(stderr.contains("rank 0: --inject-kill 0:forward:18: SIGKILL"), "{stderr}");
    let record: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("D/goodput.json")).unwrap()).unwrap();
    assert_eq!((record["iteration"].as_u64(), record["pending_iterations"].as_u64()), (Some(10), Some(0)), "{record}");
    copy_dir(&dir.join("D"), &dir.join("D2"));

    let (ok, stderr, second_wall) =
        attempt(&dir, "kill-2", &with(&in_d, &["--load", "D", "--summary-json", "summary.json"]), &[]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("30 iterations kept, 7 lost |"), "{stderr}");
    assert!(!stderr.contains("known only to a log interval"), "{stderr}");
    // Setup's replay names the dead attempt's run, which its spans keep.
    assert!(stderr.contains("span(s) of run kill-1 ("), "{stderr}");
    let g = &summary(&dir)["goodput"];
    assert_eq!((g["productive_iterations"].as_u64(), g["lost_iterations"].as_u64()), (Some(30), Some(7)), "{g}");
    assert_eq!(g["lost_precision"], "iteration");
    assert_eq!(g["attempts"], 2);
    // The lost time is the seven steps' and the dead attempt's last moments
    // (its last-alive stamp, refreshed every second): more than the seven
    // steps of the resumed attempt's 11 to 17 at their fastest, and the
    // buckets sum to both attempts' wall time.
    let steps: Vec<f64> =
        summary(&dir)["step_times_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let fastest_seven_s = steps.iter().copied().fold(f64::INFINITY, f64::min) * 7.0 / 1e3;
    let lost = g["seconds"]["lost_progress"].as_f64().unwrap();
    assert!(lost >= fastest_seven_s * 0.5, "lost {lost} s, seven of the fastest steps {fastest_seven_s} s");
    let total = g["total_seconds"].as_f64().unwrap();
    let wall = first_wall + second_wall;
    assert!(total <= wall + 0.1 && total >= wall - TOLERANCE_S, "buckets {total} s, wall {wall} s");

    // The viewer: the spans the resumed attempt replayed from the dead one's
    // spool (iterations 11 to 17, and the spans still open at the kill)
    // lie in the resumed attempt's directory with the dead one's run id,
    // and join the dead attempt's own.
    let (ok, text) = analyze(&dir.join("telemetry"));
    assert!(ok, "{text}");
    assert!(
        text.contains("attempt kill-1: rank 0") && text.contains("iterations 1-17, last save at 10, no normal end"),
        "{text}"
    );
    assert!(
        text.contains("attempt kill-2: rank 0") && text.contains("iterations 11-30, last save at 30, normal end"),
        "{text}"
    );
    assert!(text.contains("iterations: 30 kept, 0 pending, 7 lost, over 2 attempt(s)"), "{text}");
    assert!(!text.contains("holds spans of run"), "{text}");
    // The resumed attempt's directory alone: the dead attempt's replayed
    // spans are a part of it only, left out with a note, not read as an
    // attempt that resumed without a load.
    let (ok, text) = analyze(&dir.join("telemetry/kill-2"));
    assert!(ok, "{text}");
    assert!(text.contains("holds spans of run kill-1 replayed from a crash spool after their process died"), "{text}");
    assert!(text.contains("iterations: 20 kept, 0 pending, 0 lost, over 1 attempt(s)"), "{text}");
    assert!(!text.contains("not computed"), "{text}");

    // The spool off when resuming: the record alone, nothing after it seen.
    let (ok, stderr, _) = attempt(
        &dir,
        "kill-2-no-spool",
        &with(&base, &["--load", "D2", "--save", "D2", "--summary-json", "summary.json"]),
        &[("MEGATRON_OTEL_SPOOL", "0")],
    );
    assert!(ok, "{stderr}");
    assert!(stderr.contains("0 lost | lost progress known only to a log interval (no spool)"), "{stderr}");
    let g = &summary(&dir)["goodput"];
    assert_eq!(g["lost_iterations"], 0);
    assert_eq!(g["lost_precision"], "log_interval");
}

/// Two ranks, each exporting, rank 0 (not the highest) killed inside
/// iteration 18: the next attempt's rank 0 replays its spool, so the
/// resumed directory holds spans of the dead rank 0 whose own export is in
/// the first attempt's directory, which `lens analyze` does not read (it
/// reads each run at its highest rank). Given the directory above both,
/// the goodput is whole (17 iterations then 20, 7 lost) and no note says
/// an export is missing.
#[test]
fn a_rank_killed_below_the_highest_leaves_no_note_of_a_missing_export() {
    let dir = temp_dir("goodput-kill-rank0");
    let base = with(
        SMALL,
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "per_step",
            "--nproc-per-node",
            "2",
            "--pipeline-model-parallel-size",
            "2",
            "--train-iters",
            "30",
            "--save",
            "D",
            "--save-interval",
            "10",
        ],
    );
    let every_rank = [("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks")];
    let (ok, stderr, _) = attempt(&dir, "rank0-1", &with(&base, &["--inject-kill", "0:forward:18"]), &every_rank);
    assert!(!ok, "the killed attempt must fail: {stderr}");
    let (ok, stderr, _) = attempt(&dir, "rank0-2", &with(&base, &["--load", "D"]), &every_rank);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("span(s) of run rank0-1 ("), "rank 0 replays the dead rank 0's spool: {stderr}");
    let (ok, text) = analyze(&dir.join("telemetry"));
    assert!(ok, "{text}");
    assert!(text.contains("attempt rank0-1: rank 1") && text.contains("iterations 1-17, last save at 10"), "{text}");
    assert!(text.contains("iterations: 30 kept, 0 pending, 7 lost, over 2 attempt(s)"), "{text}");
    assert!(!text.contains("holds spans of run"), "{text}");
}

/// The next attempt of a killed one replays its spool through a trace
/// collector that accepts connections and never answers: the replay is
/// still running at shutdown, and it costs the final metric collection
/// nothing (metrics go to a file here). Before, shutdown waited for the
/// replay until its deadline and left the metrics no time: 0 exported.
#[test]
fn a_replay_stuck_on_a_hung_trace_collector_leaves_the_metrics_their_shutdown() {
    let dir = temp_dir("goodput-replay-hung");
    let base = with(
        SMALL,
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "per_step",
            "--train-iters",
            "20",
            "--save",
            "D",
            "--save-interval",
            "10",
        ],
    );
    let files = [("MEGATRON_OTEL_EXPORTER", "file")];
    let (ok, stderr, _) = attempt(&dir, "replay-hung", &with(&base, &["--inject-kill", "0:forward:15"]), &files);
    assert!(!ok, "the killed attempt must fail: {stderr}");
    // Connections complete in the backlog; nothing ever answers them.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", hung.local_addr().unwrap());
    let env = [
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
        ("OTEL_METRICS_EXPORTER", "file"),
        ("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "2000"),
    ];
    // The killed attempt's metrics, if any, are in the same file: only what
    // the next attempt adds counts.
    let metrics_file = dir.join("telemetry/replay-hung/metrics-rank0.jsonl");
    let before = std::fs::metadata(&metrics_file).map_or(0, |m| m.len() as usize);
    let (ok, stderr, _) = attempt(&dir, "replay-hung", &with(&base, &["--load", "D"]), &env);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("the previous attempt's spans were still being replayed at the deadline"), "{stderr}");
    let report = stderr.lines().find(|l| l.contains("metric points: ")).unwrap_or_else(|| panic!("{stderr}"));
    let exported: u64 = report
        .split("metric points: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{report}"));
    assert!(exported > 0, "the final collection is exported: {report}");
    let metrics = std::fs::read(&metrics_file).unwrap_or_default();
    let added = String::from_utf8_lossy(metrics.get(before..).unwrap_or_default());
    assert!(added.contains("megatron.training.loss"), "the final collection is in the file: {report}");
    drop(hung);
}

/// Killed while an asynchronous save is in flight (`--inject-crash-during-save`):
/// saves every 6, the save of 6 finalized, the save of 12 dispatched and
/// never finalized, the last progress record at the log interval of 10.
/// The run resumes from 6 and loses everything since: 7 to 12, not the 4
/// the record knew of.
#[test]
fn a_kill_during_an_async_save_charges_everything_since_the_previous_durable_checkpoint() {
    let dir = temp_dir("goodput-kill-async");
    let base =
        with(SMALL, &["--otel-enabled", "--train-iters", "18", "--save", "D", "--save-interval", "6", "--async-save"]);
    let (ok, stderr, _) = attempt(&dir, "async-kill-1", &with(&base, &["--inject-crash-during-save", "12"]), &[]);
    assert!(!ok, "the killed attempt must fail: {stderr}");
    assert!(stderr.contains("--inject-crash-during-save 12: the asynchronous save is in flight: SIGKILL"), "{stderr}");
    let tracker = std::fs::read_to_string(dir.join("D/latest_checkpointed_iteration.txt")).unwrap();
    assert_eq!(tracker.trim(), "6", "the save of 12 was never finalized");
    let record: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("D/goodput.json")).unwrap()).unwrap();
    assert_eq!((record["iteration"].as_u64(), record["pending_iterations"].as_u64()), (Some(10), Some(4)), "{record}");

    let (ok, stderr, _) =
        attempt(&dir, "async-kill-2", &with(&base, &["--load", "D", "--summary-json", "summary.json"]), &[]);
    assert!(ok, "{stderr}");
    let g = &summary(&dir)["goodput"];
    assert_eq!((g["productive_iterations"].as_u64(), g["lost_iterations"].as_u64()), (Some(18), Some(6)), "{g}");
    assert_eq!(g["pending_iterations"], 0);
    assert_eq!(g["lost_precision"], "iteration");
}

/// own-program.md's advice, pinned: one run id for every attempt (it ties
/// them together), each attempt's files in a directory of its own, the
/// first killed after iteration 17 (saves every 10). The attempts are told
/// apart by their processes, and what the resumed attempt replayed from
/// the dead one's spool joins the dead one: 30 kept and 7 lost, as the job
/// says. Both attempts appending to one directory (the default
/// `telemetry/<run id>/` with a pinned id) is told apart the same way.
#[test]
fn attempts_that_share_a_pinned_run_id_are_told_apart_by_their_processes() {
    let dir = temp_dir("goodput-pinned");
    let base = with(
        SMALL,
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "per_step",
            "--train-iters",
            "30",
            "--save-interval",
            "10",
            "--save",
            "D",
        ],
    );
    let killed = with(&base, &["--inject-kill", "0:forward:18"]);
    let (ok, stderr, _) = attempt(&dir, "pinned", &killed, &[("MEGATRON_OTEL_FILE_DIR", "kt/attempt-1")]);
    assert!(!ok, "the killed attempt must fail: {stderr}");
    let resumed = with(&base, &["--load", "D"]);
    let (ok, stderr, _) = attempt(&dir, "pinned", &resumed, &[("MEGATRON_OTEL_FILE_DIR", "kt/attempt-2")]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("30 iterations kept, 7 lost |"), "the job's own count: {stderr}");

    let (ok, text) = analyze(&dir.join("kt"));
    assert!(ok, "{text}");
    assert!(text.contains("iterations: 30 kept, 0 pending, 7 lost, over 2 attempt(s)"), "{text}");
    assert!(text.contains("attempt attempt-1: rank 0") && text.contains("iterations 1-17, last save at 10"), "{text}");
    // The resumed attempt's directory alone: the replayed part of the dead
    // process is left out, with a note, not read as an attempt.
    let (ok, text) = analyze(&dir.join("kt/attempt-2"));
    assert!(ok, "{text}");
    assert!(text.contains("holds spans of run pinned (process "), "{text}");
    assert!(text.contains("iterations: 20 kept, 0 pending, 0 lost, over 1 attempt(s)"), "{text}");

    // The same export from before the replayed mark (renamed away here):
    // the dead process's own directory is the one it alone wrote, and the
    // resumed attempt's directory alone still leaves the replayed part out
    // (no startup span, while its own process has one).
    for attempt in ["attempt-1", "attempt-2"] {
        let legacy = dir.join("legacy").join(attempt);
        std::fs::create_dir_all(&legacy).unwrap();
        let text = std::fs::read_to_string(dir.join("kt").join(attempt).join("traces-rank0.jsonl")).unwrap();
        assert_eq!(attempt == "attempt-2", text.contains("lens.spool.replayed"), "{attempt}: only replays are marked");
        std::fs::write(legacy.join("traces-rank0.jsonl"), text.replace("lens.spool.replayed", "x.unmarked")).unwrap();
    }
    let (ok, text) = analyze(&dir.join("legacy"));
    assert!(ok && text.contains("iterations: 30 kept, 0 pending, 7 lost, over 2 attempt(s)"), "{text}");
    let (ok, text) = analyze(&dir.join("legacy/attempt-2"));
    assert!(ok && text.contains("holds spans of run pinned (process "), "{text}");
    assert!(text.contains("iterations: 20 kept, 0 pending, 0 lost, over 1 attempt(s)"), "{text}");

    // One directory that both attempts appended to.
    let same = dir.join("same");
    std::fs::create_dir_all(&same).unwrap();
    let appended: String = ["attempt-1", "attempt-2"]
        .iter()
        .map(|a| std::fs::read_to_string(dir.join("kt").join(a).join("traces-rank0.jsonl")).unwrap())
        .collect();
    std::fs::write(same.join("traces-rank0.jsonl"), appended).unwrap();
    let (ok, text) = analyze(&same);
    assert!(ok, "{text}");
    assert!(text.contains("iterations: 30 kept, 0 pending, 7 lost, over 2 attempt(s)"), "{text}");
    assert!(text.contains("attempt same (process "), "{text}");
}

/// A run killed before its first export (its own traces file is empty) and
/// recovered with `lens recover --to-files` into a directory beside its
/// own: the spool, which holds the attempt's startup, is all of the
/// attempt, and `lens analyze` on the directory above both counts it.
/// Before, it was left out with a note to give the directory above both,
/// which was given.
#[test]
fn a_run_killed_before_its_first_export_is_counted_from_its_recovered_spool() {
    let dir = temp_dir("goodput-recovered");
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "per_step",
            "--train-iters",
            "40",
            "--save",
            "D",
            "--save-interval",
            "10",
            "--inject-kill",
            "0:optimizer:15",
        ],
    );
    // No export before the kill: the batch processor waits a minute.
    let env = [("MEGATRON_OTEL_EXPORTER", "file"), ("OTEL_BSP_SCHEDULE_DELAY", "60000")];
    let (ok, stderr, _) = attempt(&dir, "recovered", &args, &env);
    assert!(!ok, "the killed attempt must fail: {stderr}");
    let own = std::fs::read_to_string(dir.join("telemetry/recovered/traces-rank0.jsonl")).unwrap_or_default();
    assert!(own.trim().is_empty(), "the killed process exported no span itself: {own}");
    let recover = lens_command::recover::RecoverArgs {
        dir: dir.join("D/lens-spool"),
        to_files: Some(dir.join("telemetry/recovered-spool")),
        prefix: "MEGATRON_OTEL".into(),
    };
    let report = lens_command::recover::recover(&recover).expect("lens recover");
    assert!(report.spans > 0, "{report:?}");
    let (ok, text) = analyze(&dir.join("telemetry"));
    assert!(ok, "{text}");
    assert!(!text.contains("holds spans of run"), "{text}");
    assert!(text.contains("iterations 1-14, last save at 10"), "{text}");
}
