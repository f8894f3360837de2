//! Setup and the telemetry handle as a framework uses them: validation
//! before anything is installed, lifetimes, a hanging collector, the incoming
//! context and explicit exporter settings (the original's `handle` tests and
//! the strategy tests that go through setup).
//!
//! Setup owns process-global state (the active lifetime, the gate, the
//! tracer slot), so this file is its own test binary and every test takes
//! [`serial`] first.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::config::{ExporterKind, LensConfig, OtlpEndpoint, OtlpProtocol, Signal};
use lens_fallbacks::groups::{GroupSet, LENS_CATALOG, SpanGroup, is_span_group_enabled};
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::setup::{SetupError, SetupOptions, Telemetry, setup_telemetry};
use lens_fallbacks::span::managed_span;
use opentelemetry::Value;
use opentelemetry_sdk::metrics::InMemoryMetricExporter;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn enabled(spec: &str) -> LensConfig {
    LensConfig { enabled: true, span_groups: spec.into(), rank_strategy: "all_ranks".into(), ..LensConfig::default() }
}

fn rank(rank: u32, world_size: u32) -> RankContext {
    RankContext { rank, world_size, local_rank: rank, node_rank: None }
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn setup_with(config: &LensConfig, ctx: RankContext, spans: &KeepingSpanExporter) -> Telemetry {
    let options = SetupOptions::new().with_span_exporter(spans.clone()).with_env(env(&[("NEMO_LENS_RUN_ID", "run-a")]));
    setup_telemetry(config, &ctx, Vec::new(), options).expect("setup")
}

#[test]
fn disabled_config_gives_an_inert_handle() {
    let _serial = serial();
    let spans = KeepingSpanExporter::default();
    let telemetry = setup_with(&LensConfig::default(), RankContext::SINGLE, &spans);
    assert!(!telemetry.is_enabled());
    assert!(!telemetry.is_exporting());
    assert_eq!(telemetry.enabled_groups(), GroupSet::EMPTY);
    assert!(!is_span_group_enabled(SpanGroup::JOB));
    // The tracer and meter exist and do nothing.
    let counter = telemetry.meter().u64_counter("unused").build();
    counter.add(1, &[]);
    drop(managed_span(SpanGroup::JOB, "not.recorded", []));
    let report = telemetry.shutdown(Duration::from_secs(1));
    assert!(!report.performed);
    assert!(spans.names().is_empty());
    // A disabled setup can repeat freely.
    let again = setup_telemetry(&LensConfig::default(), &RankContext::SINGLE, Vec::new(), SetupOptions::new());
    assert!(again.is_ok());
}

#[test]
fn an_exporting_rank_records_its_groups_and_exports_on_shutdown() {
    let _serial = serial();
    let spans = KeepingSpanExporter::default();
    let telemetry = setup_with(&enabled("default"), rank(0, 1), &spans);
    assert!(telemetry.is_exporting());
    assert_eq!(telemetry.enabled_groups(), LENS_CATALOG.resolve("default").unwrap());
    assert!(is_span_group_enabled(SpanGroup::JOB));
    assert!(!is_span_group_enabled(SpanGroup::STEP));
    assert_eq!(telemetry.run_id(), "run-a");
    {
        let _job = managed_span(SpanGroup::JOB, "lens.test.job", [KeyValue::new("k", 1_i64)]);
        let _step = managed_span(SpanGroup::STEP, "lens.test.step", []);
    }
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.performed && report.completed(), "{report:?}");
    assert_eq!(spans.names(), ["lens.test.job"]);
    assert_eq!(report.spans.exported, 1);
    // The gate is closed again.
    assert!(!is_span_group_enabled(SpanGroup::JOB));
}

#[test]
fn a_rank_that_does_not_export_records_nothing_even_with_all() {
    let _serial = serial();
    let spans = KeepingSpanExporter::default();
    // single_rank with the default -1: only the last rank exports.
    let config = LensConfig { rank_strategy: "single_rank".into(), ..enabled("all") };
    let telemetry = setup_with(&config, rank(0, 2), &spans);
    assert!(telemetry.is_enabled());
    assert!(!telemetry.is_exporting());
    assert_eq!(telemetry.enabled_groups(), GroupSet::EMPTY);
    drop(managed_span(SpanGroup::JOB, "not.recorded", []));
    telemetry.shutdown(Duration::from_secs(1));
    assert!(spans.names().is_empty());

    let last = setup_with(&config, rank(1, 2), &spans);
    assert!(last.is_exporting());
    assert_eq!(last.enabled_groups(), LENS_CATALOG.all_groups());
}

