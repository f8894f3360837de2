//! The training metrics as a Prometheus server scrapes them (issue 4, "Done
//! means"): telemetry set up through the facade with
//! `OTEL_METRICS_EXPORTER=prometheus`, the eight values recorded through
//! [`TrainingMetrics`], and `GET /metrics` read over a plain TCP connection.
//! The exposition must have exactly the seed page's metric names, the right
//! `# TYPE` lines and the run id as the `nemo_run_id` label, so that the
//! seed's queries (`{nemo_run_id="<id>", __name__=~"megatron_training_.*"}`)
//! work as written. The names are spelled out here, not read from
//! [`megatron_telemetry::metrics::METRICS`], so that a drift of the table is
//! caught too.
//!
//! A second test shows that a rank that does not export records nothing.
//!
//! Telemetry is process-global (one active lifetime at a time), so the tests
//! of this file take a lock and every handle is shut down (also on unwind:
//! dropping the handle shuts it down).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lens_fallbacks::config::{ExporterKind, LensConfig};
use lens_fallbacks::{RankContext, SetupOptions, setup_telemetry};
use megatron_telemetry::metrics::{METRICS, TrainingMetrics, TrainingValues};

const RUN_ID: &str = "prom-seed-names-run";

/// The seed's Prometheus names, with their `# TYPE`.
const SEED_FAMILIES: [(&str, &str); 8] = [
    ("megatron_training_step_duration_ms_milliseconds", "histogram"),
    ("megatron_training_loss", "gauge"),
    ("megatron_training_throughput_tflops", "gauge"),
    ("megatron_training_tokens_per_sec", "gauge"),
    ("megatron_training_grad_norm", "gauge"),
    ("megatron_training_learning_rate", "gauge"),
    ("megatron_training_memory_allocated_gb", "gauge"),
    ("megatron_training_skipped_iters_total", "counter"),
];

/// The sample names the seed's queries select: the histogram as its
/// `_bucket`, `_sum` and `_count` series, the others as themselves.
const SEED_SAMPLE_NAMES: [&str; 10] = [
    "megatron_training_step_duration_ms_milliseconds_bucket",
    "megatron_training_step_duration_ms_milliseconds_sum",
    "megatron_training_step_duration_ms_milliseconds_count",
    "megatron_training_loss",
    "megatron_training_throughput_tflops",
    "megatron_training_tokens_per_sec",
    "megatron_training_grad_norm",
    "megatron_training_learning_rate",
    "megatron_training_memory_allocated_gb",
    "megatron_training_skipped_iters_total",
];

/// Every value present, so that every instrument has a data point.
const ALL_VALUES: TrainingValues = TrainingValues {
    step_duration_ms: Some(812.5),
    loss: Some(2.25),
    throughput_tflops: Some(123.5),
    grad_norm: Some(1.5),
    skipped_iters: Some(3),
    learning_rate: Some(0.0003),
    tokens_per_sec: Some(40960.0),
    memory_allocated_gb: Some(17.5),
};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Metrics on, traces off, the Prometheus pull exporter on a free loopback
/// port, a short export interval.
fn prometheus_config() -> LensConfig {
    let mut config = LensConfig { enabled: true, traces_enabled: false, ..LensConfig::default() };
    config.otel.metrics_exporter = Some(ExporterKind::Prometheus);
    config.otel.prometheus_host = "127.0.0.1".into();
    config.otel.prometheus_port = 0;
    config.otel.metric_export_interval = Duration::from_millis(100);
    config
}

fn env_with_run_id() -> BTreeMap<String, String> {
    BTreeMap::from([("NEMO_LENS_RUN_ID".to_owned(), RUN_ID.to_owned())])
}

/// `GET /metrics` over a plain connection, with bounded timeouts; the body.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to /metrics");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the /metrics answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer with a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The metric name of a sample line (up to the labels or the value).
fn sample_name(line: &str) -> &str {
    line.split(['{', ' ']).next().unwrap_or(line)
}

