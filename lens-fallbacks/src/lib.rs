//! The facade that instrumented code calls.
//!
//! With the `otel` feature (the default) it re-exports the lens runtime and
//! the metric recording of `lens-instruments`; without it, `#[inline(always)]`
//! no-ops with the same names, arguments and types, and no OpenTelemetry crate
//! in the build. Call sites never mention the feature.
//!
//! The seam is one `cfg` here: `real` re-exports lens-core's items, `noop`
//! defines their twins. Both are pinned to the same API by
//! `tests/api_parity.rs`, which is compiled in both modes, and the same example
//! program (`examples/instrumented.rs`) builds and runs in both.
//!
//! ```
//! use lens_fallbacks::{KeyValue, SpanGroup, in_managed_span, managed_span, trace_fn};
//!
//! #[trace_fn(group = SpanGroup::STEP, name = "example.train_step")]
//! fn train_step(iteration: u64) -> f64 {
//!     let span = managed_span(SpanGroup::OPTIMIZER, "example.optimizer", [KeyValue::new("example.iteration", iteration)]);
//!     span.set_attribute("example.lr", 1e-4);
//!     0.5
//! }
//!
//! assert_eq!(train_step(1), 0.5);
//! let total = in_managed_span(SpanGroup::EVALUATE, "example.evaluate", [], |_span| 40 + 2);
//! assert_eq!(total, 42);
//! ```
//!
//! Differences between the modes are in behaviour only: with `otel` off
//! nothing is ever recording, every `RemoteContext` is "no context" and
//! `SpanGuard` is a zero-sized type. `RemoteContext::otel_context` and
//! `RemoteContext::from_otel` exist only with `otel` (they name OpenTelemetry
//! types) and are not part of the facade's API.

pub use lens_core::attr::{AttrValue, KeyValue};
pub use lens_core::config;
pub use lens_core::env::EnvSource;
pub use lens_core::groups::{GroupSet, SpanGroup, set_enabled_span_groups};
pub use lens_core::identity::RankContext;
pub use lens_core::report::{MetricExportSnapshot, ShutdownReport, SpanExportSnapshot};
pub use lens_macros::trace_fn;

#[cfg(feature = "otel")]
mod real;
#[cfg(feature = "otel")]
pub use real::*;

#[cfg(not(feature = "otel"))]
mod noop;
#[cfg(not(feature = "otel"))]
pub use noop::*;

/// What `#[trace_fn]` expands to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::{in_managed_span, instrument_future, try_in_managed_span, try_instrument_future};
}

/// The Rust examples of `docs/instrumenting.md`, compiled and run as doc
/// tests so that the page cannot drift from the API.
///
/// The page is included in every mode, so its facade examples run against the
/// real runtime (`cargo test -p lens-fallbacks --doc`) and against the no-ops
/// (`--no-default-features`). The one example that needs the in-memory
/// exporter (the test of a new span) gates its own body on the `testing`
/// feature in hidden lines: it runs under `--features testing` (and CI's
/// `cargo test --workspace --all-features`) and is an empty program otherwise.
#[cfg(doctest)]
#[doc = include_str!("../../docs/instrumenting.md")]
pub struct InstrumentingDocExamples;
