//! The inference server's telemetry: the spans of one request and of one
//! decode step (groups `inference` and `inference_step`, see
//! [`crate::taxonomy`]) and the per-request metrics.
//!
//! A request crosses threads (the HTTP task receives it, the engine thread
//! runs it), so its spans are [`DetachedSpan`]s: never current, `Send`, and
//! each child names its parent explicitly. The tree of one request:
//!
//! - `POST /v1/completions` (kind SERVER, HTTP semantic conventions), the
//!   child of the request's W3C `traceparent` when it has one: the server's
//!   HTTP stack makes it (tower-http's trace layer, a `tracing` span with the
//!   target [`HTTP_SERVER_TARGET`], recorded by the lens-tracing bridge);
//!   - `text_completion megatron-sim` or `chat megatron-sim` (INTERNAL,
//!     GenAI semantic conventions);
//!     - `megatron.inference.queue`, `megatron.inference.prefill`,
//!       `megatron.inference.decode`.
//!
//! `megatron.inference.step` is one root per step of the running batch,
//! linked to the GenAI span of every request in it.
//!
//! Metrics ([`ServerMetrics`], lens-core's handles, so one definition for
//! both builds): `gen_ai.server.request.duration`,
//! `gen_ai.server.time_to_first_token`, `gen_ai.server.time_per_output_token`
//! (seconds, the GenAI conventions' buckets), `gen_ai.client.token.usage`
//! (per `gen_ai.token.type`; the name Lens records on the server, kept for
//! compatibility), and the UpDownCounters `megatron.inference.requests.running`
//! and `megatron.inference.requests.waiting`. The four GenAI histograms are
//! lens-instruments' descriptors (`lens_instruments::inference`): the server
//! creates them from those descriptors, and [`REQUEST_DURATION`],
//! [`TIME_TO_FIRST_TOKEN`], [`TIME_PER_OUTPUT_TOKEN`] and [`TOKEN_USAGE`] are
//! derived from them ([`ServerMetricDef::gen_ai`]), adding only the
//! Prometheus name. The attribute values [`PROVIDER_NAME`],
//! [`OPERATION_TEXT_COMPLETION`], [`TOKEN_TYPE_INPUT`] and
//! [`TOKEN_TYPE_OUTPUT`] are lens-instruments' too, re-exported here. The two
//! `megatron.inference.requests.*` counters are Megatron's and defined here.
//!
//! ```
//! use megatron_telemetry::inference::{RequestValues, ServerMetrics};
//!
//! let metrics = ServerMetrics::noop();
//! metrics.waiting_add(1);
//! metrics.record_request(&RequestValues {
//!     operation: "text_completion",
//!     model: "megatron-sim",
//!     duration_s: 0.5,
//!     time_to_first_token_s: Some(0.1),
//!     time_per_output_token_s: Some(0.01),
//!     input_tokens: 12,
//!     output_tokens: 40,
//! });
//! ```

use std::time::SystemTime;

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::metrics::{Histogram, Meter, UpDownCounter};
use lens_fallbacks::semconv;
use lens_fallbacks::{DetachedSpan, RemoteContext, SpanKind, SpanLink, span};
use lens_instruments::InstrumentDescriptor;
use lens_instruments::inference as gen_ai;

use crate::groups::MegatronSpanGroup;
use crate::taxonomy::{self, SpanDef};

/// The `tracing` target of the server's HTTP SERVER span: a `lens::<group>`
/// target, so the lens-tracing bridge records it in the `inference` group
/// without a `<PREFIX>_TRACING_GROUPS` rule.
pub const HTTP_SERVER_TARGET: &str = "lens::inference::http";

/// `gen_ai.operation.name` of `POST /v1/completions` (lens-instruments'
/// default operation name).
pub use lens_instruments::inference::DEFAULT_OPERATION_NAME as OPERATION_TEXT_COMPLETION;
/// `gen_ai.provider.name` (the Lens default, lens-instruments').
pub use lens_instruments::inference::DEFAULT_PROVIDER_NAME as PROVIDER_NAME;
pub use lens_instruments::inference::{TOKEN_TYPE_INPUT, TOKEN_TYPE_OUTPUT};

/// `gen_ai.operation.name` of `POST /v1/chat/completions`.
pub const OPERATION_CHAT: &str = "chat";

/// One metric of the server, as the docs table lists it: names, kind, unit,
/// buckets, Prometheus name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerMetricDef {
    /// The instrument name.
    pub name: &'static str,
    /// `Histogram` or `UpDownCounter`.
    pub kind: &'static str,
    /// The declared unit (UCUM).
    pub unit: &'static str,
    /// The description (`# HELP`).
    pub description: &'static str,
    /// Explicit bucket boundaries (histograms).
    pub boundaries: &'static [f64],
    /// The name a Prometheus scrape shows (the `_bucket`/`_sum`/`_count`
    /// series of a histogram add those suffixes).
    pub prometheus: &'static str,
}

