//! The facade that instrumented code calls.
//!
//! Every item of the API (spans, the span builder, metric handles, setup and
//! the [`Telemetry`] handle, propagation, reports) is defined once, here, and
//! always compiled: with the `otel` feature (the default) their bodies call
//! the runtime crate `lens-otel-runtime`, without it they are `#[inline]`
//! no-ops with the same names, arguments and types, and no OpenTelemetry
//! crate is in the build. lens-core's pure modules (configuration, groups,
//! identity, semantic conventions...) are re-exported under their own names
//! (`lens_fallbacks::config`, `lens_fallbacks::groups`, ...): a program and
//! every crate above the facade name this crate only. The same example
//! program (`examples/instrumented.rs`) builds and runs in both modes.
//!
//! Features: `otel` (the runtime with the file and console exporters),
//! `otlp-grpc` (OTLP over gRPC, on by default), `otlp-http` (OTLP over
//! HTTP), `prometheus` (the pull endpoint), `testing` (in-memory
//! exporters). A configuration that selects a transport the build lacks is a
//! setup error naming the variable and the feature ([`MissingTransport`]).
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
//! nothing is ever recording, every `RemoteContext` is "no context",
//! `Telemetry` exports nothing, and what code holds on its hot path is
//! zero-sized: the span guards (`SpanGuard`, `DetachedSpan`), the span
//! builder (`SpanBuilder`), the `Meter` and every metric handle (`Counter`,
//! `UpDownCounter`, `Histogram`, `Gauge`) (`tests/zero_sized.rs` checks each).
//! The few inherent methods that name OpenTelemetry types
//! (`RemoteContext::otel_context`, `RemoteContext::from_otel`,
//! `Telemetry::tracer`, `Telemetry::otel_meter`, `Meter::otel_meter`, the
//! custom exporters of `SetupOptions`) exist only with `otel` and are not
//! part of the facade's API.

// lens-core's pure modules, under the same names: lens-core's `X` is
// `lens_fallbacks::X` (no crate above the facade names lens-core).
pub use lens_core::{
    attr, bootstrap, config, control, diag, env, export_path, exporter_error, groups, identity, instrument_values,
    otlp_file, report, sampling, semconv, strategies, tracing_rules,
};

pub mod metrics;
pub mod propagation;
pub mod setup;
pub mod span;
pub mod spool;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "otel")]
pub mod otel;

pub use attr::{AttrValue, DEFAULT_REDACT_KEYS, KeyValue, LazyAttributes, REDACTED, lazy_attributes, redact_value};
pub use bootstrap::InvalidBootstrap;
pub use env::EnvSource;
pub use groups::{GroupSet, SpanGroup};
pub use identity::RankContext;
pub use lens_macros::trace_fn;
pub use metrics::{Counter, Gauge, Histogram, InstrumentBuilder, Meter, UpDownCounter};
pub use propagation::{
    AttachedContext, RemoteContext, WorkerBootstrap, context_from_env, current_context, decode_context, encode_context,
    extract_context, inject_context,
};
pub use report::{MetricExportSnapshot, ShutdownReport, SpanExportSnapshot};
pub use setup::{SetupError, SetupOptions, Telemetry, setup_telemetry};
pub use span::{
    DetachedSpan, SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, SpanBuilder, SpanGuard, SpanKind, SpanLink,
    add_event_to_current, enter_span, in_managed_span, instrument_future, is_span_group_enabled, managed_span,
    sampling_key, span, try_in_managed_span, try_instrument_future, ungated_span,
};
// Setting telemetry up from the facade alone: `Telemetry::from_env`, its
// builder, the environment sources it reads, and every error setup returns.
pub use config::{ConfigError, MissingTransport};
pub use env::{FnEnv, ProcessEnv};
pub use groups::{LENS_CATALOG, SpanGroupCatalog, UnknownSpanGroup};
pub use identity::RankContextError;
pub use setup::{ExporterError, TelemetryBuilder};
pub use strategies::StrategyError;
pub use tracing_rules::TracingRulesError;

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

/// The Rust examples of `docs/own-program.md` ("Using lens in your own
/// program"), compiled and run as doc tests in both modes.
#[cfg(doctest)]
#[doc = include_str!("../../docs/own-program.md")]
pub struct OwnProgramDocExamples;

/// The Rust examples of `docs/configuration.md`, compiled and run as doc
/// tests so that the page cannot drift from the API, in both modes.
#[cfg(doctest)]
#[doc = include_str!("../../docs/configuration.md")]
pub struct ConfigurationDocExamples;

/// The Rust example of `docs/trace-view.md` (reading an export with
/// `otlp_file::tree`), compiled and run as a doc test in both modes.
#[cfg(doctest)]
#[doc = include_str!("../../docs/trace-view.md")]
pub struct TraceViewDocExamples;
