//! The exporters of the lens runtime: where spans, metrics and log records go
//! once a rank has decided to export. Every option is set explicitly from the
//! validated configuration; the SDK reads no environment on its own.
//!
//! - [`otlp`]: OTLP over gRPC (the default), `http/protobuf` and `http/json`,
//!   with TLS for `https` endpoints and a private CA from
//!   `OTEL_EXPORTER_OTLP_CERTIFICATE`. Every option comes from the
//!   configuration's per-signal [`OtlpSettings`] (`config.otel.otlp(signal)`),
//!   never from the SDK reading the environment.
//!   gRPC runs on a small private tokio runtime (thread `lens-otlp`), so the
//!   caller needs no async runtime of its own.
//! - [`console`]: compact JSON lines (one per span, per metric batch, per log
//!   record) on standard output or any writer.
//! - [`file`](mod@file): OTLP/JSON lines, one export request per line, in
//!   `traces-rank<N>.jsonl`, `metrics-rank<N>.jsonl` and `logs-rank<N>.jsonl`:
//!   the OpenTelemetry Collector file exporter's format, which its
//!   `otlpjsonfile` receiver replays.
//! - [`prometheus`]: a pull endpoint (`GET /metrics`) with the
//!   OTel-to-Prometheus names of the seed metrics page.
//! - `testing` (feature `testing`): the SDK's in-memory exporters, in one place.
//!
//! The OTLP exporters take the configuration's types as they are
//! ([`Signal`], [`OtlpProtocol`], [`Compression`], [`OtlpSettings`], all
//! re-exported here from [`crate::config`]), so the endpoint rules live in one
//! place ([`OtlpSettings::endpoint_url`]). The Prometheus exporter takes a
//! small [`PrometheusSettings`] of its own, which the runtime glue fills from
//! the configuration and the rank. The enums [`LensSpanExporter`],
//! [`LensMetricExporter`] and [`LensLogExporter`] let the glue pick an
//! exporter at run time while the processors stay generic (the SDK's
//! exporter traits are not object safe).
//!
//! Exports are plain futures that any executor can poll on an ordinary
//! thread (for example [`block_on`]); gRPC exports enter the `lens-otlp`
//! runtime by themselves. Every export, flush and shutdown marks the thread
//! that runs it as on lens's export path while it runs
//! ([`crate::export_path`]), so that the `tracing` bridge records none of
//! the transport's own spans and events, whichever thread that is. Do not poll an HTTP export on a tokio worker
//! thread: it uses a blocking HTTP client.

pub mod console;
pub mod file;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub mod otlp;
#[cfg(feature = "prometheus")]
pub mod prometheus;
#[cfg(any(any(feature = "otlp-grpc", feature = "otlp-http"), feature = "prometheus"))]
mod runtime;
#[cfg(feature = "testing")]
pub mod testing;

use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

pub use super::executor::{block_on, block_on_until};
pub use crate::config::{Compression, OtlpProtocol, OtlpSettings, Signal};
use crate::export_path::{ExportScope, marked};
pub use console::{ConsoleLogExporter, ConsoleMetricExporter, ConsoleSpanExporter};
pub use file::{FileLimit, FileLogExporter, FileMetricExporter, FileSpanExporter, file_path};
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub use otlp::{
    OtlpLogExporter, OtlpMetricExporter, OtlpMetricResender, OtlpSpanExporter, ResolvedEndpoint,
    build_otlp_log_exporter, build_otlp_metric_exporter, build_otlp_span_exporter, resolve_endpoint,
};
#[cfg(feature = "prometheus")]
pub use prometheus::{
    ONE_EXPORTER_PER_HOST_STRATEGIES, PROMETHEUS_HEADER_TIMEOUT, PROMETHEUS_MAX_CONNECTIONS, PROMETHEUS_METRICS_PATH,
    PrometheusExporter, PrometheusMetricKind, PrometheusSettings, prometheus_metric_name, prometheus_port_offset,
};
#[cfg(any(any(feature = "otlp-grpc", feature = "otlp-http"), feature = "prometheus"))]
pub use runtime::OtlpRuntime;

// The exporters' setup error is plain data, defined once for both builds
// with the setup error it is a cause of.
pub use crate::exporter_error::ExporterError;

/// A span exporter chosen at run time (`OTEL_TRACES_EXPORTER`).
#[derive(Debug)]
#[non_exhaustive]
pub enum LensSpanExporter {
    /// OTLP over gRPC or HTTP.
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    Otlp(Box<OtlpSpanExporter>),
    /// Compact JSON lines.
    Console(ConsoleSpanExporter),
    /// OTLP/JSON lines in a per-rank file.
    File(FileSpanExporter),
}

