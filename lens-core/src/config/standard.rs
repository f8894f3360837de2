//! The standard `OTEL_*` variables, typed.
//!
//! The OpenTelemetry SDK reads no environment on its own in lens: the
//! runtime builds every provider and exporter from these settings, so each
//! variable is read exactly once, validated with the rest of the
//! configuration, and can be injected in tests.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::headers::Headers;

/// One OpenTelemetry signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Spans.
    Traces,
    /// Metric points.
    Metrics,
    /// Log records.
    Logs,
}

impl Signal {
    /// The three signals, in this order.
    pub const ALL: [Signal; 3] = [Signal::Traces, Signal::Metrics, Signal::Logs];

    /// `traces`, `metrics` or `logs` (as in `/v1/traces`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
        }
    }

    /// `TRACES`, `METRICS` or `LOGS` (as in `OTEL_TRACES_EXPORTER`).
    pub const fn env_name(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
            Signal::Logs => "LOGS",
        }
    }

    /// The OTLP/HTTP path appended to the general endpoint: `/v1/traces`,
    /// `/v1/metrics` or `/v1/logs`.
    pub const fn http_path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
            Signal::Logs => "/v1/logs",
        }
    }

    /// The per-signal endpoint variable, e.g.
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
    pub const fn endpoint_variable(self) -> &'static str {
        match self {
            Signal::Traces => "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            Signal::Metrics => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            Signal::Logs => "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a signal goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExporterKind {
    /// OTLP to a collector or backend (`otlp`).
    Otlp,
    /// Compact JSON lines on standard output (`console`).
    Console,
    /// OTLP/JSON lines per signal and rank under the file directory (`file`).
    File,
    /// A pull endpoint for Prometheus (`prometheus`, metrics only).
    Prometheus,
    /// Nothing (`none`, per-signal variables only).
    None,
}

impl ExporterKind {
    /// The names `<PREFIX>_EXPORTER` accepts (it sets every signal).
    pub const ALL_SIGNALS_NAMES: &'static [&'static str] = &["otlp", "console", "file"];
    /// The names `OTEL_TRACES_EXPORTER` and `OTEL_LOGS_EXPORTER` accept.
    pub const TRACES_LOGS_NAMES: &'static [&'static str] = &["otlp", "console", "file", "none"];
    /// The names `OTEL_METRICS_EXPORTER` accepts.
    pub const METRICS_NAMES: &'static [&'static str] = &["otlp", "console", "file", "prometheus", "none"];

    /// The exporter's name in the variables.
    pub const fn as_str(self) -> &'static str {
        match self {
            ExporterKind::Otlp => "otlp",
            ExporterKind::Console => "console",
            ExporterKind::File => "file",
            ExporterKind::Prometheus => "prometheus",
            ExporterKind::None => "none",
        }
    }

    /// The exporter named `name` (case-insensitive), if any.
    pub fn from_name(name: &str) -> Option<ExporterKind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "otlp" => Some(ExporterKind::Otlp),
            "console" => Some(ExporterKind::Console),
            "file" => Some(ExporterKind::File),
            "prometheus" => Some(ExporterKind::Prometheus),
            "none" => Some(ExporterKind::None),
            _ => None,
        }
    }

    /// The names accepted for `signal` in its `OTEL_<SIGNAL>_EXPORTER`.
    pub const fn names_for(signal: Signal) -> &'static [&'static str] {
        match signal {
            Signal::Metrics => Self::METRICS_NAMES,
            Signal::Traces | Signal::Logs => Self::TRACES_LOGS_NAMES,
        }
    }
}

impl fmt::Display for ExporterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The OTLP wire protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OtlpProtocol {
    /// gRPC (`grpc`, the default, port 4317).
    #[default]
    Grpc,
    /// Protobuf over HTTP (`http/protobuf`, port 4318).
    HttpProtobuf,
    /// JSON over HTTP (`http/json`, port 4318).
    HttpJson,
}

