//! The configuration model: one [`LensConfig`] per process, read from the
//! environment, overridden from the command line, validated as a whole.
//!
//! Precedence (SPEC A2): command-line flag ([`CliOverrides`]) > the primary
//! prefix (`MEGATRON_OTEL_*`) > the fallback prefix (`NEMO_LENS_*`) > the
//! default. An empty value counts as unset. Within one prefix a canonical
//! name and its Lens v0.2.0 alias are read together, and a disagreement is an
//! error naming both (A1): `*_EXPORT_STRATEGY` means `*_RANK_STRATEGY`,
//! `*_SAMPLER_ENABLED=1` means `*_SAMPLING_STRATEGY=rank_aware`.
//!
//! The standard `OTEL_*` variables are part of the model ([`OtelSettings`]),
//! typed, because lens sets every SDK option itself (A14).
//!
//! Reading and [`LensConfig::validate`] collect every problem and report them
//! together in a [`ConfigError`], each naming the variable that was actually
//! read, the value and what is accepted (A3). Header values of
//! `OTEL_EXPORTER_OTLP_HEADERS` never appear in `Debug`, `Display` or errors.
//!
//! ```
//! use lens_core::config::{ConfigLoader, LensConfig};
//! use lens_core::groups::LENS_CATALOG;
//!
//! let env = [
//!     ("MEGATRON_OTEL_ENABLED", "1"),
//!     ("NEMO_LENS_EXPORTER", "console"),
//!     ("MEGATRON_OTEL_EXPORT_STRATEGY", "all_ranks"), // the Lens alias
//! ];
//! let config = ConfigLoader::new("MEGATRON_OTEL")
//!     .fallback_prefix("NEMO_LENS")
//!     .default_service_name("megatron-lm")
//!     .load(&env)
//!     .unwrap();
//! assert!(config.enabled);
//! assert_eq!(config.rank_strategy, "all_ranks");
//! assert_eq!(config.service_name, "megatron-lm");
//! assert_eq!(config.variable_for("rank_strategy"), Some("MEGATRON_OTEL_EXPORT_STRATEGY"));
//!
//! let err = LensConfig::from_env(&[("NEMO_LENS_ENABLED", "maybe")], "NEMO_LENS", None, &LENS_CATALOG)
//!     .unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "Invalid boolean for NEMO_LENS_ENABLED: 'maybe'. Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
//! );
//! ```

mod error;
mod headers;
mod read;
mod standard;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use error::{ConfigError, ConfigProblem};
pub use headers::{HeaderError, Headers};
pub use standard::{
    BatchSettings, Compression, ExporterKind, OtelSettings, OtlpEndpoint, OtlpProtocol, OtlpSettings, Propagator,
    Signal, TracesSampler,
};

use crate::env::EnvSource;
use crate::groups::{GroupSet, LENS_CATALOG, SpanGroupCatalog, UnknownSpanGroup};
use error::py_float;
use read::{Alias, Found, Reader, unknown_name};

/// The prefix of Lens's own variables (`NEMO_LENS_*`).
pub const DEFAULT_PREFIX: &str = "NEMO_LENS";

/// The service name when `OTEL_SERVICE_NAME` is unset and the framework sets
/// no default of its own.
pub const DEFAULT_SERVICE_NAME: &str = "nemo";

/// The default of `<PREFIX>_PROMETHEUS_RESOURCE_LABELS`.
pub const DEFAULT_PROMETHEUS_RESOURCE_LABELS: &[&str] = &["nemo.run.id", "service.instance.id"];

/// A boolean as the original spells it: `1/true/yes/on` and `0/false/no/off`,
/// case-insensitive, surrounding whitespace ignored.
///
/// ```
/// assert_eq!(lens_core::config::parse_bool(" YES "), Some(true));
/// assert_eq!(lens_core::config::parse_bool("off"), Some(false));
/// assert_eq!(lens_core::config::parse_bool("2"), None);
/// ```
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Which variable (or flag) set each field, with the value it set.
///
/// [`LensConfig::from_env`] and [`LensConfig::apply_cli`] fill it; a problem
/// about a field names that variable while the field still holds the value
/// read, and names the field (`LensConfig.<field>`) once code changed it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origins {
    fields: BTreeMap<&'static str, (String, String)>,
}

impl Origins {
    /// The variable or flag that last set `field` (a path such as
    /// `export_sample_rate` or `otel.otlp_traces.endpoint`), whatever the
    /// field holds now.
    pub fn variable(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(|(variable, _)| variable.as_str())
    }

    fn set(&mut self, field: &'static str, variable: &str, repr: String) {
        if !field.is_empty() {
            self.fields.insert(field, (variable.to_string(), repr));
        }
    }
}

