//! The log bridge (`LOGS_ENABLED`): records of the `log` crate become
//! OpenTelemetry log records, correlated with the span that is current where
//! they were logged.
//!
//! The bridge is opentelemetry-appender-log's `OpenTelemetryLogBridge` behind a
//! small forwarding logger of ours. The SDK logger fills a record's trace id,
//! span id and trace flags from the current [`opentelemetry::Context`] when the
//! record has none, which is always the case for bridged records, so a
//! `log::info!` inside a span carries that span's ids (lens's own current
//! span, [`crate::current_span`], is put there for the call).
//!
//! The `log` crate accepts one global logger per process, for the life of the
//! process. The forwarding logger is installed the first time
//! [`install_log_bridge`] runs, and the provider it forwards to sits in a slot
//! that later calls replace and [`uninstall_log_bridge`] empties; so a second
//! telemetry lifetime in the same process (setup after shutdown) bridges to
//! its own provider.
//! When another logger (env_logger, a framework's) is already installed, the
//! bridge is not installed and [`LogBridgeError::OtherLoggerInstalled`] says so;
//! composing with an existing logger is out of scope.
//!
//! Records written on lens's own export path ([`crate::export_path`]: while
//! an exporter runs, on any thread) and records whose target belongs to the
//! crates that export telemetry ([`IGNORED_TARGETS`]) are not bridged:
//! exporting them would export the export's own logs, a feedback loop. The
//! SDK's emit path runs marked, so nothing it logs comes back either.
//!
//! Sources other than the `log` crate write through [`emit_event`]: the
//! `tracing` bridge (lens-tracing) sends there the events it cannot attach
//! to a recorded span. That path needs no `log` logger, so it works even
//! when another one holds the `log` crate.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use log::{LevelFilter, Log, Metadata, Record};
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::{KeyValue, Value};
use opentelemetry_appender_log::OpenTelemetryLogBridge;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};

/// Target prefixes (crate names) whose records the bridge never forwards: the
/// OpenTelemetry crates and the transport stack under the exporters.
pub const IGNORED_TARGETS: &[&str] = &["opentelemetry", "tonic", "h2", "hyper", "reqwest", "tower", "rustls", "tokio"];

/// Why the log bridge was not installed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogBridgeError {
    /// The process already has a `log` logger that is not lens's.
    #[error(
        "LOGS_ENABLED: another logger is already installed for the `log` crate, so lens's \
         OpenTelemetry log bridge was not installed (a process has one `log` logger); \
         install no other logger, or leave *_LOGS_ENABLED unset and forward records yourself"
    )]
    OtherLoggerInstalled,
}

type Bridge = OpenTelemetryLogBridge<SdkLoggerProvider, SdkLogger>;

/// Where records go now: the bridge of the current lifetime and its level.
struct Target {
    bridge: Bridge,
    level: LevelFilter,
}

static SLOT: RwLock<Option<Target>> = RwLock::new(None);
static OURS_INSTALLED: AtomicBool = AtomicBool::new(false);

/// The instrumentation scope of the logger that writes the records of
/// [`emit_event`]. Each record also has its event's target, which the SDK's
/// OTLP encoding sends as the record's scope name instead.
pub const EVENT_SCOPE: &str = "lens-tracing";

/// Where [`emit_event`] writes now: a logger of the current lifetime's
/// provider and the least severity it takes.
struct EventTarget {
    logger: SdkLogger,
    min_severity: Severity,
}

static EVENTS: RwLock<Option<EventTarget>> = RwLock::new(None);

/// What a log record from a source other than the `log` crate holds beyond
/// its severity and target: an event of the `tracing` bridge that no
/// recorded span could take.
#[derive(Debug)]
pub struct EventRecord {
    /// The event's name (a `tracing` callsite's name).
    pub name: &'static str,
    /// The message, if it has one.
    pub body: Option<String>,
    /// Its other fields.
    pub attributes: Vec<KeyValue>,
}