impl OtlpProtocol {
    /// Every accepted name.
    pub const NAMES: &'static [&'static str] = &["grpc", "http/protobuf", "http/json"];

    /// Every protocol, in the order of [`OtlpProtocol::NAMES`].
    pub const ALL: [OtlpProtocol; 3] = [OtlpProtocol::Grpc, OtlpProtocol::HttpProtobuf, OtlpProtocol::HttpJson];

    /// The protocol's name in `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::HttpJson => "http/json",
        }
    }

    /// The protocol named `name` (case-insensitive), if any.
    pub fn from_name(name: &str) -> Option<OtlpProtocol> {
        match name.trim().to_ascii_lowercase().as_str() {
            "grpc" => Some(OtlpProtocol::Grpc),
            "http/protobuf" => Some(OtlpProtocol::HttpProtobuf),
            "http/json" => Some(OtlpProtocol::HttpJson),
            _ => None,
        }
    }

    /// Whether this is one of the HTTP protocols.
    pub const fn is_http(self) -> bool {
        !matches!(self, OtlpProtocol::Grpc)
    }

    /// The endpoint used when none is configured: `http://localhost:4317`
    /// for gRPC, `http://localhost:4318` for HTTP (before the signal path).
    pub const fn default_endpoint(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "http://localhost:4317",
            OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => "http://localhost:4318",
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Payload compression for OTLP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Compression {
    /// No compression (`none`, the default).
    #[default]
    None,
    /// gzip (`gzip`).
    Gzip,
}

impl Compression {
    /// Every accepted name.
    pub const NAMES: &'static [&'static str] = &["gzip", "none"];

    /// The name in `OTEL_EXPORTER_OTLP_COMPRESSION`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
        }
    }

    /// The compression named `name` (case-insensitive), if any.
    pub fn from_name(name: &str) -> Option<Compression> {
        match name.trim().to_ascii_lowercase().as_str() {
            "none" => Some(Compression::None),
            "gzip" => Some(Compression::Gzip),
            _ => None,
        }
    }
}

/// The trace sampler of `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`.
///
/// The `rank_aware` sampling strategy delegates to this one on ranks that
/// record spans.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum TracesSampler {
    /// Record every span (`always_on`).
    AlwaysOn,
    /// Record nothing (`always_off`).
    AlwaysOff,
    /// Keep the given share of traces by trace id (`traceidratio`).
    TraceIdRatio(f64),
    /// Follow the parent, else always on (`parentbased_always_on`, the default).
    #[default]
    ParentBasedAlwaysOn,
    /// Follow the parent, else always off (`parentbased_always_off`).
    ParentBasedAlwaysOff,
    /// Follow the parent, else a trace-id ratio (`parentbased_traceidratio`).
    ParentBasedTraceIdRatio(f64),
}

impl TracesSampler {
    /// Every accepted name.
    pub const NAMES: &'static [&'static str] = &[
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    ];

    /// The sampler's name in `OTEL_TRACES_SAMPLER`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TracesSampler::AlwaysOn => "always_on",
            TracesSampler::AlwaysOff => "always_off",
            TracesSampler::TraceIdRatio(_) => "traceidratio",
            TracesSampler::ParentBasedAlwaysOn => "parentbased_always_on",
            TracesSampler::ParentBasedAlwaysOff => "parentbased_always_off",
            TracesSampler::ParentBasedTraceIdRatio(_) => "parentbased_traceidratio",
        }
    }

    /// The sampler named `name` (case-insensitive) with `ratio` for the
    /// ratio samplers (the standard's default is 1.0), if the name is known.
    pub fn from_name(name: &str, ratio: f64) -> Option<TracesSampler> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "always_on" => TracesSampler::AlwaysOn,
            "always_off" => TracesSampler::AlwaysOff,
            "traceidratio" => TracesSampler::TraceIdRatio(ratio),
            "parentbased_always_on" => TracesSampler::ParentBasedAlwaysOn,
            "parentbased_always_off" => TracesSampler::ParentBasedAlwaysOff,
            "parentbased_traceidratio" => TracesSampler::ParentBasedTraceIdRatio(ratio),
            _ => return None,
        })
    }

    /// The ratio of a ratio sampler.
    pub const fn ratio(self) -> Option<f64> {
        match self {
            TracesSampler::TraceIdRatio(r) | TracesSampler::ParentBasedTraceIdRatio(r) => Some(r),
            _ => None,
        }
    }
}