/// The whole configuration of one process.
///
/// Field defaults are the original's (SPEC B 1.1); lens's additions follow.
/// Build one with [`LensConfig::from_env`] / [`ConfigLoader`], or from
/// [`LensConfig::default`] in code, then call [`LensConfig::validate`].
#[derive(Clone)]
pub struct LensConfig {
    /// Master toggle (`<PREFIX>_ENABLED`, default false).
    pub enabled: bool,
    /// `service.name` (bare `OTEL_SERVICE_NAME`, default `nemo` or the
    /// framework's default).
    pub service_name: String,
    /// Which ranks export (`<PREFIX>_RANK_STRATEGY`, alias
    /// `<PREFIX>_EXPORT_STRATEGY`, default `single_rank`).
    pub rank_strategy: String,
    /// The exporting rank of `single_rank`; `-1` is the last rank
    /// (`<PREFIX>_EXPORT_RANK`).
    pub export_rank: i64,
    /// Share of ranks for `sampled` and `rank_aware`, in `[0.0, 1.0]`
    /// (`<PREFIX>_EXPORT_SAMPLE_RATE`, default 1.0).
    pub export_sample_rate: f64,
    /// Which ranks record spans: empty (every exporting rank), `rank_aware`
    /// or a registered name (`<PREFIX>_SAMPLING_STRATEGY`; alias
    /// `<PREFIX>_SAMPLER_ENABLED=1` means `rank_aware`).
    pub sampling_strategy: String,
    /// Spans on or off (`<PREFIX>_TRACES_ENABLED`, default true).
    pub traces_enabled: bool,
    /// Metrics on or off (`<PREFIX>_METRICS_ENABLED`, default true).
    pub metrics_enabled: bool,
    /// Per-rank metrics from every rank, whatever the rank strategy
    /// (`<PREFIX>_RANK_METRICS`, default false; SPEC A16).
    pub rank_metrics: bool,
    /// Logs on or off (`<PREFIX>_LOGS_ENABLED`, default false).
    pub logs_enabled: bool,
    /// Span-group spec (`<PREFIX>_SPAN_GROUPS`, default `default`).
    pub span_groups: String,
    /// Rules mapping `tracing` targets to span groups, for the `lens-tracing`
    /// bridge (`<PREFIX>_TRACING_GROUPS`, default empty: every target off
    /// except `lens::<group>`); see [`crate::tracing_rules`].
    pub tracing_groups: String,
    /// Exporter of every signal (`<PREFIX>_EXPORTER`: `otlp`, `console`,
    /// `file`); `None` when not configured, which means `otlp`.
    pub exporter: Option<ExporterKind>,
    /// Run id (`<PREFIX>_RUN_ID`, then `NEMO_LENS_RUN_ID`); empty means
    /// "detect" (see [`crate::identity`]).
    pub run_id: String,
    /// Per-launch id (`<PREFIX>_LAUNCH_ID`), set by a launcher to a fresh
    /// value for each launch and shared by its ranks; empty means "detect"
    /// (see [`crate::identity::resolve_launch_id`]).
    pub launch_id: String,
    /// User or team label (`<PREFIX>_USER_ID`).
    pub user: String,
    /// Weights & Biases entity (bare `WANDB_ENTITY`).
    pub wandb_entity: String,
    /// Weights & Biases project (bare `WANDB_PROJECT`).
    pub wandb_project: String,
    /// The span groups and presets that `span_groups` may name.
    pub catalog: &'static SpanGroupCatalog,
    /// Directory of the `file` exporter (`<PREFIX>_FILE_DIR`; default
    /// `telemetry/<run_id>/`, see [`LensConfig::file_dir_for`]).
    pub file_dir: Option<PathBuf>,
    /// How long failed exports are retried (`<PREFIX>_EXPORT_RETRY_WINDOW_MS`,
    /// default 30 s).
    pub export_retry_window: Duration,
    /// Bound on shutdown (`<PREFIX>_SHUTDOWN_TIMEOUT_MS`, default 5 s).
    pub shutdown_timeout: Duration,
    /// How long the Prometheus endpoint stays up after shutdown so that a
    /// short run is scraped (`<PREFIX>_PROMETHEUS_LINGER_MS`, default 0).
    pub prometheus_linger: Duration,
    /// Resource attributes copied onto every Prometheus series as labels
    /// (`<PREFIX>_PROMETHEUS_RESOURCE_LABELS`, comma-separated, `none` for
    /// none; default `nemo.run.id,service.instance.id`).
    pub prometheus_resource_labels: Vec<String>,
    /// The accelerator's peak TFLOP/s for the model FLOPs utilisation
    /// (`<PREFIX>_PEAK_TFLOPS`, a positive number; `None`: the framework's
    /// table of known GPUs decides, or there is no MFU).
    pub peak_tflops: Option<f64>,
    /// When the per-rank hang watchdog fires (`<PREFIX>_HANG_TIMEOUT_S`:
    /// `auto`, `0` for off, or seconds; default `auto`; SPEC A17).
    pub hang_timeout: HangTimeout,
    /// The standard `OTEL_*` variables.
    pub otel: OtelSettings,
    /// Which variable set each field (for messages).
    pub origins: Origins,
}

impl Default for LensConfig {
    /// The original's defaults, with the Lens catalog.
    fn default() -> LensConfig {
        LensConfig {
            enabled: false,
            service_name: DEFAULT_SERVICE_NAME.to_string(),
            rank_strategy: "single_rank".to_string(),
            export_rank: -1,
            export_sample_rate: 1.0,
            sampling_strategy: String::new(),
            traces_enabled: true,
            metrics_enabled: true,
            rank_metrics: false,
            logs_enabled: false,
            span_groups: "default".to_string(),
            tracing_groups: String::new(),
            exporter: None,
            run_id: String::new(),
            launch_id: String::new(),
            user: String::new(),
            wandb_entity: String::new(),
            wandb_project: String::new(),
            catalog: &LENS_CATALOG,
            file_dir: None,
            export_retry_window: Duration::from_millis(30_000),
            shutdown_timeout: Duration::from_millis(5000),
            prometheus_linger: Duration::ZERO,
            prometheus_resource_labels: DEFAULT_PROMETHEUS_RESOURCE_LABELS.iter().map(|s| s.to_string()).collect(),
            peak_tflops: None,
            hang_timeout: HangTimeout::Auto,
            otel: OtelSettings::default(),
            origins: Origins::default(),
        }
    }
}

/// Reads a [`LensConfig`] from an environment, with a framework's prefixes,
/// catalog and default service name.
#[derive(Clone, Copy, Debug)]
pub struct ConfigLoader<'a> {
    prefix: &'a str,
    fallback_prefix: Option<&'a str>,
    catalog: &'static SpanGroupCatalog,
    default_service_name: &'a str,
}

