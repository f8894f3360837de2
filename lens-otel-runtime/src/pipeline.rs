//! The pipeline of one telemetry lifetime: what setup builds for one rank,
//! and its shutdown.
//!
//! [`setup`] is what the facade's `setup_telemetry` (the one call a
//! framework makes per process) runs with `otel`. It validates the whole
//! configuration first and checks that this build has every transport it
//! selects (on every rank, whether or not it exports, before anything is
//! installed), then asks the rank strategy whether this rank exports, and
//! only then builds providers. A disabled configuration or a rank that does
//! not export gets a [`Pipeline`] with a no-op tracer, no meter and an empty
//! span-group set, and touches nothing else: no thread, no file, no socket,
//! no lazy resource attribute (so no NVML).
//!
//! On an exporting rank it builds, from the validated configuration only
//! (every exporter and provider option is set explicitly; the SDK reads no
//! environment on its own):
//!
//! - a tracer provider with the seed-independent ID generator, the lens
//!   sampler (rank-aware or registered strategy, structural spans, sampling
//!   keys) around the `OTEL_TRACES_SAMPLER` delegate, the open-span closer and
//!   the bounded batch span processor, and installs its tracer in the active
//!   slot that the span helpers read;
//! - a meter provider with a periodic reader at `OTEL_METRIC_EXPORT_INTERVAL`
//!   (default 10 s) around a counting exporter;
//! - with `LOGS_ENABLED`, a logger provider with lens's batch log processor
//!   (the span batch settings, from the configuration) and the `log` bridge;
//! - the span-group gate.
//!
//! # Lifetimes
//!
//! One telemetry lifetime is active per process at a time: a second enabled
//! setup while one is active is [`PipelineError::AlreadyActive`]. After
//! [`Pipeline::shutdown`], setup works again and the new lifetime exports
//! (the Python original could not: its latches were never reset). Shutdown
//! is idempotent and bounded by its timeout even against a
//! hung collector: each signal's flush and shutdown run on a helper thread
//! of their own against one deadline (so a signal whose collector hangs
//! takes no time from the others), and the [`ShutdownReport`] says what did
//! not finish.
//!
//! Dropping the handle shuts it down with the configured timeout
//! (`<PREFIX>_SHUTDOWN_TIMEOUT_MS`), as tracing-appender's `WorkerGuard`
//! flushes on drop: keep the handle alive for the whole run (a process-global
//! that is never dropped must call `shutdown` itself, for example from an
//! exit hook).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use opentelemetry::InstrumentationScope;
use opentelemetry::global::BoxedTracer;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::SdkLoggerProvider;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::resource::{ResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter, SpanLimits};

use crate::accounting::{CountingMetricExporter, MetricExportCounters};
use crate::attr::KeyValue;
use crate::batch::{BatchConfig, LensBatchLogProcessor, LensBatchRecordProcessor};
use crate::closer::OpenSpanCloser;
use crate::config::{
    COLLECTOR_PROBE_TIMEOUT, DEFAULT_COLLECTOR, DefaultDestination, ExporterKind, LensConfig, Propagator, Signal,
    TracesSampler, collector_answers,
};
use crate::config::{ConfigError, MissingTransport, default_destination_in};
use crate::env::EnvSource;
#[cfg(any(any(feature = "otlp-grpc", feature = "otlp-http"), feature = "prometheus"))]
use crate::exporters;
use crate::exporters::{
    ConsoleLogExporter, ConsoleMetricExporter, ConsoleSpanExporter, ExporterError, FileLimit, FileLogExporter,
    FileMetricExporter, FileSpanExporter, LensLogExporter, LensMetricExporter, LensSpanExporter,
};
#[cfg(feature = "prometheus")]
use crate::exporters::{PrometheusExporter, PrometheusSettings};
use crate::groups::{GroupSet, set_enabled_span_groups};
use crate::identity::RunIdSource;
use crate::identity::{
    LOCAL_RANK_VARIABLES, OsProbe, RankContext, ResourceInputs, SystemProbe, build_resource, resolve_run_id,
    restart_attempt,
};
use crate::ids::{SeedIndependentIdGenerator, fork_generation};
use crate::lens_tracer::LensTracer;
use crate::propagators;
use crate::recorder::{Recorder, RecordsAsSpanData, record_exporter};
pub use crate::report::ShutdownReport;
use crate::sampler::{DelegateSampler, LensSampler, RatioOverride, delegate_from};
use crate::spool::SpoolTable;
use crate::spool::replay::{ReplayDone, ReplayExporter, ReplayOptions};
use crate::strategies::{self, RankStrategy, StrategyError};
use crate::{active, logs};

/// The instrumentation scope of lens's own tracer and meter.
pub const DEFAULT_SCOPE: &str = "nemo.lens";

pub use crate::transports::TRANSPORTS;

/// The process's lifetime slot: 0 when no enabled lifetime is active, else
/// one more than the fork generation of the process whose lifetime holds
/// it. A forked child inherits its parent's mark, which does not bind it:
/// the parent's lifetime exports from the parent only, so the child may set
/// telemetry up for itself.
static ACTIVE: AtomicU64 = AtomicU64::new(0);

/// This process's mark in [`ACTIVE`].
fn slot_mark() -> u64 {
    fork_generation().wrapping_add(1)
}

/// Takes the lifetime slot for this process: `None` when a lifetime of
/// this process holds it, else whether it was the mark of a process this
/// one was forked from (whose tracer is still installed here).
fn take_slot() -> Option<bool> {
    let mine = slot_mark();
    let mut current = ACTIVE.load(Ordering::Acquire);
    loop {
        if current == mine {
            return None;
        }
        match ACTIVE.compare_exchange(current, mine, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(current != 0),
            Err(now) => current = now,
        }
    }
}

/// Whether a lifetime of this process holds the slot.
fn slot_held_here() -> bool {
    ACTIVE.load(Ordering::Acquire) == slot_mark()
}

/// Frees the slot if a lifetime of this process holds it.
fn free_slot() {
    let _ = ACTIVE.compare_exchange(slot_mark(), 0, Ordering::AcqRel, Ordering::Relaxed);
}

/// How many enabled lifetimes this process has started (an input of the
/// derived structural trace ids, so a second lifetime gets traces of its own).
static LIFETIMES: AtomicU32 = AtomicU32::new(0);
/// The multi-rank "no run id is shared" warning is given once per process.
static WARNED_RANDOM_RUN_ID: AtomicBool = AtomicBool::new(false);

/// Builds the batch processor of a custom span exporter, its spans in the
/// given scope.
pub type SpanExporterFactory = Box<dyn FnOnce(BatchConfig, &InstrumentationScope) -> LensBatchRecordProcessor + Send>;
/// Adds the periodic reader of a custom metric exporter.
pub type MetricReaderFactory =
    Box<dyn FnOnce(MeterProviderBuilder, Duration, Arc<MetricExportCounters>) -> MeterProviderBuilder + Send>;
/// Resource attributes computed only on exporting ranks.
pub type LazyAttributes = Box<dyn FnOnce() -> Vec<KeyValue> + Send>;

/// Why the runtime refused to build a pipeline. The facade's `SetupError`
/// holds each as a variant of its own (exhaustive: a new variant must be
/// given one there too).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The configuration has problems.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The configuration selects a transport this build lacks.
    #[error("{0}")]
    MissingTransport(#[from] MissingTransport),
    /// The rank strategy could not decide.
    #[error("{0}")]
    Strategy(#[from] StrategyError),
    /// An exporter could not be built.
    #[error("{0}")]
    Exporter(#[from] ExporterError),
    /// A lifetime is already active in this process.
    #[error("a telemetry lifetime is already active in this process")]
    AlreadyActive,
}

/// What setup adds to the configuration when it builds a pipeline.
pub struct PipelineOptions {
    /// A custom span exporter (instead of the configured one).
    pub span_exporter: Option<SpanExporterFactory>,
    /// A custom metric exporter (instead of the configured one).
    pub metric_exporter: Option<MetricReaderFactory>,
    /// A rank strategy given in code.
    pub rank_strategy: Option<RankStrategy>,
    /// Resource attributes computed only on exporting ranks.
    pub lazy_resource: Vec<LazyAttributes>,
    /// The instrumentation scope of the tracer and the meter.
    pub scope: std::borrow::Cow<'static, str>,
    /// `service.version`.
    pub service_version: Option<String>,
    /// Where the program saves checkpoints: the spool's default place is
    /// beside them (`<dir>/lens-spool`).
    pub checkpoint_dir: Option<std::path::PathBuf>,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            span_exporter: None,
            metric_exporter: None,
            rank_strategy: None,
            lazy_resource: Vec::new(),
            scope: std::borrow::Cow::Borrowed(DEFAULT_SCOPE),
            service_version: None,
            checkpoint_dir: None,
        }
    }
}

