//! Failed metric exports are kept and resent (issue #10):
//! a collector that is down for several export intervals and comes back
//! within the retry window receives every collection taken meanwhile, oldest
//! first, with its original timestamps; beyond the cap of kept collections
//! the oldest are dropped and the shutdown report counts them; a shutdown
//! whose deadline a hung collector passes counts the collections it leaves
//! unexported (the final one in a hung export, the kept ones) as dropped.
//!
//! The collector here is a minimal OTLP/HTTP receiver on 127.0.0.1 that
//! answers 503 to its first requests and then accepts, or for gRPC a real
//! tonic server that answers `UNAVAILABLE` first (`support/grpc_collector.rs`,
//! the `otlp-sink` feature): lens resends over gRPC through a tonic service
//! of its own, whose calls only a real gRPC server checks. Setup owns
//! process-global state, so the tests take [`serial`].

#[path = "support/grpc_collector.rs"]
mod grpc_collector;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lens_core::config::{LensConfig, OtlpEndpoint, OtlpProtocol, Signal};
use lens_core::identity::RankContext;
use lens_core::report::ShutdownReport;
use lens_otel_runtime::accounting::MAX_KEPT_COLLECTIONS;
use lens_otel_runtime::pipeline::{PipelineOptions, setup};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
use prost::Message as _;

const GAUGE: &str = "lens.test.outage.collection";
/// The header configured for the exporter; every request must carry it.
const AUTHORIZATION: &str = "Bearer x";

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One gauge point as the collector received it.
#[derive(Clone, Copy, Debug)]
struct Received {
    value: i64,
    time_unix_nano: u64,
    received_unix_nano: u64,
}

/// A receiver that refuses (HTTP 503) its first `refuse` requests.
#[derive(Clone)]
struct Collector {
    endpoint: String,
    refused: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
    /// The `authorization` header of every request.
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
}

/// What the tests read of a collector, HTTP or gRPC.
trait Receiving {
    fn endpoint(&self) -> String;
    /// The gauge points accepted so far, in arrival order.
    fn received(&self) -> Vec<Received>;
    fn refused(&self) -> usize;
    /// The `authorization` header or metadata of every request.
    fn authorizations(&self) -> Vec<Option<String>>;
}

impl Receiving for Collector {
    fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::Acquire)
    }

    fn authorizations(&self) -> Vec<Option<String>> {
        self.authorizations.lock().unwrap().clone()
    }
}

impl Receiving for grpc_collector::Collector<ExportMetricsServiceRequest> {
    fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    fn received(&self) -> Vec<Received> {
        let calls = self.calls.lock().unwrap();
        let accepted = calls.iter().filter_map(|call| Some((call.request.as_ref()?, call.at_unix_nano)));
        accepted
            .flat_map(|(request, at)| {
                points_of(request).into_iter().map(move |(value, time_unix_nano)| Received {
                    value,
                    time_unix_nano,
                    received_unix_nano: at,
                })
            })
            .collect()
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::Acquire)
    }

    fn authorizations(&self) -> Vec<Option<String>> {
        self.calls.lock().unwrap().iter().map(|call| call.authorization.clone()).collect()
    }
}

fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn points(body: &[u8], json: bool) -> Vec<(i64, u64)> {
    let request = if json {
        serde_json::from_slice::<ExportMetricsServiceRequest>(body).expect("an OTLP/JSON metrics request")
    } else {
        ExportMetricsServiceRequest::decode(body).expect("an OTLP protobuf metrics request")
    };
    points_of(&request)
}

/// The gauge's points in `request`: its value and time.
fn points_of(request: &ExportMetricsServiceRequest) -> Vec<(i64, u64)> {
    let mut found = Vec::new();
    for resource in &request.resource_metrics {
        for scope in &resource.scope_metrics {
            for metric in scope.metrics.iter().filter(|m| m.name == GAUGE) {
                if let Some(Data::Gauge(gauge)) = &metric.data {
                    for point in &gauge.data_points {
                        if let Some(Value::AsInt(value)) = point.value {
                            found.push((value, point.time_unix_nano));
                        }
                    }
                }
            }
        }
    }
    found
}

/// Serves one connection: HTTP/1.1 requests with a `Content-Length`, kept alive.
fn serve(stream: TcpStream, refuse: usize, collector: &Collector) {
    let Collector { refused, received, authorizations, .. } = collector;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let mut writer = stream.try_clone().expect("clone the stream");
    let mut reader = BufReader::new(stream);
    for _request in 0..10_000 {
        let mut length = 0usize;
        let mut json = false;
        let mut authorization = None;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-type")
            {
                json = value.trim() == "application/json";
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("authorization")
            {
                authorization = Some(value.trim().to_string());
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        authorizations.lock().unwrap().push(authorization);
        let refusing = refused.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < refuse).then_some(n + 1));
        let response: &[u8] = if refusing.is_ok() {
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
        } else {
            let at = now_nanos();
            let mut received = received.lock().unwrap();
            for (value, time_unix_nano) in points(&body, json) {
                received.push(Received { value, time_unix_nano, received_unix_nano: at });
            }
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
        };
        if writer.write_all(response).is_err() {
            return;
        }
    }
}

