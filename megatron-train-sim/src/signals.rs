//! SIGTERM and SIGINT in a rank: exactly one mechanism per mode.
//!
//! - **With `--exit-signal-handler`** (graceful): [`install_drain_flag`]
//!   makes a signal set a flag, on signal-hook's iterator thread (never
//!   inside the async-signal handler); the training loop shares the flag
//!   with every rank in the next iteration's all-reduce, so all ranks finish
//!   that iteration, save (with `--save`) and exit 0 together. It is
//!   installed *before* telemetry, on every rank: on an exporting rank the
//!   lifecycle's graceful handler (megatron-telemetry's `signals` module)
//!   then sits in front of it, flushes what is queued and passes the signal
//!   on to this one.
//! - **Without it**, the simulator installs nothing. On an exporting rank
//!   the lifecycle's handler ends the open spans (marked truncated),
//!   flushes, restores the default action and re-raises the signal; on the
//!   other ranks the default action applies at once. Either way the rank
//!   dies of the signal and its launcher sees the conventional status (143
//!   for SIGTERM, 130 for SIGINT).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};

/// The flag a graceful signal sets; `false` for ever without
/// `--exit-signal-handler`.
pub(crate) type StopFlag = Arc<AtomicBool>;

/// Installs the drain flag when `graceful` (see the module docs); returns
/// the flag.
#[cfg(unix)]
pub(crate) fn install_drain_flag(graceful: bool) -> std::io::Result<StopFlag> {
    use std::sync::atomic::Ordering;

    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;

    let stop = Arc::new(AtomicBool::new(false));
    if !graceful {
        return Ok(stop);
    }
    let flag = Arc::clone(&stop);
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new().name("drain-signals".into()).spawn(move || {
        for _signal in signals.forever() {
            flag.store(true, Ordering::Release);
        }
    })?;
    Ok(stop)
}

/// Without Unix signals there is nothing to install.
#[cfg(not(unix))]
pub(crate) fn install_drain_flag(_graceful: bool) -> std::io::Result<StopFlag> {
    Ok(Arc::new(AtomicBool::new(false)))
}

/// How many SIGTERM/SIGINT the process has received (the server's: the
/// first starts its drain, a second cuts it short).
pub(crate) type SignalCount = Arc<AtomicU32>;

/// Counts SIGTERM and SIGINT from now on, as [`install_drain_flag`] flags
/// them (on signal-hook's iterator thread, installed before telemetry).
#[cfg(unix)]
pub(crate) fn install_signal_count() -> std::io::Result<SignalCount> {
    use std::sync::atomic::Ordering;

    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;

    let count = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&count);
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new().name("drain-signals".into()).spawn(move || {
        for _signal in signals.forever() {
            counted.fetch_add(1, Ordering::AcqRel);
        }
    })?;
    Ok(count)
}

/// Without Unix signals there is nothing to count.
#[cfg(not(unix))]
pub(crate) fn install_signal_count() -> std::io::Result<SignalCount> {
    Ok(Arc::new(AtomicU32::new(0)))
}
