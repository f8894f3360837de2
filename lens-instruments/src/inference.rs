//! GenAI inference metrics, following the OpenTelemetry GenAI semantic
//! conventions: request duration in seconds and token usage per token type.
//!
//! [`InferenceMetrics::new`] creates both histograms once from a
//! [`Meter`]; [`InferenceMetrics::record`] (or the free function
//! [`record_inference_metrics`], the original's name) records whichever of
//! the values are present. Every data point carries
//! `gen_ai.operation.name` (default [`DEFAULT_OPERATION_NAME`]) and
//! `gen_ai.provider.name` (default [`DEFAULT_PROVIDER_NAME`]), plus
//! `gen_ai.request.model` when a model is given; token usage is recorded once
//! per token type, labelled `gen_ai.token.type` = `input` or `output`.
//!
//! The descriptors here ([`REQUEST_DURATION`], [`TOKEN_USAGE`],
//! [`TIME_TO_FIRST_TOKEN`], [`TIME_PER_OUTPUT_TOKEN`]) and the attribute
//! values ([`TOKEN_TYPE_INPUT`], [`TOKEN_TYPE_OUTPUT`],
//! [`DEFAULT_PROVIDER_NAME`], [`DEFAULT_OPERATION_NAME`]) are the one
//! definition of the GenAI metrics in the workspace: megatron-telemetry's
//! inference server (`megatron_telemetry::inference::ServerMetrics`, which
//! `megatron-train-sim serve` records through) builds its four histograms
//! from these descriptors with [`InstrumentDescriptor::f64_histogram`] and
//! [`InstrumentDescriptor::u64_histogram`] and re-exports these values.
//!
//! ```
//! use lens_instruments::{InferenceMetrics, InferenceValues, record_inference_metrics};
//! use lens_fallbacks::metrics::Meter;
//!
//! // `telemetry.meter()` after setup; a no-op meter here, so the example
//! // runs with and without `otel`.
//! let metrics = InferenceMetrics::new(&Meter::noop());
//!
//! record_inference_metrics(
//!     &metrics,
//!     &InferenceValues {
//!         request_duration_s: Some(0.42),
//!         model: Some("llama-3-8b"),
//!         input_tokens: Some(128),
//!         output_tokens: Some(256),
//!         ..Default::default()
//!     },
//! );
//! ```
//!
//! Cost: nothing is allocated when no value is present, and nothing at all
//! without `otel`. Otherwise the attributes live in a small array on the
//! stack (converted to the SDK's type per record); the defaults are static
//! strings, and a model name or an overridden provider or operation name is
//! copied once per call (the SDK needs owned attribute values).

use lens_fallbacks::attr::{AttrValue, KeyValue};
use lens_fallbacks::metrics::{Histogram, Meter};

use crate::descriptor::{InstrumentDescriptor, InstrumentKind};
use crate::{buckets, semconv};

/// `gen_ai.operation.name` when the caller names none.
pub const DEFAULT_OPERATION_NAME: &str = "text_completion";
/// `gen_ai.provider.name` when the caller names none.
pub const DEFAULT_PROVIDER_NAME: &str = "nemo";
/// `gen_ai.token.type` of the input-token data point.
pub const TOKEN_TYPE_INPUT: &str = "input";
/// `gen_ai.token.type` of the output-token data point.
pub const TOKEN_TYPE_OUTPUT: &str = "output";

/// `gen_ai.server.request.duration`: histogram, seconds.
pub const REQUEST_DURATION: InstrumentDescriptor = InstrumentDescriptor {
    name: "gen_ai.server.request.duration",
    kind: InstrumentKind::Histogram,
    unit: "s",
    description: "Generative AI server request duration such as time-to-last byte or last output token.",
    attributes: &[semconv::GENAI_OPERATION_NAME, semconv::GENAI_PROVIDER_NAME, semconv::GENAI_REQUEST_MODEL],
    boundaries: buckets::GEN_AI_REQUEST_DURATION_S,
};

/// `gen_ai.client.token.usage`: histogram, tokens, one data point per token
/// type.
pub const TOKEN_USAGE: InstrumentDescriptor = InstrumentDescriptor {
    name: "gen_ai.client.token.usage",
    kind: InstrumentKind::Histogram,
    unit: "{token}",
    description: "Number of input and output tokens used.",
    attributes: &[
        semconv::GENAI_OPERATION_NAME,
        semconv::GENAI_PROVIDER_NAME,
        semconv::GENAI_REQUEST_MODEL,
        semconv::GENAI_TOKEN_TYPE,
    ],
    boundaries: buckets::GEN_AI_TOKEN_USAGE,
};

/// Every instrument of this module, in the docs table's order.
pub const INSTRUMENTS: &[InstrumentDescriptor] =
    &[REQUEST_DURATION, TOKEN_USAGE, TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN];

pub use lens_fallbacks::instrument_values::InferenceValues;

