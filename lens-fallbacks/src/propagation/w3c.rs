//! The W3C codecs: the `traceparent` / `tracestate` / `baggage` string
//! carrier, its JSON byte encoding for other ranks, and the environment
//! carrier `TRACEPARENT` / `TRACESTATE` / `BAGGAGE` that CI systems and
//! orchestrators set, so that a job joins the trace of whatever launched it.

use std::collections::HashMap;

#[cfg(feature = "otel")]
use opentelemetry::Context;
#[cfg(feature = "otel")]
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
#[cfg(feature = "otel")]
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

use super::context::{RemoteContext, current_context};
use crate::env::EnvSource;

/// The W3C Trace Context header carrying the trace and span ids.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C Trace Context header carrying vendor state.
pub const TRACESTATE: &str = "tracestate";
/// The W3C Baggage header.
pub const BAGGAGE: &str = "baggage";

/// The environment variables of the environment carrier, as CI systems and
/// orchestrators set them.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
/// See [`TRACEPARENT_ENV`].
pub const TRACESTATE_ENV: &str = "TRACESTATE";
/// See [`TRACEPARENT_ENV`].
pub const BAGGAGE_ENV: &str = "BAGGAGE";

/// The most bytes [`decode_context`] looks at; longer input is not a context.
pub const MAX_ENCODED_CONTEXT_BYTES: usize = 16 * 1024;

impl RemoteContext {
    /// Writes this context into `carrier` (`traceparent`, and `tracestate`
    /// and `baggage` when present); nothing without `otel`.
    #[inline]
    pub fn inject(&self, carrier: &mut impl Extend<(String, String)>) {
        #[cfg(feature = "otel")]
        {
            let mut pairs = PairInjector(Vec::with_capacity(3));
            let (trace_context, baggage) = propagators();
            if let Some(trace_context) = trace_context {
                trace_context.inject_context(self.otel_context(), &mut pairs);
            }
            if let Some(baggage) = baggage {
                baggage.inject_context(self.otel_context(), &mut pairs);
            }
            // An empty `tracestate` is not sent (W3C: "vendors SHOULD NOT
            // send an empty tracestate"); the propagator writes one always.
            carrier.extend(pairs.0.into_iter().filter(|(key, value)| key != TRACESTATE || !value.is_empty()));
        }
        #[cfg(not(feature = "otel"))]
        let _ = carrier;
    }

    /// The string carrier of this context, as a map.
    pub fn to_carrier(&self) -> HashMap<String, String> {
        let mut carrier = HashMap::new();
        self.inject(&mut carrier);
        carrier
    }

    /// The byte encoding of this context (see [`decode_context`]); no bytes
    /// without `otel`.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode_carrier(&self.to_carrier())
    }
}

/// The propagators in use: W3C Trace Context, then W3C Baggage, each only
/// when `OTEL_PROPAGATORS` selected it.
#[cfg(feature = "otel")]
fn propagators() -> (Option<TraceContextPropagator>, Option<BaggagePropagator>) {
    let (trace_context, baggage) = lens_otel_runtime::propagators::selected();
    (trace_context.then(TraceContextPropagator::new), baggage.then(BaggagePropagator::new))
}

#[cfg(feature = "otel")]
struct PairInjector(Vec<(String, String)>);

#[cfg(feature = "otel")]
impl Injector for PairInjector {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_ascii_lowercase(), value));
    }
}

