//! lens's own export path, marked where it runs: whatever lens runs to
//! export telemetry (its exporters' futures, each time they are polled, on
//! any thread and under any executor; their flushes and shutdowns; the
//! threads lens starts for exporting) carries a thread-local mark, and
//! [`on_export_path`] reads it.
//!
//! The transport stack under the exporters (tonic, tower, h2, hyper,
//! hyper_util, reqwest) and the OpenTelemetry SDK emit `tracing` spans and
//! events. Recorded, they would be exported, and their export would make
//! more: a feedback loop. So the `tracing` bridge (lens-tracing) records
//! nothing while [`on_export_path`] holds, and the log bridge writes nothing.
//! The mark follows the work, not a thread's name: the SDK's periodic
//! metric reader (`OpenTelemetry.Metrics.PeriodicReader`) is marked while it
//! polls lens's metric exporter, a tokio worker while it polls an export
//! future ([`marked`]), and a user's thread named `lens-anything` is not
//! marked at all.
//!
//! Three ways to mark, all cheap and allocation-free:
//! - [`ExportScope::enter`]: from now until the guard drops (scopes nest);
//! - [`marked`]: a future that is marked during each of its polls;
//! - [`mark_thread`]: the whole current thread, for its life (lens's own
//!   export, send, shutdown and runtime threads).
//!
//! One thread is marked by its name ([`FOREIGN_EXPORT_THREADS`]): the
//! runtime thread that reqwest's blocking client starts for the OTLP/HTTP
//! exporter, where hyper runs, and where no lens code runs to set a mark.
//!
//! The state is one thread-local word (see `docs/architecture.md`, "Process-wide
//! state"); [`on_export_path`] is one thread-local load and a compare, plus,
//! once per thread, a read of the thread's name.

use std::cell::Cell;
use std::future::Future;

/// The name prefixes of threads that lens does not start but that carry only
/// export traffic: the runtime thread of reqwest's blocking client (the
/// OTLP/HTTP exporter's), whose hyper calls run there.
pub const FOREIGN_EXPORT_THREADS: &[&str] = &["reqwest-internal-sync-runtime"];

/// The thread's name has been read.
const CLASSIFIED: u32 = 1;
/// The whole thread is on the export path ([`mark_thread`], or its name).
const WHOLE_THREAD: u32 = 2;
/// One open [`ExportScope`] (the scopes' depth counts in these units).
const ONE_SCOPE: u32 = 4;

thread_local! {
    /// [`CLASSIFIED`] | [`WHOLE_THREAD`] | depth × [`ONE_SCOPE`].
    static STATE: Cell<u32> = const { Cell::new(0) };
}

/// Whether the current thread is on lens's export path now: inside an
/// [`ExportScope`] or a poll of a [`marked`] future, on a thread marked by
/// [`mark_thread`], or on one of [`FOREIGN_EXPORT_THREADS`]. During thread
/// teardown (when the thread-local is gone) it says yes: record nothing
/// rather than guess.
///
/// ```
/// use lens_core::export_path::{ExportScope, on_export_path};
///
/// assert!(!on_export_path());
/// let scope = ExportScope::enter();
/// assert!(on_export_path());
/// drop(scope);
/// assert!(!on_export_path());
/// ```
#[inline]
pub fn on_export_path() -> bool {
    STATE
        .try_with(|state| {
            let value = state.get();
            if value == 0 { classify(state) } else { value != CLASSIFIED }
        })
        .unwrap_or(true)
}

/// Reads the thread's name once: a [`FOREIGN_EXPORT_THREADS`] thread is on
/// the export path for its life.
#[cold]
fn classify(state: &Cell<u32>) -> bool {
    let foreign = std::thread::current()
        .name()
        .is_some_and(|name| FOREIGN_EXPORT_THREADS.iter().any(|prefix| name.starts_with(prefix)));
    state.set(if foreign { CLASSIFIED | WHOLE_THREAD } else { CLASSIFIED });
    foreign
}

/// Marks the current thread as on the export path for the rest of its life:
/// for threads that do nothing but export (lens's batch, send, shutdown and
/// runtime threads).
pub fn mark_thread() {
    let _teardown = STATE.try_with(|state| state.set(state.get() | CLASSIFIED | WHOLE_THREAD));
}

/// The current thread is on the export path while this guard lives.
#[derive(Debug)]
#[must_use = "the mark ends when the guard drops"]
pub struct ExportScope {
    /// Not `Send`: the guard must drop on the thread it marked.
    _thread: std::marker::PhantomData<*const ()>,
}

impl ExportScope {
    /// Marks the current thread until the guard drops.
    #[inline]
    pub fn enter() -> ExportScope {
        let _teardown = STATE.try_with(|state| state.set(state.get() + ONE_SCOPE));
        ExportScope { _thread: std::marker::PhantomData }
    }
}

impl Drop for ExportScope {
    #[inline]
    fn drop(&mut self) {
        let _teardown = STATE.try_with(|state| state.set(state.get().saturating_sub(ONE_SCOPE)));
    }
}

/// `future`, with the thread that polls it marked during each poll (and
/// only then): an export future polled by a tokio worker, the SDK's reader
/// or any executor marks that thread while it runs, not the thread that
/// created it.
///
/// ```
/// use std::future::Future as _;
/// use std::task::{Context, Poll, Waker};
/// use lens_core::export_path::{marked, on_export_path};
///
/// let mut future = std::pin::pin!(marked(async { on_export_path() }));
/// let polled = future.as_mut().poll(&mut Context::from_waker(Waker::noop()));
/// assert_eq!(polled, Poll::Ready(true));
/// assert!(!on_export_path());
/// ```
pub async fn marked<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(move |cx| {
        let _scope = ExportScope::enter();
        future.as_mut().poll(cx)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn on_thread(name: &str, f: impl FnOnce() -> bool + Send + 'static) -> bool {
        std::thread::Builder::new().name(name.into()).spawn(f).unwrap().join().unwrap()
    }

    #[test]
    fn only_reqwest_s_runtime_thread_is_marked_by_its_name() {
        assert!(on_thread("reqwest-internal-sync-runtime", on_export_path));
        for name in ["lens-otlp", "lens-worker", "OpenTelemetry.Metrics.PeriodicReader", "tokio-runtime-worker"] {
            assert!(!on_thread(name, on_export_path), "{name}");
        }
    }

    #[test]
    fn scopes_nest_and_a_marked_thread_stays_marked() {
        let seen = std::thread::spawn(|| {
            let outer = ExportScope::enter();
            let inner = ExportScope::enter();
            drop(inner);
            let inside_outer = on_export_path();
            drop(outer);
            (inside_outer, on_export_path())
        });
        assert_eq!(seen.join().unwrap(), (true, false));
        assert!(on_thread("user", || {
            mark_thread();
            drop(ExportScope::enter());
            on_export_path()
        }));
    }

    #[test]
    fn a_marked_future_marks_the_thread_only_while_it_is_polled() {
        let mut polls = Vec::new();
        {
            let mut future = std::pin::pin!(marked(std::future::poll_fn(|_| {
                polls.push(on_export_path());
                if polls.len() < 2 { Poll::Pending } else { Poll::Ready(()) }
            })));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(future.as_mut().poll(&mut cx).is_pending());
            assert!(!on_export_path(), "between polls");
            assert!(future.as_mut().poll(&mut cx).is_ready());
            assert!(!on_export_path());
        }
        assert_eq!(polls, [true, true]);
    }
}
