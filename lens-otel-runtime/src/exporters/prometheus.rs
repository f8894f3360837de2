//! The `prometheus` metrics exporter: a pull endpoint.
//!
//! [`PrometheusExporter`] is a push metric exporter (cumulative temporality)
//! that keeps the page rendered from the latest batch, plus an HTTP/1.1
//! server (hyper, on a current-thread tokio runtime driven by one thread
//! named `lens-prometheus`): `GET /metrics` (and `HEAD`) answers with that
//! page in the text exposition format 0.0.4, another method on `/metrics`
//! gets 405, another path 404, a malformed request 400 and an oversized one
//! 431. Connections are served concurrently, with keep-alive, at most
//! [`PROMETHEUS_MAX_CONNECTIONS`] at a time (more wait in the listen
//! backlog), each closed when it has not sent a request's headers within
//! [`PROMETHEUS_HEADER_TIMEOUT`], so a client that connects and sends
//! nothing (a port scanner, a health checker) delays no scrape, and after
//! its answer once it is 2 s old, so busy keep-alive clients delay one by
//! 2 s at most.
//!
//! The server binds `host:(port + local_rank_offset)`; the offset is
//! [`prometheus_port_offset`]: the local rank when several ranks of one host
//! may export metrics, 0 when at most one does.
//!
//! Names follow the OpenTelemetry-to-Prometheus compatibility rules, which
//! give the names of the seed metrics page:
//!
//! - characters other than `[a-zA-Z0-9_:]` become `_` (so dots become
//!   underscores), and a leading digit gets a `_` prefix;
//! - the declared unit adds a suffix, unless the name already has it as a
//!   `_`-separated word: `ms` → `_milliseconds`, `s` → `_seconds`, `By` →
//!   `_bytes` (and the other units of the specification's table), `foo/s` →
//!   `_foo_per_second`, `1` → `_ratio` for gauges only; a part in braces
//!   (`{token}`) adds nothing; an unknown unit is added as written,
//!   sanitized;
//! - monotonic sums (counters) get `_total`; histograms expose
//!   `_bucket{le="..."}`, `_sum` and `_count`; non-monotonic sums are gauges.
//!
//! So `megatron.training.step_duration_ms` (unit `ms`) is exposed as
//! `megatron_training_step_duration_ms_milliseconds`, the counter
//! `megatron.training.skipped_iters` as `megatron_training_skipped_iters_total`
//! and the gauge `megatron.training.loss` as `megatron_training_loss`.
//!
//! Every series carries its data point's attributes, `otel_scope_name` (and
//! `otel_scope_version` when set), and the resource attributes named in
//! [`PrometheusSettings::resource_labels`] (default `nemo.run.id` and
//! `service.instance.id`, exposed as `nemo_run_id` and
//! `service_instance_id`), so that `{nemo_run_id="<id>"}` selects a run. A
//! `target_info` gauge carries every resource attribute.
//!
//! After shutdown the exporter keeps serving its last snapshot for
//! [`PrometheusSettings::linger`], so that a short run is still scraped;
//! [`PrometheusExporter::wait_linger`] blocks until then.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::{self, Write as _};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use tokio::sync::Semaphore;

use super::ExporterError;

/// How often the server looks for a stop request.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The most connections the endpoint serves at once; further ones wait in
/// the listen backlog until one ends.
pub const PROMETHEUS_MAX_CONNECTIONS: usize = 32;
/// How long a client may take to send a request's headers, and how long an
/// idle keep-alive connection stays open; then the connection is closed.
pub const PROMETHEUS_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection is kept at most: then it is closed after its
/// current answer (or [`PROMETHEUS_HEADER_TIMEOUT`] later, for a client that
/// does not read its answer). Short, so that clients that keep every slot
/// busy with keep-alive requests delay a new scrape by this much at most
/// (a scraper reconnects each scrape; keep-alive serves a burst).
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(2);
/// The read buffer of a connection: a request whose headers do not fit gets
/// 431 (hyper's minimum is 8 KiB).
const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// The path that serves the page.
pub const PROMETHEUS_METRICS_PATH: &str = "/metrics";
/// The content type of the page.
const PAGE_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The rank strategies under which at most one rank of a host exports
/// (without per-rank metrics), so the Prometheus port gets no local rank.
pub const ONE_EXPORTER_PER_HOST_STRATEGIES: [&str; 2] = ["first_rank_per_node", "single_rank"];