/// The carrier fields lens reads, looked up once from an [`EnvSource`].
#[cfg_attr(not(feature = "otel"), expect(dead_code, reason = "only the OpenTelemetry propagators read the fields"))]
struct FieldExtractor(Vec<(&'static str, String)>);

impl FieldExtractor {
    /// Looks the fields up; a `traceparent` that is not well formed is
    /// dropped (the SDK's parser accepts ids shorter than the W3C lengths).
    fn from_fields(lookup: impl Fn(&str) -> Option<String>) -> FieldExtractor {
        let fields = [TRACEPARENT, TRACESTATE, BAGGAGE];
        FieldExtractor(
            fields
                .into_iter()
                .filter_map(|field| lookup(field).map(|value| (field, value)))
                .filter(|(field, value)| *field != TRACEPARENT || is_well_formed_traceparent(value))
                .collect(),
        )
    }
}

/// Whether `value` has the W3C shape: `vv-<32 hex>-<16 hex>-ff`, lower case,
/// exactly four parts for version `00`, and a version other than `ff`.
fn is_well_formed_traceparent(value: &str) -> bool {
    fn lower_hex(part: &str, len: usize) -> bool {
        part.len() == len && part.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
    let parts: Vec<&str> = value.trim().split('-').collect();
    match parts.as_slice() {
        [version, trace_id, span_id, flags, rest @ ..] => {
            lower_hex(version, 2)
                && *version != "ff"
                && (rest.is_empty() || *version != "00")
                && lower_hex(trace_id, 32)
                && lower_hex(span_id, 16)
                && lower_hex(flags, 2)
        }
        _ => false,
    }
}

#[cfg(feature = "otel")]
impl Extractor for FieldExtractor {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(field, _)| field.eq_ignore_ascii_case(key)).map(|(_, value)| value.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(field, _)| *field).collect()
    }
}

/// The context in the carrier fields that `lookup` finds (by their
/// lower-case names); "no context" without `otel`.
pub(super) fn extract_fields(lookup: impl Fn(&str) -> Option<String>) -> RemoteContext {
    extract(&FieldExtractor::from_fields(lookup))
}

/// The context a carrier holds ("no context" without `otel`).
fn extract(extractor: &FieldExtractor) -> RemoteContext {
    #[cfg(not(feature = "otel"))]
    {
        let _ = extractor;
        RemoteContext::none()
    }
    #[cfg(feature = "otel")]
    let (trace_context, baggage) = propagators();
    #[cfg(feature = "otel")]
    let mut cx = Context::new();
    #[cfg(feature = "otel")]
    if let Some(trace_context) = trace_context {
        cx = trace_context.extract_with_context(&cx, extractor);
    }
    #[cfg(feature = "otel")]
    if let Some(baggage) = baggage {
        cx = baggage.extract_with_context(&cx, extractor);
    }
    #[cfg(feature = "otel")]
    RemoteContext::from_otel(cx)
}

/// Writes the current context into `carrier`: `traceparent`
/// (`00-<32 hex>-<16 hex>-<2 hex flags>`) when a span is current, plus
/// `tracestate` and `baggage` when present. Nothing is written when no span
/// is current and there is no baggage.
pub fn inject_context(carrier: &mut impl Extend<(String, String)>) {
    current_context().inject(carrier);
}

/// Reads a context from a string carrier (lower-case `traceparent`,
/// `tracestate`, `baggage` keys; any [`EnvSource`], such as a `HashMap` or a
/// slice of pairs). An empty or invalid carrier gives "no context".
pub fn extract_context(carrier: &(impl EnvSource + ?Sized)) -> RemoteContext {
    extract(&FieldExtractor::from_fields(|field| carrier.var(field)))
}

/// Reads the environment carrier `TRACEPARENT` / `TRACESTATE` / `BAGGAGE`
/// handed in by whatever launched the job; `None` when `TRACEPARENT` is
/// unset or invalid.
pub fn context_from_env(env: &(impl EnvSource + ?Sized)) -> Option<RemoteContext> {
    let extractor = FieldExtractor::from_fields(|field| {
        let variable = match field {
            TRACEPARENT => TRACEPARENT_ENV,
            TRACESTATE => TRACESTATE_ENV,
            _ => BAGGAGE_ENV,
        };
        env.non_empty(variable)
    });
    let remote = extract(&extractor);
    remote.is_valid().then_some(remote)
}

fn encode_carrier(carrier: &HashMap<String, String>) -> Vec<u8> {
    #[cfg(feature = "otel")]
    {
        let mut ordered: Vec<(&String, &String)> = carrier.iter().collect();
        ordered.sort();
        let map: serde_json::Map<String, serde_json::Value> =
            ordered.into_iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        serde_json::Value::Object(map).to_string().into_bytes()
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = carrier;
        Vec::new()
    }
}

/// The current context as bytes, for a broadcast or a message to another
/// rank: the JSON object of its string carrier (`{}` when there is none).
pub fn encode_context() -> Vec<u8> {
    current_context().to_bytes()
}

/// Decodes bytes from [`encode_context`] (or from the original's
/// `serialize_context`). `None` for anything that is not a JSON object of
/// strings carrying a valid `traceparent`, or longer than
/// [`MAX_ENCODED_CONTEXT_BYTES`]; never panics.
pub fn decode_context(bytes: &[u8]) -> Option<RemoteContext> {
    if bytes.len() > MAX_ENCODED_CONTEXT_BYTES {
        return None;
    }
    #[cfg(feature = "otel")]
    {
        let carrier: HashMap<String, String> = serde_json::from_slice(bytes).ok()?;
        let remote = extract(&FieldExtractor::from_fields(|field| carrier.get(field).cloned()));
        remote.is_valid().then_some(remote)
    }
    #[cfg(not(feature = "otel"))]
    None
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use super::*;
    use opentelemetry::baggage::BaggageExt as _;

    #[test]
    fn baggage_alone_is_carried_but_not_a_valid_context() {
        let carrier = HashMap::from([(BAGGAGE.to_string(), "user=alice".to_string())]);
        let remote = extract_context(&carrier);
        assert!(!remote.is_valid());
        assert_eq!(remote.otel_context().baggage().get("user").map(|v| v.as_str().to_string()), Some("alice".into()));
    }
}
