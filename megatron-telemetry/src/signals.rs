//! SIGTERM and SIGINT for the lifecycle (flush telemetry, then exit as the signal would have).
//!
//! A job killed by SIGTERM (a SLURM time limit, a preemption, a launcher
//! tearing ranks down) would lose the spans still open, the current
//! `megatron.train` interval and everything queued for export. The
//! [`MegatronTelemetry`](crate::lifecycle::MegatronTelemetry) lifecycle
//! therefore installs handlers for SIGTERM and SIGINT, **only on exporting
//! ranks** (a handler changes how a process reacts to signals, and other
//! ranks have nothing to save), with two modes ([`ExitMode`]):
//!
//! - [`ExitMode::Graceful`] (Megatron's `--exit-signal-handler`): the
//!   training loop drains by itself (it finishes the iteration, saves a
//!   checkpoint and exits), so the handler first passes the signal on to a
//!   previous handler if there was one (the program's, which must start its
//!   final checkpoint at once), and only then flushes what is queued, on a
//!   thread of its own: a hung collector delays neither the program's
//!   reaction nor its shutdown (which does not wait for that flush and stays
//!   bounded by its own timeout). The default action is not re-raised: the
//!   process keeps running.
//! - [`ExitMode::Terminate`]: the handler shuts telemetry down (bounded by
//!   the shutdown timeout; spans still open, the interval and startup
//!   included, are ended and marked `nemo.span.truncated`), writes the
//!   shutdown report on standard error (`lens: SIGTERM: telemetry (rank N)
//!   shut down: spans: ...`, since the program never reaches its own
//!   shutdown to print it), gives the signal
//!   back to whoever had it before and re-raises it: a previous handler
//!   runs, an ignored signal stays ignored, and under the default action the
//!   process dies *by the signal*, so its exit status is the conventional one
//!   (killed by SIGTERM) that launchers and schedulers look at.
//!
//! Nothing is done inside the signal handler but writing one byte to a pipe
//! (the self-pipe pattern; `write` is async-signal-safe). A thread of ours
//! reads the pipe and does the work. The handlers are removed when the
//! lifetime shuts down, and the previous dispositions are restored exactly,
//! so a second lifetime in the same process installs them again and a
//! process without telemetry reacts to signals as before.
//!
//! Outside Unix nothing is installed.

use std::sync::Weak;
use std::time::Duration;

use lens_fallbacks::Telemetry;

/// What the handlers do on SIGTERM or SIGINT; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitMode {
    /// The training loop drains by itself (`--exit-signal-handler`): call a
    /// previous handler if there was one, then flush in the background.
    Graceful,
    /// Shut telemetry down (ending open spans, marked truncated), write the
    /// shutdown report on standard error, then give the signal to the
    /// previous handler or re-raise its default action.
    Terminate,
}

/// Whether this process has lifecycle signal handlers installed right now.
///
/// ```
/// assert!(!megatron_telemetry::signals::is_installed());
/// ```
pub fn is_installed() -> bool {
    imp::is_installed()
}

/// Whether SIGTERM or SIGINT arrived while the handlers of
/// [`ExitMode::Terminate`] were installed: the lifecycle is ending open
/// spans (truncated) and is about to end the process with the signal. A
/// rank that sees its peers vanish then (they died of the same signal,
/// with no handler) waits for that, rather than reporting a lost peer and
/// ending its spans as if the step had finished.
///
/// ```
/// assert!(!megatron_telemetry::signals::terminating());
/// ```
pub fn terminating() -> bool {
    imp::terminating()
}

/// How long the installed handler's shutdown may take (the telemetry's
/// shutdown timeout): a rank that waits for the handler to end the process
/// ([`terminating`]) waits at least this long. Zero before any handler was
/// installed.
///
/// ```
/// assert_eq!(megatron_telemetry::signals::shutdown_timeout(), std::time::Duration::ZERO);
/// ```
pub fn shutdown_timeout() -> Duration {
    Duration::from_millis(SHUTDOWN_TIMEOUT_MS.load(std::sync::atomic::Ordering::Relaxed))
}

