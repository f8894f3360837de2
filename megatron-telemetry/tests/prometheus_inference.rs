//! The inference server's metrics as a Prometheus server scrapes them:
//! telemetry set up with `OTEL_METRICS_EXPORTER=prometheus`, one request
//! recorded through [`ServerMetrics`], and `GET /metrics` read over a plain
//! TCP connection. The Prometheus names are spelled out here (and are the
//! ones docs/serving.md lists), so that a drift of the table is caught.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use lens_fallbacks::config::{ExporterKind, LensConfig};
use lens_fallbacks::{RankContext, SetupOptions, setup_telemetry};
use megatron_telemetry::inference::{RequestValues, SERVER_METRICS, ServerMetrics};

/// The families and their `# TYPE`.
const FAMILIES: [(&str, &str); 6] = [
    ("gen_ai_server_request_duration_seconds", "histogram"),
    ("gen_ai_server_time_to_first_token_seconds", "histogram"),
    ("gen_ai_server_time_per_output_token_seconds", "histogram"),
    ("gen_ai_client_token_usage", "histogram"),
    ("megatron_inference_requests_running", "gauge"),
    ("megatron_inference_requests_waiting", "gauge"),
];

fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to /metrics");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the /metrics answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer with a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

#[test]
fn the_server_metrics_have_the_documented_prometheus_names_and_values() {
    let mut config = LensConfig { enabled: true, traces_enabled: false, ..LensConfig::default() };
    config.otel.metrics_exporter = Some(ExporterKind::Prometheus);
    config.otel.prometheus_host = "127.0.0.1".into();
    config.otel.prometheus_port = 0;
    config.otel.metric_export_interval = Duration::from_millis(100);
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), SetupOptions::new())
        .expect("setup with the Prometheus exporter");
    let addr: SocketAddr = telemetry
        .destinations()
        .iter()
        .find_map(|d| d.strip_prefix("metrics: Prometheus http://")?.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no Prometheus destination in {:?}", telemetry.destinations()))
        .parse()
        .expect("the bound address");

    let metrics = ServerMetrics::new(telemetry.meter());
    metrics.waiting_add(1);
    metrics.waiting_add(-1);
    metrics.running_add(1);
    metrics.record_request(&RequestValues {
        operation: "text_completion",
        model: "megatron-sim",
        duration_s: 0.3,
        time_to_first_token_s: Some(0.03),
        time_per_output_token_s: Some(0.012),
        input_tokens: 12,
        output_tokens: 40,
    });

    let deadline = Instant::now() + Duration::from_secs(10);
    let page = loop {
        let _ = telemetry.force_flush(Duration::from_secs(5));
        let page = scrape(addr);
        if page.contains("gen_ai_client_token_usage_sum{") || Instant::now() >= deadline {
            break page;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let types: BTreeMap<&str, &str> = page
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .filter(|(name, _)| name.starts_with("gen_ai") || name.starts_with("megatron_inference"))
        .collect();
    assert_eq!(types, FAMILIES.into_iter().collect::<BTreeMap<_, _>>(), "page:\n{page}");
    let table: BTreeSet<&str> = SERVER_METRICS.iter().map(|def| def.prometheus).collect();
    assert_eq!(table, FAMILIES.into_iter().map(|(name, _)| name).collect::<BTreeSet<_>>());
    // `# HELP` is each instrument's description (lens-instruments' for the
    // GenAI histograms).
    for def in SERVER_METRICS {
        let help = format!("# HELP {} {}", def.prometheus, def.description);
        assert!(page.lines().any(|line| line == help), "no `{help}` in:\n{page}");
    }

    let samples: Vec<&str> = page.lines().filter(|line| !line.starts_with('#')).collect();
    let value = |name: &str, label: &str| -> f64 {
        let line = samples
            .iter()
            .find(|line| line.starts_with(&format!("{name}{{")) && line.contains(label))
            .unwrap_or_else(|| panic!("no {name} with {label} in:\n{page}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("gen_ai_client_token_usage_sum", "gen_ai_token_type=\"input\""), 12.0);
    assert_eq!(value("gen_ai_client_token_usage_sum", "gen_ai_token_type=\"output\""), 40.0);
    assert_eq!(value("gen_ai_server_time_to_first_token_seconds_count", "gen_ai_provider_name=\"nemo\""), 1.0);
    // 30 ms is above the 20 ms boundary and within the 40 ms one.
    assert_eq!(value("gen_ai_server_time_to_first_token_seconds_bucket", "le=\"0.02\""), 0.0);
    assert_eq!(value("gen_ai_server_time_to_first_token_seconds_bucket", "le=\"0.04\""), 1.0);
    assert_eq!(value("megatron_inference_requests_running", ""), 1.0);
    assert_eq!(value("megatron_inference_requests_waiting", ""), 0.0);
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.completed(), "{report:?}");
}