/// Writes a record of `severity` at `target` to the current lifetime's logs,
/// correlated with the span current here (the SDK logger fills the trace and
/// span ids from the current OpenTelemetry context). `record` is called only
/// when the record is written: a log pipeline is set up, `severity` is at
/// least its level (`INFO`), `target` is not one of [`IGNORED_TARGETS`], and
/// the thread is not on lens's export path ([`crate::export_path`]).
///
/// ```
/// # #[cfg(feature = "testing")] { // the in-memory exporter comes with `testing`
/// use lens_otel_runtime::logs::{EventRecord, emit_event, install_log_bridge, uninstall_log_bridge};
/// use opentelemetry::logs::Severity;
/// use opentelemetry_sdk::logs::{InMemoryLogExporter, SdkLoggerProvider};
///
/// let exporter = InMemoryLogExporter::default();
/// let provider = SdkLoggerProvider::builder().with_simple_exporter(exporter.clone()).build();
/// install_log_bridge(&provider, log::LevelFilter::Info).unwrap();
/// emit_event(Severity::Warn, "my_app::loader", || EventRecord {
///     name: "event src/loader.rs:12",
///     body: Some("shard 3 is slow".into()),
///     attributes: vec![opentelemetry::KeyValue::new("shard", 3)],
/// });
/// emit_event(Severity::Debug, "my_app::loader", || unreachable!("below the pipeline's level"));
/// assert!(uninstall_log_bridge());
/// let logs = exporter.get_emitted_logs().unwrap();
/// assert_eq!(logs.len(), 1);
/// assert_eq!(logs[0].record.target().map(|t| t.to_string()).as_deref(), Some("my_app::loader"));
/// # }
/// ```
pub fn emit_event(severity: Severity, target: &str, record: impl FnOnce() -> EventRecord) {
    if ignored(target) || crate::export_path::on_export_path() {
        return;
    }
    let slot = EVENTS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(events) = slot.as_ref().filter(|events| severity as i32 >= events.min_severity as i32) else {
        return;
    };
    let EventRecord { name, body, attributes } = record();
    let mut log = events.logger.create_log_record();
    let now = std::time::SystemTime::now();
    log.set_timestamp(now);
    log.set_observed_timestamp(now);
    log.set_severity_number(severity);
    log.set_severity_text(severity.name());
    log.set_target(target.to_owned());
    log.set_event_name(name);
    if let Some(body) = body {
        log.set_body(AnyValue::from(body));
    }
    log.add_attributes(attributes.into_iter().map(|kv| (kv.key, any_value(kv.value))));
    // The SDK takes the record's trace ids from the OpenTelemetry context:
    // lens's own current span goes there for the call.
    let _current = crate::current_span::attach_frame();
    let _export_path = crate::export_path::ExportScope::enter();
    events.logger.emit(log);
}

/// A span attribute's value as a log attribute's.
fn any_value(value: Value) -> AnyValue {
    use opentelemetry::Array;
    match value {
        Value::Bool(v) => AnyValue::Boolean(v),
        Value::I64(v) => AnyValue::Int(v),
        Value::F64(v) => AnyValue::Double(v),
        Value::String(v) => AnyValue::String(v),
        Value::Array(Array::Bool(v)) => v.into_iter().collect(),
        Value::Array(Array::I64(v)) => v.into_iter().collect(),
        Value::Array(Array::F64(v)) => v.into_iter().collect(),
        Value::Array(Array::String(v)) => v.into_iter().collect(),
        other => AnyValue::String(other.to_string().into()),
    }
}

/// The least severity that `level` lets through; `None` for `Off`.
fn min_severity(level: LevelFilter) -> Option<Severity> {
    match level {
        LevelFilter::Off => None,
        LevelFilter::Error => Some(Severity::Error),
        LevelFilter::Warn => Some(Severity::Warn),
        LevelFilter::Info => Some(Severity::Info),
        LevelFilter::Debug => Some(Severity::Debug),
        LevelFilter::Trace => Some(Severity::Trace),
    }
}

