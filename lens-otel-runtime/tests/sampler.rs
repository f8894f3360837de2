//! The lens sampler as a user sees it: the rank decision of the sampling
//! strategy, its composition with `OTEL_TRACES_SAMPLER`, structural spans and
//! per-iteration sampling keys (and the original's `sampling_integration`
//! tests).

use lens_otel_runtime::sampler::{
    DelegateSampler, LensSampler, SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, delegate_from, ratio_keeps_key,
    sampling_key,
};
use md5::{Digest as _, Md5};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, TraceContextExt as _, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SdkTracerProvider, ShouldSample};

/// The rank decision, `(int(md5(decimal rank), 16) mod 10000) / 10000 < rate`,
/// written out here as the original's Python computes it.
fn rank_passes(rank: u32, rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    if rate <= 0.0 {
        return false;
    }
    let digest = Md5::digest(rank.to_string().as_bytes());
    let value = u128::from_be_bytes(digest.into()) % 10_000;
    (value as f64) / 10_000.0 < rate
}

fn decide(sampler: &LensSampler, parent: Option<&Context>, attributes: &[KeyValue]) -> SamplingDecision {
    sampler
        .should_sample(parent, TraceId::from_bytes([0xab; 16]), "span", &SpanKind::Internal, attributes, &[])
        .decision
}

fn structural() -> [KeyValue; 1] {
    [KeyValue::new(STRUCTURAL_ATTRIBUTE, true)]
}

fn keyed(key: i64) -> [KeyValue; 1] {
    [KeyValue::new(SAMPLING_KEY_ATTRIBUTE, key)]
}

fn remote_parent(sampled: bool) -> Context {
    let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes([1; 16]),
        SpanId::from_bytes([2; 8]),
        flags,
        true,
        TraceState::default(),
    ))
}

#[test]
fn rate_one_records_and_samples() {
    let sampler = LensSampler::rank_aware(delegate_from(DelegateSampler::default(), None), 5, 1.0, rank_passes(5, 1.0));
    assert!(sampler.records_spans());
    assert_eq!(decide(&sampler, None, &[]), SamplingDecision::RecordAndSample);
    assert_eq!(decide(&sampler, Some(&Context::new()), &[]), SamplingDecision::RecordAndSample);
}

#[test]
fn rate_zero_drops_everything_even_structure() {
    let sampler = LensSampler::rank_aware(delegate_from(DelegateSampler::AlwaysOn, None), 0, 0.0, rank_passes(0, 0.0));
    assert!(!sampler.records_spans());
    assert_eq!(decide(&sampler, None, &[]), SamplingDecision::Drop);
    assert_eq!(decide(&sampler, None, &structural()), SamplingDecision::Drop);
    assert_eq!(decide(&sampler, None, &keyed(0)), SamplingDecision::Drop);
    assert_eq!(decide(&sampler, Some(&remote_parent(true)), &[]), SamplingDecision::Drop);
}

#[test]
fn description_names_the_class_rank_and_rate() {
    let sampler = LensSampler::rank_aware(Sampler::AlwaysOn, 7, 0.1, false);
    assert_eq!(sampler.description(), "RankAwareSampler(rank=7, rate=0.1)");
    assert_eq!(sampler.rank_aware_inputs(), Some((7, 0.1)));
    let whole = LensSampler::rank_aware(Sampler::AlwaysOn, 0, 1.0, true);
    assert_eq!(whole.description(), "RankAwareSampler(rank=0, rate=1.0)");

    let registered = LensSampler::registered(Sampler::AlwaysOn, "even_ranks", true);
    assert!(registered.description().contains("even_ranks"), "{}", registered.description());
    assert_eq!(registered.registered_name(), Some("even_ranks"));
    assert_eq!(registered.rank_aware_inputs(), None);

    let plain = LensSampler::new(delegate_from(DelegateSampler::AlwaysOff, None));
    assert!(plain.description().contains("AlwaysOff"), "{}", plain.description());
    assert!(plain.records_spans());
}

#[test]
fn a_passing_rank_delegates_to_the_configured_sampler() {
    // The original replaced OTEL_TRACES_SAMPLER; here it still applies.
    let off = LensSampler::rank_aware(delegate_from(DelegateSampler::AlwaysOff, None), 1, 1.0, true);
    assert_eq!(decide(&off, None, &[]), SamplingDecision::Drop);
    let parent_based = LensSampler::rank_aware(delegate_from(DelegateSampler::default(), None), 1, 1.0, true);
    assert_eq!(decide(&parent_based, Some(&remote_parent(false)), &[]), SamplingDecision::Drop);
    assert_eq!(decide(&parent_based, Some(&remote_parent(true)), &[]), SamplingDecision::RecordAndSample);
}