impl std::fmt::Debug for PipelineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineOptions")
            .field("custom_span_exporter", &self.span_exporter.is_some())
            .field("custom_metric_exporter", &self.metric_exporter.is_some())
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl PipelineOptions {
    /// Export spans to `exporter` instead of the configured one (still
    /// through lens's batch processor, so the counters and limits hold).
    #[must_use]
    pub fn with_span_exporter<E: SpanExporter + 'static>(mut self, exporter: E) -> Self {
        self.span_exporter = Some(span_exporter_factory(exporter));
        self
    }

    /// Export metrics to `exporter` instead of the configured one, read
    /// periodically at the configured interval.
    #[must_use]
    pub fn with_metric_exporter<E: PushMetricExporter>(mut self, exporter: E) -> Self {
        self.metric_exporter = Some(metric_exporter_factory(exporter));
        self
    }
}

/// The factory of a custom span exporter (through lens's batch processor,
/// so the counters and limits hold).
pub fn span_exporter_factory<E: SpanExporter + 'static>(exporter: E) -> SpanExporterFactory {
    Box::new(move |config, scope| {
        LensBatchRecordProcessor::new(Arc::new(RecordsAsSpanData::new(exporter, scope.clone())), config)
    })
}

/// The factory of a custom metric exporter, read periodically at the
/// configured interval.
pub fn metric_exporter_factory<E: PushMetricExporter>(exporter: E) -> MetricReaderFactory {
    Box::new(move |builder, interval, counters| {
        let counting = CountingMetricExporter::new(exporter, counters, Vec::new());
        builder.with_reader(PeriodicReader::builder(counting).with_interval(interval).build())
    })
}

/// What setup built for one telemetry lifetime: the tracer and meter, the
/// export counters, and the providers shutdown takes down. Built by
/// [`setup`]; the facade's `Telemetry` handle holds one.
pub struct Pipeline {
    tracer: BoxedTracer,
    otel_meter: Option<opentelemetry::metrics::Meter>,
    exporting: bool,
    records_spans: bool,
    rank_metrics: bool,
    groups: GroupSet,
    run_id: String,
    run_id_source: Option<RunIdSource>,
    restart_attempt: u32,
    lifetime: u32,
    destinations: Vec<String>,
    /// The Prometheus endpoint, kept past shutdown for
    /// [`destinations`](Self::destinations): whether it has its port now.
    #[cfg(feature = "prometheus")]
    prometheus_endpoint: Option<PrometheusExporter>,
    linger: Duration,
    span_counters: Option<Arc<crate::batch::SpanExportCounters>>,
    metric_counters: Option<Arc<MetricExportCounters>>,
    log_counters: Option<Arc<crate::batch::SpanExportCounters>>,
    /// The `file` exporter's cap and what it dropped.
    file_limit: Option<Arc<FileLimit>>,
    /// The spans collectors had rejected in this process when this
    /// lifetime began ([`spans_rejected`]).
    rejected_before: u64,
    parts: Mutex<Option<Parts>>,
    holds_slot: AtomicBool,
    /// The fork generation of the process that set the lifetime up.
    generation: u64,
    /// Header values, removed from the report's error strings.
    secrets: Vec<String>,
    /// The rank's spool file (`None` when the spool is off or could not be
    /// made); closed at shutdown.
    spool: Option<Arc<SpoolTable>>,
    /// What a replay exports through (`lens recover`).
    replay: Option<ReplayExporter>,
    /// Set when setup's replay thread has sent the previous attempt's
    /// spools: shutdown waits for it within its deadline.
    replay_done: Option<ReplayDone>,
    /// The per-iteration sampling ratio an in-flight control change sets.
    ratio_override: RatioOverride,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("exporting", &self.exporting)
            .field("records_spans", &self.records_spans)
            .field("groups", &self.groups)
            .field("lifetime", &self.lifetime)
            .field("destinations", &self.destinations)
            .finish_non_exhaustive()
    }
}

/// The parts of an exporting lifetime that shutdown takes down.
pub(crate) struct Parts {
    tracer_provider: Option<SdkTracerProvider>,
    closer: Option<OpenSpanCloser>,
    meter_provider: Option<SdkMeterProvider>,
    logger_provider: Option<SdkLoggerProvider>,
    #[cfg(feature = "prometheus")]
    prometheus: Option<PrometheusExporter>,
}

impl Pipeline {
    /// A pipeline that records and exports nothing and holds no lifetime
    /// (telemetry off).
    pub fn detached() -> Pipeline {
        Pipeline::inert(false)
    }

    /// Records and exports nothing; `holds_slot` when it owns the process's
    /// lifetime slot (an enabled rank that does not export).
    fn inert(holds_slot: bool) -> Pipeline {
        Pipeline {
            tracer: BoxedTracer::new(Box::new(opentelemetry::trace::noop::NoopTracer::new())),
            otel_meter: None,
            exporting: false,
            records_spans: false,
            rank_metrics: false,
            groups: GroupSet::EMPTY,
            run_id: String::new(),
            run_id_source: None,
            restart_attempt: 0,
            lifetime: 0,
            destinations: Vec::new(),
            #[cfg(feature = "prometheus")]
            prometheus_endpoint: None,
            linger: Duration::ZERO,
            span_counters: None,
            metric_counters: None,
            log_counters: None,
            file_limit: None,
            rejected_before: spans_rejected(),
            parts: Mutex::new(None),
            holds_slot: AtomicBool::new(holds_slot),
            generation: fork_generation(),
            secrets: Vec::new(),
            spool: None,
            replay: None,
            replay_done: None,
            ratio_override: RatioOverride::new(),
        }
    }

    /// Sets (`Some`) or clears (`None`) the per-iteration trace sampling
    /// ratio that decides spans with a sampling key in place of the launch
    /// sampler (an in-flight control change, SPEC A24).
    pub fn set_sampling_ratio(&self, ratio: Option<f64>) {
        self.ratio_override.set(ratio);
    }

    /// The tracer (a no-op tracer when this rank records no spans).
    pub fn tracer(&self) -> &BoxedTracer {
        &self.tracer
    }

    /// The meter of this lifetime, `None` when this rank exports no metrics.
    pub fn otel_meter(&self) -> Option<&opentelemetry::metrics::Meter> {
        self.otel_meter.as_ref()
    }

    /// Whether this rank exports.
    pub fn is_exporting(&self) -> bool {
        self.exporting
    }

    /// Whether this rank records spans.
    pub fn records_spans(&self) -> bool {
        self.records_spans
    }

    /// Whether this rank exports the per-rank metrics.
    pub fn exports_rank_metrics(&self) -> bool {
        self.rank_metrics
    }

    /// The span groups this lifetime enabled.
    pub fn enabled_groups(&self) -> GroupSet {
        self.groups
    }

    /// The run id (empty where nothing is built).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Where the run id came from.
    pub fn run_id_source(&self) -> Option<RunIdSource> {
        self.run_id_source
    }

    /// The restart attempt.
    pub fn restart_attempt(&self) -> u32 {
        self.restart_attempt
    }

    /// This lifetime's index within the process (0 where nothing is built).
    pub fn lifetime_index(&self) -> u32 {
        self.lifetime
    }

