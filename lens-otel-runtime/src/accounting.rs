//! Counting what the metric pipeline exports and loses, and resending the
//! collections whose export failed: telemetry that cannot be exported is
//! counted and reported, never allowed to fail or block the job.
//!
//! The SDK's periodic reader logs a failed export and moves on; it keeps no
//! count and never retries. [`CountingMetricExporter`] wraps any push
//! exporter, counts the data points of every export that succeeded or
//! failed, and, when it has a [`MetricResender`] (the OTLP exporters give
//! one), keeps each collection whose export failed so that it reaches the
//! collector later.
//!
//! Metrics are exported cumulatively, so a lost sum is carried again by the
//! next successful export; a gauge is not: the values of the collections
//! that failed are gone, and a loss curve would have a gap. So a failed
//! collection is encoded to an OTLP `ExportMetricsServiceRequest` at once (a
//! `ResourceMetrics` of SDK 0.33 can be neither cloned nor rebuilt) and kept:
//!
//! - Each later export first resends the kept collections, oldest first, and
//!   only then exports the new one; while any kept collection still fails,
//!   the new one is kept behind it without an attempt. So collections reach
//!   the collector in the order they were taken, each with its original
//!   timestamps.
//! - Resends happen when the reader exports (every export interval, on a
//!   flush, and at shutdown), on the reader's own thread: nothing waits on
//!   the training thread.
//! - A kept collection is retried until the retry window (the spans'
//!   `<PREFIX>_EXPORT_RETRY_WINDOW_MS`, default 30 s) has passed since its
//!   first failure, and at least once; then it is dropped and counted.
//! - At most [`MAX_KEPT_COLLECTIONS`] collections are kept: beyond that the
//!   oldest is dropped and counted.
//! - Collections still kept when the exporter shuts down are counted as
//!   dropped.
//! - A shutdown whose deadline passes first (a hung collector holds the
//!   reader's thread in an export, so the exporter's own shutdown is never
//!   reached) [closes](MetricExportCounters::close) the counters: the
//!   collection the exporter holds and every kept one count as dropped,
//!   with their points, and nothing the exporter does later counts or warns.
//!
//! The counting itself is plain data ([`MetricLedger`], tested without
//! threads or collectors); [`MetricExportCounters`] is that ledger behind a
//! lock, taken on the reader's thread and by a report, never on a training
//! thread.
//!
//! Exporters without a resender (file, console, a custom exporter) fail
//! locally (a full disk, a closed standard output), where a resend would
//! most likely fail again: their failed collections are counted as dropped
//! at once. Prometheus is pulled, and its export does not fail.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;

use crate::diag::{RateLimit, redact, warn};
pub use crate::report::MetricExportSnapshot;

/// How often a failing metric exporter may warn.
const WARNING_PERIOD: Duration = Duration::from_secs(30);

/// The most failed collections kept for resending; beyond it the oldest are
/// dropped (and counted). With the default 10 s export interval and 30 s
/// retry window about four are ever kept; the cap bounds memory when the
/// interval is short. One of lens's collections encodes to a few kilobytes.
pub const MAX_KEPT_COLLECTIONS: usize = 64;

/// The metric accounting as plain data: the counters of the report, what
/// the exporter holds now, and whether the lifetime's accounting is closed.
///
/// Every collection that reaches the exporter is [`taken`](Self::taken) and
/// then ends exactly once: exported, dropped (at once on an exporter that
/// cannot resend, from the kept ones over the cap, past the window or at
/// shutdown), or still held when the accounting is
/// [`close`](Self::close)d, which drops it. After that nothing moves.
///
/// ```
/// use lens_otel_runtime::accounting::MetricLedger;
///
/// let mut ledger = MetricLedger::default();
/// ledger.taken(3);
/// ledger.failed(true); // kept for resending
/// ledger.taken(3); // the next collection, queued behind it
/// ledger.queued();
/// ledger.taken(3); // the final one, whose export the deadline cuts
/// ledger.close();
/// let counts = ledger.snapshot();
/// assert_eq!((counts.collections_dropped, counts.points_dropped, counts.collections_kept), (3, 9, 0));
/// ledger.exported(); // a late answer counts nothing
/// assert_eq!(ledger.snapshot(), counts);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricLedger {
    counts: MetricExportSnapshot,
    /// The points of the collection handed to the exporter and not yet
    /// exported, kept or dropped.
    held: Option<u64>,
    /// The points of the kept collections.
    kept_points: u64,
    closed: bool,
}

impl MetricLedger {
    /// The counters now.
    pub fn snapshot(&self) -> MetricExportSnapshot {
        self.counts
    }

    /// Whether the accounting is closed (nothing counts any more).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// A collection of `points` reached the exporter.
    pub fn taken(&mut self, points: u64) {
        if !self.closed {
            self.held = Some(points);
        }
    }

    /// The collection held was exported.
    pub fn exported(&mut self) {
        if self.closed {
            return;
        }
        if let Some(points) = self.held.take() {
            self.counts.exports += 1;
            self.counts.points_exported += points;
        }
    }

