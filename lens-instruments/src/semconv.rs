//! The attribute keys and metric names this crate uses: the `gen_ai.*`,
//! `rl.*` and `gym.*` keys of NeMo Lens's semantic conventions,
//! re-exported from lens-core's `semconv` module, which defines every key
//! once.
//!
//! Several RL and Gym keys double as metric names (`rl.reward.mean` is both a
//! key and the name of the mean-reward gauge); the instrument descriptors of
//! [`rl`](crate::rl) and [`gym`](crate::gym) use these constants for those
//! names.
//!
//! ```
//! use lens_instruments::semconv;
//!
//! assert_eq!(semconv::GENAI_TOKEN_TYPE, "gen_ai.token.type");
//! assert_eq!(semconv::RL_REWARD_MEAN, "rl.reward.mean");
//! ```

pub use lens_fallbacks::semconv::{
    GENAI_OPERATION_NAME, GENAI_PROVIDER_NAME, GENAI_REQUEST_MODEL, GENAI_TOKEN_TYPE, GYM_NUM_SERVERS,
    GYM_ROLLOUT_BATCH_SIZE, GYM_SERVER_NAME, GYM_SERVER_TYPE, GYM_VERIFY_SUCCESS_RATE, RL_ALGORITHM, RL_ENTROPY,
    RL_GENERATION_BACKEND, RL_GRAD_NORM, RL_KL_DIVERGENCE, RL_LEARNING_RATE, RL_NUM_ROLLOUTS, RL_POLICY_LOSS,
    RL_RESPONSE_LENGTH_MEAN, RL_REWARD, RL_REWARD_MEAN, RL_THROUGHPUT_TOKENS_PER_SEC, RL_VALUE_LOSS,
};
