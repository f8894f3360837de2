//! NeMo RL metrics in the `rl.*` namespace: nine gauges for per-step training
//! values and two histograms for generation and rollout durations.
//!
//! [`RlMetrics::new`] creates all eleven instruments once from a [`Meter`];
//! [`RlMetrics::record`] (or [`record_rl_metrics`], the original's name,
//! available only from this module) records the values that are present, so
//! a caller can record partial data without conditional logic. The data
//! points carry no attributes of their own: the run identity comes from the
//! resource.
//!
//! ```
//! use lens_instruments::rl::{RlMetrics, RlValues, record_rl_metrics};
//! use lens_fallbacks::metrics::Meter;
//!
//! // `telemetry.meter()` after setup; a no-op meter here, so the example
//! // runs with and without `otel`.
//! let metrics = RlMetrics::new(&Meter::noop());
//!
//! // Only these two are recorded.
//! record_rl_metrics(&metrics, &RlValues { reward_mean: Some(0.75), policy_loss: Some(0.3), ..Default::default() });
//! // Just one.
//! metrics.record(&RlValues { kl_divergence: Some(0.01), ..Default::default() });
//! ```

use lens_fallbacks::metrics::{Gauge, Histogram, Meter};

use crate::descriptor::{InstrumentDescriptor, InstrumentKind};
use crate::{buckets, semconv};

const fn gauge(name: &'static str, unit: &'static str, description: &'static str) -> InstrumentDescriptor {
    InstrumentDescriptor { name, kind: InstrumentKind::Gauge, unit, description, attributes: &[], boundaries: &[] }
}

const fn histogram_ms(name: &'static str, description: &'static str) -> InstrumentDescriptor {
    InstrumentDescriptor {
        name,
        kind: InstrumentKind::Histogram,
        unit: "ms",
        description,
        attributes: &[],
        boundaries: buckets::ROLLOUT_DURATION_MS,
    }
}

/// `rl.reward.mean`: gauge.
pub const REWARD_MEAN: InstrumentDescriptor =
    gauge(semconv::RL_REWARD_MEAN, "", "Mean reward over the rollouts of the last step.");
/// `rl.kl_divergence`: gauge.
pub const KL_DIVERGENCE: InstrumentDescriptor =
    gauge(semconv::RL_KL_DIVERGENCE, "", "KL divergence between the policy and the reference policy.");
/// `rl.policy_loss`: gauge.
pub const POLICY_LOSS: InstrumentDescriptor = gauge(semconv::RL_POLICY_LOSS, "", "Policy loss.");
/// `rl.value_loss`: gauge.
pub const VALUE_LOSS: InstrumentDescriptor = gauge(semconv::RL_VALUE_LOSS, "", "Value (critic) loss.");
/// `rl.entropy`: gauge.
pub const ENTROPY: InstrumentDescriptor = gauge(semconv::RL_ENTROPY, "", "Policy entropy.");
/// `rl.response_length.mean`: gauge.
pub const RESPONSE_LENGTH_MEAN: InstrumentDescriptor =
    gauge(semconv::RL_RESPONSE_LENGTH_MEAN, "", "Mean length of the generated responses, in tokens.");
/// `rl.grad_norm`: gauge.
pub const GRAD_NORM: InstrumentDescriptor = gauge(semconv::RL_GRAD_NORM, "", "Global gradient norm.");
/// `rl.learning_rate`: gauge.
pub const LEARNING_RATE: InstrumentDescriptor = gauge(semconv::RL_LEARNING_RATE, "", "Learning rate.");
/// `rl.throughput.tokens_per_sec`: gauge, `{token}/s`.
pub const THROUGHPUT_TOKENS_PER_SEC: InstrumentDescriptor =
    gauge(semconv::RL_THROUGHPUT_TOKENS_PER_SEC, "{token}/s", "Throughput in tokens per second.");
/// `rl.generation.duration_ms`: histogram, milliseconds.
pub const GENERATION_DURATION: InstrumentDescriptor =
    histogram_ms("rl.generation.duration_ms", "Duration of one generation phase in milliseconds.");
