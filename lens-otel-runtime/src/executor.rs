//! The one small executor lens uses to run an exporter's future on an
//! ordinary thread: poll, park until woken, poll again, optionally giving up
//! at a deadline.
//!
//! The SDK's exporter traits return plain futures. The batch span processor
//! ([`super::batch`]) polls each export on its own thread with a deadline, and
//! callers of an exporter directly (tests, tools) use [`block_on`]; both are
//! re-exported from [`super::exporters`]. Only `std` is used: no async
//! runtime is needed, and gRPC exports enter the `lens-otlp` runtime by
//! themselves. Never call these on a tokio worker thread.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

/// Runs a future to completion on the current thread, parking between polls.
///
/// A minimal executor for exports (the SDK's own processors do the same with
/// `futures_executor::block_on`). Call it on an ordinary thread, never on a
/// tokio worker thread.
///
/// ```
/// assert_eq!(lens_otel_runtime::exporters::block_on(async { 1 + 1 }), 2);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

/// Like [`block_on`], but gives up at `deadline` and returns `None` (the
/// future is dropped, which cancels an export in flight). The future is
/// always polled at least once.
///
/// ```
/// use std::time::{Duration, Instant};
/// let never = std::future::pending::<()>();
/// let deadline = Instant::now() + Duration::from_millis(10);
/// assert_eq!(lens_otel_runtime::exporters::block_on_until(never, deadline), None);
/// ```
pub fn block_on_until<F: Future>(future: F, deadline: Instant) -> Option<F::Output> {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Some(output);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::park_timeout(deadline - now);
    }
}

/// Wakes the thread parked in [`block_on`] or [`block_on_until`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn block_on_until_gives_up_at_the_deadline() {
        let started = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(block_on_until(never, started + Duration::from_millis(50)), None);
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(block_on_until(async { 7 }, started), Some(7));
    }

    #[test]
    fn block_on_is_woken_by_another_thread() {
        let (sender, receiver) = std::sync::mpsc::channel::<Waker>();
        let waker_thread = thread::spawn(move || {
            let waker = receiver.recv_timeout(Duration::from_secs(5)).expect("the future registers a waker");
            waker.wake();
        });
        let mut polled = 0;
        let value = block_on(std::future::poll_fn(|cx| {
            polled += 1;
            if polled == 1 {
                sender.send(cx.waker().clone()).expect("the waker thread is alive");
                Poll::Pending
            } else {
                Poll::Ready(polled)
            }
        }));
        assert_eq!(value, 2);
        waker_thread.join().expect("the waker thread ends");
    }
}