    /// The first export of the collection held failed: counted, then kept
    /// for resending (`keep`) or dropped.
    pub fn failed(&mut self, keep: bool) {
        if self.closed {
            return;
        }
        let Some(points) = self.held.take() else { return };
        self.counts.failed_exports += 1;
        self.counts.points_failed += points;
        if keep {
            self.keep(points);
        } else {
            self.drop_collections(1, points);
        }
    }

    /// The collection held goes behind older kept ones without an attempt.
    pub fn queued(&mut self) {
        if self.closed {
            return;
        }
        if let Some(points) = self.held.take() {
            self.keep(points);
        }
    }

    /// The oldest kept collection is sent again.
    pub fn resending(&mut self) {
        if !self.closed {
            self.counts.retries += 1;
        }
    }

    /// The oldest kept collection, of `points`, was resent.
    pub fn resent(&mut self, points: u64) {
        if self.closed {
            return;
        }
        self.unkeep(points);
        self.counts.exports += 1;
        self.counts.points_exported += points;
    }

    /// A resend failed (the collection stays kept).
    pub fn resend_failed(&mut self) {
        if !self.closed {
            self.counts.failed_exports += 1;
        }
    }

    /// A kept collection of `points` is given up: over the cap, past the
    /// retry window, or at the exporter's shutdown.
    pub fn kept_dropped(&mut self, points: u64) {
        if self.closed {
            return;
        }
        self.unkeep(points);
        self.drop_collections(1, points);
    }

    /// Ends the accounting (shutdown is over, in time or not): the
    /// collection held and the kept ones are dropped, and nothing the
    /// exporter does later counts.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        if let Some(points) = self.held.take() {
            self.drop_collections(1, points);
        }
        let (collections, points) = (self.counts.collections_kept, self.kept_points);
        self.drop_collections(collections, points);
        (self.counts.collections_kept, self.kept_points) = (0, 0);
        self.closed = true;
    }

    fn keep(&mut self, points: u64) {
        self.counts.collections_kept += 1;
        self.kept_points += points;
    }

    fn unkeep(&mut self, points: u64) {
        self.counts.collections_kept = self.counts.collections_kept.saturating_sub(1);
        self.kept_points = self.kept_points.saturating_sub(points);
    }

    fn drop_collections(&mut self, collections: u64, points: u64) {
        self.counts.collections_dropped += collections;
        self.counts.points_dropped += points;
    }
}

/// Live counters of a metric pipeline: a [`MetricLedger`] behind a lock.
#[derive(Debug, Default)]
pub struct MetricExportCounters {
    ledger: Mutex<MetricLedger>,
}

impl MetricExportCounters {
    /// The counters now.
    pub fn snapshot(&self) -> MetricExportSnapshot {
        self.ledger().snapshot()
    }

    /// Closes the accounting at the end of shutdown (see
    /// [`MetricLedger::close`]): what the exporter still holds or keeps is
    /// lost to this lifetime, and a hung export that returns later counts
    /// nothing, so the shutdown report stays exact.
    pub fn close(&self) {
        self.ledger().close();
    }

    fn ledger(&self) -> MutexGuard<'_, MetricLedger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Sends an encoded collection again, the way its exporter would have: same
/// endpoint, protocol, headers, TLS, compression and timeout. It blocks until
/// the collector answered or the timeout passed; it is called on the
/// periodic reader's thread, never inside a tokio runtime.
pub trait MetricResender: Send + Sync {
    /// Sends `request` once.
    ///
    /// # Errors
    ///
    /// The transport error, or the collector's refusal.
    fn resend(&self, request: &ExportMetricsServiceRequest) -> OTelSdkResult;
}

/// A failed collection, encoded, waiting to be resent.
struct Kept {
    request: ExportMetricsServiceRequest,
    points: u64,
    first_failed: Instant,
    retried: bool,
}

/// How failed collections are retried.
struct Retry {
    resender: Arc<dyn MetricResender>,
    window: Duration,
    kept: Mutex<VecDeque<Kept>>,
}

/// A push metric exporter that counts what it exports and what fails, and
/// (with [`with_resender`](Self::with_resender)) resends failed collections.
pub struct CountingMetricExporter<E> {
    inner: E,
    counters: Arc<MetricExportCounters>,
    warnings: RateLimit,
    redact: Vec<String>,
    retry: Option<Retry>,
}

impl<E: PushMetricExporter> CountingMetricExporter<E> {
    /// Wraps `inner`, counting into `counters`; `redact` lists secrets (header
    /// values) that must not appear when an exporter error is quoted. Without
    /// a resender, a failed collection is dropped (and counted).
    pub fn new(inner: E, counters: Arc<MetricExportCounters>, redact: Vec<String>) -> Self {
        CountingMetricExporter { inner, counters, warnings: RateLimit::new(WARNING_PERIOD), redact, retry: None }
    }

