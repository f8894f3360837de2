//! The core of lens: everything a rank needs to decide *what* to record and
//! *whether* to export, with no OpenTelemetry dependency.
//!
//! - [`attr`]: attribute values in lens's own types, redaction and lazy
//!   attributes.
//! - [`bootstrap`]: the worker bootstrap's error, shared by both sides of
//!   the facade.
//! - [`config`]: the configuration model, read from the environment (with a
//!   prefix and a fallback prefix), overridden from the command line, and
//!   validated as a whole before anything is installed.
//! - [`groups`]: span groups, presets, the spec parser and the hot-path gate.
//! - [`strategies`]: rank strategies (which ranks export) and sampling
//!   strategies (which ranks record spans), each with a registry.
//! - [`identity`]: the rank context, run id and resource detection.
//! - [`diag`]: lens's own rate-limited warnings.
//! - [`env`](mod@env): where variables are read from (the process or a map, for tests).
//! - [`export_path`]: the thread-local mark of lens's own export path, which
//!   the `tracing` and log bridges read so that export traffic is never
//!   recorded.
//! - [`report`]: what telemetry exported and lost (shutdown reports).
//! - [`instrument_values`]: the values lens-instruments records, as plain
//!   data shared by both sides of the facade.
//! - [`metrics`]: the metric handles (`Meter`, `Counter`, `Gauge`,
//!   `Histogram`), one definition for both builds: OpenTelemetry instruments
//!   with `otel`, inline no-ops without it.
//! - [`semconv`]: attribute keys shared by every consumer.
//! - [`span`]: the span guard, the everyday span helpers and their closure
//!   forms, and the [`span::SpanBuilder`] for the rare options;
//!   [`propagation`]: context and its propagation (carriers, bytes, the
//!   worker bootstrap). One definition each for both builds: OpenTelemetry
//!   fields and bodies with `otel`, zero-sized types and inline no-ops
//!   without it.
//! - [`setup`]: `setup_telemetry`, the `Telemetry` handle, `SetupOptions`
//!   and `SetupError`, one definition for both builds (inert without `otel`).
//! - [`tracing_rules`]: the `<PREFIX>_TRACING_GROUPS` rules that map
//!   `tracing` targets to span groups (read by `lens-tracing`).
//!
//! With the `otel` feature the crate also holds the OpenTelemetry runtime
//! ([`otel`]: setup's internals, exporters, batching, samplers), and with
//! `testing` the test support (`testing`: span capture, the gate's writer).

pub mod attr;
pub mod bootstrap;
pub mod config;
pub mod diag;
pub mod env;
pub mod export_path;
mod exporter_error;
pub mod groups;
pub mod identity;
pub mod instrument_values;
pub mod metrics;
pub mod otlp_file;
pub mod propagation;
pub mod report;
pub mod semconv;
pub mod setup;
pub mod span;
pub mod strategies;
mod suggest;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tracing_rules;

#[cfg(feature = "otel")]
pub mod otel;

/// The Rust examples of `docs/configuration.md`, compiled and run as doc
/// tests so that the page cannot drift from the API. They need no feature,
/// so every `cargo test -p lens-core --doc` runs them.
#[cfg(doctest)]
#[doc = include_str!("../../docs/configuration.md")]
pub struct ConfigurationDocExamples;

/// The Rust example of `docs/trace-view.md` (reading an export with
/// `otlp_file::tree`), compiled and run as a doc test in both modes.
#[cfg(doctest)]
#[doc = include_str!("../../docs/trace-view.md")]
pub struct TraceViewDocExamples;