#[test]
fn the_exposition_has_exactly_the_seed_names_types_and_run_label() {
    let _serial = serial();
    let telemetry = setup_telemetry(
        &prometheus_config(),
        &RankContext::SINGLE,
        Vec::new(),
        SetupOptions::new().with_env(env_with_run_id()),
    )
    .expect("setup with the Prometheus exporter");
    assert!(telemetry.is_exporting());
    assert_eq!(telemetry.run_id(), RUN_ID);
    let addr: SocketAddr = telemetry
        .destinations()
        .iter()
        .find_map(|d| d.strip_prefix("metrics: Prometheus http://")?.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no Prometheus destination in {:?}", telemetry.destinations()))
        .parse()
        .expect("the bound address");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");

    let metrics = TrainingMetrics::new(telemetry.meter());
    assert!(!metrics.is_noop());
    metrics.record(&ALL_VALUES);

    // The flush hands the batch to the exporter, which renders the page; the
    // periodic reader exports too, so wait (bounded) for the page to show it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let page = loop {
        let report = telemetry.force_flush(Duration::from_secs(5));
        assert!(report.errors.is_empty(), "{report:?}");
        let page = scrape(addr);
        if page.contains("megatron_training_loss{") || Instant::now() >= deadline {
            break page;
        }
        std::thread::sleep(Duration::from_millis(50));
    };

    // Exactly the seed's sample names, and no other megatron series.
    let samples: Vec<&str> = page.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()).collect();
    let names: BTreeSet<&str> =
        samples.iter().map(|line| sample_name(line)).filter(|name| name.starts_with("megatron")).collect();
    assert_eq!(names, SEED_SAMPLE_NAMES.into_iter().collect::<BTreeSet<_>>(), "page:\n{page}");

    // The `# TYPE` of every family, and no other megatron family.
    let types: BTreeMap<&str, &str> = page
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .filter(|(name, _)| name.starts_with("megatron"))
        .collect();
    assert_eq!(types, SEED_FAMILIES.into_iter().collect::<BTreeMap<_, _>>(), "page:\n{page}");

    // The crate's table agrees with the seed.
    let table: BTreeSet<&str> = METRICS.iter().map(|def| def.prometheus_name).collect();
    assert_eq!(table, SEED_FAMILIES.into_iter().map(|(name, _)| name).collect::<BTreeSet<_>>());

    // Every megatron series carries the run id, as the seed's queries select.
    let run_label = format!("nemo_run_id=\"{RUN_ID}\"");
    for line in samples.iter().filter(|line| sample_name(line).starts_with("megatron")) {
        assert!(line.contains(&run_label), "no {run_label} on: {line}");
    }

    // The recorded values, as a scraper reads them.
    let value_of = |name: &str| -> f64 {
        let line = samples.iter().find(|line| sample_name(line) == name).unwrap_or_else(|| panic!("no {name}"));
        line.rsplit(' ').next().unwrap().parse().unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    assert_eq!(value_of("megatron_training_loss"), 2.25);
    assert_eq!(value_of("megatron_training_throughput_tflops"), 123.5);
    assert_eq!(value_of("megatron_training_tokens_per_sec"), 40960.0);
    assert_eq!(value_of("megatron_training_grad_norm"), 1.5);
    assert_eq!(value_of("megatron_training_learning_rate"), 0.0003);
    assert_eq!(value_of("megatron_training_memory_allocated_gb"), 17.5);
    assert_eq!(value_of("megatron_training_skipped_iters_total"), 3.0);
    assert_eq!(value_of("megatron_training_step_duration_ms_milliseconds_sum"), 812.5);
    assert_eq!(value_of("megatron_training_step_duration_ms_milliseconds_count"), 1.0);
    // The sample falls into the 1000 ms bucket, not the 500 ms one.
    let bucket = |le: &str| -> f64 {
        let line = samples
            .iter()
            .find(|line| {
                sample_name(line) == "megatron_training_step_duration_ms_milliseconds_bucket"
                    && line.contains(&format!("le=\"{le}\""))
            })
            .unwrap_or_else(|| panic!("no bucket le={le} in:\n{page}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!((bucket("500"), bucket("1000"), bucket("+Inf")), (0.0, 1.0, 1.0));

    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.completed(), "{report:?}");
    assert!(report.metrics.points_exported > 0, "{report:?}");
}

/// Rank 0 of 2 under `single_rank` (which exports from the last rank) gets a
/// no-op meter: recording through it reaches no exporter. The same setup on
/// rank 1, the exporting one, is the control: the same custom exporter then
/// receives the training metrics.
#[test]
fn a_non_exporting_rank_records_nothing() {
    use opentelemetry_sdk::metrics::InMemoryMetricExporter;

    let _serial = serial();
    let record_on = |rank: u32| -> (bool, Vec<String>, u64) {
        let config = LensConfig { rank_strategy: "single_rank".into(), ..prometheus_config() };
        let exporter = InMemoryMetricExporter::default();
        let options = SetupOptions::new().with_env(env_with_run_id()).with_metric_exporter(exporter.clone());
        let ctx = RankContext { rank, world_size: 2, local_rank: rank, node_rank: None };
        let telemetry = setup_telemetry(&config, &ctx, Vec::new(), options).expect("setup");
        let exporting = telemetry.is_exporting();
        let metrics = TrainingMetrics::new(telemetry.meter());
        metrics.record(&ALL_VALUES);
        telemetry.force_flush(Duration::from_secs(5));
        let report = telemetry.shutdown(Duration::from_secs(5));
        let names: BTreeSet<String> = exporter
            .get_finished_metrics()
            .unwrap_or_default()
            .iter()
            .flat_map(|batch| batch.scope_metrics().flat_map(|scope| scope.metrics().map(|m| m.name().to_owned())))
            .collect();
        (exporting, names.into_iter().collect(), report.metrics.points_exported)
    };

    let (exporting, names, exported) = record_on(0);
    assert!(!exporting);
    assert!(names.is_empty(), "a non-exporting rank exported {names:?}");
    assert_eq!(exported, 0);

    let (exporting, names, exported) = record_on(1);
    assert!(exporting);
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(names.iter().all(|name| name.starts_with("megatron.training.")), "{names:?}");
    assert!(exported > 0);
}

/// The goodput and MFU gauges as Prometheus scrapes them: the names of
/// `docs/metrics-megatron.md` (spelled out here, and compared with
/// lens-training's table), one `dl_goodput_time_seconds` series per bucket
/// labelled `dl_goodput_bucket`, and the run id label.
#[test]
fn the_goodput_gauges_have_the_documented_prometheus_names() {
    use lens_training::goodput::{Accountant, Bucket, GOODPUT_METRICS, GoodputMetrics, GoodputTotals};

    const GOODPUT_FAMILIES: [(&str, &str); 3] =
        [("dl_goodput_time_seconds", "gauge"), ("dl_goodput_ratio", "gauge"), ("dl_training_mfu", "gauge")];
    let _serial = serial();
    let telemetry = setup_telemetry(
        &prometheus_config(),
        &RankContext::SINGLE,
        Vec::new(),
        SetupOptions::new().with_env(env_with_run_id()),
    )
    .expect("setup with the Prometheus exporter");
    let addr: SocketAddr = telemetry
        .destinations()
        .iter()
        .find_map(|d| d.strip_prefix("metrics: Prometheus http://")?.strip_suffix("/metrics"))
        .expect("a Prometheus destination")
        .parse()
        .expect("the bound address");
    let mut goodput = Accountant::new(GoodputTotals::default());
    goodput.training_started(2.0);
    goodput.iteration_completed(3.0);
    goodput.begin(Bucket::CheckpointSave, 3.0);
    let covers = goodput.coverage(3.0);
    goodput.end(Bucket::CheckpointSave, 3.5);
    goodput.checkpoint_durable(covers, 3.5);
    goodput.iteration_completed(4.0);
    let metrics = GoodputMetrics::new(telemetry.meter());
    metrics.record(&goodput.snapshot(4.0), Some(0.375));

    let deadline = Instant::now() + Duration::from_secs(10);
    let page = loop {
        telemetry.force_flush(Duration::from_secs(5));
        let page = scrape(addr);
        if page.contains("dl_training_mfu{") || Instant::now() >= deadline {
            break page;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let types: BTreeMap<&str, &str> = page
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .filter(|(name, _)| name.starts_with("dl_"))
        .collect();
    assert_eq!(types, GOODPUT_FAMILIES.into_iter().collect::<BTreeMap<_, _>>(), "page:\n{page}");
    let table: BTreeSet<&str> = GOODPUT_METRICS.iter().map(|def| def.prometheus_name).collect();
    assert_eq!(table, GOODPUT_FAMILIES.into_iter().map(|(name, _)| name).collect::<BTreeSet<_>>());

    let run_label = format!("nemo_run_id=\"{RUN_ID}\"");
    let value_of = |name: &str, label: &str| -> f64 {
        let line = page
            .lines()
            .find(|line| sample_name(line) == name && line.contains(label) && line.contains(&run_label))
            .unwrap_or_else(|| panic!("no {name} with {label} and {run_label} in:\n{page}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    for bucket in Bucket::ALL {
        let label = format!("dl_goodput_bucket=\"{}\"", bucket.as_str());
        let expected = match bucket {
            Bucket::Startup => 2.0,
            Bucket::Productive => 1.0,
            Bucket::CheckpointSave => 0.5,
            Bucket::Pending => 0.5,
            _ => 0.0,
        };
        assert_eq!(value_of("dl_goodput_time_seconds", &label), expected, "{bucket:?}");
    }
    assert_eq!(value_of("dl_goodput_ratio", ""), 0.25);
    assert_eq!(value_of("dl_training_mfu", ""), 0.375);
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.completed(), "{report:?}");
}