#[test]
fn structure_is_never_sampled_away() {
    let delegates = [
        delegate_from(DelegateSampler::AlwaysOff, None),
        delegate_from(DelegateSampler::ParentBasedAlwaysOff, None),
        delegate_from(DelegateSampler::TraceIdRatio, Some(0.0)),
        delegate_from(DelegateSampler::ParentBasedTraceIdRatio, Some(0.0)),
    ];
    for delegate in delegates {
        let sampler = LensSampler::new(delegate.clone());
        assert_eq!(decide(&sampler, None, &[]), SamplingDecision::Drop, "{delegate:?}");
        assert_eq!(decide(&sampler, None, &structural()), SamplingDecision::RecordAndSample, "{delegate:?}");
        assert_eq!(
            decide(&sampler, Some(&remote_parent(false)), &structural()),
            SamplingDecision::RecordAndSample,
            "{delegate:?} under an unsampled parent"
        );
    }
    // Only the boolean `true` marks structure.
    let sampler = LensSampler::new(Sampler::AlwaysOff);
    assert_eq!(decide(&sampler, None, &[KeyValue::new(STRUCTURAL_ATTRIBUTE, false)]), SamplingDecision::Drop);
}

#[test]
fn a_custom_delegate_sees_unmarked_spans_only() {
    #[derive(Clone, Debug)]
    struct DropNoisy;
    impl ShouldSample for DropNoisy {
        fn should_sample(
            &self,
            _: Option<&Context>,
            _: TraceId,
            name: &str,
            _: &SpanKind,
            _: &[KeyValue],
            _: &[opentelemetry::trace::Link],
        ) -> opentelemetry_sdk::trace::SamplingResult {
            let decision = if name == "noisy" { SamplingDecision::Drop } else { SamplingDecision::RecordAndSample };
            opentelemetry_sdk::trace::SamplingResult {
                decision,
                attributes: vec![KeyValue::new("custom.seen", true)],
                trace_state: TraceState::default(),
            }
        }
    }
    let sampler = LensSampler::registered(DropNoisy, "mine", true);
    let kind = SpanKind::Internal;
    let id = TraceId::from_bytes([3; 16]);
    let noisy = sampler.should_sample(None, id, "noisy", &kind, &[], &[]);
    assert_eq!(noisy.decision, SamplingDecision::Drop);
    let quiet = sampler.should_sample(None, id, "quiet", &kind, &[], &[]);
    assert_eq!(quiet.decision, SamplingDecision::RecordAndSample);
    assert_eq!(quiet.attributes, vec![KeyValue::new("custom.seen", true)]);
    let structural_noisy = sampler.should_sample(None, id, "noisy", &kind, &structural(), &[]);
    assert_eq!(structural_noisy.decision, SamplingDecision::RecordAndSample);
}

#[test]
fn keyed_decisions_agree_across_ranks_and_keep_the_configured_share() {
    let ratio = 0.25;
    let rank_a =
        LensSampler::rank_aware(delegate_from(DelegateSampler::ParentBasedTraceIdRatio, Some(ratio)), 0, 1.0, true);
    let rank_b =
        LensSampler::rank_aware(delegate_from(DelegateSampler::ParentBasedTraceIdRatio, Some(ratio)), 1, 1.0, true);
    // The two ranks see different trace ids and parents; the key alone decides.
    let parent_a = remote_parent(true);
    let mut kept = 0_u32;
    let iterations = 4_000_u64;
    for iteration in 0..iterations {
        let key = sampling_key("run-42", 0, iteration);
        let a = rank_a.should_sample(
            Some(&parent_a),
            TraceId::from_bytes([9; 16]),
            "megatron.step",
            &SpanKind::Internal,
            &keyed(key),
            &[],
        );
        let b = rank_b.should_sample(
            None,
            TraceId::from_bytes([0x5a; 16]),
            "megatron.step",
            &SpanKind::Internal,
            &keyed(key),
            &[],
        );
        assert_eq!(a.decision, b.decision, "iteration {iteration}");
        let expected =
            if ratio_keeps_key(ratio, key) { SamplingDecision::RecordAndSample } else { SamplingDecision::Drop };
        assert_eq!(a.decision, expected, "iteration {iteration}");
        if a.decision == SamplingDecision::RecordAndSample {
            kept += 1;
        }
    }
    let share = f64::from(kept) / iterations as f64;
    assert!((share - ratio).abs() < 0.03, "kept {share} of iterations, configured {ratio}");
}

#[test]
fn keys_follow_always_on_and_always_off_as_usual() {
    let key = sampling_key("run", 0, 3);
    for (kind, expected) in [
        (DelegateSampler::AlwaysOn, SamplingDecision::RecordAndSample),
        (DelegateSampler::ParentBasedAlwaysOn, SamplingDecision::RecordAndSample),
        (DelegateSampler::AlwaysOff, SamplingDecision::Drop),
        (DelegateSampler::ParentBasedAlwaysOff, SamplingDecision::Drop),
    ] {
        let sampler = LensSampler::new(delegate_from(kind, None));
        // Under a sampled structural parent, a keyed span is still decided as a root.
        assert_eq!(decide(&sampler, Some(&remote_parent(true)), &keyed(key)), expected, "{kind:?}");
    }
}

