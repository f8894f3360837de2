//! Security end to end: the token of `OTEL_EXPORTER_OTLP_HEADERS` appears in
//! no output (every e2e test sends it and scans its whole directory at the
//! end; this file adds the error paths, where a leak is likeliest: a
//! receiver that refuses the token, one whose errors echo the request's
//! headers, no receiver, malformed header lists), TLS to
//! a receiver whose certificate comes from a private CA given in
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` (and a clear failure with a CA that does
//! not match), and redaction of sensitive attribute keys in exported spans.
//!
//! The simulator sets no user attributes with a sensitive key, so redaction
//! goes through a small program in this test binary: lens-fallbacks' setup
//! and `SpanGuard::set_attributes_redacted`, exporting to the sink over OTLP. It
//! installs process-global telemetry, which is why it lives in this file
//! and no other test here does so.
#![cfg(feature = "otel")]

mod e2e_support;

use std::collections::HashMap;
use std::time::Duration;

use e2e_support::{
    CANARY_HEADER, Ctx, Pki, Protocol, Sink, SinkOptions, canary_headers, canary_token, free_port, sim_args, strs,
};
use megatron_telemetry::taxonomy;

const RUN_LIMIT: Duration = Duration::from_secs(120);
/// Exports give up after this (ms) in the failing runs, so they stay short.
const SHORT_TIMEOUT_MS: &str = "2000";

fn args() -> Vec<String> {
    sim_args(2, 2)
}

/// A TLS run over `protocol` to a sink whose certificate the private CA signed.
fn tls_delivers(name: &str, protocol: Protocol) {
    let ctx = Ctx::new(name);
    let pki = Pki::generate(&ctx);
    let sink = Sink::start_with(
        &ctx,
        SinkOptions {
            tls: Some((pki.server_cert.clone(), pki.server_key.clone())),
            required_token: Some(canary_token().to_string()),
            ..SinkOptions::default()
        },
    );
    let endpoint = sink.endpoint(protocol);
    assert!(endpoint.starts_with("https://127.0.0.1:"), "{endpoint}");
    let run = ctx
        .sim(&strs(&args()))
        .otlp(protocol, &endpoint)
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.ca_cert.to_str().unwrap())
        .run(RUN_LIMIT);
    run.assert_success("the simulator over TLS");
    let records = sink.wait_for("spans over TLS", Duration::from_secs(30), |r| {
        r.spans_named(taxonomy::STARTUP.name).count() == 2 && r.spans_named(taxonomy::TRAIN.name).count() == 2
    });
    assert!(records.requests.iter().all(|r| r.outcome == "ok" && r.header_ok), "{:?}", records.requests);
    assert!(records.spans.iter().all(|s| s.transport == protocol.as_str()));
    assert!(records.metrics_named("megatron.training.loss").next().is_some(), "metrics over TLS too");
    sink.stop();
    ctx.finish();
}

#[test]
fn grpc_over_tls_with_a_private_ca_delivers() {
    tls_delivers("tls-grpc", Protocol::Grpc);
}

#[test]
fn http_protobuf_over_tls_with_a_private_ca_delivers() {
    tls_delivers("tls-http", Protocol::HttpProtobuf);
}

#[test]
fn a_ca_that_does_not_match_is_a_clear_failure_and_delivers_nothing() {
    let ctx = Ctx::new("tls-mismatch");
    let pki = Pki::generate(&ctx);
    let sink = Sink::start_with(
        &ctx,
        SinkOptions { tls: Some((pki.server_cert.clone(), pki.server_key.clone())), ..SinkOptions::default() },
    );
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let run = ctx
            .sim(&strs(&args()))
            .label(&format!("sim-wrong-ca-{}", protocol.as_str().replace('/', "-")))
            .otlp(protocol, &sink.endpoint(protocol))
            .env("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.other_ca_cert.to_str().unwrap())
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", SHORT_TIMEOUT_MS)
            .run(RUN_LIMIT);
        run.assert_success("the simulator with a CA that does not match (the run must still complete)");
        let stderr = run.stderr.to_lowercase();
        assert!(
            stderr.contains("invalid peer certificate"),
            "{}: no clear certificate error or warning:\n{}",
            protocol.as_str(),
            run.stderr
        );
        assert!(stderr.contains("dropped"), "{}: the drops are reported:\n{}", protocol.as_str(), run.stderr);
    }
    let records = sink.stop();
    assert_eq!(records.accepted_items("traces"), 0, "nothing delivered: {:?}", records.requests);
    assert_eq!(records.accepted_items("metrics"), 0, "nothing delivered: {:?}", records.requests);
    ctx.finish();
}

#[test]
fn the_header_token_appears_in_no_output_on_error_paths() {
    let mut ctx = Ctx::new("token");
    // 1. A receiver that refuses the token (401 / UNAUTHENTICATED).
    let picky = Sink::start_with(
        &ctx,
        SinkOptions { required_token: Some("the-value-the-sink-wants".to_string()), ..SinkOptions::default() },
    );
    for protocol in Protocol::ALL {
        let run = ctx
            .sim(&strs(&args()))
            .label("sim-refused")
            .otlp(protocol, &picky.endpoint(protocol))
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", SHORT_TIMEOUT_MS)
            .run(RUN_LIMIT);
        run.assert_success("the simulator against a receiver that refuses it");
        assert!(run.stderr.contains("dropped"), "{}: drops reported:\n{}", protocol.as_str(), run.stderr);
    }
    let refused = picky.stop();
    assert!(!refused.requests.is_empty(), "the refusing sink saw requests");
    assert!(refused.requests.iter().all(|r| !r.header_ok && r.outcome == "unauthenticated"));
    // 2. A receiver that refuses every export with an error that echoes the
    //    request's headers (HTTP 401 body, gRPC UNAUTHENTICATED message).
    let echoing = Sink::start_with(&ctx, SinkOptions { fail_mode: Some("echo-headers"), ..SinkOptions::default() });
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let run = ctx
            .sim(&strs(&args()))
            .label("sim-echoed")
            .otlp(protocol, &echoing.endpoint(protocol))
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", SHORT_TIMEOUT_MS)
            .run(RUN_LIMIT);
        run.assert_success("the simulator against a receiver that echoes its headers");
        assert!(run.stderr.contains("dropped"), "{}: drops reported:\n{}", protocol.as_str(), run.stderr);
    }
    let echoed = echoing.stop();
    assert!(echoed.requests.iter().any(|r| r.transport == "grpc"), "{:?}", echoed.requests);
    assert!(echoed.requests.iter().any(|r| r.transport == "http/protobuf"), "{:?}", echoed.requests);
    assert!(echoed.requests.iter().all(|r| r.outcome == "echo-headers"), "{:?}", echoed.requests);
    // 3. Nothing listening (connection refused), both transports.
    let closed = format!("http://127.0.0.1:{}", free_port());
    for protocol in [Protocol::Grpc, Protocol::HttpJson] {
        let run = ctx
            .sim(&strs(&args()))
            .label("sim-refused-connection")
            .otlp(protocol, &closed)
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", SHORT_TIMEOUT_MS)
            .run(RUN_LIMIT);
        run.assert_success("the simulator with no collector");
    }
    // 4. Malformed header lists: a configuration error on every rank that
    //    must not echo the entry that holds the token, including a bare
    //    base64-like token whose first '=' split would make it a "name".
    let bare = format!("{}QQ", canary_token().replace('-', ""));
    ctx.add_secret(&bare);
    for (headers, names) in [
        (format!("{},Bearer {}", canary_headers(), canary_token()), "entry #3"),
        (format!("{CANARY_HEADER}={}%zz", canary_token()), CANARY_HEADER),
        (format!("{},{bare}==", canary_headers()), "entry #3 is malformed"),
    ] {
        let run = ctx
            .sim(&strs(&args()))
            .label("sim-bad-headers")
            .otlp(Protocol::Grpc, &closed)
            .env("OTEL_EXPORTER_OTLP_HEADERS", &headers)
            .run(RUN_LIMIT);
        assert_eq!(run.status.code(), Some(2), "a bad header list is a usage error:\n{}", run.stderr);
        assert!(run.stderr.contains("OTEL_EXPORTER_OTLP_HEADERS"), "the message names the variable:\n{}", run.stderr);
        assert!(run.stderr.contains(names), "the message names the entry or key ({names}):\n{}", run.stderr);
    }
    // 5. The console exporter prints every span: still no header.
    let run = ctx
        .sim(&strs(&args()))
        .label("sim-console")
        .otlp(Protocol::Grpc, &closed)
        .env("MEGATRON_OTEL_EXPORTER", "console")
        .run(RUN_LIMIT);
    run.assert_success("the simulator with the console exporter");
    assert!(run.stdout.contains(taxonomy::STARTUP.name), "console spans on stdout");
    // The scan: every log, telemetry file and sink record of this test.
    ctx.finish();
}

#[test]
fn sensitive_attribute_keys_are_redacted_in_exported_spans() {
    use lens_fallbacks::config::LensConfig;
    use lens_fallbacks::{
        DEFAULT_REDACT_KEYS, KeyValue, REDACTED, RankContext, SetupOptions, SpanGroup, managed_span, setup_telemetry,
    };

    let mut ctx = Ctx::new("redaction");
    let password = format!("pw-{}", canary_token());
    let prompt = "a user's private prompt 7f3a";
    ctx.add_secret(&password);
    ctx.add_secret(prompt);
    let sink = Sink::start_with(
        &ctx,
        SinkOptions { required_token: Some(canary_token().to_string()), ..SinkOptions::default() },
    );
    let env: HashMap<String, String> = [
        ("NEMO_LENS_ENABLED", "1".to_string()),
        ("NEMO_LENS_RUN_ID", "e2e-redaction".to_string()),
        ("NEMO_LENS_SPAN_GROUPS", "all".to_string()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_string()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint(Protocol::HttpProtobuf)),
        ("OTEL_EXPORTER_OTLP_HEADERS", canary_headers()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = LensConfig::from_env(&env, "NEMO_LENS", None, &lens_fallbacks::groups::LENS_CATALOG)
        .expect("a valid configuration");
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), SetupOptions::new().with_env(env))
        .expect("telemetry set up");
    {
        let span = managed_span(SpanGroup::JOB, "e2e.redaction", []);
        span.set_attributes_redacted(
            [
                Some(KeyValue::new("password", password.clone())),
                Some(KeyValue::new("prompt", prompt)),
                Some(KeyValue::new("model", "gpt-e2e")),
                None,
            ],
            DEFAULT_REDACT_KEYS,
        );
    }
    let report = telemetry.shutdown(Duration::from_secs(10));
    let records = sink
        .wait_for("the redaction span", Duration::from_secs(20), |r| r.spans_named("e2e.redaction").next().is_some());
    let span = records.spans_named("e2e.redaction").next().unwrap();
    assert_eq!(span.attributes["password"], REDACTED, "{report:?}");
    assert_eq!(span.attributes["prompt"], REDACTED);
    assert_eq!(span.attributes["model"], "gpt-e2e", "other keys are kept");
    sink.stop();
    // The password and the prompt are in no record of the sink.
    ctx.finish();
}