/// What is added to `OTEL_EXPORTER_PROMETHEUS_PORT` on this rank:
/// 0 when at most one rank of a host exports metrics, the local rank
/// otherwise, so that the exporting ranks of one host get distinct ports.
///
/// At most one rank per host exports under `single_rank` and
/// `first_rank_per_node` while per-rank metrics (`<PREFIX>_RANK_METRICS`,
/// with which every rank exports a few metrics) are off. Any other strategy
/// (`all_ranks`, `sampled`, a registered one) may have several exporting
/// ranks on a host; so may a strategy given in code, which has no name:
/// pass `None` for it.
///
/// ```
/// use lens_otel_runtime::exporters::prometheus_port_offset;
/// // The default strategy on local rank 7 of an 8-GPU node: the base port.
/// assert_eq!(prometheus_port_offset(Some("single_rank"), false, 7), 0);
/// // Every rank of the node exports: base + local rank.
/// assert_eq!(prometheus_port_offset(Some("all_ranks"), false, 7), 7);
/// assert_eq!(prometheus_port_offset(Some("single_rank"), true, 7), 7);
/// ```
pub fn prometheus_port_offset(rank_strategy: Option<&str>, rank_metrics: bool, local_rank: u32) -> u32 {
    let one_per_host = rank_strategy.is_some_and(|name| ONE_EXPORTER_PER_HOST_STRATEGIES.contains(&name));
    if one_per_host && !rank_metrics { 0 } else { local_rank }
}

/// Settings of the Prometheus endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrometheusSettings {
    /// The host to listen on (`OTEL_EXPORTER_PROMETHEUS_HOST`, default
    /// `localhost`).
    pub host: String,
    /// The base port (`OTEL_EXPORTER_PROMETHEUS_PORT`, default 9464); 0
    /// picks a free port (and then the offset is not added).
    pub port: u16,
    /// Added to the port: [`prometheus_port_offset`], the local rank when
    /// several ranks of one host may export, 0 otherwise.
    pub local_rank_offset: u32,
    /// Resource attributes copied onto every series as labels (dots become
    /// underscores).
    pub resource_labels: Vec<String>,
    /// How long to keep serving the last snapshot after shutdown.
    pub linger: Duration,
}

impl Default for PrometheusSettings {
    fn default() -> Self {
        PrometheusSettings {
            host: "localhost".into(),
            port: 9464,
            local_rank_offset: 0,
            resource_labels: vec!["nemo.run.id".into(), "service.instance.id".into()],
            linger: Duration::ZERO,
        }
    }
}

/// The Prometheus type of a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrometheusMetricKind {
    /// A monotonic sum.
    Counter,
    /// A gauge, or a non-monotonic sum.
    Gauge,
    /// An explicit-bucket histogram.
    Histogram,
}

impl PrometheusMetricKind {
    const fn as_str(self) -> &'static str {
        match self {
            PrometheusMetricKind::Counter => "counter",
            PrometheusMetricKind::Gauge => "gauge",
            PrometheusMetricKind::Histogram => "histogram",
        }
    }
}

/// Replaces every character outside `[a-zA-Z0-9_:]` with `_` and prefixes a
/// leading digit with `_`.
fn sanitize_metric_name(name: &str) -> String {
    let mut out: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// A label name: `[a-zA-Z0-9_]`, a leading digit prefixed with `key_`.
fn sanitize_label_name(name: &str) -> String {
    let out: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) { format!("key_{out}") } else { out }
}

fn main_unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        _ => return None,
    })
}