    /// How long the Prometheus endpoint stays up after shutdown begins.
    pub fn linger(&self) -> Duration {
        self.linger
    }

    /// Where each signal goes, in words, now: a Prometheus endpoint whose
    /// port was in use at setup is said to wait for it only while it does.
    pub fn destinations(&self) -> Vec<String> {
        #[cfg(feature = "prometheus")]
        if self.prometheus_endpoint.as_ref().is_some_and(PrometheusExporter::is_serving) {
            return self.destinations.iter().map(|d| d.replace(PROMETHEUS_WAITING, "")).collect();
        }
        self.destinations.clone()
    }

    /// The export accounting so far, without flushing.
    pub fn report(&self) -> ShutdownReport {
        ShutdownReport {
            spans: self.span_counters.as_ref().map(|c| c.snapshot()).unwrap_or_default(),
            metrics: self.metric_counters.as_ref().map(|c| c.snapshot()).unwrap_or_default(),
            logs: self.log_counters.as_ref().map(|c| c.snapshot()).unwrap_or_default(),
            dropped_file_full: self.file_limit.as_ref().map_or(0, |l| l.dropped()),
            rejected_spans: spans_rejected().saturating_sub(self.rejected_before),
            destinations: self.destinations(),
            ..ShutdownReport::default()
        }
    }

    /// Exports everything recorded so far (spans queued, a metric
    /// collection), waiting at most `timeout`. Open spans stay open.
    pub fn force_flush(&self, timeout: Duration) -> ShutdownReport {
        if self.in_forked_child() {
            return self.forked_child_report();
        }
        let (tracer_provider, meter_provider, logger_provider) = {
            let parts = lock(&self.parts);
            match parts.as_ref() {
                Some(p) => (p.tracer_provider.clone(), p.meter_provider.clone(), p.logger_provider.clone()),
                None => return self.report(),
            }
        };
        let mut steps: Vec<Step> = Vec::new();
        if let Some(provider) = tracer_provider {
            steps.push(("flush spans", Box::new(move |_| provider.force_flush())));
        }
        if let Some(provider) = meter_provider {
            steps.push(("flush metrics", Box::new(move |_| provider.force_flush())));
        }
        if let Some(provider) = logger_provider {
            steps.push(("flush logs", Box::new(move |_| provider.force_flush())));
        }
        let mut report = run_steps(steps, Instant::now() + timeout, &self.secrets);
        let now = self.report();
        (report.spans, report.metrics, report.logs) = (now.spans, now.metrics, now.logs);
        (report.dropped_file_full, report.destinations) = (now.dropped_file_full, now.destinations);
        report.rejected_spans = now.rejected_spans;
        report
    }

    /// Queues copies of the spans open now for export (the hang
    /// watchdog's flight recorder); the names of the copies, outermost
    /// first.
    pub fn export_open_span_copies(&self, event: &'static str, attributes: Vec<crate::attr::KeyValue>) -> Vec<String> {
        let closer = lock(&self.parts).as_ref().and_then(|p| p.closer.clone());
        match closer {
            Some(closer) => closer.export_open_copies(event, crate::convert::key_values(attributes)),
            None => Vec::new(),
        }
    }

    /// Ends spans still open (innermost first, marked truncated), flushes and
    /// shuts down the providers this handle built, within `timeout` even when
    /// the collector hangs. Idempotent: a second call does nothing and
    /// reports `performed: false`.
    pub fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        if self.in_forked_child() {
            // The parent's providers, exporters and spool are left as they
            // are: shutting them down would wait for threads that are not in
            // this process, and release the parent's spool lock.
            let parts = lock(&self.parts).take();
            if parts.is_none() {
                return ShutdownReport { performed: false, ..ShutdownReport::default() };
            }
            std::mem::forget(parts);
            // The parent's tracer and gate stop here, unless this process
            // has set a lifetime of its own up since.
            if !slot_held_here() {
                active::uninstall();
                set_enabled_span_groups(GroupSet::EMPTY);
            }
            self.holds_slot.store(false, Ordering::Release);
            return self.forked_child_report();
        }
        let parts = lock(&self.parts).take();
        let Some(parts) = parts else {
            // An enabled rank that exports nothing: its spool holds only
            // the progress record.
            self.close_spool(true);
            self.release_slot();
            return ShutdownReport { performed: false, ..self.report() };
        };
        // No new spans from here on.
        set_enabled_span_groups(GroupSet::EMPTY);
        active::uninstall();
        propagators::set_propagators(true, true);

        let deadline = Instant::now() + timeout;
        // The previous attempt's spans first: the replay sends them through
        // the span processor, which the span step shuts down after it. A
        // replay still running at the deadline keeps what it has not sent
        // in its spools, for the next attempt or `lens recover`. Only the
        // span step waits for it: a replay stuck on a hung trace collector
        // does not cost the metrics and logs their time.
        let replay_done = self.replay_done.clone();
        let finish_replay = move || {
            if let Some(done) = &replay_done {
                done.wait_until(deadline);
            }
        };
        let mut steps: Vec<Step> = Vec::new();
        #[cfg(feature = "prometheus")]
        let Parts { tracer_provider, closer, meter_provider, logger_provider, prometheus } = parts;
        #[cfg(not(feature = "prometheus"))]
        let Parts { tracer_provider, closer, meter_provider, logger_provider } = parts;
        // Read once the steps ran: the spans the closer's drain ended, and
        // those it could not (no slot held them).
        let closer_after = closer.clone();
        if let Some(provider) = tracer_provider {
            steps.push((
                "shut down spans",
                Box::new(move |_| {
                    finish_replay();
                    provider.shutdown_with_timeout(deadline.saturating_duration_since(Instant::now()))
                }),
            ));
        } else if self.replay_done.is_some() {
            steps.push((
                "finish the replay",
                Box::new(move |_| {
                    finish_replay();
                    Ok(())
                }),
            ));
        }
        if let Some(provider) = meter_provider {
            // The periodic reader's shutdown takes and exports the final
            // collection itself; a flush before it would export that
            // collection twice.
            steps.push((
                "flush and shut down metrics",
                Box::new(move |remaining| provider.shutdown_with_timeout(remaining)),
            ));
        }
        if let Some(provider) = logger_provider {
            logs::uninstall_log_bridge();
            steps.push(("shut down logs", Box::new(move |remaining| provider.shutdown_with_timeout(remaining))));
        }
        let mut report = run_steps(steps, deadline, &self.secrets);
        // Said here, before the report it explains, not by the step's thread.
        if self.replay_done.as_ref().is_some_and(|done| !done.is_done()) {
            crate::diag::warn(format_args!(
                "shutdown: the previous attempt's spans were still being replayed at the deadline; the spools not \
                 yet sent are kept for the next attempt or `lens recover`"
            ));
        }
        report.performed = true;
        if let Some(closer) = &closer_after {
            report.truncated_spans = closer.truncated_count();
            report.lost_open_spans = closer.open_unkept();
        }
        // A metric collection still in the exporter's hands (an export the
        // deadline cut, on a reader thread that never reached the
        // exporter's shutdown) or kept for resending is lost to this
        // lifetime: counted as dropped, and nothing counts after this.
        if let Some(counters) = &self.metric_counters {
            counters.close();
        }
        // Likewise an export attempt that the deadline cut is a failed
        // attempt now, before its thread says so: the report counts every
        // export error that a warning may already have named.
        for counters in [&self.span_counters, &self.log_counters].into_iter().flatten() {
            counters.close();
        }
        let now = self.report();
        (report.spans, report.metrics, report.logs) = (now.spans, now.metrics, now.logs);
        (report.dropped_file_full, report.destinations) = (now.dropped_file_full, now.destinations);
        report.rejected_spans = now.rejected_spans;
        // What is still pending now (a hung collector held it past the
        // deadline, and the processor's worker had not yet counted it as
        // it stopped) is lost to this lifetime: report it as unsent at
        // shutdown rather than not at all. After a clean shutdown nothing
        // is pending.
        report.spans.dropped_at_shutdown += report.spans.pending();
        report.logs.dropped_at_shutdown += report.logs.pending();
        // Every span exported or counted: nothing for the next attempt to
        // replay but the progress record. Spans unsent at shutdown stay in
        // the spool, replayed by the next attempt.
        let clean = report.spans.dropped_at_shutdown == 0;
        let overflow = self.spool.as_ref().map_or(0, |table| table.overflow());
        self.close_spool(clean);
        if !clean {
            report.spool_kept = self.spool_path().map(std::path::Path::to_path_buf);
            report.spool_overflow = overflow;
        }
        #[cfg(feature = "prometheus")]
        if let Some(prometheus) = prometheus {
            if !self.linger.is_zero() {
                prometheus.wait_linger();
            }
            prometheus.stop_server();
        }
        self.release_slot();
        report
    }

    /// Replays every dead writer's spool in `dir`, whatever its rank,
    /// through this pipeline's span exporter (`lens recover DIR`). Call it
    /// before this lifetime records any span. Without a span exporter every
    /// spool that holds spans is kept, with a warning.
    pub fn recover(&self, dir: &std::path::Path) -> crate::spool::ReplayReport {
        let mut export = |spans: Vec<opentelemetry_sdk::trace::SpanData>, resource: &Resource| match &self.replay {
            Some(replay) => replay.export(spans, resource),
            None => Err("no span exporter is configured (are traces enabled?)".to_string()),
        };
        let options = self.replay.as_ref().map(|replay| replay.options.clone()).unwrap_or_default();
        crate::spool::replay_dir(dir, crate::spool::replay::Claim::All, self.spool_path(), &options, &mut export)
    }

    /// The rank's spool file, if it has one.
    pub fn spool_path(&self) -> Option<&std::path::Path> {
        self.spool.as_ref().and_then(|table| table.path())
    }

    fn close_spool(&self, clean: bool) {
        let Some(table) = &self.spool else { return };
        if table.is_closed() {
            return;
        }
        crate::spool::uninstall();
        if clean {
            table.close_cleanly();
        } else {
            table.stop();
            table.close_file();
        }
    }

    fn release_slot(&self) {
        if self.holds_slot.swap(false, Ordering::AcqRel) && fork_generation() == self.generation {
            free_slot();
        }
    }

    /// Whether this process was forked from the one that set this lifetime
    /// up: its export threads are the parent's, so it exports nothing.
    fn in_forked_child(&self) -> bool {
        fork_generation() != self.generation
    }

    /// What a forked child's flush or shutdown of its parent's lifetime
    /// says, at once (nothing it would wait for runs in this process).
    fn forked_child_report(&self) -> ShutdownReport {
        let said = format!(
            "process {} was forked from the process that set this telemetry up: what it recorded was not \
             exported (telemetry exports from the process that set it up); set telemetry up again in this process \
             to export its own",
            std::process::id()
        );
        crate::diag::warn_once(&said);
        ShutdownReport { performed: true, errors: vec![said], ..ShutdownReport::default() }
    }
}