/// The last installed handler's shutdown timeout, in milliseconds.
static SHUTDOWN_TIMEOUT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The handlers of one lifetime; dropping the guard removes them and
/// restores the previous dispositions (once: a later lifetime's handlers are
/// not touched).
#[derive(Debug)]
#[must_use = "the handlers are removed when the guard is dropped"]
pub(crate) struct SignalGuard {
    id: u64,
}

impl SignalGuard {
    /// Removes the handlers now (the same as dropping the guard).
    pub(crate) fn uninstall(self) {}
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        imp::uninstall(self.id);
    }
}

/// Installs the handlers for SIGTERM and SIGINT. `telemetry` is held weakly:
/// a signal after the lifetime is gone does nothing but pass the signal on.
/// Returns `None` (after a warning) when handlers are already installed or
/// the platform has none.
pub(crate) fn install(telemetry: Weak<Telemetry>, mode: ExitMode, timeout: Duration) -> Option<SignalGuard> {
    let guard = imp::install(telemetry, mode, timeout).map(|id| SignalGuard { id });
    if guard.is_some() {
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        SHUTDOWN_TIMEOUT_MS.store(millis, std::sync::atomic::Ordering::Relaxed);
    }
    guard
}

#[cfg(unix)]
mod imp {
    use std::io;
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
    use std::thread::JoinHandle;
    use std::time::Duration;

    use lens_fallbacks::Telemetry;
    use libc::c_int;

    use super::ExitMode;

    /// The signals handled.
    const SIGNALS: [c_int; 2] = [libc::SIGTERM, libc::SIGINT];

    /// The write end of the self-pipe, or -1. The only state the signal
    /// handler reads.
    static WRITE_FD: AtomicI32 = AtomicI32::new(-1);
    /// Whether the installed handlers are [`ExitMode::Terminate`]'s.
    static TERMINATE_MODE: AtomicBool = AtomicBool::new(false);
    /// Set by the signal handler under [`ExitMode::Terminate`].
    static TERMINATING: AtomicBool = AtomicBool::new(false);
    /// Installation ids, so that a stale guard never removes a later
    /// lifetime's handlers.
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    /// The current installation, if any; emptied by uninstall.
    static STATE: Mutex<Option<Installed>> = Mutex::new(None);

    struct Installed {
        id: u64,
        previous: Vec<(c_int, libc::sigaction)>,
        write_fd: c_int,
        thread: Option<JoinHandle<()>>,
    }

    fn state() -> MutexGuard<'static, Option<Installed>> {
        STATE.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn is_installed() -> bool {
        state().is_some()
    }

    pub(super) fn terminating() -> bool {
        TERMINATING.load(Ordering::Relaxed)
    }

    /// The signal handler: one byte, the signal number, to the pipe.
    extern "C" fn on_signal(signal: c_int) {
        let saved = errno();
        if TERMINATE_MODE.load(Ordering::Relaxed) {
            // A relaxed store: async-signal-safe.
            TERMINATING.store(true, Ordering::Relaxed);
        }
        let fd = WRITE_FD.load(Ordering::Relaxed);
        if fd >= 0 {
            let byte = signal as u8;
            // SAFETY: `write` is async-signal-safe; the buffer is one byte on
            // this stack frame. A full pipe (non-blocking) drops the byte,
            // which only loses a repeated signal.
            let _ = unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
        }
        set_errno(saved);
    }