fn per_unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        _ => return None,
    })
}

/// Removes the parts in braces (`{token}/s` → `/s`).
fn strip_annotations(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    let mut depth = 0_u32;
    for c in unit.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.trim().to_owned()
}

fn unit_words(unit: &str, kind: PrometheusMetricKind) -> Vec<String> {
    let unit = strip_annotations(unit);
    if unit == "1" {
        return if kind == PrometheusMetricKind::Gauge { vec!["ratio".into()] } else { Vec::new() };
    }
    let (main, per) = match unit.split_once('/') {
        Some((main, per)) => (main.trim(), Some(per.trim())),
        None => (unit.as_str(), None),
    };
    let mut words = Vec::new();
    if !main.is_empty() && main != "1" {
        words.push(main_unit_word(main).map_or_else(|| sanitize_label_name(main), str::to_owned));
    }
    if let Some(per) = per.filter(|per| !per.is_empty()) {
        let per = per_unit_word(per).map_or_else(|| sanitize_label_name(per), str::to_owned);
        words.push(format!("per_{per}"));
    }
    words
}

/// The Prometheus name of an OpenTelemetry metric (the family name: a
/// histogram's series add `_bucket`, `_sum` and `_count`).
///
/// ```
/// use lens_otel_runtime::exporters::{PrometheusMetricKind, prometheus_metric_name};
/// let name = |n, u, k| prometheus_metric_name(n, u, k);
/// assert_eq!(
///     name("megatron.training.step_duration_ms", "ms", PrometheusMetricKind::Histogram),
///     "megatron_training_step_duration_ms_milliseconds"
/// );
/// assert_eq!(
///     name("megatron.training.skipped_iters", "", PrometheusMetricKind::Counter),
///     "megatron_training_skipped_iters_total"
/// );
/// assert_eq!(name("megatron.training.loss", "", PrometheusMetricKind::Gauge), "megatron_training_loss");
/// assert_eq!(name("rl.throughput.tokens_per_sec", "{token}/s", PrometheusMetricKind::Gauge),
///     "rl_throughput_tokens_per_sec_per_second");
/// assert_eq!(name("gen_ai.server.request.duration", "s", PrometheusMetricKind::Histogram),
///     "gen_ai_server_request_duration_seconds");
/// ```
pub fn prometheus_metric_name(name: &str, unit: &str, kind: PrometheusMetricKind) -> String {
    let mut out = sanitize_metric_name(name);
    for word in unit_words(unit, kind) {
        let has_word = out
            .split('_')
            .collect::<Vec<_>>()
            .windows(word.split('_').count())
            .any(|window| window.iter().copied().eq(word.split('_')));
        if !has_word {
            out.push('_');
            out.push_str(&word);
        }
    }
    if kind == PrometheusMetricKind::Counter && !out.ends_with("_total") {
        out.push_str("_total");
    }
    out
}

fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Formats a sample value: `NaN`, `+Inf`, `-Inf` or a plain number.
fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        value.to_string()
    }
}

/// Label pairs, in order, without duplicate names (the first wins).
#[derive(Clone, Default)]
struct Labels(Vec<(String, String)>);

impl Labels {
    fn push(&mut self, name: String, value: String) {
        if !self.0.iter().any(|(existing, _)| *existing == name) {
            self.0.push((name, value));
        }
    }

    fn render(&self, extra: Option<(&str, &str)>) -> String {
        let mut out = String::new();
        let pairs = self.0.iter().map(|(name, value)| (name.as_str(), value.as_str())).chain(extra);
        for (index, (name, value)) in pairs.enumerate() {
            out.push(if index == 0 { '{' } else { ',' });
            out.push_str(name);
            out.push_str("=\"");
            escape_label_value(value, &mut out);
            out.push('"');
        }
        if !out.is_empty() {
            out.push('}');
        }
        out
    }
}

struct Family {
    kind: PrometheusMetricKind,
    help: String,
    samples: String,
}

