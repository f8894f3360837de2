//! The lifecycle across processes: SIGTERM handling and two ranks sharing
//! interval traces. Each case re-executes this test binary as a child
//! (selected by `LIFECYCLE_CHILD`) that sets telemetry up from its own
//! environment with the `file` exporter (or, for a hung collector, OTLP to
//! a listener that never answers); the parent reads the OTLP/JSON files,
//! the child's standard error and what the child measured back.

#![cfg(all(unix, feature = "otel"))]

use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lens_fallbacks::config::CliOverrides;
use lens_fallbacks::env::ProcessEnv;
use lens_fallbacks::identity::RankContext;
use megatron_telemetry::lifecycle::{LifecycleOptions, MegatronTelemetry};
use megatron_telemetry::taxonomy;
use serde_json::Value;

const CHILD: &str = "LIFECYCLE_CHILD";
/// Where a child writes what it measured (`key=value` lines).
const MEASURED: &str = "LIFECYCLE_MEASURED";
/// The shutdown timeout of the hung-collector child, in milliseconds.
const HUNG_SHUTDOWN_MS: u64 = 2000;

/// Set by the program's own SIGTERM handler of the hung-collector child.
static PROGRAM_SAW_SIGTERM: AtomicBool = AtomicBool::new(false);

extern "C" fn program_handler(_signal: libc::c_int) {
    PROGRAM_SAW_SIGTERM.store(true, Ordering::Release);
}

/// Installs `program_handler` for SIGTERM, as a training program with
/// `--exit-signal-handler` does before telemetry is set up.
fn install_program_handler() {
    // SAFETY: an all-zero `sigaction` is a valid value to fill in; the
    // handler only stores to an atomic (async-signal-safe).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = program_handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&raw mut action.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()), 0);
    }
}

/// The hung-collector child: the program's handler must see SIGTERM at
/// once, and the shutdown that follows must stay within its timeout, while
/// lens's flush of the signal hangs on the collector.
fn graceful_with_a_hung_collector() {
    install_program_handler();
    let rank = RankContext::detect(&ProcessEnv).unwrap();
    let options = LifecycleOptions::new().with_exit_signal_handler(true);
    let mut telemetry = MegatronTelemetry::setup(&CliOverrides::default(), &rank, ProcessEnv, options).unwrap();
    assert!(telemetry.is_exporting());
    telemetry.begin_training_loop(None);
    for iteration in 0..3 {
        telemetry.loop_pass(iteration);
        drop(telemetry.iteration(iteration));
    }
    // Let the first export reach the collector and hang there.
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    // SAFETY: sends SIGTERM to this process.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    while !PROGRAM_SAW_SIGTERM.load(Ordering::Acquire) && signalled.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let reacted = signalled.elapsed();
    // The program drains: the loop ends, then telemetry shuts down.
    telemetry.end_training_loop();
    let shutdown_started = Instant::now();
    let report = telemetry.shutdown(Duration::from_millis(HUNG_SHUTDOWN_MS));
    let shutdown = shutdown_started.elapsed();
    let measured = format!(
        "reacted_ms={}\nshutdown_ms={}\nsignal_to_exit_ms={}\nreport={report}\n",
        reacted.as_millis(),
        shutdown.as_millis(),
        signalled.elapsed().as_millis()
    );
    std::fs::write(std::env::var(MEASURED).unwrap(), measured).unwrap();
}

/// The entry point of the children; in the parent run (no `LIFECYCLE_CHILD`)
/// it has nothing to do.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(CHILD) else { return };
    if mode == "graceful-hung" {
        return graceful_with_a_hung_collector();
    }
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
                    // What a rank whose peers vanish asks: set as the signal
                    // arrives under the terminating handlers (before their
                    // thread ends the process), never under the graceful ones.
                    let asked = Instant::now();
                    while !graceful
                        && !megatron_telemetry::signals::terminating()
                        && asked.elapsed() < Duration::from_secs(5)
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let line = format!("terminating={}\n", megatron_telemetry::signals::terminating());
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
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
    let file_export = [("MEGATRON_OTEL_EXPORTER", "file"), ("OTEL_METRICS_EXPORTER", "none")];
    run_child_with(mode, dir, rank, world_size, &file_export)
}

/// The child's standard error, as `run_child_with` kept it.
fn child_stderr(dir: &Path, mode: &str, rank: u32) -> String {
    std::fs::read_to_string(dir.join(format!("stderr-{mode}-{rank}.txt"))).unwrap_or_default()
}

