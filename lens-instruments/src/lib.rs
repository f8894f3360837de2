//! Opinionated metric instruments for common observability needs: GenAI
//! inference (`gen_ai.*`, following the OpenTelemetry GenAI semantic
//! conventions), RL training (`rl.*`) and Gym servers (`gym.*`).
//!
//! Each module creates its instruments once from a `Meter` into a handle and
//! records only the values that are present. This crate is built on
//! OpenTelemetry meters, so it is only part of the build when the `otel`
//! feature of `lens-fallbacks` is on.