/// Renders one collection in the text exposition format 0.0.4.
fn render(metrics: &ResourceMetrics, resource_labels: &[String]) -> String {
    let resource = metrics.resource();
    let mut common = Labels::default();
    for key in resource_labels {
        if let Some(value) = resource.get(&opentelemetry::Key::from(key.clone())) {
            common.push(sanitize_label_name(key), value.as_str().into_owned());
        }
    }
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for scope_metrics in metrics.scope_metrics() {
        let scope = scope_labels(scope_metrics.scope());
        for metric in scope_metrics.metrics() {
            render_metric(metric, &scope, &common, &mut families);
        }
    }
    let mut out = String::new();
    render_target_info(resource, &mut out);
    for (name, family) in &families {
        if !family.help.is_empty() {
            let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help));
        }
        let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
        out.push_str(&family.samples);
    }
    out
}

fn render_target_info(resource: &Resource, out: &mut String) {
    let mut labels = Labels::default();
    let mut attributes: Vec<_> = resource.iter().collect();
    attributes.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    for (key, value) in attributes {
        labels.push(sanitize_label_name(key.as_str()), value.as_str().into_owned());
    }
    out.push_str("# HELP target_info Target metadata\n# TYPE target_info gauge\n");
    let _ = writeln!(out, "target_info{} 1", labels.render(None));
}

fn scope_labels(scope: &InstrumentationScope) -> Labels {
    let mut labels = Labels::default();
    labels.push("otel_scope_name".into(), scope.name().to_owned());
    if let Some(version) = scope.version().filter(|version| !version.is_empty()) {
        labels.push("otel_scope_version".into(), version.to_owned());
    }
    labels
}

fn point_labels<'a>(attributes: impl Iterator<Item = &'a KeyValue>, scope: &Labels, common: &Labels) -> Labels {
    let mut labels = Labels::default();
    for kv in attributes {
        labels.push(sanitize_label_name(kv.key.as_str()), kv.value.as_str().into_owned());
    }
    for (name, value) in scope.0.iter().chain(&common.0) {
        labels.push(name.clone(), value.clone());
    }
    labels
}

trait SampleValue: Copy {
    fn format(self) -> String;
}

impl SampleValue for f64 {
    fn format(self) -> String {
        format_float(self)
    }
}

impl SampleValue for u64 {
    fn format(self) -> String {
        self.to_string()
    }
}

impl SampleValue for i64 {
    fn format(self) -> String {
        self.to_string()
    }
}

fn render_metric(metric: &Metric, scope: &Labels, common: &Labels, families: &mut BTreeMap<String, Family>) {
    match metric.data() {
        AggregatedMetrics::F64(data) => render_data(metric, data, scope, common, families),
        AggregatedMetrics::U64(data) => render_data(metric, data, scope, common, families),
        AggregatedMetrics::I64(data) => render_data(metric, data, scope, common, families),
    }
}

