//! The bridge under real `tracing`-instrumented crates: an axum server with
//! tower-http's trace layer and a reqwest client under `#[instrument]`, in
//! one trace with lens's spans; and real OTLP exports (spans, metrics and log
//! records, over gRPC and HTTP, and an export polled on the job's own thread)
//! whose own traffic (hyper, h2, tower, tonic, reqwest) records nothing, as
//! spans, span events or log records, even when the rules enable those
//! crates: lens marks its export path ([`lens_fallbacks::export_path`]).
//!
//! The active tracer, the group gate and the global subscriber are
//! process-global, so the tests take a lock and share one subscriber. The
//! export tests run against an OTLP receiver here. Run with
//! `cargo test -p lens-tracing --features testing --test http`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::Request;
use lens_fallbacks::config::LensConfig;
use lens_fallbacks::groups::{GroupSet, LENS_CATALOG, SpanGroup};
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::active;
use lens_fallbacks::propagation::{extract_context, inject_context};
use lens_fallbacks::setup::{SetupOptions, setup_telemetry};
use lens_fallbacks::span::managed_span;
use lens_fallbacks::testing::set_enabled_span_groups;
use lens_fallbacks::tracing_rules::TracingRules;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use prost::Message as _;
use tower_http::trace::{DefaultMakeSpan, MakeSpan as _, TraceLayer};
use tracing_subscriber::layer::SubscriberExt as _;

/// One rule set for the whole process: the HTTP test's crates in `evaluate`,
/// the exporter's crates and the export tests' own target in `job`; each
/// test enables only its group. Rules have no level: with the bridge alone
/// in the subscriber every level is on, `TRACE` included.
const RULES: &str = "tower_http=evaluate, http_test=evaluate, \
                     h2=job, tower=job, tonic=job, hyper_util=job, hyper=job, reqwest=job, export_test=job";

/// The target of the export tests' own events, which the log pipeline
/// must carry.
const EXPORT_TEST_TARGET: &str = "export_test";

/// The names of the crates whose spans the exporter's traffic would make.
const EXPORTER_CRATES: &[&str] = &["h2", "tower", "tonic", "hyper", "reqwest"];

static LOCK: Mutex<()> = Mutex::new(());

/// Takes the lock and, once per process, installs the bridge as the global
/// subscriber (so that every thread, the exporter's included, sees it).
fn serial() -> MutexGuard<'static, ()> {
    static SUBSCRIBER: OnceLock<()> = OnceLock::new();
    let lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    SUBSCRIBER.get_or_init(|| {
        let rules = TracingRules::parse(RULES, &LENS_CATALOG).unwrap();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(lens_tracing::layer(rules)))
            .expect("no other global subscriber");
    });
    lock
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Serves `router` on 127.0.0.1 from its own thread until the returned flag
/// is set (or 30 s pass). A `quiet` server runs without a subscriber: an
/// OTLP receiver's own h2 and hyper spans (not the exporter's) stay out of
/// what it receives.
fn serve(router: axum::Router, quiet: bool) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("test-server".into())
        .spawn(move || {
            let dispatch =
                if quiet { tracing::Dispatch::none() } else { tracing::dispatcher::get_default(Clone::clone) };
            let _default = tracing::dispatcher::set_default(&dispatch);
            runtime().block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let until = Instant::now() + Duration::from_secs(30);
                let shutdown = async move {
                    while !stopped.load(Ordering::Relaxed) && Instant::now() < until {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                axum::serve(listener, router).with_graceful_shutdown(shutdown).await.unwrap();
            });
        })
        .unwrap();
    (address, stop)
}

fn headers_of(request: &Request<Body>) -> HashMap<String, String> {
    request
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .collect()
}

#[tracing::instrument(target = "http_test::server")]
fn render(item: u64) -> String {
    format!("item {item}")
}

async fn handler() -> String {
    // No await while the lens span is current.
    let _lens = managed_span(SpanGroup::EVALUATE, "lens.handler", []);
    render(7)
}

