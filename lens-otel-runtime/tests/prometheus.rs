//! The Prometheus endpoint as a scraper and a user see it (issue #10, items
//! 1 and 9): which port a rank serves on (the base port when at most one rank
//! of a host exports metrics, base + local rank otherwise), that clients
//! which connect and send nothing delay no scrape while the process's
//! threads and file descriptors stay bounded, and that it answers like a real
//! HTTP/1.1 server (keep-alive, `HEAD`, 404, 405, 400, 431).
//!
//! Telemetry setup is process-global, and the resource test counts this
//! process's threads and descriptors, so every test takes [`serial`] first.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lens_core::config::{ExporterKind, LensConfig};
use lens_core::identity::RankContext;
use lens_otel_runtime::exporters::{
    ONE_EXPORTER_PER_HOST_STRATEGIES, PROMETHEUS_MAX_CONNECTIONS, PrometheusExporter, PrometheusSettings,
    prometheus_port_offset,
};
use lens_otel_runtime::pipeline::{PipelineOptions, setup};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

/// The longest a scrape may take while idle clients hold connections. The
/// goal is "within a second"; the margin is for a loaded 2-core machine. The
/// old one-connection-at-a-time server needed 5 s per idle client.
const SCRAPE_LIMIT: Duration = Duration::from_secs(2);
/// Socket timeouts of the test's clients (a hung answer fails the test).
const IO_LIMIT: Duration = Duration::from_secs(10);
/// The sample every page of these tests carries.
const SAMPLE: &str = "\nmegatron_training_loss{otel_scope_name=\"prom-test\"} 2.5\n";

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An endpoint on a free loopback port whose page has [`SAMPLE`] (and the
/// provider that exported it, to keep alive).
fn endpoint() -> (PrometheusExporter, SdkMeterProvider) {
    let settings = PrometheusSettings { host: "127.0.0.1".into(), port: 0, ..PrometheusSettings::default() };
    let exporter = PrometheusExporter::start(&settings).expect("start the endpoint");
    let provider = SdkMeterProvider::builder().with_reader(PeriodicReader::builder(exporter.clone()).build()).build();
    provider.meter("prom-test").f64_gauge("megatron.training.loss").build().record(2.5, &[]);
    provider.force_flush().expect("export the page");
    (exporter, provider)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, IO_LIMIT).expect("connect to the endpoint");
    stream.set_read_timeout(Some(IO_LIMIT)).unwrap();
    stream.set_write_timeout(Some(IO_LIMIT)).unwrap();
    stream
}

/// One parsed answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Header names lower-cased.
    headers: BTreeMap<String, String>,
    body: String,
}

/// Reads one answer: the head, then `Content-Length` bytes of body (none for
/// `HEAD`), so that the connection can carry the next request.
fn read_answer(reader: &mut BufReader<TcpStream>, head_request: bool) -> Answer {
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("read the status line");
    let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("read a header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("a header line");
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; if head_request { 0 } else { length }];
    reader.read_exact(&mut body).expect("read the body");
    Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// Sends `request` on a fresh connection and reads one answer.
fn ask(addr: SocketAddr, request: &[u8], head_request: bool) -> Answer {
    let mut stream = connect(addr);
    stream.write_all(request).unwrap();
    read_answer(&mut BufReader::new(stream), head_request)
}

fn scrape(addr: SocketAddr) -> Answer {
    ask(addr, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", false)
}

#[cfg(target_os = "linux")]
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok()).unwrap()
}

#[cfg(target_os = "linux")]
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn the_port_offset_is_zero_only_when_at_most_one_rank_per_host_exports_metrics() {
    let _serial = serial();
    for local_rank in [0, 3, 7] {
        for strategy in ONE_EXPORTER_PER_HOST_STRATEGIES {
            assert_eq!(prometheus_port_offset(Some(strategy), false, local_rank), 0, "{strategy}");
            // With per-rank metrics every rank exports some metrics.
            assert_eq!(prometheus_port_offset(Some(strategy), true, local_rank), local_rank, "{strategy}");
        }
        for strategy in ["all_ranks", "sampled", "my_registered_strategy"] {
            for rank_metrics in [false, true] {
                assert_eq!(prometheus_port_offset(Some(strategy), rank_metrics, local_rank), local_rank, "{strategy}");
            }
        }
        // A strategy given in code (no name) may export on every rank.
        assert_eq!(prometheus_port_offset(None, false, local_rank), local_rank);
    }
    assert_eq!(ONE_EXPORTER_PER_HOST_STRATEGIES, ["first_rank_per_node", "single_rank"]);
}

