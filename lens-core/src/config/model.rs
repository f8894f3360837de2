//! The configuration model: [`LensConfig`], its defaults, [`Origins`] (which
//! variable set each field), [`HangTimeout`] and [`CliOverrides`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::pyrepr::py_float;
use super::standard::{ExporterKind, OtelSettings, Signal};
use crate::groups::{GroupSet, LENS_CATALOG, SpanGroupCatalog, UnknownSpanGroup};

/// The prefix of Lens's own variables (`NEMO_LENS_*`).
pub const DEFAULT_PREFIX: &str = "NEMO_LENS";

/// The service name when `OTEL_SERVICE_NAME` is unset and the framework sets
/// no default of its own.
pub const DEFAULT_SERVICE_NAME: &str = "nemo";

/// The default of `<PREFIX>_PROMETHEUS_RESOURCE_LABELS`.
pub const DEFAULT_PROMETHEUS_RESOURCE_LABELS: &[&str] = &["nemo.run.id", "service.instance.id"];

/// The default of `<PREFIX>_SPOOL_SIZE_KIB`: 4096 KiB (4 MiB) of spool per rank.
pub const DEFAULT_SPOOL_SIZE_KIB: u64 = 4096;
/// The smallest `<PREFIX>_SPOOL_SIZE_KIB` accepted.
pub const MIN_SPOOL_SIZE_KIB: u64 = 64;
/// The largest `<PREFIX>_SPOOL_SIZE_KIB` accepted (1 GiB).
pub const MAX_SPOOL_SIZE_KIB: u64 = 1 << 20;

/// The default of `<PREFIX>_FILE_MAX_BYTES`: 1 GiB per file.
pub const DEFAULT_FILE_MAX_BYTES: u64 = 1 << 30;

// --- control file (issue 23) ---
/// The default of `<PREFIX>_CONTROL_POLL_S`: 2 s.
pub const DEFAULT_CONTROL_POLL: Duration = Duration::from_secs(2);

/// What `<PREFIX>_CONTROL_POLL_S` accepts, in words.
pub const CONTROL_POLL_EXPECTED: &str = "a number of seconds from 0.01 to 3600, fractions allowed, e.g. 2 or 0.5";

/// `<PREFIX>_CONTROL_POLL_S`: seconds from 0.01 to 3600, fractions allowed.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(lens_core::config::parse_control_poll("0.5"), Some(Duration::from_millis(500)));
/// assert_eq!(lens_core::config::parse_control_poll("0"), None);
/// assert_eq!(lens_core::config::parse_control_poll("soon"), None);
/// ```
pub fn parse_control_poll(value: &str) -> Option<Duration> {
    let seconds = super::pyrepr::parse_py_float(value).filter(|s| s.is_finite() && (0.01..=3600.0).contains(s))?;
    Some(Duration::from_secs_f64(seconds))
}
// --- end control file ---

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
    pub(super) fields: BTreeMap<&'static str, (String, String)>,
    /// The value of each field read from a variable, as typed (trimmed):
    /// what a problem about the field quotes (`0`, not the parsed `0.0`).
    pub(super) written: BTreeMap<&'static str, String>,
    /// The prefixes the configuration was read with, primary first (empty
    /// for a configuration built in code).
    pub(super) prefixes: Vec<String>,
}

impl Origins {
    /// The variable or flag that last set `field` (a path such as
    /// `export_sample_rate` or `otel.otlp_traces.endpoint`), whatever the
    /// field holds now.
    pub fn variable(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(|(variable, _)| variable.as_str())
    }

    /// `<PREFIX>_<key>` for each prefix the configuration was read with,
    /// primary first: the variables a user can set for `key` (`FILE_DIR`,
    /// `RUN_ID`); empty for a configuration built in code.
    pub fn prefixed_names(&self, key: &str) -> Vec<String> {
        self.prefixes.iter().map(|prefix| format!("{prefix}_{key}")).collect()
    }

    /// The primary prefix the configuration was read with (`MYJOB_OTEL`);
    /// `None` for a configuration built in code.
    pub fn prefix(&self) -> Option<&str> {
        self.prefixes.first().map(String::as_str)
    }

    pub(super) fn set(&mut self, field: &'static str, variable: &str, repr: String) {
        if !field.is_empty() {
            self.fields.insert(field, (variable.to_string(), repr));
            // A flag or code that sets the field again has no typed text.
            self.written.remove(field);
        }
    }
}