/// The process's `log` logger while lens's is installed.
struct ForwardingLogger;

fn ignored(target: &str) -> bool {
    IGNORED_TARGETS.iter().any(|prefix| {
        target
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::") || rest.starts_with('_'))
    })
}

impl Log for ForwardingLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        if ignored(metadata.target()) || crate::export_path::on_export_path() {
            return false;
        }
        let slot = SLOT.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.as_ref().is_some_and(|target| metadata.level() <= target.level && target.bridge.enabled(metadata))
    }

    fn log(&self, record: &Record<'_>) {
        if ignored(record.target()) || crate::export_path::on_export_path() {
            return;
        }
        let slot = SLOT.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(target) = slot.as_ref()
            && record.level() <= target.level
        {
            let _current = crate::current_span::attach_frame();
            let _export_path = crate::export_path::ExportScope::enter();
            target.bridge.log(record);
        }
    }

    fn flush(&self) {}
}

/// Bridges records of the `log` crate at `level` and above to `provider`'s
/// logs, correlated with the current span, and points [`emit_event`] at
/// `provider` with the same level.
///
/// The first call installs lens's logger as the process's `log` logger; a
/// later call (a new telemetry lifetime) points it at the new provider and
/// level. Fails when a logger that is not lens's is installed already; the
/// `log` crate's records then stay with that logger, and [`emit_event`]
/// still writes to `provider`. Sets `log`'s maximum level to `level`.
///
/// ```
/// use lens_otel_runtime::logs::{install_log_bridge, uninstall_log_bridge};
/// use opentelemetry_sdk::logs::SdkLoggerProvider;
///
/// let provider = SdkLoggerProvider::builder().build();
/// install_log_bridge(&provider, log::LevelFilter::Info)?;
/// log::info!("bridged");
/// assert!(uninstall_log_bridge());
/// # Ok::<(), lens_otel_runtime::logs::LogBridgeError>(())
/// ```
pub fn install_log_bridge(provider: &SdkLoggerProvider, level: LevelFilter) -> Result<(), LogBridgeError> {
    *EVENTS.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
        min_severity(level).map(|min_severity| EventTarget { logger: provider.logger(EVENT_SCOPE), min_severity });
    let target = Target { bridge: OpenTelemetryLogBridge::new(provider), level };
    let mut slot = SLOT.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !OURS_INSTALLED.load(Ordering::Acquire) {
        log::set_boxed_logger(Box::new(ForwardingLogger)).map_err(|_| LogBridgeError::OtherLoggerInstalled)?;
        OURS_INSTALLED.store(true, Ordering::Release);
    }
    *slot = Some(target);
    log::set_max_level(level);
    Ok(())
}

/// Stops bridging: records of the `log` crate and of [`emit_event`] go
/// nowhere until the next [`install_log_bridge`], and `log`'s maximum level
/// becomes `Off` so that they cost nothing. Returns whether a `log` bridge
/// was attached. Call it before the logger provider shuts down.
pub fn uninstall_log_bridge() -> bool {
    *EVENTS.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    let mut slot = SLOT.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let attached = slot.take().is_some();
    if attached {
        log::set_max_level(LevelFilter::Off);
    }
    attached
}

#[cfg(test)]
mod tests {
    use super::ignored;

    #[test]
    fn transport_targets_are_ignored_and_lookalikes_are_not() {
        for target in ["opentelemetry_sdk", "opentelemetry", "hyper_util::client", "h2::codec", "tonic"] {
            assert!(ignored(target), "{target}");
        }
        for target in ["towering", "my_app", "h2o", "megatron::train"] {
            assert!(!ignored(target), "{target}");
        }
    }
}