fn render_data<T: SampleValue>(
    metric: &Metric,
    data: &MetricData<T>,
    scope: &Labels,
    common: &Labels,
    families: &mut BTreeMap<String, Family>,
) {
    let kind = match data {
        MetricData::Gauge(_) => PrometheusMetricKind::Gauge,
        MetricData::Sum(sum) if sum.is_monotonic() => PrometheusMetricKind::Counter,
        MetricData::Sum(_) => PrometheusMetricKind::Gauge,
        MetricData::Histogram(_) => PrometheusMetricKind::Histogram,
        // Exponential histograms have no 0.0.4 text form: not exposed.
        MetricData::ExponentialHistogram(_) => return,
    };
    let name = prometheus_metric_name(metric.name(), metric.unit(), kind);
    let family = families.entry(name.clone()).or_insert_with(|| Family {
        kind,
        help: metric.description().to_owned(),
        samples: String::new(),
    });
    if family.kind != kind {
        // Two instruments map to one name with different types: Prometheus
        // would reject the page, so the later one is left out.
        return;
    }
    let samples = &mut family.samples;
    match data {
        MetricData::Gauge(gauge) => {
            for point in gauge.data_points() {
                let labels = point_labels(point.attributes(), scope, common);
                let _ = writeln!(samples, "{name}{} {}", labels.render(None), point.value().format());
            }
        }
        MetricData::Sum(sum) => {
            for point in sum.data_points() {
                let labels = point_labels(point.attributes(), scope, common);
                let _ = writeln!(samples, "{name}{} {}", labels.render(None), point.value().format());
            }
        }
        MetricData::Histogram(histogram) => {
            for point in histogram.data_points() {
                let labels = point_labels(point.attributes(), scope, common);
                let mut cumulative = 0_u64;
                let bounds: Vec<f64> = point.bounds().collect();
                for (index, count) in point.bucket_counts().enumerate() {
                    cumulative = cumulative.saturating_add(count);
                    let le = bounds.get(index).map_or_else(|| "+Inf".to_owned(), |bound| format_float(*bound));
                    let _ = writeln!(samples, "{name}_bucket{} {cumulative}", labels.render(Some(("le", &le))));
                }
                if point.bucket_counts().count() <= bounds.len() {
                    let _ = writeln!(samples, "{name}_bucket{} {}", labels.render(Some(("le", "+Inf"))), point.count());
                }
                let _ = writeln!(samples, "{name}_sum{} {}", labels.render(None), point.sum().format());
                let _ = writeln!(samples, "{name}_count{} {}", labels.render(None), point.count());
            }
        }
        MetricData::ExponentialHistogram(_) => {}
    }
}

/// State shared by the exporter and the server thread.
struct Shared {
    resource_labels: Vec<String>,
    linger: Duration,
    /// The page rendered from the last export.
    page: Mutex<Bytes>,
    /// When shutdown happened (the linger period starts then).
    shut_down_at: Mutex<Option<Instant>>,
    stop: AtomicBool,
    /// Whether the server listens (false while its port is in use).
    serving: AtomicBool,
}