#[test]
fn sampling_keys_are_stable_and_distinct() {
    // md5("run-1:2:300")[..8], big-endian; the same in Python.
    let digest = Md5::digest(b"run-1:2:300");
    let expected = i64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    assert_eq!(sampling_key("run-1", 2, 300), expected);
    assert_ne!(sampling_key("run-1", 2, 300), sampling_key("run-1", 2, 301));
    assert_ne!(sampling_key("run-1", 2, 300), sampling_key("run-2", 2, 300));
}

/// Spans started through a real provider: the subtree of a keyed span follows
/// it, for a parent-based and for a plain ratio delegate.
#[test]
fn children_follow_their_keyed_parent() {
    for delegate in [
        delegate_from(DelegateSampler::ParentBasedTraceIdRatio, Some(0.5)),
        delegate_from(DelegateSampler::TraceIdRatio, Some(0.5)),
    ] {
        let provider = SdkTracerProvider::builder().with_sampler(LensSampler::new(delegate.clone())).build();
        let tracer = provider.tracer("test");
        let interval = tracer
            .span_builder("megatron.train")
            .with_attributes(structural())
            .start_with_context(&tracer, &Context::new());
        assert!(interval.span_context().is_sampled());
        let interval_cx = Context::new().with_span(interval);

        let (mut kept, mut dropped) = (0, 0);
        for iteration in 0..200_u64 {
            let step = tracer
                .span_builder("megatron.step")
                .with_attributes(keyed(sampling_key("run", 0, iteration)))
                .start_with_context(&tracer, &interval_cx);
            let step_sampled = step.span_context().is_sampled();
            let step_cx = interval_cx.with_span(step);
            for child_name in ["forward", "backward", "optimizer"] {
                let child = tracer.start_with_context(child_name, &step_cx);
                assert_eq!(child.span_context().is_sampled(), step_sampled, "{delegate:?} {child_name}");
                let grandchild = tracer.start_with_context("inner", &step_cx.with_span(child));
                assert_eq!(grandchild.span_context().is_sampled(), step_sampled, "{delegate:?} inner");
            }
            if step_sampled {
                kept += 1;
            } else {
                dropped += 1;
            }
        }
        assert!(kept > 60 && dropped > 60, "{delegate:?}: kept {kept}, dropped {dropped}");

        // Outside any keyed subtree the delegate still rules: children of the
        // structural span are parent-based, or per trace id for the plain ratio.
        let unkeyed = tracer.start_with_context("megatron.checkpoint.save", &interval_cx);
        if matches!(delegate, Sampler::ParentBased(_)) {
            assert!(unkeyed.span_context().is_sampled());
        }
    }
}

/// A `rank_aware` rate of 0.1 composed with `parentbased_traceidratio` 0.1
/// keeps about 1% of (rank, iteration) units: the decisions multiply.
#[test]
fn rank_rate_and_trace_ratio_compose() {
    let (ranks, iterations) = (400_u32, 400_u64);
    let mut kept = 0_u64;
    let mut ranks_recording = 0_u64;
    let keys: Vec<i64> = (0..iterations).map(|i| sampling_key("composed", 0, i)).collect();
    let kept_keys = keys.iter().filter(|key| ratio_keeps_key(0.1, **key)).count() as u64;
    for rank in 0..ranks {
        let sampler = LensSampler::rank_aware(
            delegate_from(DelegateSampler::ParentBasedTraceIdRatio, Some(0.1)),
            rank,
            0.1,
            rank_passes(rank, 0.1),
        );
        ranks_recording += u64::from(sampler.records_spans());
        for key in &keys {
            if decide(&sampler, None, &keyed(*key)) == SamplingDecision::RecordAndSample {
                kept += 1;
            }
        }
    }
    assert_eq!(kept, ranks_recording * kept_keys);
    let share = kept as f64 / (f64::from(ranks) * iterations as f64);
    assert!((0.005..0.016).contains(&share), "kept {share} of units, expected about 0.01");
}

/// The span's own start attributes reach the exporter, markers included.
#[cfg(feature = "testing")]
#[test]
fn attributes_pass_through_to_the_exported_span() {
    use opentelemetry_sdk::trace::InMemorySpanExporter;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_sampler(LensSampler::rank_aware(Sampler::AlwaysOff, 0, 1.0, true))
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("test");
    let mut span = tracer
        .span_builder("megatron.train")
        .with_attributes([KeyValue::new(STRUCTURAL_ATTRIBUTE, true), KeyValue::new("megatron.iteration", 12_i64)])
        .start(&tracer);
    span.end();
    let spans = exporter.get_finished_spans().expect("exporter is up");
    assert_eq!(spans.len(), 1);
    let attributes = &spans[0].attributes;
    assert!(attributes.contains(&KeyValue::new("megatron.iteration", 12_i64)), "{attributes:?}");
    assert!(attributes.contains(&KeyValue::new(STRUCTURAL_ATTRIBUTE, true)), "{attributes:?}");
    assert_eq!(attributes.len(), 2, "the sampler adds nothing: {attributes:?}");
}
