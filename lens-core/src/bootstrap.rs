//! The worker bootstrap's plain data that does not depend on telemetry being
//! compiled in: the error of reading one back from the environment.
//!
//! `WorkerBootstrap` itself has two definitions, one per side of the facade:
//! with the `otel` feature it captures and restores the current trace
//! context (`lens_core::otel::propagation`), without it it is always inert
//! (`lens-fallbacks`). Its error type is the same in both, so it is defined
//! once, here, and re-exported by both.

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