/// The spans collectors have rejected in this process (OTLP's partial
/// success; none in a build without OTLP).
fn spans_rejected() -> u64 {
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    return crate::exporters::otlp::spans_rejected();
    #[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
    0
}

type Step = (&'static str, Box<dyn FnOnce(Duration) -> OTelSdkResult + Send>);

/// Runs `steps` at once, one helper thread each, and waits for them until
/// `deadline`. The signals are independent, so each gets the whole budget: a
/// hung trace collector does not starve the final metric collection bound
/// for another backend. A step still running at the deadline is left to
/// finish in the background and reported unfinished, and so is one that
/// returned at or after the deadline or timed out
/// ([`OTelSdkError::Timeout`]): a processor that gives up on a hung export
/// returns just at the deadline, and whether the wait here sees that result
/// before it ends is up to the scheduler, so both count the same. Other
/// errors are listed in the order of `steps`, each passed through
/// [`crate::diag::redact`] with `secrets`.
fn run_steps(steps: Vec<Step>, deadline: Instant, secrets: &[String]) -> ShutdownReport {
    let names: Vec<&'static str> = steps.iter().map(|(name, _)| *name).collect();
    let mut results: Vec<Option<OTelSdkResult>> = names.iter().map(|_| None).collect();
    let (done_tx, done_rx) = mpsc::channel::<(usize, OTelSdkResult)>();
    let mut waiting = 0;
    for (index, (_, step)) in steps.into_iter().enumerate() {
        let done_tx = done_tx.clone();
        let spawned = std::thread::Builder::new().name("lens-shutdown".into()).spawn(move || {
            crate::export_path::mark_thread();
            let remaining = deadline.saturating_duration_since(Instant::now());
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(remaining)))
                .unwrap_or_else(|_| Err(OTelSdkError::InternalFailure("panicked".to_string())));
            let _receiver_gone_after_the_deadline = done_tx.send((index, in_time(result, deadline)));
        });
        match spawned {
            Ok(_detached) => waiting += 1,
            Err(error) => {
                results[index] =
                    Some(Err(OTelSdkError::InternalFailure(format!("could not start its thread: {error}"))));
            }
        }
    }
    drop(done_tx);
    while waiting > 0 {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(remaining) {
            Ok((index, result)) => {
                results[index] = Some(result);
                waiting -= 1;
            }
            Err(_) => break,
        }
    }
    let mut report = ShutdownReport::default();
    for (name, result) in names.iter().zip(results) {
        match result {
            None | Some(Err(OTelSdkError::Timeout(_))) => report.unfinished.push(name),
            Some(Ok(())) => {}
            Some(Err(error)) => report.errors.push(crate::diag::redact(&format!("{name}: {error}"), secrets)),
        }
    }
    report
}