/// `rl.rollout.duration_ms`: histogram, milliseconds.
pub const ROLLOUT_DURATION: InstrumentDescriptor =
    histogram_ms("rl.rollout.duration_ms", "Duration of one rollout in milliseconds.");

/// Every instrument of this module, in the docs table's order.
pub const INSTRUMENTS: &[InstrumentDescriptor] = &[
    REWARD_MEAN,
    KL_DIVERGENCE,
    POLICY_LOSS,
    VALUE_LOSS,
    ENTROPY,
    RESPONSE_LENGTH_MEAN,
    GRAD_NORM,
    LEARNING_RATE,
    THROUGHPUT_TOKENS_PER_SEC,
    GENERATION_DURATION,
    ROLLOUT_DURATION,
];

pub use lens_fallbacks::instrument_values::RlValues;

/// The `rl.*` instruments of one meter, created once.
///
/// Cloning is cheap and clones record into the same instruments. Creating
/// this never fails and never panics: the OpenTelemetry API reports no error
/// from instrument creation; an SDK that rejects an instrument logs why and
/// hands back a no-op one, so a broken meter records nothing.
#[derive(Clone, Debug)]
pub struct RlMetrics {
    reward_mean: Gauge<f64>,
    kl_divergence: Gauge<f64>,
    policy_loss: Gauge<f64>,
    value_loss: Gauge<f64>,
    entropy: Gauge<f64>,
    response_length_mean: Gauge<f64>,
    grad_norm: Gauge<f64>,
    learning_rate: Gauge<f64>,
    throughput_tokens_per_sec: Gauge<f64>,
    generation_duration: Histogram<f64>,
    rollout_duration: Histogram<f64>,
}

impl RlMetrics {
    /// Creates the eleven instruments on `meter`.
    #[must_use]
    pub fn new<M: Clone + Into<Meter>>(meter: &M) -> Self {
        let meter = &meter.clone().into();
        Self {
            reward_mean: REWARD_MEAN.f64_gauge(meter),
            kl_divergence: KL_DIVERGENCE.f64_gauge(meter),
            policy_loss: POLICY_LOSS.f64_gauge(meter),
            value_loss: VALUE_LOSS.f64_gauge(meter),
            entropy: ENTROPY.f64_gauge(meter),
            response_length_mean: RESPONSE_LENGTH_MEAN.f64_gauge(meter),
            grad_norm: GRAD_NORM.f64_gauge(meter),
            learning_rate: LEARNING_RATE.f64_gauge(meter),
            throughput_tokens_per_sec: THROUGHPUT_TOKENS_PER_SEC.f64_gauge(meter),
            generation_duration: GENERATION_DURATION.f64_histogram(meter),
            rollout_duration: ROLLOUT_DURATION.f64_histogram(meter),
        }
    }

    /// A handle that records nothing, for code paths where telemetry is off.
    #[must_use]
    pub fn noop() -> Self {
        Self::new(&Meter::noop())
    }

    /// Records the values that are present and skips the others.
    // Inline, so that at a call site that names its fields the absent ones
    // fold away and only the present values are recorded.
    #[inline]
    pub fn record(&self, values: &RlValues) {
        let gauges = [
            (&self.reward_mean, values.reward_mean),
            (&self.kl_divergence, values.kl_divergence),
            (&self.policy_loss, values.policy_loss),
            (&self.value_loss, values.value_loss),
            (&self.entropy, values.entropy),
            (&self.response_length_mean, values.response_length_mean),
            (&self.grad_norm, values.grad_norm),
            (&self.learning_rate, values.learning_rate),
            (&self.throughput_tokens_per_sec, values.throughput_tokens_per_sec),
        ];
        for (gauge, value) in gauges {
            if let Some(value) = value {
                gauge.record(value, &[]);
            }
        }
        if let Some(duration) = values.generation_duration_ms {
            self.generation_duration.record(duration, &[]);
        }
        if let Some(duration) = values.rollout_duration_ms {
            self.rollout_duration.record(duration, &[]);
        }
    }
}

/// Records the values that are present on `metrics`; the original's name
/// for [`RlMetrics::record`].
pub fn record_rl_metrics(metrics: &RlMetrics, values: &RlValues) {
    metrics.record(values);
}
