//! The control file applied at `Training::iteration`, against the SDK's
//! in-memory exporters: a window that narrows the span groups and pauses
//! the per-rank counters holds for exactly its iterations, the generation
//! gauge follows, and the interval's span gets the change events; a pause
//! counts neither the paused iterations nor their time, whenever the log
//! intervals fall. (The multi-rank behaviour is the simulator's
//! `tests/e2e_control.rs`.)
//!
//! The line a window applied late writes on standard error says why: the
//! attempt began inside the window, or the rank read the file late. Those
//! cases run this test binary again as a child process (its `late_child`
//! test, with `LENS_TRAINING_CONTROL_CHILD` set) and read its standard
//! error.
//!
//! Its own test binary: the gate is process-wide, and the tests that set
//! telemetry up in this process take turns.

#![cfg(feature = "testing")]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lens_fallbacks::config::LensConfig;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::{RankContext, SetupOptions, SpanGroup, Telemetry, managed_span, setup_telemetry};
use lens_training::names::{CONTROL_CHANGE_EVENT, CONTROL_GENERATION, ITERATIONS, PHASE_ATTRIBUTE, PHASE_TIME, spans};
use lens_training::phases::Phase;
use lens_training::{RankCoordinates, Training, TrainingOptions};
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};

static SERIAL: Mutex<()> = Mutex::new(());

/// Telemetry setup is process-global: the tests that set it up in this
/// process take turns.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

const RANK_0: RankCoordinates = RankCoordinates { rank: 0, local_rank: 0, pipeline: 0, tensor: 0, data: 0 };

/// A control file holding `text`, in a directory only this user can write
/// (the job refuses any other); its directory, then the file.
fn control_file(tag: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("lens-training-control-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.join("control.json");
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, file)
}

/// Telemetry with every span group and the per-rank counters, reading the
/// control `file` every 20 ms, into in-memory exporters.
fn setup_with_control(file: &Path) -> (Arc<Telemetry>, KeepingSpanExporter, InMemoryMetricExporter) {
    let span_exporter = KeepingSpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let config = LensConfig {
        enabled: true,
        rank_metrics: true,
        span_groups: "all".to_string(),
        run_id: "control-test".to_string(),
        control_file: Some(file.to_path_buf()),
        control_poll: Duration::from_millis(20),
        ..LensConfig::default()
    };
    let options = SetupOptions::new()
        .with_env(BTreeMap::<String, String>::new())
        .with_span_exporter(span_exporter.clone())
        .with_metric_exporter(metrics.clone());
    let telemetry = Arc::new(setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup"));
    (telemetry, span_exporter, metrics)
}

/// The latest value of the u64 counter or gauge `name`.
fn last_u64(metrics: &InMemoryMetricExporter, name: &str) -> Option<u64> {
    let mut value = None;
    for rm in metrics.get_finished_metrics().unwrap() {
        for sm in rm.scope_metrics() {
            for metric in sm.metrics().filter(|m| m.name() == name) {
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                        value = sum.data_points().map(|p| p.value()).last().or(value);
                    }
                    AggregatedMetrics::U64(MetricData::Gauge(gauge)) => {
                        value = gauge.data_points().map(|p| p.value()).last().or(value);
                    }
                    _ => {}
                }
            }
        }
    }
    value
}

/// The latest value of the phase-time counter's `phase` series, seconds.
fn phase_seconds(metrics: &InMemoryMetricExporter, phase: Phase) -> Option<f64> {
    let mut value = None;
    for rm in metrics.get_finished_metrics().unwrap() {
        for sm in rm.scope_metrics() {
            for metric in sm.metrics().filter(|m| m.name() == PHASE_TIME.name) {
                if let AggregatedMetrics::F64(MetricData::Sum(sum)) = metric.data() {
                    let of_phase = sum.data_points().filter(|p| {
                        p.attributes()
                            .any(|kv| kv.key.as_str() == PHASE_ATTRIBUTE && kv.value.as_str() == phase.as_str())
                    });
                    value = of_phase.map(|p| p.value()).last().or(value);
                }
            }
        }
    }
    value
}

