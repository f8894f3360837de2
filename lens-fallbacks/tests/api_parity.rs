//! Pins the facade's API: this file is compiled and run in both modes
//! (`cargo test -p lens-fallbacks` and `cargo test -p lens-fallbacks
//! --no-default-features`), calling every item with the same arguments and
//! types. A signature that drifts between `real` and `noop` breaks one of the
//! two builds.
//!
//! No telemetry is set up here, so in both modes every span is inert; the
//! assertions are the behaviour both modes share (bodies run, results and
//! errors come back unchanged, redaction is the same pure function). Facade
//! behaviour that needs an SDK is in `tests/trace_fn.rs` (`--features testing`).

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use lens_fallbacks::{
    AttachedContext, AttrValue, DEFAULT_REDACT_KEYS, DetachedSpan, GroupSet, InvalidBootstrap, KeyValue,
    LazyAttributes, REDACTED, RemoteContext, SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, SpanGroup, SpanGuard,
    SpanKind, SpanLink, WorkerBootstrap, backdated_span, context_from_env, create_linked_span,
    create_linked_span_since, current_context, decode_context, detached_span, encode_context, extract_context,
    in_managed_span, inject_context, instrument_future, is_span_group_enabled, lazy_attributes, managed_span,
    managed_span_since, new_trace_linked, redact_value, root_span_with_trace_id, safe_set_span_attributes,
    sampling_key, set_enabled_span_groups, span_cm, trace_fn, try_in_managed_span, try_instrument_future,
};

fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..100 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("the future did not complete in 100 polls");
}

#[trace_fn(group = SpanGroup::STEP, name = "parity.step")]
fn traced_step(x: u32) -> u32 {
    x * 2
}

#[trace_fn(group = SpanGroup::CHECKPOINT, name = "parity.save")]
fn traced_save(fail: bool) -> Result<&'static str, std::io::Error> {
    if fail {
        return Err(std::io::Error::other("disk full"));
    }
    let n: u32 = "7".parse().map_err(std::io::Error::other)?;
    Ok(if n == 7 { "saved" } else { "odd" })
}

#[trace_fn(group = SpanGroup::EVALUATE, name = "parity.async")]
async fn traced_async(x: u32) -> u32 {
    x + 1
}

struct Model {
    steps: u32,
}

impl Model {
    #[trace_fn(group = SpanGroup::STEP, name = "parity.method", err = false)]
    fn step(&mut self) -> u32 {
        self.steps += 1;
        self.steps
    }
}

#[test]
fn the_gate_and_the_guards() {
    let groups: GroupSet = GroupSet::EMPTY;
    set_enabled_span_groups(groups);
    let enabled: bool = is_span_group_enabled(SpanGroup::STEP);
    assert!(!enabled);

    let guard: SpanGuard = managed_span(SpanGroup::STEP, "parity.guard", [KeyValue::new("k", 1)]);
    let recording: bool = guard.is_recording();
    assert!(!recording);
    guard.set_attribute("k", 2.5);
    guard.set_attribute(String::from("owned"), String::from("value"));
    guard.set_attributes([KeyValue::new("a", true)]);
    guard.set_attributes(vec![KeyValue::new("b", "c")]);
    guard.add_event("event", [KeyValue::new("n", 3_u64)]);
    guard.add_event(String::from("owned event"), []);
    let error: &dyn Error = &std::io::Error::other("e");
    guard.record_error(error);
    guard.set_status_error("bad");
    guard.set_status_error(String::from("bad"));
    let context: RemoteContext = guard.remote_context();
    assert!(!context.is_valid());
    let _debug = format!("{guard:?}");
    guard.end();

    let now = SystemTime::now();
    span_cm("parity.cm", []).end_at(now);
    drop(span_cm(String::from("parity.cm"), vec![KeyValue::new("x", 1)]));
    drop(managed_span_since(SpanGroup::JOB, "parity.since", now, []));
    let done: RemoteContext =
        backdated_span(SpanGroup::JOB, "parity.backdated", now, now + Duration::from_millis(1), []);
    assert!(!done.is_valid());
    let link: SpanLink = SpanLink::new(&done).with_attributes([KeyValue::new("l", 1)]);
    let _valid: bool = link.is_valid();
    drop(new_trace_linked(SpanGroup::JOB, "parity.linked", [link.clone()], []));
    drop(new_trace_linked(SpanGroup::JOB, "parity.linked", Vec::<SpanLink>::new(), []));
    let root: SpanGuard = root_span_with_trace_id(
        SpanGroup::JOB,
        "parity.root",
        [7; 16],
        Some(SystemTime::now()),
        [link.clone()],
        [KeyValue::new(STRUCTURAL_ATTRIBUTE, true)],
    );
    assert!(!root.is_recording());
    let _key: i64 = sampling_key("run", 0, 7);
    assert_eq!((STRUCTURAL_ATTRIBUTE, SAMPLING_KEY_ATTRIBUTE), ("lens.sampling.structural", "lens.sampling.key"));
    const INERT: SpanGuard = SpanGuard::noop();
    drop(INERT);
}

