//! Megatron's telemetry layer, built on the `lens-fallbacks` facade.
//!
//! It will hold `MegatronSpanGroup` and its presets, the span-name taxonomy as
//! data, the `megatron.training.*` metrics, resource attributes derived from
//! training arguments, and the lifecycle (startup trace, interval re-rooting,
//! signals, shutdown).

pub mod groups;
pub mod lifecycle;
pub mod metrics;
pub mod nvml;
pub mod resource;
pub mod signals;
pub mod taxonomy;
