//! A short attempt still delivers what the previous attempt left: its
//! shutdown waits, within its deadline, for the `lens-replay` thread to send
//! the dead attempt's spans before the span exporter shuts down, so the
//! spool is consumed, not kept for a next attempt that may never come. The
//! spans go one per request, so that the replay is still sending when
//! shutdown begins.
//!
//! The test owns the process's telemetry lifetime: a binary of its own.

#[path = "support/dead_spool.rs"]
mod dead_spool;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dead_spool::{RANK_0, dead_spool, spooling_config, temp_dir};
use lens_otel_runtime::pipeline::{PipelineOptions, setup};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// A collector that answers each request after a delay, keeping the names.
#[derive(Debug, Clone, Default)]
struct Slow {
    names: Arc<Mutex<Vec<String>>>,
}

/// How long `Slow` takes to answer.
const ANSWER_AFTER: Duration = Duration::from_millis(300);

impl SpanExporter for Slow {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        std::thread::sleep(ANSWER_AFTER);
        self.names.lock().unwrap().extend(batch.iter().map(|span| span.name.to_string()));
        Ok(())
    }
}

#[test]
fn a_shutdown_right_after_setup_waits_for_the_replay_and_consumes_the_spool() {
    let dir = temp_dir("shutdown-waits");
    let dead = dead_spool(&dir, 0);
    let collector = Slow::default();
    let options = PipelineOptions::default().with_span_exporter(collector.clone());
    let env = std::collections::HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "new-run".to_string())]);
    let mut config = spooling_config(&dir);
    config.otel.batch.max_export_batch_size = 1;
    // From before setup: the replay's first request begins during it.
    let started = Instant::now();
    let telemetry = setup(&config, &RANK_0, Vec::new(), options, &env).expect("setup");
    let report = telemetry.shutdown(Duration::from_secs(10));
    let took = started.elapsed();
    assert!(took >= 3 * ANSWER_AFTER, "shutdown returned after {took:?}, before the replay's three requests");
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    let mut names = collector.names.lock().unwrap().clone();
    names.sort();
    assert_eq!(
        names,
        ["megatron.train", "megatron.train.iteration", "megatron.train.iteration.forward_backward"],
        "the dead attempt's three spans, one request each, sent before the exporter shut down"
    );
    assert!(!dead.exists(), "the dead attempt's spool is consumed once its spans are sent");
    assert!(report.spool_kept.is_none(), "nothing of this lifetime was left unsent: {report}");
    let _ = std::fs::remove_dir_all(&dir);
}
