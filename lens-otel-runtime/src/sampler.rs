//! The sampler of the lens runtime: the per-process rank decision of the
//! sampling strategy, composed with the sampler configured by
//! `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`: a rank that passes the
//! rank decision (the original's hash, so a mixed Python/Rust job picks the
//! same ranks) delegates to that sampler instead of replacing it.
//!
//! [`LensSampler`] wraps a *delegate* (by default parent-based always-on,
//! built from the configuration with [`delegate_from`], or any user
//! [`ShouldSample`]) and adds three rules on top of it:
//!
//! 1. **Rank decision.** A rank that its sampling strategy (`rank_aware` or a
//!    registered one, decided once per process by [`crate::strategies`])
//!    rejects records no spans at all. A rank that passes delegates, so a
//!    `rank_aware` rate of 0.1 with `parentbased_traceidratio` 0.1 keeps about
//!    1% of the sampled units.
//! 2. **Structure is never sampled away.** On a rank that records spans, a span
//!    started with [`STRUCTURAL_ATTRIBUTE`]` = true` is always recorded and
//!    sampled, whatever the delegate and the parent say.
//! 3. **Sampling keys.** A span started with an `i64` [`SAMPLING_KEY_ATTRIBUTE`]
//!    is decided by that key instead of its trace id: the delegate is asked as
//!    if the span were a root whose trace id is made of the key (see
//!    [`key_trace_id`]), so a ratio delegate keeps it iff
//!    [`ratio_keeps_key`] says so, and the decision is the same on every rank
//!    without any communication. Its subtree follows it: the keyed span's trace
//!    state carries [`TRACE_STATE_KEY`]` = `[`TRACE_STATE_KEYED`], and a span
//!    whose parent carries it (and that has no key or marker of its own) takes
//!    its parent's sampled flag, whatever the delegate.
//!
//! The marker attributes stay on the exported span: stripping them would need a
//! span processor of its own, and keeping them shows in a backend why a span was
//! kept. The framework layer decides which spans carry them; the runtime only
//! offers the mechanism. See `docs/sampling.md` for the user's view.

use opentelemetry::trace::{Link, SpanContext, SpanKind, TraceContextExt as _, TraceId, TraceState};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SamplingResult, ShouldSample};

// The marker attributes and the key are defined once for both builds in
// `crate::span` (the facade exports them with `otel` off too).
pub use lens_core::sampling::{SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, sampling_key};

/// W3C trace-state key that [`LensSampler`] sets on a keyed span, so that the
/// spans below it follow its decision.
pub const TRACE_STATE_KEY: &str = "lens";

/// Value of [`TRACE_STATE_KEY`] on a keyed span and its subtree.
pub const TRACE_STATE_KEYED: &str = "keyed";

/// The six values of `OTEL_TRACES_SAMPLER`, as the kind of delegate that
/// [`delegate_from`] builds.
///
/// ```
/// use lens_otel_runtime::sampler::DelegateSampler;
/// assert_eq!(DelegateSampler::default(), DelegateSampler::ParentBasedAlwaysOn);
/// assert_eq!(
///     DelegateSampler::from_name("parentbased_traceidratio"),
///     Some(DelegateSampler::ParentBasedTraceIdRatio)
/// );
/// assert_eq!(DelegateSampler::TraceIdRatio.as_str(), "traceidratio");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DelegateSampler {
    /// `always_on`: every span.
    AlwaysOn,
    /// `always_off`: no span.
    AlwaysOff,
    /// `traceidratio`: a share of trace ids, whatever the parent.
    TraceIdRatio,
    /// `parentbased_always_on`: follow the parent, keep every root (the default).
    #[default]
    ParentBasedAlwaysOn,
    /// `parentbased_always_off`: follow the parent, drop every root.
    ParentBasedAlwaysOff,
    /// `parentbased_traceidratio`: follow the parent, keep a share of roots.
    ParentBasedTraceIdRatio,
}