#[test]
fn closures_run_and_errors_come_back() {
    let value: u32 = in_managed_span(SpanGroup::STEP, "parity.closure", [], |span: &SpanGuard| {
        span.set_attribute("inside", 1);
        41 + 1
    });
    assert_eq!(value, 42);
    let ok: Result<u32, String> = try_in_managed_span(SpanGroup::STEP, "parity.try", [], |_| Ok(1));
    assert_eq!(ok, Ok(1));
    let err: Result<u32, String> = try_in_managed_span(SpanGroup::STEP, "parity.try", [], |_| Err("no".into()));
    assert_eq!(err, Err("no".to_string()));

    assert_eq!(traced_step(21), 42);
    assert_eq!(traced_save(false).expect("saved"), "saved");
    assert_eq!(traced_save(true).unwrap_err().to_string(), "disk full");
    let mut model = Model { steps: 0 };
    assert_eq!((model.step(), model.step()), (1, 2));

    assert_eq!(block_on(instrument_future(SpanGroup::EVALUATE, "parity.future", [], async { 5 })), 5);
    let failed: Result<(), String> =
        block_on(try_instrument_future(SpanGroup::EVALUATE, "parity.future", [], async { Err("x".to_string()) }));
    assert!(failed.is_err());
    assert_eq!(block_on(traced_async(1)), 2);
}

#[test]
fn lazy_attributes_are_never_computed_before_setup() {
    let lazy: LazyAttributes<_> = lazy_attributes(|| -> [KeyValue; 1] { panic!("computed without a span") });
    drop(managed_span(SpanGroup::FORWARD_BACKWARD, "parity.lazy", lazy));
}

#[test]
fn redaction_is_the_same_pure_function() {
    assert_eq!(redact_value("password", AttrValue::from("x"), DEFAULT_REDACT_KEYS), AttrValue::from(REDACTED));
    assert_eq!(redact_value("model", AttrValue::from("x"), DEFAULT_REDACT_KEYS), AttrValue::from("x"));
    assert_eq!(DEFAULT_REDACT_KEYS.len(), 8);
    let span = SpanGuard::noop();
    let none: Option<KeyValue> = None;
    safe_set_span_attributes(&span, [Some(KeyValue::new("token", "t")), none], DEFAULT_REDACT_KEYS);
    safe_set_span_attributes(&span, [KeyValue::new("k", 1)], &["k"]);
}

#[test]
fn propagation_without_a_span_carries_nothing() {
    let mut map: HashMap<String, String> = HashMap::new();
    inject_context(&mut map);
    assert!(!map.contains_key("traceparent"));
    let mut pairs: Vec<(String, String)> = Vec::new();
    current_context().inject(&mut pairs);
    let _carrier: HashMap<String, String> = current_context().to_carrier();
    assert!(!extract_context(&map).is_valid());
    assert!(!extract_context(&BTreeMap::<String, String>::new()).is_valid());
    let from_pairs: RemoteContext = extract_context(&[("traceparent", "garbage")]);
    assert!(!from_pairs.is_valid());
    assert_eq!((from_pairs.trace_id_hex(), from_pairs.span_id_hex()), (None, None));
    let bytes: Vec<u8> = encode_context();
    assert!(decode_context(&bytes).is_none());
    assert!(decode_context(b"\xff").is_none());
    let _bytes: Vec<u8> = RemoteContext::none().to_bytes();
    assert!(context_from_env(&[("TRACEPARENT", "garbage")]).is_none());
    let attached: AttachedContext = RemoteContext::none().attach();
    drop(attached);
    let linked: SpanGuard = create_linked_span(Some(SpanGroup::STEP), "parity.linked", &RemoteContext::none(), []);
    assert!(!linked.is_recording());
    drop(create_linked_span(None, String::from("parity.linked"), &from_pairs, [KeyValue::new("prompt", "p")]));
    let since = std::time::SystemTime::now();
    drop(create_linked_span_since(Some(SpanGroup::STEP), "parity.linked", &from_pairs, since, []));
}

