//! Setting telemetry up and the handle of one telemetry lifetime, defined
//! once for both builds: [`Telemetry::from_env`] (the one call a program
//! makes), [`TelemetryBuilder`] (the same with resource attributes, an
//! injected environment and options), [`setup_telemetry`] (for a framework
//! that reads its configuration itself), [`Telemetry`], [`SetupOptions`],
//! [`SetupError`] (the one error type; [`ExporterError`] is one of its
//! causes).
//!
//! ```
//! use lens_fallbacks::setup::Telemetry;
//!
//! // `MYJOB_OTEL_*`, then `NEMO_LENS_*`; the rank from RANK/WORLD_SIZE or SLURM.
//! let telemetry = Telemetry::from_env("MYJOB_OTEL")?;
//! // ... the training loop ...
//! let report = telemetry.shutdown(std::time::Duration::from_secs(5));
//! # drop(report);
//! # Ok::<(), lens_fallbacks::setup::SetupError>(())
//! ```
//!
//! With telemetry not enabled, a bad value in another telemetry variable is
//! one warning and setup returns a disabled handle: a typo never stops a job
//! that does not use telemetry. With telemetry enabled a bad configuration is
//! an error before anything is installed; a program that would
//! rather train on without telemetry writes
//! `Telemetry::from_env("MYJOB_OTEL").unwrap_or_else(Telemetry::off_with_warning)`.
//!
//! With the `otel` feature setup builds the OpenTelemetry runtime
//! (`lens_otel_runtime::Pipeline`: the providers, exporters and shutdown);
//! the handle holds that pipeline behind the feature. A configuration that
//! selects a transport this build lacks (OTLP over gRPC without the feature
//! `otlp-grpc`, over HTTP without `otlp-http`, Prometheus without
//! `prometheus`) is [`SetupError::MissingTransport`], before anything is
//! installed. Without it the
//! handle records and exports nothing, says telemetry is off
//! (`is_enabled()` is false), and no telemetry value stops the program: a
//! problem in the configuration is one warning (SPEC A22); every method
//! exists with the same signature.
//!
//! Dropping the handle shuts it down with the configured timeout
//! (`<PREFIX>_SHUTDOWN_TIMEOUT_MS`): keep it alive for the whole run.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::attr::{AttrValue, KeyValue};
use crate::config::{
    ConfigError, ConfigLoader, DEFAULT_PREFIX, DEFAULT_SERVICE_NAME, HangTimeout, LensConfig, MissingTransport,
    Transports,
};
use crate::env::{EnvSource, ProcessEnv};
use crate::groups::{GroupSet, LENS_CATALOG, SpanGroupCatalog};
use crate::identity::{RankContext, RankContextError, RunIdSource};
use crate::propagation::RemoteContext;
pub use crate::report::ShutdownReport;
use crate::strategies::{RankStrategy, StrategyError};
use crate::tracing_rules::TracingRules;

pub use crate::exporter_error::ExporterError;

/// The instrumentation scope of lens's own tracer and meter.
pub const DEFAULT_SCOPE: &str = "nemo.lens";

/// The transports this build has: the features `otlp-grpc`, `otlp-http`
/// and `prometheus` of lens-fallbacks, which turn on the runtime's of the
/// same names (none without `otel`). For a framework that applies the
/// default-destination rule itself (`config::default_destination_in`).
pub const TRANSPORTS: Transports = {
    #[cfg(feature = "otel")]
    {
        lens_otel_runtime::TRANSPORTS
    }
    #[cfg(not(feature = "otel"))]
    {
        Transports::FILES_ONLY
    }
};

/// Why setup refused to start: only what setup can return.
///
/// The same variants in both builds (without `otel` setup returns no
/// error: no telemetry value stops the program, SPEC A22). `Debug` prints the same message as
/// `Display`, so `fn main() -> Result<(), SetupError>` shows the message a
/// person can act on rather than the structure.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The configuration has problems; every one is listed.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The configuration selects a transport this build lacks: the error
    /// names the variable, its value and the cargo feature of
    /// lens-fallbacks to enable.
    #[error("{0}")]
    MissingTransport(#[from] MissingTransport),
    /// The rank strategy could not decide.
    #[error("{0}")]
    Strategy(#[from] StrategyError),
    /// An exporter could not be built (bad certificate, unbindable port, ...).
    /// Only with `otel`, which builds exporters; the variant exists in both.
    #[error("{0}")]
    Exporter(#[from] ExporterError),
    /// The rank context (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, SLURM) cannot
    /// be read.
    #[error("{0}")]
    Rank(#[from] RankContextError),
    /// Telemetry is already set up in this process (only with `otel`; the
    /// variant exists in both).
    #[error(
        "setup_telemetry() has already been initialised for this process. Call it once at startup, or call \
         shutdown() on the active handle before setting telemetry up again."
    )]
    AlreadyActive,
}

impl fmt::Debug for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(feature = "otel")]
impl From<lens_otel_runtime::PipelineError> for SetupError {
    fn from(error: lens_otel_runtime::PipelineError) -> SetupError {
        use lens_otel_runtime::PipelineError;
        match error {
            PipelineError::Config(error) => SetupError::Config(error),
            PipelineError::MissingTransport(error) => SetupError::MissingTransport(error),
            PipelineError::Strategy(error) => SetupError::Strategy(error),
            PipelineError::Exporter(error) => SetupError::Exporter(error),
            PipelineError::AlreadyActive => SetupError::AlreadyActive,
        }
    }
}

type LazyAttributes = Box<dyn FnOnce() -> Vec<KeyValue> + Send>;