impl fmt::Display for TracesSampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ratio() {
            Some(r) => write!(f, "{}({r})", self.as_str()),
            None => f.write_str(self.as_str()),
        }
    }
}

/// A context propagator of `OTEL_PROPAGATORS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Propagator {
    /// W3C `traceparent` / `tracestate` (`tracecontext`).
    TraceContext,
    /// W3C `baggage` (`baggage`).
    Baggage,
}

impl Propagator {
    /// Every accepted name (`none` means "no propagator").
    pub const NAMES: &'static [&'static str] = &["tracecontext", "baggage", "none"];

    /// The propagator's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Propagator::TraceContext => "tracecontext",
            Propagator::Baggage => "baggage",
        }
    }
}

/// An OTLP endpoint as given, and which variable form gave it. Its `Debug`
/// shows the URL as [`redact_endpoint`] does.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpEndpoint {
    /// The URL as written (trimmed).
    pub url: String,
    /// True when it came from a per-signal variable
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), which HTTP uses as-is; false
    /// for the general `OTEL_EXPORTER_OTLP_ENDPOINT`, to which HTTP appends
    /// `/v1/<signal>`.
    pub signal_specific: bool,
}

impl fmt::Debug for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtlpEndpoint")
            .field("url", &redact_endpoint(&self.url))
            .field("signal_specific", &self.signal_specific)
            .finish()
    }
}

/// The OTLP settings of one signal, after per-signal variables have
/// overridden the general ones.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpSettings {
    /// The endpoint, when one was given; see [`OtlpSettings::endpoint_url`].
    pub endpoint: Option<OtlpEndpoint>,
    /// The wire protocol (default `grpc`).
    pub protocol: OtlpProtocol,
    /// Headers: the general list merged with the per-signal list (which
    /// wins per key). Values are never shown.
    pub headers: Headers,
    /// Timeout of one export (default 10 s).
    pub timeout: Duration,
    /// Payload compression (default none).
    pub compression: Compression,
    /// PEM file of a private CA for `https` endpoints.
    pub certificate: Option<PathBuf>,
}

impl Default for OtlpSettings {
    fn default() -> OtlpSettings {
        OtlpSettings {
            endpoint: None,
            protocol: OtlpProtocol::Grpc,
            headers: Headers::new(),
            timeout: Duration::from_millis(10_000),
            compression: Compression::None,
            certificate: None,
        }
    }
}

impl OtlpSettings {
    /// What a message must never quote: the headers' values
    /// ([`Headers::secrets`]) and the endpoint's credentials (a user-info
    /// part, the query's values), which [`redact_endpoint`] hides.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets = self.headers.secrets();
        if let Some(endpoint) = &self.endpoint {
            secrets.extend(endpoint_secrets(&endpoint.url));
        }
        secrets
    }

    /// The URL the exporter of `signal` sends to, following the standard:
    /// with no endpoint, `http://localhost:4317` for gRPC and
    /// `http://localhost:4318/v1/<signal>` for HTTP; a per-signal endpoint
    /// as-is; the general endpoint as-is for gRPC and with `/v1/<signal>`
    /// appended for HTTP.
    ///
    /// ```
    /// use lens_core::config::{OtlpEndpoint, OtlpProtocol, OtlpSettings, Signal};
    ///
    /// let mut s = OtlpSettings::default();
    /// assert_eq!(s.endpoint_url(Signal::Traces), "http://localhost:4317");
    /// s.protocol = OtlpProtocol::HttpProtobuf;
    /// s.endpoint = Some(OtlpEndpoint { url: "http://collector:4318/".into(), signal_specific: false });
    /// assert_eq!(s.endpoint_url(Signal::Metrics), "http://collector:4318/v1/metrics");
    /// // A query stays after the path.
    /// s.endpoint = Some(OtlpEndpoint { url: "http://collector:4318/?tenant=a".into(), signal_specific: false });
    /// assert_eq!(s.endpoint_url(Signal::Traces), "http://collector:4318/v1/traces?tenant=a");
    /// ```
    pub fn endpoint_url(&self, signal: Signal) -> String {
        let protocol = self.protocol;
        match &self.endpoint {
            None if protocol.is_http() => format!("{}{}", protocol.default_endpoint(), signal.http_path()),
            None => protocol.default_endpoint().to_string(),
            Some(e) if e.signal_specific || !protocol.is_http() => e.url.clone(),
            // The path goes into the URL's path: before a query or a
            // fragment, which stay as they were.
            Some(e) => {
                let (base, tail) = e.url.find(['?', '#']).map_or((e.url.as_str(), ""), |at| e.url.split_at(at));
                format!("{}{}{tail}", base.trim_end_matches('/'), signal.http_path())
            }
        }
    }

    /// The variable that sets the endpoint of `signal`'s exporter, for
    /// messages: the per-signal one when the endpoint came from it, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (also when no endpoint is set).
    ///
    /// ```
    /// use lens_core::config::{OtlpEndpoint, OtlpSettings, Signal};
    ///
    /// let mut s = OtlpSettings::default();
    /// assert_eq!(s.endpoint_variable(Signal::Logs), "OTEL_EXPORTER_OTLP_ENDPOINT");
    /// s.endpoint = Some(OtlpEndpoint { url: "http://logs:4317".into(), signal_specific: true });
    /// assert_eq!(s.endpoint_variable(Signal::Logs), "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT");
    /// ```
    pub const fn endpoint_variable(&self, signal: Signal) -> &'static str {
        match &self.endpoint {
            Some(OtlpEndpoint { signal_specific: true, .. }) => signal.endpoint_variable(),
            _ => "OTEL_EXPORTER_OTLP_ENDPOINT",
        }
    }
}

