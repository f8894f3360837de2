//! Context propagation: carrying a trace across threads, processes and ranks.
//!
//! - String carriers (W3C `traceparent` / `tracestate` and `baggage`):
//!   [`inject_context`] writes the current context into any map of strings,
//!   [`extract_context`] reads one back as a [`RemoteContext`] (an empty or
//!   invalid carrier gives "no context").
//! - Bytes for a cross-rank broadcast or a point-to-point message:
//!   [`encode_context`] / [`decode_context`]. The encoding is the JSON object
//!   of the string carrier, the format of the original's NCCL transport, so a
//!   Python rank can read it; bad bytes decode to `None`, never a panic.
//! - The environment carrier `TRACEPARENT` / `TRACESTATE` / `BAGGAGE` that CI
//!   systems and launchers set (SPEC A12): [`context_from_env`].
//! - [`create_linked_span`]: a span that links to a remote span (SPEC B 10.2);
//!   [`create_linked_span_since`] with a start time given.
//! - [`WorkerBootstrap`]: plain strings that carry the telemetry settings and
//!   the current context into a spawned thread or process.
//!
//! The propagators are W3C Trace Context and W3C Baggage. `OTEL_PROPAGATORS`
//! is parsed by the configuration; honouring a different selection here is
//! left to the setup code (see `propagators`).
//!
//! ```
//! use std::collections::HashMap;
//! use lens_core::otel::propagation::{decode_context, extract_context};
//!
//! let carrier = HashMap::from([(
//!     "traceparent".to_string(),
//!     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
//! )]);
//! let remote = extract_context(&carrier);
//! assert!(remote.is_valid());
//! assert_eq!(remote.trace_id_hex().as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
//! assert!(!extract_context(&HashMap::<String, String>::new()).is_valid());
//! assert!(decode_context(b"\xff not json").is_none());
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;

use opentelemetry::Context;
use std::sync::atomic::{AtomicU8, Ordering};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

use crate::attr::KeyValue;
pub use crate::bootstrap::InvalidBootstrap;
use crate::config::parse_bool;
use crate::env::EnvSource;
use crate::groups::{SpanGroup, is_span_group_enabled};
use crate::otel::active;
use crate::otel::span::{DEFAULT_REDACT_KEYS, Parent, SpanGuard, SpanLink, StartOptions, redact, start_span};

/// The W3C Trace Context header carrying the trace and span ids.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C Trace Context header carrying vendor state.
pub const TRACESTATE: &str = "tracestate";
/// The W3C Baggage header.
pub const BAGGAGE: &str = "baggage";

/// The environment variables of the environment carrier (SPEC A12).
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
/// See [`TRACEPARENT_ENV`].
pub const TRACESTATE_ENV: &str = "TRACESTATE";
/// See [`TRACEPARENT_ENV`].
pub const BAGGAGE_ENV: &str = "BAGGAGE";

/// The most bytes [`decode_context`] looks at; longer input is not a context.
pub const MAX_ENCODED_CONTEXT_BYTES: usize = 16 * 1024;

/// A trace context received from elsewhere (or captured here to send), or
/// "no context".
///
/// It holds the remote span's context and any baggage; it is `Send`, `Sync`
/// and cheap to clone.
#[derive(Clone, Default)]
pub struct RemoteContext {
    cx: Context,
}

impl RemoteContext {
    /// "No context": invalid, links and parents nothing.
    #[inline]
    pub fn none() -> RemoteContext {
        RemoteContext { cx: Context::new() }
    }

    /// The OpenTelemetry context (lens-core only; not part of the facade API).
    pub fn otel_context(&self) -> &Context {
        &self.cx
    }

    /// Wraps an OpenTelemetry context (lens-core only; not part of the facade API).
    pub fn from_otel(cx: Context) -> RemoteContext {
        RemoteContext { cx }
    }

    /// Whether it carries a valid span context.
    pub fn is_valid(&self) -> bool {
        self.cx.span().span_context().is_valid()
    }

    /// The trace id as 32 lower-case hex digits, when valid.
    pub fn trace_id_hex(&self) -> Option<String> {
        let span_context = self.cx.span().span_context().clone();
        span_context.is_valid().then(|| span_context.trace_id().to_string())
    }