/// What a caller can add to setup beyond the configuration.
///
/// Without `otel` the additions are accepted and unused (lazy resource
/// attributes are never evaluated). The custom exporters
/// (`with_span_exporter`, `with_metric_exporter`) name SDK traits, so they
/// exist only with `otel` and are not part of the facade's API.
///
/// ```
/// use lens_fallbacks::attr::KeyValue;
/// use lens_fallbacks::setup::SetupOptions;
///
/// let options = SetupOptions::new()
///     .with_rank_strategy(|_config, rank| rank.rank % 2 == 0)
///     .with_lazy_resource(|| vec![KeyValue::new("dl.gpu.name", "probed only on exporting ranks")]);
/// # drop(options);
/// ```
pub struct SetupOptions {
    #[cfg(feature = "otel")]
    pub(crate) span_exporter: Option<lens_otel_runtime::pipeline::SpanExporterFactory>,
    #[cfg(feature = "otel")]
    pub(crate) metric_exporter: Option<lens_otel_runtime::pipeline::MetricReaderFactory>,
    pub(crate) rank_strategy: Option<RankStrategy>,
    pub(crate) lazy_resource: Vec<LazyAttributes>,
    pub(crate) scope: Cow<'static, str>,
    pub(crate) env: Option<Box<dyn EnvSource + Send + Sync>>,
    pub(crate) service_version: Option<String>,
    pub(crate) checkpoint_dir: Option<std::path::PathBuf>,
}

impl Default for SetupOptions {
    fn default() -> Self {
        SetupOptions::new()
    }
}

impl fmt::Debug for SetupOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupOptions")
            .field("custom_span_exporter", &self.has_custom_span_exporter())
            .field("custom_metric_exporter", &self.has_custom_metric_exporter())
            .field("custom_rank_strategy", &self.rank_strategy.is_some())
            .field("lazy_resource", &self.lazy_resource.len())
            .field("scope", &self.scope)
            .field("service_version", &self.service_version)
            .field("checkpoint_dir", &self.checkpoint_dir)
            .finish_non_exhaustive()
    }
}

impl SetupOptions {
    fn has_custom_span_exporter(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.span_exporter.is_some();
        #[cfg(not(feature = "otel"))]
        return false;
    }

    fn has_custom_metric_exporter(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.metric_exporter.is_some();
        #[cfg(not(feature = "otel"))]
        return false;
    }

    /// No additions: exporters from the configuration, the configured rank
    /// strategy, the process environment, scope `nemo.lens`.
    pub fn new() -> Self {
        SetupOptions {
            #[cfg(feature = "otel")]
            span_exporter: None,
            #[cfg(feature = "otel")]
            metric_exporter: None,
            rank_strategy: None,
            lazy_resource: Vec::new(),
            scope: Cow::Borrowed(DEFAULT_SCOPE),
            env: None,
            service_version: None,
            checkpoint_dir: None,
        }
    }

    /// Decide whether this rank exports with `strategy` instead of the
    /// configured rank strategy (the original's per-call `export_strategy=`).
    #[must_use]
    pub fn with_rank_strategy(
        mut self,
        strategy: impl Fn(&LensConfig, &RankContext) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.rank_strategy = Some(Arc::new(strategy));
        self
    }

    /// Resource attributes that are costly to detect (GPU identity through
    /// NVML): evaluated only on exporting ranks, after the export decision.
    /// Caller-supplied attributes, lazy ones included, win over detected ones.
    #[must_use]
    pub fn with_lazy_resource(mut self, attributes: impl FnOnce() -> Vec<KeyValue> + Send + 'static) -> Self {
        self.lazy_resource.push(Box::new(attributes));
        self
    }

    /// The instrumentation scope of the handle's tracer and meter (default
    /// `nemo.lens`).
    #[must_use]
    pub fn with_scope(mut self, scope: impl Into<Cow<'static, str>>) -> Self {
        self.scope = scope.into();
        self
    }

    /// The application's version, exported as the resource attribute
    /// `service.version` (unset by default: lens's own version is the
    /// instrumentation scope's, never the service's).
    #[must_use]
    pub fn with_service_version(mut self, version: impl Into<String>) -> Self {
        self.service_version = Some(version.into());
        self
    }

    /// The directory where the program saves its checkpoints (Megatron's
    /// `--save`): the default place of the crash-safe spool is
    /// `<dir>/lens-spool` (`<PREFIX>_SPOOL_DIR` wins; see `docs/crashes.md`).
    /// Without it the spool goes under the file-export directory.
    #[must_use]
    pub fn with_checkpoint_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.checkpoint_dir = Some(dir.into());
        self
    }

    /// Read the run id, resource detectors and the incoming `TRACEPARENT`
    /// from `env` instead of the process environment (for tests).
    #[must_use]
    pub fn with_env(mut self, env: impl EnvSource + Send + Sync + 'static) -> Self {
        self.env = Some(Box::new(env));
        self
    }
}

/// The otel-only additions: custom exporters (they name SDK traits, so
/// they exist only with `otel`).
#[cfg(feature = "otel")]
impl SetupOptions {
    /// Export spans to `exporter` instead of the configured one (still
    /// through lens's batch processor, so the counters and limits hold).
    #[must_use]
    pub fn with_span_exporter<E: opentelemetry_sdk::trace::SpanExporter + 'static>(mut self, exporter: E) -> Self {
        self.span_exporter = Some(lens_otel_runtime::pipeline::span_exporter_factory(exporter));
        self
    }

    /// Export metrics to `exporter` instead of the configured one, read
    /// periodically at the configured interval.
    #[must_use]
    pub fn with_metric_exporter<E: opentelemetry_sdk::metrics::exporter::PushMetricExporter>(
        mut self,
        exporter: E,
    ) -> Self {
        self.metric_exporter = Some(lens_otel_runtime::pipeline::metric_exporter_factory(exporter));
        self
    }
}