#[test]
fn a_second_setup_while_active_is_an_error_and_setup_after_shutdown_exports_again() {
    let _serial = serial();
    let first_spans = KeepingSpanExporter::default();
    let first = setup_with(&enabled("default"), rank(0, 1), &first_spans);
    let second = setup_telemetry(&enabled("default"), &rank(0, 1), Vec::new(), SetupOptions::new());
    assert!(matches!(second, Err(SetupError::AlreadyActive)), "{second:?}");
    assert!(second.unwrap_err().to_string().contains("already been initialised"));
    // A disabled setup is still allowed and does not close the active gate.
    let disabled = setup_telemetry(&LensConfig::default(), &rank(0, 1), Vec::new(), SetupOptions::new()).unwrap();
    assert!(is_span_group_enabled(SpanGroup::JOB));
    drop(disabled);
    drop(managed_span(SpanGroup::JOB, "first.lifetime", []));
    assert!(first.shutdown(Duration::from_secs(5)).performed);
    // Idempotent: the second shutdown does nothing.
    assert!(!first.shutdown(Duration::from_secs(5)).performed);

    let second_spans = KeepingSpanExporter::default();
    let second = setup_with(&enabled("default"), rank(0, 1), &second_spans);
    assert!(second.lifetime_index() > first.lifetime_index());
    drop(managed_span(SpanGroup::JOB, "second.lifetime", []));
    second.shutdown(Duration::from_secs(5));
    assert_eq!(first_spans.names(), ["first.lifetime"]);
    assert_eq!(second_spans.names(), ["second.lifetime"]);
}

#[test]
fn dropping_the_handle_shuts_down() {
    let _serial = serial();
    let spans = KeepingSpanExporter::default();
    let telemetry = setup_with(&enabled("default"), rank(0, 1), &spans);
    drop(managed_span(SpanGroup::JOB, "ended.before.drop", []));
    drop(telemetry);
    assert_eq!(spans.names(), ["ended.before.drop"]);
    // The lifetime is over: a new one can start.
    let next = setup_with(&enabled("default"), rank(0, 1), &KeepingSpanExporter::default());
    next.shutdown(Duration::from_secs(1));
}

#[test]
fn spans_still_open_at_shutdown_are_exported_marked_truncated() {
    let _serial = serial();
    let spans = KeepingSpanExporter::default();
    let telemetry = setup_with(&enabled("default"), rank(0, 1), &spans);
    let outer = managed_span(SpanGroup::JOB, "outer.open", []);
    let inner = managed_span(SpanGroup::CHECKPOINT, "inner.open", []);
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert_eq!(report.truncated_spans, 2);
    let exported = spans.get_finished_spans().unwrap();
    let names: Vec<_> = exported.iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["inner.open", "outer.open"], "innermost first");
    for span in &exported {
        assert!(span.attributes.iter().any(|kv| kv.key.as_str() == "nemo.span.truncated"), "{span:?}");
    }
    // Ending them later exports nothing more.
    drop(inner);
    drop(outer);
    assert_eq!(spans.names().len(), 2);
}

#[test]
fn a_registered_or_per_call_strategy_decides_who_exports() {
    let _serial = serial();
    lens_fallbacks::strategies::register_rank_strategy("only_rank_two", |_, ctx| ctx.rank == 2, true).unwrap();
    let config = LensConfig { rank_strategy: "only_rank_two".into(), ..enabled("default") };
    let on_two = setup_with(&config, rank(2, 4), &KeepingSpanExporter::default());
    assert!(on_two.is_exporting());
    on_two.shutdown(Duration::from_secs(1));
    let on_zero = setup_with(&config, rank(0, 4), &KeepingSpanExporter::default());
    assert!(!on_zero.is_exporting());
    on_zero.shutdown(Duration::from_secs(1));
    lens_fallbacks::strategies::unregister_rank_strategy("only_rank_two").unwrap();

    // The per-call override bypasses the registry.
    let options = SetupOptions::new()
        .with_span_exporter(KeepingSpanExporter::default())
        .with_rank_strategy(|_, ctx| ctx.rank == 0);
    let overridden = setup_telemetry(&enabled("default"), &rank(0, 4), Vec::new(), options).unwrap();
    assert!(overridden.is_exporting());
    overridden.shutdown(Duration::from_secs(1));
}