impl<'a> ConfigLoader<'a> {
    /// A loader for variables `<prefix>_*`, with no fallback prefix, the Lens
    /// catalog and the service name `nemo`.
    pub fn new(prefix: &'a str) -> ConfigLoader<'a> {
        ConfigLoader {
            prefix,
            fallback_prefix: None,
            catalog: &LENS_CATALOG,
            default_service_name: DEFAULT_SERVICE_NAME,
        }
    }

    /// Reads `<fallback>_*` where `<prefix>_*` is unset (Megatron: `NEMO_LENS`).
    #[must_use]
    pub fn fallback_prefix(mut self, fallback: &'a str) -> ConfigLoader<'a> {
        self.fallback_prefix = Some(fallback);
        self
    }

    /// The catalog that span-group specs are resolved against.
    #[must_use]
    pub fn catalog(mut self, catalog: &'static SpanGroupCatalog) -> ConfigLoader<'a> {
        self.catalog = catalog;
        self
    }

    /// The service name used when `OTEL_SERVICE_NAME` is unset (Megatron:
    /// `megatron-lm`).
    #[must_use]
    pub fn default_service_name(mut self, name: &'a str) -> ConfigLoader<'a> {
        self.default_service_name = name;
        self
    }

    /// Reads and validates the configuration, reporting every problem.
    pub fn load(&self, env: &(impl EnvSource + ?Sized)) -> Result<LensConfig, ConfigError> {
        let mut r = Reader::new(env, self.prefix, self.fallback_prefix);
        let mut c = LensConfig { catalog: self.catalog, ..LensConfig::default() };
        c.service_name = self.default_service_name.to_string();
        read_lens(&mut r, &mut c);
        read_otel(&mut r, &mut c.otel);
        let Reader { mut problems, origins, .. } = r;
        c.origins = origins;
        if c.otel.sdk_disabled && c.enabled {
            let variable = c.origins.variable("enabled").unwrap_or("the enable variable").to_string();
            crate::diag::warn(format_args!(
                "OTEL_SDK_DISABLED=true turns telemetry off although {variable} enables it"
            ));
            c.enabled = false;
        }
        if let Err(err) = c.validate() {
            problems.extend(err.into_problems());
        }
        if problems.is_empty() { Ok(c) } else { Err(ConfigError::new(problems)) }
    }
}

fn read_lens<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, c: &mut LensConfig) {
    if let Some(v) = r.string("service_name", r.bare("OTEL_SERVICE_NAME")) {
        c.service_name = v;
    }
    if let Some(v) = r.bool("enabled", r.prefixed("ENABLED")) {
        c.enabled = v;
    }
    let found = r.prefixed_with_alias("RANK_STRATEGY", &Alias::Same("EXPORT_STRATEGY"));
    if let Some(v) = r.string("rank_strategy", found) {
        c.rank_strategy = v;
    }
    if let Some(v) = r.int("export_rank", r.prefixed("EXPORT_RANK")) {
        c.export_rank = v;
    }
    if let Some(v) = r.float("export_sample_rate", r.prefixed("EXPORT_SAMPLE_RATE")) {
        c.export_sample_rate = v;
    }
    let found = r.prefixed_with_alias("SAMPLING_STRATEGY", &Alias::FlagMeaning("SAMPLER_ENABLED", "rank_aware"));
    if let Some(v) = r.string("sampling_strategy", found) {
        c.sampling_strategy = v;
    }
    if let Some(v) = r.bool("traces_enabled", r.prefixed("TRACES_ENABLED")) {
        c.traces_enabled = v;
    }
    if let Some(v) = r.bool("metrics_enabled", r.prefixed("METRICS_ENABLED")) {
        c.metrics_enabled = v;
    }
    if let Some(v) = r.bool("rank_metrics", r.prefixed("RANK_METRICS")) {
        c.rank_metrics = v;
    }
    if let Some(v) = r.bool("logs_enabled", r.prefixed("LOGS_ENABLED")) {
        c.logs_enabled = v;
    }
    if let Some(v) = r.string("span_groups", r.prefixed("SPAN_GROUPS")) {
        c.span_groups = v;
    }
    if let Some(v) = r.string("tracing_groups", r.prefixed("TRACING_GROUPS")) {
        c.tracing_groups = v;
    }
    let found = r.prefixed("EXPORTER");
    if let Some(v) = r.name("exporter", found, "exporter", ExporterKind::ALL_SIGNALS_NAMES, ExporterKind::from_name) {
        c.exporter = Some(v);
    }
    // A13: `<PREFIX>_RUN_ID` > `NEMO_LENS_RUN_ID`, whatever the fallback prefix.
    let found = r.prefixed("RUN_ID").or_else(|| r.bare("NEMO_LENS_RUN_ID"));
    if let Some(v) = r.string("run_id", found) {
        c.run_id = v;
    }
    if let Some(v) = r.string("launch_id", r.prefixed("LAUNCH_ID")) {
        c.launch_id = v;
    }
    if let Some(v) = r.string("user", r.prefixed("USER_ID")) {
        c.user = v;
    }
    if let Some(v) = r.string("wandb_entity", r.bare("WANDB_ENTITY")) {
        c.wandb_entity = v;
    }
    if let Some(v) = r.string("wandb_project", r.bare("WANDB_PROJECT")) {
        c.wandb_project = v;
    }
    if let Some(v) = r.string("file_dir", r.prefixed("FILE_DIR")) {
        c.file_dir = Some(PathBuf::from(v));
    }
    if let Some(v) = millis(r, "export_retry_window", r.prefixed("EXPORT_RETRY_WINDOW_MS"), 0) {
        c.export_retry_window = v;
    }
    if let Some(v) = millis(r, "shutdown_timeout", r.prefixed("SHUTDOWN_TIMEOUT_MS"), 0) {
        c.shutdown_timeout = v;
    }
    if let Some(v) = millis(r, "prometheus_linger", r.prefixed("PROMETHEUS_LINGER_MS"), 0) {
        c.prometheus_linger = v;
    }
    if let Some(found) = r.prefixed("PROMETHEUS_RESOURCE_LABELS") {
        let labels: Vec<String> = if found.value.eq_ignore_ascii_case("none") {
            Vec::new()
        } else {
            found.value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
        };
        r.record("prometheus_resource_labels", &found, labels.join(","));
        c.prometheus_resource_labels = labels;
    }
    if let Some(v) = r.float("peak_tflops", r.prefixed("PEAK_TFLOPS")) {
        c.peak_tflops = Some(v);
    }
    if let Some(found) = r.prefixed("HANG_TIMEOUT_S") {
        match HangTimeout::parse(&found.value) {
            Some(v) => {
                r.record("hang_timeout", &found, v.to_string());
                c.hang_timeout = v;
            }
            None => r.push(ConfigProblem::InvalidValue {
                variable: found.variable,
                value: found.value,
                expected: HangTimeout::EXPECTED.into(),
            }),
        }
    }
}

/// When the hang watchdog fires (`<PREFIX>_HANG_TIMEOUT_S`, SPEC A17).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum HangTimeout {
    /// Ten times the median recent step time, at least 60 s, armed once 5
    /// iterations have completed (the default; value `auto`).
    #[default]
    Auto,
    /// No watchdog (value `0`).
    Off,
    /// This long without a completed iteration, armed at the first one.
    After(Duration),
}

impl HangTimeout {
    /// What `<PREFIX>_HANG_TIMEOUT_S` accepts, in words.
    pub const EXPECTED: &'static str = "auto, 0 (off) or a positive number of seconds, e.g. 120";

    /// `auto`, `0` or a positive, finite number of seconds (at most a year).
    pub fn parse(value: &str) -> Option<HangTimeout> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("auto") {
            return Some(HangTimeout::Auto);
        }
        let seconds = value.parse::<f64>().ok().filter(|s| s.is_finite() && (0.0..=31_536_000.0).contains(s))?;
        Some(if seconds == 0.0 { HangTimeout::Off } else { HangTimeout::After(Duration::from_secs_f64(seconds)) })
    }
}

impl fmt::Display for HangTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HangTimeout::Auto => f.write_str("auto"),
            HangTimeout::Off => f.write_str("0"),
            HangTimeout::After(d) => write!(f, "{}", py_float(d.as_secs_f64())),
        }
    }
}

/// A whole number of milliseconds, at least `min`.
fn millis<E: EnvSource + ?Sized>(
    r: &mut Reader<'_, E>,
    field: &'static str,
    found: Option<Found>,
    min: i128,
) -> Option<Duration> {
    let expected = if min == 0 {
        "a whole number of milliseconds, 0 or more"
    } else {
        "a whole number of milliseconds, 1 or more"
    };
    r.int_in(field, found, min, i128::from(u64::MAX), expected).map(|ms| Duration::from_millis(ms as u64))
}