/// The handle of one telemetry lifetime.
///
/// Without `otel` it records and exports nothing: [`meter`](Telemetry::meter)
/// is a no-op meter, no group is enabled, every report is empty, and
/// [`is_enabled`](Telemetry::is_enabled) is false.
///
/// It exposes the meter (and with `otel` the tracer), whether this rank exports, the enabled
/// span groups, live export counters, [`force_flush`](Telemetry::force_flush)
/// and [`shutdown`](Telemetry::shutdown). Dropping it shuts down.
#[must_use = "dropping the handle shuts telemetry down: keep it alive for the whole run"]
pub struct Telemetry {
    /// What the runtime built: tracer, meter, counters, providers.
    #[cfg(feature = "otel")]
    pub(crate) pipeline: lens_otel_runtime::Pipeline,
    pub(crate) meter: crate::metrics::Meter,
    #[cfg(feature = "otel")]
    pub(crate) otel_meter: opentelemetry::metrics::Meter,
    pub(crate) enabled: bool,
    pub(crate) rank: RankContext,
    pub(crate) incoming: Option<RemoteContext>,
    pub(crate) shutdown_timeout: Duration,
    /// The warnings setup gave (also written on standard error).
    pub(crate) warnings: Vec<String>,
    /// The `tracing` bridge's rules from this setup's configuration, and the
    /// variable that sets them.
    pub(crate) tracing_rules: Option<(TracingRules, String)>,
    /// The training diagnosis' settings from this setup's configuration
    /// (`<PREFIX>_HANG_TIMEOUT_S`, `<PREFIX>_PEAK_TFLOPS`), read once.
    pub(crate) hang_timeout: HangTimeout,
    pub(crate) peak_tflops: Option<f64>,
    /// The control file's setup (`<PREFIX>_CONTROL_FILE`), when one is set
    /// and telemetry is on.
    pub(crate) control: Option<crate::control::ControlSetup>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.enabled)
            .field("exporting", &self.is_exporting())
            .field("records_spans", &self.records_spans())
            .field("groups", &self.enabled_groups())
            .field("rank", &self.rank)
            .field("run_id", &self.run_id())
            .field("lifetime", &self.lifetime_index())
            .field("destinations", &self.destinations())
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// A handle that records and exports nothing (telemetry off).
    pub(crate) fn inert(enabled: bool, rank: RankContext, shutdown_timeout: Duration) -> Telemetry {
        Telemetry {
            #[cfg(feature = "otel")]
            pipeline: lens_otel_runtime::Pipeline::detached(),
            meter: crate::metrics::Meter::noop(),
            #[cfg(feature = "otel")]
            otel_meter: noop_otel_meter(),
            enabled,
            rank,
            incoming: None,
            shutdown_timeout,
            warnings: Vec::new(),
            tracing_rules: None,
            hang_timeout: HangTimeout::Auto,
            peak_tflops: None,
            control: None,
        }
    }

    /// The handle of what the runtime built.
    #[cfg(feature = "otel")]
    fn from_pipeline(
        pipeline: lens_otel_runtime::Pipeline,
        enabled: bool,
        rank: RankContext,
        incoming: Option<RemoteContext>,
        shutdown_timeout: Duration,
    ) -> Telemetry {
        let (meter, otel_meter) = match pipeline.otel_meter() {
            Some(otel_meter) => (crate::metrics::Meter::from(otel_meter.clone()), otel_meter.clone()),
            None => (crate::metrics::Meter::noop(), noop_otel_meter()),
        };
        Telemetry {
            pipeline,
            meter,
            otel_meter,
            enabled,
            rank,
            incoming,
            shutdown_timeout,
            warnings: Vec::new(),
            tracing_rules: None,
            hang_timeout: HangTimeout::Auto,
            peak_tflops: None,
            control: None,
        }
    }

    /// Sets telemetry up from the environment: `<prefix>_*` variables, then
    /// `NEMO_LENS_*` where those are unset, then the defaults; the rank
    /// context from the same environment (`RANK`/`WORLD_SIZE`/`LOCAL_RANK`,
    /// else SLURM's). The one line a program writes; see
    /// [`Telemetry::builder`] for resource attributes, an injected
    /// environment and options.
    ///
    /// With telemetry not enabled a bad value in another variable is one
    /// warning and the handle is disabled; with it enabled every problem is
    /// an error, before anything is installed.
    ///
    /// ```
    /// use lens_fallbacks::setup::Telemetry;
    ///
    /// let telemetry = Telemetry::from_env("MYJOB_OTEL")?;
    /// # assert!(!telemetry.is_exporting());
    /// # Ok::<(), lens_fallbacks::setup::SetupError>(())
    /// ```
    pub fn from_env(prefix: &str) -> Result<Telemetry, SetupError> {
        Telemetry::builder(prefix).setup()
    }

    /// A builder for setup with `<prefix>_*` variables (see
    /// [`TelemetryBuilder`]).
    pub fn builder(prefix: &str) -> TelemetryBuilder {
        TelemetryBuilder::new(prefix)
    }

    /// A handle with telemetry off: records and exports nothing, installs
    /// nothing.
    pub fn disabled() -> Telemetry {
        Telemetry::inert(false, RankContext::SINGLE, LensConfig::default().shutdown_timeout)
    }

    /// Writes `error` as one warning and returns a [`disabled`](Telemetry::disabled)
    /// handle: for a program that would rather train on without telemetry
    /// than stop on a bad telemetry configuration.
    ///
    /// ```
    /// use lens_fallbacks::setup::Telemetry;
    ///
    /// let telemetry = Telemetry::from_env("MYJOB_OTEL").unwrap_or_else(Telemetry::off_with_warning);
    /// # drop(telemetry);
    /// ```
    pub fn off_with_warning(error: SetupError) -> Telemetry {
        let mut telemetry = Telemetry::disabled();
        warn_into(&mut telemetry.warnings, format!("telemetry is off for this run: {error}"));
        telemetry
    }

    /// The warnings setup gave for this handle, in order (each was also
    /// written on standard error as `lens: warning: ...`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The tracer (a no-op tracer when this rank does not export). `otel`
    /// only: it is OpenTelemetry's type; not part of the facade's API.
    #[cfg(feature = "otel")]
    pub fn tracer(&self) -> &opentelemetry::global::BoxedTracer {
        self.pipeline.tracer()
    }

    /// The meter of lens's metric handles (a no-op meter when this rank
    /// does not export, so that instruments created from it record nothing).
    pub fn meter(&self) -> &crate::metrics::Meter {
        &self.meter
    }

    /// The OpenTelemetry meter behind [`meter`](Telemetry::meter), for
    /// instruments lens's handles do not cover (observable instruments).
    /// `otel` only; not part of the facade's API.
    #[cfg(feature = "otel")]
    pub fn otel_meter(&self) -> &opentelemetry::metrics::Meter {
        &self.otel_meter
    }

    /// Whether telemetry is enabled in this process (exporting or not);
    /// always false in a build without `otel`, which records nothing.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether this rank exports.
    pub fn is_exporting(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.pipeline.is_exporting();
        #[cfg(not(feature = "otel"))]
        return false;
    }

    /// Whether this rank exports the per-rank metrics (`<PREFIX>_RANK_METRICS`):
    /// then [`Telemetry::meter`] is a real meter on every rank, even where the
    /// rank strategy says no and [`Telemetry::is_exporting`] is false.
    pub fn exports_rank_metrics(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.pipeline.exports_rank_metrics();
        #[cfg(not(feature = "otel"))]
        return false;
    }

    /// Whether this rank records spans (it exports and the sampling strategy
    /// keeps it).
    pub fn records_spans(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.pipeline.records_spans();
        #[cfg(not(feature = "otel"))]
        return false;
    }

    /// The span groups enabled by this lifetime (empty when not exporting).
    pub fn enabled_groups(&self) -> GroupSet {
        #[cfg(feature = "otel")]
        return self.pipeline.enabled_groups();
        #[cfg(not(feature = "otel"))]
        return GroupSet::EMPTY;
    }

    /// This process's rank context.
    pub fn rank(&self) -> RankContext {
        self.rank
    }

    /// The run id (`nemo.run.id`); empty on ranks that do not export.
    pub fn run_id(&self) -> &str {
        #[cfg(feature = "otel")]
        return self.pipeline.run_id();
        #[cfg(not(feature = "otel"))]
        return "";
    }

    /// Where the run id came from (`None` on ranks that do not export).
    pub fn run_id_source(&self) -> Option<RunIdSource> {
        #[cfg(feature = "otel")]
        return self.pipeline.run_id_source();
        #[cfg(not(feature = "otel"))]
        return None;
    }

    /// The restart attempt (`SLURM_RESTART_COUNT`, `TORCHELASTIC_RESTART_COUNT`).
    pub fn restart_attempt(&self) -> u32 {
        #[cfg(feature = "otel")]
        return self.pipeline.restart_attempt();
        #[cfg(not(feature = "otel"))]
        return 0;
    }

    /// This lifetime's index within the process (1 for the first enabled
    /// setup; 0 when telemetry is off).
    pub fn lifetime_index(&self) -> u32 {
        #[cfg(feature = "otel")]
        return self.pipeline.lifetime_index();
        #[cfg(not(feature = "otel"))]
        return 0;
    }

    /// The context handed in by whatever launched the job (`TRACEPARENT`,
    /// `TRACESTATE`, `BAGGAGE`), when there is a valid one.
    pub fn incoming_context(&self) -> Option<&RemoteContext> {
        self.incoming.as_ref()
    }

    /// The `tracing` bridge's rules (`<PREFIX>_TRACING_GROUPS`, read with
    /// this setup's own prefix and catalog): what lens-tracing's
    /// `telemetry.tracing_layer()` builds the bridge from, so that the
    /// configuration is read once. No rules (every target off but
    /// `lens::<group>` targets) for a handle setup did not build from a
    /// configuration. At shutdown, each rule whose prefix matched no
    /// callsite the bridge saw is one warning naming the nearest targets
    /// seen.
    pub fn tracing_rules(&self) -> TracingRules {
        self.tracing_rules.as_ref().map_or_else(|| TracingRules::none(&LENS_CATALOG), |(rules, _)| rules.clone())
    }

    /// The hang watchdog's timeout (`<PREFIX>_HANG_TIMEOUT_S`, read with
    /// this setup's prefix; `auto` for a handle setup did not build from a
    /// configuration): lens-training's default, so that a program reads
    /// its configuration once.
    pub fn hang_timeout(&self) -> HangTimeout {
        self.hang_timeout
    }

    /// The control file's setup (`<PREFIX>_CONTROL_FILE`, its poll, the
    /// launch settings it may change), when one is configured and telemetry
    /// is on: lens-training watches the file and applies its changes at
    /// iteration boundaries (SPEC A24).
    pub fn control(&self) -> Option<&crate::control::ControlSetup> {
        self.control.as_ref()
    }

    /// Sets (`Some`) or clears (`None`) the per-iteration trace sampling
    /// ratio that decides each iteration's spans in place of the launch
    /// sampler (`OTEL_TRACES_SAMPLER[_ARG]`, `always_on` included); structural
    /// spans stay kept. lens-training's control-file change calls it on the
    /// training thread at an iteration boundary. A no-op where this rank
    /// records no spans.
    pub fn set_sampling_ratio(&self, ratio: Option<f64>) {
        #[cfg(feature = "otel")]
        self.pipeline.set_sampling_ratio(ratio);
        #[cfg(not(feature = "otel"))]
        let _ = ratio;
    }

    /// The GPU peak MFU divides by, TFLOP/s per GPU (`<PREFIX>_PEAK_TFLOPS`),
    /// when the configuration sets one: lens-training's default.
    pub fn peak_tflops(&self) -> Option<f64> {
        self.peak_tflops
    }

    /// The bound on shutdown and on a forced flush
    /// (`<PREFIX>_SHUTDOWN_TIMEOUT_MS`, 5 s by default).
    pub fn shutdown_timeout(&self) -> Duration {
        self.shutdown_timeout
    }

    /// Where each signal goes, in words (for a run summary): `traces: OTLP
    /// grpc http://localhost:4317`, `metrics: file /abs/telemetry/<run_id>/metrics-rank0.jsonl`,
    /// ...; empty where this rank exports nothing. Setup prints them once on
    /// an exporting rank, with the host, and the shutdown report repeats them
    /// as they are then (a Prometheus port that was in use at setup and was
    /// bound since is no longer said to wait).
    pub fn destinations(&self) -> Vec<String> {
        #[cfg(feature = "otel")]
        return self.pipeline.destinations();
        #[cfg(not(feature = "otel"))]
        return Vec::new();
    }

    /// The export accounting so far, without flushing (empty without
    /// `otel`).
    pub fn report(&self) -> ShutdownReport {
        #[cfg(feature = "otel")]
        return self.pipeline.report();
        #[cfg(not(feature = "otel"))]
        return ShutdownReport::default();
    }

    /// Queues copies of the spans open now for export, each marked
    /// `nemo.span.open`, with a fresh span id and a link to its original,
    /// ended now, the innermost with the event `event` (the hang watchdog's
    /// flight recorder); the names of the copies, outermost first. Empty
    /// where this rank records no spans, and without `otel`. Call
    /// [`force_flush`](Telemetry::force_flush) afterwards to send them.
    pub fn export_open_span_copies(
        &self,
        event: &'static str,
        attributes: impl IntoIterator<Item = crate::attr::KeyValue>,
    ) -> Vec<String> {
        #[cfg(feature = "otel")]
        return self.pipeline.export_open_span_copies(event, attributes.into_iter().collect());
        #[cfg(not(feature = "otel"))]
        {
            let _ = (event, attributes);
            Vec::new()
        }
    }

    /// Exports everything recorded so far (spans queued, a metric
    /// collection), waiting at most `timeout`. Open spans stay open. An
    /// empty report without `otel`.
    ///
    /// It blocks the calling thread until the export is done or `timeout`
    /// passes (all of it when the collector does not answer): from async
    /// code, call it (and [`shutdown`](Self::shutdown)) on a blocking
    /// thread, such as tokio's `spawn_blocking`, not on a runtime's worker.
    pub fn force_flush(&self, timeout: Duration) -> ShutdownReport {
        #[cfg(feature = "otel")]
        return self.pipeline.force_flush(timeout);
        #[cfg(not(feature = "otel"))]
        {
            let _ = timeout;
            ShutdownReport::default()
        }
    }

    /// Ends spans still open (innermost first, marked truncated), flushes and
    /// shuts down the providers this handle built, within `timeout` even when
    /// the collector hangs. Idempotent: a second call does nothing and
    /// reports `performed: false` (as does every call without `otel`).
    pub fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        #[cfg(feature = "otel")]
        {
            let report = self.pipeline.shutdown(timeout);
            if report.performed
                && let Some((rules, variable)) = &self.tracing_rules
            {
                for unmatched in rules.unmatched() {
                    crate::diag::warn_once(format_args!("{variable}: {unmatched}"));
                }
            }
            report
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = timeout;
            ShutdownReport::default()
        }
    }
}

