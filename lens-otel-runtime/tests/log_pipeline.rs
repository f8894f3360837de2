//! Log records go through lens's batch pipeline (issue #10 item 5): counted in the shutdown report, dropped and counted when the queue
//! is full, and configured from the validated configuration only:
//! `OTEL_BLRP_*` in the environment changes nothing.
//!
//! This binary owns the process's `log` logger and its environment, so
//! everything runs in one test function, in order.

use std::time::Duration;

use lens_core::config::{ExporterKind, LensConfig};
use lens_core::identity::RankContext;
use lens_core::report::ShutdownReport;
use lens_otel_runtime::pipeline::{PipelineOptions, setup};

const RECORDS: usize = 200;

/// One lifetime that logs `RECORDS` records to a file; returns its report
/// and how many records the file holds.
fn run(name: &str, max_queue_size: usize) -> (ShutdownReport, usize) {
    let dir = std::env::temp_dir().join(format!("lens-log-pipeline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = LensConfig {
        enabled: true,
        rank_strategy: "all_ranks".into(),
        traces_enabled: false,
        metrics_enabled: false,
        logs_enabled: true,
        exporter: Some(ExporterKind::File),
        file_dir: Some(dir.clone()),
        ..LensConfig::default()
    };
    config.otel.batch.max_queue_size = max_queue_size;
    config.otel.batch.max_export_batch_size = config.otel.batch.max_export_batch_size.min(max_queue_size);
    let env = std::collections::HashMap::from([("NEMO_LENS_RUN_ID".to_string(), name.to_string())]);
    let telemetry = setup(&config, &RankContext::SINGLE, Vec::new(), PipelineOptions::default(), &env).expect("setup");
    for i in 0..RECORDS {
        log::info!("lens-test-record {i}");
    }
    let report = telemetry.shutdown(Duration::from_secs(10));
    let text = std::fs::read_to_string(dir.join("logs-rank0.jsonl")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (report, text.matches("lens-test-record").count())
}

#[test]
fn log_records_are_queued_counted_and_configured_by_lens_alone() {
    // The SDK's batch log processor would read these and drop all but one
    // record per minute; lens's processor reads no environment.
    // SAFETY: this binary runs one test, on one thread, before any other
    // thread of it reads the environment.
    unsafe {
        std::env::set_var("OTEL_BLRP_MAX_QUEUE_SIZE", "1");
        std::env::set_var("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "1");
        std::env::set_var("OTEL_BLRP_SCHEDULE_DELAY", "60000");
    }
    let (report, in_file) = run("roomy", 65_536);
    assert!(report.completed(), "{report}");
    assert_eq!(report.logs.accepted, RECORDS as u64, "{report}");
    assert_eq!(report.logs.exported, RECORDS as u64, "{report}");
    assert_eq!(report.logs.dropped(), 0, "{report}");
    assert_eq!(in_file, RECORDS, "{report}");
    assert!(report.to_string().contains(&format!("log records: {RECORDS} exported, 0 dropped")), "{report}");

    // A tiny queue: what does not fit is dropped and counted, the rest is
    // exported, and nothing goes missing from the accounting.
    let (report, in_file) = run("tiny", 4);
    let logs = report.logs;
    assert!(logs.dropped_queue_full > 0, "{report}");
    assert_eq!(logs.accepted + logs.dropped_queue_full, RECORDS as u64, "{report}");
    assert_eq!(logs.exported, logs.accepted, "{report}");
    assert_eq!(in_file as u64, logs.exported, "{report}");
}
