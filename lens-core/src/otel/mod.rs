//! The OpenTelemetry runtime (feature `otel`): setup and shutdown, providers,
//! exporters, samplers, the ID generator, the open-span closer, span helpers
//! and propagation.
pub mod active;
pub mod propagation;
pub mod span;
pub mod exporters;