/// A reqwest client; lens-core builds reqwest without a TLS provider, so the
/// test brings a (never used, plain HTTP) TLS configuration.
fn client() -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    reqwest::Client::builder().tls_backend_preconfigured(tls).build().unwrap()
}

/// Removes the test's tracer and groups even when the test fails.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        set_enabled_span_groups(GroupSet::EMPTY);
        active::uninstall();
    }
}

#[tracing::instrument(target = "http_test::client", skip(runtime))]
fn call(runtime: &tokio::runtime::Runtime, url: &str) -> String {
    let _lens = managed_span(SpanGroup::EVALUATE, "lens.client", []);
    let mut headers = Vec::new();
    inject_context(&mut headers);
    let client = client();
    let mut request = client.get(url).timeout(Duration::from_secs(10));
    for (name, value) in headers {
        request = request.header(name, value);
    }
    // The client's own runtime runs only this request on this thread, so the
    // lens span stays current for it.
    runtime.block_on(async { request.send().await.unwrap().text().await.unwrap() })
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name} in {:?}", names(spans)))
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

#[test]
fn an_axum_server_and_an_instrumented_client_nest_with_lens_spans_in_one_trace() {
    let _serial = serial();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    active::install(provider.tracer("lens-tracing-http-test")).expect("no tracer is installed");
    let installed = Installed;
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::EVALUATE]));

    let trace_layer = TraceLayer::new_for_http().make_span_with(|request: &Request<Body>| {
        let span = DefaultMakeSpan::new().make_span(request);
        lens_tracing::set_parent(&span, &extract_context(&headers_of(request)));
        span
    });
    let router = axum::Router::new().route("/work", axum::routing::get(handler)).layer(trace_layer);
    let (address, stop) = serve(router, false);
    let body = call(&runtime(), &format!("http://{address}/work"));
    assert_eq!(body, "item 7");

    // The server's request span ends when the response body is done, which
    // may be just after the client has it.
    let until = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = exporter.get_finished_spans().unwrap();
        if spans.iter().any(|s| s.name == "request") || Instant::now() > until {
            break spans;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    stop.store(true, Ordering::Relaxed);
    drop(installed);

    let client = named(&spans, "call");
    let lens_client = named(&spans, "lens.client");
    let request = named(&spans, "request");
    let lens_handler = named(&spans, "lens.handler");
    let render = named(&spans, "render");
    assert_eq!(
        lens_client.parent_span_id,
        client.span_context.span_id(),
        "client: lens span in the #[instrument] span"
    );
    assert_eq!(request.span_context.trace_id(), client.span_context.trace_id(), "the server joined the client's trace");
    assert_eq!(request.parent_span_id, lens_client.span_context.span_id(), "tower-http's span: child of the client's");
    assert_eq!(lens_handler.parent_span_id, request.span_context.span_id(), "handler: lens span in tower-http's span");
    assert_eq!(render.parent_span_id, lens_handler.span_context.span_id(), "#[instrument] span in the lens span");
    assert!(spans.iter().all(|s| s.span_context.trace_id() == client.span_context.trace_id()), "{:?}", names(&spans));
}

/// What the receiver got: span names, the number of metric export requests
/// and their metric names, and each log record as (scope, body); the scope
/// of a record with a target is its target.
#[derive(Clone, Debug, Default)]
struct Received {
    spans: Vec<String>,
    metric_exports: usize,
    metrics: Vec<String>,
    logs: Vec<(String, String)>,
}

/// The three OTLP signals, by the gRPC service and HTTP path they arrive on.
#[derive(Clone, Copy)]
enum Signal {
    Traces,
    Metrics,
    Logs,
}

impl Signal {
    const ALL: [Signal; 3] = [Signal::Traces, Signal::Metrics, Signal::Logs];

