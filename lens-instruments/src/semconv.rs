//! The attribute keys and metric names this crate uses, as its own `pub const`
//! items: the `gen_ai.*`, `rl.*` and `gym.*` keys of NeMo Lens's semantic
//! conventions (SPEC B 8).
//!
//! lens-instruments depends on no other lens crate (the dependency direction
//! is lens-fallbacks → lens-core and lens-instruments), so it cannot use
//! lens-core's `semconv` module; it mirrors the keys it needs instead, with
//! the same constant names. [`ALL`] lists every key once with its constant
//! name, so that a workspace check can compare the two modules and they
//! cannot drift.
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
//! assert!(semconv::ALL.contains(&("RL_REWARD_MEAN", "rl.reward.mean")));
//! ```

macro_rules! keys {
    ($($(#[$doc:meta])* $name:ident = $key:literal;)*) => {
        $($(#[$doc])* pub const $name: &str = $key;)*

        /// Every key of this module once, as (constant name, key), in
        /// declaration order.
        pub const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),*];
    };
}

keys! {
    // Generative AI (OpenTelemetry GenAI semantic conventions, experimental).
    /// The operation, such as `text_completion` or `chat`.
    GENAI_OPERATION_NAME = "gen_ai.operation.name";
    /// The model provider, such as `nemo`.
    GENAI_PROVIDER_NAME = "gen_ai.provider.name";
    /// The requested model, such as `llama-3-8b`.
    GENAI_REQUEST_MODEL = "gen_ai.request.model";
    /// `input` or `output` tokens.
    GENAI_TOKEN_TYPE = "gen_ai.token.type";

    // Reinforcement learning (NeMo custom).
    /// The algorithm, such as `grpo`.
    RL_ALGORITHM = "rl.algorithm";
    /// A reward.
    RL_REWARD = "rl.reward";
    /// Mean reward.
    RL_REWARD_MEAN = "rl.reward.mean";
    /// KL divergence.
    RL_KL_DIVERGENCE = "rl.kl_divergence";
    /// Policy loss.
    RL_POLICY_LOSS = "rl.policy_loss";
    /// Value loss.
    RL_VALUE_LOSS = "rl.value_loss";
    /// Entropy.
    RL_ENTROPY = "rl.entropy";
    /// The generation backend, such as `vllm`.
    RL_GENERATION_BACKEND = "rl.generation.backend";
    /// Number of rollouts.
    RL_NUM_ROLLOUTS = "rl.num_rollouts";
    /// Mean response length.
    RL_RESPONSE_LENGTH_MEAN = "rl.response_length.mean";
    /// Gradient norm.
    RL_GRAD_NORM = "rl.grad_norm";
    /// Learning rate.
    RL_LEARNING_RATE = "rl.learning_rate";
    /// Throughput in tokens per second.
    RL_THROUGHPUT_TOKENS_PER_SEC = "rl.throughput.tokens_per_sec";

    // Gym (NeMo custom).
    /// The Gym server's name.
    GYM_SERVER_NAME = "gym.server.name";
    /// The Gym server's type.
    GYM_SERVER_TYPE = "gym.server.type";
    /// Number of Gym servers.
    GYM_NUM_SERVERS = "gym.num_servers";
    /// Rollout batch size.
    GYM_ROLLOUT_BATCH_SIZE = "gym.rollout.batch_size";
    /// Share of verifications that succeeded.
    GYM_VERIFY_SUCCESS_RATE = "gym.verify.success_rate";
}

#[cfg(test)]
mod tests {
    use super::ALL;

    #[test]
    fn every_key_is_listed_once_under_its_namespace() {
        assert_eq!(ALL.len(), 22, "4 gen_ai + 13 rl + 5 gym keys (SPEC B 8)");
        for (index, (name, key)) in ALL.iter().enumerate() {
            let prefix = match name.split('_').next() {
                Some("GENAI") => "gen_ai.",
                Some("RL") => "rl.",
                Some("GYM") => "gym.",
                other => panic!("unexpected constant family {other:?} for {name}"),
            };
            assert!(key.starts_with(prefix), "{name} = {key} is outside {prefix}");
            assert!(!ALL[..index].iter().any(|(_, earlier)| earlier == key), "{key} listed twice");
        }
    }
}
