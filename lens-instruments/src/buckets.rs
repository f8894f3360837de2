//! Explicit histogram bucket boundaries, one list per kind of value.
//!
//! The SDK's default boundaries (0, 5, 10, 25, ..., 10 000) suit neither
//! seconds (every request duration lands in the first buckets) nor tokens
//! (every long prompt lands in the overflow bucket), so every histogram of
//! this crate declares its own boundaries through the instrument builder's
//! `with_boundaries`. The GenAI lists are the ones the OpenTelemetry GenAI
//! semantic conventions recommend; the millisecond lists grow roughly
//! exponentially (1, 2.5, 5 per decade) over the range each value spans.
//!
//! A list that is not finite and strictly increasing makes the SDK drop the
//! instrument without telling the caller, so a unit test checks every list.
//!
//! ```
//! use lens_instruments::{buckets, rl};
//!
//! assert_eq!(rl::ROLLOUT_DURATION.boundaries, buckets::ROLLOUT_DURATION_MS);
//! assert_eq!(buckets::GEN_AI_REQUEST_DURATION_S[0], 0.01);
//! ```

/// `gen_ai.server.request.duration`, in seconds: 10 ms to about 82 s,
/// doubling (the GenAI semantic conventions' recommendation).
pub const GEN_AI_REQUEST_DURATION_S: &[f64] =
    &[0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

/// `gen_ai.client.token.usage`, in tokens: 1 to 64 Mi, times four (the GenAI
/// semantic conventions' recommendation).
pub const GEN_AI_TOKEN_USAGE: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];

/// `gen_ai.server.time_to_first_token`, in seconds: 1 ms to 10 s (the GenAI
/// semantic conventions' recommendation).
pub const GEN_AI_TIME_TO_FIRST_TOKEN_S: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];

/// `gen_ai.server.time_per_output_token`, in seconds: 10 ms to 2.5 s (the
/// GenAI semantic conventions' recommendation).
pub const GEN_AI_TIME_PER_OUTPUT_TOKEN_S: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];

/// Server requests and verifications, in milliseconds: 1 ms to 5 min
/// (`gym.server.request_duration_ms`, `gym.verify.duration_ms`).
pub const REQUEST_DURATION_MS: &[f64] = &[
    1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 30_000.0, 60_000.0,
    120_000.0, 300_000.0,
];

/// Generations and rollouts, in milliseconds: 10 ms to 10 min
/// (`rl.generation.duration_ms`, `rl.rollout.duration_ms`,
/// `gym.rollout.duration_ms`).
pub const ROLLOUT_DURATION_MS: &[f64] = &[
    10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 25_000.0, 50_000.0, 100_000.0,
    250_000.0, 600_000.0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_list_is_finite_positive_and_strictly_increasing() {
        for (name, list) in [
            ("GEN_AI_REQUEST_DURATION_S", GEN_AI_REQUEST_DURATION_S),
            ("GEN_AI_TOKEN_USAGE", GEN_AI_TOKEN_USAGE),
            ("GEN_AI_TIME_TO_FIRST_TOKEN_S", GEN_AI_TIME_TO_FIRST_TOKEN_S),
            ("GEN_AI_TIME_PER_OUTPUT_TOKEN_S", GEN_AI_TIME_PER_OUTPUT_TOKEN_S),
            ("REQUEST_DURATION_MS", REQUEST_DURATION_MS),
            ("ROLLOUT_DURATION_MS", ROLLOUT_DURATION_MS),
        ] {
            assert!(!list.is_empty(), "{name} is empty");
            assert!(list.iter().all(|bound| bound.is_finite() && *bound > 0.0), "{name}: {list:?}");
            assert!(list.windows(2).all(|pair| pair[0] < pair[1]), "{name} is not strictly increasing: {list:?}");
        }
    }

    #[test]
    fn gen_ai_lists_follow_the_semantic_conventions_progressions() {
        for pair in GEN_AI_REQUEST_DURATION_S.windows(2) {
            assert!((pair[1] / pair[0] - 2.0).abs() < 1e-9, "{pair:?}");
        }
        for pair in GEN_AI_TOKEN_USAGE.windows(2) {
            assert_eq!(pair[1], pair[0] * 4.0);
        }
        assert_eq!(GEN_AI_TOKEN_USAGE.last(), Some(&67_108_864.0));
    }
}