    /// The span id as 16 lower-case hex digits, when valid.
    pub fn span_id_hex(&self) -> Option<String> {
        let span_context = self.cx.span().span_context().clone();
        span_context.is_valid().then(|| span_context.span_id().to_string())
    }

    /// Writes this context into `carrier` (`traceparent`, and `tracestate`
    /// and `baggage` when present).
    pub fn inject(&self, carrier: &mut impl Extend<(String, String)>) {
        let mut pairs = PairInjector(Vec::with_capacity(3));
        let (trace_context, baggage) = propagators();
        if let Some(trace_context) = trace_context {
            trace_context.inject_context(&self.cx, &mut pairs);
        }
        if let Some(baggage) = baggage {
            baggage.inject_context(&self.cx, &mut pairs);
        }
        carrier.extend(pairs.0);
    }

    /// The string carrier of this context, as a map.
    pub fn to_carrier(&self) -> HashMap<String, String> {
        let mut carrier = HashMap::new();
        self.inject(&mut carrier);
        carrier
    }

    /// The byte encoding of this context (see [`decode_context`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        encode_carrier(&self.to_carrier())
    }

    /// Makes this context current on this thread until the guard drops, so
    /// that spans opened meanwhile join the remote trace as children of the
    /// remote span (an inference server handling a request that carries a
    /// `traceparent`, a worker continuing its launcher's trace). "No
    /// context" attaches nothing. Dropping the guard restores the previous
    /// context on every path, so the remote context never leaks into the
    /// next request on the same thread.
    pub fn attach(&self) -> AttachedContext {
        AttachedContext { guard: self.is_valid().then(|| self.cx.clone().attach()), _not_send: PhantomData }
    }
}

/// Keeps a [`RemoteContext`] current until dropped (see
/// [`RemoteContext::attach`]). Neither `Send` nor `Sync`: drop it on the
/// thread that made it.
#[must_use = "the context is current only while the guard lives: bind it with `let _context = ...`"]
pub struct AttachedContext {
    guard: Option<opentelemetry::ContextGuard>,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for AttachedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttachedContext").field("attached", &self.guard.is_some()).finish()
    }
}

impl fmt::Debug for RemoteContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span_context = self.cx.span().span_context().clone();
        if span_context.is_valid() {
            f.debug_struct("RemoteContext")
                .field("trace_id", &span_context.trace_id())
                .field("span_id", &span_context.span_id())
                .field("sampled", &span_context.is_sampled())
                .finish()
        } else {
            f.write_str("RemoteContext(none)")
        }
    }
}

/// Bit of W3C Trace Context in [`PROPAGATORS`].
const TRACE_CONTEXT_BIT: u8 = 1;
/// Bit of W3C Baggage in [`PROPAGATORS`].
const BAGGAGE_BIT: u8 = 2;
/// The propagators `OTEL_PROPAGATORS` selected (both until setup says
/// otherwise, and again after shutdown).
static PROPAGATORS: AtomicU8 = AtomicU8::new(TRACE_CONTEXT_BIT | BAGGAGE_BIT);

/// Selects the propagators (`OTEL_PROPAGATORS`): setup calls this with the
/// configured list; `none` selects neither.
pub(crate) fn set_propagators(trace_context: bool, baggage: bool) {
    let bits = if trace_context { TRACE_CONTEXT_BIT } else { 0 } | if baggage { BAGGAGE_BIT } else { 0 };
    PROPAGATORS.store(bits, Ordering::Relaxed);
}

/// The propagators in use: W3C Trace Context, then W3C Baggage, each only
/// when `OTEL_PROPAGATORS` selected it.
fn propagators() -> (Option<TraceContextPropagator>, Option<BaggagePropagator>) {
    let bits = PROPAGATORS.load(Ordering::Relaxed);
    (
        (bits & TRACE_CONTEXT_BIT != 0).then(TraceContextPropagator::new),
        (bits & BAGGAGE_BIT != 0).then(BaggagePropagator::new),
    )
}

struct PairInjector(Vec<(String, String)>);

impl Injector for PairInjector {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_ascii_lowercase(), value));
    }
}

/// The carrier fields lens reads, looked up once from an [`EnvSource`].
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