#[test]
fn bad_configuration_fails_before_anything_is_created_on_every_rank() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("lens-setup-bad-{}", std::process::id()));
    let config = LensConfig {
        span_groups: "default,setp".into(),
        exporter: Some(ExporterKind::File),
        file_dir: Some(dir.clone()),
        ..enabled("default")
    };
    // Rank 0 of 2 does not export under single_rank, and still fails.
    for ctx in [rank(0, 2), rank(1, 2)] {
        let config = LensConfig { rank_strategy: "single_rank".into(), ..config.clone() };
        let err = setup_telemetry(&config, &ctx, Vec::new(), SetupOptions::new()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("setp") && text.contains("did you mean 'step'"), "{text}");
    }
    assert!(!dir.exists(), "nothing may be written before validation passes");
    assert!(!is_span_group_enabled(SpanGroup::JOB));
    // The failed setups did not claim the lifetime.
    setup_with(&enabled("default"), rank(0, 1), &KeepingSpanExporter::default()).shutdown(Duration::from_secs(1));
}

#[test]
fn lazy_resource_attributes_are_evaluated_only_on_exporting_ranks() {
    let _serial = serial();
    let calls = Arc::new(Mutex::new(0));
    let options = |calls: &Arc<Mutex<i32>>| {
        let calls = Arc::clone(calls);
        SetupOptions::new().with_span_exporter(KeepingSpanExporter::default()).with_lazy_resource(move || {
            *calls.lock().unwrap() += 1;
            vec![KeyValue::new("dl.gpu.name", "probed")]
        })
    };
    let config = LensConfig { rank_strategy: "single_rank".into(), ..enabled("default") };
    let quiet = setup_telemetry(&config, &rank(0, 2), Vec::new(), options(&calls)).unwrap();
    quiet.shutdown(Duration::from_secs(1));
    assert_eq!(*calls.lock().unwrap(), 0);
    let exporting = setup_telemetry(&config, &rank(1, 2), Vec::new(), options(&calls)).unwrap();
    exporting.shutdown(Duration::from_secs(1));
    assert_eq!(*calls.lock().unwrap(), 1);
}

#[test]
fn metrics_carry_the_run_identity_and_caller_attributes_on_their_resource() {
    let _serial = serial();
    let metrics = InMemoryMetricExporter::default();
    let options = SetupOptions::new()
        .with_span_exporter(KeepingSpanExporter::default())
        .with_metric_exporter(metrics.clone())
        .with_env(env(&[("NEMO_LENS_RUN_ID", "run-r"), ("SLURM_JOB_ID", "77")]));
    let caller = vec![KeyValue::new("megatron.num_layers", 4_i64), KeyValue::new("slurm.job.id", "from-caller")];
    let telemetry = setup_telemetry(&enabled("default"), &rank(3, 4), caller, options).unwrap();
    let counter = telemetry.meter().u64_counter("lens.test.counter").build();
    counter.add(5, &[]);
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.metrics.points_exported >= 1, "{report:?}");
    let finished = metrics.get_finished_metrics().unwrap();
    let resource = finished.last().expect("one export").resource();
    let get = |key: &str| resource.get(&opentelemetry::Key::from(key.to_string()));
    assert_eq!(get("nemo.run.id"), Some(Value::from("run-r")));
    assert_eq!(get("service.instance.id"), Some(Value::from("run-r-rank3")));
    assert_eq!(get("dl.rank"), Some(Value::I64(3)));
    assert_eq!(get("megatron.num_layers"), Some(Value::I64(4)));
    // Caller-supplied attributes win over detected ones.
    assert_eq!(get("slurm.job.id"), Some(Value::from("from-caller")));
    assert_eq!(get("telemetry.sdk.name"), Some(Value::from("opentelemetry")));
}

#[test]
fn the_incoming_traceparent_is_honoured() {
    let _serial = serial();
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let options = SetupOptions::new()
        .with_span_exporter(KeepingSpanExporter::default())
        .with_env(env(&[("TRACEPARENT", traceparent), ("NEMO_LENS_RUN_ID", "r")]));
    let telemetry = setup_telemetry(&enabled("default"), &rank(0, 1), Vec::new(), options).unwrap();
    let incoming = telemetry.incoming_context().expect("incoming context");
    assert_eq!(incoming.trace_id_hex().as_deref(), Some("0af7651916cd43dd8448eb211c80319c"));
    telemetry.shutdown(Duration::from_secs(1));
}

/// A loopback listener that accepts connections and never answers.
fn hanging_collector() -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let mut held = Vec::new();
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok((stream, _)) = listener.accept() {
                held.push(stream);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    (format!("http://{address}"), handle)
}