/// Settings of the batch span processor (`OTEL_BSP_*`).
///
/// The defaults are lens's, not the standard's (2048 / 512 / 5000 ms / 1):
/// they are sized for the throughput target of one million spans per second
/// per process, so that a burst of per-microbatch spans does not overflow the
/// queue between two exports. The price is memory: a full queue of 65 536
/// spans holds roughly 30 to 60 MiB, depending on attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSettings {
    /// Spans held before new ones are dropped (`OTEL_BSP_MAX_QUEUE_SIZE`, 65536).
    pub max_queue_size: usize,
    /// Spans per export request (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 4096).
    pub max_export_batch_size: usize,
    /// Delay between two exports (`OTEL_BSP_SCHEDULE_DELAY`, 200 ms).
    pub schedule_delay: Duration,
    /// Export requests in flight at once (`OTEL_BSP_MAX_CONCURRENT_EXPORTS`, 2).
    pub max_concurrent_exports: usize,
}

impl Default for BatchSettings {
    fn default() -> BatchSettings {
        BatchSettings {
            max_queue_size: 65_536,
            max_export_batch_size: 4096,
            schedule_delay: Duration::from_millis(200),
            max_concurrent_exports: 2,
        }
    }
}

/// The standard `OTEL_*` settings that lens honours.
#[derive(Clone, Debug, PartialEq)]
pub struct OtelSettings {
    /// `OTEL_SDK_DISABLED=true`: telemetry off, whatever else says (it wins over every other switch).
    pub sdk_disabled: bool,
    /// `OTEL_TRACES_EXPORTER`, when set.
    pub traces_exporter: Option<ExporterKind>,
    /// `OTEL_METRICS_EXPORTER`, when set.
    pub metrics_exporter: Option<ExporterKind>,
    /// `OTEL_LOGS_EXPORTER`, when set.
    pub logs_exporter: Option<ExporterKind>,
    /// `OTEL_TRACES_SAMPLER` with `OTEL_TRACES_SAMPLER_ARG`.
    pub traces_sampler: TracesSampler,
    /// OTLP settings for traces.
    pub otlp_traces: OtlpSettings,
    /// OTLP settings for metrics.
    pub otlp_metrics: OtlpSettings,
    /// OTLP settings for logs.
    pub otlp_logs: OtlpSettings,
    /// `OTEL_METRIC_EXPORT_INTERVAL` (default 10 s, the original's, not the
    /// SDK's 60 s).
    pub metric_export_interval: Duration,
    /// `OTEL_EXPORTER_PROMETHEUS_HOST` (default `localhost`).
    pub prometheus_host: String,
    /// `OTEL_EXPORTER_PROMETHEUS_PORT` (default 9464; 0 picks a free port).
    pub prometheus_port: u16,
    /// `OTEL_PROPAGATORS` (default tracecontext, baggage; `none` is empty).
    pub propagators: Vec<Propagator>,
    /// `OTEL_BSP_*`.
    pub batch: BatchSettings,
}