/// Shuts down as [`Telemetry::shutdown`] does; the report, which nobody
/// gets, is written on standard error when it says something was lost (the
/// export worker's last warning may come after the process has exited).
impl Drop for Telemetry {
    fn drop(&mut self) {
        let report = self.shutdown(self.shutdown_timeout);
        if report.performed && report.lost_something() {
            crate::diag::warn(format_args!("telemetry shut down as its handle was dropped: {report}"));
        }
    }
}

/// Sets telemetry up for this rank.
///
/// `resource_attributes` are the caller's (for Megatron: the training
/// arguments); they win over detected attributes, and the identity keys
/// (`service.name`, `nemo.run.id`, `service.instance.id`, `dl.rank`,
/// `dl.world_size`) win over both. See `lens_otel_runtime::pipeline` for what is
/// built. Without `otel` the handle is inert and a problem in the
/// configuration is one warning, not an error (SPEC A22).
///
/// ```
/// use lens_fallbacks::config::LensConfig;
/// use lens_fallbacks::identity::RankContext;
/// use lens_fallbacks::setup::{SetupOptions, setup_telemetry};
///
/// // Telemetry off: an inert handle, nothing installed.
/// let telemetry = setup_telemetry(&LensConfig::default(), &RankContext::SINGLE, Vec::new(), SetupOptions::new())?;
/// assert!(!telemetry.is_exporting());
/// assert!(telemetry.enabled_groups().is_empty());
/// # Ok::<(), lens_fallbacks::setup::SetupError>(())
/// ```
pub fn setup_telemetry(
    config: &LensConfig,
    rank: &RankContext,
    resource_attributes: Vec<KeyValue>,
    options: SetupOptions,
) -> Result<Telemetry, SetupError> {
    #[cfg(feature = "otel")]
    let mut telemetry = {
        let mut options = options;
        let env: Box<dyn EnvSource + Send + Sync> = options.env.take().unwrap_or_else(|| Box::new(ProcessEnv));
        let runtime_options = lens_otel_runtime::PipelineOptions {
            span_exporter: options.span_exporter,
            metric_exporter: options.metric_exporter,
            rank_strategy: options.rank_strategy,
            lazy_resource: options.lazy_resource,
            scope: options.scope,
            service_version: options.service_version,
            checkpoint_dir: options.checkpoint_dir,
        };
        let pipeline = lens_otel_runtime::pipeline::setup(config, rank, resource_attributes, runtime_options, &*env)?;
        // The context handed in by the launcher, on a rank that built a pipeline.
        let incoming = if pipeline.lifetime_index() > 0 { crate::propagation::context_from_env(&*env) } else { None };
        Telemetry::from_pipeline(pipeline, config.telemetry_enabled(), *rank, incoming, config.shutdown_timeout)
    };
    #[cfg(not(feature = "otel"))]
    let mut telemetry = {
        let _ = (resource_attributes, options);
        let mut warnings = Vec::new();
        if let Err(error) = config.validate() {
            warn_into(&mut warnings, compiled_out_problem(&error));
        }
        if config.telemetry_enabled() && !WARNED_COMPILED_OUT.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let variable = config.variable_for("enabled").unwrap_or("LensConfig.enabled");
            warn_into(
                &mut warnings,
                format!(
                    "{variable} enables telemetry, but this program was built without the `otel` feature, so \
                     nothing is recorded or exported; build your application with its `otel` feature (the one \
                     that turns on lens-fallbacks' `otel`), or unset {variable}"
                ),
            );
        }
        // Nothing is recorded: the handle says telemetry is off.
        let mut telemetry = Telemetry::inert(false, *rank, config.shutdown_timeout);
        telemetry.warnings = warnings;
        telemetry
    };
    telemetry.tracing_rules =
        config.tracing_rules().ok().map(|rules| (rules, config.variable_to_set("tracing_groups", "TRACING_GROUPS")));
    telemetry.hang_timeout = config.hang_timeout;
    telemetry.peak_tflops = config.peak_tflops;
    telemetry.control = if telemetry.enabled { crate::control::ControlSetup::from_config(config) } else { None };
    Ok(telemetry)
}