impl ServerMetricDef {
    /// The row of a GenAI instrument: name, kind, unit, description and
    /// boundaries are `descriptor`'s (lens-instruments', the instruments the
    /// server creates), `prometheus` the family name a scrape shows.
    #[must_use]
    pub const fn gen_ai(descriptor: &InstrumentDescriptor, prometheus: &'static str) -> ServerMetricDef {
        ServerMetricDef {
            name: descriptor.name,
            kind: descriptor.kind.as_str(),
            unit: descriptor.unit,
            description: descriptor.description,
            boundaries: descriptor.boundaries,
            prometheus,
        }
    }
}

/// `gen_ai.server.request.duration`.
pub const REQUEST_DURATION: ServerMetricDef =
    ServerMetricDef::gen_ai(&gen_ai::REQUEST_DURATION, "gen_ai_server_request_duration_seconds");
/// `gen_ai.server.time_to_first_token`.
pub const TIME_TO_FIRST_TOKEN: ServerMetricDef =
    ServerMetricDef::gen_ai(&gen_ai::TIME_TO_FIRST_TOKEN, "gen_ai_server_time_to_first_token_seconds");
/// `gen_ai.server.time_per_output_token`.
pub const TIME_PER_OUTPUT_TOKEN: ServerMetricDef =
    ServerMetricDef::gen_ai(&gen_ai::TIME_PER_OUTPUT_TOKEN, "gen_ai_server_time_per_output_token_seconds");
/// `gen_ai.client.token.usage` (the name Lens records on the server).
pub const TOKEN_USAGE: ServerMetricDef = ServerMetricDef::gen_ai(&gen_ai::TOKEN_USAGE, "gen_ai_client_token_usage");
/// `megatron.inference.requests.running`.
pub const REQUESTS_RUNNING: ServerMetricDef = ServerMetricDef {
    name: "megatron.inference.requests.running",
    kind: "UpDownCounter",
    unit: "{request}",
    description: "Requests in the running decode batch.",
    boundaries: &[],
    prometheus: "megatron_inference_requests_running",
};
/// `megatron.inference.requests.waiting`.
pub const REQUESTS_WAITING: ServerMetricDef = ServerMetricDef {
    name: "megatron.inference.requests.waiting",
    kind: "UpDownCounter",
    unit: "{request}",
    description: "Requests accepted and waiting for a place in the batch.",
    boundaries: &[],
    prometheus: "megatron_inference_requests_waiting",
};

/// Every server metric, in the docs table's order.
pub const SERVER_METRICS: &[ServerMetricDef] =
    &[REQUEST_DURATION, TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN, TOKEN_USAGE, REQUESTS_RUNNING, REQUESTS_WAITING];

/// What one finished request records.
#[derive(Clone, Copy, Debug)]
pub struct RequestValues<'a> {
    /// `text_completion` or `chat`.
    pub operation: &'a str,
    /// The served model name.
    pub model: &'a str,
    /// Arrival to last byte, seconds.
    pub duration_s: f64,
    /// Arrival to first output token, seconds (none without output).
    pub time_to_first_token_s: Option<f64>,
    /// Per output token after the first, seconds (none with fewer than two).
    pub time_per_output_token_s: Option<f64>,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

/// The server's instruments, created once.
#[derive(Clone, Debug)]
pub struct ServerMetrics {
    request_duration: Histogram<f64>,
    time_to_first_token: Histogram<f64>,
    time_per_output_token: Histogram<f64>,
    token_usage: Histogram<u64>,
    running: UpDownCounter<i64>,
    waiting: UpDownCounter<i64>,
}

fn up_down(meter: &Meter, def: &ServerMetricDef) -> UpDownCounter<i64> {
    meter.i64_up_down_counter(def.name).with_description(def.description).with_unit(def.unit).build()
}

impl ServerMetrics {
    /// Creates the instruments on `meter` (lens's, or with `otel` an
    /// OpenTelemetry meter).
    pub fn new<M: Clone + Into<Meter>>(meter: &M) -> ServerMetrics {
        let meter: Meter = meter.clone().into();
        ServerMetrics {
            request_duration: gen_ai::REQUEST_DURATION.f64_histogram(&meter),
            time_to_first_token: gen_ai::TIME_TO_FIRST_TOKEN.f64_histogram(&meter),
            time_per_output_token: gen_ai::TIME_PER_OUTPUT_TOKEN.f64_histogram(&meter),
            token_usage: gen_ai::TOKEN_USAGE.u64_histogram(&meter),
            running: up_down(&meter, &REQUESTS_RUNNING),
            waiting: up_down(&meter, &REQUESTS_WAITING),
        }
    }

