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

/// Opens a span of a group, current until the guard drops, and evaluates its
/// attributes only when the group is enabled.
///
/// `managed_span!(group, name, key => value, ...)` is the everyday form of
/// [`managed_span`](fn@managed_span): the gate (one relaxed load and a mask
/// test) is read first, and the name, the keys and the values are evaluated,
/// and the attributes built, only when it passes. A disabled group therefore
/// costs the gate whatever the attributes are, even when the values are
/// runtime variables (an iteration number, a loss) or calls; the function
/// form builds its attribute array before it can look at the gate. Keys are
/// anything `Into<Cow<'static, str>>`, values anything `Into<AttrValue>`, as
/// for [`KeyValue::new`].
///
/// ```
/// use lens_fallbacks::{SpanGroup, managed_span};
///
/// let (iteration, loss) = (7_u64, 2.5_f64);
/// let span = managed_span!(SpanGroup::STEP, "example.train_step", "example.iteration" => iteration, "example.loss" => loss);
/// // Nothing is set up, so the group is off and the guard is inert.
/// assert!(!span.is_recording());
///
/// // Without attributes.
/// let _checkpoint = managed_span!(SpanGroup::CHECKPOINT, "example.checkpoint");
/// ```
#[macro_export]
macro_rules! managed_span {
    ($group:expr, $name:expr $(, $key:expr => $value:expr)* $(,)?) => {{
        let group: $crate::SpanGroup = $group;
        if $crate::is_span_group_enabled(group) {
            $crate::managed_span(group, $name, [$($crate::KeyValue::new($key, $value)),*])
        } else {
            $crate::SpanGuard::noop()
        }
    }};
}

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
