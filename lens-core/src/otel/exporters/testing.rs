//! In-memory exporters for tests (feature `testing`): the SDK's recording
//! exporters, re-exported here so that tests and users find every exporter
//! of lens in one place.
//!
//! ```
//! use lens_core::otel::exporters::testing::InMemorySpanExporter;
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