impl Shared {
    fn shut_down_at(&self) -> Option<Instant> {
        *self.shut_down_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the server should stop now.
    fn finished(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.shut_down_at().is_some_and(|at| at.elapsed() >= self.linger)
    }

    fn page(&self) -> Bytes {
        self.page.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// The handle that users hold; dropping the last one stops the server
/// unless it is lingering after shutdown.
struct Owner {
    shared: Arc<Shared>,
    address: SocketAddr,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if self.shared.shut_down_at().is_none() {
            self.shared.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// The Prometheus pull exporter: a push metric exporter (give one clone to
/// the periodic reader) that keeps the page rendered from the latest
/// cumulative batch, and the `/metrics` server that serves it.
///
/// Scrapes see the values of the last export, so they are at most one
/// export interval old (`OTEL_METRIC_EXPORT_INTERVAL`, 10 s by default);
/// the reader's final export at shutdown gives the final values. (The SDK's
/// `ManualReader`, which would collect on each scrape, needs its
/// `experimental_metrics_custom_reader` feature in 0.33.1.)
///
/// ```
/// use lens_otel_runtime::exporters::{PrometheusExporter, PrometheusSettings};
/// use opentelemetry::metrics::MeterProvider as _;
/// use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
/// use std::io::{Read, Write};
///
/// let settings = PrometheusSettings { host: "127.0.0.1".into(), port: 0, ..PrometheusSettings::default() };
/// let exporter = PrometheusExporter::start(&settings)?;
/// let provider =
///     SdkMeterProvider::builder().with_reader(PeriodicReader::builder(exporter.clone()).build()).build();
/// provider.meter("demo").f64_gauge("megatron.training.loss").build().record(2.5, &[]);
/// provider.force_flush()?;
///
/// let mut stream = std::net::TcpStream::connect(exporter.local_addr())?;
/// stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
/// let mut page = String::new();
/// stream.read_to_string(&mut page)?;
/// assert!(page.contains("\nmegatron_training_loss{otel_scope_name=\"demo\"} 2.5\n"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct PrometheusExporter {
    owner: Arc<Owner>,
}

impl fmt::Debug for PrometheusExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrometheusExporter").field("address", &self.owner.address).finish_non_exhaustive()
    }
}

impl PrometheusExporter {
    /// Binds `host:(port + local_rank_offset)` (`host:0`, a free port, when
    /// the port is 0) and starts the `lens-prometheus` server thread.
    ///
    /// A host that does not resolve, or an address that cannot be bound
    /// (no permission, not an address of this host), is an error naming
    /// `OTEL_EXPORTER_PROMETHEUS_HOST` or `OTEL_EXPORTER_PROMETHEUS_PORT`.
    /// A port in use is not: it is warned about, and the server binds it
    /// once it is free (tried every second).
    pub fn start(settings: &PrometheusSettings) -> Result<PrometheusExporter, ExporterError> {
        let offset = if settings.port == 0 { 0 } else { settings.local_rank_offset };
        let port = u32::from(settings.port).saturating_add(offset);
        let display = format!("{}:{port}", settings.host);
        let port = u16::try_from(port).map_err(|_| ExporterError::PrometheusBind {
            variable: PORT_VARIABLE,
            remedy: "choose a base port that leaves room for the local ranks (each serves the port plus its local rank)",
            address: display.clone(),
            source: std::io::Error::new(ErrorKind::InvalidInput, "port out of range"),
        })?;
        let addresses: Vec<SocketAddr> = (settings.host.as_str(), port)
            .to_socket_addrs()
            .map_err(|error| ExporterError::PrometheusHost { host: settings.host.clone(), reason: error.to_string() })?
            .collect();
        let mut last_error = std::io::Error::new(ErrorKind::AddrNotAvailable, "no address");
        let mut listener = None;
        // The first address whose port is in use (`localhost` may resolve
        // to an IPv6 address this host lacks and an IPv4 one in use).
        let mut in_use = None;
        for address in &addresses {
            match TcpListener::bind(address) {
                Ok(bound) => {
                    listener = Some(bound);
                    break;
                }
                Err(error) => {
                    if error.kind() == ErrorKind::AddrInUse && in_use.is_none() {
                        in_use = Some(*address);
                    }
                    last_error = error;
                }
            }
        }
        let bind_error = |source: std::io::Error| {
            let (variable, remedy) = match source.kind() {
                ErrorKind::AddrNotAvailable => (HOST_VARIABLE, "give an address of this host (or 0.0.0.0)"),
                ErrorKind::PermissionDenied => (PORT_VARIABLE, "choose a port of 1024 or above"),
                _ => (PORT_VARIABLE, "choose another port (each rank of a host serves the port plus its local rank)"),
            };
            ExporterError::PrometheusBind { variable, remedy, address: display.clone(), source }
        };
        // A port in use (a previous run still lingering, another job) is
        // not the job's to fail for: the server thread binds it once it is
        // free (the values are cumulative: the first scrape after gets them
        // all).
        let (listener, address, waiting) = match (listener, in_use) {
            (Some(listener), _) => {
                let address = listener.local_addr().map_err(bind_error)?;
                listener.set_nonblocking(true).map_err(bind_error)?;
                (Some(listener), address, false)
            }
            (None, Some(address)) if port != 0 => {
                crate::diag::warn(format_args!(
                    "cannot serve Prometheus metrics on {address} yet (the port is in use; {PORT_VARIABLE}): lens \
                     tries again every second and serves them there once it is free; until then scrapes reach \
                     whatever holds the port (a previous run's last page, say)"
                ));
                (None, address, true)
            }
            (None, _) => return Err(bind_error(last_error)),
        };

        let runtime_error =
            |error: std::io::Error| ExporterError::Runtime { reason: format!("cannot start lens-prometheus: {error}") };
        // One current-thread runtime, driven by the server thread only: no
        // worker or blocking-pool threads.
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().map_err(runtime_error)?;
        let listener = match listener {
            Some(listener) => {
                let _context = runtime.enter();
                Some(tokio::net::TcpListener::from_std(listener).map_err(bind_error)?)
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            resource_labels: settings.resource_labels.clone(),
            linger: settings.linger,
            page: Mutex::new(Bytes::new()),
            shut_down_at: Mutex::new(None),
            stop: AtomicBool::new(false),
            serving: AtomicBool::new(!waiting),
        });
        let server = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("lens-prometheus".into())
            .spawn(move || {
                crate::export_path::mark_thread();
                runtime.block_on(async move {
                    let listener = match listener {
                        Some(listener) => listener,
                        None => match bind_when_free(address, &server).await {
                            Some(listener) => {
                                server.serving.store(true, Ordering::Relaxed);
                                listener
                            }
                            None => return,
                        },
                    };
                    serve(listener, server).await;
                });
                // Dropping the runtime drops the connections still open.
                drop(runtime);
            })
            .map_err(runtime_error)?;
        Ok(PrometheusExporter { owner: Arc::new(Owner { shared, address, thread: Mutex::new(Some(thread)) }) })
    }

    /// The address the server listens on (or, while its port is in use,
    /// will listen on: [`is_serving`](Self::is_serving)).
    pub fn local_addr(&self) -> SocketAddr {
        self.owner.address
    }

    /// Whether the server listens now: false while the port it was given is
    /// in use (it binds it once it is free).
    pub fn is_serving(&self) -> bool {
        self.owner.shared.serving.load(Ordering::Relaxed)
    }

    /// After shutdown: blocks until the linger period is over and the server
    /// has stopped. Before shutdown: returns at once.
    pub fn wait_linger(&self) {
        let shared = &self.owner.shared;
        let Some(at) = shared.shut_down_at() else { return };
        // Never bound (its port stayed in use): nothing of this process can
        // be scraped, and the job's exit waits for nothing.
        if !self.is_serving() {
            self.stop_server();
            return;
        }
        std::thread::sleep(shared.linger.saturating_sub(at.elapsed()));
        self.stop_server();
    }

    /// Stops the server now (closing its connections) and waits for its
    /// thread.
    pub fn stop_server(&self) {
        self.owner.shared.stop.store(true, Ordering::Relaxed);
        let thread = self.owner.thread.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl PushMetricExporter for PrometheusExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let shared = &self.owner.shared;
        let page = Bytes::from(render(metrics, &shared.resource_labels));
        *shared.page.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = page;
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        let mut at = self.owner.shared.shut_down_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        at.get_or_insert_with(Instant::now);
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// How often a port in use is tried again.
const BIND_RETRY: Duration = Duration::from_secs(1);

/// The variables a bind error names.
const PORT_VARIABLE: &str = "OTEL_EXPORTER_PROMETHEUS_PORT";
const HOST_VARIABLE: &str = "OTEL_EXPORTER_PROMETHEUS_HOST";

/// Binds `address` once it is free, trying every [`BIND_RETRY`] until the
/// server is finished (`None` then, or on an error other than the port in
/// use, which is warned about). A stop is seen within [`POLL_INTERVAL`].
async fn bind_when_free(address: SocketAddr, shared: &Shared) -> Option<tokio::net::TcpListener> {
    let mut next_try = Instant::now() + BIND_RETRY;
    while !shared.finished() {
        if Instant::now() < next_try {
            tokio::time::sleep(POLL_INTERVAL).await;
            continue;
        }
        next_try = Instant::now() + BIND_RETRY;
        match tokio::net::TcpListener::bind(address).await {
            Ok(listener) => {
                crate::diag::note(format_args!("serving Prometheus metrics on {address} now (the port is free)"));
                return Some(listener);
            }
            Err(error) if error.kind() == ErrorKind::AddrInUse => {}
            Err(error) => {
                let variable = if error.kind() == ErrorKind::AddrNotAvailable { HOST_VARIABLE } else { PORT_VARIABLE };
                crate::diag::warn(format_args!(
                    "cannot serve Prometheus metrics on {address} ({error}; {variable}): lens stops trying"
                ));
                return None;
            }
        }
    }
    None
}

/// The accept loop: each connection in a task of its own, at most
/// [`PROMETHEUS_MAX_CONNECTIONS`] at a time; looks for a stop request every
/// [`POLL_INTERVAL`].
async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(PROMETHEUS_MAX_CONNECTIONS));
    while !shared.finished() {
        // The semaphore is never closed: an error cannot happen.
        let Ok(Ok(slot)) = tokio::time::timeout(POLL_INTERVAL, Arc::clone(&slots).acquire_owned()).await else {
            continue;
        };
        match tokio::time::timeout(POLL_INTERVAL, listener.accept()).await {
            Ok(Ok((stream, _))) => {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    connection(stream, shared).await;
                    drop(slot);
                });
            }
            // Out of file descriptors, or the peer gave up: try again later.
            Ok(Err(_)) => tokio::time::sleep(POLL_INTERVAL).await,
            Err(_) => {}
        }
    }
}

