//! In-memory exporters for tests (feature `testing`): the SDK's recording
//! exporters, re-exported here so that tests and users find every exporter
//! of lens in one place, and [`KeepingSpanExporter`], which keeps its spans
//! after shutdown (most lens tests read them after shutting telemetry down),
//! and [`DiscardingSpanExporter`] and [`DiscardingMetricExporter`], which drop
//! everything (the benches measure the recording thread, not an export).
//!
//! ```
//! use lens_otel_runtime::exporters::testing::InMemorySpanExporter;
//! use opentelemetry::trace::{Tracer, TracerProvider as _};
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//!
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
//! provider.tracer("test").in_span("megatron.train", |_| {});
//! assert_eq!(exporter.get_finished_spans().unwrap()[0].name, "megatron.train");
//! ```

pub use opentelemetry_sdk::logs::{InMemoryLogExporter, InMemoryLogExporterBuilder};
pub use opentelemetry_sdk::metrics::{InMemoryMetricExporter, InMemoryMetricExporterBuilder};
pub use opentelemetry_sdk::trace::{InMemorySpanExporter, InMemorySpanExporterBuilder};

use std::hint::black_box;
use std::time::Duration;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// An in-memory span exporter that keeps its spans after shutdown.
///
/// The SDK's [`InMemorySpanExporter`] forgets its spans when it is shut
/// down, so a test that reads them after `Telemetry::shutdown` (or a
/// provider's shutdown) would see nothing. This one records the same way
/// and ignores shutdown. Clones share one store: give a clone to setup and
/// read the spans from the original.
///
/// ```
/// use lens_otel_runtime::exporters::testing::KeepingSpanExporter;
/// use opentelemetry::trace::{Tracer, TracerProvider as _};
/// use opentelemetry_sdk::trace::SdkTracerProvider;
///
/// let exporter = KeepingSpanExporter::default();
/// let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
/// provider.tracer("test").in_span("megatron.train", |_| {});
/// provider.shutdown().unwrap();
/// assert_eq!(exporter.names(), ["megatron.train"]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct KeepingSpanExporter {
    spans: InMemorySpanExporter,
}

impl KeepingSpanExporter {
    /// An exporter with no spans yet.
    pub fn new() -> KeepingSpanExporter {
        KeepingSpanExporter::default()
    }

    /// The spans exported so far, in export order (as
    /// [`InMemorySpanExporter::get_finished_spans`]).
    ///
    /// # Errors
    ///
    /// When the store's lock is poisoned (a thread panicked while exporting).
    pub fn get_finished_spans(&self) -> Result<Vec<SpanData>, OTelSdkError> {
        self.spans.get_finished_spans()
    }

    /// The names of the spans exported so far, in export order; empty when
    /// the store cannot be read.
    pub fn names(&self) -> Vec<String> {
        self.get_finished_spans().unwrap_or_default().into_iter().map(|span| span.name.into_owned()).collect()
    }

    /// Forgets every span exported so far.
    pub fn reset(&self) {
        self.spans.reset();
    }
}

impl SpanExporter for KeepingSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.spans.export(batch).await
    }
}

/// A span exporter that drops every batch: what the benches export to, so
/// that they measure the thread that records spans, not an export.
///
/// ```
/// use lens_otel_runtime::exporters::testing::DiscardingSpanExporter;
/// use opentelemetry::trace::{Tracer, TracerProvider as _};
/// use opentelemetry_sdk::trace::SdkTracerProvider;
///
/// let provider = SdkTracerProvider::builder().with_simple_exporter(DiscardingSpanExporter).build();
/// provider.tracer("bench").in_span("megatron.train", |_| {});
/// provider.shutdown().unwrap();
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct DiscardingSpanExporter;

impl SpanExporter for DiscardingSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(black_box(batch));
        Ok(())
    }
}

/// A metric exporter that drops every collection (cumulative temporality),
/// for the benches' periodic readers.
///
/// ```
/// use std::time::Duration;
///
/// use lens_otel_runtime::exporters::testing::DiscardingMetricExporter;
/// use opentelemetry::metrics::MeterProvider as _;
/// use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
///
/// let reader = PeriodicReader::builder(DiscardingMetricExporter).with_interval(Duration::from_secs(1)).build();
/// let provider = SdkMeterProvider::builder().with_reader(reader).build();
/// provider.meter("bench").u64_counter("steps").build().add(1, &[]);
/// provider.shutdown().unwrap();
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct DiscardingMetricExporter;

impl PushMetricExporter for DiscardingMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        black_box(metrics);
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}
