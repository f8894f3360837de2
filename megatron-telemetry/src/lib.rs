//! Megatron's telemetry layer, built on the `lens-fallbacks` facade.
//!
//! It holds what is Megatron's: `MegatronSpanGroup` and its presets, the
//! span-name taxonomy as data, the eight `megatron.training.*` metrics,
//! resource attributes derived from training arguments, and the lifecycle
//! (startup trace, interval re-rooting, signals, shutdown). The training
//! diagnosis any loop uses (phases, per-rank metrics, stragglers, the hang
//! watchdog, goodput, MFU) is lens-training's; [`events`] gives it
//! Megatron's span taxonomy.

pub mod attributes;
pub mod events;
pub mod groups;
pub mod inference;
pub mod lifecycle;
pub mod markdown;
pub mod metrics;
pub mod nvml;
pub mod pipeline;
pub mod resource;
pub mod signals;
pub mod taxonomy;
pub mod workers;

/// The Rust examples of `docs/resource-attributes.md`, compiled and run as doc
/// tests so that the page cannot drift from the API (in both modes: they call
/// the facade, so `--no-default-features` runs them against the no-ops).
#[cfg(doctest)]
#[doc = include_str!("../../docs/resource-attributes.md")]
pub struct ResourceAttributesDocExamples;

/// The Rust examples of `docs/metrics-megatron.md`, compiled and run as doc
/// tests against the SDK's in-memory exporter, so with the `testing` feature
/// (CI's `--all-features` run); the otel-off build of the same types is
/// covered by `tests/metrics.rs`.
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../../docs/metrics-megatron.md")]
pub struct MetricsMegatronDocExamples;

/// The Rust examples of `docs/integrating.md` (the one-line setup of a loop
/// of one's own; the Megatron fragments there are excerpts of the compiled
/// example of [`lifecycle`]), compiled and run as doc tests in both modes.
#[cfg(doctest)]
#[doc = include_str!("../../docs/integrating.md")]
pub struct IntegratingDocExamples;
