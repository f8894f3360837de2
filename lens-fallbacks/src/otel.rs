//! The OpenTelemetry runtime (`lens-otel-runtime`), with the facade's `otel`
//! feature: for integrations that bridge another API into lens (the
//! `tracing` bridge's layer) and for tests (the in-memory exporters,
//! `otel::exporters::testing`). Instrumented code never needs it, and it is
//! not part of the API that exists in both builds. Crates above the facade
//! reach the runtime only through this module (`cargo xtask tidy` checks
//! that they never name `lens_otel_runtime`).

pub use lens_otel_runtime::*;
