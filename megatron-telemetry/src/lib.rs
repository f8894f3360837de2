//! Megatron's telemetry layer, built on the `lens-fallbacks` facade.
//!
//! It will hold `MegatronSpanGroup` and its presets, the span-name taxonomy as
//! data, the `megatron.training.*` metrics, resource attributes derived from
//! training arguments, and the lifecycle (startup trace, interval re-rooting,
//! signals, shutdown).

pub mod attributes;
pub mod goodput;
pub mod goodput_view;
pub mod groups;
pub mod inference;
pub mod lifecycle;
pub mod markdown;
pub mod metrics;
pub mod mfu;
pub mod nvml;
pub mod phases;
pub mod pipeline;
pub mod rank_metrics;
pub mod resource;
pub mod signals;
pub mod stragglers;
pub mod taxonomy;
pub mod watchdog;
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

/// The Rust examples of `docs/goodput.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/goodput.md")]
pub struct GoodputDocExamples;

/// The Rust examples of `docs/integrating.md` (the one-line setup of a loop
/// of one's own; the Megatron fragments there are excerpts of the compiled
/// example of [`lifecycle`]), compiled and run as doc tests in both modes.
#[cfg(doctest)]
#[doc = include_str!("../../docs/integrating.md")]
pub struct IntegratingDocExamples;
