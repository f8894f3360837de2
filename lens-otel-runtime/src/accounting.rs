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
//!
//! Exporters without a resender (file, console, a custom exporter) fail
//! locally (a full disk, a closed standard output), where a resend would
//! most likely fail again: their failed collections are counted as dropped
//! at once. Prometheus is pulled, and its export does not fail.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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

/// Live counters of a metric pipeline.
#[derive(Debug, Default)]
pub struct MetricExportCounters {
    exports: AtomicU64,
    points_exported: AtomicU64,
    failed_exports: AtomicU64,
    points_failed: AtomicU64,
    retries: AtomicU64,
    collections_kept: AtomicU64,
    collections_dropped: AtomicU64,
    points_dropped: AtomicU64,
}

impl MetricExportCounters {
    /// The counters now.
    pub fn snapshot(&self) -> MetricExportSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        MetricExportSnapshot {
            exports: load(&self.exports),
            points_exported: load(&self.points_exported),
            failed_exports: load(&self.failed_exports),
            points_failed: load(&self.points_failed),
            retries: load(&self.retries),
            collections_kept: load(&self.collections_kept),
            collections_dropped: load(&self.collections_dropped),
            points_dropped: load(&self.points_dropped),
        }
    }

    fn dropped(&self, collections: u64, points: u64) {
        self.collections_dropped.fetch_add(collections, Ordering::Relaxed);
        self.points_dropped.fetch_add(points, Ordering::Relaxed);
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
                c.dropped(1, points);
                continue;
            }
            front.retried = true;
            c.retries.fetch_add(1, Ordering::Relaxed);
            match retry.resender.resend(&front.request) {
                Ok(()) => {
                    let points = front.points;
                    kept.pop_front();
                    c.exports.fetch_add(1, Ordering::Relaxed);
                    c.points_exported.fetch_add(points, Ordering::Relaxed);
                }
                Err(error) => {
                    c.failed_exports.fetch_add(1, Ordering::Relaxed);
                    c.collections_kept.store(kept.len() as u64, Ordering::Relaxed);
                    return Err(error);
                }
            }
        }
        c.collections_kept.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Keeps `metrics` for resending (dropping the oldest beyond the cap).
    fn keep(&self, retry: &Retry, metrics: &ResourceMetrics, points: u64) {
        let c = &self.counters;
        let mut kept = retry.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push_back(Kept {
            request: ExportMetricsServiceRequest::from(metrics),
            points,
            first_failed: Instant::now(),
            retried: false,
        });
        while kept.len() > MAX_KEPT_COLLECTIONS {
            if let Some(oldest) = kept.pop_front() {
                c.dropped(1, oldest.points);
            }
        }
        c.collections_kept.store(kept.len() as u64, Ordering::Relaxed);
    }

    #[cold]
    fn warn_failure(&self, error: &OTelSdkError) {
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
            let c = &self.counters;
            if let Some(retry) = &self.retry
                && let Err(error) = self.resend_kept(retry)
            {
                // Older collections are still waiting: this one goes behind them.
                self.keep(retry, metrics, points);
                self.warn_failure(&error);
                return Err(error);
            }
            let result = self.inner.export(metrics).await;
            match &result {
                Ok(()) => {
                    c.exports.fetch_add(1, Ordering::Relaxed);
                    c.points_exported.fetch_add(points, Ordering::Relaxed);
                }
                Err(error) => {
                    c.failed_exports.fetch_add(1, Ordering::Relaxed);
                    c.points_failed.fetch_add(points, Ordering::Relaxed);
                    match &self.retry {
                        Some(retry) => self.keep(retry, metrics, points),
                        None => c.dropped(1, points),
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
            let points = kept.iter().map(|k| k.points).sum();
            self.counters.dropped(kept.len() as u64, points);
            kept.clear();
            self.counters.collections_kept.store(0, Ordering::Relaxed);
        }
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