    /// Keeps failed collections and resends them with `resender` until
    /// `window` has passed since their first failure (see the module docs).
    #[must_use]
    pub fn with_resender(mut self, resender: Arc<dyn MetricResender>, window: Duration) -> Self {
        self.retry = Some(Retry { resender, window, kept: Mutex::new(VecDeque::new()) });
        self
    }

    /// Resends the kept collections, oldest first; `Err` (the first failure)
    /// when some are still kept.
    fn resend_kept(&self, retry: &Retry) -> OTelSdkResult {
        let c = &self.counters;
        let mut kept = retry.kept.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(front) = kept.front_mut() {
            if front.retried && front.first_failed.elapsed() > retry.window {
                let points = front.points;
                kept.pop_front();
                c.ledger().kept_dropped(points);
                continue;
            }
            front.retried = true;
            c.ledger().resending();
            match retry.resender.resend(&front.request) {
                Ok(()) => {
                    let points = front.points;
                    kept.pop_front();
                    c.ledger().resent(points);
                }
                Err(error) => {
                    c.ledger().resend_failed();
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Keeps `metrics` for resending (dropping the oldest beyond the cap):
    /// after its own export failed (`failed`), or behind older kept ones.
    fn keep(&self, retry: &Retry, metrics: &ResourceMetrics, points: u64, failed: bool) {
        let mut kept = retry.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push_back(Kept {
            request: ExportMetricsServiceRequest::from(metrics),
            points,
            first_failed: Instant::now(),
            retried: false,
        });
        let mut ledger = self.counters.ledger();
        if failed {
            ledger.failed(true);
        } else {
            ledger.queued();
        }
        while kept.len() > MAX_KEPT_COLLECTIONS {
            if let Some(oldest) = kept.pop_front() {
                ledger.kept_dropped(oldest.points);
            }
        }
    }

    #[cold]
    fn warn_failure(&self, error: &OTelSdkError) {
        // After shutdown the report has said what was lost: a hung export
        // that fails later adds nothing to it, nor a warning after it.
        if self.counters.ledger().is_closed() {
            return;
        }
        let Some(held_back) = self.warnings.check() else { return };
        let now = self.counters.snapshot();
        let error = redact(&error.to_string(), &self.redact);
        warn(format_args!(
            "metric export failed ({} failed exports so far; {} collections kept for resending, {} collections \
             ({} points) dropped; {held_back} warnings held back): {error}",
            now.failed_exports, now.collections_kept, now.collections_dropped, now.points_dropped,
        ));
    }
}

impl<E: std::fmt::Debug> std::fmt::Debug for CountingMetricExporter<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingMetricExporter")
            .field("inner", &self.inner)
            .field("counters", &self.counters)
            .field("resends", &self.retry.is_some())
            .finish()
    }
}

/// The number of data points in one collection.
pub fn count_points(metrics: &ResourceMetrics) -> u64 {
    fn points<T>(data: &MetricData<T>) -> usize {
        match data {
            MetricData::Gauge(g) => g.data_points().count(),
            MetricData::Sum(s) => s.data_points().count(),
            MetricData::Histogram(h) => h.data_points().count(),
            MetricData::ExponentialHistogram(h) => h.data_points().count(),
        }
    }
    let mut total = 0usize;
    for scope in metrics.scope_metrics() {
        for metric in scope.metrics() {
            total += match metric.data() {
                AggregatedMetrics::F64(data) => points(data),
                AggregatedMetrics::U64(data) => points(data),
                AggregatedMetrics::I64(data) => points(data),
            };
        }
    }
    total as u64
}

impl<E: PushMetricExporter> PushMetricExporter for CountingMetricExporter<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        // Resends included: the SDK's reader thread is on the export path
        // while it polls this.
        crate::export_path::marked(async move {
            let points = count_points(metrics);
            self.counters.ledger().taken(points);
            if let Some(retry) = &self.retry
                && let Err(error) = self.resend_kept(retry)
            {
                // Older collections are still waiting: this one goes behind them.
                self.keep(retry, metrics, points, false);
                self.warn_failure(&error);
                return Err(error);
            }
            let result = self.inner.export(metrics).await;
            match &result {
                Ok(()) => self.counters.ledger().exported(),
                Err(error) => {
                    match &self.retry {
                        Some(retry) => self.keep(retry, metrics, points, true),
                        None => self.counters.ledger().failed(false),
                    }
                    self.warn_failure(error);
                }
            }
            result
        })
        .await
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _export_path = crate::export_path::ExportScope::enter();
        self.inner.force_flush()
    }

    /// Shuts the exporter down; collections still kept for resending are
    /// counted as dropped (the reader's final export has just tried them).
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _export_path = crate::export_path::ExportScope::enter();
        if let Some(retry) = &self.retry {
            let mut kept = retry.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let mut ledger = self.counters.ledger();
            for collection in kept.drain(..) {
                ledger.kept_dropped(collection.points);
            }
        }
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