fn collector(refuse: usize) -> Collector {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let collector =
        Collector { endpoint, refused: Arc::default(), received: Arc::default(), authorizations: Arc::default() };
    let for_server = collector.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64).flatten() {
            let collector = for_server.clone();
            std::thread::spawn(move || serve(stream, refuse, &collector));
        }
    });
    collector
}

/// Runs a metrics-only lifetime against `collector` whose gauge reports the
/// collection's number (1, 2, 3, ...), until `until` holds of what the
/// collector received (at most 30 s), then shuts down.
fn run(
    collector: &dyn Receiving,
    protocol: OtlpProtocol,
    interval: Duration,
    until: impl Fn(&[Received]) -> bool,
) -> ShutdownReport {
    let mut config =
        LensConfig { enabled: true, rank_strategy: "all_ranks".into(), traces_enabled: false, ..LensConfig::default() };
    config.export_retry_window = Duration::from_secs(60);
    config.otel.metric_export_interval = interval;
    let otlp = config.otel.otlp_mut(Signal::Metrics);
    otlp.protocol = protocol;
    otlp.endpoint = Some(OtlpEndpoint { url: collector.endpoint(), signal_specific: false });
    otlp.headers.insert("authorization", AUTHORIZATION).expect("a valid header");
    otlp.timeout = Duration::from_secs(5);
    let env = std::collections::HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "outage".to_string())]);
    let telemetry = setup(&config, &RankContext::SINGLE, Vec::new(), PipelineOptions::default(), &env).expect("setup");
    let collections = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&collections);
    let _gauge = telemetry
        .otel_meter()
        .expect("a meter")
        .i64_observable_gauge(GAUGE)
        .with_callback(move |observer| observer.observe(counter.fetch_add(1, Ordering::AcqRel) as i64 + 1, &[]))
        .build();
    let started = Instant::now();
    while !until(&collector.received()) && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    telemetry.shutdown(Duration::from_secs(10))
}

#[test]
fn collections_taken_while_the_collector_is_down_arrive_in_order_with_their_timestamps() {
    for protocol in [OtlpProtocol::HttpProtobuf, OtlpProtocol::HttpJson, OtlpProtocol::Grpc] {
        outage_loses_no_collection(protocol);
    }
}

fn outage_loses_no_collection(protocol: OtlpProtocol) {
    let _serial = serial();
    let refuse = 5;
    let collector: Box<dyn Receiving> = if protocol.is_http() {
        Box::new(collector(refuse))
    } else {
        Box::new(grpc_collector::collector::<ExportMetricsServiceRequest>(refuse))
    };
    // Five refused requests: the first collection and four resends of it,
    // while four more collections wait behind it.
    let report = run(collector.as_ref(), protocol, Duration::from_millis(100), |received| received.len() >= 8);
    let received = collector.received();
    assert_eq!(collector.refused(), refuse, "{protocol:?}: {report}");
    let authorizations = collector.authorizations();
    assert!(authorizations.len() > refuse, "{protocol:?}: {authorizations:?}");
    assert!(
        authorizations.iter().all(|value| value.as_deref() == Some(AUTHORIZATION)),
        "{protocol:?}: every request carries the configured header: {authorizations:?}"
    );

    let values: Vec<i64> = received.iter().map(|r| r.value).collect();
    let expected: Vec<i64> = (1..=values.len() as i64).collect();
    assert_eq!(values, expected, "{protocol:?}: every collection once, oldest first ({report})");
    assert!(values.len() >= 8, "{values:?}");
    for pair in received.windows(2) {
        assert!(pair[0].time_unix_nano < pair[1].time_unix_nano, "timestamps go forward: {pair:?}");
    }
    // The collections taken during the outage carry the time they were
    // taken, not the time they finally arrived: each is at least one
    // interval older than its arrival, oldest the most.
    let first_arrival = received[0].received_unix_nano;
    for r in &received[..refuse] {
        assert!(r.time_unix_nano + 50_000_000 < first_arrival, "{r:?} arrived at {first_arrival}");
    }
    assert_eq!(report.metrics.collections_dropped, 0, "{report}");
    assert!(report.metrics.retries >= refuse as u64, "{report}");
    assert_eq!(report.metrics.exports, values.len() as u64, "{report}");
}