#[test]
fn a_hanging_collector_neither_slows_steps_nor_blocks_shutdown() {
    let _serial = serial();
    let (endpoint, _collector) = hanging_collector();
    let mut config = enabled("all");
    config.export_retry_window = Duration::from_secs(2);
    config.otel.metric_export_interval = Duration::from_millis(100);
    for signal in [Signal::Traces, Signal::Metrics] {
        let otlp = config.otel.otlp_mut(signal);
        otlp.protocol = OtlpProtocol::HttpProtobuf;
        otlp.endpoint = Some(OtlpEndpoint { url: endpoint.clone(), signal_specific: false });
        otlp.timeout = Duration::from_millis(500);
    }
    config.otel.batch.max_export_batch_size = 16;
    config.otel.batch.schedule_delay = Duration::from_millis(5);
    let options = SetupOptions::new().with_env(env(&[("NEMO_LENS_RUN_ID", "hang")]));
    let telemetry = setup_telemetry(&config, &rank(0, 1), Vec::new(), options).unwrap();
    let gauge = telemetry.meter().f64_gauge("lens.test.loss").build();
    let mut slowest = Duration::ZERO;
    for step in 0..200_i64 {
        let started = Instant::now();
        {
            let _iteration = managed_span(SpanGroup::STEP, "lens.test.iteration", [KeyValue::new("i", step)]);
            let _inner = managed_span(SpanGroup::FORWARD_BACKWARD, "lens.test.fb", []);
            gauge.record(1.0 / (step + 1) as f64, &[]);
        }
        slowest = slowest.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(2));
    }
    // A generous bound, far above a normal step (tens of microseconds).
    assert!(slowest < Duration::from_millis(250), "a step waited on the network: {slowest:?}");
    let timeout = Duration::from_secs(1);
    let started = Instant::now();
    let report = telemetry.shutdown(timeout);
    let took = started.elapsed();
    assert!(took < timeout + Duration::from_millis(750), "shutdown took {took:?}");
    assert!(report.performed);
    assert_eq!(report.spans.exported, 0, "{report}");
    assert!(report.spans.export_errors > 0 || !report.completed(), "{report}");
}

