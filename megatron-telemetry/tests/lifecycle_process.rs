//! The lifecycle across processes: SIGTERM handling and two ranks sharing
//! interval traces. Each case re-executes this test binary as a child
//! (selected by `LIFECYCLE_CHILD`) that sets telemetry up from its own
//! environment with the `file` exporter; the parent reads the OTLP/JSON
//! files back.

#![cfg(all(unix, feature = "otel"))]

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use lens_fallbacks::config::CliOverrides;
use lens_fallbacks::env::ProcessEnv;
use lens_fallbacks::identity::RankContext;
use megatron_telemetry::lifecycle::{LifecycleOptions, MegatronTelemetry};
use megatron_telemetry::taxonomy;
use serde_json::Value;

const CHILD: &str = "LIFECYCLE_CHILD";

/// The entry point of the children; in the parent run (no `LIFECYCLE_CHILD`)
/// it has nothing to do.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(CHILD) else { return };
    let rank = RankContext::detect(&ProcessEnv).unwrap();
    let graceful = mode == "graceful";
    let options = LifecycleOptions::new().with_exit_signal_handler(graceful);
    let mut telemetry = MegatronTelemetry::setup(&CliOverrides::default(), &rank, ProcessEnv, options).unwrap();
    assert!(telemetry.is_exporting());
    match mode.as_str() {
        "ranks" => {
            telemetry.begin_training_loop(Some(2));
            for iteration in 100..104 {
                telemetry.loop_pass(iteration);
                drop(telemetry.iteration(iteration));
            }
            telemetry.end_training_loop();
            telemetry.shutdown(Duration::from_secs(5));
        }
        "terminate" | "graceful" => {
            telemetry.begin_training_loop(None);
            for iteration in 0..5 {
                telemetry.loop_pass(iteration);
                drop(telemetry.iteration(iteration));
                if iteration == 2 {
                    // SAFETY: sends SIGTERM to this process.
                    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                    // Give the handler thread time to act: a terminating
                    // child dies here (the handler exports and re-raises;
                    // at most 20 s, however loaded the machine); a
                    // graceful one goes on after half a second.
                    let pause = if graceful { Duration::from_millis(500) } else { Duration::from_secs(20) };
                    std::thread::sleep(pause);
                }
            }
            telemetry.end_training_loop();
            telemetry.shutdown(Duration::from_secs(5));
            if mode == "terminate" {
                // Still alive: the handler did not re-raise. Wait a bounded
                // time, then fail with a status the parent reports.
                std::thread::sleep(Duration::from_secs(5));
                std::process::exit(3);
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn run_child(mode: &str, dir: &Path, rank: u32, world_size: u32) -> ExitStatus {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env("MEGATRON_OTEL_ENABLED", "1")
        .env("MEGATRON_OTEL_EXPORTER", "file")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("MEGATRON_OTEL_FILE_DIR", dir)
        .env("MEGATRON_OTEL_RUN_ID", "run-process")
        .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks")
        .env("MEGATRON_OTEL_SPAN_GROUPS", "all")
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world_size.to_string())
        .env_remove("TRACEPARENT")
        .env_remove("SLURM_RESTART_COUNT")
        .env_remove("TORCHELASTIC_RESTART_COUNT")
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child {mode} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("megatron-lifecycle-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every span object in an OTLP/JSON traces file.
fn spans(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut spans = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let request: Value = serde_json::from_str(line).unwrap();
        for resource in request["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
            }
        }
    }
    spans
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn truncated(span: &Value) -> bool {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|a| a["key"] == "nemo.span.truncated" && a["value"]["boolValue"] == true)
}

#[test]
fn sigterm_ends_open_spans_exports_them_and_kills_the_process_by_the_signal() {
    let dir = temp_dir("terminate");
    let status = run_child("terminate", &dir, 0, 1);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the child should die by SIGTERM, got {status:?}");
    let spans = spans(&dir.join("traces-rank0.jsonl"));
    let intervals = named(&spans, taxonomy::TRAIN.name);
    assert_eq!(intervals.len(), 1, "{spans:?}");
    assert!(truncated(intervals[0]), "the open interval is marked truncated");
    assert_eq!(named(&spans, taxonomy::TRAIN_ITERATION.name).len(), 3, "iterations 0 to 2 ran before SIGTERM");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_the_graceful_option_sigterm_only_flushes_and_the_loop_finishes() {
    let dir = temp_dir("graceful");
    let status = run_child("graceful", &dir, 0, 1);
    assert!(status.success(), "the child should exit normally, got {status:?}");
    let spans = spans(&dir.join("traces-rank0.jsonl"));
    assert_eq!(named(&spans, taxonomy::TRAIN_ITERATION.name).len(), 5);
    assert_eq!(named(&spans, taxonomy::STARTUP.name).len(), 1);
    let intervals = named(&spans, taxonomy::TRAIN.name);
    assert_eq!(intervals.len(), 1);
    assert!(spans.iter().all(|s| !truncated(s)), "everything ended normally");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_ranks_put_each_interval_in_one_shared_trace() {
    let dir = temp_dir("ranks");
    for rank in 0..2 {
        let status = run_child("ranks", &dir, rank, 2);
        assert!(status.success(), "rank {rank}: {status:?}");
    }
    let trace_ids = |rank: u32| -> Vec<String> {
        let spans = spans(&dir.join(format!("traces-rank{rank}.jsonl")));
        let mut ids: Vec<String> = named(&spans, taxonomy::TRAIN.name)
            .iter()
            .map(|s| s["traceId"].as_str().unwrap_or_default().to_string())
            .collect();
        ids.sort();
        ids
    };
    let (rank0, rank1) = (trace_ids(0), trace_ids(1));
    assert_eq!(rank0.len(), 2, "iterations 100 to 103 with save interval 2: two intervals");
    assert_ne!(rank0[0], rank0[1]);
    assert_eq!(rank0, rank1, "the same intervals share their traces across ranks");
    let _ = std::fs::remove_dir_all(&dir);
}
