//! The exporters as a user sees them: console lines, OTLP/JSON files that a
//! Collector can replay, OTLP transports that give up within their timeout
//! and never leak a header value, and the Prometheus page a scraper reads
//! (served once a port in use is free; no linger for one never served).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use lens_core::config::{Headers, OtlpEndpoint, OtlpProtocol, OtlpSettings, Signal};
use lens_otel_runtime::exporters::{
    ConsoleMetricExporter, ConsoleSpanExporter, FileLimit, FileMetricExporter, FileSpanExporter, PrometheusExporter,
    PrometheusSettings, block_on, build_otlp_metric_exporter, build_otlp_span_exporter, file_path,
};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use serde_json::Value;

const TOKEN: &str = "tok-7f3a9c-very-secret";

/// A shared in-memory writer.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn resource() -> Resource {
    Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "megatron-lm"),
            KeyValue::new("nemo.run.id", "run-7"),
            KeyValue::new("service.instance.id", "run-7-rank3"),
        ])
        .build()
}

/// A fresh directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos();
    std::env::temp_dir().join(format!("lens-exporters-{tag}-{}-{nanos}", std::process::id()))
}

fn span_data(name: &'static str) -> SpanData {
    SpanData {
        span_context: SpanContext::new(
            TraceId::from(0x1234_u128),
            SpanId::from(0x42_u64),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: name.into(),
        start_time: SystemTime::now(),
        end_time: SystemTime::now(),
        attributes: vec![KeyValue::new("megatron.iteration", 5)],
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder("lens-test").build(),
    }
}

fn nested_spans(provider: &SdkTracerProvider) -> (String, String) {
    let tracer = provider.tracer("megatron");
    tracer.in_span("megatron.train", |cx| {
        use opentelemetry::trace::TraceContextExt as _;
        let outer = cx.span().span_context().clone();
        tracer.in_span("megatron.iteration", |_| {});
        tracer.in_span("megatron.checkpoint.save", |_| {});
        (outer.trace_id().to_string(), outer.span_id().to_string())
    })
}

#[test]
fn console_writes_one_json_line_per_span_with_parents_and_resource() {
    let buffer = Buffer::default();
    let provider = SdkTracerProvider::builder()
        .with_resource(resource())
        .with_simple_exporter(ConsoleSpanExporter::new(Box::new(buffer.clone())))
        .build();
    let (trace_id, parent_id) = nested_spans(&provider);
    provider.shutdown().unwrap();

    let text = buffer.text();
    let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{text}");
    let names: Vec<&str> = lines.iter().map(|line| line["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["megatron.iteration", "megatron.checkpoint.save", "megatron.train"]);
    for line in &lines[..2] {
        assert_eq!(line["trace_id"], trace_id.as_str());
        assert_eq!(line["parent_span_id"], parent_id.as_str());
    }
    assert_eq!(lines[2]["parent_span_id"], "");
    assert_eq!(lines[2]["span_id"], parent_id.as_str());
    assert_eq!(lines[2]["resource"]["nemo.run.id"], "run-7");
    assert!(lines[2]["end_time_unix_nano"].as_u64() >= lines[2]["start_time_unix_nano"].as_u64());
    assert!(!text.contains("\n\n") && text.ends_with('\n'));
}

#[test]
fn console_writes_one_json_line_per_metric_batch() {
    let buffer = Buffer::default();
    let reader = PeriodicReader::builder(ConsoleMetricExporter::new(Box::new(buffer.clone()))).build();
    let provider = SdkMeterProvider::builder().with_resource(resource()).with_reader(reader).build();
    let meter = provider.meter("megatron");
    meter.f64_gauge("megatron.training.loss").build().record(2.25, &[]);
    meter.f64_histogram("megatron.training.step_duration_ms").with_unit("ms").build().record(120.0, &[]);
    meter.u64_counter("megatron.training.skipped_iters").build().add(2, &[]);
    provider.force_flush().unwrap();

    let text = buffer.text();
    assert_eq!(text.lines().count(), 1, "{text}");
    let batch: Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(batch["resource"]["nemo.run.id"], "run-7");
    let metrics = batch["scope_metrics"][0]["metrics"].as_array().unwrap();
    let find = |name: &str| metrics.iter().find(|metric| metric["name"] == name).unwrap().clone();
    assert_eq!(find("megatron.training.loss")["kind"], "gauge");
    assert_eq!(find("megatron.training.loss")["data_points"][0]["value"], 2.25);
    let histogram = find("megatron.training.step_duration_ms");
    assert_eq!((histogram["kind"].as_str(), histogram["unit"].as_str()), (Some("histogram"), Some("ms")));
    assert_eq!(histogram["data_points"][0]["count"], 1);
    assert_eq!(find("megatron.training.skipped_iters")["data_points"][0]["value"], 2);

    provider.force_flush().unwrap();
    assert_eq!(buffer.text().lines().count(), 2);
    provider.shutdown().unwrap();
}

#[test]
fn the_file_cap_counts_what_a_restarted_rank_s_file_already_holds() {
    let root = temp_dir("file-cap");
    let dir = root.join("run-8");
    // A first lifetime writes three requests; the cap is what it wrote plus
    // a little, so that the next lifetime has no room for a request.
    let first = FileLimit::unlimited();
    let provider = SdkTracerProvider::builder()
        .with_resource(resource())
        .with_simple_exporter(FileSpanExporter::create(&dir, 0, first.clone()).unwrap())
        .build();
    nested_spans(&provider);
    provider.shutdown().unwrap();
    let path = file_path(&dir, Signal::Traces, 0);
    let held = std::fs::metadata(&path).unwrap().len();
    assert_eq!(first.dropped(), 0);

    let limit = FileLimit::new(held + 10);
    let provider = SdkTracerProvider::builder()
        .with_resource(resource())
        .with_simple_exporter(FileSpanExporter::create(&dir, 0, limit.clone()).unwrap())
        .build();
    nested_spans(&provider);
    provider.shutdown().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), held, "nothing appended past the cap");
    assert_eq!(limit.dropped(), 3, "each span of the three refused requests counted");
    std::fs::remove_dir_all(&root).unwrap();
}

/// A file deleted while the job writes to it, with its directory (a
/// cleanup script), is made again and gets the next requests: they are not
/// appended to a file no reader can open.
#[test]
fn a_deleted_file_is_made_again_where_it_was() {
    let dir = temp_dir("deleted");
    let exporter = FileSpanExporter::create(&dir, 0, FileLimit::unlimited()).unwrap();
    let path = file_path(&dir, Signal::Traces, 0);
    assert!(block_on(exporter.export(vec![span_data("before")])).is_ok());
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(block_on(exporter.export(vec![span_data("after")])).is_ok());
    assert!(block_on(exporter.export(vec![span_data("later")])).is_ok());
    let text = std::fs::read_to_string(&path).expect("the file is there again");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("\"after\"") && lines[1].contains("\"later\""), "{text}");
    // Only the file: a deleted file in a directory that stays is made again
    // too.
    std::fs::remove_file(&path).unwrap();
    assert!(block_on(exporter.export(vec![span_data("again")])).is_ok());
    assert!(std::fs::read_to_string(&path).unwrap().contains("\"again\""));
    exporter.shutdown().ok();
    std::fs::remove_dir_all(&dir).ok();
}