#[test]
fn a_window_narrows_the_groups_and_pauses_the_counters_for_exactly_its_iterations() {
    let _serial = serial();
    let (dir, file) = control_file(
        "window",
        r#"{"generation": 4, "span_groups": "default", "rank_metrics": false, "hang_timeout_s": 0,
            "from_iteration": 3, "until_iteration": 5}"#,
    );
    let (telemetry, span_exporter, metrics) = setup_with_control(&file);
    let training = Training::new(&telemetry, TrainingOptions::new(RANK_0));
    {
        let _interval = managed_span(SpanGroup::JOB, "interval", []);
        for counter in 0..8 {
            drop(training.iteration(counter));
            training.log_interval();
        }
    }
    training.finish();
    drop(training);
    let telemetry = Arc::try_unwrap(telemetry).expect("the only handle");
    assert!(telemetry.shutdown(Duration::from_secs(5)).completed());

    let finished = span_exporter.get_finished_spans().unwrap();
    let iterations: Vec<i64> = finished
        .iter()
        .filter(|s| s.name == spans::ITERATION)
        .filter_map(|s| s.attributes.iter().find(|kv| kv.key.as_str() == "dl.training.iteration"))
        .map(|kv| kv.value.to_string().parse().unwrap())
        .collect();
    let mut sorted = iterations.clone();
    sorted.sort_unstable();
    // The file counts as the loop does (the counter `Training::iteration`
    // gets); the generic span's `dl.training.iteration` is one more.
    assert_eq!(sorted, [1, 2, 3, 7, 8], "`default` holds no step group: counters 3 to 5 are not recorded");
    let interval = finished.iter().find(|s| s.name == "interval").expect("the interval");
    let events: Vec<&str> = interval.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(events, [CONTROL_CHANGE_EVENT, CONTROL_CHANGE_EVENT], "the window's start and end");
    // Paused during 3..=5: 5 of 8 iterations counted.
    assert_eq!(last_u64(&metrics, ITERATIONS.name), Some(5));
    assert_eq!(last_u64(&metrics, CONTROL_GENERATION.name), Some(4));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A control file removed sends the job back to its launch configuration;
