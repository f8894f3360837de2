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
//! - [`exporter_error`]: why an exporter could not be built, and the
//!   missing-transport error (a transport this build lacks).
//! - [`instrument_values`]: the values lens-instruments records, as plain
//!   data.
//! - [`sampling`]: the sampling markers of a span's start and the sampling
//!   key of an iteration.
//! - [`semconv`]: attribute keys shared by every consumer.
//! - [`tracing_rules`]: the `<PREFIX>_TRACING_GROUPS` rules that map
//!   `tracing` targets to span groups (read by `lens-tracing`).
//! - [`otlp_file`]: the offline reader of the `file` export.
//!
//! lens-core has no features that change what it is and no OpenTelemetry
//! dependency: every one of its tests runs under a plain
//! `cargo test -p lens-core`. The OpenTelemetry runtime is the crate
//! `lens-otel-runtime`; the API instrumented code calls (spans, metric
//! handles, setup and the `Telemetry` handle, propagation) is the facade's,
//! `lens-fallbacks`, the one crate programs name (see docs/architecture.md).

pub mod attr;
pub mod bootstrap;
pub mod config;
pub mod control;
pub mod diag;
pub mod env;
pub mod export_path;
pub mod exporter_error;
pub mod groups;
pub mod identity;
pub mod instrument_values;
pub mod otlp_file;
pub mod report;
pub mod sampling;
pub mod semconv;
pub mod strategies;
mod suggest;
pub mod tracing_rules;