/// The GenAI inference instruments of one meter, created once.
///
/// Cloning is cheap (the instruments are reference-counted) and clones
/// record into the same instruments. Creating a second handle on the same
/// meter is harmless: the SDK hands back the same instruments, so both
/// handles feed one metric stream.
#[derive(Clone, Debug)]
pub struct InferenceMetrics {
    request_duration: Histogram<f64>,
    token_usage: Histogram<u64>,
}

impl InferenceMetrics {
    /// Creates the two histograms on `meter`.
    ///
    /// This never fails and never panics: the OpenTelemetry API reports no
    /// error from instrument creation. An SDK that rejects an instrument logs
    /// the reason through its internal logging and hands back a no-op
    /// instrument, and a no-op meter gives no-op instruments; either way the
    /// handle then records nothing.
    #[must_use]
    pub fn new<M: Clone + Into<Meter>>(meter: &M) -> Self {
        let meter = &meter.clone().into();
        Self { request_duration: REQUEST_DURATION.f64_histogram(meter), token_usage: TOKEN_USAGE.u64_histogram(meter) }
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
    pub fn record(&self, values: &InferenceValues<'_>) {
        if values.request_duration_s.is_none() && values.input_tokens.is_none() && values.output_tokens.is_none() {
            return;
        }
        let operation = name_or(values.operation_name, DEFAULT_OPERATION_NAME);
        let provider = name_or(values.provider_name, DEFAULT_PROVIDER_NAME);
        // [operation, provider, model?, token type]: the duration uses the
        // leading `common` entries, token usage one more (the token type).
        let input_type = KeyValue::new(semconv::GENAI_TOKEN_TYPE, TOKEN_TYPE_INPUT);
        let mut attributes = [
            KeyValue::new(semconv::GENAI_OPERATION_NAME, operation),
            KeyValue::new(semconv::GENAI_PROVIDER_NAME, provider),
            input_type.clone(),
            input_type,
        ];
        let common = match values.model.filter(|model| !model.is_empty()) {
            Some(model) => {
                attributes[2] = KeyValue::new(semconv::GENAI_REQUEST_MODEL, model.to_owned());
                3
            }
            None => 2,
        };
        if let Some(duration) = values.request_duration_s {
            self.request_duration.record(duration, &attributes[..common]);
        }
        if let Some(tokens) = values.input_tokens {
            attributes[common] = KeyValue::new(semconv::GENAI_TOKEN_TYPE, TOKEN_TYPE_INPUT);
            self.token_usage.record(tokens, &attributes[..=common]);
        }
        if let Some(tokens) = values.output_tokens {
            attributes[common] = KeyValue::new(semconv::GENAI_TOKEN_TYPE, TOKEN_TYPE_OUTPUT);
            self.token_usage.record(tokens, &attributes[..=common]);
        }
    }
}

/// Records the values that are present on `metrics`; the original's name
/// for [`InferenceMetrics::record`].
pub fn record_inference_metrics(metrics: &InferenceMetrics, values: &InferenceValues<'_>) {
    metrics.record(values);
}

/// The caller's name when given and non-empty (copied: the SDK needs an
/// owned value), otherwise the static default (not copied).
fn name_or(given: Option<&str>, default: &'static str) -> AttrValue {
    match given {
        Some(name) if !name.is_empty() => name.to_owned().into(),
        _ => default.into(),
    }
}

// ---- Server latency: time to first token, time per output token -------------
//
// The two streaming-latency histograms of the GenAI semantic conventions'
// server metrics. An inference server records them once per request, beside
// `gen_ai.server.request.duration` and the token usage (megatron-telemetry's
// `inference::ServerMetrics` builds all four from these descriptors, for
// `megatron-train-sim serve`; `InferenceMetrics` here records only the first
// two). Token usage keeps
// the name `gen_ai.client.token.usage` on the server too, as Lens records it,
// for compatibility with existing dashboards.

/// `gen_ai.server.time_to_first_token`: histogram, seconds, from the
/// request's arrival to its first output token (queueing and prefill).
pub const TIME_TO_FIRST_TOKEN: InstrumentDescriptor = InstrumentDescriptor {
    name: "gen_ai.server.time_to_first_token",
    kind: InstrumentKind::Histogram,
    unit: "s",
    description: "Time to generate first token for successful responses.",
    attributes: &[semconv::GENAI_OPERATION_NAME, semconv::GENAI_PROVIDER_NAME, semconv::GENAI_REQUEST_MODEL],
    boundaries: buckets::GEN_AI_TIME_TO_FIRST_TOKEN_S,
};

/// `gen_ai.server.time_per_output_token`: histogram, seconds, the decode
/// time after the first token divided by the output tokens after the first.
pub const TIME_PER_OUTPUT_TOKEN: InstrumentDescriptor = InstrumentDescriptor {
    name: "gen_ai.server.time_per_output_token",
    kind: InstrumentKind::Histogram,
    unit: "s",
    description: "Time per output token generated after the first token for successful responses.",
    attributes: &[semconv::GENAI_OPERATION_NAME, semconv::GENAI_PROVIDER_NAME, semconv::GENAI_REQUEST_MODEL],
    boundaries: buckets::GEN_AI_TIME_PER_OUTPUT_TOKEN_S,
};
