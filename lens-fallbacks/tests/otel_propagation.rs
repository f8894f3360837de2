//! Propagation against a real SDK tracer: string carriers, bytes for other
//! ranks, the environment carrier, linked spans and the worker bootstrap.
//!
//! The active tracer and the group gate are process-global, so this file is
//! its own test binary and its tests take a lock. Run with
//! `cargo test -p lens-fallbacks --features testing --test otel_propagation`.

use std::collections::{BTreeMap, HashMap};

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::groups::SpanGroup;
use lens_fallbacks::propagation::{
    InvalidBootstrap, RemoteContext, WorkerBootstrap, context_from_env, current_context, decode_context,
    encode_context, extract_context, inject_context,
};
use lens_fallbacks::span::{DEFAULT_REDACT_KEYS, SpanLink, managed_span, span, ungated_span};
use lens_fallbacks::testing::{Capture, capture};
use opentelemetry::Value;
use opentelemetry::baggage::BaggageExt as _;
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::SpanData;
use proptest::prelude::*;

fn spans(exporter: &Capture) -> Vec<SpanData> {
    exporter.finished_spans()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span named {name}"))
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn inject_writes_a_w3c_traceparent_for_the_current_span() {
    let exporter = capture(&[SpanGroup::JOB]);
    let mut carrier = HashMap::new();
    {
        let _span = managed_span(SpanGroup::JOB, "test.launch", []);
        inject_context(&mut carrier);
    }
    let span = &spans(&exporter)[0];
    let traceparent = &carrier["traceparent"];
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1], span.span_context.trace_id().to_string());
    assert_eq!(parts[2], span.span_context.span_id().to_string());
    assert_eq!(parts[3], "01");
    // No trace state: no empty `tracestate` header.
    assert!(!carrier.contains_key("tracestate"), "{carrier:?}");

    // With no current span there is nothing to inject.
    let mut empty: Vec<(String, String)> = Vec::new();
    inject_context(&mut empty);
    assert!(empty.is_empty(), "{empty:?}");
    assert!(!current_context().is_valid());
}

#[test]
fn extract_reads_traceparent_and_baggage_and_rejects_empty_or_malformed_carriers() {
    let _exporter = capture(&[]);
    assert!(!extract_context(&HashMap::<String, String>::new()).is_valid());
    for bad in ["", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf9-00f0-01"] {
        assert!(!extract_context(&[("traceparent", bad)]).is_valid(), "{bad:?} was accepted");
    }
    let remote = extract_context(&[("traceparent", TRACEPARENT), ("baggage", "user=alice,team=llm")]);
    assert!(remote.is_valid());
    assert_eq!(remote.trace_id_hex().as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    assert_eq!(remote.span_id_hex().as_deref(), Some("00f067aa0ba902b7"));
    let baggage = remote.otel_context().baggage();
    assert_eq!(baggage.get("team").map(|v| v.as_str().to_string()).as_deref(), Some("llm"));

    // Injecting it again gives the same carrier back.
    let carrier: BTreeMap<String, String> = remote.to_carrier().into_iter().collect();
    assert_eq!(carrier["traceparent"], TRACEPARENT);
    assert!(carrier["baggage"].contains("user=alice"));
}

#[test]
fn bytes_roundtrip_and_bad_bytes_are_no_context() {
    let _exporter = capture(&[SpanGroup::JOB]);
    let (bytes, ids) = {
        let span = managed_span(SpanGroup::JOB, "test.broadcast", []);
        (encode_context(), span.remote_context())
    };
    let decoded = decode_context(&bytes).expect("a valid encoding decodes");
    assert_eq!(decoded.trace_id_hex(), ids.trace_id_hex());
    assert_eq!(decoded.span_id_hex(), ids.span_id_hex());
    // The encoding is the JSON carrier, readable by the original's deserialize_context.
    let json = String::from_utf8(bytes).expect("utf-8");
    assert!(json.starts_with("{\"traceparent\":\"00-"), "{json}");

    assert!(decode_context(&encode_context()).is_none(), "no current span encodes to no context");
    for bad in [&b""[..], b"{}", b"[1,2]", b"\xff\xfe", b"{\"traceparent\": 7}", b"{\"traceparent\":\"00-zz\"}"] {
        assert!(decode_context(bad).is_none(), "{bad:?} decoded");
    }
    let huge = format!("{{\"traceparent\":\"{TRACEPARENT}\",\"x\":\"{}\"}}", "a".repeat(20_000));
    assert!(decode_context(huge.as_bytes()).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_context(&bytes);
    }

    #[test]
    fn decoding_arbitrary_traceparents_never_panics(value in "\\PC{0,80}", state in "\\PC{0,40}") {
        let json = serde_like_object(&[("traceparent", &value), ("tracestate", &state)]);
        let _ = decode_context(json.as_bytes());
        let _ = extract_context(&[("traceparent", value.as_str()), ("tracestate", state.as_str())]);
    }
}

/// A JSON object of strings, escaping quotes and backslashes.
fn serde_like_object(pairs: &[(&str, &str)]) -> String {
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let body: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{}\":\"{}\"", escape(k), escape(v))).collect();
    format!("{{{}}}", body.join(","))
}