impl DelegateSampler {
    /// Whether the sampler follows a valid parent's sampled flag.
    pub fn is_parent_based(self) -> bool {
        matches!(self, Self::ParentBasedAlwaysOn | Self::ParentBasedAlwaysOff | Self::ParentBasedTraceIdRatio)
    }

    /// Whether the sampler keeps every root span (one started with no span
    /// in its context), whatever its trace id.
    pub fn keeps_roots(self) -> bool {
        matches!(self, Self::AlwaysOn | Self::ParentBasedAlwaysOn)
    }

    /// Every kind, in the order of the OpenTelemetry specification.
    pub const ALL: [Self; 6] = [
        Self::AlwaysOn,
        Self::AlwaysOff,
        Self::TraceIdRatio,
        Self::ParentBasedAlwaysOn,
        Self::ParentBasedAlwaysOff,
        Self::ParentBasedTraceIdRatio,
    ];

    /// The `OTEL_TRACES_SAMPLER` value of this kind.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AlwaysOn => "always_on",
            Self::AlwaysOff => "always_off",
            Self::TraceIdRatio => "traceidratio",
            Self::ParentBasedAlwaysOn => "parentbased_always_on",
            Self::ParentBasedAlwaysOff => "parentbased_always_off",
            Self::ParentBasedTraceIdRatio => "parentbased_traceidratio",
        }
    }

    /// The kind named by an `OTEL_TRACES_SAMPLER` value (exact, lower case),
    /// or `None`. Validation and its error messages belong to the
    /// configuration; this is only the mapping.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// Whether this kind reads `OTEL_TRACES_SAMPLER_ARG`.
    pub const fn takes_ratio(self) -> bool {
        matches!(self, Self::TraceIdRatio | Self::ParentBasedTraceIdRatio)
    }
}

/// Builds the SDK sampler for an `OTEL_TRACES_SAMPLER` kind and its
/// `OTEL_TRACES_SAMPLER_ARG` ratio.
///
/// `ratio` is used by the two ratio kinds only; `None` means the
/// specification's default, 1.0. The configuration validates the range; here
/// a ratio at or above 1.0 keeps everything, and one below 0.0 (or NaN) keeps
/// nothing, as the SDK does.
///
/// ```
/// use lens_otel_runtime::sampler::{DelegateSampler, delegate_from};
/// use opentelemetry_sdk::trace::Sampler;
///
/// let sampler = delegate_from(DelegateSampler::TraceIdRatio, Some(0.25));
/// assert!(matches!(sampler, Sampler::TraceIdRatioBased(r) if r == 0.25));
/// let default = delegate_from(DelegateSampler::default(), None);
/// assert!(matches!(default, Sampler::ParentBased(_)));
/// ```
pub fn delegate_from(kind: DelegateSampler, ratio: Option<f64>) -> Sampler {
    let ratio = ratio.unwrap_or(1.0);
    match kind {
        DelegateSampler::AlwaysOn => Sampler::AlwaysOn,
        DelegateSampler::AlwaysOff => Sampler::AlwaysOff,
        DelegateSampler::TraceIdRatio => Sampler::TraceIdRatioBased(ratio),
        DelegateSampler::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        DelegateSampler::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        DelegateSampler::ParentBasedTraceIdRatio => Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))),
    }
}

/// The trace id a delegate sees for a keyed span: both halves are the key's
/// big-endian bytes, so the SDK's ratio sampler (which reads the low half)
/// decides by the key alone.
pub fn key_trace_id(key: i64) -> TraceId {
    let half = key.to_be_bytes();
    let mut bytes = [0_u8; 16];
    bytes[..8].copy_from_slice(&half);
    bytes[8..].copy_from_slice(&half);
    TraceId::from_bytes(bytes)
}

