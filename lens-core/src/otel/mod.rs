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
//! - [`span`], [`propagation`]: the span helpers and context propagation,
//!   which are defined once for both builds in [`crate::span`] and
//!   [`crate::propagation`] and re-exported here under their old paths.

pub mod accounting;
pub mod active;
pub mod batch;
pub mod closer;
mod executor;
pub mod exporters;
pub mod ids;
pub mod logs;
pub mod sampler;
pub mod setup;

/// Context propagation: [`crate::propagation`], under its old path.
pub mod propagation {
    pub use crate::propagation::*;
}

/// The span helpers: [`crate::span`], under their old path.
pub mod span {
    pub use crate::span::*;
}

/// The OpenTelemetry API crate lens is built on, for callers that need its
/// types (`Meter`, `Tracer`) at exactly lens's version.
pub use opentelemetry;