    /// The calling thread's `errno` slot, where this platform has a known
    /// way to reach it.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn errno_location() -> Option<*mut c_int> {
        // SAFETY: returns the calling thread's errno slot.
        Some(unsafe { libc::__errno_location() })
    }

    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    fn errno_location() -> Option<*mut c_int> {
        // SAFETY: returns the calling thread's errno slot.
        Some(unsafe { libc::__error() })
    }

    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    )))]
    fn errno_location() -> Option<*mut c_int> {
        None
    }

    /// The calling thread's `errno` (0 where it cannot be reached).
    fn errno() -> c_int {
        // SAFETY: the slot is valid for the calling thread.
        errno_location().map_or(0, |slot| unsafe { *slot })
    }

    /// Restores the calling thread's `errno` (nothing where it cannot be
    /// reached).
    fn set_errno(value: c_int) {
        if let Some(slot) = errno_location() {
            // SAFETY: the slot is valid for the calling thread.
            unsafe { *slot = value }
        }
    }

    /// Our disposition: `on_signal`, restarting interrupted system calls,
    /// so that the training loop's reads and writes do not see `EINTR`.
    fn our_action() -> libc::sigaction {
        // SAFETY: an all-zero `sigaction` is a valid value to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: `sa_mask` is a valid `sigset_t` to initialise.
        unsafe { libc::sigemptyset(&raw mut action.sa_mask) };
        action
    }

    fn set_action(signal: c_int, action: &libc::sigaction) -> io::Result<libc::sigaction> {
        // SAFETY: as above, zeroed is valid; `sigaction` reads `action` and
        // writes the old disposition into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid for the call.
        let status = unsafe { libc::sigaction(signal, action, &raw mut old) };
        if status == 0 { Ok(old) } else { Err(io::Error::last_os_error()) }
    }

    fn pipe() -> io::Result<(c_int, c_int)> {
        let mut fds = [-1 as c_int; 2];
        // SAFETY: `fds` has room for the two descriptors.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        for fd in fds {
            // SAFETY: `fd` was just returned by `pipe`.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: as above; the write end must never block a signal handler.
        unsafe {
            let flags = libc::fcntl(fds[1], libc::F_GETFL);
            libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Ok((fds[0], fds[1]))
    }

    fn close(fd: c_int) {
        // SAFETY: `fd` is a descriptor we own and close once.
        unsafe { libc::close(fd) };
    }

    pub(super) fn install(telemetry: Weak<Telemetry>, mode: ExitMode, timeout: Duration) -> Option<u64> {
        let mut slot = state();
        if slot.is_some() {
            lens_fallbacks::diag::warn(
                "megatron-telemetry: signal handlers are already installed; not installing again",
            );
            return None;
        }
        let (read_fd, write_fd) = match pipe() {
            Ok(fds) => fds,
            Err(error) => {
                lens_fallbacks::diag::warn(format_args!(
                    "megatron-telemetry: no SIGTERM/SIGINT handling (cannot create a pipe: {error})"
                ));
                return None;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("megatron-telemetry-signals".into())
            .spawn(move || handle_signals(read_fd, telemetry, mode, timeout));
        let thread = match spawned {
            Ok(thread) => thread,
            Err(error) => {
                close(read_fd);
                close(write_fd);
                lens_fallbacks::diag::warn(format_args!(
                    "megatron-telemetry: no SIGTERM/SIGINT handling (cannot start its thread: {error})"
                ));
                return None;
            }
        };
        WRITE_FD.store(write_fd, Ordering::Relaxed);
        TERMINATE_MODE.store(mode == ExitMode::Terminate, Ordering::Relaxed);
        let ours = our_action();
        let mut previous = Vec::new();
        for signal in SIGNALS {
            match set_action(signal, &ours) {
                Ok(old) => previous.push((signal, old)),
                Err(error) => lens_fallbacks::diag::warn(format_args!(
                    "megatron-telemetry: cannot handle signal {signal}: {error}"
                )),
            }
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        *slot = Some(Installed { id, previous, write_fd, thread: Some(thread) });
        Some(id)
    }

    /// Restores the previous dispositions and closes the pipe's write end
    /// (which ends the thread); returns the thread to join, if any.
    fn remove(installed: Installed) -> Option<JoinHandle<()>> {
        let Installed { previous, write_fd, thread, .. } = installed;
        for (signal, action) in &previous {
            let _ = set_action(*signal, action);
        }
        WRITE_FD.store(-1, Ordering::Relaxed);
        TERMINATE_MODE.store(false, Ordering::Relaxed);
        close(write_fd);
        thread
    }

    pub(super) fn uninstall(id: u64) {
        let taken = {
            let mut slot = state();
            match slot.as_ref() {
                Some(installed) if installed.id == id => slot.take(),
                _ => None,
            }
        };
        if let Some(thread) = taken.and_then(remove)
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }

    /// The previous disposition of `signal`, while installed.
    fn previous_action(signal: c_int) -> Option<libc::sigaction> {
        state().as_ref()?.previous.iter().find(|(s, _)| *s == signal).map(|(_, action)| *action)
    }

    fn is_function(action: &libc::sigaction) -> bool {
        action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN
    }

    /// The name of a handled signal, for messages.
    fn signal_name(signal: c_int) -> &'static str {
        match signal {
            libc::SIGTERM => "SIGTERM",
            libc::SIGINT => "SIGINT",
            _ => "a signal",
        }
    }

    fn raise(signal: c_int) {
        // SAFETY: sends `signal` to the calling thread; its disposition was
        // set just before.
        unsafe { libc::raise(signal) };
    }

    /// Flushes what is queued, bounded by `timeout`, on a thread of its
    /// own, neither joined nor waited for: the signal thread stays free to
    /// pass the next signal on at once, and the lifetime's shutdown (which
    /// removes the handlers and joins the signal thread) does not wait for
    /// a flush that a hung collector holds. One flush at a time: `flushing`
    /// is set while one runs.
    fn flush_in_background(telemetry: &Weak<Telemetry>, timeout: Duration, flushing: &Arc<AtomicBool>) {
        let Some(telemetry) = telemetry.upgrade() else { return };
        if flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        let done = Arc::clone(flushing);
        let spawned = std::thread::Builder::new().name("megatron-telemetry-flush".into()).spawn(move || {
            telemetry.force_flush(timeout);
            drop(telemetry);
            done.store(false, Ordering::Release);
        });
        if let Err(error) = spawned {
            flushing.store(false, Ordering::Release);
            lens_fallbacks::diag::warn(format_args!(
                "megatron-telemetry: no flush on this signal (cannot start its thread: {error}); the program's \
                 shutdown exports what is queued"
            ));
        }
    }

    fn handle_signals(read_fd: c_int, telemetry: Weak<Telemetry>, mode: ExitMode, timeout: Duration) {
        let flushing = Arc::new(AtomicBool::new(false));
        loop {
            let mut byte = 0_u8;
            // SAFETY: reads one byte into `byte` from our pipe.
            let read = unsafe { libc::read(read_fd, (&raw mut byte).cast(), 1) };
            if read < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if read != 1 {
                break; // the write end was closed: uninstalled
            }
            let signal = c_int::from(byte);
            let Some(previous) = previous_action(signal) else {
                // Uninstalled meanwhile: the restored disposition decides.
                TERMINATING.store(false, Ordering::Relaxed);
                break;
            };
            match mode {
                ExitMode::Graceful => {
                    if is_function(&previous) {
                        // Hand this one signal to the previous handler (the
                        // program's: it starts its drain now), in a real
                        // signal context, then take the signal back.
                        let _ = set_action(signal, &previous);
                        raise(signal);
                        let _ = set_action(signal, &our_action());
                    }
                    flush_in_background(&telemetry, timeout, &flushing);
                }
                ExitMode::Terminate => {
                    if let Some(telemetry) = telemetry.upgrade() {
                        let report = telemetry.shutdown(timeout);
                        if report.performed {
                            // The program never reaches its own shutdown
                            // (the signal ends it): say what it would have.
                            lens_fallbacks::diag::note(format_args!(
                                "{}: telemetry (rank {}) shut down: {report}",
                                signal_name(signal),
                                telemetry.rank().rank
                            ));
                        }
                    }
                    let taken = state().take();
                    if let Some(installed) = taken {
                        // Our own JoinHandle: dropped, not joined.
                        drop(remove(installed));
                    }
                    if previous.sa_sigaction != libc::SIG_DFL {
                        // An ignored signal, or a previous handler that may
                        // carry on: the process is not known to be ending.
                        TERMINATING.store(false, Ordering::Relaxed);
                    }
                    if previous.sa_sigaction != libc::SIG_IGN {
                        raise(signal);
                    }
                    break;
                }
            }
        }
        close(read_fd);
    }
}

#[cfg(not(unix))]
mod imp {
    use std::sync::Weak;
    use std::time::Duration;

    use lens_fallbacks::Telemetry;

    use super::ExitMode;

    pub(super) fn is_installed() -> bool {
        false
    }

    pub(super) fn terminating() -> bool {
        false
    }

    pub(super) fn install(telemetry: Weak<Telemetry>, mode: ExitMode, timeout: Duration) -> Option<u64> {
        let _ = (telemetry, mode, timeout);
        None
    }

    pub(super) fn uninstall(id: u64) {
        let _ = id;
    }
}