/// Whether a trace-id ratio of `ratio` keeps the span keyed `key`: always for
/// a ratio at or above 1.0, otherwise iff `(key as u64) >> 1` is below
/// `ratio * 2^63` (the SDK's trace-id rule applied to the key). Python:
/// `ratio >= 1 or ((key & (2**64 - 1)) >> 1) < int(max(ratio, 0.0) * 2**63)`.
///
/// ```
/// use lens_otel_runtime::sampler::ratio_keeps_key;
/// assert!(ratio_keeps_key(1.0, -1));
/// assert!(!ratio_keeps_key(0.0, 0));
/// assert!(ratio_keeps_key(0.5, 0x3fff_ffff_ffff_ffff));
/// assert!(!ratio_keeps_key(0.5, -1)); // 0xffff…: the top half of the range
/// ```
pub fn ratio_keeps_key(ratio: f64, key: i64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    // The SDK's own conversion: a ratio in [0, 1) times 2^63 fits in u64.
    let bound = (ratio.max(0.0) * (1_u64 << 63) as f64) as u64;
    let bits = key as u64; // the key's bits, read as unsigned
    (bits >> 1) < bound
}

/// What [`LensSampler`] says about itself in [`LensSampler::description`].
#[derive(Clone, Debug)]
enum Strategy {
    /// No sampling strategy: the rank records spans.
    None,
    /// `rank_aware`, with its inputs.
    RankAware { rank: u32, rate: f64 },
    /// A registered sampling strategy, by name.
    Registered { name: String },
}

/// The sampler of a lens tracer provider: the rank decision, structural spans,
/// sampling keys, then the delegate (see the module documentation).
///
/// ```
/// use lens_otel_runtime::sampler::{
///     DelegateSampler, LensSampler, STRUCTURAL_ATTRIBUTE, delegate_from,
/// };
/// use opentelemetry::KeyValue;
/// use opentelemetry::trace::{SpanKind, TraceId};
/// use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
///
/// let delegate = delegate_from(DelegateSampler::AlwaysOff, None);
/// let sampler = LensSampler::rank_aware(delegate, 3, 0.5, true);
/// assert_eq!(sampler.description(), "RankAwareSampler(rank=3, rate=0.5)");
///
/// let structural = [KeyValue::new(STRUCTURAL_ATTRIBUTE, true)];
/// let kind = SpanKind::Internal;
/// let trace_id = TraceId::from_bytes([7; 16]);
/// let kept = sampler.should_sample(None, trace_id, "megatron.train", &kind, &structural, &[]);
/// assert_eq!(kept.decision, SamplingDecision::RecordAndSample);
/// let other = sampler.should_sample(None, trace_id, "megatron.step", &kind, &[], &[]);
/// assert_eq!(other.decision, SamplingDecision::Drop);
/// ```
#[derive(Clone, Debug)]
pub struct LensSampler {
    delegate: Box<dyn ShouldSample>,
    /// Which SDK sampler the delegate is, when known.
    delegate_kind: Option<DelegateSampler>,
    records_spans: bool,
    strategy: Strategy,
    description: String,
    ratio_override: RatioOverride,
}

/// The per-iteration trace sampling ratio that an in-flight control change
/// sets (SPEC A24): when set, it decides every span with a sampling key in
/// place of the delegate, whatever the launch sampler was (`always_on`
/// included); structural spans stay kept. Shared between the sampler and
/// the pipeline that sets it; one relaxed load per keyed span.
#[derive(Clone, Debug)]
pub struct RatioOverride(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Default for RatioOverride {
    /// No override (not a ratio of 0).
    fn default() -> RatioOverride {
        RatioOverride::new()
    }
}

/// No override: the bits of a NaN no ratio ever has.
const NO_OVERRIDE: u64 = u64::MAX;

impl RatioOverride {
    /// No override: the delegate decides.
    pub fn new() -> RatioOverride {
        RatioOverride(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(NO_OVERRIDE)))
    }

    /// Sets (`Some`, clamped to `[0, 1]`) or clears (`None`) the override.
    pub fn set(&self, ratio: Option<f64>) {
        let bits = ratio.map_or(NO_OVERRIDE, |r| r.clamp(0.0, 1.0).to_bits());
        self.0.store(bits, std::sync::atomic::Ordering::Relaxed);
    }

    /// The override in force.
    #[inline]
    pub fn get(&self) -> Option<f64> {
        let bits = self.0.load(std::sync::atomic::Ordering::Relaxed);
        (bits != NO_OVERRIDE).then(|| f64::from_bits(bits))
    }
}

