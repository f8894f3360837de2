//! A setup's replay never waits for the collector: with a collector that
//! never answers, setup returns at once with the dead attempt's progress
//! record read, the `lens-replay` thread holds the spool's lock while it
//! tries, shutdown is not held past its own deadline, and the spool is
//! kept when the export times out, for the next attempt or `lens recover`.
//!
//! The test owns the process's telemetry lifetime: a binary of its own.

#[path = "support/dead_spool.rs"]
mod dead_spool;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dead_spool::{RANK_0, dead_spool, spooling_config, temp_dir};
use lens_core::config::Signal;
use lens_otel_runtime::pipeline::{PipelineOptions, setup};
use lens_otel_runtime::spool::replay::{Claim, ReplayOptions};
use lens_otel_runtime::spool::{replay_dir, replayed_progress};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// A collector that takes every request and never answers.
#[derive(Debug, Clone, Default)]
struct Unanswered {
    requests: Arc<AtomicUsize>,
}

impl SpanExporter for Unanswered {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        self.requests.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

#[test]
fn setup_does_not_wait_for_a_collector_that_never_answers_and_the_spool_is_kept() {
    let dir = temp_dir("background");
    let dead = dead_spool(&dir, 0);
    let mut config = spooling_config(&dir);
    let export_timeout = Duration::from_secs(8);
    config.otel.otlp_mut(Signal::Traces).timeout = export_timeout;
    let collector = Unanswered::default();
    let options = PipelineOptions::default().with_span_exporter(collector.clone());
    let env = std::collections::HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "new-run".to_string())]);

    let started = Instant::now();
    let telemetry = setup(&config, &RANK_0, Vec::new(), options, &env).expect("setup");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "setup waited {took:?} (the export timeout is {export_timeout:?})");
    let progress = replayed_progress().expect("the progress record, read at setup");
    assert_eq!((progress.reached, progress.completed, progress.durable), (17, Some(16), Some(10)));

    // The replay thread sends the spans (bounded: 8 s) and holds the lock
    // meanwhile: another replayer sees a live writer.
    let deadline = Instant::now() + export_timeout;
    while collector.requests.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(collector.requests.load(Ordering::SeqCst), 1, "one request of the dead attempt's 3 spans");
    let options = ReplayOptions::default();
    let own = telemetry.spool_path().expect("this lifetime's spool").to_path_buf();
    let busy = replay_dir(&dir, Claim::All, Some(&own), &options, &mut |_, _| Ok(()));
    assert_eq!((busy.alive, busy.spans), (1, 0), "the replay thread holds the spool's lock");

    // Shutdown waits for the replay no longer than its own deadline.
    let started = Instant::now();
    telemetry.shutdown(Duration::from_millis(300));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "shutdown took {took:?} with a 300 ms deadline");
    assert!(dead.exists(), "kept while unanswered");

    // Once the export timed out (8 s after it began), the spool is kept,
    // its lock free: the next attempt or `lens recover` sends it.
    let deadline = Instant::now() + export_timeout + Duration::from_secs(10);
    let mut sent = Vec::new();
    let mut report = replay_dir(&dir, Claim::All, Some(&own), &options, &mut |spans, _| {
        sent.extend(spans);
        Ok(())
    });
    while report.alive > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        report = replay_dir(&dir, Claim::All, Some(&own), &options, &mut |spans, _| {
            sent.extend(spans);
            Ok(())
        });
    }
    assert_eq!(report.consumed, [dead], "the dead attempt's spool was kept until now");
    assert_eq!(sent.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}
