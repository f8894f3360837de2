//! `lens` on the simulator's export, as CI runs it: one short simulator run
//! (2 data-parallel ranks, 8 iterations logged every 2, a save every 4,
//! every iteration span, rank metrics from every rank), shared by every
//! assertion; then the real `lens` binary's `analyze` and `trace-view` on
//! its `file` export, against exact values.
//!
//! The simulator is the workspace's `megatron-train-sim` binary, found next
//! to `lens` in the target directory (`cargo test --workspace`, as
//! `cargo xtask ci` runs it, builds both). When it is not there the test
//! fails and says how to build it; it never skips.

#![expect(dead_code, reason = "this binary uses a part of the support module")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lens_fallbacks::otlp_file;
use lens_training::goodput_view;

mod support;
use support::{LENS, TempDir, lens, temp_dir};

/// The run id of the shared run (its directory under `telemetry/`).
const RUN_ID: &str = "lens-ci";
/// The run's schedule.
const ITERATIONS: u64 = 8;

/// The simulator binary next to `lens`.
fn simulator() -> PathBuf {
    let path = Path::new(LENS).with_file_name(format!("megatron-train-sim{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the simulator binary {} is not built: run `cargo build -p megatron-train-sim` (or `cargo test --workspace`, \
         which builds it) before `cargo test -p lens-command`",
        path.display()
    );
    path
}

/// The shared run: its `telemetry/` directory. Its test directory lives as
/// long as the process (a static is never dropped), so it stays behind; the
/// next test process removes it ([`sweep_dead_fixtures`]).
fn export() -> &'static Path {
    static EXPORT: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    &EXPORT
        .get_or_init(|| {
            sweep_dead_fixtures();
            let dir = temp_dir("simulator");
            let telemetry = dir.join("telemetry");
            let mut command = Command::new(simulator());
            command
                .current_dir(&dir)
                .args(["--hidden-size", "16", "--num-attention-heads", "2", "--num-layers", "2", "--seq-length", "8"])
                .args(["--train-iters", &ITERATIONS.to_string(), "--log-interval", "2", "--nproc-per-node", "2"])
                .args(["--otel-span-groups", "per_step", "--save", "ckpt", "--save-interval", "4"])
                .env("MEGATRON_OTEL_ENABLED", "1")
                .env("MEGATRON_OTEL_EXPORTER", "file")
                .env("MEGATRON_OTEL_FILE_DIR", telemetry.join(RUN_ID))
                .env("MEGATRON_OTEL_RUN_ID", RUN_ID)
                .env("MEGATRON_OTEL_RANK_METRICS", "1")
                .env("OTEL_METRIC_EXPORT_INTERVAL", "50")
                .env("TMPDIR", dir.as_path())
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .env_remove("OTEL_TRACES_SAMPLER")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = command.spawn().unwrap();
            let started = Instant::now();
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                if started.elapsed() > Duration::from_secs(180) {
                    let _ = child.kill();
                    panic!("the simulator ran past 180 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            assert!(status.success(), "simulator: {status}\n{stderr}");
            assert!(
                telemetry.join(RUN_ID).join("traces-rank1.jsonl").is_file(),
                "the simulator {} wrote no export under {}: was it built without its `otel` feature? Rebuild it with \
             `cargo build -p megatron-train-sim`\n{stderr}",
                simulator().display(),
                telemetry.display()
            );
            (dir, telemetry)
        })
        .1
}

/// Removes the shared runs that earlier test processes left (about 9 MB
/// each), those whose process is gone: `lens-command-simulator-PID-N` with
/// no `/proc/PID`. Where there is no `/proc` nothing is removed (every
/// process would look gone), and a PID in use again keeps its directory.
fn sweep_dead_fixtures() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("lens-command-simulator-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[test]
fn lens_analyze_reads_the_simulators_export() {
    let telemetry = export();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), telemetry]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    // Stragglers: both ranks wrote rank metrics.
    assert!(stdout.starts_with("stragglers (2 ranks with rank metrics, windows of 4 log intervals):\n"), "{stdout}");
    // Goodput: one attempt, the export rank (1), every iteration kept, the
    // last save at iteration 8, a normal end.
    let attempt = stdout.lines().find(|l| l.starts_with("  attempt ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        attempt.starts_with(&format!("  attempt {RUN_ID}: rank 1, "))
            && attempt.ends_with(&format!(", iterations 1-{ITERATIONS}, last save at {ITERATIONS}, normal end")),
        "{attempt}"
    );
    assert!(
        stdout.contains(&format!("  iterations: {ITERATIONS} kept, 0 pending, 0 lost, over 1 attempt(s)\n")),
        "{stdout}"
    );
    assert!(stdout.ends_with("hangs (the hang watchdog's span events and gauge):\n  no hang suspected\n"), "{stdout}");
    assert!(!stdout.contains("skipped"), "{stdout}");

    // The goodput read in two passes is exactly the goodput of every span
    // held at once.
    let traces = telemetry.join(RUN_ID).join("traces-rank1.jsonl");
    let spans = otlp_file::read_span_file(&traces, 1).unwrap().spans;
    let full = goodput_view::breakdown(&[goodput_view::Attempt { name: RUN_ID.into(), rank: 1, spans: spans.clone() }]);
    let mut section = Vec::new();
    goodput_view::write_section(&mut section, &full).unwrap();
    assert!(stdout.contains(&String::from_utf8(section).unwrap()), "{stdout}");
    let analysis = lens_command::analyze::analyze(telemetry).unwrap();
    assert_eq!(analysis.goodput.as_ref(), Some(&full));
    assert!(analysis.goodput_records < spans.len(), "{} records for {} spans", analysis.goodput_records, spans.len());
    assert!(analysis.advice.megatron && analysis.advice.prefix.as_deref() == Some("MEGATRON_OTEL"));
}

#[test]
fn lens_trace_view_reads_the_simulators_export() {
    let run = export().join(RUN_ID);
    let out = run.join("view.json");
    let (code, stdout, stderr) = lens(&["trace-view".as_ref(), run.as_path(), "--out".as_ref(), out.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    let spans = otlp_file::read_span_file(&run.join("traces-rank1.jsonl"), 1).unwrap().spans.len();
    assert!(
        stdout.contains(&format!("\nread {spans} span(s) of 1 rank(s) from 1 file(s); ")),
        "{spans} spans in the file:\n{stdout}"
    );
    let count = |name: &str| -> u64 {
        let row =
            stdout.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("{stdout}"));
        row.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    assert_eq!(count("megatron.train.iteration"), ITERATIONS);
    assert_eq!(count("megatron.train.iteration.forward_backward"), ITERATIONS);
    assert_eq!(count("megatron.checkpoint.save"), ITERATIONS / 4);
    assert_eq!(count("megatron.checkpoint.exit_finalize"), 1);
    assert!(stdout.contains("(change them with MEGATRON_OTEL_SPAN_GROUPS)\n"), "{stdout}");
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let slices = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").count();
    assert_eq!(slices, spans);
    assert_eq!(trace["otherData"]["generator"], "lens trace-view");
}