impl LensSampler {
    /// A sampler with no sampling strategy (the rank records spans), adding
    /// the structural and sampling-key rules to `delegate`.
    pub fn new(delegate: impl Into<Box<dyn ShouldSample>>) -> Self {
        let delegate = delegate.into();
        let description = format!("LensSampler(delegate={delegate:?})");
        Self {
            delegate,
            delegate_kind: None,
            records_spans: true,
            strategy: Strategy::None,
            description,
            ratio_override: RatioOverride::new(),
        }
    }

    /// The `rank_aware` sampling strategy: `records_spans` is this process's
    /// decision for `rank` at `rate` (the original's md5 hash of the rank,
    /// computed by [`crate::strategies`]); a rank that does not record spans drops every
    /// span. The description is the original's
    /// `RankAwareSampler(rank={rank}, rate={rate})`.
    pub fn rank_aware(delegate: impl Into<Box<dyn ShouldSample>>, rank: u32, rate: f64, records_spans: bool) -> Self {
        Self {
            delegate: delegate.into(),
            delegate_kind: None,
            records_spans,
            strategy: Strategy::RankAware { rank, rate },
            description: format!("RankAwareSampler(rank={rank}, rate={rate:?})"),
            ratio_override: RatioOverride::new(),
        }
    }

    /// A registered sampling strategy named `name`, whose per-process decision
    /// is `records_spans`. The description is
    /// `RegisteredSampler(name={name}, records_spans={records_spans})`.
    pub fn registered(delegate: impl Into<Box<dyn ShouldSample>>, name: &str, records_spans: bool) -> Self {
        Self {
            delegate: delegate.into(),
            delegate_kind: None,
            records_spans,
            strategy: Strategy::Registered { name: name.to_owned() },
            description: format!("RegisteredSampler(name={name}, records_spans={records_spans})"),
            ratio_override: RatioOverride::new(),
        }
    }

    /// The sampler with `ratio_override` deciding keyed spans while it is set.
    #[must_use]
    pub fn with_ratio_override(mut self, ratio_override: RatioOverride) -> Self {
        self.ratio_override = ratio_override;
        self
    }

    /// What this sampler is, for logs and diagnostics (the original's
    /// `get_description`).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Whether this rank records spans at all.
    pub fn records_spans(&self) -> bool {
        self.records_spans
    }

    /// The `rank_aware` inputs, when that is the strategy.
    pub fn rank_aware_inputs(&self) -> Option<(u32, f64)> {
        match self.strategy {
            Strategy::RankAware { rank, rate } => Some((rank, rate)),
            Strategy::None | Strategy::Registered { .. } => None,
        }
    }

    /// The registered strategy's name, when that is the strategy.
    pub fn registered_name(&self) -> Option<&str> {
        match &self.strategy {
            Strategy::Registered { name } => Some(name),
            Strategy::None | Strategy::RankAware { .. } => None,
        }
    }
}

/// What the start attributes say about sampling.
enum Marker {
    Structural,
    Key(i64),
    None,
}

#[inline]
fn marker(attributes: &[KeyValue]) -> Marker {
    let mut key = None;
    for attribute in attributes {
        match (attribute.key.as_str(), &attribute.value) {
            (STRUCTURAL_ATTRIBUTE, Value::Bool(true)) => return Marker::Structural,
            (SAMPLING_KEY_ATTRIBUTE, Value::I64(value)) => key = Some(*value),
            _ => {}
        }
    }
    key.map_or(Marker::None, Marker::Key)
}

