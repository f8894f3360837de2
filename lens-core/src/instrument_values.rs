//! The values that lens-instruments records, as plain data.
//!
//! `lens-instruments` builds its handles (`InferenceMetrics`, `RlMetrics`,
//! `GymMetrics`) on the facade's metric handles. The values a caller fills in
//! are pure data and live here, in lens-core (re-exported as
//! `lens_fallbacks::instrument_values`, and by `lens-instruments` from its
//! modules), so that code that builds a values struct compiles identically
//! whether or not telemetry is compiled in (as with
//! [`report`](crate::report)).
//!
//! Every field is an `Option`; `None` means "not recorded this time". Build
//! them with struct-update syntax so that new fields never break callers:
//!
//! ```
//! use lens_core::instrument_values::{GymValues, InferenceValues, RlValues};
//!
//! let inference = InferenceValues { request_duration_s: Some(0.42), model: Some("llama-3-8b"), ..Default::default() };
//! let rl = RlValues { reward_mean: Some(0.75), ..Default::default() };
//! let gym = GymValues { active_servers: Some(4), ..Default::default() };
//! assert_eq!(inference.input_tokens, None);
//! assert_eq!((rl.kl_divergence, gym.active_servers), (None, Some(4)));
//! ```
//!
//! [`InstrumentKind`] is here for the same reason: the kind column of the
//! metric tables is one type for lens-instruments' descriptors and
//! megatron-telemetry's metric definitions (which exist in both modes).

/// The kind of an instrument, as exporters, dashboards and the docs tables
/// see it.
///
/// ```
/// use lens_core::instrument_values::InstrumentKind;
///
/// assert_eq!(InstrumentKind::Histogram.as_str(), "Histogram");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstrumentKind {
    /// A distribution of values (durations, sizes): percentiles are available.
    Histogram,
    /// A point-in-time value: the last reported value wins.
    Gauge,
    /// A monotonic cumulative count: dashboards show its rate.
    Counter,
}

impl InstrumentKind {
    /// The kind as written in the docs tables: `Histogram`, `Gauge` or
    /// `Counter`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            InstrumentKind::Histogram => "Histogram",
            InstrumentKind::Gauge => "Gauge",
            InstrumentKind::Counter => "Counter",
        }
    }
}

/// The values of one inference request (`gen_ai.*`); `None` (and, for the
/// names, an empty string) means "not given".
///
/// Build it with struct-update syntax so that new fields never break callers:
/// `InferenceValues { input_tokens: Some(12), ..Default::default() }`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InferenceValues<'a> {
    /// Request duration in seconds (`gen_ai.server.request.duration`).
    pub request_duration_s: Option<f64>,
    /// The requested model (`gen_ai.request.model`); no attribute when `None`
    /// or empty.
    pub model: Option<&'a str>,
    /// Input (prompt) tokens (`gen_ai.client.token.usage`, type `input`).
    pub input_tokens: Option<u64>,
    /// Output (completion) tokens (`gen_ai.client.token.usage`, type
    /// `output`).
    pub output_tokens: Option<u64>,
    /// `gen_ai.provider.name`; `nemo` when `None` or empty.
    pub provider_name: Option<&'a str>,
    /// `gen_ai.operation.name`; `text_completion` when `None` or empty.
    pub operation_name: Option<&'a str>,
}

/// The values of one RL step (`rl.*`); `None` means "not recorded this
/// time".
///
/// Build it with struct-update syntax:
/// `RlValues { reward_mean: Some(0.75), ..Default::default() }`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RlValues {
    /// `rl.reward.mean`.
    pub reward_mean: Option<f64>,
    /// `rl.kl_divergence`.
    pub kl_divergence: Option<f64>,
    /// `rl.policy_loss`.
    pub policy_loss: Option<f64>,
    /// `rl.value_loss`.
    pub value_loss: Option<f64>,
    /// `rl.entropy`.
    pub entropy: Option<f64>,
    /// `rl.response_length.mean`.
    pub response_length_mean: Option<f64>,
    /// `rl.grad_norm`.
    pub grad_norm: Option<f64>,
    /// `rl.learning_rate`.
    pub learning_rate: Option<f64>,
    /// `rl.throughput.tokens_per_sec`.
    pub throughput_tokens_per_sec: Option<f64>,
    /// `rl.generation.duration_ms` (one histogram sample).
    pub generation_duration_ms: Option<f64>,
    /// `rl.rollout.duration_ms` (one histogram sample).
    pub rollout_duration_ms: Option<f64>,
}

/// The values of a Gym server (`gym.*`) to record; `None` means "not
/// recorded this time".
///
/// Build it with struct-update syntax:
/// `GymValues { active_servers: Some(4), ..Default::default() }`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GymValues {
    /// `gym.server.request_duration_ms` (one histogram sample).
    pub server_request_duration_ms: Option<f64>,
    /// `gym.rollout.duration_ms` (one histogram sample).
    pub rollout_duration_ms: Option<f64>,
    /// `gym.verify.duration_ms` (one histogram sample).
    pub verify_duration_ms: Option<f64>,
    /// `gym.verify.success_rate`, from 0 to 1.
    pub verify_success_rate: Option<f64>,
    /// `gym.servers.active`.
    pub active_servers: Option<u64>,
}