/// Makes this test binary's `fsize_child` act: the directory it writes in.
const FSIZE_CHILD: &str = "LENS_EXPORTERS_FSIZE_CHILD";

/// The child of [`a_write_cut_short_by_a_full_disk_leaves_only_whole_lines`]:
/// one export, then a file size limit 100 bytes past it (the kernel writes
/// part of the next request, then refuses the rest: a full disk's effect),
/// one export that fails, the limit lifted, one export that succeeds.
#[test]
fn fsize_child() {
    let Some(dir) = std::env::var_os(FSIZE_CHILD).map(PathBuf::from) else { return };
    let exporter = FileSpanExporter::create(&dir, 0, FileLimit::unlimited()).unwrap();
    assert!(block_on(exporter.export(vec![span_data("first")])).is_ok());
    let held = std::fs::metadata(file_path(&dir, Signal::Traces, 0)).unwrap().len();
    // The hard limit stays as it is (raising it needs privileges).
    let mut hard = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid rlimit to write into.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut hard) }, 0);
    let limit = |bytes: libc::rlim_t| {
        let limit = libc::rlimit { rlim_cur: bytes.min(hard.rlim_max), rlim_max: hard.rlim_max };
        // SAFETY: a valid rlimit, for this process only.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) }, 0);
    };
    // SAFETY: ignoring SIGXFSZ makes a write past the limit fail with EFBIG
    // instead of ending this (child) process.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    limit(held + 100);
    assert!(block_on(exporter.export(vec![span_data("cut short")])).is_err(), "the write past the limit fails");
    limit(libc::RLIM_INFINITY);
    assert!(block_on(exporter.export(vec![span_data("after")])).is_ok());
}

