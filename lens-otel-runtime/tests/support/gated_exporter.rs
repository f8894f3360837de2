//! A span exporter whose exports block (as a blocking HTTP client would)
//! until the test opens its gate, or 30 s pass: a batch the export worker
//! took stays in flight, so tests can hold a queue full or an export open
//! across a shutdown. Shared by the test files through `#[path]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lens_otel_runtime::exporters::testing::KeepingSpanExporter;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

#[derive(Debug, Default)]
pub(crate) struct Gated {
    open: Mutex<bool>,
    opened: Condvar,
    /// Exports begun (waiting at the gate or past it).
    pub(crate) entered: AtomicU64,
    /// What passed the gate.
    pub(crate) store: KeepingSpanExporter,
}

impl Gated {
    /// Waits (every millisecond, at most `timeout`) until an export has
    /// begun; returns how many have.
    pub(crate) fn wait_entered(&self, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        while self.entered.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.entered.load(Ordering::SeqCst)
    }

    /// Lets every export waiting now, and every later one, through.
    pub(crate) fn open(&self) {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.opened.notify_all();
    }
}

/// A handle on a [`Gated`] exporter (the exporter a processor owns).
#[derive(Clone, Debug)]
pub(crate) struct GatedHandle(pub(crate) Arc<Gated>);

impl SpanExporter for GatedHandle {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let gated = &self.0;
        gated.entered.fetch_add(1, Ordering::SeqCst);
        let closed = gated.open.lock().unwrap_or_else(PoisonError::into_inner);
        let waited = gated.opened.wait_timeout_while(closed, Duration::from_secs(30), |open| !*open);
        drop(waited.unwrap_or_else(PoisonError::into_inner));
        gated.store.export(batch).await
    }
}