#[test]
fn port_zero_picks_a_free_port_whatever_the_local_rank() {
    let _serial = serial();
    let settings =
        PrometheusSettings { host: "127.0.0.1".into(), port: 0, local_rank_offset: 3, ..PrometheusSettings::default() };
    let exporter = PrometheusExporter::start(&settings).expect("port 0 means any free port");
    assert!(exporter.local_addr().port() > 1023, "{}", exporter.local_addr());
    exporter.stop_server();
}

/// A base port with `base..base + count` free a moment ago.
fn free_ports(count: u16) -> u16 {
    for _ in 0..200 {
        let base = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
        if base.checked_add(count).is_none() {
            continue;
        }
        let held: Vec<_> = (0..count).map_while(|i| TcpListener::bind((Ipv4Addr::LOCALHOST, base + i)).ok()).collect();
        if held.len() == usize::from(count) {
            return base;
        }
    }
    panic!("no {count} consecutive free ports on 127.0.0.1");
}

/// Sets telemetry up as rank 3 of 4 on one host (local rank 3) with
/// `strategy`, metrics to Prometheus on `base`; the address the summary
/// line names, after checking that it serves there.
fn served_port(base: u16, strategy: &str, custom_strategy: bool) -> u16 {
    let mut config = LensConfig { enabled: true, traces_enabled: false, ..LensConfig::default() };
    config.rank_strategy = strategy.into();
    config.otel.metrics_exporter = Some(ExporterKind::Prometheus);
    config.otel.prometheus_host = "127.0.0.1".into();
    config.otel.prometheus_port = base;
    let rank = RankContext { rank: 3, world_size: 4, local_rank: 3, node_rank: None };
    let env = BTreeMap::from([("NEMO_LENS_RUN_ID".to_owned(), "prom-port-run".to_owned())]);
    let mut options = PipelineOptions::default();
    if custom_strategy {
        options.rank_strategy = Some(std::sync::Arc::new(|_config: &LensConfig, _rank: &RankContext| true));
    }
    let telemetry = setup(&config, &rank, Vec::new(), options, &env).expect("setup");
    assert!(telemetry.is_exporting(), "{strategy}: rank 3 of 4 exports");
    let addr: SocketAddr = telemetry
        .destinations()
        .iter()
        .find_map(|d| d.strip_prefix("metrics: Prometheus http://")?.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no Prometheus destination in {:?}", telemetry.destinations()))
        .parse()
        .expect("the summary names the bound address");
    assert_eq!(scrape(addr).status, 200, "{strategy}: the summary's address serves");
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.errors.is_empty(), "{report:?}");
    addr.port()
}

#[test]
fn the_summary_names_the_base_port_unless_several_ranks_of_the_host_export() {
    let _serial = serial();
    let base = free_ports(4);
    // The default strategy exports on the last rank only: the base port,
    // as the docs say (not base + 3).
    assert_eq!(served_port(base, "single_rank", false), base);
    assert_eq!(served_port(base, "all_ranks", false), base + 3);
    // A strategy given in code may export on every rank of the host.
    assert_eq!(served_port(base, "single_rank", true), base + 3);
}

#[cfg(target_os = "linux")]
#[test]
fn idle_connections_delay_no_scrape_and_threads_and_descriptors_stay_bounded() {
    let _serial = serial();
    let (exporter, _provider) = endpoint();
    let addr = exporter.local_addr();
    assert!(scrape(addr).body.contains(SAMPLE));
    let (threads_before, fds_before) = (threads(), open_fds());

    // Eight clients that connect and send nothing, one that sends half a
    // request.
    let mut clients: Vec<TcpStream> = (0..8).map(|_| connect(addr)).collect();
    let mut half = connect(addr);
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    clients.push(half);
    std::thread::sleep(Duration::from_millis(200));

    for _ in 0..3 {
        let started = Instant::now();
        let answer = scrape(addr);
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.body.contains(SAMPLE), "{}", answer.body);
        assert!(started.elapsed() < SCRAPE_LIMIT, "a scrape took {:?} behind 9 idle clients", started.elapsed());
    }
    // Connections are served concurrently: one thread whatever their number.
    assert!(threads() <= threads_before + 1, "threads {threads_before} -> {}", threads());

    // More clients than the endpoint serves at once: its own descriptors stay
    // at most one per served connection.
    clients.extend((0..PROMETHEUS_MAX_CONNECTIONS + 16).map(|_| connect(addr)));
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(open_fds());
        std::thread::sleep(Duration::from_millis(50));
    }
    let server_fds = most.saturating_sub(fds_before + clients.len());
    assert!(
        server_fds <= PROMETHEUS_MAX_CONNECTIONS + 2,
        "{server_fds} descriptors for {} clients (at most {PROMETHEUS_MAX_CONNECTIONS} served at once)",
        clients.len()
    );
    assert!(threads() <= threads_before + 1, "threads {threads_before} -> {}", threads());

    // When they go, scrapes are answered again.
    drop(clients);
    let answer = scrape(addr);
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains(SAMPLE));
    exporter.stop_server();
}

