//! Which network transports this build of the runtime has: its features
//! `otlp-grpc`, `otlp-http` and `prometheus`, as lens-core's pure
//! [`Transports`] (which setup checks a configuration against). A leaf, read
//! by the pipeline and the OTLP exporters.

use lens_core::config::Transports;

/// The transports this build of the runtime has.
pub const TRANSPORTS: Transports = Transports {
    otlp_grpc: cfg!(feature = "otlp-grpc"),
    otlp_http: cfg!(feature = "otlp-http"),
    prometheus: cfg!(feature = "prometheus"),
};