#[test]
fn beyond_the_cap_the_oldest_collections_are_dropped_and_reported() {
    let _serial = serial();
    let refuse = MAX_KEPT_COLLECTIONS + 20;
    let collector = collector(refuse);
    let report = run(&collector, OtlpProtocol::HttpProtobuf, Duration::from_millis(10), |received| {
        received.len() >= MAX_KEPT_COLLECTIONS + 2
    });
    let received = collector.received();
    let values: Vec<i64> = received.iter().map(|r| r.value).collect();
    // Each refused request is one collection taken; the cap kept the newest.
    let dropped = report.metrics.collections_dropped;
    assert!(dropped >= 20, "{report}");
    assert_eq!(values[0], dropped as i64 + 1, "the oldest kept collection comes first: {values:?}");
    let expected: Vec<i64> = (values[0]..values[0] + values.len() as i64).collect();
    assert_eq!(values, expected, "no gap after the dropped ones ({report})");
    assert!(report.to_string().contains(&format!("metric collections: {dropped} dropped")), "{report}");
}

/// A collector that accepts connections, reads what it is sent and never
/// answers (a hung collector); its endpoint.
fn blackhole() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64).flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut sink = [0_u8; 4096];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    endpoint
}

/// A metrics-only lifetime over `http/protobuf` to `endpoint` whose gauge
/// has `points` points per collection, with an export timeout that
/// outlasts the shutdown; `first` (when set) is waited for before shutdown.
fn hung_metrics_shutdown(endpoint: &str, points: i64, interval: Duration, first: Option<Duration>) -> ShutdownReport {
    let mut config = LensConfig {
        enabled: true,
        rank_strategy: "all_ranks".into(),
        traces_enabled: false,
        export_retry_window: Duration::from_secs(60),
        ..LensConfig::default()
    };
    config.otel.metric_export_interval = interval;
    let otlp = config.otel.otlp_mut(Signal::Metrics);
    otlp.protocol = OtlpProtocol::HttpProtobuf;
    otlp.endpoint = Some(OtlpEndpoint { url: endpoint.to_string(), signal_specific: false });
    otlp.timeout = Duration::from_secs(10);
    let env = std::collections::HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "hung-metrics".to_string())]);
    let telemetry = setup(&config, &RankContext::SINGLE, Vec::new(), PipelineOptions::default(), &env).expect("setup");
    let _gauge = telemetry
        .otel_meter()
        .expect("a meter")
        .i64_observable_gauge(GAUGE)
        .with_callback(move |observer| {
            for point in 0..points {
                observer.observe(point, &[opentelemetry::KeyValue::new("point", point)]);
            }
        })
        .build();
    if let Some(wait) = first {
        std::thread::sleep(wait);
    }
    let started = Instant::now();
    let report = telemetry.shutdown(Duration::from_secs(1));
    assert!(started.elapsed() < Duration::from_secs(3), "shutdown took {:?}: {report}", started.elapsed());
    report
}

#[test]
fn a_final_collection_cut_by_the_shutdown_deadline_is_counted_dropped() {
    let _serial = serial();
    // No periodic export within the run: the final collection is the only
    // one, and its export hangs past the deadline.
    let report = hung_metrics_shutdown(&blackhole(), 3, Duration::from_secs(60), None);
    assert_eq!(report.unfinished, ["flush and shut down metrics"], "{report}");
    assert_eq!(report.metrics.points_exported, 0, "{report}");
    assert_eq!((report.metrics.collections_dropped, report.metrics.points_dropped), (1, 3), "{report}");
    assert!(report.to_string().contains("metric collections: 1 dropped (3 points)"), "{report}");
}

#[test]
fn collections_kept_for_resending_when_the_deadline_cuts_shutdown_are_counted_dropped() {
    let _serial = serial();
    // A collector that refuses the first export (kept for resending) and
    // hangs on every later request: the resend at shutdown never returns.
    let endpoint = refuse_then_hang();
    let report = hung_metrics_shutdown(&endpoint, 2, Duration::from_millis(300), Some(Duration::from_millis(600)));
    assert_eq!(report.unfinished, ["flush and shut down metrics"], "{report}");
    assert!(report.metrics.failed_exports >= 1, "{report}");
    // Every collection taken (the refused one, and any taken behind it,
    // and the one whose resend hangs) is counted, none exported.
    assert_eq!(report.metrics.points_exported, 0, "{report}");
    assert!(report.metrics.collections_dropped >= 1, "{report}");
    assert_eq!(report.metrics.points_dropped, 2 * report.metrics.collections_dropped, "{report}");
    assert_eq!(report.metrics.collections_kept, 0, "{report}");
}

/// A collector that answers its first request with HTTP 503 and never
/// answers another; its endpoint.
fn refuse_then_hang() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let answered = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64).flatten() {
            let answered = Arc::clone(&answered);
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().expect("clone the stream");
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = line.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    if answered.fetch_add(1, Ordering::AcqRel) == 0 {
                        let _ = writer.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
                    } else {
                        // Hang: read on, never answer.
                        let mut sink = [0_u8; 4096];
                        while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
                        return;
                    }
                }
            });
        }
    });
    endpoint
}
