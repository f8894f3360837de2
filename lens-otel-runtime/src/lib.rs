//! The OpenTelemetry runtime of lens: what a build with the facade's `otel`
//! feature records and exports with.
//!
//! lens-core decides (the configuration, the span groups and their gate,
//! the rank and sampling strategies, the identity); this crate builds and
//! runs what those decisions ask for; the facade (`lens-fallbacks`) is the
//! API instrumented code calls, and the only crate a program names. Nothing
//! above the facade names this crate (`cargo xtask tidy` checks it).
//!
//! - [`pipeline`]: [`Pipeline`], what setup builds from a validated
//!   [`LensConfig`](lens_core::config::LensConfig): providers, exporters,
//!   processors, the gate, and their shutdown.
//! - [`exporters`]: the file and console exporters (always), OTLP over gRPC
//!   (feature `otlp-grpc`: tonic) and HTTP (`otlp-http`: reqwest), the
//!   Prometheus endpoint (`prometheus`: hyper), and in-memory ones behind
//!   `testing`.
//! - [`batch`]: the bounded, counting, retrying batch span and log
//!   processor; it knows its exporter through [`batch::BatchExporter`], and
//!   its counting is the pure state machine of [`ledger`].
//! - [`ledger`]: the export counting (events, their counter changes, the
//!   admission and retry decisions), pure data and functions.
//! - [`accounting`]: the counting (and resending) metric exporter.
//! - [`closer`]: ends spans still open at shutdown, marked truncated.
//! - [`current_span`]: lens's own per-thread stack of current spans.
//! - [`recorder`]: spans recorded as plain data into bounded per-thread
//!   buffers, built into the OTLP request on the export thread (SPEC A25);
//!   [`span_record`]: the record and the direct OTLP encoder.
//! - `executor`: the small thread-parking executor that runs exports
//!   (`block_on`, `block_on_until`, re-exported from [`exporters`]).
//! - [`ids`]: trace and span ids independent of any seeding the job does.
//! - [`sampler`]: rank-aware sampling, structural spans, sampling keys.
//! - [`spool`]: the per-rank crash-safe spool (open spans, unexported
//!   ended spans, progress, last-alive) and its replay.
//! - [`logs`]: the `log` crate bridged to OpenTelemetry logs.
//! - [`active`]: the one process-global tracer slot the span helpers read.
//! - [`propagators`]: which W3C propagators `OTEL_PROPAGATORS` selected.
//! - [`transports`]: which network transports this build has (`TRANSPORTS`).
//! - [`convert`]: lens's attribute values as OpenTelemetry's.

// lens-core's modules under their own names, so that the runtime's paths
// (`crate::config::...`) read as they did inside lens-core.
use lens_core::{attr, config, diag, env, export_path, exporter_error, groups, identity, report, strategies};

pub mod accounting;
pub mod active;
pub mod batch;
pub mod closer;
pub mod convert;
pub mod current_span;
mod executor;
pub mod export_result;
pub mod exporters;
pub mod ids;
pub mod ledger;
pub mod lens_tracer;
pub mod logs;
#[cfg(feature = "otlp")]
pub mod otlp_wire;
pub mod pipeline;
pub mod propagators;
pub mod recorder;
mod replaying;
pub mod sampler;
pub mod span_record;
pub mod spool;
pub mod transports;

pub use pipeline::{Pipeline, PipelineError, PipelineOptions};
pub use transports::TRANSPORTS;

/// The OpenTelemetry API crate lens is built on, for callers that need its
/// types (`Meter`, `Tracer`) at exactly lens's version.
pub use opentelemetry;
/// The OpenTelemetry SDK lens is built on (custom exporters name its traits).
pub use opentelemetry_sdk;