/// `result`, or a timeout once `deadline` has passed: a step that ends late
/// did not finish in time, whatever it returned.
fn in_time(result: OTelSdkResult, deadline: Instant) -> OTelSdkResult {
    if Instant::now() < deadline { result } else { Err(OTelSdkError::Timeout(Duration::ZERO)) }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds the pipeline of this rank (the facade's `setup_telemetry` calls
/// it): validates the whole configuration and checks that this build has
/// every transport it selects (on every rank, before anything is
/// installed), asks the rank strategy, and builds providers only on a rank
/// that exports. Resource detection, the run id and the default
/// destination's probe read `env`.
pub fn setup(
    config: &LensConfig,
    rank: &RankContext,
    resource_attributes: Vec<KeyValue>,
    options: PipelineOptions,
    env: &(dyn EnvSource + Send + Sync),
) -> Result<Pipeline, PipelineError> {
    config.validate()?;
    // The signals whose exporter the program gives in code: the
    // configuration's transports and files are not theirs.
    let given: Vec<Signal> = [
        options.span_exporter.is_some().then_some(Signal::Traces),
        options.metric_exporter.is_some().then_some(Signal::Metrics),
    ]
    .into_iter()
    .flatten()
    .collect();
    if config.telemetry_enabled()
        && let Some(missing) = config.missing_transport_except(TRANSPORTS, &given)
    {
        return Err(missing.into());
    }
    // On every rank, before the strategy decides: a bad file stops them all.
    if config.telemetry_enabled() {
        config.check_files_except(&given)?;
    }
    let rank = *rank;
    let enabled = config.telemetry_enabled();
    let exports = enabled
        && match &options.rank_strategy {
            Some(strategy) => strategy(config, &rank),
            None => strategies::should_export(config, &rank)?,
        };
    let records_spans = exports && config.traces_enabled && strategies::records_spans(config, &rank)?;
    if enabled
        && options.rank_strategy.is_none()
        && config.rank_strategy == "first_rank_per_node"
        && rank.world_size > 1
        && LOCAL_RANK_VARIABLES.iter().all(|variable| env.non_empty(variable).is_none())
        // The rank read from the environment, not given in code (an MPI
        // program passes its local rank itself).
        && RankContext::detect(env).ok() == Some(rank)
    {
        // A missing local rank counts as 0 (as in the original): said,
        // since it turns this strategy into every rank exporting.
        crate::diag::warn_once(format_args!(
            "{}=first_rank_per_node, but neither LOCAL_RANK nor SLURM_LOCALID is set: each of the {} ranks counts \
             as its node's first and exports; have the launcher set LOCAL_RANK",
            config.variable_to_set("rank_strategy", "RANK_STRATEGY"),
            rank.world_size
        ));
    }
    // `validate` has checked the spec, so resolving it cannot fail here.
    let groups = if records_spans { config.resolved_span_groups().unwrap_or_default() } else { GroupSet::EMPTY };

    if enabled {
        match take_slot() {
            None => return Err(PipelineError::AlreadyActive),
            // A forked child setting up for itself: the parent's tracer and
            // gate, inherited, export nothing here.
            Some(true) => {
                active::uninstall();
                set_enabled_span_groups(GroupSet::EMPTY);
            }
            Some(false) => {}
        }
    }
    // Per-rank metrics (per-rank insight without communication): with `<PREFIX>_RANK_METRICS` every rank
    // builds a metrics pipeline; spans, logs and `is_exporting` still follow
    // the rank strategy.
    let rank_metrics = enabled && config.rank_metrics && config.metrics_enabled;
    if !enabled {
        return Ok(Pipeline::inert(false));
    }
    let run_id = resolve_run_id(&config.run_id, env);
    crate::spool::set_replayed_progress(None);
    let spool = if enabled {
        open_spool(config, rank, &run_id.value, options.checkpoint_dir.as_deref(), options.span_exporter.is_some())
    } else {
        None
    };
    if !exports && !rank_metrics {
        // This lifetime owns the gate: nothing is recorded on this rank.
        set_enabled_span_groups(GroupSet::EMPTY);
        if let Some(table) = &spool {
            let _ = replay_at_setup(table, rank, None, &replay_options(config));
        }
        let mut pipeline = Pipeline::inert(true);
        pipeline.spool = spool;
        return Ok(pipeline);
    }
    let own_spool = spool.clone();
    let decision = RankDecision { exports, rank_metrics, records_spans, groups, run_id, spool };
    match build(config, rank, resource_attributes, options, env, decision) {
        Ok(telemetry) => Ok(telemetry),
        Err(error) => {
            // Nothing was set up: no spool either.
            if let Some(table) = own_spool {
                crate::spool::uninstall();
                table.stop();
                table.close_file();
                if let Some(path) = table.path() {
                    let _ = std::fs::remove_file(path);
                }
            }
            free_slot();
            Err(error)
        }
    }
}

/// The variables that pin the run id, as this configuration reads them:
/// `<PREFIX>_RUN_ID` for each of its prefixes, then Lens's own
/// `NEMO_LENS_RUN_ID` (read whatever the prefixes), joined with "or".
fn run_id_variables(config: &LensConfig) -> String {
    let mut names = config.origins.prefixed_names("RUN_ID");
    let lens = format!("{}_RUN_ID", crate::config::DEFAULT_PREFIX);
    if !names.contains(&lens) {
        names.push(lens);
    }
    names.join(" or ")
}

/// What the strategies decided for this rank, before anything is built.
struct RankDecision {
    /// The rank strategy says it exports.
    exports: bool,
    /// It exports the per-rank metrics (`<PREFIX>_RANK_METRICS`).
    rank_metrics: bool,
    /// The sampling strategy keeps its spans.
    records_spans: bool,
    /// The span groups it enables.
    groups: GroupSet,
    /// The run id, resolved once for the spool's header and the resource.
    run_id: crate::identity::RunId,
    /// The rank's spool file, made before the export decision's providers.
    spool: Option<Arc<SpoolTable>>,
}

/// Builds the providers of an exporting rank.
fn build(
    config: &LensConfig,
    rank: RankContext,
    resource_attributes: Vec<KeyValue>,
    mut options: PipelineOptions,
    env: &(dyn EnvSource + Send + Sync),
    decision: RankDecision,
) -> Result<Pipeline, PipelineError> {
    let RankDecision { exports, rank_metrics, records_spans, groups, run_id, spool } = decision;
    // SPEC A22: with nothing selecting a destination (and no exporter given
    // in code), OTLP to the local collector if one answers, else files.
    let custom = options.span_exporter.is_some() || options.metric_exporter.is_some();
    let defaulted;
    let config = if !custom
        && default_destination_in(config, TRANSPORTS, || collector_answers(DEFAULT_COLLECTOR, COLLECTOR_PROBE_TIMEOUT))
            == DefaultDestination::Files
    {
        defaulted = LensConfig { exporter: Some(ExporterKind::File), ..config.clone() };
        &defaulted
    } else {
        config
    };
    let file_limit =
        FileLimit::set_by(config.file_max_bytes, config.variable_to_set("file_max_bytes", "FILE_MAX_BYTES"));
    if rank.world_size > 1 && !run_id.source.is_shared() && !WARNED_RANDOM_RUN_ID.swap(true, Ordering::Relaxed) {
        crate::diag::warn(format_args!(
            "no run id is shared by the {} ranks of this job (set {}, launch under SLURM, or give torchrun \
             --rdzv-id or --standalone: without either it sets TORCHELASTIC_RUN_ID=none): each rank drew its own, \
             so the ranks' telemetry is filed as {} runs and their traces do not join",
            rank.world_size,
            run_id_variables(config),
            rank.world_size
        ));
    }

    let mut caller = resource_attributes;
    for lazy in options.lazy_resource.drain(..) {
        caller.extend(lazy());
    }
    let mut inputs = ResourceInputs::new(config.service_name.clone(), run_id.value.clone(), rank);
    inputs.user_id = config.user.clone();
    inputs.wandb_entity = config.wandb_entity.clone();
    inputs.wandb_project = config.wandb_project.clone();
    inputs.service_version = options.service_version.clone();
    inputs.caller_attributes = caller;
    inputs.config_prefix = config.origins.prefix().map(str::to_string);
    inputs.span_groups = config
        .resolved_span_groups()
        .map(|set| config.catalog.names(set).iter().map(|g| g.to_string()).collect())
        .unwrap_or_default();
    let attributes = build_resource(&inputs, env, &OsProbe);
    let resource = Resource::builder_empty()
        .with_attributes(
            TelemetryResourceDetector.detect().iter().map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
        )
        .with_attributes(crate::convert::key_values(attributes))
        .build();
    let scope = InstrumentationScope::builder(options.scope.clone()).with_version(env!("CARGO_PKG_VERSION")).build();
    let mut destinations = Vec::new();

    // Traces.
    let mut tracer_provider = None;
    let mut closer = None;
    let mut replay_batch: Option<LensBatchRecordProcessor> = None;
    let mut lens_tracer = None;
    let mut span_counters = None;
    let ratio_override = RatioOverride::new();
    if config.traces_enabled && records_spans {
        let batch_config = batch_config(config);
        let batch = match options.span_exporter.take() {
            Some(factory) => {
                destinations.push("traces: custom exporter".to_string());
                Some(factory(batch_config, &scope))
            }
            None => span_exporter(config, rank, (&run_id.value, &file_limit), &mut destinations)?
                .map(|exporter| LensBatchRecordProcessor::new(record_exporter(exporter, scope.clone()), batch_config)),
        };
        if let Some(batch) = batch {
            span_counters = Some(batch.counters());
            // The open-span registry: the spool file, else the same table
            // in anonymous memory.
            let table = match spool.clone() {
                Some(table) => {
                    table.advise_when_full(format!(
                        "raise {} to give the spool more slots",
                        config.variable_to_set("spool_size_kib", "SPOOL_SIZE_KIB")
                    ));
                    table
                }
                None => SpoolTable::anonymous(crate::spool::ANONYMOUS_SLOTS),
            };
            let span_closer = OpenSpanCloser::with_records(batch.clone(), table);
            replay_batch = Some(batch.clone());
            let span_sampler = sampler(config, rank).with_ratio_override(ratio_override.clone());
            // The facade's spans go to the recorder; the SDK's (the
            // OpenTelemetry API's, the `tracing` bridge's) to the same
            // processor through the provider. One queue, one exporter.
            lens_tracer = Some(
                LensTracer::new(
                    Recorder::with_processor(batch.clone()),
                    span_sampler.clone(),
                    span_closer.clone(),
                    scope.clone(),
                )
                .with_context_per_span(config.context_per_span),
            );
            let provider = SdkTracerProvider::builder()
                .with_id_generator(SeedIndependentIdGenerator::new())
                .with_sampler(span_sampler)
                .with_span_limits(SpanLimits::default())
                .with_resource(resource.clone())
                .with_span_processor(span_closer.clone())
                .with_span_processor(batch)
                .build();
            closer = Some(span_closer);
            tracer_provider = Some(provider);
        }
    }

    // Metrics.
    let mut meter_provider = None;
    #[cfg(feature = "prometheus")]
    let mut prometheus = None;
    let mut metric_counters = None;
    if config.metrics_enabled {
        let counters = Arc::new(MetricExportCounters::default());
        let interval = config.otel.metric_export_interval;
        let builder = SdkMeterProvider::builder().with_resource(resource.clone());
        let builder = match options.metric_exporter.take() {
            Some(factory) => {
                destinations.push("metrics: custom exporter".to_string());
                Some(factory(builder, interval, Arc::clone(&counters)))
            }
            None => metric_exporter(
                config,
                rank,
                &options,
                (&run_id.value, &file_limit),
                &mut destinations,
                #[cfg(feature = "prometheus")]
                &mut prometheus,
            )?
            .map(|exporter| {
                // OTLP collections that fail are kept and resent within the
                // retry window.
                let resender = match &exporter {
                    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
                    LensMetricExporter::Otlp(otlp) => Some(otlp.resender()),
                    _ => None,
                };
                let mut counting = CountingMetricExporter::new(exporter, Arc::clone(&counters), secrets(config));
                if let Some(resender) = resender {
                    counting = counting.with_resender(resender, config.export_retry_window);
                }
                builder.with_reader(PeriodicReader::builder(counting).with_interval(interval).build())
            }),
        };
        if let Some(builder) = builder {
            meter_provider = Some(builder.build());
            metric_counters = Some(counters);
        }
    }

    // Logs: through lens's batch processor (queue, retry window, counters),
    // configured from the validated configuration, never from OTEL_BLRP_*.
    let mut logger_provider = None;
    let mut log_counters = None;
    if config.logs_enabled
        && exports
        && let Some(exporter) = log_exporter(config, rank, (&run_id.value, &file_limit), &mut destinations)?
    {
        let batch_config =
            BatchConfig { export_timeout: config.otel.otlp(Signal::Logs).timeout, ..batch_config(config) };
        let batch = LensBatchLogProcessor::new(exporter, batch_config);
        log_counters = Some(batch.counters());
        let provider = SdkLoggerProvider::builder().with_resource(resource.clone()).with_log_processor(batch).build();
        if let Err(error) = logs::install_log_bridge(&provider, log::LevelFilter::Info) {
            crate::diag::warn(error);
        }
        logger_provider = Some(provider);
    }

    let options = replay_options(config);
    let replay = replay_batch.map(|batch| ReplayExporter {
        batch,
        resource: resource.clone(),
        timeout: config.otel.otlp(Signal::Traces).timeout,
        file_limit: Some(Arc::clone(&file_limit)),
        options: options.clone(),
    });
    // The spool: this process's resource in its header, then the dead
    // writers' spools claimed, and sent on the replay thread.
    let mut replay_done = None;
    if let Some(table) = &spool {
        let attributes: Vec<opentelemetry::KeyValue> =
            resource.iter().map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())).collect();
        table.write_meta(&spool_identity(rank, &run_id.value), &attributes);
        replay_done = replay_at_setup(table, rank, replay.clone(), &options);
    }
    let tracer: BoxedTracer = match &tracer_provider {
        Some(provider) => {
            let tracer = provider.tracer_with_scope(scope.clone());
            // The slot is empty: shutdown of the previous lifetime emptied it,
            // and ACTIVE guarantees no other lifetime is running.
            let _ = active::install(tracer.clone());
            if let Some(lens_tracer) = lens_tracer.take() {
                let _ = active::install_lens(lens_tracer);
            }
            BoxedTracer::new(Box::new(tracer))
        }
        None => BoxedTracer::new(Box::new(opentelemetry::trace::noop::NoopTracer::new())),
    };
    let otel_meter = meter_provider.as_ref().map(|provider| provider.meter_with_scope(scope));
    if !destinations.is_empty() {
        let host = OsProbe.hostname().unwrap_or_else(|| "an unnamed host".to_string());
        crate::diag::note(format_args!(
            "rank {} on host {host} (run {}) exports {}",
            rank.rank,
            run_id.value,
            destinations.join("; ")
        ));
    }
    let groups = if tracer_provider.is_some() { groups } else { GroupSet::EMPTY };
    set_enabled_span_groups(groups);
    let selected = &config.otel.propagators;
    propagators::set_propagators(selected.contains(&Propagator::TraceContext), selected.contains(&Propagator::Baggage));

    Ok(Pipeline {
        tracer,
        otel_meter,
        exporting: exports,
        records_spans: tracer_provider.is_some(),
        rank_metrics: rank_metrics && meter_provider.is_some(),
        groups,
        run_id: run_id.value,
        run_id_source: Some(run_id.source),
        restart_attempt: restart_attempt(env),
        lifetime: LIFETIMES.fetch_add(1, Ordering::Relaxed) + 1,
        destinations,
        #[cfg(feature = "prometheus")]
        prometheus_endpoint: prometheus.clone(),
        linger: config.prometheus_linger,
        span_counters,
        metric_counters,
        log_counters,
        file_limit: Some(file_limit),
        rejected_before: spans_rejected(),
        parts: Mutex::new(Some(Parts {
            tracer_provider,
            closer,
            meter_provider,
            logger_provider,
            #[cfg(feature = "prometheus")]
            prometheus,
        })),
        holds_slot: AtomicBool::new(true),
        generation: fork_generation(),
        secrets: secrets(config),
        spool,
        replay,
        replay_done,
        ratio_override,
    })
}

