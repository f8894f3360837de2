//! The log bridge (`LOGS_ENABLED`): records of the `log` crate become
//! OpenTelemetry log records, correlated with the span that is current where
//! they were logged.
//!
//! The bridge is opentelemetry-appender-log's `OpenTelemetryLogBridge` behind a
//! small forwarding logger of ours. The SDK logger fills a record's trace id,
//! span id and trace flags from the current [`opentelemetry::Context`] when the
//! record has none, which is always the case for bridged records, so a
//! `log::info!` inside a span carries that span's ids.
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
//! Records whose target belongs to the crates that export telemetry
//! ([`IGNORED_TARGETS`]) are not bridged: exporting them would export the
//! export's own logs, a feedback loop.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use log::{LevelFilter, Log, Metadata, Record};
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
        if ignored(metadata.target()) {
            return false;
        }
        let slot = SLOT.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.as_ref().is_some_and(|target| metadata.level() <= target.level && target.bridge.enabled(metadata))
    }

    fn log(&self, record: &Record<'_>) {
        if ignored(record.target()) {
            return;
        }
        let slot = SLOT.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(target) = slot.as_ref()
            && record.level() <= target.level
        {
            target.bridge.log(record);
        }
    }

    fn flush(&self) {}
}

/// Bridges records of the `log` crate at `level` and above to `provider`'s
/// logs, correlated with the current span.
///
/// The first call installs lens's logger as the process's `log` logger; a
/// later call (a new telemetry lifetime) points it at the new provider and
/// level. Fails, and changes nothing, when a logger that is not lens's is
/// installed already. Sets `log`'s maximum level to `level`.
///
/// ```
/// use lens_core::otel::logs::{install_log_bridge, uninstall_log_bridge};
/// use opentelemetry_sdk::logs::SdkLoggerProvider;
///
/// let provider = SdkLoggerProvider::builder().build();
/// install_log_bridge(&provider, log::LevelFilter::Info)?;
/// log::info!("bridged");
/// assert!(uninstall_log_bridge());
/// # Ok::<(), lens_core::otel::logs::LogBridgeError>(())
/// ```
pub fn install_log_bridge(provider: &SdkLoggerProvider, level: LevelFilter) -> Result<(), LogBridgeError> {
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

/// Stops bridging: records of the `log` crate go nowhere until the next
/// [`install_log_bridge`], and `log`'s maximum level becomes `Off` so that
/// they cost nothing. Returns whether a bridge was attached. Call it before
/// the logger provider shuts down.
pub fn uninstall_log_bridge() -> bool {
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
