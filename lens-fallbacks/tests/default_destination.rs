//! Where a program's telemetry goes when nothing says (SPEC A22), and what
//! it is told, as a new user sees it: each case runs this test binary again
//! as a child process (its own working directory, environment and standard
//! error), set up from its environment with `Telemetry::from_env`.
//!
//! - only `MYJOB_OTEL_ENABLED=1`, no collector on `localhost:4317`: files
//!   under `telemetry/<run_id>/` of the working directory, with the spans;
//!   the startup line and the shutdown report name the absolute path;
//! - a configured collector that refuses connections: the first failed
//!   export names the endpoint before the program reaches shutdown, and
//!   (over gRPC) says that no collector answered;
//! - a file cap: one warning, the dropped records counted in the report;
//! - a configuration that selects a transport this build lacks (the facade's
//!   features `otlp-grpc`, `otlp-http`, `prometheus`): a setup error naming
//!   the variable, its value and the feature, before anything is written;
//!   and without `otlp-grpc` the default rule writes files without probing.
//!   Run in both shapes: `cargo test -p lens-fallbacks --test
//!   default_destination` (gRPC) and the same with `--no-default-features
//!   --features otel` (files and console only).
//!
//! The "a collector answers" branch is tested at the function level in
//! `lens_fallbacks::config::destination` (a local listener), since setting an
//! endpoint here would count as configuring one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::config::{COLLECTOR_PROBE_TIMEOUT, DEFAULT_COLLECTOR, collector_answers};
use lens_fallbacks::groups::SpanGroup;
use lens_fallbacks::setup::{TRANSPORTS, Telemetry};

/// The variable that makes this binary's `child` test act as a program.
const CHILD: &str = "LENS_DEFAULT_DESTINATION_CHILD";
/// What the child writes on standard error just before it shuts down.
const SHUTTING_DOWN: &str = "child: shutting down";

/// The program each case runs: set up from the environment, a few spans,
/// in `wait` mode a pause until a scheduled export has failed, shutdown,
/// the report.
#[test]
#[expect(clippy::print_stderr, reason = "the child's standard error is what the parent reads")]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else { return };
    let telemetry = match Telemetry::from_env("MYJOB_OTEL") {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("child setup error: {error}");
            return;
        }
    };
    for step in 0..3_u64 {
        let _span =
            lens_fallbacks::span::managed_span(SpanGroup::JOB, "myjob.step", [KeyValue::new("myjob.step", step)]);
    }
    if mode == "wait" {
        // The batch processor exports every 200 ms: waits (at most 20 s)
        // until an export has failed, which the exporter reports before
        // the processor counts it.
        let started = Instant::now();
        while telemetry.report().spans.export_errors == 0 && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!("{SHUTTING_DOWN}");
    let report = telemetry.shutdown(Duration::from_millis(500));
    eprintln!("child report: {report}");
}

fn run_child(dir: &Path, mode: &str, env: &[(&str, &str)]) -> (Output, String) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", "child", "--nocapture", "--test-threads=1"]).current_dir(dir).env(CHILD, mode);
    for (key, _) in std::env::vars() {
        if key.starts_with("OTEL_") || key.starts_with("MYJOB_OTEL") || key.starts_with("NEMO_LENS") {
            command.env_remove(key);
        }
    }
    for variable in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
        "SLURM_JOB_ID",
        "TORCHELASTIC_RUN_ID",
    ] {
        command.env_remove(variable);
    }
    command.envs(env.iter().copied());
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (output, stderr)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lens-default-destination-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