/// A meter that records nothing, for handles without a meter provider.
#[cfg(feature = "otel")]
fn noop_otel_meter() -> opentelemetry::metrics::Meter {
    use opentelemetry::metrics::MeterProvider as _;
    opentelemetry::metrics::noop::NoopMeterProvider::new().meter(DEFAULT_SCOPE)
}

/// Whether this build records telemetry (the `otel` feature). Without it no
/// telemetry value stops the program (SPEC A22): every problem in the
/// configuration is one warning.
pub const COMPILED_IN: bool = cfg!(feature = "otel");

/// The warning for a configuration problem in a build without `otel`.
fn compiled_out_problem(error: &dyn fmt::Display) -> String {
    format!(
        "this program was built without the `otel` feature, so telemetry records nothing and this problem in its \
         configuration is ignored: {error}"
    )
}

/// `loaded` as it is in a build with `otel`; in a build without it (see
/// [`COMPILED_IN`]), a problem is one warning (written on standard error and
/// kept in `warnings`) and the result is the disabled configuration, so that
/// no telemetry value stops a program that records nothing. For a framework
/// that reads and checks its configuration itself (its command line
/// included):
///
/// ```
/// use lens_fallbacks::config::{ConfigLoader, LensConfig};
/// use lens_fallbacks::setup::{COMPILED_IN, or_off_when_compiled_out};
///
/// let env = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_EXPORTER", "otlpp")];
/// let mut warnings = Vec::new();
/// let config = or_off_when_compiled_out(ConfigLoader::new("MYJOB_OTEL").load(&env), &mut warnings);
/// if COMPILED_IN {
///     assert!(config.is_err());
/// } else {
///     assert!(!config.unwrap().telemetry_enabled());
///     assert!(warnings[0].contains("MYJOB_OTEL_EXPORTER"), "{warnings:?}");
/// }
/// ```
pub fn or_off_when_compiled_out<E: fmt::Display>(
    loaded: Result<LensConfig, E>,
    warnings: &mut Vec<String>,
) -> Result<LensConfig, E> {
    match loaded {
        Err(error) if !COMPILED_IN => {
            warn_into(warnings, compiled_out_problem(&error));
            Ok(LensConfig::default())
        }
        loaded => loaded,
    }
}