impl Default for OtelSettings {
    fn default() -> OtelSettings {
        OtelSettings {
            sdk_disabled: false,
            traces_exporter: None,
            metrics_exporter: None,
            logs_exporter: None,
            traces_sampler: TracesSampler::ParentBasedAlwaysOn,
            otlp_traces: OtlpSettings::default(),
            otlp_metrics: OtlpSettings::default(),
            otlp_logs: OtlpSettings::default(),
            metric_export_interval: Duration::from_millis(10_000),
            prometheus_host: "localhost".to_string(),
            prometheus_port: 9464,
            propagators: vec![Propagator::TraceContext, Propagator::Baggage],
            batch: BatchSettings::default(),
        }
    }
}

impl OtelSettings {
    /// The OTLP settings of `signal`.
    pub fn otlp(&self, signal: Signal) -> &OtlpSettings {
        match signal {
            Signal::Traces => &self.otlp_traces,
            Signal::Metrics => &self.otlp_metrics,
            Signal::Logs => &self.otlp_logs,
        }
    }

    /// The OTLP settings of `signal`, to change in code.
    pub fn otlp_mut(&mut self, signal: Signal) -> &mut OtlpSettings {
        match signal {
            Signal::Traces => &mut self.otlp_traces,
            Signal::Metrics => &mut self.otlp_metrics,
            Signal::Logs => &mut self.otlp_logs,
        }
    }

    /// The per-signal exporter override (`OTEL_<SIGNAL>_EXPORTER`), if set.
    pub fn exporter_override(&self, signal: Signal) -> Option<ExporterKind> {
        match signal {
            Signal::Traces => self.traces_exporter,
            Signal::Metrics => self.metrics_exporter,
            Signal::Logs => self.logs_exporter,
        }
    }
}

/// Checks the syntax of an OTLP endpoint: `http` or `https`, a host, an
/// optional numeric port, no whitespace, no user-info (credentials belong in
/// the headers). Returns what is wrong.
pub(crate) fn check_endpoint(url: &str) -> Result<(), &'static str> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains a space or control character");
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("no scheme: write http:// or https:// first");
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err("the scheme must be http or https");
    }
    // One URL, not a list: a comma before the query would otherwise pass as
    // part of the path (`http://a:1/,http://b:1`) and hide a second URL.
    let before_query = rest.split(['?', '#']).next().unwrap_or("");
    if before_query.contains(',') || before_query.contains("://") {
        return Err("it holds more than one URL; give a single endpoint, not a list");
    }
    // An `@` anywhere before the query is taken for credentials, wherever it
    // stands (a typo such as `http:///u:p@h` moves it out of the authority).
    if before_query.contains('@') {
        return Err("credentials in the URL are not accepted; put them in OTEL_EXPORTER_OTLP_HEADERS");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err("an IPv6 host lacks its closing ']'");
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err("unexpected text after the IPv6 host"),
            },
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("no host");
    }
    if !host.chars().all(|c| c.is_ascii_alphanumeric() || "-._:%".contains(c)) {
        return Err("the host holds characters a host name cannot hold");
    }
    if let Some(port) = port
        && (port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()) || port.parse::<u16>().is_err())
    {
        return Err("the port must be a number from 0 to 65535");
    }
    Ok(())
}

