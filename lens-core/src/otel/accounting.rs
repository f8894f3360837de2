//! Counting what the metric pipeline exports and loses.
//!
//! The SDK's periodic reader logs a failed export and moves on; it keeps no
//! count. [`CountingMetricExporter`] wraps any push exporter and counts the
//! data points of every export that succeeded or failed, so that the
//! shutdown report and the rate-limited warning can say what was lost.
//! Metrics are exported cumulatively, so a failed export loses no total: the
//! next successful one carries the same series with newer values.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;

use crate::diag::{RateLimit, redact, warn};
pub use crate::report::MetricExportSnapshot;

/// How often a failing metric exporter may warn.
const WARNING_PERIOD: Duration = Duration::from_secs(30);

/// Live counters of a metric pipeline.
#[derive(Debug, Default)]
pub struct MetricExportCounters {
    exports: AtomicU64,
    points_exported: AtomicU64,
    failed_exports: AtomicU64,
    points_failed: AtomicU64,
}

impl MetricExportCounters {
    /// The counters now.
    pub fn snapshot(&self) -> MetricExportSnapshot {
        MetricExportSnapshot {
            exports: self.exports.load(Ordering::Relaxed),
            points_exported: self.points_exported.load(Ordering::Relaxed),
            failed_exports: self.failed_exports.load(Ordering::Relaxed),
            points_failed: self.points_failed.load(Ordering::Relaxed),
        }
    }
}

/// A push metric exporter that counts what it exports and what fails.
pub struct CountingMetricExporter<E> {
    inner: E,
    counters: Arc<MetricExportCounters>,
    warnings: RateLimit,
    redact: Vec<String>,
}

impl<E: PushMetricExporter> CountingMetricExporter<E> {
    /// Wraps `inner`, counting into `counters`; `redact` lists secrets (header
    /// values) that must not appear when an exporter error is quoted.
    pub fn new(inner: E, counters: Arc<MetricExportCounters>, redact: Vec<String>) -> Self {
        CountingMetricExporter { inner, counters, warnings: RateLimit::new(WARNING_PERIOD), redact }
    }
}

impl<E: std::fmt::Debug> std::fmt::Debug for CountingMetricExporter<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingMetricExporter").field("inner", &self.inner).field("counters", &self.counters).finish()
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
        let points = count_points(metrics);
        let result = self.inner.export(metrics).await;
        let c = &self.counters;
        match &result {
            Ok(()) => {
                c.exports.fetch_add(1, Ordering::Relaxed);
                c.points_exported.fetch_add(points, Ordering::Relaxed);
            }
            Err(error) => {
                c.failed_exports.fetch_add(1, Ordering::Relaxed);
                c.points_failed.fetch_add(points, Ordering::Relaxed);
                if let Some(held_back) = self.warnings.check() {
                    let failed = c.failed_exports.load(Ordering::Relaxed);
                    let error = redact(&error.to_string(), &self.redact);
                    warn(format_args!(
                        "metric export failed ({failed} failed exports so far, {held_back} warnings held back): {error}"
                    ));
                }
            }
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