/// Runs the child `mode` with `env` added, its standard error kept in
/// `dir` (see [`child_stderr`]).
fn run_child_with(mode: &str, dir: &Path, rank: u32, world_size: u32, env: &[(&str, &str)]) -> ExitStatus {
    let exe = std::env::current_exe().unwrap();
    let stderr = std::fs::File::create(dir.join(format!("stderr-{mode}-{rank}.txt"))).unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env(MEASURED, dir.join("measured.txt"))
        .env("MEGATRON_OTEL_ENABLED", "1")
        .envs(env.iter().copied())
        .env("MEGATRON_OTEL_FILE_DIR", dir)
        .env("MEGATRON_OTEL_RUN_ID", "run-process")
        .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks")
        .env("MEGATRON_OTEL_SPAN_GROUPS", "all")
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world_size.to_string())
        .env_remove("TRACEPARENT")
        .env_remove("SLURM_RESTART_COUNT")
        .env_remove("TORCHELASTIC_RESTART_COUNT")
        .stderr(stderr)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child {mode} did not finish in 60 s; its stderr:\n{}", child_stderr(dir, mode, rank));
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
    // The flag is set as the signal arrives; the child writes it unless the
    // handler's thread ended the process first (the main thread descheduled
    // on a loaded machine), so its absence proves nothing, and a `false`
    // fails. (The simulator's test of a SIGTERM behind a hung collector,
    // `e2e_signals`, fails if the flag is never set: its loop trains on.)
    let stderr = child_stderr(&dir, "terminate", 0);
    assert!(!stderr.contains("terminating=false"), "{stderr}");
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
    assert!(child_stderr(&dir, "graceful", 0).contains("terminating=false"), "{}", child_stderr(&dir, "graceful", 0));
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

/// A collector that never answers: a listener that accepts nothing (the
/// kernel completes the connections and takes in the requests, which wait
/// there). Its endpoint, with the listener to keep while it is used.
fn hung_collector() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    (listener, endpoint)
}

/// The `key=value` lines a child measured.
fn measured(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join("measured.txt")).unwrap_or_default();
    text.lines().filter_map(|line| line.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn with_the_graceful_option_a_hung_collector_delays_neither_the_program_s_handler_nor_its_shutdown() {
    let dir = temp_dir("graceful-hung");
    let (_collector, endpoint) = hung_collector();
    let shutdown_ms = HUNG_SHUTDOWN_MS.to_string();
    let env = [
        ("MEGATRON_OTEL_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        // Each export outlasts the shutdown: only the deadline ends them.
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000"),
        ("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", shutdown_ms.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "10"),
    ];
    let status = run_child_with("graceful-hung", &dir, 0, 1, &env);
    let stderr = child_stderr(&dir, "graceful-hung", 0);
    assert!(status.success(), "the child should exit normally, got {status:?}; its stderr:\n{stderr}");
    let measured = measured(&dir);
    let number = |key: &str| -> u64 {
        measured.get(key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {key} in {measured:?}"))
    };
    // The program's handler runs as soon as the signal arrives, not after a
    // flush that the collector holds for the whole shutdown timeout.
    assert!(number("reacted_ms") < 1000, "the program saw SIGTERM only after {measured:?}");
    // Its shutdown is bounded by its own timeout: it waits neither for the
    // signal's flush nor twice.
    let bound = HUNG_SHUTDOWN_MS + 1200;
    assert!(number("shutdown_ms") < bound, "shutdown took {measured:?}");
    assert!(number("signal_to_exit_ms") < bound, "from SIGTERM to the end of shutdown: {measured:?}");
    let report = &measured["report"];
    assert!(report.contains("did not finish in time"), "the collector hung: {report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_prints_the_shutdown_report_the_program_never_reaches() {
    let dir = temp_dir("terminate-report");
    let status = run_child("terminate", &dir, 0, 1);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the child should die by SIGTERM, got {status:?}");
    let exported = spans(&dir.join("traces-rank0.jsonl")).len();
    let stderr = child_stderr(&dir, "terminate", 0);
    let line = stderr
        .lines()
        .find(|line| line.starts_with("lens: SIGTERM: telemetry (rank 0) shut down: "))
        .unwrap_or_else(|| panic!("no shutdown report on stderr:\n{stderr}"));
    assert!(
        line.contains(&format!(
            "spans: {exported} exported, 0 dropped (0 queue full, 0 export failed, 0 at shutdown), 0 export errors"
        )),
        "{line}"
    );
    let traces = dir.join("traces-rank0.jsonl");
    assert!(line.contains(&format!("sent to traces: file {}", traces.display())), "{line}");
    // The interval, open at the signal.
    assert!(line.contains("; 1 open spans truncated"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_with_a_hung_collector_reports_the_cut_export_and_the_spool_that_keeps_the_spans() {
    let dir = temp_dir("terminate-hung");
    let spool = dir.join("spool");
    let (_collector, endpoint) = hung_collector();
    let env = [
        ("MEGATRON_OTEL_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000"),
        ("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "1000"),
        ("OTEL_BSP_SCHEDULE_DELAY", "10"),
        ("MEGATRON_OTEL_SPOOL_DIR", spool.to_str().unwrap()),
    ];
    let status = run_child_with("terminate", &dir, 0, 1, &env);
    let stderr = child_stderr(&dir, "terminate", 0);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}; its stderr:\n{stderr}");
    let line = stderr
        .lines()
        .find(|line| line.starts_with("lens: SIGTERM: telemetry (rank 0) shut down: "))
        .unwrap_or_else(|| panic!("no shutdown report on stderr:\n{stderr}"));
    assert!(line.contains("spans: 0 exported, "), "{line}");
    // The exports the collector held count as failed attempts.
    assert!(!line.contains(" 0 export errors"), "{line}");
    assert!(line.contains("did not finish in time: shut down spans"), "{line}");
    let kept = format!("the spans unsent at shutdown are kept in the crash spool {}/", spool.display());
    assert!(line.contains(&kept), "{line}");
    let advice = format!(": the next attempt of this job sends them, or `lens recover {}`", spool.display());
    assert!(line.ends_with(&advice), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