/// The endpoint safe to show in a message or a `Debug` output: a user-info
/// part (`user:password@`) becomes `[REDACTED]@`, and every value of the
/// query string (`?api_key=...`) and a fragment become `[REDACTED]`; the
/// scheme, host, port, path and the query's names stay.
///
/// It takes any string, not only a valid URL, since it is what shows a bad
/// value too: everything from after the first `://` (or the start) up to the
/// last `@` in the string is hidden, so that no credential is shown however
/// the value is malformed (a list of URLs, a space, an empty host). A query
/// or fragment holding an `@` hides the host with it: less to read, nothing
/// leaked.
///
/// ```
/// use lens_core::config::redact_endpoint;
///
/// assert_eq!(redact_endpoint("https://u:pw@c.example.com:4318/v1/traces"), "https://[REDACTED]@c.example.com:4318/v1/traces");
/// assert_eq!(redact_endpoint("http://c:4318/?api_key=s3cr3t&tenant=a"), "http://c:4318/?api_key=[REDACTED]&tenant=[REDACTED]");
/// assert_eq!(redact_endpoint("http://localhost:4317"), "http://localhost:4317");
/// // A second URL after a comma hides its credentials too.
/// assert_eq!(redact_endpoint("http://a:1,http://u:pw@b:2"), "http://[REDACTED]@b:2");
/// ```
pub fn redact_endpoint(url: &str) -> String {
    let parts = UrlParts::of(url);
    let mut out = String::with_capacity(url.len());
    if let Some(scheme) = parts.scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    if parts.user_info.is_some() {
        out.push_str("[REDACTED]@");
    }
    out.push_str(parts.address);
    if let Some(query) = parts.query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}=[REDACTED]"),
                None if pair.is_empty() => String::new(),
                None => "[REDACTED]".to_string(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    if parts.fragment.is_some() {
        out.push_str("#[REDACTED]");
    }
    out
}

/// The parts of `url` that [`redact_endpoint`] hides, non-empty: the
/// user-info part (and its password alone, as a client may quote it apart
/// from the user), the query's values and the fragment.
///
/// Each `user:password@` of the string is listed on its own as well (the
/// text before every `@` back to a `/`, `,` or space, and its password), so
/// that a message quoting one credential of a malformed value is caught.
fn endpoint_secrets(url: &str) -> Vec<String> {
    let parts = UrlParts::of(url);
    let values = parts.query.into_iter().flat_map(|q| q.split('&')).map(|p| p.split_once('=').map_or(p, |(_, v)| v));
    let password = parts.user_info.and_then(|u| u.split_once(':')).map(|(_, password)| password);
    let each_user_info = url.match_indices('@').flat_map(|(at, _)| {
        let before = &url[..at];
        let start = before.rfind(|c: char| c == '/' || c == ',' || c.is_whitespace()).map_or(0, |i| i + 1);
        let user_info = &before[start..];
        [Some(user_info), user_info.split_once(':').map(|(_, password)| password)].into_iter().flatten()
    });
    let mut secrets: Vec<String> = Vec::new();
    for secret in parts.user_info.into_iter().chain(values).chain(parts.fragment).chain(password).chain(each_user_info)
    {
        if !secret.is_empty() && !secrets.iter().any(|s| s == secret) {
            secrets.push(secret.to_string());
        }
    }
    secrets
}