/// The compiled-out warning is given once per process.
#[cfg(not(feature = "otel"))]
static WARNED_COMPILED_OUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps `message` in `warnings` and prints it, once per process however
/// often the configuration is read.
fn warn_into(warnings: &mut Vec<String>, message: String) {
    crate::diag::warn_once(&message);
    warnings.push(message);
}

/// Setup from the environment with a prefix, built step by step; see
/// [`Telemetry::builder`] and [`Telemetry::from_env`].
///
/// Defaults: the fallback prefix `NEMO_LENS`, the Lens span-group catalog,
/// the service name `nemo` (unless `OTEL_SERVICE_NAME` says otherwise), no
/// `service.version`, the process environment, the rank context detected
/// from that environment.
///
/// ```
/// use lens_fallbacks::attr::KeyValue;
/// use lens_fallbacks::setup::{SetupOptions, Telemetry};
///
/// let env = [("MYJOB_OTEL_SPAN_GROUPS", "default")];
/// let telemetry = Telemetry::builder("MYJOB_OTEL")
///     .default_service_name("myjob")
///     .service_version("1.4.2")
///     .resource_attribute("myjob.dataset", "wiki-2024")
///     .env(env)
///     .options(SetupOptions::new().with_scope("myjob"))
///     .setup()?;
/// assert!(!telemetry.is_enabled());
/// # Ok::<(), lens_fallbacks::setup::SetupError>(())
/// ```
#[must_use = "the builder does nothing until `setup` is called"]
pub struct TelemetryBuilder {
    prefix: String,
    fallback_prefix: Option<String>,
    catalog: &'static SpanGroupCatalog,
    default_service_name: String,
    resource: Vec<KeyValue>,
    env: Option<Box<dyn EnvSource + Send + Sync>>,
    rank: Option<RankContext>,
    options: SetupOptions,
}