impl Extractor for FieldExtractor {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(field, _)| field.eq_ignore_ascii_case(key)).map(|(_, value)| value.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(field, _)| *field).collect()
    }
}

fn extract(extractor: &FieldExtractor) -> RemoteContext {
    let (trace_context, baggage) = propagators();
    let mut cx = Context::new();
    if let Some(trace_context) = trace_context {
        cx = trace_context.extract_with_context(&cx, extractor);
    }
    if let Some(baggage) = baggage {
        cx = baggage.extract_with_context(&cx, extractor);
    }
    RemoteContext { cx }
}

/// The current context (the current span and baggage), to send elsewhere or
/// to link to later.
pub fn current_context() -> RemoteContext {
    RemoteContext { cx: Context::current() }
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
/// (SPEC A12); `None` when `TRACEPARENT` is unset or invalid.
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
    let mut ordered: Vec<(&String, &String)> = carrier.iter().collect();
    ordered.sort();
    let map: serde_json::Map<String, serde_json::Value> =
        ordered.into_iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    serde_json::Value::Object(map).to_string().into_bytes()
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
    let carrier: HashMap<String, String> = serde_json::from_slice(bytes).ok()?;
    let remote = extract(&FieldExtractor::from_fields(|field| carrier.get(field).cloned()));
    remote.is_valid().then_some(remote)
}

/// Starts a span linked to `remote` (the link is added only when `remote` is
/// valid), as a child of the current span but **not** made current; it ends
/// when the guard drops. Attributes are set at creation, with the default
/// redaction keys applied.
///
/// With `Some(group)` the span is gated by the group; with `None` it is
/// recorded whenever telemetry is set up, as the original's helper.
pub fn create_linked_span(
    group: Option<SpanGroup>,
    name: impl Into<Cow<'static, str>>,
    remote: &RemoteContext,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    linked_span(group, name.into(), remote, None, attributes)
}

/// Like [`create_linked_span`], with the span's start time set explicitly:
/// for a span whose link only becomes known after it began, such as a
/// receive whose sender's context arrives inside the message.
pub fn create_linked_span_since(
    group: Option<SpanGroup>,
    name: impl Into<Cow<'static, str>>,
    remote: &RemoteContext,
    start_time: std::time::SystemTime,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    linked_span(group, name.into(), remote, Some(start_time), attributes)
}

fn linked_span(
    group: Option<SpanGroup>,
    name: Cow<'static, str>,
    remote: &RemoteContext,
    start_time: Option<std::time::SystemTime>,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    if let Some(group) = group
        && !is_span_group_enabled(group)
    {
        return SpanGuard::noop();
    }
    let Some(tracer) = active::tracer() else {
        return SpanGuard::noop();
    };
    let links = SpanLink::new(remote);
    let attributes =
        attributes.into_iter().map(|kv| redact(kv, DEFAULT_REDACT_KEYS)).map(opentelemetry::KeyValue::from).collect();
    let options = StartOptions {
        parent: Parent::Current,
        start_time,
        links: links.into_link().into_iter().collect(),
        make_current: false,
    };
    start_span(tracer, name, attributes, options)
}

/// The telemetry settings and trace context that a spawned thread or process
/// needs, as plain strings (SPEC B 10.5, A9).
///
/// The parent builds it with [`WorkerBootstrap::capture`] and passes
/// [`to_env_vars`](WorkerBootstrap::to_env_vars) to the child's environment
/// (or its fields through any channel: every field is a plain string); the
/// child reads it back with [`from_env`](WorkerBootstrap::from_env). The
/// variables are the ones the child's own configuration reads
/// (`<PREFIX>_ENABLED`, `OTEL_SERVICE_NAME`, `<PREFIX>_SPAN_GROUPS`) and the
/// environment carrier of SPEC A12, so a child that sets up telemetry from
/// its environment needs nothing else. A disabled bootstrap is inert: it
/// carries no context and tells the child to stay off.
///
/// ```
/// use lens_core::otel::propagation::WorkerBootstrap;
///
/// let bootstrap = WorkerBootstrap::capture(true, Some("megatron-lm".into()), Some("default".into()));
/// let vars = bootstrap.to_env_vars("MEGATRON_OTEL");
/// assert!(vars.contains(&("MEGATRON_OTEL_ENABLED".to_string(), "1".to_string())));
///
/// let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
/// let child = WorkerBootstrap::from_env(env.as_slice(), "MEGATRON_OTEL").unwrap();
/// assert_eq!(child, bootstrap);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerBootstrap {
    /// Whether the worker sets telemetry up.
    pub enabled: bool,
    /// The service name, when the parent chose one.
    pub service_name: Option<String>,
    /// The span-group spec, when the parent chose one.
    pub span_groups: Option<String>,
    /// The parent's `traceparent`, when a span was current.
    pub traceparent: Option<String>,
    /// The parent's `tracestate`, when not empty.
    pub tracestate: Option<String>,
    /// The parent's `baggage`, when not empty.
    pub baggage: Option<String>,
}