/// put back as it was, it applies again (before, the job took the same
/// generation for a version it had already applied and ignored it, while
/// `lens control --show` said it applied).
#[test]
fn a_control_file_removed_and_put_back_applies_again() {
    let _serial = serial();
    let text = r#"{"generation": 2, "span_groups": "default", "from_iteration": 0}"#;
    let (dir, file) = control_file("restored", text);
    let (telemetry, span_exporter, _metrics) = setup_with_control(&file);
    let training = Training::new(&telemetry, TrainingOptions::new(RANK_0));
    // Three polls' time (20 ms each) and more for the watcher to see a change.
    let settle = || std::thread::sleep(Duration::from_millis(300));
    settle();
    for counter in 0..3 {
        drop(training.iteration(counter));
    }
    std::fs::remove_file(&file).unwrap();
    settle();
    for counter in 3..5 {
        drop(training.iteration(counter));
    }
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    settle();
    for counter in 5..8 {
        drop(training.iteration(counter));
    }
    training.finish();
    drop(training);
    let telemetry = Arc::try_unwrap(telemetry).expect("the only handle");
    assert!(telemetry.shutdown(Duration::from_secs(5)).completed());
    let mut iterations: Vec<i64> = span_exporter
        .get_finished_spans()
        .unwrap()
        .iter()
        .filter(|s| s.name == spans::ITERATION)
        .filter_map(|s| s.attributes.iter().find(|kv| kv.key.as_str() == "dl.training.iteration"))
        .map(|kv| kv.value.to_string().parse().unwrap())
        .collect();
    iterations.sort_unstable();
    assert_eq!(iterations, [4, 5], "recorded only while the file was away (counters 3 and 4)");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The counters come up to date at the window's boundaries, not only at a
/// log interval: with one log interval, after the window, neither the
/// paused iterations nor the time spent in them is counted (before the
/// fix, that interval counted all 8 iterations and the paused time).
#[test]
fn a_pause_counts_neither_the_paused_iterations_nor_their_time_with_no_log_interval_inside_it() {
    const PAUSED_FORWARD: Duration = Duration::from_millis(200);
    let _serial = serial();
    let (dir, file) =
        control_file("pause", r#"{"generation": 2, "rank_metrics": false, "from_iteration": 3, "until_iteration": 5}"#);
    let (telemetry, _spans, metrics) = setup_with_control(&file);
    let training = Training::new(&telemetry, TrainingOptions::new(RANK_0));
    for counter in 0..8 {
        let step = training.iteration(counter);
        {
            let _forward = training.phase(Phase::Forward);
            if (3..=5).contains(&counter) {
                std::thread::sleep(PAUSED_FORWARD);
            }
        }
        drop(step);
    }
    // The only log interval, after the window.
    training.log_interval();
    training.finish();
    drop(training);
    let telemetry = Arc::try_unwrap(telemetry).expect("the only handle");
    assert!(telemetry.shutdown(Duration::from_secs(5)).completed());

    assert_eq!(last_u64(&metrics, ITERATIONS.name), Some(5), "iterations 0 to 2 and 6 to 7");
    // 3 x 200 ms of forward ran paused; the forward time counted is that
    // of the other iterations, which do not sleep (a generous bound).
    let forward = phase_seconds(&metrics, Phase::Forward).expect("the forward series");
    assert!(forward < 1.5 * PAUSED_FORWARD.as_secs_f64(), "the paused forward time is not counted: {forward} s");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The variable that makes this binary's `late_child` test run a rank's
/// loop: `<first iteration>:<control hold>`.
const CHILD: &str = "LENS_TRAINING_CONTROL_CHILD";
/// The control file the child reads.
const CHILD_FILE: &str = "LENS_TRAINING_CONTROL_CHILD_FILE";

/// The child: a rank whose attempt begins at the first iteration its
/// parent gives, taking what its control thread read from the hold on
/// (`TrainingOptions::with_control_hold`, as a rank whose poll came late).
#[test]
fn late_child() {
    let Ok(spec) = std::env::var(CHILD) else { return };
    let (first, hold) = spec.split_once(':').expect("<first>:<hold>");
    let (first, hold): (u64, u64) = (first.parse().unwrap(), hold.parse().unwrap());
    let file = PathBuf::from(std::env::var_os(CHILD_FILE).expect("the control file"));
    let (telemetry, _spans, _metrics) = setup_with_control(&file);
    let training = Training::new(&telemetry, TrainingOptions::new(RANK_0).with_control_hold(hold));
    for counter in first..first + 6 {
        drop(training.iteration(counter));
    }
    training.finish();
    drop(training);
    let telemetry = Arc::try_unwrap(telemetry).expect("the only handle");
    assert!(telemetry.shutdown(Duration::from_secs(5)).completed());
}

/// Runs `late_child` with the window of iterations 3 to 20 in its control
/// file; the line of its standard error that says the window applies.
fn applied_line(tag: &str, first: u64, hold: u64) -> String {
    let (dir, file) =
        control_file(tag, r#"{"generation": 4, "sampling_ratio": 0.5, "from_iteration": 3, "until_iteration": 20}"#);
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "late_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{first}:{hold}"))
        .env(CHILD_FILE, &file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
    let applied: Vec<&str> = stderr.lines().filter(|l| l.contains("applies generation 4")).collect();
    assert_eq!(applied.len(), 1, "said once: {stderr}");
    applied[0].to_string()
}

#[test]
fn a_window_applied_at_the_attempt_s_first_iteration_says_the_attempt_began_inside_it() {
    // A resumed attempt begins at iteration 5, inside the window from 3.
    let line = applied_line("began-inside", 5, 0);
    assert!(
        line.starts_with(
            "lens: control: rank 0 applies generation 4 at iteration 5, 2 iteration(s) late (the window starts at \
             iteration 3; this attempt began at iteration 5, inside the window): "
        ),
        "{line}"
    );
    assert!(!line.contains("read the file late"), "{line}");
}

#[test]
fn a_window_applied_after_the_attempt_s_first_iteration_says_the_rank_read_the_file_late() {
    // The attempt begins at iteration 5, inside the window from 3, but this
    // rank takes the file only at iteration 8: its read was late, whatever
    // the attempt's start.
    let line = applied_line("read-late", 5, 8);
    assert!(
        line.starts_with(
            "lens: control: rank 0 applies generation 4 at iteration 8, 5 iteration(s) late (the window starts at \
             iteration 3; this rank read the file late): "
        ),
        "{line}"
    );
}