    fn grpc_path(self) -> &'static str {
        match self {
            Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        }
    }

    fn http_path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
            Signal::Logs => "/v1/logs",
        }
    }

    /// Keeps what an encoded export request of this signal holds.
    fn keep(self, received: &Mutex<Received>, message: &[u8]) {
        let mut received = received.lock().unwrap();
        match self {
            Signal::Traces => {
                let Ok(request) = ExportTraceServiceRequest::decode(message) else { return };
                let spans = request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans);
                received.spans.extend(spans.map(|span| span.name));
            }
            Signal::Metrics => {
                let Ok(request) = ExportMetricsServiceRequest::decode(message) else { return };
                received.metric_exports += 1;
                let metrics =
                    request.resource_metrics.into_iter().flat_map(|r| r.scope_metrics).flat_map(|s| s.metrics);
                received.metrics.extend(metrics.map(|metric| metric.name));
            }
            Signal::Logs => {
                let Ok(request) = ExportLogsServiceRequest::decode(message) else { return };
                for scope_logs in request.resource_logs.into_iter().flat_map(|r| r.scope_logs) {
                    let scope = scope_logs.scope.map(|scope| scope.name).unwrap_or_default();
                    for record in scope_logs.log_records {
                        let body = match record.body.and_then(|body| body.value) {
                            Some(any_value::Value::StringValue(body)) => body,
                            other => format!("{other:?}"),
                        };
                        received.logs.push((scope.clone(), body));
                    }
                }
            }
        }
    }
}

/// An OTLP receiver on 127.0.0.1 for every signal over gRPC (unary,
/// uncompressed: the message after the 5-byte gRPC prefix; the answer is an
/// empty message and `grpc-status: 0`) and over HTTP (the answer is an
/// empty body), serving until the returned flag is set.
fn receiver(received: &Arc<Mutex<Received>>) -> (SocketAddr, Arc<AtomicBool>) {
    let mut router = axum::Router::new();
    for signal in Signal::ALL {
        let (grpc, http) = (Arc::clone(received), Arc::clone(received));
        router = router
            .route(
                signal.grpc_path(),
                axum::routing::post(move |body: Bytes| async move {
                    if let Some(message) = body.get(5..) {
                        signal.keep(&grpc, message);
                    }
                    let mut response = axum::response::Response::new(Body::new(GrpcOk(0)));
                    response
                        .headers_mut()
                        .insert("content-type", axum::http::HeaderValue::from_static("application/grpc"));
                    response
                }),
            )
            .route(
                signal.http_path(),
                axum::routing::post(move |body: Bytes| async move {
                    signal.keep(&http, &body);
                    Vec::<u8>::new()
                }),
            );
    }
    serve(router.fallback(|| async { Vec::<u8>::new() }), true)
}

/// The environment of an exporting lifetime (the `job` group) that sends over
/// `protocol` to `address`, with `extra` variables.
fn export_env(address: SocketAddr, protocol: &str, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let endpoint = format!("http://{address}");
    [
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_SPAN_GROUPS", "job"),
        ("NEMO_LENS_RUN_ID", "export-path"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

/// The body of a successful unary gRPC response: an empty message, then the
/// trailers.
struct GrpcOk(u8);

impl http_body::Body for GrpcOk {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0 += 1;
        std::task::Poll::Ready(match self.0 {
            1 => Some(Ok(http_body::Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0])))),
            2 => {
                let mut trailers = axum::http::HeaderMap::new();
                trailers.insert("grpc-status", axum::http::HeaderValue::from_static("0"));
                Some(Ok(http_body::Frame::trailers(trailers)))
            }
            _ => None,
        })
    }
}