/// An endpoint URL split where [`redact_endpoint`] and [`endpoint_secrets`]
/// cut it: `scheme://user-info@address?query#fragment`, every part but the
/// address optional (the address is the host, port and path).
struct UrlParts<'a> {
    scheme: Option<&'a str>,
    user_info: Option<&'a str>,
    address: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    /// Splits any string, valid URL or not. The user-info is everything
    /// before the last `@` of the whole string (after the scheme's `://`),
    /// not only of a well-formed authority: in a malformed value (two URLs,
    /// a space, an empty host, a `/`, `?` or `#` inside a password) an `@`
    /// outside the authority may still end a credential, and showing too
    /// little is the safe side.
    ///
    /// A valid endpoint ([`check_endpoint`]) has no `@` before its query, so
    /// one in its query or fragment is theirs, and the host is shown.
    fn of(url: &'a str) -> UrlParts<'a> {
        let (scheme, rest) = url.split_once("://").map_or((None, url), |(scheme, rest)| (Some(scheme), rest));
        let credentials_end = if check_endpoint(url).is_ok() {
            rest.split(['?', '#']).next().unwrap_or("").rfind('@')
        } else {
            rest.rfind('@')
        };
        let (user_info, rest) = match credentials_end {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (rest, fragment) = rest.split_once('#').map_or((rest, None), |(rest, fragment)| (rest, Some(fragment)));
        let (address, query) = rest.split_once('?').map_or((rest, None), |(rest, query)| (rest, Some(query)));
        UrlParts { scheme, user_info, address, query, fragment }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_syntax() {
        for ok in ["http://localhost:4317", "https://c.example.com", "http://[::1]:4318/v1/traces", "HTTP://h"] {
            assert_eq!(check_endpoint(ok), Ok(()), "{ok}");
        }
        for bad in
            ["localhost:4317", "ftp://h", "http://", "http://h:x", "http://h:70000", "http://a b", "http://u:p@h"]
        {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
        assert_eq!(redact_endpoint("http://u:s3cr3t@h:1/x"), "http://[REDACTED]@h:1/x");
        assert_eq!(redact_endpoint("h:1/?k=s3cr3t#s3cr3t"), "h:1/?k=[REDACTED]#[REDACTED]");
        assert_eq!(redact_endpoint("http://h/?s3cr3t&&k="), "http://h/?[REDACTED]&&k=[REDACTED]");
        let endpoint = OtlpEndpoint { url: "https://u:s3cr3t@h:1/?api_key=s3cr3t".into(), signal_specific: false };
        let debug = format!("{endpoint:?}");
        assert!(!debug.contains("s3cr3t") && debug.contains("h:1"), "{debug}");
        let settings = OtlpSettings { endpoint: Some(endpoint), ..OtlpSettings::default() };
        assert_eq!(settings.secrets(), ["u:s3cr3t", "s3cr3t"]);
    }

    /// Malformed values that once showed their credentials: a list, a
    /// space, an empty host, a password holding `/`, `?` or `#`.
    #[test]
    fn credentials_of_a_malformed_endpoint_are_never_shown() {
        for (url, shown) in [
            ("http://127.0.0.1:1,http://u:SECRET123@b", "http://[REDACTED]@b"),
            ("http:///u:SECRET123@b:1", "http://[REDACTED]@b:1"),
            ("http://127.0.0.1:1 http://u:SECRET123@x", "http://[REDACTED]@x"),
            ("http://127.0.0.1:1/,http://u:SECRET123@b:1", "http://[REDACTED]@b:1"),
            ("http://u:SECRET/123@b:1/v1", "http://[REDACTED]@b:1/v1"),
            ("http://u:SECRET?123@b:1", "http://[REDACTED]@b:1"),
            ("http://u:SECRET#123@b:1", "http://[REDACTED]@b:1"),
            ("u:SECRET123@b:1", "[REDACTED]@b:1"),
        ] {
            assert_eq!(redact_endpoint(url), shown, "{url}");
            assert!(check_endpoint(url).is_err(), "{url}");
            let debug = format!("{:?}", OtlpEndpoint { url: url.into(), signal_specific: false });
            assert!(!debug.contains("SECRET"), "{debug}");
        }
        assert_eq!(
            check_endpoint("http://127.0.0.1:1/,http://u:SECRET123@b:1"),
            Err("it holds more than one URL; give a single endpoint, not a list")
        );
        assert_eq!(
            check_endpoint("http://127.0.0.1:1/,http://b:1"),
            Err("it holds more than one URL; give a single endpoint, not a list")
        );
        // A valid endpoint with an `@` in its query shows its host.
        assert_eq!(
            redact_endpoint("http://collector.example:4318/v1?tenant=team@corp"),
            "http://collector.example:4318/v1?tenant=[REDACTED]"
        );
        assert_eq!(redact_endpoint("http://127.0.0.1:9/v1?x=1,http://u:S@c"), "http://127.0.0.1:9/v1?x=[REDACTED]");
        assert_eq!(
            check_endpoint("http:///u:SECRET123@b:1"),
            Err("credentials in the URL are not accepted; put them in OTEL_EXPORTER_OTLP_HEADERS")
        );
        // Each credential of a list is a secret of its own, for messages
        // that quote one of them.
        let url = "http://a:S1@h,http://b:S2@h2".to_string();
        let settings =
            OtlpSettings { endpoint: Some(OtlpEndpoint { url, signal_specific: false }), ..OtlpSettings::default() };
        assert_eq!(settings.secrets(), ["a:S1@h,http://b:S2", "S1@h,http://b:S2", "a:S1", "S1", "b:S2", "S2"]);
    }
}