impl SpanExporter for LensSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        marked(async move {
            match self {
                #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
                LensSpanExporter::Otlp(exporter) => exporter.export(batch).await,
                LensSpanExporter::Console(exporter) => exporter.export(batch).await,
                LensSpanExporter::File(exporter) => exporter.export(batch).await,
            }
        })
        .await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _export_path = ExportScope::enter();
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensSpanExporter::Otlp(exporter) => exporter.shutdown_with_timeout(timeout),
            LensSpanExporter::Console(exporter) => exporter.shutdown_with_timeout(timeout),
            LensSpanExporter::File(exporter) => exporter.shutdown_with_timeout(timeout),
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _export_path = ExportScope::enter();
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensSpanExporter::Otlp(exporter) => exporter.force_flush(),
            LensSpanExporter::Console(exporter) => exporter.force_flush(),
            LensSpanExporter::File(exporter) => exporter.force_flush(),
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensSpanExporter::Otlp(exporter) => exporter.set_resource(resource),
            LensSpanExporter::Console(exporter) => exporter.set_resource(resource),
            LensSpanExporter::File(exporter) => exporter.set_resource(resource),
        }
    }
}

/// A push metric exporter chosen at run time (`OTEL_METRICS_EXPORTER`);
/// give it to a periodic reader.
#[derive(Debug)]
#[non_exhaustive]
pub enum LensMetricExporter {
    /// OTLP over gRPC or HTTP.
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    Otlp(Box<OtlpMetricExporter>),
    /// One compact JSON line per batch.
    Console(ConsoleMetricExporter),
    /// OTLP/JSON lines in a per-rank file.
    File(FileMetricExporter),
    /// The Prometheus pull endpoint (serves the latest batch).
    #[cfg(feature = "prometheus")]
    Prometheus(PrometheusExporter),
}

impl PushMetricExporter for LensMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        marked(async move {
            match self {
                #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
                LensMetricExporter::Otlp(exporter) => exporter.export(metrics).await,
                LensMetricExporter::Console(exporter) => exporter.export(metrics).await,
                LensMetricExporter::File(exporter) => exporter.export(metrics).await,
                #[cfg(feature = "prometheus")]
                LensMetricExporter::Prometheus(exporter) => exporter.export(metrics).await,
            }
        })
        .await
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _export_path = ExportScope::enter();
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensMetricExporter::Otlp(exporter) => exporter.force_flush(),
            LensMetricExporter::Console(exporter) => exporter.force_flush(),
            LensMetricExporter::File(exporter) => exporter.force_flush(),
            #[cfg(feature = "prometheus")]
            LensMetricExporter::Prometheus(exporter) => exporter.force_flush(),
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _export_path = ExportScope::enter();
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensMetricExporter::Otlp(exporter) => exporter.shutdown_with_timeout(timeout),
            LensMetricExporter::Console(exporter) => exporter.shutdown_with_timeout(timeout),
            LensMetricExporter::File(exporter) => exporter.shutdown_with_timeout(timeout),
            #[cfg(feature = "prometheus")]
            LensMetricExporter::Prometheus(exporter) => exporter.shutdown_with_timeout(timeout),
        }
    }

    fn temporality(&self) -> Temporality {
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensMetricExporter::Otlp(exporter) => exporter.temporality(),
            LensMetricExporter::Console(exporter) => exporter.temporality(),
            LensMetricExporter::File(exporter) => exporter.temporality(),
            #[cfg(feature = "prometheus")]
            LensMetricExporter::Prometheus(exporter) => exporter.temporality(),
        }
    }
}

/// A log exporter chosen at run time (`OTEL_LOGS_EXPORTER`).
#[derive(Debug)]
#[non_exhaustive]
pub enum LensLogExporter {
    /// OTLP over gRPC or HTTP.
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    Otlp(Box<OtlpLogExporter>),
    /// One compact JSON line per record.
    Console(ConsoleLogExporter),
    /// OTLP/JSON lines in a per-rank file.
    File(FileLogExporter),
}

impl LogExporter for LensLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        marked(async move {
            match self {
                #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
                LensLogExporter::Otlp(exporter) => exporter.export(batch).await,
                LensLogExporter::Console(exporter) => exporter.export(batch).await,
                LensLogExporter::File(exporter) => exporter.export(batch).await,
            }
        })
        .await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _export_path = ExportScope::enter();
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensLogExporter::Otlp(exporter) => exporter.shutdown_with_timeout(timeout),
            LensLogExporter::Console(exporter) => exporter.shutdown_with_timeout(timeout),
            LensLogExporter::File(exporter) => exporter.shutdown_with_timeout(timeout),
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        match self {
            #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
            LensLogExporter::Otlp(exporter) => exporter.set_resource(resource),
            LensLogExporter::Console(exporter) => exporter.set_resource(resource),
            LensLogExporter::File(exporter) => exporter.set_resource(resource),
        }
    }
}