fn result(decision: SamplingDecision, trace_state: TraceState) -> SamplingResult {
    SamplingResult { decision, attributes: Vec::new(), trace_state }
}

fn keep_if(keep: bool) -> SamplingDecision {
    if keep { SamplingDecision::RecordAndSample } else { SamplingDecision::Drop }
}

/// The parent's decision and trace state.
fn follow(parent: &SpanContext) -> SamplingResult {
    result(keep_if(parent.is_sampled()), parent.trace_state().clone())
}

/// Whether a trace state says its trace is sampled by key (most have no
/// trace state at all: tested first, without a lookup).
#[inline]
fn is_keyed(state: &TraceState) -> bool {
    *state != TraceState::NONE && state.get(TRACE_STATE_KEY) == Some(TRACE_STATE_KEYED)
}

fn keyed_trace_state(parent: &TraceState) -> TraceState {
    if is_keyed(parent) {
        return parent.clone();
    }
    parent.insert(TRACE_STATE_KEY, TRACE_STATE_KEYED).unwrap_or_else(|_| parent.clone())
}

impl ShouldSample for LensSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let parent = parent_context.map(|cx| cx.span());
        let parent = parent.as_ref().map(|span| span.span_context()).filter(|sc| sc.is_valid());
        self.decide(parent, parent_context, trace_id, name, span_kind, attributes, links)
    }
}

impl LensSampler {
    /// [`decide`](Self::decide)'s answer for most spans, made in place by
    /// the caller (an inlined test, no call): a child with no attributes of
    /// a parent on lens's own stack (not in a context), with no trace
    /// state, under a sampler that follows a parent takes the parent's
    /// decision. `None` for any other span.
    #[inline]
    pub(crate) fn follow_in_place(
        &self,
        parent: Option<&SpanContext>,
        parent_context: Option<&Context>,
        attributes: &[KeyValue],
    ) -> Option<SamplingResult> {
        let sc = parent?;
        (attributes.is_empty()
            && parent_context.is_none()
            && self.records_spans
            && *sc.trace_state() == TraceState::NONE
            && self.delegate_kind.is_some_and(DelegateSampler::is_parent_based))
        .then(|| result(keep_if(sc.is_sampled()), TraceState::NONE))
    }

    /// Tells the sampler that its delegate is the SDK sampler
    /// [`delegate_from`]`(kind, _)` built, so that a span whose parent is
    /// not in an OpenTelemetry [`Context`] (lens's own current span,
    /// [`crate::current_span`]) is decided without building one.
    #[must_use]
    pub fn with_delegate_kind(mut self, kind: DelegateSampler) -> Self {
        self.delegate_kind = Some(kind);
        self
    }