/// A write the disk cuts short leaves no part of its request in the file,
/// and the next request is a line of its own: every line is a request a
/// reader can read (before, the part stayed and the retry was glued onto
/// it). A file an earlier process left ending inside a line gets its next
/// request on a new line.
#[test]
fn a_write_cut_short_by_a_full_disk_leaves_only_whole_lines() {
    let dir = temp_dir("fsize");
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fsize_child", "--nocapture", "--test-threads=1"])
        .env(FSIZE_CHILD, &dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let path = file_path(&dir, Signal::Traces, 0);
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .map(|line| {
                let request: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"].as_str().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(names(&std::fs::read_to_string(&path).unwrap()), ["first", "after"]);

    // A file that ends inside a line, as a process killed mid-write leaves it.
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"resourceSpans\":[{\"reso").unwrap();
    let exporter = FileSpanExporter::create(&dir, 0, FileLimit::unlimited()).unwrap();
    assert!(block_on(exporter.export(vec![span_data("next")])).is_ok());
    let text = std::fs::read_to_string(&path).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"], "next");
    assert_eq!(text.lines().count(), 4, "two whole lines, the cut one, the next one");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn file_exporters_append_otlp_json_requests_per_rank() {
    let root = temp_dir("file");
    let dir = root.join("telemetry").join("run-7");
    for _lifetime in 0..2 {
        let provider = SdkTracerProvider::builder()
            .with_resource(resource())
            .with_simple_exporter(FileSpanExporter::create(&dir, 3, FileLimit::unlimited()).unwrap())
            .build();
        nested_spans(&provider);
        provider.shutdown().unwrap();
    }
    let text = std::fs::read_to_string(file_path(&dir, Signal::Traces, 3)).unwrap();
    assert_eq!(text.lines().count(), 6, "one request per export (simple processor), appended across lifetimes");
    assert!(dir.join("traces-rank3.jsonl").is_file());

    let request: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let resource_spans = &request["resourceSpans"][0];
    let attributes = resource_spans["resource"]["attributes"].as_array().unwrap();
    assert!(attributes.iter().any(|kv| kv["key"] == "nemo.run.id" && kv["value"]["stringValue"] == "run-7"));
    assert_eq!(resource_spans["scopeSpans"][0]["scope"]["name"], "megatron");
    let span = &resource_spans["scopeSpans"][0]["spans"][0];
    assert_eq!(span["name"], "megatron.train");
    let trace_id = span["traceId"].as_str().unwrap();
    assert_eq!(trace_id.len(), 32);
    assert!(trace_id.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_eq!(span["spanId"].as_str().unwrap().len(), 16);
    assert!(span["startTimeUnixNano"].is_string(), "int64 as a string: {span}");
    assert_eq!(span["kind"], 1, "enums as integers (SPAN_KIND_INTERNAL)");

    let reader = PeriodicReader::builder(FileMetricExporter::create(&dir, 3, FileLimit::unlimited()).unwrap()).build();
    let provider = SdkMeterProvider::builder().with_resource(resource()).with_reader(reader).build();
    provider.meter("megatron").u64_counter("megatron.training.skipped_iters").build().add(4, &[]);
    provider.shutdown().unwrap();
    let text = std::fs::read_to_string(file_path(&dir, Signal::Metrics, 3)).unwrap();
    let request: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let metric = &request["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0];
    assert_eq!(metric["name"], "megatron.training.skipped_iters");
    assert_eq!(metric["sum"]["isMonotonic"], true);
    assert_eq!(metric["sum"]["aggregationTemporality"], 2, "cumulative");
    assert_eq!(metric["sum"]["dataPoints"][0]["asInt"], "4", "int64 as a string");
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn an_unwritable_file_dir_names_the_file() {
    // Created directly, the exporter knows no variable: it names the file
    // and says the directory is what to change (setup names the variable,
    // see tests/setup_from_env.rs).
    let file = temp_dir("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let error = FileSpanExporter::create(&file, 0, FileLimit::unlimited()).unwrap_err().to_string();
    assert!(error.contains("traces-rank0.jsonl") && error.contains("the file exporter's directory"), "{error}");
    assert!(error.contains(&format!("{} is not a directory", file.display())), "what is wrong: {error}");
    assert!(!error.contains("MEGATRON"), "{error}");
    std::fs::remove_file(&file).ok();
}

/// A listener on 127.0.0.1 that accepts connections and never answers,
/// for at most `hold`.
fn silent_listener(hold: Duration) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&done);
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut held = Vec::new();
        while started.elapsed() < hold && !stop.load(Ordering::Relaxed) {
            if let Ok((stream, _)) = listener.accept() {
                held.push(stream);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    (port, done)
}

fn generic_endpoint(url: impl Into<String>) -> Option<OtlpEndpoint> {
    Some(OtlpEndpoint { url: url.into(), signal_specific: false })
}

fn secret_settings(port: u16, protocol: OtlpProtocol) -> OtlpSettings {
    OtlpSettings {
        endpoint: generic_endpoint(format!("http://127.0.0.1:{port}")),
        protocol,
        headers: Headers::parse(&format!("authorization=Bearer%20{TOKEN},x-team={TOKEN}")).unwrap(),
        timeout: Duration::from_millis(300),
        ..OtlpSettings::default()
    }
}

#[test]
fn exports_to_a_collector_that_never_answers_fail_within_the_timeout_without_leaking_headers() {
    let (port, done) = silent_listener(Duration::from_secs(20));
    for protocol in OtlpProtocol::ALL {
        let settings = secret_settings(port, protocol);
        assert!(!format!("{settings:?}").contains(TOKEN));
        let exporter = build_otlp_span_exporter(&settings).unwrap();
        assert!(!format!("{exporter:?}").contains(TOKEN));
        assert_eq!(exporter.runtime().is_some(), protocol == OtlpProtocol::Grpc);

        let started = Instant::now();
        let result = block_on(exporter.export(vec![span_data("megatron.iteration")]));
        let elapsed = started.elapsed();
        let error = result.expect_err("a silent collector cannot acknowledge");
        assert!(elapsed < Duration::from_secs(3), "{protocol}: took {elapsed:?}");
        assert!(!error.to_string().contains(TOKEN), "{protocol}: {error}");
        assert!(!format!("{error:?}").contains(TOKEN), "{protocol}: {error:?}");
        exporter.shutdown().ok();
    }
    done.store(true, Ordering::Relaxed);
}

/// Credentials in the endpoint (a query's values, which the standard
/// allows) are never shown: not in `Debug`, not in an export's error.
#[test]
fn credentials_in_the_endpoint_never_appear_in_debug_or_errors() {
    let (port, done) = silent_listener(Duration::from_secs(20));
    for protocol in OtlpProtocol::ALL {
        let settings = OtlpSettings {
            endpoint: Some(OtlpEndpoint {
                url: format!("http://127.0.0.1:{port}/v1/traces?api_key={TOKEN}"),
                signal_specific: true,
            }),
            protocol,
            timeout: Duration::from_millis(300),
            ..OtlpSettings::default()
        };
        assert!(!format!("{settings:?}").contains(TOKEN), "{protocol}");
        let exporter = build_otlp_span_exporter(&settings).unwrap();
        let debug = format!("{exporter:?}");
        assert!(!debug.contains(TOKEN) && debug.contains("api_key=[REDACTED]"), "{protocol}: {debug}");
        assert_eq!(exporter.endpoint().shown(), format!("http://127.0.0.1:{port}/v1/traces?api_key=[REDACTED]"));
        let error = block_on(exporter.export(vec![span_data("megatron.iteration")])).expect_err("silent collector");
        assert!(!format!("{error} {error:?}").contains(TOKEN), "{protocol}: {error:?}");
        exporter.shutdown().ok();
    }
    done.store(true, Ordering::Relaxed);
}

#[test]
fn http_export_sends_the_configured_headers_to_the_signal_path() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut request = Vec::new();
        let mut buffer = [0_u8; 4096];
        let started = Instant::now();
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && started.elapsed() < Duration::from_secs(5) {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => request.extend_from_slice(&buffer[..read]),
            }
        }
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
        String::from_utf8_lossy(&request).to_lowercase()
    });
    let mut settings = secret_settings(port, OtlpProtocol::HttpProtobuf);
    settings.timeout = Duration::from_secs(5);
    let exporter = build_otlp_metric_exporter(&settings, Temporality::Cumulative).unwrap();
    assert_eq!(exporter.endpoint().url, format!("http://127.0.0.1:{port}/v1/metrics"));
    let reader = PeriodicReader::builder(exporter).build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    provider.meter("m").u64_counter("c").build().add(1, &[]);
    provider.force_flush().unwrap();
    let request = server.join().unwrap();
    assert!(request.starts_with("post /v1/metrics http/1.1"), "{request}");
    assert!(request.contains(&format!("authorization: bearer {TOKEN}")), "{request}");
    assert!(request.contains("content-type: application/x-protobuf"), "{request}");
    provider.shutdown().ok();
}

#[test]
fn a_bad_certificate_file_is_a_setup_error_naming_the_variable() {
    let missing = temp_dir("missing-ca.pem");
    let not_pem = temp_dir("not-pem.pem");
    std::fs::write(&not_pem, b"hello").unwrap();
    for path in [&missing, &not_pem] {
        let settings = OtlpSettings {
            endpoint: generic_endpoint("https://collector.example:4317"),
            certificate: Some(path.clone()),
            ..OtlpSettings::default()
        };
        let error = build_otlp_span_exporter(&settings).unwrap_err().to_string();
        assert!(error.starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE="), "{error}");
        assert!(error.contains(&path.display().to_string()), "{error}");
    }
    std::fs::remove_file(&not_pem).ok();
}

#[test]
fn an_invalid_header_is_reported_by_name_only() {
    // A value that no transport can send never gets into the settings.
    let error = Headers::new().insert("x-api-key", &format!("{TOKEN}\u{7}")).unwrap_err();
    let text = format!("{error} {error:?}");
    assert!(text.contains("x-api-key") && !text.contains(TOKEN), "{text}");

    // A `-bin` key is a valid HTTP header but not ASCII gRPC metadata.
    let mut headers = Headers::new();
    headers.insert("x-api-key-bin", TOKEN).unwrap();
    let settings = OtlpSettings { headers, ..OtlpSettings::default() };
    let error = build_otlp_span_exporter(&settings).unwrap_err();
    let text = format!("{error} {error:?}");
    assert!(text.starts_with("OTEL_EXPORTER_OTLP_HEADERS"), "{text}");
    assert!(text.contains("x-api-key-bin") && !text.contains(TOKEN), "{text}");

    // The body's own headers are lens's: a program's would break every export.
    for key in ["Content-Type", "content-encoding"] {
        let mut headers = Headers::new();
        headers.insert(key, "application/json").unwrap();
        let settings = OtlpSettings { headers, protocol: OtlpProtocol::HttpProtobuf, ..OtlpSettings::default() };
        let error = build_otlp_span_exporter(&settings).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("OTEL_EXPORTER_OTLP_HEADERS: the header \"{key}\" cannot be sent")),
            "{error}"
        );
        assert!(error.contains("lens sets it for the protocol"), "{error}");
    }
}

fn scrape(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// A port in use when the job starts (a previous run still lingering) is
/// not a setup error: the exporter serves there once the port is free.
#[test]
fn prometheus_on_a_port_in_use_serves_once_it_is_free() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let settings = PrometheusSettings {
        host: "127.0.0.1".into(),
        port,
        linger: Duration::from_secs(1),
        ..PrometheusSettings::default()
    };
    let exporter = PrometheusExporter::start(&settings).expect("a port in use is not a setup error");
    assert_eq!(exporter.local_addr().port(), port);
    assert!(!exporter.is_serving(), "the port is still held");
    let reader = PeriodicReader::builder(exporter.clone()).build();
    let provider = SdkMeterProvider::builder().with_resource(resource()).with_reader(reader).build();
    provider.meter("megatron").f64_gauge("megatron.training.loss").build().record(2.5, &[]);
    provider.force_flush().unwrap();
    drop(holder);
    // Tried again every second: served within a few.
    let deadline = Instant::now() + Duration::from_secs(10);
    let page = loop {
        let page = TcpStream::connect(("127.0.0.1", port)).ok().map(|_| scrape(port, "/metrics"));
        match page {
            Some(page) if page.contains("megatron_training_loss") => break page,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => panic!("not served within 10 s of the port being free: {page:?}"),
        }
    };
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(exporter.is_serving());
    provider.shutdown().unwrap();
    exporter.stop_server();
}

/// An exporter whose port stayed in use for the whole run never served a
/// page of this process: its shutdown does not wait out the linger period
/// (30 s here) for scrapes that cannot reach it.
#[test]
fn prometheus_that_never_got_its_port_does_not_linger_at_shutdown() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let settings = PrometheusSettings {
        host: "127.0.0.1".into(),
        port,
        linger: Duration::from_secs(30),
        ..PrometheusSettings::default()
    };
    let exporter = PrometheusExporter::start(&settings).expect("a port in use is not a setup error");
    let reader = PeriodicReader::builder(exporter.clone()).build();
    let provider = SdkMeterProvider::builder().with_resource(resource()).with_reader(reader).build();
    provider.meter("megatron").f64_gauge("megatron.training.loss").build().record(2.5, &[]);
    provider.shutdown().unwrap();
    assert!(!exporter.is_serving(), "the port is still held");
    let started = Instant::now();
    exporter.wait_linger();
    // A generous bound, far below the 30 s linger.
    assert!(started.elapsed() < Duration::from_secs(10), "lingered {:?}", started.elapsed());
    assert!(!exporter.is_serving());
    drop(holder);
}

#[test]
fn prometheus_serves_the_seed_page_names_with_run_labels() {
    let settings = PrometheusSettings {
        host: "127.0.0.1".into(),
        port: 0,
        // Long enough for the scrape after shutdown on a loaded machine.
        linger: Duration::from_secs(2),
        ..PrometheusSettings::default()
    };
    let exporter = PrometheusExporter::start(&settings).unwrap();
    let port = exporter.local_addr().port();
    let reader = PeriodicReader::builder(exporter.clone()).build();
    let provider = SdkMeterProvider::builder().with_resource(resource()).with_reader(reader).build();
    let meter = provider.meter("megatron");
    meter.f64_gauge("megatron.training.loss").with_description("Training loss").build().record(2.5, &[]);
    let histogram = meter.f64_histogram("megatron.training.step_duration_ms").with_unit("ms").build();
    histogram.record(3.0, &[]);
    histogram.record(7000.0, &[]);
    meter.u64_counter("megatron.training.skipped_iters").build().add(3, &[]);
    provider.force_flush().unwrap();

    let response = scrape(port, "/metrics");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("Content-Type: text/plain; version=0.0.4"), "{response}");
    let labels = r#"otel_scope_name="megatron",nemo_run_id="run-7",service_instance_id="run-7-rank3""#;
    for line in [
        "# HELP megatron_training_loss Training loss".to_owned(),
        "# TYPE megatron_training_loss gauge".to_owned(),
        format!("megatron_training_loss{{{labels}}} 2.5"),
        "# TYPE megatron_training_step_duration_ms_milliseconds histogram".to_owned(),
        format!(r#"megatron_training_step_duration_ms_milliseconds_bucket{{{labels},le="5"}} 1"#),
        format!(r#"megatron_training_step_duration_ms_milliseconds_bucket{{{labels},le="+Inf"}} 2"#),
        format!("megatron_training_step_duration_ms_milliseconds_sum{{{labels}}} 7003"),
        format!("megatron_training_step_duration_ms_milliseconds_count{{{labels}}} 2"),
        "# TYPE megatron_training_skipped_iters_total counter".to_owned(),
        format!("megatron_training_skipped_iters_total{{{labels}}} 3"),
        "# TYPE target_info gauge".to_owned(),
    ] {
        assert!(response.lines().any(|l| l == line), "missing {line:?} in\n{response}");
    }
    let target_info = response.lines().find(|l| l.starts_with("target_info{")).unwrap();
    assert!(target_info.contains(r#"service_name="megatron-lm""#) && target_info.ends_with(" 1"), "{target_info}");

    assert!(scrape(port, "/").starts_with("HTTP/1.1 404"));
    assert!(scrape(port, "/metricsx").starts_with("HTTP/1.1 404"));

    // After shutdown the last page is served for the linger period, then the
    // endpoint goes away.
    provider.shutdown().unwrap();
    assert!(scrape(port, "/metrics").contains("megatron_training_skipped_iters_total{"));
    let started = Instant::now();
    exporter.wait_linger();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "still listening after the linger period");
}

#[test]
fn prometheus_on_an_address_of_no_interface_is_a_setup_error_naming_the_host_variable() {
    // 192.0.2.1 (TEST-NET-1) is no address of this host: it cannot be bound.
    let settings = PrometheusSettings { host: "192.0.2.1".into(), port: 19464, ..PrometheusSettings::default() };
    let error = PrometheusExporter::start(&settings).unwrap_err().to_string();
    assert!(error.starts_with("OTEL_EXPORTER_PROMETHEUS_HOST: cannot serve"), "{error}");
    assert!(error.contains("192.0.2.1:19464"), "{error}");
    assert!(error.ends_with("give an address of this host (or 0.0.0.0)"), "{error}");

    // The local rank offset moves the port.
    let base = PrometheusSettings { port: 19463, local_rank_offset: 1, ..settings };
    let error = PrometheusExporter::start(&base).unwrap_err().to_string();
    assert!(error.contains("192.0.2.1:19464"), "{error}");
}

/// A FIFO where the traces file goes once hung the job at setup, blocked
/// in `open` until some process read it, with no message: it is refused
/// at once, naming the file and what it is (bounded here, so that a hang
/// fails the test).
#[test]
fn a_fifo_where_the_file_goes_is_refused_at_once() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = temp_dir("fifo");
    std::fs::create_dir_all(&dir).unwrap();
    let path = file_path(&dir, Signal::Traces, 0);
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let (sender, receiver) = std::sync::mpsc::channel();
    let at = dir.clone();
    std::thread::spawn(move || {
        sender.send(FileSpanExporter::create(&at, 0, FileLimit::unlimited()).err().map(|e| e.to_string()))
    });
    let error = receiver.recv_timeout(Duration::from_secs(10)).expect("create returned").expect("refused");
    assert_eq!(
        error,
        format!(
            "the file exporter's directory: cannot open {} for appending: it is a FIFO (named pipe), not a regular \
             file; choose a writable directory with the file exporter's directory",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).ok();
}
