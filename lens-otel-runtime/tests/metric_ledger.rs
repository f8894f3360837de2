//! Properties of the metric export counting (`accounting::MetricLedger`),
//! on random sequences of what the counting exporter does (a collection
//! taken, exported, failed and kept, queued behind kept ones, resent, given
//! up) and of shutdown closing the accounting at any point: no threads, no
//! clock, no collector.
//!
//! - every collection taken ends exactly once: exported, dropped, kept, or
//!   still held by the exporter; the points follow the collections;
//! - closing (the end of shutdown, whether the exporter's own shutdown was
//!   reached or the deadline cut an export) leaves nothing kept or held:
//!   everything not exported is counted dropped, with its points;
//! - after closing nothing moves, whatever the exporter does later.

use std::collections::VecDeque;

use lens_otel_runtime::accounting::MetricLedger;
use proptest::prelude::*;

/// What the counting exporter holds in the simulation.
#[derive(Debug, Default)]
struct Simulation {
    ledger: MetricLedger,
    held: Option<u64>,
    kept: VecDeque<u64>,
    taken: (u64, u64),
    closed: bool,
}

impl Simulation {
    /// One step chosen by `op`, with `points` for a new collection.
    fn step(&mut self, op: u8, points: u64) {
        match op % 7 {
            0 if self.held.is_none() => {
                self.ledger.taken(points);
                if !self.closed {
                    self.held = Some(points);
                    self.taken.0 += 1;
                    self.taken.1 += points;
                }
            }
            1 => {
                self.ledger.exported();
                if !self.closed {
                    self.held = None;
                }
            }
            2 => {
                self.ledger.failed(true);
                if !self.closed
                    && let Some(points) = self.held.take()
                {
                    self.kept.push_back(points);
                }
            }
            3 => {
                self.ledger.failed(false);
                if !self.closed {
                    self.held = None;
                }
            }
            4 => {
                self.ledger.queued();
                if !self.closed
                    && let Some(points) = self.held.take()
                {
                    self.kept.push_back(points);
                }
            }
            5 => {
                if let Some(&oldest) = self.kept.front() {
                    self.ledger.resending();
                    if points.is_multiple_of(2) {
                        self.ledger.resent(oldest);
                    } else {
                        self.ledger.kept_dropped(oldest);
                    }
                    if !self.closed {
                        self.kept.pop_front();
                    }
                }
            }
            6 => self.close(),
            _ => {}
        }
    }

    fn close(&mut self) {
        self.ledger.close();
        self.closed = true;
        self.held = None;
        self.kept.clear();
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let s = self.ledger.snapshot();
        let held = self.held.map_or((0, 0), |points| (1, points));
        let kept = (self.kept.len() as u64, self.kept.iter().sum::<u64>());
        prop_assert_eq!(s.collections_kept, kept.0, "{:?}", s);
        prop_assert_eq!(s.exports + s.collections_dropped + kept.0 + held.0, self.taken.0, "{:?}", s);
        prop_assert_eq!(s.points_exported + s.points_dropped + kept.1 + held.1, self.taken.1, "{:?}", s);
        prop_assert!(s.points_failed <= self.taken.1, "{:?}", s);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_collection_ends_once_and_closing_drops_what_was_not_exported(
        steps in proptest::collection::vec((any::<u8>(), 0_u64..50), 0..80),
    ) {
        let mut simulation = Simulation::default();
        for (op, points) in steps {
            simulation.step(op, points);
            simulation.check()?;
        }
        let open = simulation.ledger.snapshot();
        let not_exported = simulation.taken.0 - open.exports;
        simulation.close();
        simulation.check()?;
        let closed = simulation.ledger.snapshot();
        prop_assert_eq!(closed.collections_kept, 0);
        prop_assert_eq!(closed.collections_dropped, not_exported, "{:?}", closed);
        prop_assert_eq!(closed.points_dropped + closed.points_exported, simulation.taken.1, "{:?}", closed);
    }

    #[test]
    fn after_closing_nothing_moves(
        before in proptest::collection::vec((any::<u8>(), 0_u64..50), 0..40),
        after in proptest::collection::vec((0_u8..6, 0_u64..50), 0..40),
    ) {
        let mut simulation = Simulation::default();
        for (op, points) in before {
            simulation.step(op, points);
        }
        simulation.close();
        let closed = simulation.ledger.snapshot();
        for (op, points) in after {
            match op {
                0 => simulation.ledger.taken(points),
                1 => simulation.ledger.exported(),
                2 => simulation.ledger.failed(true),
                3 => simulation.ledger.queued(),
                4 => simulation.ledger.resent(points),
                _ => simulation.ledger.kept_dropped(points),
            }
        }
        prop_assert!(simulation.ledger.is_closed());
        prop_assert_eq!(simulation.ledger.snapshot(), closed);
    }
}

#[test]
fn a_final_collection_cut_by_the_deadline_and_a_kept_one_both_count_dropped() {
    let mut ledger = MetricLedger::default();
    ledger.taken(16);
    ledger.failed(true);
    ledger.taken(17);
    ledger.close();
    let s = ledger.snapshot();
    assert_eq!((s.failed_exports, s.points_failed), (1, 16), "{s:?}");
    assert_eq!((s.collections_dropped, s.points_dropped, s.collections_kept), (2, 33, 0), "{s:?}");
}