impl fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryBuilder")
            .field("prefix", &self.prefix)
            .field("fallback_prefix", &self.fallback_prefix)
            .field("default_service_name", &self.default_service_name)
            .field("resource", &self.resource.len())
            .field("custom_env", &self.env.is_some())
            .field("rank", &self.rank)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl TelemetryBuilder {
    fn new(prefix: &str) -> TelemetryBuilder {
        TelemetryBuilder {
            prefix: prefix.to_string(),
            fallback_prefix: (prefix != DEFAULT_PREFIX).then(|| DEFAULT_PREFIX.to_string()),
            catalog: &LENS_CATALOG,
            default_service_name: DEFAULT_SERVICE_NAME.to_string(),
            resource: Vec::new(),
            env: None,
            rank: None,
            options: SetupOptions::new(),
        }
    }

    /// Read `<fallback>_*` where `<prefix>_*` is unset, instead of
    /// `NEMO_LENS_*`; `None` reads the prefix alone.
    pub fn fallback_prefix(mut self, fallback: Option<&str>) -> TelemetryBuilder {
        self.fallback_prefix = fallback.map(str::to_string);
        self
    }

    /// The catalog that span-group specs resolve against (default: Lens's
    /// groups and presets).
    pub fn catalog(mut self, catalog: &'static SpanGroupCatalog) -> TelemetryBuilder {
        self.catalog = catalog;
        self
    }

    /// `service.name` when `OTEL_SERVICE_NAME` is unset (default `nemo`).
    pub fn default_service_name(mut self, name: &str) -> TelemetryBuilder {
        self.default_service_name = name.to_string();
        self
    }

    /// The application's version, exported as `service.version` (unset by
    /// default).
    pub fn service_version(mut self, version: impl Into<String>) -> TelemetryBuilder {
        self.options = self.options.with_service_version(version);
        self
    }

    /// One resource attribute of the application's; it wins over detected
    /// attributes, and lens's identity keys win over it.
    pub fn resource_attribute(
        mut self,
        key: impl Into<Cow<'static, str>>,
        value: impl Into<AttrValue>,
    ) -> TelemetryBuilder {
        self.resource.push(KeyValue::new(key, value));
        self
    }

    /// Resource attributes of the application's (see
    /// [`resource_attribute`](TelemetryBuilder::resource_attribute)).
    pub fn resource_attributes(mut self, attributes: impl IntoIterator<Item = KeyValue>) -> TelemetryBuilder {
        self.resource.extend(attributes);
        self
    }

    /// Read the configuration, the rank context, the run id and everything
    /// else from `env` instead of the process environment (for tests).
    pub fn env(mut self, env: impl EnvSource + Send + Sync + 'static) -> TelemetryBuilder {
        self.env = Some(Box::new(env));
        self
    }

    /// The directory where the program saves its checkpoints: the spool's
    /// default place (see [`SetupOptions::with_checkpoint_dir`]).
    pub fn checkpoint_dir(mut self, dir: impl Into<std::path::PathBuf>) -> TelemetryBuilder {
        self.options = self.options.with_checkpoint_dir(dir);
        self
    }

    /// This process's rank context, instead of detecting it.
    pub fn rank(mut self, rank: RankContext) -> TelemetryBuilder {
        self.rank = Some(rank);
        self
    }

    /// Setup's options (rank strategy, lazy resource attributes, scope; with
    /// `otel`, custom exporters). A service version, checkpoint directory or environment given to
    /// the builder wins over the options'.
    pub fn options(mut self, options: SetupOptions) -> TelemetryBuilder {
        let version = self.options.service_version.take();
        let checkpoint_dir = self.options.checkpoint_dir.take();
        self.options = options;
        if version.is_some() {
            self.options.service_version = version;
        }
        if checkpoint_dir.is_some() {
            self.options.checkpoint_dir = checkpoint_dir;
        }
        self
    }

    /// Reads the configuration and the rank context and sets telemetry up
    /// (see [`Telemetry::from_env`] for what is an error and what a warning).
    pub fn setup(self) -> Result<Telemetry, SetupError> {
        let TelemetryBuilder { prefix, fallback_prefix, catalog, default_service_name, resource, env, rank, options } =
            self;
        let mut options = options;
        let env: Box<dyn EnvSource + Send + Sync> =
            env.or_else(|| options.env.take()).unwrap_or_else(|| Box::new(ProcessEnv));
        let mut loader = ConfigLoader::new(&prefix).catalog(catalog).default_service_name(&default_service_name);
        if let Some(fallback) = &fallback_prefix {
            loader = loader.fallback_prefix(fallback);
        }
        let mut warnings = Vec::new();
        let config =
            load_or_disabled(&loader, &*env, &[Some(prefix.as_str()), fallback_prefix.as_deref()], &mut warnings)?;
        let rank = match rank {
            Some(rank) => rank,
            None => match RankContext::detect(&*env) {
                Ok(rank) => rank,
                Err(error) if !COMPILED_IN => {
                    warn_into(&mut warnings, compiled_out_problem(&error));
                    RankContext::SINGLE
                }
                Err(error) if !config.telemetry_enabled() => {
                    warn_into(&mut warnings, format!("telemetry is not enabled, so this is ignored: {error}"));
                    RankContext::SINGLE
                }
                Err(error) => return Err(error.into()),
            },
        };
        options.env = Some(env);
        let mut telemetry = setup_telemetry(&config, &rank, resource, options)?;
        warnings.append(&mut telemetry.warnings);
        telemetry.warnings = warnings;
        Ok(telemetry)
    }
}

