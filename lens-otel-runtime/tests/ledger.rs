//! Properties of the batch processor's export counting (`ledger`), on
//! random event sequences that a simulated processor produces: no threads,
//! no clock, no exporter.
//!
//! - every offered span is counted exactly once: accepted, dropped because
//!   the queue was full, or refused after shutdown;
//! - every accepted span is exported, dropped or pending, and the ledger's
//!   `pending()` is what the simulation still holds (queued or in flight);
//! - the in-flight counts are the exports still running, back to zero when
//!   they have all returned; a retry only ever follows a failed attempt;
//! - after shutdown resolves what is left, nothing is pending;
//! - the admission and retry decisions on simulated time.

use std::time::{Duration, Instant};

use lens_otel_runtime::ledger::{Admission, ExportEvent, ExportLedger, Outcome, admit, retries_over};
use proptest::prelude::*;

/// A batch being exported in the simulation.
#[derive(Debug)]
struct InFlight {
    len: u64,
    failed: bool,
}

/// The simulated processor: a bounded queue, running exports, shutdown.
#[derive(Debug)]
struct Simulation {
    capacity: usize,
    queued: u64,
    running: Vec<InFlight>,
    closed: bool,
    offered: u64,
    ledger: ExportLedger,
}

impl Simulation {
    fn new(capacity: usize) -> Simulation {
        Simulation {
            capacity,
            queued: 0,
            running: Vec::new(),
            closed: false,
            offered: 0,
            ledger: ExportLedger::default(),
        }
    }

    fn held(&self) -> u64 {
        self.queued + self.running.iter().map(|b| b.len).sum::<u64>()
    }

    /// One step chosen by `op` (and `arg`), turned into the events the
    /// processor would record.
    fn step(&mut self, op: u8, arg: u8) {
        match op % 6 {
            0 | 1 => {
                self.offered += 1;
                let admission = admit(self.closed, self.held() as usize, self.capacity);
                if admission == Admission::Accepted {
                    self.queued += 1;
                }
                self.ledger.record(ExportEvent::Offered(admission));
            }
            2 if self.queued > 0 => {
                let len = 1 + u64::from(arg) % self.queued;
                self.queued -= len;
                self.running.push(InFlight { len, failed: false });
                self.ledger.record(ExportEvent::Started { len });
            }
            3 if !self.running.is_empty() => {
                let at = usize::from(arg) % self.running.len();
                self.ledger.record(ExportEvent::AttemptFailed);
                self.running[at].failed = true;
                if arg.is_multiple_of(2) {
                    self.ledger.record(ExportEvent::Retried);
                }
            }
            4 if !self.running.is_empty() => {
                let batch = self.running.remove(usize::from(arg) % self.running.len());
                let outcome = match (batch.failed, arg % 3) {
                    (false, _) | (true, 0) => Outcome::Exported,
                    (true, 1) => Outcome::Failed,
                    _ => Outcome::Abandoned,
                };
                self.ledger.record(ExportEvent::Finished { len: batch.len });
                self.ledger.record(ExportEvent::Resolved { len: batch.len, outcome });
            }
            5 => self.closed = true,
            _ => {}
        }
    }