#[test]
fn a_detached_span_is_send_and_inert_without_setup() {
    fn assert_send<T: Send>(_: &T) {}
    let parent = extract_context(&[("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]);
    let span: DetachedSpan = detached_span(
        SpanGroup::JOB,
        "POST /v1/completions",
        SpanKind::Server,
        &parent,
        Some(SystemTime::now()),
        [SpanLink::new(&parent)],
        [KeyValue::new("http.request.method", "POST")],
    );
    assert_send(&span);
    assert!(!span.is_recording());
    span.set_attribute("http.response.status_code", 200_i64);
    span.set_attributes([KeyValue::new("error.type", "overloaded")]);
    span.set_status_error("overloaded");
    assert!(!span.remote_context().is_valid());
    span.end_at(SystemTime::now());
    assert!(!DetachedSpan::noop().is_recording());
    assert_eq!(SpanKind::default(), SpanKind::Internal);
}

#[test]
fn a_disabled_worker_bootstrap_is_inert() {
    let bootstrap: WorkerBootstrap = WorkerBootstrap::capture(false, None, Some("default".into()));
    assert_eq!(bootstrap, WorkerBootstrap::disabled());
    assert_eq!(bootstrap.to_env_vars("LENS"), vec![("LENS_ENABLED".to_string(), "0".to_string())]);
    let read: Result<WorkerBootstrap, InvalidBootstrap> = WorkerBootstrap::from_env(&[("LENS_ENABLED", "0")], "LENS");
    assert_eq!(read, Ok(WorkerBootstrap::disabled()));
    assert!(bootstrap.remote_context().is_none());
    let WorkerBootstrap { enabled, service_name, span_groups, traceparent, tracestate, baggage } = bootstrap;
    assert!(!enabled);
    assert_eq!((service_name, span_groups, traceparent, tracestate, baggage), (None, None, None, None, None));
}

/// With `otel` off the guard and the context cost nothing to hold.
#[cfg(not(feature = "otel"))]
#[test]
fn compiled_out_types_are_zero_sized() {
    assert_eq!(std::mem::size_of::<SpanGuard>(), 0);
    assert_eq!(std::mem::size_of::<RemoteContext>(), 0);
    assert_eq!(std::mem::size_of::<SpanLink>(), 0);
}

/// The setup API compiles and behaves the same at these call sites in both
/// modes: a disabled configuration gives a handle that exports nothing, and
/// a bad configuration is an error naming the variable in both modes.
#[test]
fn setup_api_is_the_same_in_both_modes() {
    use lens_fallbacks::config::LensConfig;
    use lens_fallbacks::{Meter, RankContext, SetupError, SetupOptions, ShutdownReport, Telemetry, setup_telemetry};

    let options = SetupOptions::new()
        .with_rank_strategy(|_config, rank| rank.rank == 0)
        .with_lazy_resource(|| vec![KeyValue::new("dl.gpu.name", "never probed when disabled")])
        .with_scope("parity")
        .with_env(HashMap::<String, String>::new());
    let telemetry: Telemetry = setup_telemetry(&LensConfig::default(), &RankContext::SINGLE, Vec::new(), options)
        .expect("a disabled configuration sets up");
    let _meter: &Meter = telemetry.meter();
    assert!(!telemetry.is_enabled());
    assert!(!telemetry.is_exporting());
    assert!(!telemetry.records_spans());
    assert_eq!(telemetry.enabled_groups(), GroupSet::EMPTY);
    assert_eq!(telemetry.rank(), RankContext::SINGLE);
    assert!(telemetry.incoming_context().is_none());
    let report: ShutdownReport = telemetry.shutdown(Duration::from_secs(1));
    assert!(!report.performed);
    assert_eq!(report.spans.exported, 0);

    let bad = LensConfig { export_sample_rate: 1.5, ..LensConfig::default() };
    let error: SetupError = setup_telemetry(&bad, &RankContext::SINGLE, Vec::new(), SetupOptions::new()).unwrap_err();
    assert!(error.to_string().contains("export_sample_rate must be in [0.0, 1.0], got 1.5"), "{error}");
}

/// The metric recording of lens-instruments has the same paths, handles,
/// values and functions in both modes: inference at `instruments`' root and
/// in its module, RL and Gym only in theirs. The values structs are built
/// with every field named (no `..Default::default()`), so a field that exists,
/// or has another type, in one mode only breaks this build; and they are
/// lens-core's pure types in both modes, so a caller can build them without
/// naming the facade at all.
#[test]
fn metric_recording_is_the_same_in_both_modes() {
    use lens_fallbacks::config::LensConfig;
    use lens_fallbacks::instruments::gym::{GymMetrics, GymValues, record_gym_metrics};
    use lens_fallbacks::instruments::rl::{RlMetrics, RlValues, record_rl_metrics};
    use lens_fallbacks::instruments::{InferenceMetrics, InferenceValues, inference, record_inference_metrics};
    use lens_fallbacks::{Meter, RankContext, SetupOptions, setup_telemetry};

    let telemetry = setup_telemetry(&LensConfig::default(), &RankContext::SINGLE, Vec::new(), SetupOptions::new())
        .expect("a disabled configuration sets up");
    let meter: &Meter = telemetry.meter();

    let model = String::from("llama-3-8b");
    let inference_values: InferenceValues<'_> = InferenceValues {
        request_duration_s: Some(0.42_f64),
        model: Some(model.as_str()),
        input_tokens: Some(128_u64),
        output_tokens: Some(256_u64),
        provider_name: Some("nemo"),
        operation_name: Some("chat"),
    };
    let same_type: lens_core::instrument_values::InferenceValues<'_> = inference_values;
    let handle: InferenceMetrics = InferenceMetrics::new(meter);
    handle.record(&inference_values);
    record_inference_metrics(&handle, &same_type);
    let from_module: inference::InferenceMetrics = inference::InferenceMetrics::noop();
    inference::record_inference_metrics(&from_module.clone(), &inference::InferenceValues::default());
    assert_eq!(InferenceValues::default().input_tokens, None);

    let rl_values: RlValues = RlValues {
        reward_mean: Some(0.75_f64),
        kl_divergence: Some(0.01_f64),
        policy_loss: Some(0.3_f64),
        value_loss: Some(0.2_f64),
        entropy: Some(1.5_f64),
        response_length_mean: Some(512.0_f64),
        grad_norm: Some(0.9_f64),
        learning_rate: Some(1e-6_f64),
        throughput_tokens_per_sec: Some(1.2e4_f64),
        generation_duration_ms: Some(850.0_f64),
        rollout_duration_ms: Some(2_000.0_f64),
    };
    let _: lens_core::instrument_values::RlValues = rl_values;
    let rl: RlMetrics = RlMetrics::new(meter);
    rl.record(&rl_values);
    record_rl_metrics(&RlMetrics::noop(), &RlValues { kl_divergence: Some(0.02), ..Default::default() });

    let gym_values: GymValues = GymValues {
        server_request_duration_ms: Some(42.0_f64),
        rollout_duration_ms: Some(900.0_f64),
        verify_duration_ms: Some(120.0_f64),
        verify_success_rate: Some(0.87_f64),
        active_servers: Some(4_u64),
    };
    let _: lens_core::instrument_values::GymValues = gym_values;
    let gym: GymMetrics = GymMetrics::new(meter);
    gym.record(&gym_values);
    record_gym_metrics(&GymMetrics::noop().clone(), &gym_values);

    // Handles are shared across threads in both modes.
    fn send_sync_clone<T: Send + Sync + Clone + std::fmt::Debug>(_: &T) {}
    send_sync_clone(&handle);
    send_sync_clone(&rl);
    send_sync_clone(&gym);

    // A disabled lifetime exported nothing, whatever was recorded.
    let report = telemetry.shutdown(Duration::from_secs(1));
    assert_eq!(report.metrics, lens_fallbacks::MetricExportSnapshot::default(), "{report:?}");
}

/// With `otel` off the instrument handles cost nothing to hold.
#[cfg(not(feature = "otel"))]
#[test]
fn compiled_out_instrument_handles_are_zero_sized() {
    use lens_fallbacks::instruments::{InferenceMetrics, gym::GymMetrics, rl::RlMetrics};
    assert_eq!(std::mem::size_of::<InferenceMetrics>(), 0);
    assert_eq!(std::mem::size_of::<RlMetrics>(), 0);
    assert_eq!(std::mem::size_of::<GymMetrics>(), 0);
}