#[test]
fn a_hung_trace_collector_leaves_the_final_metric_collection_the_whole_shutdown_budget() {
    let _serial = serial();
    let (endpoint, _collector) = hanging_collector();
    let dir = std::env::temp_dir().join(format!("lens-setup-hung-traces-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = LensConfig { file_dir: Some(dir.clone()), ..enabled("all") };
    config.otel.metrics_exporter = Some(ExporterKind::File);
    let traces = config.otel.otlp_mut(Signal::Traces);
    traces.protocol = OtlpProtocol::HttpProtobuf;
    traces.endpoint = Some(OtlpEndpoint { url: endpoint, signal_specific: true });
    // Each export attempt outlasts the shutdown: the trace step takes all of it.
    traces.timeout = Duration::from_secs(10);
    config.otel.batch.schedule_delay = Duration::from_millis(5);
    let options = SetupOptions::new().with_env(env(&[("NEMO_LENS_RUN_ID", "hung-traces")]));
    let telemetry = setup_telemetry(&config, &rank(0, 1), Vec::new(), options).unwrap();
    for step in 0..20_i64 {
        let _iteration = managed_span(SpanGroup::STEP, "lens.test.iteration", [KeyValue::new("i", step)]);
    }
    // Let the spans' export start and hang before shutdown begins.
    std::thread::sleep(Duration::from_millis(200));
    telemetry.meter().u64_counter("hung.traces.steps").build().add(20, &[]);
    let report = telemetry.shutdown(Duration::from_millis(1500));
    let written = std::fs::read_to_string(dir.join("metrics-rank0.jsonl")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(report.unfinished, ["shut down spans"], "{report}");
    assert_eq!(report.metrics.exports, 1, "{report}");
    assert_eq!(written.matches("hung.traces.steps").count(), 1, "{written}");
    // The hung spans are reported, not lost silently.
    assert_eq!((report.spans.exported, report.spans.dropped_at_shutdown), (0, 20), "{report}");
}

#[test]
fn a_header_token_never_appears_in_debug_errors_or_reports() {
    let _serial = serial();
    let token = "s3cr3t-t0k3n-value";
    let env_map = env(&[
        ("NEMO_LENS_ENABLED", "1"),
        ("OTEL_EXPORTER_OTLP_HEADERS", &format!("Authorization=Bearer {token}")),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
        ("NEMO_LENS_EXPORT_RETRY_WINDOW_MS", "200"),
    ]);
    let config = LensConfig::from_env(&env_map, "NEMO_LENS", None, &LENS_CATALOG).unwrap();
    let telemetry = setup_telemetry(&config, &rank(0, 1), Vec::new(), SetupOptions::new().with_env(env_map)).unwrap();
    drop(managed_span(SpanGroup::JOB, "lens.test.secret", []));
    let report = telemetry.shutdown(Duration::from_secs(2));
    let mut seen = format!("{config:?}\n{config}\n{telemetry:?}\n{report}\n{report:?}");
    seen.push_str(&telemetry.destinations().join("\n"));
    assert!(!seen.contains(token), "{seen}");
    assert!(seen.contains("Authorization"), "the header name may show: {seen}");
}

/// Runs a scenario in a child process and returns what it wrote on standard
/// error: the rate-limited warnings go there.
#[test]
fn export_failures_are_warned_about_without_the_token() {
    const CHILD: &str = "LENS_SETUP_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let _serial = serial();
        let config = LensConfig::from_env(&lens_fallbacks::env::ProcessEnv, "NEMO_LENS", None, &LENS_CATALOG).unwrap();
        let telemetry = setup_telemetry(&config, &rank(0, 1), Vec::new(), SetupOptions::new()).unwrap();
        for _ in 0..10 {
            drop(managed_span(SpanGroup::JOB, "lens.test.refused", []));
        }
        let report = telemetry.shutdown(Duration::from_secs(3));
        let mut out = std::io::stdout();
        writeln!(out, "REPORT {report}").unwrap();
        return;
    }
    // A port nothing listens on: connection refused.
    let refused = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let token = "Zz-very-secret-Zz";
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "export_failures_are_warned_about_without_the_token", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("NEMO_LENS_ENABLED", "1")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{refused}"))
        .env("OTEL_EXPORTER_OTLP_HEADERS", format!("x-api-key={token}"))
        .env("NEMO_LENS_EXPORT_RETRY_WINDOW_MS", "300")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .output()
        .unwrap();
    let mut text = String::new();
    text.push_str(&String::from_utf8_lossy(&output.stdout));
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(!text.contains(token), "{text}");
    assert!(text.contains("REPORT spans: 0 exported, 10 dropped"), "{text}");
    assert!(text.contains("lens: warning:"), "{text}");
}

#[test]
fn a_short_run_writes_its_final_metric_collection_once() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("lens-setup-final-collection-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = LensConfig {
        exporter: Some(ExporterKind::File),
        file_dir: Some(dir.clone()),
        traces_enabled: false,
        ..enabled("default")
    };
    let options = SetupOptions::new().with_env(env(&[("NEMO_LENS_RUN_ID", "run-final")]));
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup");
    telemetry.meter().u64_counter("short.run.steps").build().add(3, &[]);
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.completed(), "{report}");
    let text = std::fs::read_to_string(dir.join("metrics-rank0.jsonl")).expect("metrics file");
    let _ = std::fs::remove_dir_all(&dir);
    // The interval (10 s) never elapsed: shutdown's collection is the only one.
    assert_eq!(text.lines().count(), 1, "one collection expected, the file holds:\n{text}");
    assert_eq!(text.matches("short.run.steps").count(), 1, "{text}");
    assert_eq!(report.metrics.exports, 1, "{report}");
}

/// A Prometheus port in use at setup is said to wait for it, in the
/// startup line's destinations; once the endpoint has it, the handle's
/// destinations and the shutdown report no longer say so (they did to the
/// end).
#[cfg(feature = "prometheus")]
#[test]
fn a_prometheus_port_bound_after_setup_is_no_longer_said_to_be_in_use() {
    let _serial = serial();
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let mut config = enabled("default");
    config.otel.metrics_exporter = Some(ExporterKind::Prometheus);
    config.otel.traces_exporter = Some(ExporterKind::Console);
    config.otel.prometheus_host = "127.0.0.1".into();
    config.otel.prometheus_port = port;
    config.prometheus_linger = Duration::ZERO;
    let options = SetupOptions::new().with_env(env(&[("NEMO_LENS_RUN_ID", "prom-in-use")]));
    let telemetry = setup_telemetry(&config, &rank(0, 1), Vec::new(), options).unwrap();
    let waiting = "(the port is in use: served once it is free)";
    assert!(telemetry.destinations().iter().any(|d| d.ends_with(waiting)), "{:?}", telemetry.destinations());
    drop(holder);
    // Tried again every second: bound within a few.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let served = format!("metrics: Prometheus http://127.0.0.1:{port}/metrics");
    assert!(telemetry.destinations().contains(&served), "{:?}", telemetry.destinations());
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.destinations.contains(&served), "{report}");
    assert!(!report.to_string().contains(waiting), "{report}");
}