/// The header identity of this rank's spool.
fn spool_identity(rank: RankContext, run_id: &str) -> crate::spool::Identity {
    crate::spool::Identity {
        rank: rank.rank,
        world_size: rank.world_size,
        run_id: run_id.to_string(),
        host: OsProbe.hostname().unwrap_or_default(),
    }
}

/// The spool's directory for this configuration (see
/// [`crate::spool::spool_dir`]): the file-export directory counts when
/// traces may go to files (the `file` exporter, or no destination selected
/// so that the default may be files; never with an exporter given in code);
/// its default `telemetry/<run_id>` is
/// shared across run ids as `telemetry/lens-spool`, since the run id may
/// change per launch.
pub fn spool_dir_for(
    config: &LensConfig,
    checkpoint_dir: Option<&std::path::Path>,
    custom_exporter: bool,
) -> Option<std::path::PathBuf> {
    let files = !custom_exporter
        && (config.exporter_for(Signal::Traces) == ExporterKind::File || !config.destination_selected());
    let file_dir = files.then(|| config.file_dir.clone().unwrap_or_else(|| std::path::PathBuf::from("telemetry")));
    crate::spool::spool_dir(config.spool_dir.as_deref(), checkpoint_dir, file_dir.as_deref())
}

/// Creates this rank's spool file (one warning and `None` when the spool is
/// off for want of a place, or the file cannot be made or mapped), and
/// starts its last-alive thread.
fn open_spool(
    config: &LensConfig,
    rank: RankContext,
    run_id: &str,
    checkpoint_dir: Option<&std::path::Path>,
    custom_exporter: bool,
) -> Option<Arc<SpoolTable>> {
    if !config.spool {
        return None;
    }
    let Some(dir) = spool_dir_for(config, checkpoint_dir, custom_exporter) else {
        if custom_exporter {
            // An exporter given in code (a test's in-memory one): no file
            // place to default to, and nothing to warn a job about.
            return None;
        }
        crate::diag::warn_once(format_args!(
            "no crash-safe spool: this program gives no checkpoint directory and exports no files, so spans open \
             when a process is killed are lost; set {} to a directory (node-local storage is best), or {}=0 to \
             silence this",
            config.variable_to_set("spool_dir", "SPOOL_DIR"),
            config.variable_to_set("spool", "SPOOL"),
        ));
        return None;
    };
    let size = usize::try_from(config.spool_size_kib.saturating_mul(1024)).unwrap_or(usize::MAX);
    match SpoolTable::create(&dir, size, &spool_identity(rank, run_id)) {
        Ok(table) => {
            crate::spool::install(&table);
            crate::spool::start_alive_thread(&table);
            Some(table)
        }
        Err(error) => {
            // Advice to set the variable only when it is not what failed.
            let variable = config.variable_to_set("spool_dir", "SPOOL_DIR");
            let advice = match config.spool_dir {
                Some(_) => format!("{variable} names a directory it cannot use; point it at a writable local one"),
                None => format!("set {variable} to a writable local directory"),
            };
            crate::diag::warn_once(format_args!(
                "no crash-safe spool for this run ({error}); telemetry goes on without it ({advice})"
            ));
            None
        }
    }
}

