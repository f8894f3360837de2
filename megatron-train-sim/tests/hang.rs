//! Naming the hung rank (docs/ranks.md, "The hang watchdog"), end to end:
//! `--inject-hang` stops one rank inside a phase; with a small
//! `MEGATRON_OTEL_HANG_TIMEOUT_S` every rank's watchdog prints its line, the
//! hung rank in the injected phase and its peers in a wait; the hung rank's
//! gauge and the copies of its open spans reach the `file` export through the
//! forced flush, before anything ends the run; SIGTERM then ends it as usual.

// The watchdog runs while telemetry does: it needs `otel` compiled in.
#![cfg(feature = "otel")]

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use megatron_telemetry::taxonomy;
use serde_json::Value;

mod support;
use support::{ChildGuard, command, kill, read_traces, run_command, temp_dir, wait_bounded};

/// A tiny DP2 model that would run long enough to hang at iteration 5.
const TINY_DP2: &[&str] = &[
    "--hidden-size",
    "16",
    "--num-attention-heads",
    "2",
    "--num-layers",
    "2",
    "--seq-length",
    "8",
    "--train-iters",
    "50",
    "--log-interval",
    "2",
    "--nproc-per-node",
    "2",
    "--comm-timeout",
    "600",
];

/// The watchdog timeout of these tests, seconds.
const TIMEOUT_S: f64 = 2.0;

/// The per-rank watchdog lines: `(rank, stalled seconds, phase, iteration, open spans)`.
fn parse_line(line: &str) -> Option<(u32, f64, String, u64, Vec<String>)> {
    let rest = line.strip_prefix("rank ")?;
    let (rank, rest) = rest.split_once(": no iteration completed for ")?;
    let (stalled, rest) = rest.split_once(" s; in phase ")?;
    let (phase, rest) = rest.split_once(" at iteration ")?;
    let (iteration, spans) = match rest.split_once("; open spans: ") {
        Some((iteration, spans)) => (iteration, spans.split(" > ").map(str::to_string).collect()),
        None => (rest, Vec::new()),
    };
    Some((rank.parse().ok()?, stalled.parse().ok()?, phase.to_string(), iteration.parse().ok()?, spans))
}

/// The data points of the metric `name` (a gauge or a sum) in a metrics
/// file, every export's.
fn metric_points(path: &Path, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut points = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let request: Value = serde_json::from_str(line).unwrap();
        for resource in request["resourceMetrics"].as_array().into_iter().flatten() {
            for scope in resource["scopeMetrics"].as_array().into_iter().flatten() {
                for metric in scope["metrics"].as_array().into_iter().flatten().filter(|m| m["name"] == name) {
                    for data in ["gauge", "sum"] {
                        points.extend(metric[data]["dataPoints"].as_array().into_iter().flatten().cloned());
                    }
                }
            }
        }
    }
    points
}