fn count<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, field: &'static str, variable: &str) -> Option<usize> {
    let found = r.bare(variable);
    r.int_in(field, found, 1, i128::from(u32::MAX), "a whole number, 1 or more").map(|n| n as usize)
}

/// The field paths of one signal's OTLP settings, for [`Origins`].
struct OtlpFields {
    endpoint: &'static str,
    protocol: &'static str,
    headers: &'static str,
    timeout: &'static str,
    compression: &'static str,
    certificate: &'static str,
}

const fn otlp_fields(signal: Signal) -> OtlpFields {
    match signal {
        Signal::Traces => OtlpFields {
            endpoint: "otel.otlp_traces.endpoint",
            protocol: "otel.otlp_traces.protocol",
            headers: "otel.otlp_traces.headers",
            timeout: "otel.otlp_traces.timeout",
            compression: "otel.otlp_traces.compression",
            certificate: "otel.otlp_traces.certificate",
        },
        Signal::Metrics => OtlpFields {
            endpoint: "otel.otlp_metrics.endpoint",
            protocol: "otel.otlp_metrics.protocol",
            headers: "otel.otlp_metrics.headers",
            timeout: "otel.otlp_metrics.timeout",
            compression: "otel.otlp_metrics.compression",
            certificate: "otel.otlp_metrics.certificate",
        },
        Signal::Logs => OtlpFields {
            endpoint: "otel.otlp_logs.endpoint",
            protocol: "otel.otlp_logs.protocol",
            headers: "otel.otlp_logs.headers",
            timeout: "otel.otlp_logs.timeout",
            compression: "otel.otlp_logs.compression",
            certificate: "otel.otlp_logs.certificate",
        },
    }
}

/// The OTLP variables under one base name (`OTEL_EXPORTER_OTLP` or
/// `OTEL_EXPORTER_OTLP_TRACES`), parsed, each with the variable it came from.
#[derive(Default)]
struct OtlpBlock {
    endpoint: Option<(String, String)>,
    protocol: Option<(String, OtlpProtocol)>,
    headers: Option<(String, Headers)>,
    timeout: Option<(String, Duration)>,
    compression: Option<(String, Compression)>,
    certificate: Option<(String, PathBuf)>,
}

fn read_otlp_block<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, base: &str) -> OtlpBlock {
    let mut block = OtlpBlock {
        endpoint: r.bare(&format!("{base}_ENDPOINT")).map(|f| (f.variable, f.value)),
        ..OtlpBlock::default()
    };
    let found = r.bare(&format!("{base}_PROTOCOL"));
    let variable = found.as_ref().map(|f| f.variable.clone());
    block.protocol = r
        .name("", found, "OTLP protocol", OtlpProtocol::NAMES, OtlpProtocol::from_name)
        .zip(variable)
        .map(|(p, v)| (v, p));
    if let Some(found) = r.bare(&format!("{base}_HEADERS")) {
        match Headers::parse(&found.value) {
            Ok(headers) => block.headers = Some((found.variable, headers)),
            Err(err) => r.push(ConfigProblem::InvalidHeaders { variable: found.variable, detail: err.to_string() }),
        }
    }
    let found = r.bare(&format!("{base}_TIMEOUT"));
    let variable = found.as_ref().map(|f| f.variable.clone());
    block.timeout = millis(r, "", found, 1).zip(variable).map(|(t, v)| (v, t));
    let found = r.bare(&format!("{base}_COMPRESSION"));
    let variable = found.as_ref().map(|f| f.variable.clone());
    block.compression = r
        .name("", found, "OTLP compression", Compression::NAMES, Compression::from_name)
        .zip(variable)
        .map(|(c, v)| (v, c));
    block.certificate = r.bare(&format!("{base}_CERTIFICATE")).map(|f| (f.variable, PathBuf::from(f.value)));
    block
}

