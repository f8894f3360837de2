//! SIGTERM and SIGINT in a rank.
//!
//! The signals are taken on signal-hook's iterator thread, never inside the
//! async-signal handler, so the work done there may lock and allocate.
//!
//! - Without `--exit-signal-handler` the rank ends now: telemetry ends its
//!   open spans (marked truncated) and flushes, then the default action is
//!   re-raised, so the rank dies of the signal and its launcher sees the
//!   conventional status (143 for SIGTERM, 130 for SIGINT).
//! - With it, the signal only sets a flag; the training loop shares it with
//!   every rank in the next iteration's all-reduce, so all ranks finish that
//!   iteration, save (with `--save`) and exit 0 together.
//!
//! While a rank is dying of a signal, connection errors that its peers'
//! deaths cause are not reported as the rank's own failure
//! ([`is_dying`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::telemetry::TelemetryShutdown;

static DYING: AtomicBool = AtomicBool::new(false);

/// Whether this process is ending because of a signal.
pub(crate) fn is_dying() -> bool {
    DYING.load(Ordering::Acquire)
}

/// Installs the handling described in the module docs; returns the flag
/// that a graceful signal sets.
#[cfg(unix)]
pub(crate) fn install(graceful: bool, telemetry: TelemetryShutdown) -> std::io::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;

    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        for signal in signals.forever() {
            if graceful {
                flag.store(true, Ordering::Release);
                continue;
            }
            DYING.store(true, Ordering::Release);
            let _report = telemetry.shutdown();
            let _ = signal_hook::low_level::emulate_default_handler(signal);
            // The default action of SIGTERM and SIGINT ends the process; if
            // something ignored it, end with the conventional status anyway.
            std::process::exit(128 + signal);
        }
    })?;
    Ok(stop)
}

/// Without Unix signals there is nothing to install.
#[cfg(not(unix))]
pub(crate) fn install(_graceful: bool, _telemetry: TelemetryShutdown) -> std::io::Result<Arc<AtomicBool>> {
    Ok(Arc::new(AtomicBool::new(false)))
}