/// Serves one connection (HTTP/1.1, keep-alive) until the client closes it,
/// sends no request headers for [`PROMETHEUS_HEADER_TIMEOUT`], or it is
/// [`MAX_CONNECTION_AGE`] old.
async fn connection(stream: tokio::net::TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let response = respond(request.method(), request.uri().path(), &shared);
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(PROMETHEUS_HEADER_TIMEOUT)
        .max_buf_size(MAX_REQUEST_BYTES)
        // `Content-Type`, as the old server wrote it, for clients that match
        // header names by case.
        .title_case_headers(true)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    if tokio::time::timeout(MAX_CONNECTION_AGE, connection.as_mut()).await.is_err() {
        connection.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(PROMETHEUS_HEADER_TIMEOUT, connection).await;
    }
}

/// The answer to `method path` (hyper leaves the body out for `HEAD`).
fn respond(method: &Method, path: &str, shared: &Shared) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *response.status_mut() = status;
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        response
    };
    if path != PROMETHEUS_METRICS_PATH {
        return text(StatusCode::NOT_FOUND, "not found: lens serves GET /metrics\n");
    }
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: lens serves GET /metrics\n");
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = Response::new(Full::new(shared.page()));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(PAGE_CONTENT_TYPE));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_suffixes_follow_the_specification() {
        use PrometheusMetricKind::{Counter, Gauge, Histogram};
        for (name, unit, kind, expected) in [
            ("megatron.training.step_duration_ms", "ms", Histogram, "megatron_training_step_duration_ms_milliseconds"),
            ("megatron.training.skipped_iters", "", Counter, "megatron_training_skipped_iters_total"),
            ("megatron.training.loss", "", Gauge, "megatron_training_loss"),
            ("gym.verify.success_rate", "1", Gauge, "gym_verify_success_rate_ratio"),
            ("requests", "1", Counter, "requests_total"),
            ("gen_ai.client.token.usage", "{token}", Histogram, "gen_ai_client_token_usage"),
            ("memory.used", "By", Gauge, "memory_used_bytes"),
            ("request.duration_seconds", "s", Histogram, "request_duration_seconds"),
            ("errors_total", "", Counter, "errors_total"),
            ("throughput", "TFLOP/s", Gauge, "throughput_TFLOP_per_second"),
            ("9lives", "", Gauge, "_9lives"),
        ] {
            assert_eq!(prometheus_metric_name(name, unit, kind), expected, "{name} [{unit}]");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let mut labels = Labels::default();
        labels.push("a".into(), "x\"y\\z\nw".into());
        assert_eq!(labels.render(Some(("le", "+Inf"))), r#"{a="x\"y\\z\nw",le="+Inf"}"#);
        assert_eq!(sanitize_label_name("nemo.run.id"), "nemo_run_id");
        assert_eq!(sanitize_label_name("1x"), "key_1x");
    }
}