fn read_otel<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, o: &mut OtelSettings) {
    if let Some(v) = r.bool("otel.sdk_disabled", r.bare("OTEL_SDK_DISABLED")) {
        o.sdk_disabled = v;
    }
    let found = r.bare("OTEL_TRACES_EXPORTER");
    o.traces_exporter = r.name(
        "otel.traces_exporter",
        found,
        "traces exporter",
        ExporterKind::TRACES_LOGS_NAMES,
        ExporterKind::from_name,
    );
    let found = r.bare("OTEL_METRICS_EXPORTER");
    o.metrics_exporter = r.name(
        "otel.metrics_exporter",
        found,
        "metrics exporter",
        ExporterKind::METRICS_NAMES,
        ExporterKind::from_name,
    );
    let found = r.bare("OTEL_LOGS_EXPORTER");
    o.logs_exporter =
        r.name("otel.logs_exporter", found, "logs exporter", ExporterKind::TRACES_LOGS_NAMES, ExporterKind::from_name);

    let found = r.bare("OTEL_TRACES_SAMPLER_ARG");
    let arg_variable = found.as_ref().map(|f| f.variable.clone());
    let mut ratio = r.float("otel.traces_sampler_arg", found);
    if let (Some(x), Some(variable)) = (ratio, arg_variable)
        && !(0.0..=1.0).contains(&x)
    {
        r.push(ConfigProblem::InvalidValue {
            variable,
            value: py_float(x),
            expected: "a number from 0.0 to 1.0".into(),
        });
        ratio = None;
    }
    let found = r.bare("OTEL_TRACES_SAMPLER");
    if let Some(sampler) = r.name("otel.traces_sampler", found, "trace sampler", TracesSampler::NAMES, |name| {
        TracesSampler::from_name(name, ratio.unwrap_or(1.0))
    }) {
        o.traces_sampler = sampler;
    }

    let general = read_otlp_block(r, "OTEL_EXPORTER_OTLP");
    for signal in Signal::ALL {
        let specific = read_otlp_block(r, &format!("OTEL_EXPORTER_OTLP_{}", signal.env_name()));
        let fields = otlp_fields(signal);
        let s = o.otlp_mut(signal);
        let endpoint = specific.endpoint.map(|e| (e, true)).or(general.endpoint.clone().map(|e| (e, false)));
        if let Some(((variable, url), signal_specific)) = endpoint {
            r.record(fields.endpoint, &Found { variable, value: String::new() }, url.clone());
            s.endpoint = Some(OtlpEndpoint { url, signal_specific });
        }
        if let Some((variable, protocol)) = specific.protocol.or(general.protocol.clone()) {
            r.record(fields.protocol, &Found { variable, value: String::new() }, protocol.as_str().into());
            s.protocol = protocol;
        }
        let headers = match (&general.headers, specific.headers) {
            (Some((_, g)), Some((variable, h))) => Some((variable, g.merged_with(&h))),
            (None, Some(h)) => Some(h),
            (Some(g), None) => Some(g.clone()),
            (None, None) => None,
        };
        if let Some((variable, headers)) = headers {
            r.record(fields.headers, &Found { variable, value: String::new() }, header_keys(&headers));
            s.headers = headers;
        }
        if let Some((variable, timeout)) = specific.timeout.or(general.timeout.clone()) {
            r.record(fields.timeout, &Found { variable, value: String::new() }, timeout.as_millis().to_string());
            s.timeout = timeout;
        }
        if let Some((variable, compression)) = specific.compression.or(general.compression.clone()) {
            r.record(fields.compression, &Found { variable, value: String::new() }, compression.as_str().into());
            s.compression = compression;
        }
        if let Some((variable, path)) = specific.certificate.or(general.certificate.clone()) {
            r.record(fields.certificate, &Found { variable, value: String::new() }, path.display().to_string());
            s.certificate = Some(path);
        }
    }

    if let Some(v) = millis(r, "otel.metric_export_interval", r.bare("OTEL_METRIC_EXPORT_INTERVAL"), 1) {
        o.metric_export_interval = v;
    }
    if let Some(v) = r.string("otel.prometheus_host", r.bare("OTEL_EXPORTER_PROMETHEUS_HOST")) {
        o.prometheus_host = v;
    }
    let found = r.bare("OTEL_EXPORTER_PROMETHEUS_PORT");
    if let Some(v) = r.int_in("otel.prometheus_port", found, 0, 65535, "a port number from 0 to 65535") {
        o.prometheus_port = v as u16;
    }
    if let Some(found) = r.bare("OTEL_PROPAGATORS") {
        let mut propagators = Vec::new();
        let mut none = false;
        let mut ok = true;
        for item in found.value.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()) {
            match item.as_str() {
                "tracecontext" => propagators.push(Propagator::TraceContext),
                "baggage" => propagators.push(Propagator::Baggage),
                "none" => none = true,
                _ => {
                    r.push(unknown_name(found.variable.clone(), "propagator", item, Propagator::NAMES));
                    ok = false;
                }
            }
        }
        if ok {
            if none {
                propagators.clear();
            }
            propagators.dedup();
            r.record("otel.propagators", &found, propagator_names(&propagators));
            o.propagators = propagators;
        }
    }
    if let Some(v) = count(r, "otel.batch.max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE") {
        o.batch.max_queue_size = v;
    }
    if let Some(v) = count(r, "otel.batch.max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE") {
        o.batch.max_export_batch_size = v;
    }
    if let Some(v) = millis(r, "otel.batch.schedule_delay", r.bare("OTEL_BSP_SCHEDULE_DELAY"), 1) {
        o.batch.schedule_delay = v;
    }
    if let Some(v) = count(r, "otel.batch.max_concurrent_exports", "OTEL_BSP_MAX_CONCURRENT_EXPORTS") {
        o.batch.max_concurrent_exports = v;
    }
}

fn header_keys(headers: &Headers) -> String {
    headers.keys().collect::<Vec<_>>().join(",")
}

fn propagator_names(propagators: &[Propagator]) -> String {
    propagators.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(",")
}

impl LensConfig {
    /// Reads the configuration from `env`: `<prefix>_*`, then
    /// `<fallback_prefix>_*`, then the defaults, with span-group specs
    /// resolved against `catalog`; then validates it. Every problem (parse
    /// and semantic) is reported at once.
    ///
    /// Megatron calls `from_env(env, "MEGATRON_OTEL", Some("NEMO_LENS"),
    /// &MEGATRON_CATALOG)`. Custom rank and sampling strategies must be
    /// registered before: their names are checked against the registries. For a framework default service name use
    /// [`ConfigLoader`] or [`LensConfig::with_default_service_name`].
    pub fn from_env(
        env: &(impl EnvSource + ?Sized),
        prefix: &str,
        fallback_prefix: Option<&str>,
        catalog: &'static SpanGroupCatalog,
    ) -> Result<LensConfig, ConfigError> {
        let mut loader = ConfigLoader::new(prefix).catalog(catalog);
        loader.fallback_prefix = fallback_prefix;
        loader.load(env)
    }

    /// `self` with `service_name` set to `name` unless `OTEL_SERVICE_NAME`
    /// (or `--otel-service-name`) set it.
    #[must_use]
    pub fn with_default_service_name(mut self, name: &str) -> LensConfig {
        if self.origins.variable("service_name").is_none() {
            self.service_name = name.to_string();
        }
        self
    }

