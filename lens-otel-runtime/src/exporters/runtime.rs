//! The private tokio runtime of the gRPC exporters.
//!
//! tonic needs a tokio runtime for its connections and timers; lens users
//! (training scripts) have none, so lens owns one: a current-thread runtime
//! driven by one thread named `lens-otlp`. It is created only when a gRPC
//! exporter is built, shared by the exporters of one process, and stopped
//! when the last of them is dropped. A forked child never reuses its
//! parent's runtime (whose thread does not exist in the child). Its threads
//! are on lens's export path for their life ([`crate::export_path`]): tonic's
//! connection tasks run there, and their `tracing` spans are never recorded.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::Handle;

use super::ExporterError;

/// The `lens-otlp` runtime: one thread driving a current-thread tokio
/// runtime. Dropping the last reference stops the thread.
///
/// Exports of the gRPC exporters enter it by themselves; [`OtlpRuntime::handle`]
/// is there for code that needs to run its own futures in it (from a
/// thread that is not a tokio worker, `handle().block_on(future)` works
/// because the `lens-otlp` thread drives the I/O and timers).
#[derive(Debug)]
pub struct OtlpRuntime {
    handle: Handle,
    pid: u32,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

static SHARED: Mutex<Weak<OtlpRuntime>> = Mutex::new(Weak::new());

impl OtlpRuntime {
    /// The runtime shared by this process's gRPC exporters, started on first
    /// use (or again after every exporter using it was dropped, or in a
    /// forked child).
    pub fn shared() -> Result<Arc<OtlpRuntime>, ExporterError> {
        let mut slot = SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(runtime) = slot.upgrade()
            && runtime.pid == std::process::id()
        {
            return Ok(runtime);
        }
        let runtime = Arc::new(OtlpRuntime::start()?);
        *slot = Arc::downgrade(&runtime);
        Ok(runtime)
    }

    fn start() -> Result<OtlpRuntime, ExporterError> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("lens-otlp".into())
            .spawn(move || {
                crate::export_path::mark_thread();
                // Its blocking pool's threads (DNS lookups) are marked too.
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .thread_name("lens-otlp")
                    .on_thread_start(crate::export_path::mark_thread)
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = handle_tx.send(Err(error.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(async {
                    let _ = stop_rx.await;
                });
                runtime.shutdown_timeout(Duration::from_millis(200));
            })
            .map_err(|error| ExporterError::Runtime { reason: error.to_string() })?;
        let handle = handle_rx
            .recv()
            .map_err(|_| ExporterError::Runtime { reason: "the runtime thread ended before starting".into() })?
            .map_err(|reason| ExporterError::Runtime { reason })?;
        Ok(OtlpRuntime { handle, pid: std::process::id(), stop: Mutex::new(Some(stop_tx)) })
    }

    /// The runtime's handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for OtlpRuntime {
    fn drop(&mut self) {
        let stop = self.stop.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
    }
}

/// Polls a future with the runtime entered, so that tonic finds its
/// reactor and timers whatever executor polls the export, and with the
/// polling thread on the export path ([`crate::export_path`]) meanwhile.
pub(crate) struct InRuntime<'a, T> {
    handle: Option<Handle>,
    future: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
}

impl<'a, T> InRuntime<'a, T> {
    pub(crate) fn new(runtime: Option<&Arc<OtlpRuntime>>, future: impl Future<Output = T> + Send + 'a) -> Self {
        InRuntime { handle: runtime.map(|runtime| runtime.handle.clone()), future: Box::pin(future) }
    }
}

impl<T> Future for InRuntime<'_, T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        let _export_path = crate::export_path::ExportScope::enter();
        let _entered = this.handle.as_ref().map(Handle::enter);
        this.future.as_mut().poll(cx)
    }
}