    /// Handles that record nothing.
    pub fn noop() -> ServerMetrics {
        ServerMetrics::new(&Meter::noop())
    }

    /// Records one finished request: its duration, latencies and token usage
    /// (one data point per token type).
    pub fn record_request(&self, values: &RequestValues<'_>) {
        let mut attributes = [
            KeyValue::new(semconv::GENAI_OPERATION_NAME, values.operation.to_owned()),
            KeyValue::new(semconv::GENAI_PROVIDER_NAME, PROVIDER_NAME),
            KeyValue::new(semconv::GENAI_REQUEST_MODEL, values.model.to_owned()),
            KeyValue::new(semconv::GENAI_TOKEN_TYPE, TOKEN_TYPE_INPUT),
        ];
        self.request_duration.record(values.duration_s, &attributes[..3]);
        if let Some(ttft) = values.time_to_first_token_s {
            self.time_to_first_token.record(ttft, &attributes[..3]);
        }
        if let Some(tpot) = values.time_per_output_token_s {
            self.time_per_output_token.record(tpot, &attributes[..3]);
        }
        self.token_usage.record(values.input_tokens, &attributes);
        attributes[3] = KeyValue::new(semconv::GENAI_TOKEN_TYPE, TOKEN_TYPE_OUTPUT);
        self.token_usage.record(values.output_tokens, &attributes);
    }

    /// Records one request that ended early, after `duration_s` seconds:
    /// its duration only, with `error.type` (`client_disconnected`,
    /// `shutting_down`), as the GenAI conventions ask of an operation that
    /// ended in an error; its latencies and token usage are not a finished
    /// request's and are not recorded.
    pub fn record_ended_early(&self, operation: &str, model: &str, duration_s: f64, error_type: &'static str) {
        let attributes = [
            KeyValue::new(semconv::GENAI_OPERATION_NAME, operation.to_owned()),
            KeyValue::new(semconv::GENAI_PROVIDER_NAME, PROVIDER_NAME),
            KeyValue::new(semconv::GENAI_REQUEST_MODEL, model.to_owned()),
            KeyValue::new(semconv::ERROR_TYPE, error_type),
        ];
        self.request_duration.record(duration_s, &attributes);
    }

    /// Adds `delta` to the requests in the running batch.
    pub fn running_add(&self, delta: i64) {
        self.running.add(delta, &[]);
    }

    /// Adds `delta` to the requests waiting in the queue.
    pub fn waiting_add(&self, delta: i64) {
        self.waiting.add(delta, &[]);
    }
}

/// The request parameters the GenAI span records at its start.
#[derive(Clone, Copy, Debug)]
pub struct GenerateRequest<'a> {
    /// `text_completion` or `chat`.
    pub operation: &'static str,
    /// The requested (served) model.
    pub model: &'a str,
    /// `max_tokens`.
    pub max_tokens: u64,
    /// `temperature`.
    pub temperature: f64,
    /// `top_p`.
    pub top_p: f64,
    /// `seed`, when given.
    pub seed: Option<i64>,
    /// Prompt tokens.
    pub input_tokens: u64,
}

/// The GenAI span of one request's model run, under `parent` (the HTTP
/// server span).
pub fn generate_span(parent: &RemoteContext, request: &GenerateRequest<'_>) -> DetachedSpan {
    let mut attributes = vec![
        KeyValue::new(semconv::GENAI_OPERATION_NAME, request.operation),
        KeyValue::new(semconv::GENAI_PROVIDER_NAME, PROVIDER_NAME),
        KeyValue::new(semconv::GENAI_REQUEST_MODEL, request.model.to_owned()),
        KeyValue::new(semconv::GENAI_REQUEST_MAX_TOKENS, i64::try_from(request.max_tokens).unwrap_or(i64::MAX)),
        KeyValue::new(semconv::GENAI_REQUEST_TEMPERATURE, request.temperature),
        KeyValue::new(semconv::GENAI_REQUEST_TOP_P, request.top_p),
        KeyValue::new(semconv::GENAI_USAGE_INPUT_TOKENS, i64::try_from(request.input_tokens).unwrap_or(i64::MAX)),
    ];
    if let Some(seed) = request.seed {
        attributes.push(KeyValue::new(semconv::GENAI_REQUEST_SEED, seed));
    }
    span(MegatronSpanGroup::INFERENCE, format!("{} {}", request.operation, request.model))
        .kind(SpanKind::Internal)
        .parent(parent)
        .attributes(attributes)
        .start_detached()
}