impl WorkerBootstrap {
    /// An inert bootstrap: the worker stays off.
    pub fn disabled() -> WorkerBootstrap {
        WorkerBootstrap::default()
    }

    /// A bootstrap with these settings and, when `enabled`, the current
    /// context.
    pub fn capture(enabled: bool, service_name: Option<String>, span_groups: Option<String>) -> WorkerBootstrap {
        if !enabled {
            return WorkerBootstrap::disabled();
        }
        let mut carrier = current_context().to_carrier();
        WorkerBootstrap {
            enabled,
            service_name,
            span_groups,
            traceparent: carrier.remove(TRACEPARENT),
            tracestate: carrier.remove(TRACESTATE).filter(|v| !v.is_empty()),
            baggage: carrier.remove(BAGGAGE).filter(|v| !v.is_empty()),
        }
    }

    /// The variables to set in the worker's environment, for configuration
    /// read with `prefix` (such as `MEGATRON_OTEL`). A disabled bootstrap
    /// gives only `<prefix>_ENABLED=0`.
    pub fn to_env_vars(&self, prefix: &str) -> Vec<(String, String)> {
        let enabled = format!("{prefix}_ENABLED");
        if !self.enabled {
            return vec![(enabled, "0".to_owned())];
        }
        let mut vars = vec![(enabled, "1".to_owned())];
        let optional = [
            ("OTEL_SERVICE_NAME".to_owned(), &self.service_name),
            (format!("{prefix}_SPAN_GROUPS"), &self.span_groups),
            (TRACEPARENT_ENV.to_owned(), &self.traceparent),
            (TRACESTATE_ENV.to_owned(), &self.tracestate),
            (BAGGAGE_ENV.to_owned(), &self.baggage),
        ];
        vars.extend(optional.into_iter().filter_map(|(key, value)| value.clone().map(|value| (key, value))));
        vars
    }

    /// Reads a bootstrap from the worker's environment (see
    /// [`to_env_vars`](WorkerBootstrap::to_env_vars)). An unset
    /// `<prefix>_ENABLED` means disabled; the context is kept only when
    /// enabled.
    pub fn from_env(env: &(impl EnvSource + ?Sized), prefix: &str) -> Result<WorkerBootstrap, InvalidBootstrap> {
        let variable = format!("{prefix}_ENABLED");
        let enabled = match env.non_empty(&variable) {
            None => false,
            Some(value) => match parse_bool(&value) {
                Some(enabled) => enabled,
                None => return Err(InvalidBootstrap { variable, value }),
            },
        };
        if !enabled {
            return Ok(WorkerBootstrap::disabled());
        }
        Ok(WorkerBootstrap {
            enabled,
            service_name: env.non_empty("OTEL_SERVICE_NAME"),
            span_groups: env.non_empty(&format!("{prefix}_SPAN_GROUPS")),
            traceparent: env.non_empty(TRACEPARENT_ENV),
            tracestate: env.non_empty(TRACESTATE_ENV),
            baggage: env.non_empty(BAGGAGE_ENV),
        })
    }

    /// The parent's context, when it is carried and valid.
    pub fn remote_context(&self) -> Option<RemoteContext> {
        if !self.enabled {
            return None;
        }
        let remote = extract(&FieldExtractor::from_fields(|field| match field {
            TRACEPARENT => self.traceparent.clone(),
            TRACESTATE => self.tracestate.clone(),
            _ => self.baggage.clone(),
        }));
        remote.is_valid().then_some(remote)
    }
}

#[cfg(test)]
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
