//! The worker bootstrap's plain data that does not depend on telemetry being
//! compiled in: the error of reading one back from the environment.
//!
//! `WorkerBootstrap` itself is the facade's (`lens_fallbacks::propagation`):
//! with its `otel` feature it captures and restores the current trace
//! context, without it it is always inert. Its error type is plain data, so
//! it is defined here, in lens-core, and re-exported by the facade.

/// A worker bootstrap has a variable with a value it cannot read.
///
/// ```
/// use lens_core::bootstrap::InvalidBootstrap;
///
/// let error = InvalidBootstrap { variable: "MEGATRON_OTEL_ENABLED".into(), value: "maybe".into() };
/// assert!(error.to_string().starts_with("invalid boolean for MEGATRON_OTEL_ENABLED: \"maybe\""));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid boolean for {variable}: {value:?}; expected '1'/'0', 'true'/'false', 'yes'/'no' or 'on'/'off'")]
pub struct InvalidBootstrap {
    /// The variable read.
    pub variable: String,
    /// Its value.
    pub value: String,
}