/// Replays, once, the dead writers' spools of this rank (rank 0: also of
/// ranks at or above the world size) in `table`'s directory: reads and
/// locks them and fills [`crate::spool::replayed_progress`] now, then sends
/// their spans through `exporter` (the batch processor, this lifetime's
/// resource and the export timeout) on the `lens-replay` thread, so that
/// setup never waits for the collector (what it returns: the thread's end,
/// which shutdown waits for). A rank without an exporter keeps spools that
/// hold spans for a rank that exports or `lens recover`.
fn replay_at_setup(
    table: &SpoolTable,
    rank: RankContext,
    exporter: Option<ReplayExporter>,
    options: &ReplayOptions,
) -> Option<ReplayDone> {
    let own = table.path()?;
    let dir = own.parent()?;
    let claim = crate::spool::replay::Claim::Rank { rank: rank.rank, world_size: rank.world_size };
    let claimed = crate::spool::replay::claim_dir(dir, claim, Some(own), options);
    crate::spool::set_replayed_progress(claimed.report.progress.clone());
    if claimed.is_empty() {
        return None;
    }
    match exporter {
        // The thread stops between spools once this lifetime has shut down.
        Some(exporter) => {
            crate::spool::replay::export_in_background(claimed, exporter, dir.to_path_buf(), slot_held_here)
        }
        None => {
            let report = claimed.export(&mut |_, _| Err("this rank exports no spans".to_string()));
            crate::spool::replay::note_replayed(&report, dir);
            None
        }
    }
}

/// What a replay's warnings name: this configuration's variables.
fn replay_options(config: &LensConfig) -> ReplayOptions {
    ReplayOptions {
        max_batch: config.otel.batch.max_export_batch_size,
        size_variable: config.variable_to_set("spool_size_kib", "SPOOL_SIZE_KIB"),
    }
}

/// Header values and endpoint credentials of every signal: never quoted in
/// a warning.
fn secrets(config: &LensConfig) -> Vec<String> {
    Signal::ALL.iter().flat_map(|s| config.otel.otlp(*s).secrets()).collect()
}

fn batch_config(config: &LensConfig) -> BatchConfig {
    let b = &config.otel.batch;
    BatchConfig {
        max_queue_size: b.max_queue_size,
        max_export_batch_size: b.max_export_batch_size,
        scheduled_delay: b.schedule_delay,
        max_concurrent_exports: b.max_concurrent_exports,
        export_timeout: config.otel.otlp(Signal::Traces).timeout,
        retry_window: config.export_retry_window,
        redact: secrets(config),
        ..BatchConfig::default()
    }
}

fn sampler(config: &LensConfig, rank: RankContext) -> LensSampler {
    let (kind, ratio) = match config.otel.traces_sampler {
        TracesSampler::AlwaysOn => (DelegateSampler::AlwaysOn, None),
        TracesSampler::AlwaysOff => (DelegateSampler::AlwaysOff, None),
        TracesSampler::TraceIdRatio(r) => (DelegateSampler::TraceIdRatio, Some(r)),
        TracesSampler::ParentBasedAlwaysOn => (DelegateSampler::ParentBasedAlwaysOn, None),
        TracesSampler::ParentBasedAlwaysOff => (DelegateSampler::ParentBasedAlwaysOff, None),
        TracesSampler::ParentBasedTraceIdRatio(r) => (DelegateSampler::ParentBasedTraceIdRatio, Some(r)),
    };
    let delegate = delegate_from(kind, ratio);
    // Only a rank that records spans gets a tracer provider, so the
    // strategy's decision is `true` here.
    let sampler = match config.sampling_strategy.as_str() {
        "" => LensSampler::new(delegate),
        "rank_aware" => LensSampler::rank_aware(delegate, rank.rank, config.export_sample_rate, true),
        name => LensSampler::registered(delegate, name, true),
    };
    sampler.with_delegate_kind(kind)
}

/// A built exporter with where it goes (an endpoint in words, a file).
type Built<E, Where> = Result<(E, Where), ExporterError>;

/// What differs between the signals when their exporter is built: how to
/// build the OTLP, console and file exporter of `signal`. [`select_exporter`]
/// is the one place that maps the configured [`ExporterKind`] onto them.
struct SignalExporters<E> {
    signal: Signal,
    /// The exporter and its endpoint in words (`grpc http://...`).
    otlp: fn(&crate::config::OtlpSettings) -> Built<E, String>,
    console: fn() -> E,
    /// The exporter and the file it appends to.
    file: fn(&std::path::Path, u32, Arc<FileLimit>) -> Built<E, std::path::PathBuf>,
}

/// The OTLP "exporter" of a build without OTLP: setup refused such a
/// configuration before (`MissingTransport`); this is the same answer.
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
fn no_otlp<E>(settings: &crate::config::OtlpSettings) -> Built<E, String> {
    let (_, feature) = TRANSPORTS.otlp(settings.protocol);
    Err(ExporterError::MissingTransport(MissingTransport {
        variable: "OTEL_EXPORTER_OTLP_PROTOCOL".to_string(),
        value: settings.protocol.as_str().to_string(),
        selects: "OTLP".to_string(),
        feature,
    }))
}

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
fn endpoint_words(endpoint: &exporters::ResolvedEndpoint) -> String {
    format!("{} {}", endpoint.protocol.as_str(), endpoint.shown())
}

/// The exporter of one signal as configured (`None` for `none`, and for a
/// kind that signal has not), with where it goes added to `destinations`.
/// `prometheus` builds the pull exporter (metrics only).
fn select_exporter<E>(
    config: &LensConfig,
    rank: RankContext,
    (run_id, file_limit): (&str, &Arc<FileLimit>),
    destinations: &mut Vec<String>,
    kinds: SignalExporters<E>,
    prometheus: impl FnOnce(&mut Vec<String>) -> Result<Option<E>, ExporterError>,
) -> Result<Option<E>, ExporterError> {
    let name = kinds.signal.as_str();
    let exporter = match config.exporter_for(kinds.signal) {
        ExporterKind::Otlp => {
            let (exporter, endpoint) = (kinds.otlp)(config.otel.otlp(kinds.signal))?;
            destinations.push(format!("{name}: OTLP {endpoint}"));
            exporter
        }
        ExporterKind::Console => {
            destinations.push(format!("{name}: console (standard output)"));
            (kinds.console)()
        }
        ExporterKind::File => {
            let (exporter, path) = (kinds.file)(&config.file_dir_for(run_id), rank.rank, Arc::clone(file_limit))
                .map_err(|error| match error {
                    // Name the variable this program reads, under its own prefix.
                    ExporterError::File { path, source, .. } => {
                        ExporterError::File { variable: config.variable_to_set("file_dir", "FILE_DIR"), path, source }
                    }
                    other => other,
                })?;
            let path = std::path::absolute(&path).unwrap_or(path);
            destinations.push(format!("{name}: file {}", path.display()));
            exporter
        }
        ExporterKind::Prometheus => return prometheus(destinations),
        ExporterKind::None => return Ok(None),
    };
    Ok(Some(exporter))
}

