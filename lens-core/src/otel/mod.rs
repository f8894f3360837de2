//! The OpenTelemetry runtime (feature `otel`): setup and shutdown, providers,
//! exporters, samplers, the ID generator, the open-span closer, span helpers
//! and propagation.
//!
//! - [`setup`]: `setup_telemetry`, the [`Telemetry`](setup::Telemetry) handle
//!   and the shutdown report; it builds everything below from a validated
//!   [`LensConfig`](crate::config::LensConfig).
//! - [`exporters`]: OTLP (gRPC, HTTP/protobuf, HTTP/JSON), console, file and
//!   Prometheus exporters, and in-memory ones behind `testing`.
//! - [`batch`]: the bounded, counting, retrying batch span processor.
//! - [`closer`]: ends spans still open at shutdown, marked truncated.
//! - `executor`: the small thread-parking executor that runs exports
//!   (`block_on`, `block_on_until`, re-exported from [`exporters`]).
//! - [`ids`]: trace and span ids independent of any seeding the job does.
//! - [`sampler`]: rank-aware sampling, structural spans, sampling keys.
//! - [`logs`]: the `log` crate bridged to OpenTelemetry logs.
//! - [`active`]: the one process-global tracer slot the span helpers read.
//! - [`span`]: span helpers (`managed_span`, `span_cm`, ...).
//! - [`propagation`]: W3C trace context and baggage, the byte encoding, the
//!   worker bootstrap.

pub mod accounting;
pub mod active;
pub mod batch;
pub mod closer;
mod executor;
pub mod exporters;
pub mod ids;
pub mod logs;
pub mod propagation;
pub mod sampler;
pub mod setup;
pub mod span;

/// The OpenTelemetry API crate lens is built on, for callers that need its
/// types (`Meter`, `Tracer`) at exactly lens's version.
pub use opentelemetry;