/// Exports 50 lens spans over `protocol` (`grpc` or `http/protobuf`) to a receiver here, with rules that
/// enable every crate of the export path, and checks that the receiver got
/// exactly those 50.
fn export_records_none_of_its_own_traffic(protocol: &str) {
    let _serial = serial();
    let received = Arc::new(Mutex::new(Received::default()));
    let (address, stop) = receiver(&received);
    let env = export_env(address, protocol, &[("OTEL_METRICS_EXPORTER", "none"), ("OTEL_LOGS_EXPORTER", "none")]);
    let config = LensConfig::from_env(&env, "NEMO_LENS", None, &LENS_CATALOG).unwrap();
    let telemetry =
        setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), SetupOptions::new().with_env(env)).unwrap();
    assert!(telemetry.enabled_groups().contains(SpanGroup::JOB));

    const FLUSHES: usize = 5;
    const PER_FLUSH: usize = 10;
    for flush in 0..FLUSHES {
        for i in 0..PER_FLUSH {
            drop(managed_span(SpanGroup::JOB, format!("lens.test.{flush}.{i}"), []));
        }
        let report = telemetry.force_flush(Duration::from_secs(5));
        assert!(report.completed(), "{protocol}: {report}");
    }
    let report = telemetry.shutdown(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);

    let received = received.lock().unwrap().spans.clone();
    let foreign: Vec<&String> = received.iter().filter(|name| !name.starts_with("lens.test.")).collect();
    assert!(foreign.is_empty(), "{protocol}: the export path recorded spans: {foreign:?}");
    assert_eq!(received.len(), FLUSHES * PER_FLUSH, "{protocol}: {report}");
    assert_eq!(report.spans.exported, (FLUSHES * PER_FLUSH) as u64, "{protocol}: {report}");
    assert!(!received.iter().any(|name| EXPORTER_CRATES.iter().any(|krate| name.contains(krate))), "{received:?}");
}

/// Over gRPC, because that is the path with `tracing` spans: tonic, tower,
/// h2 and hyper_util make hundreds per export, on the `lens-otlp` runtime
/// that lens marks as its export path (without the mark this test fails
/// with them). The OTLP/HTTP exporter's reqwest and
/// hyper emit none with the features lens builds them with, so an HTTP run
/// could not fail.
#[test]
fn a_real_otlp_grpc_export_records_none_of_its_own_traffic_with_its_crates_enabled() {
    export_records_none_of_its_own_traffic("grpc");
}

/// Exports metrics every 50 ms, spans and log records over `protocol` to a
/// receiver here, with the log pipeline on and rules that enable every crate
/// of the export path at every level, for `ROUNDS` metric export rounds,
/// and checks that the receiver got only the test's own spans, metric and
/// log records: none from tonic, tower, h2, hyper_util, hyper or reqwest,
/// neither as spans nor as log records. The SDK's periodic reader polls the
/// metric export on its own thread (`OpenTelemetry.Metrics.PeriodicReader`),
/// where h2 reads the gRPC response and writes events (below the log
/// pipeline's `INFO`; lens marks the thread while it polls); the spans are
/// made on the `lens-otlp` runtime (without its mark, this test fails with
/// them).
fn metric_and_log_export_records_none_of_its_own_traffic(protocol: &str) {
    const ROUNDS: usize = 4;
    let _serial = serial();
    let received = Arc::new(Mutex::new(Received::default()));
    let (address, stop) = receiver(&received);
    let env = export_env(
        address,
        protocol,
        &[("NEMO_LENS_LOGS_ENABLED", "1"), ("OTEL_METRIC_EXPORT_INTERVAL", "50"), ("OTEL_LOGS_EXPORTER", "otlp")],
    );
    let config = LensConfig::from_env(&env, "NEMO_LENS", None, &LENS_CATALOG).unwrap();
    let telemetry =
        setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), SetupOptions::new().with_env(env)).unwrap();
    let rounds = telemetry.meter().u64_counter("export_test.rounds").build();
    for round in 0..ROUNDS {
        drop(managed_span(SpanGroup::JOB, format!("lens.test.{round}"), []));
        tracing::info!(target: EXPORT_TEST_TARGET, round, "round");
        rounds.add(1, &[]);
        // A metric export round (or more) before the next.
        let until = Instant::now() + Duration::from_secs(10);
        while received.lock().unwrap().metric_exports <= round && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let report = telemetry.shutdown(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);

    let received = received.lock().unwrap().clone();
    assert!(received.metric_exports >= ROUNDS, "{protocol}: {received:?} {report}");
    let foreign_metrics: Vec<&String> = received.metrics.iter().filter(|name| *name != "export_test.rounds").collect();
    assert!(foreign_metrics.is_empty(), "{protocol}: {foreign_metrics:?}");
    let mut spans = received.spans.clone();
    spans.sort();
    let expected: Vec<String> = (0..ROUNDS).map(|round| format!("lens.test.{round}")).collect();
    assert_eq!(spans, expected, "{protocol}: the export path recorded spans");
    let foreign_logs: Vec<&(String, String)> =
        received.logs.iter().filter(|(scope, _)| scope != EXPORT_TEST_TARGET).collect();
    assert!(foreign_logs.is_empty(), "{protocol}: the export path wrote log records: {foreign_logs:?}");
    assert_eq!(received.logs.len(), ROUNDS, "{protocol}: the test's own events are log records: {received:?}");
    assert!(received.logs.iter().all(|(_, body)| body == "round"), "{received:?}");
}