    /// Applies command-line overrides (they win over every variable, A2).
    ///
    /// `--otel-enabled` only turns telemetry on; `OTEL_SDK_DISABLED=true`
    /// still wins, with a one-line warning. Empty values count as unset.
    /// Call [`LensConfig::validate`] afterwards: a bad `--otel-span-groups`
    /// is reported there under the flag's name.
    pub fn apply_cli(&mut self, cli: &CliOverrides) {
        if cli.otel_enabled {
            if self.otel.sdk_disabled {
                crate::diag::warn("OTEL_SDK_DISABLED=true turns telemetry off although --otel-enabled was given");
            } else {
                self.enabled = true;
                self.origins.set("enabled", "--otel-enabled", "true".into());
            }
        }
        if let Some(name) = cli.otel_service_name.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            self.service_name = name.to_string();
            self.origins.set("service_name", "--otel-service-name", name.to_string());
        }
        if let Some(spec) = cli.otel_span_groups.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            self.span_groups = spec.to_string();
            self.origins.set("span_groups", "--otel-span-groups", spec.to_string());
        }
    }

    /// Whether telemetry is on: `enabled` and not `OTEL_SDK_DISABLED`.
    pub fn telemetry_enabled(&self) -> bool {
        self.enabled && !self.otel.sdk_disabled
    }

    /// The `tracing` rules that `tracing_groups` states, against `catalog`.
    pub fn tracing_rules(&self) -> Result<crate::tracing_rules::TracingRules, crate::tracing_rules::TracingRulesError> {
        crate::tracing_rules::TracingRules::parse(&self.tracing_groups, self.catalog)
    }

    /// The span groups that `span_groups` names in `catalog`.
    pub fn resolved_span_groups(&self) -> Result<GroupSet, UnknownSpanGroup> {
        self.catalog.resolve(&self.span_groups)
    }

    /// The exporter of `signal`: `OTEL_<SIGNAL>_EXPORTER`, else
    /// `<PREFIX>_EXPORTER`, else `otlp`.
    pub fn exporter_for(&self, signal: Signal) -> ExporterKind {
        self.otel.exporter_override(signal).or(self.exporter).unwrap_or(ExporterKind::Otlp)
    }

    /// Whether any exporter was chosen explicitly (`<PREFIX>_EXPORTER` or an
    /// `OTEL_<SIGNAL>_EXPORTER`), as opposed to the `otlp` default.
    pub fn exporter_configured(&self) -> bool {
        self.exporter.is_some() || Signal::ALL.iter().any(|s| self.otel.exporter_override(*s).is_some())
    }

    /// The directory of the `file` exporter: `file_dir`, else
    /// `telemetry/<run_id>`.
    pub fn file_dir_for(&self, run_id: &str) -> PathBuf {
        self.file_dir.clone().unwrap_or_else(|| PathBuf::from("telemetry").join(run_id))
    }

    /// The variable or flag that set `field` (a path such as `enabled` or
    /// `otel.otlp_traces.endpoint`), when the field still holds the value it
    /// set; `None` for defaults and values changed in code.
    pub fn variable_for(&self, field: &str) -> Option<&str> {
        let (variable, repr) = self.origins.fields.get(field)?;
        (self.current_repr(field).as_deref() == Some(repr.as_str())).then_some(variable.as_str())
    }

    /// The name a problem about `field` uses: the variable that set it, or
    /// `LensConfig.<field>` when it was set in code.
    fn source_name(&self, field: &str) -> String {
        self.variable_for(field).map_or_else(|| format!("LensConfig.{field}"), str::to_string)
    }

    /// The value of `field` as [`Origins`] records it.
    fn current_repr(&self, field: &str) -> Option<String> {
        let o = &self.otel;
        let otlp = |signal: Signal, part: &str| -> Option<String> {
            let s = o.otlp(signal);
            match part {
                "endpoint" => s.endpoint.as_ref().map(|e| e.url.clone()),
                "protocol" => Some(s.protocol.as_str().into()),
                "headers" => Some(header_keys(&s.headers)),
                "timeout" => Some(s.timeout.as_millis().to_string()),
                "compression" => Some(s.compression.as_str().into()),
                "certificate" => s.certificate.as_ref().map(|p| p.display().to_string()),
                _ => None,
            }
        };
        Some(match field {
            "enabled" => self.enabled.to_string(),
            "service_name" => self.service_name.clone(),
            "rank_strategy" => self.rank_strategy.clone(),
            "export_rank" => self.export_rank.to_string(),
            "export_sample_rate" => py_float(self.export_sample_rate),
            "sampling_strategy" => self.sampling_strategy.clone(),
            "traces_enabled" => self.traces_enabled.to_string(),
            "metrics_enabled" => self.metrics_enabled.to_string(),
            "rank_metrics" => self.rank_metrics.to_string(),
            "logs_enabled" => self.logs_enabled.to_string(),
            "span_groups" => self.span_groups.clone(),
            "tracing_groups" => self.tracing_groups.clone(),
            "exporter" => self.exporter?.as_str().into(),
            "run_id" => self.run_id.clone(),
            "launch_id" => self.launch_id.clone(),
            "user" => self.user.clone(),
            "wandb_entity" => self.wandb_entity.clone(),
            "wandb_project" => self.wandb_project.clone(),
            "file_dir" => self.file_dir.as_ref()?.display().to_string(),
            "export_retry_window" => self.export_retry_window.as_millis().to_string(),
            "shutdown_timeout" => self.shutdown_timeout.as_millis().to_string(),
            "prometheus_linger" => self.prometheus_linger.as_millis().to_string(),
            "prometheus_resource_labels" => self.prometheus_resource_labels.join(","),
            "peak_tflops" => py_float(self.peak_tflops?),
            "hang_timeout" => self.hang_timeout.to_string(),
            "otel.sdk_disabled" => o.sdk_disabled.to_string(),
            "otel.traces_exporter" => o.traces_exporter?.as_str().into(),
            "otel.metrics_exporter" => o.metrics_exporter?.as_str().into(),
            "otel.logs_exporter" => o.logs_exporter?.as_str().into(),
            "otel.traces_sampler" => o.traces_sampler.as_str().into(),
            "otel.traces_sampler_arg" => py_float(o.traces_sampler.ratio()?),
            "otel.metric_export_interval" => o.metric_export_interval.as_millis().to_string(),
            "otel.prometheus_host" => o.prometheus_host.clone(),
            "otel.prometheus_port" => o.prometheus_port.to_string(),
            "otel.propagators" => propagator_names(&o.propagators),
            "otel.batch.max_queue_size" => o.batch.max_queue_size.to_string(),
            "otel.batch.max_export_batch_size" => o.batch.max_export_batch_size.to_string(),
            "otel.batch.schedule_delay" => o.batch.schedule_delay.as_millis().to_string(),
            "otel.batch.max_concurrent_exports" => o.batch.max_concurrent_exports.to_string(),
            other => {
                let rest = other.strip_prefix("otel.otlp_")?;
                let (signal, part) = rest.split_once('.')?;
                let signal = Signal::ALL.into_iter().find(|s| s.as_str() == signal)?;
                return otlp(signal, part);
            }
        })
    }

    /// Checks everything of SPEC A3 on this configuration, including values
    /// set or changed in code, and reports every problem at once: the sample
    /// rate, the rank and sampling strategy names (against the registries),
    /// the span-group spec, exporter names per signal, endpoint URLs,
    /// timeouts, the export interval, the sampler ratio, the Prometheus host,
    /// the batch settings and the Prometheus labels. (Booleans, integers,
    /// protocol names and header syntax are checked when read; [`Headers`]
    /// cannot hold a malformed header.)
    ///
    /// ```
    /// use lens_core::config::LensConfig;
    ///
    /// let config = LensConfig { export_sample_rate: 1.5, ..LensConfig::default() };
    /// let err = config.validate().unwrap_err();
    /// assert!(err.to_string().contains("export_sample_rate must be in [0.0, 1.0], got 1.5"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let o = &self.otel;
        if !(0.0..=1.0).contains(&self.export_sample_rate) {
            problems.push(ConfigProblem::SampleRateOutOfRange {
                variable: self.source_name("export_sample_rate"),
                value: self.export_sample_rate,
            });
        }
        if let Err(source) = crate::strategies::rank_strategy(&self.rank_strategy) {
            problems.push(ConfigProblem::UnknownStrategy { variable: self.source_name("rank_strategy"), source });
        }
        if !self.sampling_strategy.is_empty()
            && let Err(source) = crate::strategies::sampling_strategy(&self.sampling_strategy)
        {
            problems.push(ConfigProblem::UnknownStrategy { variable: self.source_name("sampling_strategy"), source });
        }
        if let Err(source) = self.resolved_span_groups() {
            problems.push(ConfigProblem::UnknownSpanGroup {
                variable: self.source_name("span_groups"),
                value: self.span_groups.clone(),
                source,
            });
        }
        if let Err(source) = self.tracing_rules() {
            problems.push(ConfigProblem::InvalidTracingRules {
                variable: self.source_name("tracing_groups"),
                value: self.tracing_groups.clone(),
                source,
            });
        }
        if let Some(kind) = self.exporter.filter(|k| !ExporterKind::ALL_SIGNALS_NAMES.contains(&k.as_str())) {
            problems.push(unknown_name(
                self.source_name("exporter"),
                "exporter",
                kind.as_str().into(),
                ExporterKind::ALL_SIGNALS_NAMES,
            ));
        }
        for (field, signal) in [("otel.traces_exporter", Signal::Traces), ("otel.logs_exporter", Signal::Logs)] {
            if o.exporter_override(signal) == Some(ExporterKind::Prometheus) {
                problems.push(unknown_name(
                    self.source_name(field),
                    "exporter",
                    "prometheus".into(),
                    ExporterKind::TRACES_LOGS_NAMES,
                ));
            }
        }
        if let Some(peak) = self.peak_tflops.filter(|p| !(p.is_finite() && *p > 0.0)) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("peak_tflops"),
                value: py_float(peak),
                expected: "a positive number of TFLOP/s, e.g. 989.4".into(),
            });
        }
        if let Some(ratio) = o.traces_sampler.ratio().filter(|r| !(0.0..=1.0).contains(r)) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("otel.traces_sampler_arg"),
                value: py_float(ratio),
                expected: "a number from 0.0 to 1.0".into(),
            });
        }
        for signal in Signal::ALL {
            let fields = otlp_fields(signal);
            let s = o.otlp(signal);
            if let Some(endpoint) = &s.endpoint
                && let Err(reason) = standard::check_endpoint(&endpoint.url)
            {
                problems.push(ConfigProblem::InvalidEndpoint {
                    variable: self.source_name(fields.endpoint),
                    value: standard::redact_endpoint(&endpoint.url),
                    reason: reason.into(),
                });
            }
            if s.timeout.is_zero() {
                problems.push(self.positive_millis(fields.timeout, s.timeout));
            }
        }
        if o.metric_export_interval.is_zero() {
            problems.push(self.positive_millis("otel.metric_export_interval", o.metric_export_interval));
        }
        if o.batch.schedule_delay.is_zero() {
            problems.push(self.positive_millis("otel.batch.schedule_delay", o.batch.schedule_delay));
        }
        if o.prometheus_host.trim().is_empty() || o.prometheus_host.chars().any(char::is_whitespace) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("otel.prometheus_host"),
                value: o.prometheus_host.clone(),
                expected: "a host name or IP address without spaces, e.g. 'localhost' or '0.0.0.0'".into(),
            });
        }
        for (field, n) in [
            ("otel.batch.max_queue_size", o.batch.max_queue_size),
            ("otel.batch.max_export_batch_size", o.batch.max_export_batch_size),
            ("otel.batch.max_concurrent_exports", o.batch.max_concurrent_exports),
        ] {
            if n == 0 {
                problems.push(ConfigProblem::InvalidValue {
                    variable: self.source_name(field),
                    value: "0".into(),
                    expected: "a whole number, 1 or more".into(),
                });
            }
        }
        if o.batch.max_export_batch_size > o.batch.max_queue_size && o.batch.max_queue_size > 0 {
            // Name the setting that was changed: the batch size if it was,
            // else the queue size that became too small for the default batch.
            let problem = if self.variable_for("otel.batch.max_export_batch_size").is_some()
                || self.variable_for("otel.batch.max_queue_size").is_none()
            {
                ConfigProblem::InvalidValue {
                    variable: self.source_name("otel.batch.max_export_batch_size"),
                    value: o.batch.max_export_batch_size.to_string(),
                    expected: format!("a batch size no larger than the queue size ({})", o.batch.max_queue_size),
                }
            } else {
                ConfigProblem::InvalidValue {
                    variable: self.source_name("otel.batch.max_queue_size"),
                    value: o.batch.max_queue_size.to_string(),
                    expected: format!(
                        "a queue size at least the export batch size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, {})",
                        o.batch.max_export_batch_size
                    ),
                }
            };
            problems.push(problem);
        }
        if self.prometheus_resource_labels.iter().any(|l| l.trim().is_empty()) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("prometheus_resource_labels"),
                value: self.prometheus_resource_labels.join(","),
                expected: "resource attribute keys such as 'nemo.run.id', none of them empty".into(),
            });
        }
        if problems.is_empty() { Ok(()) } else { Err(ConfigError::new(problems)) }
    }

    fn positive_millis(&self, field: &'static str, value: Duration) -> ConfigProblem {
        ConfigProblem::InvalidValue {
            variable: self.source_name(field),
            value: value.as_millis().to_string(),
            expected: "a whole number of milliseconds, 1 or more".into(),
        }
    }
}