#[test]
fn with_nothing_configured_spans_go_to_files_when_no_collector_answers_and_the_program_says_where() {
    let dir = temp_dir("files");
    let started = Instant::now();
    // Without gRPC the rule never picks the collector (and never probes).
    let collector = TRANSPORTS.otlp_grpc && collector_answers(DEFAULT_COLLECTOR, COLLECTOR_PROBE_TIMEOUT);
    let (_, stderr) = run_child(
        &dir,
        "quick",
        &[("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_RUN_ID", "run-a"), ("OTEL_SERVICE_NAME", "myjob")],
    );
    if collector {
        // A collector on this machine takes the default (the rule's other
        // branch, also tested with a listener in `config::destination`).
        assert!(stderr.contains("exports traces: OTLP grpc http://localhost:4317"), "{stderr}");
        assert!(!dir.join("telemetry").exists(), "{stderr}");
        return;
    }
    let traces = dir.join("telemetry/run-a/traces-rank0.jsonl");
    let content = std::fs::read_to_string(&traces).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", traces.display()));
    assert_eq!(content.matches(r#""name":"myjob.step""#).count(), 3, "{content}");
    assert!(dir.join("telemetry/run-a/metrics-rank0.jsonl").exists(), "{stderr}");
    // Said once at startup, with the host and the absolute path ...
    let startup: Vec<&str> = stderr.lines().filter(|l| l.starts_with("lens: rank 0 on host ")).collect();
    assert_eq!(startup.len(), 1, "{stderr}");
    assert!(startup[0].contains(&format!("traces: file {}", traces.display())), "{stderr}");
    // ... and in the shutdown report.
    let report = stderr.lines().find(|l| l.starts_with("child report:")).unwrap();
    assert!(report.contains("spans: 3 exported"), "{report}");
    assert!(report.contains(&format!("traces: file {}", traces.display())), "{report}");
    // No waiting on a collector that is not there.
    assert!(!stderr.contains("lens: warning"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unreachable_configured_collector_is_named_at_the_first_failed_export() {
    let dir = temp_dir("refused");
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", refused.local_addr().unwrap());
    drop(refused);
    let (_, stderr) = run_child(
        &dir,
        "wait",
        &[
            ("MYJOB_OTEL_ENABLED", "1"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("MYJOB_OTEL_SHUTDOWN_TIMEOUT_MS", "500"),
        ],
    );
    if !TRANSPORTS.otlp_grpc {
        let expected = format!("child setup error: OTEL_EXPORTER_OTLP_ENDPOINT={endpoint} selects OTLP over gRPC");
        assert!(stderr.contains(&expected), "{stderr}");
        assert!(stderr.contains("`otlp-grpc` of lens-fallbacks"), "{stderr}");
        assert!(!dir.join("telemetry").exists(), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let named = stderr
        .find(&format!("cannot export traces to the OTLP collector at {endpoint}"))
        .unwrap_or_else(|| panic!("no warning naming {endpoint}:\n{stderr}"));
    let shutting_down = stderr.find(SHUTTING_DOWN).unwrap();
    assert!(named < shutting_down, "named only at shutdown:\n{stderr}");
    // The export failed inside tonic (a transport error made into a
    // status): the warning says no collector answered, not that one
    // answered something.
    let warning = stderr[named..].lines().next().unwrap_or_default();
    assert!(warning.contains("span export: no answer from the collector (Unavailable: "), "{warning}");
    assert!(!warning.contains("the collector answered"), "{warning}");
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{stderr}");
    assert!(!dir.join("telemetry").exists(), "a configured destination wrote files");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rank of a plain `torchrun --nproc_per_node=4` launch (no `--rdzv-id`,
/// no `--standalone`: `TORCHELASTIC_RUN_ID=none`) has no run id in common
/// with its peers: it says so once, naming what would give one, and files
/// its telemetry under a run id of its own.
#[test]
fn a_rank_without_a_shared_run_id_says_what_would_give_one() {
    let dir = temp_dir("no-shared-run-id");
    let (_, stderr) = run_child(
        &dir,
        "files",
        &[
            ("MYJOB_OTEL_ENABLED", "1"),
            ("MYJOB_OTEL_EXPORTER", "file"),
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ],
    );
    let expected = "no run id is shared by the 4 ranks of this job (set MYJOB_OTEL_RUN_ID or NEMO_LENS_RUN_ID, launch \
                    under SLURM, or give torchrun --rdzv-id or --standalone: without either it sets \
                    TORCHELASTIC_RUN_ID=none): each rank drew its own, so the ranks' telemetry is filed as 4 runs and their \
                    traces do not join";
    assert_eq!(stderr.matches(expected).count(), 1, "{stderr}");
    // The run directories beside the crash spool's.
    let runs: Vec<_> = std::fs::read_dir(dir.join("telemetry"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name != "lens-spool")
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_ne!(runs[0], "none", "{runs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `first_rank_per_node` with no local rank (`LOCAL_RANK`, `SLURM_LOCALID`)
/// cannot tell a node's first rank: rank 1 of 2 exports (a missing local
/// rank is 0), and says why once; with `LOCAL_RANK=1` it neither exports
/// nor warns.
#[test]
fn first_rank_per_node_without_a_local_rank_says_every_rank_exports() {
    let warning = "MYJOB_OTEL_RANK_STRATEGY=first_rank_per_node, but neither LOCAL_RANK nor SLURM_LOCALID is set: \
                   each of the 2 ranks counts as its node's first and exports; have the launcher set LOCAL_RANK";
    let base = [
        ("MYJOB_OTEL_ENABLED", "1"),
        ("MYJOB_OTEL_EXPORTER", "file"),
        ("MYJOB_OTEL_RUN_ID", "per-node"),
        ("MYJOB_OTEL_RANK_STRATEGY", "first_rank_per_node"),
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
    ];
    let dir = temp_dir("per-node-no-local");
    let (_, stderr) = run_child(&dir, "files", &base);
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    assert!(dir.join("telemetry/per-node/traces-rank1.jsonl").exists(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);

    let dir = temp_dir("per-node-local");
    let (_, stderr) = run_child(&dir, "files", &[&base[..], &[("LOCAL_RANK", "1")]].concat());
    assert!(!stderr.contains("neither LOCAL_RANK"), "{stderr}");
    assert!(!dir.join("telemetry/per-node/traces-rank1.jsonl").exists(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An OTLP/HTTP collector on 127.0.0.1 that accepts every export and
/// answers that it rejected 2 of its spans (OTLP's partial success); the
/// number of exports it answered, once `done` is set.
fn partially_rejecting_collector() -> (u16, std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<u64>)
{
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = std::sync::Arc::clone(&done);
    // ExportTraceServiceResponse { partial_success: { rejected_spans: 2, error_message: "quota" } }.
    const RESPONSE: &[u8] = b"\x0a\x09\x08\x02\x12\x05quota";
    let server = std::thread::spawn(move || {
        let mut answered = 0;
        let started = Instant::now();
        while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut request = Vec::new();
            let mut buffer = [0_u8; 65536];
            // Headers, then the body their Content-Length announces.
            loop {
                let text = String::from_utf8_lossy(&request).to_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(read) => request.extend_from_slice(&buffer[..read]),
                }
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: \
                 close\r\n\r\n",
                RESPONSE.len()
            );
            if stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(RESPONSE)).is_ok() {
                answered += 1;
            }
        }
        answered
    });
    (port, done, server)
}

/// A collector that accepts exports but rejects some of their spans (OTLP's
/// partial success) is said once, with its message, and the shutdown report
/// counts the rejected spans among the exported (before, they read as
/// delivered).
#[test]
fn spans_a_collector_rejects_in_a_partial_success_are_counted_and_said() {
    if !TRANSPORTS.otlp_http {
        return;
    }
    let dir = temp_dir("partial-success");
    let (port, done, server) = partially_rejecting_collector();
    let endpoint = format!("http://127.0.0.1:{port}");
    let (_, stderr) = run_child(
        &dir,
        "files",
        &[
            ("MYJOB_OTEL_ENABLED", "1"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
    );
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered = server.join().unwrap();
    assert!(answered >= 1, "{stderr}");
    let warning = format!(
        "span export: the OTLP collector at {endpoint}/v1/traces rejected 2 span(s) of an export it accepted \
         (partial success): quota; rejected spans are not sent again, and the shutdown report counts them"
    );
    assert_eq!(stderr.matches(&warning).count(), 1, "{stderr}");
    let report = stderr.lines().find(|l| l.starts_with("child report: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        report.contains(&format!("{} of the exported spans rejected by the collector (partial success)", 2 * answered)),
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_file_drops_records_with_one_warning_and_counts_them() {
    let dir = temp_dir("cap");
    let (_, stderr) = run_child(
        &dir,
        "quick",
        &[
            ("MYJOB_OTEL_ENABLED", "1"),
            ("MYJOB_OTEL_EXPORTER", "file"),
            ("MYJOB_OTEL_RUN_ID", "run-cap"),
            ("MYJOB_OTEL_FILE_MAX_BYTES", "10"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
    );
    let traces = dir.join("telemetry/run-cap/traces-rank0.jsonl");
    assert_eq!(std::fs::read_to_string(&traces).unwrap(), "", "{stderr}");
    assert_eq!(stderr.matches("reached its cap of 10 bytes").count(), 1, "{stderr}");
    let report = stderr.lines().find(|l| l.starts_with("child report:")).unwrap();
    assert!(report.contains("3 of the exported records not written: file size cap reached"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A configuration that selects a transport this build lacks stops setup
/// with an error naming the variable, its value and the cargo feature,
/// before any file is written; a transport the build has sets up.
#[test]
fn a_transport_this_build_lacks_is_a_setup_error_before_anything_is_written() {
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", refused.local_addr().unwrap());
    drop(refused);
    let cases: [(&str, &str, bool, &str); 3] = [
        ("MYJOB_OTEL_EXPORTER", "otlp", TRANSPORTS.otlp_grpc, "otlp-grpc"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", TRANSPORTS.otlp_http, "otlp-http"),
        ("OTEL_METRICS_EXPORTER", "prometheus", TRANSPORTS.prometheus, "prometheus"),
    ];
    for (variable, value, present, feature) in cases {
        if present && value == "prometheus" {
            // Served on a real port: the runtime's own tests cover it.
            continue;
        }
        let dir = temp_dir(&format!("missing-{feature}"));
        let (_, stderr) = run_child(
            &dir,
            "quick",
            &[
                ("MYJOB_OTEL_ENABLED", "1"),
                ("MYJOB_OTEL_EXPORTER", if variable == "OTEL_METRICS_EXPORTER" { "file" } else { "otlp" }),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                (variable, value),
                ("MYJOB_OTEL_SHUTDOWN_TIMEOUT_MS", "200"),
            ],
        );
        let refused = stderr.lines().find(|line| line.starts_with("child setup error: "));
        if present {
            assert_eq!(refused, None, "{variable}={value}: {stderr}");
        } else {
            let line = refused.unwrap_or_else(|| panic!("{variable}={value} set up without {feature}:\n{stderr}"));
            assert!(line.contains(&format!("{variable}={value} selects ")), "{line}");
            assert!(line.contains(&format!("`{feature}` of lens-fallbacks")), "{line}");
            assert!(!dir.join("telemetry").exists(), "{variable}={value} wrote files before refusing:\n{stderr}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