/// One answer on a kept-alive connection, `None` once the server closed it.
fn try_status(reader: &mut BufReader<TcpStream>) -> Option<u16> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|read| *read > 0)?;
    let status = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut length = 0;
    loop {
        line.clear();
        reader.read_line(&mut line).ok().filter(|read| *read > 0)?;
        let header = line.trim_end().to_ascii_lowercase();
        if header.is_empty() {
            break;
        }
        if let Some(value) = header.strip_prefix("content-length:") {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(status)
}

/// Clients that keep every slot busy with keep-alive requests (a dashboard
/// polling hard) delay a new scrape by the connection age at most (2 s):
/// each of their connections is closed after its answer once that old,
/// and the waiting scrape gets the slot. Before, 60 s: past a scrape's
/// timeout.
#[test]
fn busy_keep_alive_clients_delay_a_new_scrape_by_seconds_at_most() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let _serial = serial();
    let (exporter, _provider) = endpoint();
    let addr = exporter.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..PROMETHEUS_MAX_CONNECTIONS)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let started = Instant::now();
                // Keep-alive requests back to back; a new connection when the
                // server closes one (bounded: the test stops them).
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
                    let stream = connect(addr);
                    let mut writer = stream.try_clone().unwrap();
                    let mut reader = BufReader::new(stream);
                    while !stop.load(Ordering::Relaxed)
                        && writer.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").is_ok()
                        && try_status(&mut reader) == Some(200)
                    {}
                }
            })
        })
        .collect();
    // Every slot taken.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let answer = scrape(addr);
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for client in busy {
        client.join().unwrap();
    }
    assert_eq!(answer.status, 200, "{answer:?}");
    // 2 s of age, and a generous margin for a loaded machine.
    assert!(waited < Duration::from_secs(8), "the new scrape waited {waited:?}");
    exporter.stop_server();
}

#[test]
fn the_endpoint_answers_like_an_http_server() {
    let _serial = serial();
    let (exporter, _provider) = endpoint();
    let addr = exporter.local_addr();

    let get = scrape(addr);
    assert_eq!(get.status, 200);
    assert_eq!(get.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    assert!(get.body.contains(SAMPLE), "{}", get.body);
    assert!(get.body.starts_with("# HELP target_info"), "{}", get.body);

    // Keep-alive: HEAD (the GET's length, no body), then two GETs, on one
    // connection.
    let stream = connect(addr);
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer.write_all(b"HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let head = read_answer(&mut reader, true);
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.headers["content-length"], get.body.len().to_string());
    for _ in 0..2 {
        writer.write_all(b"GET /metrics?format=text HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let again = read_answer(&mut reader, false);
        assert_eq!(again.status, 200, "{again:?}");
        assert_eq!(again.body, get.body, "the same page on the kept-alive connection");
    }

    let not_found = ask(addr, b"GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", false);
    assert_eq!(not_found.status, 404, "{not_found:?}");
    assert!(not_found.body.contains("GET /metrics"), "{}", not_found.body);
    let post = ask(addr, b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n", false);
    assert_eq!(post.status, 405, "{post:?}");
    assert_eq!(post.headers["allow"], "GET, HEAD");

    let malformed = ask(addr, b"\x01\x02 nonsense\r\n\r\n", false);
    assert_eq!(malformed.status, 400, "{malformed:?}");
    let mut oversized = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ".to_vec();
    oversized.extend(std::iter::repeat_n(b'a', 20 * 1024));
    oversized.extend_from_slice(b"\r\n\r\n");
    let too_large = ask(addr, &oversized, false);
    assert_eq!(too_large.status, 431, "{too_large:?}");

    // HTTP/1.0 without a Host header: answered, then closed.
    let mut stream = connect(addr);
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("the server closes an HTTP/1.0 connection");
    assert!(raw.starts_with("HTTP/1.0 200") || raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains(SAMPLE));

    // After stop, nothing listens.
    exporter.stop_server();
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(), "stopped");
}
