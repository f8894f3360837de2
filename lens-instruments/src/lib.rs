//! Opinionated metric instruments for common observability needs: GenAI
//! inference (`gen_ai.*`, following the OpenTelemetry GenAI semantic
//! conventions), RL training (`rl.*`) and Gym servers (`gym.*`).
//!
//! Each module follows one pattern, the Rust form of the original's per-meter
//! instrument cache: a handle created once from a
//! [`Meter`](lens_fallbacks::metrics::Meter) holds the module's instruments
//! (so recording looks nothing up), and its `record` method takes a values
//! struct of `Option` fields and records only the values that are present.
//! Dropping the handle drops the instruments; nothing is cached globally.
//!
//! - [`inference`]: [`InferenceMetrics`], [`InferenceValues`],
//!   [`record_inference_metrics`] (all three also re-exported here);
//! - [`rl`]: `RlMetrics`, `RlValues`, `record_rl_metrics` (from the module
//!   only);
//! - [`gym`]: `GymMetrics`, `GymValues`, `record_gym_metrics` (from the
//!   module only);
//! - [`buckets`]: the explicit histogram bucket boundaries;
//! - [`semconv`]: the attribute keys, mirroring lens-core's;
//! - [`InstrumentDescriptor`]: each instrument as data (name, kind, unit,
//!   description, attributes, boundaries), which the modules build from and
//!   the docs tables are checked against. They are the one definition of
//!   these instruments: megatron-telemetry's inference server builds its
//!   `gen_ai.*` histograms from [`inference`]'s descriptors too.
//!
//! Nothing here panics or returns an error: the OpenTelemetry API gives no
//! failure signal from instrument creation, and a meter that cannot create an
//! instrument (a no-op meter, or an SDK rejecting it after logging why) yields
//! an instrument that records nothing.
//!
//! The handles are built on the facade's metric handles
//! ([`lens_fallbacks::metrics`]), so this crate has no `cfg` and no `otel`
//! feature of its own and names no OpenTelemetry type: with the facade's
//! `otel` feature (turned on by the application) they record into the
//! OpenTelemetry SDK, without it they are inline no-ops. A handle is also
//! created from an OpenTelemetry meter (`new` takes anything that converts
//! into lens's `Meter`). The user guide is `docs/metrics-lens.md`.
//!
//! ```
//! use lens_fallbacks::metrics::Meter;
//! use lens_instruments::{InferenceMetrics, InferenceValues};
//!
//! // `telemetry.meter()` after setup; a no-op meter here.
//! let metrics = InferenceMetrics::new(&Meter::noop());
//! metrics.record(&InferenceValues { request_duration_s: Some(0.42), ..Default::default() });
//! ```

pub mod buckets;
mod descriptor;
pub mod gym;
pub mod inference;
pub mod rl;
pub mod semconv;

pub use descriptor::{InstrumentDescriptor, InstrumentKind};
pub use inference::{InferenceMetrics, InferenceValues, record_inference_metrics};

/// The examples of `docs/metrics-lens.md`, compiled and run as doc tests
/// (they read back what an SDK meter exported, so they need `testing`).
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../../docs/metrics-lens.md")]
pub struct MetricsLensDocExamples;