/// The hang gauge's points: value and attribute keys.
fn hang_points(path: &Path) -> Vec<(i64, Vec<String>)> {
    metric_points(path, lens_training::watchdog::HANG_SUSPECTED.name)
        .iter()
        .map(|point| {
            let value =
                point["asInt"].as_i64().or_else(|| point["asInt"].as_str().and_then(|s| s.parse().ok())).unwrap_or(-1);
            let keys = point["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|kv| kv["key"].as_str().unwrap_or("").to_string())
                .collect();
            (value, keys)
        })
        .collect()
}

/// The largest cumulative `dl.training.phase_time` of `phase` in a
/// metrics file (0 when none).
fn phase_seconds(path: &Path, phase: &str) -> f64 {
    metric_points(path, lens_training::names::PHASE_TIME.name)
        .iter()
        .filter(|point| {
            point["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|kv| kv["key"] == lens_training::names::PHASE_ATTRIBUTE && kv["value"]["stringValue"] == phase)
        })
        .filter_map(|point| point["asDouble"].as_f64())
        .fold(0.0, f64::max)
}

#[test]
fn an_injected_hang_is_named_by_every_rank_and_its_open_spans_leave_before_sigterm_ends_the_run() {
    let dir = temp_dir("hang");
    let telemetry = dir.join("telemetry");
    let mut args = TINY_DP2.to_vec();
    args.extend(["--inject-hang", "1:backward:5", "--otel-span-groups", "per_step"]);
    let mut command = command(&dir, &args);
    command
        .env("MEGATRON_OTEL_ENABLED", "1")
        .env("MEGATRON_OTEL_EXPORTER", "file")
        .env("MEGATRON_OTEL_FILE_DIR", &telemetry)
        .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks")
        .env("MEGATRON_OTEL_RANK_METRICS", "1")
        .env("MEGATRON_OTEL_HANG_TIMEOUT_S", "2");
    let mut child = ChildGuard::spawn(&mut command);
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = lines_tx.send(line);
        }
        all
    });

    // Every rank's line, within a generous bound (a loaded machine).
    let started = Instant::now();
    let mut found: BTreeMap<u32, (f64, String, u64, Vec<String>)> = BTreeMap::new();
    while found.len() < 2 && started.elapsed() < Duration::from_secs(90) {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(200))
            && let Some((rank, stalled, phase, iteration, spans)) = parse_line(&line)
        {
            found.insert(rank, (stalled, phase, iteration, spans));
        }
    }
    if found.len() < 2 {
        // The launcher and its ranks (which hold the stderr pipe that the
        // reader waits on).
        drop(child);
        panic!("not every rank printed its watchdog line: {found:?}\n{}", reader.join().unwrap());
    }
    let (stalled, phase, iteration, spans) = &found[&1];
    assert_eq!((phase.as_str(), *iteration), ("backward", 5), "the hung rank names the injected phase: {found:?}");
    assert!(
        (TIMEOUT_S..TIMEOUT_S + 5.0).contains(stalled),
        "the line comes within the timeout plus a few seconds: {found:?}"
    );
    assert!(spans.iter().any(|s| s == taxonomy::TRAIN_ITERATION.name), "open spans listed: {spans:?}");
    let (_, peer_phase, peer_iteration, _) = &found[&0];
    assert_eq!((peer_phase.as_str(), *peer_iteration), ("dp_wait", 5), "the peer waits: {found:?}");

    // The forced flush has written the evidence while the job still runs.
    let run_traces = || read_traces(&telemetry);
    let copy_written = |traces: &[support::RankTraces]| {
        traces.iter().any(|r| {
            r.rank == 1
                && r.spans.iter().any(|s| {
                    s.name == taxonomy::TRAIN_ITERATION.name
                        && s.attributes.get("nemo.span.open") == Some(&Value::Bool(true))
                })
        })
    };
    let waited = Instant::now();
    while !copy_written(&run_traces()) && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(child.try_wait().unwrap().is_none(), "the hung job is still running");
    let before_kill = run_traces();
    assert!(copy_written(&before_kill), "the open-span copies reached the file before any shutdown");
    // The metrics follow the spans in the flush: polled, as the copies were.
    let metrics = telemetry.join("metrics-rank1.jsonl");
    let flushed =
        || hang_points(&metrics).iter().any(|(value, _)| *value == 1) && phase_seconds(&metrics, "backward") >= 1.5;
    let waited = Instant::now();
    while !flushed() && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let hung_points = hang_points(&metrics);
    assert!(hung_points.iter().any(|(value, _)| *value == 1), "the gauge is 1 on the hung rank: {hung_points:?}");
    for (_, keys) in &hung_points {
        assert!(keys.iter().all(|k| k.starts_with("dl.")), "rank attributes only, no phase or iteration: {keys:?}");
    }
    // The per-rank counters came up to date with the forced flush: the
    // hung rank's time in `backward` (at least the 2 s it stalled there)
    // is exported with the hang, not at a log interval it never reaches.
    let backward = phase_seconds(&metrics, "backward");
    assert!(backward >= 1.5, "the stalled phase's time is exported with the hang: {backward} s");

    // SIGTERM ends the run as today.
    kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM);
    let status = wait_bounded(&mut child, Duration::from_secs(60));
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(143), "{stderr}");

    let ranks = read_traces(&telemetry);
    let hung = ranks.iter().find(|r| r.rank == 1).expect("rank 1's traces");
    let copy = hung
        .spans
        .iter()
        .find(|s| {
            s.name == taxonomy::TRAIN_ITERATION.name && s.attributes.get("nemo.span.open") == Some(&Value::Bool(true))
        })
        .expect("the copy of the open iteration span");
    let original = hung
        .spans
        .iter()
        .find(|s| s.span_id == copy.links.first().map(|l| l.1.clone()).unwrap_or_default())
        .expect("the copy links to its original, which still ends (truncated at SIGTERM)");
    assert_eq!(original.name, copy.name);
    assert_ne!(original.span_id, copy.span_id, "a fresh span id");
    assert_eq!(original.attributes.get("nemo.span.truncated"), Some(&Value::Bool(true)));
    assert!(!original.attributes.contains_key("nemo.span.open"));
    let parent = hung.spans.iter().find(|s| Some(&s.span_id) == copy.parent.as_ref()).expect("the copy's parent");
    assert_eq!(parent.name, taxonomy::TRAIN.name);
    assert_eq!(parent.attributes.get("nemo.span.open"), Some(&Value::Bool(true)), "chained to the parent's copy");
    let raw = std::fs::read_to_string(telemetry.join("traces-rank1.jsonl")).unwrap();
    assert!(raw.contains(lens_training::watchdog::HANG_EVENT), "the event on the innermost copy");
    // `lens analyze` names the rank its peer waited for.
    let analyzed = Command::new(support::BIN).arg("analyze").arg(&telemetry).output().unwrap();
    let text = String::from_utf8_lossy(&analyzed.stdout);
    assert!(
        text.contains(
            "  likely culprit at iteration 5: rank 1 (stalled in backward), which rank 0 waited for (dp_wait)\n"
        ),
        "{text}"
    );
}