/// Reads the configuration with `loader`. When it has problems but the
/// environment does not enable telemetry (`<prefix>_ENABLED` unset or false
/// for every prefix in `prefixes`, or `OTEL_SDK_DISABLED=true`; a bad
/// `OTEL_SDK_DISABLED` value leaves it to the enable switches), the problems
/// are one warning (written on standard error and kept in `warnings`) and the
/// result is the disabled configuration; otherwise they are the error.
///
/// A framework that reads its configuration itself uses this where its
/// command line does not turn telemetry on, so that a typo in a telemetry
/// variable never stops a job that does not use telemetry:
///
/// ```
/// use lens_fallbacks::config::ConfigLoader;
/// use lens_fallbacks::setup::load_or_disabled;
///
/// let env = [("MYJOB_OTEL_SPAN_GROUPS", "per_stpe")];
/// let mut warnings = Vec::new();
/// let config = load_or_disabled(&ConfigLoader::new("MYJOB_OTEL"), &env, &[Some("MYJOB_OTEL")], &mut warnings)?;
/// assert!(!config.telemetry_enabled());
/// assert!(warnings[0].contains("MYJOB_OTEL_SPAN_GROUPS"));
///
/// // So is a bad `OTEL_SDK_DISABLED`, which cannot turn telemetry on.
/// let env = [("OTEL_SDK_DISABLED", "maybe")];
/// let config = load_or_disabled(&ConfigLoader::new("MYJOB_OTEL"), &env, &[Some("MYJOB_OTEL")], &mut warnings)?;
/// assert!(!config.telemetry_enabled());
///
/// // `OTEL_SDK_DISABLED=true` wins, over an unreadable enable switch too.
/// let env = [("OTEL_SDK_DISABLED", "true"), ("MYJOB_OTEL_ENABLED", "maybe")];
/// let config = load_or_disabled(&ConfigLoader::new("MYJOB_OTEL"), &env, &[Some("MYJOB_OTEL")], &mut warnings)?;
/// assert!(!config.telemetry_enabled());
/// assert!(warnings.last().unwrap().starts_with("telemetry is disabled (OTEL_SDK_DISABLED=true)"));
///
/// // With telemetry enabled it is the error (in a build without `otel`, a
/// // warning: nothing is recorded, so no value stops the program).
/// let env = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_SPAN_GROUPS", "per_stpe")];
/// let loaded = load_or_disabled(&ConfigLoader::new("MYJOB_OTEL"), &env, &[Some("MYJOB_OTEL")], &mut warnings);
/// assert_eq!(loaded.is_err(), lens_fallbacks::setup::COMPILED_IN);
/// # Ok::<(), lens_fallbacks::config::ConfigError>(())
/// ```
pub fn load_or_disabled(
    loader: &ConfigLoader<'_>,
    env: &(impl EnvSource + ?Sized),
    prefixes: &[Option<&str>],
    warnings: &mut Vec<String>,
) -> Result<LensConfig, ConfigError> {
    let error = match loader.load(env) {
        Ok(config) => return Ok(config),
        Err(error) => error,
    };
    let switches: Vec<String> = prefixes
        .iter()
        .flatten()
        .map(|prefix| format!("{prefix}_ENABLED"))
        .chain(["OTEL_SDK_DISABLED".to_string()])
        .collect();
    let switches_only =
        crate::env::FnEnv(|key: &str| if switches.iter().any(|s| s == key) { env.var(key) } else { None });
    let enable_switches = &switches[..switches.len() - 1];
    // `OTEL_SDK_DISABLED=true` wins over everything, an unreadable enable
    // switch included.
    let sdk_only = crate::env::FnEnv(|key: &str| if key == "OTEL_SDK_DISABLED" { env.var(key) } else { None });
    if let Ok(config) = loader.load(&sdk_only)
        && config.otel.sdk_disabled
    {
        let value = env.var("OTEL_SDK_DISABLED").unwrap_or_default();
        warn_into(
            warnings,
            format!(
                "telemetry is disabled (OTEL_SDK_DISABLED={}), so this problem in its configuration is ignored; fix \
                 it before enabling telemetry: {error}",
                value.trim()
            ),
        );
        return Ok(config);
    }
    let enable_only =
        crate::env::FnEnv(|key: &str| if enable_switches.iter().any(|s| s == key) { env.var(key) } else { None });
    // An unreadable `OTEL_SDK_DISABLED` cannot turn telemetry on: whether
    // it is on is then the enable switches' to say.
    match loader.load(&switches_only).or_else(|switch_error| loader.load(&enable_only).map_err(|_| switch_error)) {
        Ok(config) if !config.telemetry_enabled() => {
            let names: Vec<&str> = enable_switches.iter().map(String::as_str).collect();
            warn_into(
                warnings,
                format!(
                    "telemetry is not enabled ({} not set to 1), so this problem in its configuration is ignored; \
                     fix it before enabling telemetry: {error}",
                    names.join(" or ")
                ),
            );
            Ok(config)
        }
        // Without `otel` nothing is recorded: no value stops the program.
        Ok(config) if !COMPILED_IN => {
            warn_into(warnings, compiled_out_problem(&error));
            Ok(config)
        }
        Err(_) if !COMPILED_IN => {
            warn_into(warnings, compiled_out_problem(&error));
            Ok(LensConfig::default())
        }
        _ => Err(error),
    }
}
