//! The batch processor's export counting as a pure state machine.
//!
//! Every change to the span (and log-record) counters is an
//! [`ExportEvent`]: a span offered to the queue and admitted or not, an
//! export started, an attempt that failed, a retry, an export finished, a
//! batch resolved as exported, failed or unsent at shutdown. An event's
//! [`changes`](ExportEvent::changes) say which counter moves by how much;
//! [`ExportLedger`] applies them to plain data (for tests and simulations),
//! and the processor's shared counters (`batch::SpanExportCounters`) apply
//! the very same changes with atomic adds, so the two cannot disagree. The
//! decisions the counting rests on are pure functions too: whether an
//! offered span is admitted ([`admit`]) and how a failing batch ends
//! ([`retries_over`], on simulated time).
//!
//! The properties the report promises (every offered span counted once;
//! every accepted span exported, dropped or pending; in-flight counts back
//! to zero when exports end; a retry only after a failure) are proptested
//! over random event sequences in `tests/ledger.rs`, with threads and time
//! left out, as `quinn-proto` tests its state machines apart from `quinn`.

use std::time::Instant;

use lens_core::report::SpanExportSnapshot;

/// How a batch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The exporter acknowledged it.
    Exported,
    /// It still failed when the retry window ended.
    Failed,
    /// Shutdown's deadline came first: unsent at shutdown.
    Abandoned,
}

/// What happened to a span offered to the processor's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Queued.
    Accepted,
    /// Dropped: the queue was full.
    QueueFull,
    /// Refused: shutdown had begun.
    AfterShutdown,
}

/// Whether a span offered now is queued: not after shutdown began, and not
/// when the queue (with what the worker holds) is at `capacity`.
pub fn admit(closed: bool, queued: usize, capacity: usize) -> Admission {
    if closed {
        Admission::AfterShutdown
    } else if queued >= capacity {
        Admission::QueueFull
    } else {
        Admission::Accepted
    }
}

/// How a failing batch ends if its next attempt would start at `at`: not
/// yet (`None`), failed once the retry window is over, or unsent at
/// shutdown when the shutdown deadline comes first.
pub fn retries_over(window_end: Instant, shutdown_deadline: Option<Instant>, at: Instant) -> Option<Outcome> {
    match shutdown_deadline {
        Some(deadline) if deadline < window_end => (at >= deadline).then_some(Outcome::Abandoned),
        _ => (at >= window_end).then_some(Outcome::Failed),
    }
}

/// One change to the export counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportEvent {
    /// A span was offered to the queue.
    Offered(Admission),
    /// `len` spans were offered to the queue together, each with the same
    /// admission (a thread buffer handed over: one count, not `len`).
    OfferedAll {
        /// Their admission.
        admission: Admission,
        /// How many.
        len: u64,
    },
    /// An export of `len` spans started.
    Started {
        /// Spans in the batch.
        len: u64,
    },
    /// One export attempt failed.
    AttemptFailed,
    /// A failed batch is tried again.
    Retried,
    /// The export of `len` spans returned (whatever its outcome).
    Finished {
        /// Spans in the batch.
        len: u64,
    },
    /// `len` spans are resolved with `outcome`.
    Resolved {
        /// Spans in the batch.
        len: u64,
        /// How they ended.
        outcome: Outcome,
    },
}

/// A counter of [`SpanExportSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// `accepted`.
    Accepted,
    /// `exported`.
    Exported,
    /// `dropped_queue_full`.
    DroppedQueueFull,
    /// `dropped_export_failed`.
    DroppedExportFailed,
    /// `dropped_at_shutdown`.
    DroppedAtShutdown,
    /// `export_errors`.
    ExportErrors,
    /// `retries`.
    Retries,
    /// `in_flight_spans`.
    InFlightSpans,
    /// `in_flight_exports`.
    InFlightExports,
    /// `rejected_after_shutdown`.
    RejectedAfterShutdown,
}

/// A counter moves up or down by an amount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Adds the amount.
    Add(Counter, u64),
    /// Subtracts the amount.
    Sub(Counter, u64),
}

/// The counter an offered span's admission counts in.
fn admission_counter(admission: Admission) -> Counter {
    match admission {
        Admission::Accepted => Counter::Accepted,
        Admission::QueueFull => Counter::DroppedQueueFull,
        Admission::AfterShutdown => Counter::RejectedAfterShutdown,
    }
}

impl ExportEvent {
    /// The counter changes of this event (one or two).
    pub fn changes(self) -> impl Iterator<Item = Change> {
        let (first, second) = match self {
            ExportEvent::Offered(admission) => (Change::Add(admission_counter(admission), 1), None),
            ExportEvent::OfferedAll { admission, len } => (Change::Add(admission_counter(admission), len), None),
            ExportEvent::Started { len } => {
                (Change::Add(Counter::InFlightExports, 1), Some(Change::Add(Counter::InFlightSpans, len)))
            }
            ExportEvent::AttemptFailed => (Change::Add(Counter::ExportErrors, 1), None),
            ExportEvent::Retried => (Change::Add(Counter::Retries, 1), None),
            ExportEvent::Finished { len } => {
                (Change::Sub(Counter::InFlightSpans, len), Some(Change::Sub(Counter::InFlightExports, 1)))
            }
            ExportEvent::Resolved { len, outcome: Outcome::Exported } => (Change::Add(Counter::Exported, len), None),
            ExportEvent::Resolved { len, outcome: Outcome::Failed } => {
                (Change::Add(Counter::DroppedExportFailed, len), None)
            }
            ExportEvent::Resolved { len, outcome: Outcome::Abandoned } => {
                (Change::Add(Counter::DroppedAtShutdown, len), None)
            }
        };
        std::iter::once(first).chain(second)
    }
}

/// The counters as plain data, moved by events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportLedger {
    counts: SpanExportSnapshot,
}

impl ExportLedger {
    /// Applies `event`.
    pub fn record(&mut self, event: ExportEvent) {
        for change in event.changes() {
            let (counter, add, amount) = match change {
                Change::Add(counter, amount) => (counter, true, amount),
                Change::Sub(counter, amount) => (counter, false, amount),
            };
            let slot = field(&mut self.counts, counter);
            *slot = if add { slot.saturating_add(amount) } else { slot.saturating_sub(amount) };
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> SpanExportSnapshot {
        self.counts
    }
}

/// The field of `snapshot` that `counter` names.
fn field(snapshot: &mut SpanExportSnapshot, counter: Counter) -> &mut u64 {
    match counter {
        Counter::Accepted => &mut snapshot.accepted,
        Counter::Exported => &mut snapshot.exported,
        Counter::DroppedQueueFull => &mut snapshot.dropped_queue_full,
        Counter::DroppedExportFailed => &mut snapshot.dropped_export_failed,
        Counter::DroppedAtShutdown => &mut snapshot.dropped_at_shutdown,
        Counter::ExportErrors => &mut snapshot.export_errors,
        Counter::Retries => &mut snapshot.retries,
        Counter::InFlightSpans => &mut snapshot.in_flight_spans,
        Counter::InFlightExports => &mut snapshot.in_flight_exports,
        Counter::RejectedAfterShutdown => &mut snapshot.rejected_after_shutdown,
    }
}