impl fmt::Debug for LensConfig {
    /// Every field; the catalog by name; header values redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensConfig")
            .field("enabled", &self.enabled)
            .field("service_name", &self.service_name)
            .field("rank_strategy", &self.rank_strategy)
            .field("export_rank", &self.export_rank)
            .field("export_sample_rate", &self.export_sample_rate)
            .field("sampling_strategy", &self.sampling_strategy)
            .field("traces_enabled", &self.traces_enabled)
            .field("metrics_enabled", &self.metrics_enabled)
            .field("rank_metrics", &self.rank_metrics)
            .field("logs_enabled", &self.logs_enabled)
            .field("span_groups", &self.span_groups)
            .field("tracing_groups", &self.tracing_groups)
            .field("exporter", &self.exporter)
            .field("run_id", &self.run_id)
            .field("launch_id", &self.launch_id)
            .field("user", &self.user)
            .field("wandb_entity", &self.wandb_entity)
            .field("wandb_project", &self.wandb_project)
            .field("catalog", &self.catalog.name())
            .field("file_dir", &self.file_dir)
            .field("export_retry_window", &self.export_retry_window)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("prometheus_linger", &self.prometheus_linger)
            .field("prometheus_resource_labels", &self.prometheus_resource_labels)
            .field("peak_tflops", &self.peak_tflops)
            .field("hang_timeout", &self.hang_timeout)
            .field("otel", &self.otel)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for LensConfig {
    /// A readable multi-line summary of the resolved configuration, with the
    /// variable behind each value that did not come from a default. Header
    /// values are shown as `[REDACTED]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.otel;
        let line = |f: &mut fmt::Formatter<'_>, name: &str, field: &str, value: &dyn fmt::Display| match self
            .variable_for(field)
        {
            Some(variable) => writeln!(f, "  {name:<26} {value}  [{variable}]"),
            None => writeln!(f, "  {name:<26} {value}"),
        };
        writeln!(f, "lens configuration (span-group catalog '{}')", self.catalog.name())?;
        let enabled = if self.enabled && o.sdk_disabled {
            "false (OTEL_SDK_DISABLED=true)".to_string()
        } else {
            self.enabled.to_string()
        };
        line(f, "enabled", "enabled", &enabled)?;
        line(f, "service_name", "service_name", &self.service_name)?;
        line(f, "rank_strategy", "rank_strategy", &self.rank_strategy)?;
        let export_rank = if self.export_rank < 0 {
            format!("{} (last rank)", self.export_rank)
        } else {
            self.export_rank.to_string()
        };
        line(f, "export_rank", "export_rank", &export_rank)?;
        line(f, "export_sample_rate", "export_sample_rate", &py_float(self.export_sample_rate))?;
        let sampling = if self.sampling_strategy.is_empty() { "(none)" } else { &self.sampling_strategy };
        line(f, "sampling_strategy", "sampling_strategy", &sampling)?;
        line(f, "traces_enabled", "traces_enabled", &self.traces_enabled)?;
        line(f, "metrics_enabled", "metrics_enabled", &self.metrics_enabled)?;
        line(f, "rank_metrics", "rank_metrics", &self.rank_metrics)?;
        line(f, "hang_timeout_s", "hang_timeout", &self.hang_timeout)?;
        line(f, "logs_enabled", "logs_enabled", &self.logs_enabled)?;
        let groups = match self.resolved_span_groups() {
            Ok(set) => format!("{} = {{{}}}", self.span_groups, self.catalog.names(set).join(", ")),
            Err(err) => format!("{} (invalid: {err})", self.span_groups),
        };
        line(f, "span_groups", "span_groups", &groups)?;
        if !self.tracing_groups.is_empty() {
            line(f, "tracing_groups", "tracing_groups", &self.tracing_groups)?;
        }
        for (signal, field) in [
            (Signal::Traces, "otel.traces_exporter"),
            (Signal::Metrics, "otel.metrics_exporter"),
            (Signal::Logs, "otel.logs_exporter"),
        ] {
            let field = if o.exporter_override(signal).is_some() { field } else { "exporter" };
            let default = if self.exporter_configured() { "" } else { " (default)" };
            line(f, &format!("{signal} exporter"), field, &format_args!("{}{default}", self.exporter_for(signal)))?;
        }
        let run_id = if self.run_id.is_empty() { "(detected at setup)" } else { &self.run_id };
        line(f, "run_id", "run_id", &run_id)?;
        for (name, value) in [
            ("launch_id", &self.launch_id),
            ("user", &self.user),
            ("wandb_entity", &self.wandb_entity),
            ("wandb_project", &self.wandb_project),
        ] {
            if !value.is_empty() {
                line(f, name, name, value)?;
            }
        }
        if Signal::ALL.iter().any(|s| self.exporter_for(*s) == ExporterKind::File) {
            let dir =
                self.file_dir.as_ref().map_or_else(|| "telemetry/<run_id>".to_string(), |d| d.display().to_string());
            line(f, "file_dir", "file_dir", &dir)?;
        }
        line(
            f,
            "export_retry_window",
            "export_retry_window",
            &format_args!("{} ms", self.export_retry_window.as_millis()),
        )?;
        line(f, "shutdown_timeout", "shutdown_timeout", &format_args!("{} ms", self.shutdown_timeout.as_millis()))?;
        line(f, "trace sampler", "otel.traces_sampler", &o.traces_sampler)?;
        let propagators = if o.propagators.is_empty() { "none".to_string() } else { propagator_names(&o.propagators) };
        line(f, "propagators", "otel.propagators", &propagators)?;
        line(
            f,
            "metric_export_interval",
            "otel.metric_export_interval",
            &format_args!("{} ms", o.metric_export_interval.as_millis()),
        )?;
        let b = &o.batch;
        writeln!(
            f,
            "  {:<26} queue {}, batch {}, delay {} ms, {} concurrent",
            "batch span processor",
            b.max_queue_size,
            b.max_export_batch_size,
            b.schedule_delay.as_millis(),
            b.max_concurrent_exports
        )?;
        for signal in Signal::ALL {
            match self.exporter_for(signal) {
                ExporterKind::Otlp => {
                    let s = o.otlp(signal);
                    write!(
                        f,
                        "  {:<26} {} {}, headers: {}, timeout {} ms, compression {}",
                        format!("otlp {signal}"),
                        s.protocol,
                        standard::redact_endpoint(&s.endpoint_url(signal)),
                        s.headers,
                        s.timeout.as_millis(),
                        s.compression.as_str()
                    )?;
                    if let Some(cert) = &s.certificate {
                        write!(f, ", certificate {}", cert.display())?;
                    }
                    writeln!(f)?;
                }
                ExporterKind::Prometheus => {
                    writeln!(
                        f,
                        "  {:<26} http://{}:{}/metrics, labels {:?}, linger {} ms",
                        "prometheus",
                        o.prometheus_host,
                        o.prometheus_port,
                        self.prometheus_resource_labels,
                        self.prometheus_linger.as_millis()
                    )?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The command-line overrides of SPEC A2, as a clap-based binary fills them
/// (with the `clap` feature, `#[command(flatten)]` this struct).
///
/// ```
/// use lens_core::config::{CliOverrides, LensConfig};
///
/// let mut config = LensConfig::default();
/// config.apply_cli(&CliOverrides {
///     otel_enabled: true,
///     otel_service_name: Some("my-job".into()),
///     otel_span_groups: Some("per_step".into()),
/// });
/// assert!(config.enabled);
/// assert_eq!(config.variable_for("span_groups"), Some("--otel-span-groups"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct CliOverrides {
    /// Enable OpenTelemetry telemetry (only turns it on; OTEL_SDK_DISABLED=true still wins).
    #[cfg_attr(feature = "clap", arg(long = "otel-enabled"))]
    pub otel_enabled: bool,
    /// Service name; overrides OTEL_SERVICE_NAME.
    #[cfg_attr(feature = "clap", arg(long = "otel-service-name", value_name = "NAME"))]
    pub otel_service_name: Option<String>,
    /// Comma-separated span-group spec: group names and presets (default, per_step, all; Megatron adds profiling).
    #[cfg_attr(feature = "clap", arg(long = "otel-span-groups", value_name = "SPEC"))]
    pub otel_span_groups: Option<String>,
}

/// `['a', 'b']`, for the strategy registry's messages.
pub(crate) fn py_list_pub<S: AsRef<str>>(items: &[S]) -> String {
    error::py_list(items)
}