/// Signals without a pull exporter: `prometheus` selects nothing.
fn no_pull_exporter<E>(_: &mut Vec<String>) -> Result<Option<E>, ExporterError> {
    Ok(None)
}

fn span_exporter(
    config: &LensConfig,
    rank: RankContext,
    files: (&str, &Arc<FileLimit>),
    destinations: &mut Vec<String>,
) -> Result<Option<LensSpanExporter>, ExporterError> {
    let kinds = SignalExporters {
        signal: Signal::Traces,
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        otlp: |settings| {
            let exporter = exporters::build_otlp_span_exporter(settings)?;
            let endpoint = endpoint_words(exporter.endpoint());
            Ok((LensSpanExporter::Otlp(Box::new(exporter)), endpoint))
        },
        #[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
        otlp: no_otlp,
        console: || LensSpanExporter::Console(ConsoleSpanExporter::stdout()),
        file: |dir, rank, limit| {
            let exporter = FileSpanExporter::create(dir, rank, limit)?;
            let path = exporter.path().to_path_buf();
            Ok((LensSpanExporter::File(exporter), path))
        },
    };
    select_exporter(config, rank, files, destinations, kinds, no_pull_exporter)
}

fn metric_exporter(
    config: &LensConfig,
    rank: RankContext,
    options: &PipelineOptions,
    files: (&str, &Arc<FileLimit>),
    destinations: &mut Vec<String>,
    #[cfg(feature = "prometheus")] prometheus: &mut Option<PrometheusExporter>,
) -> Result<Option<LensMetricExporter>, ExporterError> {
    let kinds = SignalExporters {
        signal: Signal::Metrics,
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        otlp: |settings| {
            let exporter = exporters::build_otlp_metric_exporter(settings, Temporality::Cumulative)?;
            let endpoint = endpoint_words(exporter.endpoint());
            Ok((LensMetricExporter::Otlp(Box::new(exporter)), endpoint))
        },
        #[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
        otlp: no_otlp,
        console: || LensMetricExporter::Console(ConsoleMetricExporter::stdout()),
        file: |dir, rank, limit| {
            let exporter = FileMetricExporter::create(dir, rank, limit)?;
            let path = exporter.path().to_path_buf();
            Ok((LensMetricExporter::File(exporter), path))
        },
    };
    #[cfg(not(feature = "prometheus"))]
    let _ = options;
    #[cfg(not(feature = "prometheus"))]
    return select_exporter(config, rank, files, destinations, kinds, |_| {
        Err(ExporterError::MissingTransport(MissingTransport {
            variable: "OTEL_METRICS_EXPORTER".to_string(),
            value: "prometheus".to_string(),
            selects: "the Prometheus endpoint for metrics".to_string(),
            feature: crate::config::FEATURE_PROMETHEUS,
        }))
    });
    #[cfg(feature = "prometheus")]
    select_exporter(config, rank, files, destinations, kinds, |destinations| {
        let settings = PrometheusSettings {
            host: config.otel.prometheus_host.clone(),
            port: config.otel.prometheus_port,
            // A strategy given in code has no name. With rank metrics
            // every rank of a host exports metrics.
            local_rank_offset: exporters::prometheus_port_offset(
                options.rank_strategy.is_none().then_some(config.rank_strategy.as_str()),
                config.rank_metrics,
                rank.local_rank,
            ),
            resource_labels: config.prometheus_resource_labels.clone(),
            linger: config.prometheus_linger,
        };
        let exporter = PrometheusExporter::start(&settings)?;
        let waiting = if exporter.is_serving() { "" } else { PROMETHEUS_WAITING };
        destinations.push(format!("metrics: Prometheus http://{}/metrics{waiting}", exporter.local_addr()));
        *prometheus = Some(exporter.clone());
        Ok(Some(LensMetricExporter::Prometheus(exporter)))
    })
}

/// What a Prometheus destination says while its port is in use.
#[cfg(feature = "prometheus")]
const PROMETHEUS_WAITING: &str = " (the port is in use: served once it is free)";

fn log_exporter(
    config: &LensConfig,
    rank: RankContext,
    files: (&str, &Arc<FileLimit>),
    destinations: &mut Vec<String>,
) -> Result<Option<LensLogExporter>, ExporterError> {
    let kinds = SignalExporters {
        signal: Signal::Logs,
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        otlp: |settings| {
            let exporter = exporters::build_otlp_log_exporter(settings)?;
            let endpoint = endpoint_words(exporter.endpoint());
            Ok((LensLogExporter::Otlp(Box::new(exporter)), endpoint))
        },
        #[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
        otlp: no_otlp,
        console: || LensLogExporter::Console(ConsoleLogExporter::stdout()),
        file: |dir, rank, limit| {
            let exporter = FileLogExporter::create(dir, rank, limit)?;
            let path = exporter.path().to_path_buf();
            Ok((LensLogExporter::File(exporter), path))
        },
    };
    select_exporter(config, rank, files, destinations, kinds, no_pull_exporter)
}

#[cfg(test)]
mod run_id_warning_tests {
    use super::*;
    use crate::groups::LENS_CATALOG;

    #[test]
    fn the_run_id_warning_names_the_programs_own_variables() {
        let config = |prefix, fallback| LensConfig::from_env(&[("X", "y")], prefix, fallback, &LENS_CATALOG).unwrap();
        assert_eq!(run_id_variables(&config("MYJOB_OTEL", Some("NEMO_LENS"))), "MYJOB_OTEL_RUN_ID or NEMO_LENS_RUN_ID");
        assert_eq!(
            run_id_variables(&config("MEGATRON_OTEL", Some("NEMO_LENS"))),
            "MEGATRON_OTEL_RUN_ID or NEMO_LENS_RUN_ID"
        );
        assert_eq!(run_id_variables(&config("NEMO_LENS", None)), "NEMO_LENS_RUN_ID");
        assert_eq!(run_id_variables(&LensConfig::default()), "NEMO_LENS_RUN_ID");
    }
}

#[cfg(test)]
mod report_redaction_tests {
    use super::*;

    #[test]
    fn shutdown_report_errors_never_show_a_header_value() {
        let secrets = vec!["Bearer tok3n-value".to_string(), "tok3n-value".to_string()];
        let steps: Vec<Step> = vec![
            ("shut down spans", Box::new(|_| failure("401 from collector: authorization: Bearer tok3n-value"))),
            ("shut down logs", Box::new(|_| failure("UNAUTHENTICATED: echo x-key=tok3n-value"))),
        ];
        let report = run_steps(steps, Instant::now() + Duration::from_secs(10), &secrets);
        assert_eq!(
            report.errors,
            [
                "shut down spans: Operation failed: 401 from collector: authorization: <redacted>",
                "shut down logs: Operation failed: UNAUTHENTICATED: echo x-key=<redacted>"
            ]
        );
        assert!(!format!("{report} {report:?}").contains("tok3n"), "{report}");
    }

    fn failure(message: &str) -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure(message.to_string()))
    }

    #[test]
    fn a_step_that_hangs_or_times_out_is_unfinished_and_takes_no_time_from_the_others() {
        let steps: Vec<Step> = vec![
            (
                "shut down spans",
                Box::new(|_| {
                    std::thread::sleep(Duration::from_secs(3));
                    Ok(())
                }),
            ),
            ("flush and shut down metrics", Box::new(|_| Ok(()))),
            ("shut down logs", Box::new(|remaining| Err(OTelSdkError::Timeout(remaining)))),
        ];
        let started = Instant::now();
        let report = run_steps(steps, started + Duration::from_secs(1), &[]);
        assert!(started.elapsed() < Duration::from_secs(3), "waited for the hung step: {:?}", started.elapsed());
        assert_eq!(report.unfinished, ["shut down spans", "shut down logs"], "{report}");
        assert!(report.errors.is_empty(), "{report}");
    }
}