    /// The decision for a span whose valid parent is `parent` (`None`: a
    /// root). `parent_cx` is the context it came from, when it came from
    /// one: a delegate that is not a known SDK sampler is given it (or one
    /// built around `parent`).
    #[expect(clippy::too_many_arguments, reason = "ShouldSample's arguments, plus the parent already read")]
    pub(crate) fn decide(
        &self,
        parent: Option<&SpanContext>,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let parent_state = || parent.map(|sc| sc.trace_state().clone()).unwrap_or_default();

        if !self.records_spans {
            return result(SamplingDecision::Drop, parent_state());
        }
        match marker(attributes) {
            Marker::Structural => result(SamplingDecision::RecordAndSample, parent_state()),
            Marker::Key(key) if let Some(ratio) = self.ratio_override.get() => {
                result(keep_if(ratio_keeps_key(ratio, key)), keyed_trace_state(&parent_state()))
            }
            Marker::Key(key) => {
                let decided = self.delegate.should_sample(None, key_trace_id(key), name, span_kind, attributes, links);
                SamplingResult {
                    decision: decided.decision,
                    attributes: decided.attributes,
                    trace_state: keyed_trace_state(&parent_state()),
                }
            }
            Marker::None => match parent {
                // A root (no span in the context either) under a sampler
                // that keeps every root: the SDK's decision, without the
                // call (about 150 instructions a root span).
                None if self.delegate_kind.is_some_and(DelegateSampler::keeps_roots)
                    && parent_context.is_none_or(|cx| !cx.has_active_span()) =>
                {
                    result(SamplingDecision::RecordAndSample, TraceState::default())
                }
                Some(sc) if is_keyed(sc.trace_state()) => follow(sc),
                Some(sc) if parent_context.is_none() => match self.delegate_kind {
                    // The SDK's samplers: parent-based ones follow a valid
                    // parent, the others never read it.
                    Some(kind) if kind.is_parent_based() => follow(sc),
                    Some(_) => {
                        let decided = self.delegate.should_sample(None, trace_id, name, span_kind, attributes, links);
                        SamplingResult { trace_state: sc.trace_state().clone(), ..decided }
                    }
                    None => {
                        let cx = Context::new().with_remote_span_context(sc.clone());
                        self.delegate.should_sample(Some(&cx), trace_id, name, span_kind, attributes, links)
                    }
                },
                _ => self.delegate.should_sample(parent_context, trace_id, name, span_kind, attributes, links),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in DelegateSampler::ALL {
            assert_eq!(DelegateSampler::from_name(kind.as_str()), Some(kind));
        }
        assert_eq!(DelegateSampler::from_name("parentbased_traceid_ratio"), None);
    }

    /// A span whose parent is on lens's own stack (no context) is decided
    /// as the same span under that parent in a context: every delegate
    /// kind, sampled and unsampled parents, keyed and plain trace states,
    /// trace ids on both sides of the ratio.
    #[test]
    fn a_parent_without_a_context_is_decided_as_the_same_parent_in_one() {
        use opentelemetry::trace::{SpanId, TraceFlags};
        let keyed = TraceState::default().insert(TRACE_STATE_KEY, TRACE_STATE_KEYED).unwrap();
        let other = TraceState::default().insert("vendor", "x").unwrap();
        let kind = SpanKind::Internal;
        let mut compared = 0;
        let mut in_places = 0;
        for delegate in DelegateSampler::ALL {
            let known = LensSampler::new(delegate_from(delegate, Some(0.5))).with_delegate_kind(delegate);
            let unknown = LensSampler::new(delegate_from(delegate, Some(0.5)));
            for flags in [TraceFlags::SAMPLED, TraceFlags::default()] {
                for state in [TraceState::default(), keyed.clone(), other.clone()] {
                    for low in [0x0000_0000_0000_0010_u64, 0xffff_ffff_ffff_fff0] {
                        let mut bytes = [1_u8; 16];
                        bytes[8..].copy_from_slice(&low.to_be_bytes());
                        let trace_id = TraceId::from_bytes(bytes);
                        let parent = SpanContext::new(trace_id, SpanId::from(9), flags, false, state.clone());
                        let cx = Context::new().with_remote_span_context(parent.clone());
                        let in_context = known.should_sample(Some(&cx), trace_id, "s", &kind, &[], &[]);
                        for sampler in [&known, &unknown] {
                            let on_stack = sampler.decide(Some(&parent), None, trace_id, "s", &kind, &[], &[]);
                            assert_eq!(on_stack.decision, in_context.decision, "{delegate:?} {flags:?} {state:?}");
                            assert_eq!(on_stack.trace_state, in_context.trace_state, "{delegate:?}");
                            compared += 1;
                            if let Some(in_place) = sampler.follow_in_place(Some(&parent), None, &[]) {
                                assert_eq!(in_place.decision, in_context.decision, "{delegate:?} {flags:?}");
                                assert_eq!(in_place.trace_state, in_context.trace_state, "{delegate:?}");
                                in_places += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 6 * 2 * 3 * 2 * 2);
        // Decided in place: the three parent-based kinds known to the
        // sampler, both flags, no trace state, both trace ids.
        assert_eq!(in_places, 3 * 2 * 2);
        let sampler = LensSampler::new(delegate_from(DelegateSampler::ParentBasedAlwaysOn, None))
            .with_delegate_kind(DelegateSampler::ParentBasedAlwaysOn);
        let parent = SpanContext::new(TraceId::from(5), SpanId::from(9), TraceFlags::SAMPLED, false, TraceState::NONE);
        let attributes = [KeyValue::new(SAMPLING_KEY_ATTRIBUTE, 7_i64)];
        assert!(sampler.follow_in_place(Some(&parent), None, &attributes).is_none(), "attributes may mark a key");
        assert!(sampler.follow_in_place(Some(&parent), Some(&Context::new()), &[]).is_none(), "a context's parent");
        assert!(sampler.follow_in_place(None, None, &[]).is_none(), "a root");
        // The decisions differ between kinds: the comparison is not vacuous.
        let parent =
            SpanContext::new(TraceId::from(5), SpanId::from(9), TraceFlags::default(), false, TraceState::default());
        let decide = |delegate| {
            LensSampler::new(delegate_from(delegate, None))
                .with_delegate_kind(delegate)
                .decide(Some(&parent), None, TraceId::from(5), "s", &kind, &[], &[])
                .decision
        };
        assert_eq!(decide(DelegateSampler::AlwaysOn), SamplingDecision::RecordAndSample);
        assert_eq!(decide(DelegateSampler::ParentBasedAlwaysOn), SamplingDecision::Drop);
    }

    /// A root span is decided as the SDK sampler decides it, whether or not
    /// the sampler knows its delegate's kind (the known kinds that keep
    /// every root skip the call): every kind, no context, a context with no
    /// span, a context whose span is invalid (the SDK's parent-based
    /// samplers treat that as an unsampled parent), trace ids on both sides
    /// of the ratio.
    #[test]
    fn a_root_is_decided_as_the_sdk_decides_it() {
        use opentelemetry::trace::{SpanId, TraceFlags};
        let kind = SpanKind::Internal;
        let contexts =
            [None, Some(Context::new()), Some(Context::new().with_remote_span_context(SpanContext::empty_context()))];
        let mut kept = 0;
        for delegate in DelegateSampler::ALL {
            let known = LensSampler::new(delegate_from(delegate, Some(0.5))).with_delegate_kind(delegate);
            let unknown = LensSampler::new(delegate_from(delegate, Some(0.5)));
            for cx in &contexts {
                for low in [0x0000_0000_0000_0010_u64, 0xffff_ffff_ffff_fff0] {
                    let mut bytes = [1_u8; 16];
                    bytes[8..].copy_from_slice(&low.to_be_bytes());
                    let trace_id = TraceId::from_bytes(bytes);
                    let sdk =
                        delegate_from(delegate, Some(0.5)).should_sample(cx.as_ref(), trace_id, "s", &kind, &[], &[]);
                    for sampler in [&known, &unknown] {
                        let decided = sampler.decide(None, cx.as_ref(), trace_id, "s", &kind, &[], &[]);
                        assert_eq!(decided.decision, sdk.decision, "{delegate:?} {cx:?} {low:#x}");
                        assert_eq!(decided.trace_state, sdk.trace_state, "{delegate:?}");
                        assert!(decided.attributes.is_empty());
                    }
                    kept += usize::from(sdk.decision == SamplingDecision::RecordAndSample);
                }
            }
        }
        // always_on keeps all 6 roots, parentbased_always_on the 4 without an
        // invalid span in their context, each ratio kind 1 of 2 trace ids in
        // each context but the invalid span's under the parent-based one.
        assert_eq!(kept, 6 + 4 + 3 + 2);
        // An unsampled parent is still followed (dropped), not taken for a
        // root (kept).
        let parent =
            SpanContext::new(TraceId::from(5), SpanId::from(9), TraceFlags::default(), false, TraceState::default());
        let sampler = LensSampler::new(delegate_from(DelegateSampler::ParentBasedAlwaysOn, None))
            .with_delegate_kind(DelegateSampler::ParentBasedAlwaysOn);
        let decided = sampler.decide(Some(&parent), None, TraceId::from(5), "s", &kind, &[], &[]);
        assert_eq!(decided.decision, SamplingDecision::Drop);
    }

    #[test]
    fn ratio_kinds_use_the_ratio() {
        assert!(matches!(
            delegate_from(DelegateSampler::TraceIdRatio, None),
            Sampler::TraceIdRatioBased(r) if r == 1.0
        ));
        assert!(DelegateSampler::ParentBasedTraceIdRatio.takes_ratio());
        assert!(!DelegateSampler::AlwaysOn.takes_ratio());
    }

    #[test]
    fn key_trace_id_matches_the_sdk_ratio_rule() {
        for key in [0_i64, 1, -1, i64::MAX, i64::MIN, 0x1234_5678_9abc_def0] {
            for ratio in [0.0, 0.1, 0.5, 0.9, 1.0] {
                let sdk = Sampler::TraceIdRatioBased(ratio).should_sample(
                    None,
                    key_trace_id(key),
                    "s",
                    &SpanKind::Internal,
                    &[],
                    &[],
                );
                let expected = if ratio_keeps_key(ratio, key) {
                    SamplingDecision::RecordAndSample
                } else {
                    SamplingDecision::Drop
                };
                assert_eq!(sdk.decision, expected, "key {key:#x} ratio {ratio}");
            }
        }
    }

    #[test]
    fn a_ratio_override_decides_keyed_spans_whatever_the_delegate() {
        let ratio_override = RatioOverride::new();
        let sampler = LensSampler::new(delegate_from(DelegateSampler::AlwaysOn, None))
            .with_ratio_override(ratio_override.clone());
        let kind = SpanKind::Internal;
        let trace_id = TraceId::from_bytes([7; 16]);
        let decide = |key: i64| {
            let attributes = [KeyValue::new(SAMPLING_KEY_ATTRIBUTE, key)];
            sampler.should_sample(None, trace_id, "megatron.train.iteration", &kind, &attributes, &[]).decision
        };
        let (low, high) = (0x1000_i64, -1_i64);
        assert_eq!(decide(high), SamplingDecision::RecordAndSample, "always_on at launch");
        ratio_override.set(Some(0.5));
        assert_eq!(decide(low), SamplingDecision::RecordAndSample);
        assert_eq!(decide(high), SamplingDecision::Drop, "the override replaces always_on");
        let structural = [KeyValue::new(STRUCTURAL_ATTRIBUTE, true)];
        let kept = sampler.should_sample(None, trace_id, "megatron.train", &kind, &structural, &[]);
        assert_eq!(kept.decision, SamplingDecision::RecordAndSample, "structure is never sampled away");
        ratio_override.set(None);
        assert_eq!(decide(high), SamplingDecision::RecordAndSample, "back to the launch sampler");
    }

    #[test]
    fn structural_wins_over_a_key() {
        let attributes = [KeyValue::new(SAMPLING_KEY_ATTRIBUTE, 0_i64), KeyValue::new(STRUCTURAL_ATTRIBUTE, true)];
        assert!(matches!(marker(&attributes), Marker::Structural));
        let wrong_types = [KeyValue::new(SAMPLING_KEY_ATTRIBUTE, "7"), KeyValue::new(STRUCTURAL_ATTRIBUTE, "true")];
        assert!(matches!(marker(&wrong_types), Marker::None));
    }
}
