//! The facade that instrumented code calls.
//!
//! With the `otel` feature (the default) it re-exports the lens runtime and
//! the metric recording of `lens-instruments`; without it, `#[inline(always)]`
//! no-ops with the same names, arguments and types, and no OpenTelemetry crate
//! in the build. Call sites never mention the feature.

pub use lens_core::config;
pub use lens_core::groups::{SpanGroup, is_span_group_enabled, set_enabled_span_groups};