/// What the GenAI span records at its end.
#[derive(Clone, Copy, Debug)]
pub struct GenerateOutcome<'a> {
    /// The completion id returned to the client.
    pub response_id: &'a str,
    /// The model that answered.
    pub response_model: &'a str,
    /// `stop` or `length`, one per choice (empty when the request failed).
    pub finish_reasons: &'a [&'a str],
    /// Generated tokens.
    pub output_tokens: u64,
    /// `error.type` when the run failed (such as `client_disconnected`).
    pub error_type: Option<&'a str>,
}

/// Ends the GenAI span with the response's attributes (no response id
/// when none reached the client: an empty `response_id`).
pub fn end_generate_span(span: DetachedSpan, outcome: &GenerateOutcome<'_>) {
    if !outcome.response_id.is_empty() {
        span.set_attribute(semconv::GENAI_RESPONSE_ID, outcome.response_id.to_owned());
    }
    span.set_attributes([
        KeyValue::new(semconv::GENAI_RESPONSE_MODEL, outcome.response_model.to_owned()),
        KeyValue::new(semconv::GENAI_USAGE_OUTPUT_TOKENS, i64::try_from(outcome.output_tokens).unwrap_or(i64::MAX)),
    ]);
    if !outcome.finish_reasons.is_empty() {
        let reasons: Vec<String> = outcome.finish_reasons.iter().map(|reason| (*reason).to_owned()).collect();
        span.set_attribute(semconv::GENAI_RESPONSE_FINISH_REASONS, reasons);
    }
    if let Some(error) = outcome.error_type {
        span.set_attribute(semconv::ERROR_TYPE, error.to_owned());
        span.set_status_error(error.to_owned());
    }
    drop(span);
}

/// Records a finished phase of a request (`def` one of
/// [`taxonomy::INFERENCE_QUEUE`], [`taxonomy::INFERENCE_PREFILL`],
/// [`taxonomy::INFERENCE_DECODE`]) under the GenAI span `parent`, from
/// `start` to `end`.
pub fn phase_span(
    def: &'static SpanDef,
    parent: &RemoteContext,
    start: SystemTime,
    end: SystemTime,
    attributes: impl IntoIterator<Item = KeyValue>,
) {
    let span = span(def.group, def.name)
        .kind(SpanKind::Internal)
        .parent(parent)
        .start_time(start)
        .attributes(attributes)
        .start_detached();
    span.end_at(end);
}

/// Opens the span of one decode step (a root linked to the GenAI span of
/// every request in the batch). Costs the gate when `inference_step` is off.
pub fn step_span<'a>(requests: impl IntoIterator<Item = &'a RemoteContext>, batch_size: usize) -> DetachedSpan {
    if !lens_fallbacks::is_span_group_enabled(MegatronSpanGroup::INFERENCE_STEP) {
        return DetachedSpan::noop();
    }
    span(taxonomy::INFERENCE_STEP.group, taxonomy::INFERENCE_STEP.name)
        .kind(SpanKind::Internal)
        .parent(&RemoteContext::none())
        .links(requests.into_iter().map(SpanLink::new))
        .attributes([KeyValue::new(
            taxonomy::attr::INFERENCE_BATCH_SIZE,
            i64::try_from(batch_size).unwrap_or(i64::MAX),
        )])
        .start_detached()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_server_target_is_in_the_inference_group_without_a_rule() {
        let rules = lens_fallbacks::tracing_rules::TracingRules::none(&crate::groups::MEGATRON_CATALOG);
        assert_eq!(rules.decide(HTTP_SERVER_TARGET).group, Some(MegatronSpanGroup::INFERENCE));
    }

    #[test]
    fn the_serving_docs_table_lists_every_server_metric_as_defined() {
        let page = include_str!("../../docs/serving.md");
        for def in SERVER_METRICS {
            let row = format!("| `{}` | {} | `{}` | `{}` |", def.name, def.kind, def.unit, def.prometheus);
            assert!(page.lines().any(|line| line.starts_with(&row)), "docs/serving.md has no row starting {row}");
        }
    }

    #[test]
    fn every_metric_has_a_prometheus_name_from_its_otel_name_and_unit() {
        for def in SERVER_METRICS {
            let base = def.name.replace('.', "_");
            let expected = match def.unit {
                "s" => format!("{base}_seconds"),
                _ => base,
            };
            assert_eq!(def.prometheus, expected, "{}", def.name);
        }
    }
}