    /// Shutdown's deadline: what is queued or running is unsent.
    fn shut_down(&mut self) {
        self.closed = true;
        if self.queued > 0 {
            self.ledger.record(ExportEvent::Resolved { len: self.queued, outcome: Outcome::Abandoned });
            self.queued = 0;
        }
        for batch in std::mem::take(&mut self.running) {
            self.ledger.record(ExportEvent::Finished { len: batch.len });
            self.ledger.record(ExportEvent::Resolved { len: batch.len, outcome: Outcome::Abandoned });
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let s = self.ledger.snapshot();
        prop_assert_eq!(s.accepted + s.dropped_queue_full + s.rejected_after_shutdown, self.offered, "{:?}", s);
        prop_assert_eq!(s.exported + s.dropped_export_failed + s.dropped_at_shutdown + s.pending(), s.accepted);
        prop_assert_eq!(s.pending(), self.held(), "{:?}", s);
        prop_assert_eq!(s.in_flight_exports, self.running.len() as u64);
        prop_assert_eq!(s.in_flight_spans, self.running.iter().map(|b| b.len).sum::<u64>());
        prop_assert!(s.retries <= s.export_errors, "{:?}", s);
        prop_assert!(self.held() <= self.capacity as u64);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_span_is_counted_once_and_ends_exported_dropped_or_pending(
        capacity in 1_usize..16,
        steps in prop::collection::vec((any::<u8>(), any::<u8>()), 0..200),
    ) {
        let mut simulation = Simulation::new(capacity);
        for (op, arg) in steps {
            simulation.step(op, arg);
            simulation.check()?;
        }
        simulation.shut_down();
        simulation.check()?;
        let s = simulation.ledger.snapshot();
        prop_assert_eq!(s.pending(), 0);
        prop_assert_eq!((s.in_flight_spans, s.in_flight_exports), (0, 0));
    }

    #[test]
    fn a_span_is_admitted_only_before_shutdown_and_below_capacity(
        closed in any::<bool>(),
        queued in 0_usize..64,
        capacity in 0_usize..64,
    ) {
        let admission = admit(closed, queued, capacity);
        let expected = if closed {
            Admission::AfterShutdown
        } else if queued >= capacity {
            Admission::QueueFull
        } else {
            Admission::Accepted
        };
        prop_assert_eq!(admission, expected);
    }

    #[test]
    fn a_failing_batch_ends_at_the_earlier_of_its_window_and_shutdown(
        window_ms in 0_u64..10_000,
        deadline_ms in prop::option::of(0_u64..10_000),
        at_ms in 0_u64..12_000,
    ) {
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let over = retries_over(ms(window_ms), deadline_ms.map(ms), ms(at_ms));
        let end = deadline_ms.map_or(window_ms, |deadline| deadline.min(window_ms));
        if at_ms < end {
            prop_assert_eq!(over, None);
        } else if deadline_ms.is_some_and(|deadline| deadline < window_ms) {
            prop_assert_eq!(over, Some(Outcome::Abandoned));
        } else {
            prop_assert_eq!(over, Some(Outcome::Failed));
        }
    }
}

#[test]
fn each_event_moves_the_counters_the_report_names() {
    let mut ledger = ExportLedger::default();
    ledger.record(ExportEvent::Offered(Admission::Accepted));
    ledger.record(ExportEvent::Offered(Admission::Accepted));
    ledger.record(ExportEvent::Offered(Admission::QueueFull));
    ledger.record(ExportEvent::Started { len: 2 });
    ledger.record(ExportEvent::AttemptFailed);
    ledger.record(ExportEvent::Retried);
    let running = ledger.snapshot();
    assert_eq!((running.in_flight_spans, running.in_flight_exports, running.pending()), (2, 1, 2));
    ledger.record(ExportEvent::Finished { len: 2 });
    ledger.record(ExportEvent::Resolved { len: 2, outcome: Outcome::Exported });
    ledger.record(ExportEvent::Offered(Admission::AfterShutdown));
    let s = ledger.snapshot();
    assert_eq!(
        (s.accepted, s.exported, s.dropped_queue_full, s.rejected_after_shutdown, s.export_errors, s.retries),
        (2, 2, 1, 1, 1, 1)
    );
    assert_eq!((s.in_flight_spans, s.in_flight_exports, s.pending(), s.dropped()), (0, 0, 0, 1));
}

#[test]
fn spans_offered_together_count_as_each_offered_alone() {
    let mut together = ExportLedger::default();
    together.record(ExportEvent::OfferedAll { admission: Admission::Accepted, len: 3 });
    together.record(ExportEvent::OfferedAll { admission: Admission::QueueFull, len: 2 });
    together.record(ExportEvent::OfferedAll { admission: Admission::AfterShutdown, len: 0 });
    let mut alone = ExportLedger::default();
    for admission in [Admission::Accepted, Admission::Accepted, Admission::Accepted] {
        alone.record(ExportEvent::Offered(admission));
    }
    alone.record(ExportEvent::Offered(Admission::QueueFull));
    alone.record(ExportEvent::Offered(Admission::QueueFull));
    assert_eq!(together.snapshot(), alone.snapshot());
    let s = together.snapshot();
    assert_eq!((s.accepted, s.dropped_queue_full, s.rejected_after_shutdown), (3, 2, 0));
}
