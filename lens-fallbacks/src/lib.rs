//! The facade that instrumented code calls.
//!
//! Every item is defined once, in lens-core, and always compiled: with the
//! `otel` feature (the default) their bodies are the lens runtime, without it
//! they are `#[inline]` no-ops with the same names, arguments and types, and
//! no OpenTelemetry crate is in the build. This crate holds no copy of any
//! item: it re-exports them, so the API cannot differ between the modes. Its
//! `otel` feature selects the runtime (it turns on lens-core's and
//! lens-instruments'). The same example program (`examples/instrumented.rs`)
//! builds and runs in both modes.
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
//! builder (`SpanBuilder`), the `Meter`, every metric handle (`Counter`,
//! `UpDownCounter`, `Histogram`, `Gauge`) and the recording structs of
//! [`instruments`] (`tests/zero_sized.rs` checks each).
//! lens-core's few inherent methods that name OpenTelemetry types
//! (`RemoteContext::otel_context`, `RemoteContext::from_otel`,
//! `Telemetry::tracer`, `Telemetry::otel_meter`, `Meter::otel_meter`, the
//! custom exporters of `SetupOptions`) exist only with `otel` and are not
//! part of the facade's API.

pub use lens_core::attr::{
    AttrValue, DEFAULT_REDACT_KEYS, KeyValue, LazyAttributes, REDACTED, lazy_attributes, redact_value,
};
pub use lens_core::bootstrap::InvalidBootstrap;
pub use lens_core::config;
pub use lens_core::env::EnvSource;
pub use lens_core::groups::{GroupSet, SpanGroup};
pub use lens_core::identity::RankContext;
pub use lens_core::metrics::{Counter, Gauge, Histogram, InstrumentBuilder, Meter, UpDownCounter};
pub use lens_core::propagation::{
    AttachedContext, RemoteContext, WorkerBootstrap, context_from_env, current_context, decode_context, encode_context,
    extract_context, inject_context,
};
pub use lens_core::report::{MetricExportSnapshot, ShutdownReport, SpanExportSnapshot};
pub use lens_core::setup::{SetupError, SetupOptions, Telemetry, setup_telemetry};
pub use lens_core::span::{
    DetachedSpan, SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, SpanBuilder, SpanGuard, SpanKind, SpanLink, enter_span,
    in_managed_span, instrument_future, is_span_group_enabled, managed_span, sampling_key, span, try_in_managed_span,
    try_instrument_future, ungated_span,
};
pub use lens_macros::trace_fn;
// Setting telemetry up from the facade alone: `Telemetry::from_env`, its
// builder, the environment sources it reads, and every error that converts
// into `SetupError`.
pub use lens_core::config::ConfigError;
pub use lens_core::env::{FnEnv, ProcessEnv};
pub use lens_core::groups::{LENS_CATALOG, SpanGroupCatalog, UnknownSpanGroup};
pub use lens_core::identity::RankContextError;
pub use lens_core::setup::{ExporterError, TelemetryBuilder};
pub use lens_core::strategies::StrategyError;
pub use lens_core::tracing_rules::TracingRulesError;

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

/// The metric recording of `lens-instruments`: handles created once from a
/// [`Meter`], values structs of `Option` fields, and the original's
/// `record_*_metrics` functions.
///
/// One definition for both modes: the handles are built on lens-core's
/// metric handles, so with `otel` off they hold nothing and record nothing.
/// As the seed page says, inference recording is also re-exported here at
/// the root; RL and Gym recording only from their modules.
///
/// ```
/// use lens_fallbacks::Meter;
/// use lens_fallbacks::instruments::rl::{RlMetrics, RlValues};
///
/// let metrics = RlMetrics::new(&Meter::noop()); // or `telemetry.meter()`
/// metrics.record(&RlValues { reward_mean: Some(0.75), ..Default::default() });
/// ```
pub mod instruments {
    pub use lens_instruments::{InferenceMetrics, InferenceValues, record_inference_metrics};

    /// GenAI inference metrics (`gen_ai.*`).
    pub mod inference {
        pub use lens_instruments::inference::{InferenceMetrics, InferenceValues, record_inference_metrics};
    }

    /// NeMo RL metrics (`rl.*`).
    pub mod rl {
        pub use lens_instruments::rl::{RlMetrics, RlValues, record_rl_metrics};
    }

    /// NeMo Gym server metrics (`gym.*`).
    pub mod gym {
        pub use lens_instruments::gym::{GymMetrics, GymValues, record_gym_metrics};
    }
}

/// Test support (feature `testing`): span capture and the gate's writer
/// (`lens_core::testing`).
#[cfg(feature = "testing")]
pub mod testing {
    pub use lens_core::testing::*;
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