#[test]
fn bad_hang_flags_are_usage_errors_that_say_what_is_accepted() {
    let dir = temp_dir("hang-bad");
    for (flag, expected) in [
        ("1:dp_wait:5", "PHASE must be one of data, forward, backward, optimizer"),
        ("9:forward:5", "--inject-hang 9:forward:5: rank 9 does not exist"),
        ("1:forward:0", "ITERATION must be a whole number, 1 or more"),
        ("1:forward:99", "iteration 99 is never reached (--train-iters is 10)"),
        ("1:forward", "expected RANK:PHASE:ITERATION"),
    ] {
        let args = ["--nproc-per-node", "2", "--train-iters", "10", "--inject-hang", flag];
        let (status, stderr) = run_command(command(&dir, &args), Duration::from_secs(60));
        assert!(!status.success(), "{flag} was accepted");
        assert!(stderr.contains(expected), "{flag}: {stderr}");
    }
}

#[test]
fn a_bad_hang_timeout_is_named_with_what_is_accepted() {
    let dir = temp_dir("hang-timeout-bad");
    let mut command = command(&dir, &["--train-iters", "2"]);
    command.env("MEGATRON_OTEL_ENABLED", "1").env("MEGATRON_OTEL_HANG_TIMEOUT_S", "soon");
    let (status, stderr) = run_command(command, Duration::from_secs(60));
    assert!(!status.success());
    assert!(
        stderr.contains("MEGATRON_OTEL_HANG_TIMEOUT_S")
            && stderr.contains("auto, 0 (off) or a number of seconds from 0.01"),
        "{stderr}"
    );
}