/// The whole configuration of one process.
///
/// Field defaults are the Python original's; lens's additions follow.
/// Build one with [`LensConfig::from_env`] / [`ConfigLoader`](super::ConfigLoader), or from
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
    /// (`<PREFIX>_RANK_METRICS`, default false).
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
    /// The most bytes the `file` exporter writes to one file
    /// (`<PREFIX>_FILE_MAX_BYTES`, default [`DEFAULT_FILE_MAX_BYTES`], 1 GiB);
    /// once a file is full its further records are dropped, counted in the
    /// shutdown report, with one warning.
    pub file_max_bytes: u64,
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
    /// `auto`, `0` for off, or seconds; default `auto`).
    pub hang_timeout: HangTimeout,
    // --- spool (issue 22) ---
    /// Whether each rank keeps the crash-safe spool while telemetry is
    /// enabled (`<PREFIX>_SPOOL`, default on; `0` turns it off).
    pub spool: bool,
    /// Where the spool files go (`<PREFIX>_SPOOL_DIR`; default beside the
    /// program's checkpoints, else under the file-export directory).
    pub spool_dir: Option<PathBuf>,
    /// The size of each rank's spool file in KiB (`<PREFIX>_SPOOL_SIZE_KIB`,
    /// default [`DEFAULT_SPOOL_SIZE_KIB`], from [`MIN_SPOOL_SIZE_KIB`] to
    /// [`MAX_SPOOL_SIZE_KIB`]).
    pub spool_size_kib: u64,
    // --- end spool ---
    /// Whether every current span of the facade, and every entered span of
    /// the `tracing` bridge, is also made current in the OpenTelemetry
    /// context (`<PREFIX>_CONTEXT_PER_SPAN`, default off):
    /// off, lens keeps its own current-span stack, and spans started through
    /// the OpenTelemetry API do not see lens spans as parents (SPEC A25).
    pub context_per_span: bool,
    // --- control file (issue 23, SPEC A24) ---
    /// The control file a lens thread on each rank watches for changes in
    /// flight (`<PREFIX>_CONTROL_FILE`; `None`: no control file, no thread).
    /// See [`crate::control`].
    pub control_file: Option<PathBuf>,
    /// How often that thread looks at the control file: one `stat` per poll
    /// (`<PREFIX>_CONTROL_POLL_S`, seconds, fractions allowed, default
    /// [`DEFAULT_CONTROL_POLL`], 2 s).
    pub control_poll: Duration,
    // --- end control file ---
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
            file_max_bytes: DEFAULT_FILE_MAX_BYTES,
            export_retry_window: Duration::from_millis(30_000),
            shutdown_timeout: Duration::from_millis(5000),
            prometheus_linger: Duration::ZERO,
            prometheus_resource_labels: DEFAULT_PROMETHEUS_RESOURCE_LABELS.iter().map(|s| s.to_string()).collect(),
            peak_tflops: None,
            hang_timeout: HangTimeout::Auto,
            spool: true,
            spool_dir: None,
            spool_size_kib: DEFAULT_SPOOL_SIZE_KIB,
            context_per_span: false,
            // --- control file (issue 23) ---
            control_file: None,
            control_poll: DEFAULT_CONTROL_POLL,
            // --- end control file ---
            otel: OtelSettings::default(),
            origins: Origins::default(),
        }
    }
}

impl LensConfig {
    /// Whether telemetry is on: `enabled` and not `OTEL_SDK_DISABLED`.
    pub fn telemetry_enabled(&self) -> bool {
        self.enabled && !self.otel.sdk_disabled
    }

    /// The `tracing` rules that `tracing_groups` states, against `catalog`.
    pub fn tracing_rules(&self) -> Result<crate::tracing_rules::TracingRules, crate::tracing_rules::TracingRulesError> {
        crate::tracing_rules::TracingRules::parse(&self.tracing_groups, self.catalog)
            .map(|rules| rules.for_variable(self.variable_to_set("tracing_groups", "TRACING_GROUPS")))
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
}

/// When the hang watchdog fires (`<PREFIX>_HANG_TIMEOUT_S`).
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
    pub const EXPECTED: &'static str = "auto, 0 (off) or a number of seconds from 0.01 to 31536000 (a year), e.g. 120";

    /// The shortest timeout, in seconds: the watchdog's shortest tick (10
    /// ms). A shorter one could not be kept, and one of a nanosecond or
    /// less would round to nothing, which is off.
    pub const MIN_SECONDS: f64 = 0.01;

    /// `auto`, `0` or a finite number of seconds from [`MIN_SECONDS`](Self::MIN_SECONDS)
    /// to a year.
    ///
    /// Only a written zero (`0`, `0.0`, `-0`, `0e3`: no digit but `0`
    /// before an exponent) means off. A number too small for a float
    /// (`1e-400`) also reads as 0.0, but it was meant as a tiny timeout,
    /// so it is refused as `0.001` is, never taken as off.
    ///
    /// ```
    /// use lens_core::config::HangTimeout;
    ///
    /// assert_eq!(HangTimeout::parse("0.0"), Some(HangTimeout::Off));
    /// assert_eq!(HangTimeout::parse("1e-400"), None);
    /// ```
    pub fn parse(value: &str) -> Option<HangTimeout> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("auto") {
            return Some(HangTimeout::Auto);
        }
        let seconds =
            super::pyrepr::parse_py_float(value).filter(|s| s.is_finite() && (0.0..=31_536_000.0).contains(s))?;
        if seconds == 0.0 {
            let mantissa = value.split(['e', 'E']).next().unwrap_or(value);
            let written_zero = mantissa.chars().filter(char::is_ascii_digit).all(|digit| digit == '0');
            return written_zero.then_some(HangTimeout::Off);
        }
        (seconds >= Self::MIN_SECONDS).then(|| HangTimeout::After(Duration::from_secs_f64(seconds)))
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

/// The command-line overrides (they win over every variable), as a clap-based binary fills them
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
