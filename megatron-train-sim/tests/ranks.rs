//! Finding slow ranks (docs/ranks.md), end to end: the simulator with
//! `MEGATRON_OTEL_RANK_METRICS=1` and an injected straggler, then
//! `megatron-train-sim analyze` on the `file` export. Every rank's model is
//! tiny so that an injected 40 ms stands out of a loaded machine's noise.

// Rank metrics and the straggler analysis need `otel` compiled in.
#![cfg(feature = "otel")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod support;
use support::{BIN, command, run_command, temp_dir};

/// A tiny model, 16 iterations logged every 2: 8 intervals, two windows.
const TINY: &[&str] = &[
    "--hidden-size",
    "16",
    "--num-attention-heads",
    "2",
    "--num-layers",
    "2",
    "--seq-length",
    "8",
    "--train-iters",
    "16",
    "--log-interval",
    "2",
];

/// Runs the simulator in `dir` with telemetry to files (rank metrics as
/// `rank_metrics` says) and `extra` arguments; the summary.
fn train(dir: &Path, rank_metrics: bool, extra: &[&str]) -> Value {
    let summary = dir.join("summary.json");
    let mut args: Vec<&str> = TINY.to_vec();
    args.extend(extra);
    args.extend(["--summary-json", summary.to_str().unwrap()]);
    let mut command = command(dir, &args);
    command
        .env("MEGATRON_OTEL_ENABLED", "1")
        .env("MEGATRON_OTEL_EXPORTER", "file")
        .env("MEGATRON_OTEL_FILE_DIR", dir.join("telemetry"))
        .env("MEGATRON_OTEL_RANK_METRICS", if rank_metrics { "1" } else { "0" })
        // With rank metrics, the hang watchdog armed from the first
        // iteration (it never fires in these runs); without, it is off.
        .env("MEGATRON_OTEL_HANG_TIMEOUT_S", if rank_metrics { "600" } else { "0" })
        .env("OTEL_METRIC_EXPORT_INTERVAL", "50");
    let (status, stderr) = run_command(command, Duration::from_secs(120));
    assert!(status.success(), "{status}: {stderr}");
    serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap()
}

/// `analyze` on the run's telemetry: the (rank, phase) of every culprit
/// line, and the whole output.
fn culprits(dir: &Path) -> (Vec<(u32, String)>, String) {
    let output = Command::new(BIN).arg("analyze").arg(dir.join("telemetry")).stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "{text}{}", String::from_utf8_lossy(&output.stderr));
    let found = text
        .lines()
        .filter(|line| line.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields[1].parse().unwrap(), fields[2].to_string())
        })
        .collect();
    (found, text)
}

#[test]
fn an_injected_straggler_in_each_compute_phase_is_named_with_its_rank_and_phase() {
    for (rank, phase) in [(2, "data"), (1, "forward"), (3, "backward"), (0, "optimizer")] {
        let dir = temp_dir(&format!("straggler-{phase}"));
        let flag = format!("{rank}:{phase}:40");
        train(&dir, true, &["--nproc-per-node", "4", "--inject-straggler", &flag]);
        let (found, text) = culprits(&dir);
        assert!(!found.is_empty(), "no culprit for --inject-straggler {flag}:\n{text}");
        assert!(
            found.iter().all(|(r, p)| *r == rank && p == phase),
            "--inject-straggler {flag} must name rank {rank} in {phase}, and nobody else:\n{text}"
        );
    }
}

#[test]
fn a_pipeline_straggler_is_named_and_its_downstream_stage_is_not_blamed() {
    // PP2 x DP2: rank 1 is stage 0 of replica 1; rank 3, stage 1 of the same
    // replica, waits less for its input but computes as fast as rank 2.
    let dir = temp_dir("straggler-pp");
    train(
        &dir,
        true,
        &["--nproc-per-node", "4", "--pipeline-model-parallel-size", "2", "--inject-straggler", "1:forward:40"],
    );
    let (found, text) = culprits(&dir);
    assert!(!found.is_empty(), "no culprit:\n{text}");
    assert!(found.iter().all(|(r, p)| *r == 1 && p == "forward"), "{text}");
}

#[test]
fn a_clean_run_names_no_culprit_and_rank_metrics_and_the_watchdog_add_no_message() {
    let dir = temp_dir("clean");
    let with_metrics = train(&dir, true, &["--nproc-per-node", "4"]);
    let (found, text) = culprits(&dir);
    assert!(found.is_empty(), "a clean run named a culprit:\n{text}");
    assert!(text.contains("4 ranks with rank metrics") && text.contains("none: no rank is late"), "{text}");
    // Every rank wrote its metrics; spans still follow the rank strategy
    // (single_rank: the last rank only).
    let telemetry = dir.join("telemetry");
    for rank in 0..4 {
        assert!(telemetry.join(format!("metrics-rank{rank}.jsonl")).exists(), "rank {rank} wrote no metrics");
    }
    assert!(!telemetry.join("traces-rank0.jsonl").exists(), "rank 0 must not export spans");

    let plain = train(&temp_dir("clean-off"), false, &["--nproc-per-node", "4"]);
    let sent = |s: &Value| s["messages_sent"].as_u64().expect("messages_sent in the summary");
    assert!(sent(&plain) > 0);
    assert_eq!(
        sent(&with_metrics),
        sent(&plain),
        "rank metrics and the hang watchdog must not add a message between ranks"
    );
}

#[test]
fn bad_straggler_flags_are_usage_errors_that_say_what_is_accepted() {
    let dir = temp_dir("straggler-bad");
    for (flag, expected) in [
        ("1:dp_wait:5", "PHASE must be one of data, forward, backward, optimizer"),
        ("9:forward:5", "rank 9 does not exist"),
        ("1:forward", "expected RANK:PHASE:MS"),
    ] {
        let (status, stderr) =
            run_command(command(&dir, &["--nproc-per-node", "2", "--inject-straggler", flag]), Duration::from_secs(60));
        assert!(!status.success(), "{flag} was accepted");
        assert!(stderr.contains(expected), "{flag}: {stderr}");
    }
}