#[test]
fn metric_and_log_export_over_grpc_records_none_of_its_own_traffic_with_its_crates_enabled() {
    metric_and_log_export_records_none_of_its_own_traffic("grpc");
}

#[test]
fn metric_and_log_export_over_http_records_none_of_its_own_traffic_with_its_crates_enabled() {
    metric_and_log_export_records_none_of_its_own_traffic("http/protobuf");
}

/// An export polled on the job's own thread, inside a recorded span (a
/// tool that calls lens's OTLP exporter directly): tower's buffer writes
/// an event on the thread that polls the call, which would become an event
/// of the job's span; the exporter marks that thread while it polls, so the
/// span keeps only the job's own event.
#[test]
fn an_export_polled_on_the_job_s_thread_inside_its_span_adds_nothing_to_it() {
    use lens_fallbacks::config::{OtlpEndpoint, OtlpProtocol, OtlpSettings};
    use lens_fallbacks::otel::exporters::{block_on, build_otlp_span_exporter};
    use opentelemetry::trace::Tracer as _;
    use opentelemetry_sdk::trace::SpanExporter as _;

    let _serial = serial();
    let received = Arc::new(Mutex::new(Received::default()));
    let (address, stop) = receiver(&received);
    let recorded = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(recorded.clone()).build();
    active::install(provider.tracer("lens-tracing-export-test")).expect("no tracer is installed");
    let installed = Installed;
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::JOB]));
    // A finished span to export, from a provider of its own.
    let source = InMemorySpanExporter::default();
    let source_provider = SdkTracerProvider::builder().with_simple_exporter(source.clone()).build();
    source_provider.tracer("source").in_span("exported.span", |_| {});
    let batch = source.get_finished_spans().unwrap();
    let settings = OtlpSettings {
        endpoint: Some(OtlpEndpoint { url: format!("http://{address}"), signal_specific: false }),
        protocol: OtlpProtocol::Grpc,
        ..OtlpSettings::default()
    };
    let exporter = build_otlp_span_exporter(&settings).unwrap();

    let job = tracing::info_span!(target: EXPORT_TEST_TARGET, "job").entered();
    let exported = block_on(exporter.export(batch));
    tracing::info!(target: EXPORT_TEST_TARGET, "exported");
    drop(job);
    drop(exporter);
    stop.store(true, Ordering::Relaxed);
    drop(installed);

    assert!(exported.is_ok(), "{exported:?}");
    assert_eq!(received.lock().unwrap().spans, ["exported.span"]);
    let spans = recorded.get_finished_spans().unwrap();
    assert_eq!(names(&spans), ["job"], "the export recorded spans");
    let events: Vec<String> = named(&spans, "job").events.iter().map(|e| e.name.to_string()).collect();
    assert_eq!(events, ["exported"], "the export wrote events into the job's span");
}