#[test]
fn a_linked_span_carries_the_link_and_is_not_made_current() {
    let exporter = capture(&[SpanGroup::STEP]);
    let remote = extract_context(&[("traceparent", TRACEPARENT)]);
    {
        let _step = managed_span(SpanGroup::STEP, "test.step", []);
        let linked = span(SpanGroup::STEP, "test.recv_forward.linked")
            .links([SpanLink::new(&remote)])
            .attributes_redacted(
                [KeyValue::new("dl.microbatch_id", 3), KeyValue::new("prompt", "do not export")],
                DEFAULT_REDACT_KEYS,
            )
            .start_unattached();
        assert!(linked.is_recording());
        let _next = managed_span(SpanGroup::STEP, "test.next", []);
    }
    let spans = spans(&exporter);
    let step = named(&spans, "test.step");
    let linked = named(&spans, "test.recv_forward.linked");
    assert_eq!(linked.links.links.len(), 1);
    assert_eq!(linked.links.links[0].span_context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(linked.parent_span_id, step.span_context.span_id());
    assert_eq!(
        named(&spans, "test.next").parent_span_id,
        step.span_context.span_id(),
        "the linked span is not current"
    );
    let prompt = linked.attributes.iter().find(|kv| kv.key.as_str() == "prompt").map(|kv| kv.value.clone());
    assert_eq!(prompt, Some(Value::from("[REDACTED]")));

    exporter.reset();
    assert!(!span(SpanGroup::OPTIMIZER, "test.off").links([SpanLink::new(&remote)]).start_unattached().is_recording());
    let ungated = ungated_span("test.ungated").links([SpanLink::new(&RemoteContext::none())]).start_unattached();
    assert!(ungated.is_recording());
    drop(ungated);
    let spans = self::spans(&exporter);
    assert_eq!(spans.len(), 1);
    assert!(spans[0].links.links.is_empty(), "no link to no context");
}

#[test]
fn a_linked_span_since_starts_when_it_is_told_and_carries_the_link() {
    let exporter = capture(&[SpanGroup::STEP]);
    let remote = extract_context(&[("traceparent", TRACEPARENT)]);
    let began = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
    drop(
        span(SpanGroup::STEP, "test.recv.linked").links([SpanLink::new(&remote)]).start_time(began).start_unattached(),
    );
    let spans = spans(&exporter);
    let linked = named(&spans, "test.recv.linked");
    assert_eq!(linked.start_time, began);
    assert!(linked.end_time.duration_since(linked.start_time).unwrap() >= std::time::Duration::from_secs(5));
    assert_eq!(linked.links.links.len(), 1);
    assert!(
        !span(SpanGroup::OPTIMIZER, "test.off")
            .links([SpanLink::new(&remote)])
            .start_time(began)
            .start_unattached()
            .is_recording()
    );
}

#[test]
fn an_attached_remote_context_parents_new_spans_and_is_detached_on_drop() {
    let exporter = capture(&[SpanGroup::EVALUATE]);
    let remote = extract_context(&[("traceparent", TRACEPARENT)]);
    {
        let _context = remote.attach();
        let _request = managed_span(SpanGroup::EVALUATE, "test.request", []);
    }
    drop(managed_span(SpanGroup::EVALUATE, "test.next_request", []));
    let spans = spans(&exporter);
    let request = named(&spans, "test.request");
    assert_eq!(request.span_context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(request.parent_span_id.to_string(), "00f067aa0ba902b7");
    assert!(request.parent_span_is_remote);
    let next = named(&spans, "test.next_request");
    assert_eq!(next.parent_span_id, SpanId::INVALID, "the remote context did not leak into the next request");
}

#[test]
fn the_environment_carrier_is_read_through_an_env_source() {
    let _exporter = capture(&[]);
    let env = HashMap::from([
        ("TRACEPARENT".to_string(), TRACEPARENT.to_string()),
        ("TRACESTATE".to_string(), "vendor=x".to_string()),
        ("BAGGAGE".to_string(), "ci.job=42".to_string()),
    ]);
    let remote = context_from_env(&env).expect("a valid TRACEPARENT");
    assert_eq!(remote.span_id_hex().as_deref(), Some("00f067aa0ba902b7"));
    assert_eq!(remote.otel_context().span().span_context().trace_state().get("vendor"), Some("x"));
    assert_eq!(remote.to_carrier()["baggage"], "ci.job=42");
    assert!(context_from_env(&[("TRACEPARENT", "  ")]).is_none());
    assert!(context_from_env(&[("TRACEPARENT", "not-a-traceparent")]).is_none());
    assert!(context_from_env(&[("traceparent", TRACEPARENT)]).is_none(), "the variables are upper case");
}

use opentelemetry::trace::TraceContextExt as _;

#[test]
fn the_worker_bootstrap_carries_settings_and_context_to_a_worker() {
    let exporter = capture(&[SpanGroup::CHECKPOINT]);
    let bootstrap = {
        let _save = managed_span(SpanGroup::CHECKPOINT, "test.save", []);
        WorkerBootstrap::capture(true, Some("megatron-lm".into()), Some("default,step".into()))
    };
    let save = &spans(&exporter)[0];
    let vars = bootstrap.to_env_vars("MEGATRON_OTEL");
    let env: HashMap<String, String> = vars.into_iter().collect();
    assert_eq!(env["MEGATRON_OTEL_ENABLED"], "1");
    assert_eq!(env["OTEL_SERVICE_NAME"], "megatron-lm");
    assert_eq!(env["MEGATRON_OTEL_SPAN_GROUPS"], "default,step");
    assert!(env["TRACEPARENT"].contains(&save.span_context.span_id().to_string()));

    let worker = WorkerBootstrap::from_env(&env, "MEGATRON_OTEL").expect("valid variables");
    assert_eq!(worker, bootstrap);
    let remote = worker.remote_context().expect("the parent's context");
    assert_eq!(remote.span_id_hex(), Some(save.span_context.span_id().to_string()));
    // The environment carrier the worker's own setup reads finds the same context.
    assert_eq!(context_from_env(&env).and_then(|r| r.span_id_hex()), remote.span_id_hex());
}

#[test]
fn a_disabled_bootstrap_is_inert() {
    let _exporter = capture(&[SpanGroup::JOB]);
    let _span = managed_span(SpanGroup::JOB, "test.parent", []);
    let bootstrap = WorkerBootstrap::capture(false, Some("svc".into()), None);
    assert_eq!(bootstrap, WorkerBootstrap::disabled());
    assert_eq!(bootstrap.to_env_vars("NEMO_LENS"), vec![("NEMO_LENS_ENABLED".to_string(), "0".to_string())]);
    assert!(bootstrap.remote_context().is_none());
    let env = [("NEMO_LENS_ENABLED", "0"), ("TRACEPARENT", TRACEPARENT)];
    assert_eq!(WorkerBootstrap::from_env(&env, "NEMO_LENS"), Ok(WorkerBootstrap::disabled()));
    assert_eq!(WorkerBootstrap::from_env(&[("X", "1")], "NEMO_LENS"), Ok(WorkerBootstrap::disabled()));
    let error = WorkerBootstrap::from_env(&[("NEMO_LENS_ENABLED", "maybe")], "NEMO_LENS").unwrap_err();
    assert_eq!(error, InvalidBootstrap { variable: "NEMO_LENS_ENABLED".into(), value: "maybe".into() });
    let message = error.to_string();
    assert!(message.contains("NEMO_LENS_ENABLED") && message.contains("maybe") && message.contains("'true'/'false'"));
}
