//! The hang watchdog (docs/ranks.md): a thread per rank that says
//! which rank is stuck, where, and leaves the evidence behind before the job
//! is killed.
//!
//! It reads the rank's phase clock ([`Phases::snapshot`], relaxed atomics,
//! lock-free) every tick (a quarter of the timeout, at most 1 s) and fires
//! when no iteration has completed for the timeout
//! (`<PREFIX>_HANG_TIMEOUT_S`, [`HangTimeout`]): `auto` is ten times the
//! median step time of the recent iterations, at least [`AUTO_FLOOR`],
//! armed once [`AUTO_ARM_ITERATIONS`] iterations have completed; an explicit
//! value arms at the first iteration; `0` turns the watchdog off. Time spent
//! in `checkpoint` or `eval` does not count.
//!
//! When it fires, once per hang:
//!
//! - one line on the rank's standard error:
//!   `rank R: no iteration completed for T s; in phase P at iteration N; open spans: a > b > c`
//!   (the spans only where the rank records spans);
//! - [`HANG_SUSPECTED`] is 1 (it is 0 once the watchdog is armed, and again
//!   after a recovery), with the rank attributes only, on ranks that export
//!   metrics;
//! - on ranks that record spans, copies of the spans still open, marked
//!   `nemo.span.open`, with fresh span ids and a link each to their original,
//!   ended now, the innermost with the event [`HANG_EVENT`] (phase,
//!   iteration, seconds stalled); the originals end as usual;
//! - a forced flush, bounded by the shutdown timeout, so that the evidence
//!   leaves the process even if it is killed next.
//!
//! When an iteration completes after that, the rank prints that it
//! recovered and the gauge goes back to 0; a later hang fires again.
//!
//! # Cost
//!
//! Nothing on the training thread: the watchdog only reads the phase clock.
//! It sleeps on its own condition variable, which only [`HangWatchdog::stop`]
//! touches. The open-span copies take the open-span closer's lock for the
//! time of a copy of a few spans, once per hang. Without the `otel` feature
//! no thread is started.
//!
//! The decision is [`HangRule`], a pure function of snapshots and instants
//! (tested with injected clocks).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use lens_fallbacks::config::HangTimeout;
//! use lens_training::phases::{Phase, PhaseSnapshot};
//! use lens_training::watchdog::{HangRule, Verdict};
//!
//! let start = Instant::now();
//! let mut rule = HangRule::new(HangTimeout::After(Duration::from_secs(2)));
//! let at = |completed, phase| PhaseSnapshot {
//!     phase,
//!     in_phase: Duration::ZERO,
//!     iteration: completed,
//!     last_completed_iteration: completed,
//!     last_step: Duration::from_millis(10),
//!     completed_here: completed,
//! };
//! assert_eq!(rule.observe(&at(1, Phase::Forward), start), Verdict::Armed);
//! let later = start + Duration::from_secs(3);
//! assert!(matches!(rule.observe(&at(1, Phase::Backward), later), Verdict::Fire { .. }));
//! assert!(matches!(rule.observe(&at(2, Phase::Data), later), Verdict::Recovered { .. }));
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use lens_fallbacks::config::HangTimeout;

use crate::phases::{Phase, PhaseSnapshot, Phases};
pub use crate::rank_metrics::HANG_SUSPECTED;
use crate::rank_metrics::RankCoordinates;

/// The event on the innermost open-span copy: the gauge's name,
/// `dl.training.hang_suspected`.
pub const HANG_EVENT: &str = crate::names::HANG_SUSPECTED.name;
/// The event's attribute: the phase the rank is stuck in (`dl.phase`).
pub const HANG_PHASE_ATTRIBUTE: &str = crate::names::PHASE_ATTRIBUTE;
/// The event's attribute: the iteration running (1-based, as logged).
pub const HANG_ITERATION_ATTRIBUTE: &str = crate::names::ITERATION_ATTRIBUTE;
/// The event's attribute: seconds without a completed iteration.
pub const HANG_STALLED_ATTRIBUTE: &str = crate::names::HANG_STALLED_ATTRIBUTE;

/// The `auto` timeout's floor.
pub const AUTO_FLOOR: Duration = Duration::from_secs(60);
/// The `auto` timeout's multiple of the median step time.
pub const AUTO_STEP_MULTIPLE: u32 = 10;
/// Completed iterations before the `auto` timeout arms.
pub const AUTO_ARM_ITERATIONS: u64 = 5;
/// How many recent step times the median is taken over.
const RECENT_STEPS: usize = 32;
/// The longest tick.
const MAX_TICK: Duration = Duration::from_secs(1);

/// What one observation concluded ([`HangRule::observe`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing to do.
    Quiet,
    /// The watchdog just armed (record the gauge at 0).
    Armed,
    /// A hang is suspected now: no iteration completed for `stalled`.
    Fire {
        /// How long since the last completed iteration (pauses excluded).
        stalled: Duration,
    },
    /// An iteration completed while a hang was suspected.
    Recovered {
        /// How long the rank was stalled.
        stalled: Duration,
    },
}

/// The watchdog's decision, from snapshots and instants only.
#[derive(Clone, Debug)]
pub struct HangRule {
    timeout: HangTimeout,
    recent: VecDeque<Duration>,
    last_completed: u64,
    completions: u64,
    since: Option<Instant>,
    armed: bool,
    suspected: bool,
}

/// `timeout`, with a zero duration as [`HangTimeout::Off`].
fn effective(timeout: HangTimeout) -> HangTimeout {
    match timeout {
        HangTimeout::After(duration) if duration.is_zero() => HangTimeout::Off,
        other => other,
    }
}

impl HangRule {
    /// A rule for `timeout`, before any iteration. A zero duration is off,
    /// as `0` is for `<PREFIX>_HANG_TIMEOUT_S` (it would fire every tick).
    pub fn new(timeout: HangTimeout) -> HangRule {
        HangRule {
            timeout: effective(timeout),
            recent: VecDeque::with_capacity(RECENT_STEPS),
            last_completed: 0,
            completions: 0,
            since: None,
            armed: false,
            suspected: false,
        }
    }

    /// The timeout in force now; `None` while not armed (or off).
    pub fn timeout(&self) -> Option<Duration> {
        match self.timeout {
            HangTimeout::Off => None,
            HangTimeout::After(timeout) => (self.completions >= 1).then_some(timeout),
            HangTimeout::Auto => {
                if self.completions < AUTO_ARM_ITERATIONS || self.recent.is_empty() {
                    return None;
                }
                let mut steps: Vec<Duration> = self.recent.iter().copied().collect();
                steps.sort_unstable();
                let median = steps[steps.len() / 2];
                Some(median.saturating_mul(AUTO_STEP_MULTIPLE).max(AUTO_FLOOR))
            }
        }
    }

    /// How long to sleep between observations.
    pub fn tick(&self) -> Duration {
        match self.timeout {
            HangTimeout::After(timeout) => (timeout / 4).clamp(Duration::from_millis(10), MAX_TICK),
            _ => MAX_TICK,
        }
    }

    /// Whether a hang is suspected now.
    pub fn is_suspected(&self) -> bool {
        self.suspected
    }

    /// One look at the rank at `now`.
    pub fn observe(&mut self, snapshot: &PhaseSnapshot, now: Instant) -> Verdict {
        if matches!(self.timeout, HangTimeout::Off) {
            return Verdict::Quiet;
        }
        let completed = snapshot.last_completed_iteration;
        if completed != self.last_completed {
            // A resumed attempt's first iteration number says nothing of how
            // many it completed: the process's own count does (a snapshot
            // without it, 0, counts the completions seen). Armed at a first
            // look, auto's timeout comes from one step time; its floor (60 s)
            // keeps that from being short.
            let delta = if self.last_completed == 0 { 1 } else { completed.saturating_sub(self.last_completed).max(1) };
            self.completions = self.completions.saturating_add(delta).max(snapshot.completed_here);
            self.last_completed = completed;
            if self.recent.len() == RECENT_STEPS {
                self.recent.pop_front();
            }
            self.recent.push_back(snapshot.last_step);
            let stalled = self.since.map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
            self.since = Some(now);
            if self.suspected {
                self.suspected = false;
                return Verdict::Recovered { stalled };
            }
            if !self.armed && self.timeout().is_some() {
                self.armed = true;
                return Verdict::Armed;
            }
            return Verdict::Quiet;
        }
        if matches!(snapshot.phase, Phase::Checkpoint | Phase::Eval) {
            // Paused: time in checkpoint and evaluation does not count.
            if self.since.is_some() {
                self.since = Some(now);
            }
            return Verdict::Quiet;
        }
        let (Some(timeout), Some(since)) = (self.timeout(), self.since) else {
            return Verdict::Quiet;
        };
        let stalled = now.saturating_duration_since(since);
        if !self.suspected && stalled >= timeout {
            self.suspected = true;
            return Verdict::Fire { stalled };
        }
        Verdict::Quiet
    }
}

/// The line a firing watchdog prints (without the newline).
pub fn hang_line(rank: u32, stalled: Duration, snapshot: &PhaseSnapshot, open_spans: &[String]) -> String {
    let mut line = format!(
        "rank {rank}: no iteration completed for {:.1} s; in phase {} at iteration {}",
        stalled.as_secs_f64(),
        snapshot.phase,
        snapshot.iteration.saturating_add(1)
    );
    if !open_spans.is_empty() {
        line.push_str("; open spans: ");
        line.push_str(&open_spans.join(" > "));
    }
    line
}

/// The line a rank prints when an iteration completes after a hang was
/// suspected: `iteration` is the one that was stuck when the watchdog fired
/// (later ones may have completed before its next look), `stalled` how long
/// no iteration had completed.
pub fn recovered_line(rank: u32, iteration: u64, stalled: Duration) -> String {
    format!("rank {rank}: iteration {iteration} completed after {:.1} s; hang suspicion cleared", stalled.as_secs_f64())
}

/// A running watchdog; [`stop`](Self::stop) (or drop) ends its thread.
/// Inert (no thread) with telemetry off, the timeout `0`, or without the
/// `otel` feature.
#[derive(Debug, Default)]
pub struct HangWatchdog {
    #[cfg(lens_otel)]
    running: Option<running::Running>,
}

impl HangWatchdog {
    /// A watchdog that watches nothing.
    pub const fn inert() -> HangWatchdog {
        HangWatchdog {
            #[cfg(lens_otel)]
            running: None,
        }
    }

    /// Starts the watchdog of the rank at `coordinates` on `phases` (when
    /// it records), reporting through `telemetry` while it is alive.
    /// `flush_timeout` bounds the forced flush.
    pub fn start(
        telemetry: std::sync::Weak<lens_fallbacks::Telemetry>,
        timeout: HangTimeout,
        phases: &Phases,
        coordinates: RankCoordinates,
        flush_timeout: Duration,
    ) -> HangWatchdog {
        HangWatchdog::start_with_counters(telemetry, timeout, phases, coordinates, flush_timeout, None)
    }

    /// [`start`](Self::start), bringing `counters` (the rank's per-rank
    /// metrics) up to date before the forced flush when it fires: the
    /// phase time leading into the hang is exported with the hang, not
    /// only at the next log interval (which a hung rank never reaches).
    pub(crate) fn start_with_counters(
        telemetry: std::sync::Weak<lens_fallbacks::Telemetry>,
        timeout: HangTimeout,
        phases: &Phases,
        coordinates: RankCoordinates,
        flush_timeout: Duration,
        counters: Option<std::sync::Arc<crate::rank_metrics::RankMetrics>>,
    ) -> HangWatchdog {
        #[cfg(lens_otel)]
        {
            if matches!(effective(timeout), HangTimeout::Off) || !phases.is_enabled() {
                return HangWatchdog::inert();
            }
            let running =
                running::Running::spawn(telemetry, timeout, phases.clone(), coordinates, flush_timeout, counters);
            HangWatchdog { running }
        }
        #[cfg(not(lens_otel))]
        {
            let _ = (telemetry, timeout, phases, coordinates, flush_timeout, counters);
            HangWatchdog {}
        }
    }

    /// Whether a thread watches.
    pub fn is_running(&self) -> bool {
        #[cfg(lens_otel)]
        return self.running.is_some();
        #[cfg(not(lens_otel))]
        false
    }

    /// Stops the thread and waits for it (at most a few seconds: a flush in
    /// progress is bounded by its own timeout). Idempotent.
    pub fn stop(&mut self) {
        #[cfg(lens_otel)]
        if let Some(running) = self.running.take() {
            running.stop();
        }
    }
}

impl Drop for HangWatchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(lens_otel)]
mod running {
    use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use lens_fallbacks::{KeyValue, Telemetry};

    use super::{
        HANG_EVENT, HANG_ITERATION_ATTRIBUTE, HANG_PHASE_ATTRIBUTE, HANG_STALLED_ATTRIBUTE, HANG_SUSPECTED, HangRule,
        HangTimeout, Verdict, hang_line, recovered_line,
    };
    use crate::phases::Phases;
    use crate::rank_metrics::RankCoordinates;

    /// How long [`Running::stop`] waits for the thread beyond a flush.
    const STOP_GRACE: Duration = Duration::from_secs(2);

    #[derive(Debug, Default)]
    struct Flags {
        stop: bool,
        finished: bool,
    }

    #[derive(Debug, Default)]
    struct Shared {
        flags: Mutex<Flags>,
        wake: Condvar,
    }

    #[derive(Debug)]
    pub(super) struct Running {
        shared: Arc<Shared>,
        thread: Option<JoinHandle<()>>,
        bound: Duration,
    }

    impl Running {
        pub(super) fn spawn(
            telemetry: Weak<Telemetry>,
            timeout: HangTimeout,
            phases: Phases,
            coordinates: RankCoordinates,
            flush_timeout: Duration,
            counters: Option<Arc<crate::rank_metrics::RankMetrics>>,
        ) -> Option<Running> {
            let shared = Arc::new(Shared::default());
            let gauge = telemetry
                .upgrade()
                .map(|t| t.meter().u64_gauge(HANG_SUSPECTED.name).with_description(HANG_SUSPECTED.description).build());
            let attributes = crate::rank_metrics::rank_attributes(coordinates);
            let thread_shared = Arc::clone(&shared);
            let thread = std::thread::Builder::new()
                .name(format!("hang-watchdog-{}", coordinates.rank))
                .spawn(move || {
                    let watch =
                        Watch { telemetry, phases, rank: coordinates.rank, gauge, attributes, flush_timeout, counters };
                    watch.run(&thread_shared, HangRule::new(timeout));
                    let mut flags = thread_shared.flags.lock().unwrap_or_else(PoisonError::into_inner);
                    flags.finished = true;
                    thread_shared.wake.notify_all();
                })
                .ok()?;
            Some(Running { shared, thread: Some(thread), bound: flush_timeout + STOP_GRACE })
        }

        pub(super) fn stop(mut self) {
            let deadline = Instant::now() + self.bound;
            let mut flags = self.shared.flags.lock().unwrap_or_else(PoisonError::into_inner);
            flags.stop = true;
            self.shared.wake.notify_all();
            while !flags.finished {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    // Still flushing to a hung collector: leave it behind.
                    return;
                }
                flags = self.shared.wake.wait_timeout(flags, left).unwrap_or_else(PoisonError::into_inner).0;
            }
            drop(flags);
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// Writes `line` on standard error in one `write` call, so that the
    /// lines of ranks sharing one stderr never interleave mid-line.
    fn say(line: &str) {
        use std::io::Write as _;
        let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
    }

    struct Watch {
        telemetry: Weak<Telemetry>,
        phases: Phases,
        rank: u32,
        gauge: Option<lens_fallbacks::Gauge<u64>>,
        attributes: Vec<KeyValue>,
        flush_timeout: Duration,
        /// The rank's per-rank counters, brought up to date when it fires.
        counters: Option<Arc<crate::rank_metrics::RankMetrics>>,
    }

    impl Watch {
        fn run(&self, shared: &Shared, mut rule: HangRule) {
            // The iteration that was running when the watchdog fired: the
            // recovery names it, not whatever completed by the next look.
            let mut stuck_iteration = 0;
            loop {
                {
                    let flags = shared.flags.lock().unwrap_or_else(PoisonError::into_inner);
                    let (flags, _) = shared
                        .wake
                        .wait_timeout_while(flags, rule.tick(), |f| !f.stop)
                        .unwrap_or_else(PoisonError::into_inner);
                    if flags.stop {
                        return;
                    }
                }
                let Some(snapshot) = self.phases.snapshot() else { return };
                match rule.observe(&snapshot, Instant::now()) {
                    Verdict::Quiet => {}
                    Verdict::Armed => self.record(0),
                    Verdict::Fire { stalled } => {
                        let telemetry = self.telemetry.upgrade();
                        let open = match &telemetry {
                            Some(t) if t.records_spans() => t.export_open_span_copies(
                                HANG_EVENT,
                                [
                                    KeyValue::new(HANG_PHASE_ATTRIBUTE, snapshot.phase.as_str()),
                                    KeyValue::new(
                                        HANG_ITERATION_ATTRIBUTE,
                                        i64::try_from(snapshot.iteration.saturating_add(1)).unwrap_or(i64::MAX),
                                    ),
                                    KeyValue::new(HANG_STALLED_ATTRIBUTE, stalled.as_secs_f64()),
                                ],
                            ),
                            _ => Vec::new(),
                        };
                        self.record(1);
                        if let Some(counters) = &self.counters {
                            counters.record(&self.phases.totals());
                        }
                        stuck_iteration = snapshot.iteration.saturating_add(1);
                        say(&hang_line(self.rank, stalled, &snapshot, &open));
                        if let Some(t) = telemetry {
                            let _report = t.force_flush(self.flush_timeout);
                        }
                    }
                    Verdict::Recovered { stalled } => {
                        self.record(0);
                        say(&recovered_line(self.rank, stuck_iteration, stalled));
                    }
                }
            }
        }

        fn record(&self, value: u64) {
            if let Some(gauge) = &self.gauge {
                gauge.record(value, &self.attributes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(completed: u64, phase: Phase, step_ms: u64) -> PhaseSnapshot {
        PhaseSnapshot {
            phase,
            in_phase: Duration::ZERO,
            iteration: completed,
            last_completed_iteration: completed,
            last_step: Duration::from_millis(step_ms),
            completed_here: 0,
        }
    }

    #[test]
    fn auto_arms_after_five_iterations_at_ten_median_steps_but_at_least_a_minute() {
        let t0 = Instant::now();
        let mut rule = HangRule::new(HangTimeout::Auto);
        for i in 1..=4 {
            assert_eq!(rule.observe(&at(i, Phase::Forward, 100), t0), Verdict::Quiet);
            assert_eq!(rule.timeout(), None, "not armed after {i} iterations");
        }
        assert_eq!(rule.observe(&at(5, Phase::Forward, 100), t0), Verdict::Armed);
        assert_eq!(rule.timeout(), Some(AUTO_FLOOR), "10 x 100 ms is under the floor");
        let stuck = at(5, Phase::Backward, 100);
        assert_eq!(rule.observe(&stuck, t0 + Duration::from_secs(59)), Verdict::Quiet);
        assert_eq!(rule.observe(&stuck, t0 + Duration::from_secs(60)), Verdict::Fire { stalled: AUTO_FLOOR });

        // Slow steps: ten times the median, an outlier ignored.
        let mut slow = HangRule::new(HangTimeout::Auto);
        for (i, ms) in [(1, 9_000), (2, 9_000), (3, 500_000), (4, 9_000), (5, 9_000)] {
            slow.observe(&at(i, Phase::Forward, ms), t0);
        }
        assert_eq!(slow.timeout(), Some(Duration::from_secs(90)));
    }

    /// A short attempt resumed at iteration 200 that completed 20 iterations
    /// by the first look is armed at that look (the gauge is exported from
    /// then on), not after a second look a tick later; the iteration number
    /// alone (no count) still arms only after five completions seen.
    #[test]
    fn auto_arms_at_the_first_look_when_five_iterations_completed_before_it() {
        let t0 = Instant::now();
        let mut rule = HangRule::new(HangTimeout::Auto);
        let resumed = PhaseSnapshot { completed_here: 20, ..at(220, Phase::Forward, 100) };
        assert_eq!(rule.observe(&resumed, t0), Verdict::Armed);
        assert_eq!(rule.timeout(), Some(AUTO_FLOOR));
        let mut uncounted = HangRule::new(HangTimeout::Auto);
        assert_eq!(uncounted.observe(&at(220, Phase::Forward, 100), t0), Verdict::Quiet);
        assert_eq!(uncounted.timeout(), None);
    }

    #[test]
    fn an_explicit_timeout_arms_at_the_first_iteration_and_zero_is_off() {
        let t0 = Instant::now();
        let mut rule = HangRule::new(HangTimeout::After(Duration::from_secs(2)));
        assert_eq!(rule.observe(&at(0, Phase::Data, 0), t0 + Duration::from_secs(100)), Verdict::Quiet, "not armed");
        assert_eq!(rule.observe(&at(1, Phase::Data, 10), t0), Verdict::Armed);
        assert_eq!(rule.tick(), Duration::from_millis(500));
        assert!(matches!(rule.observe(&at(1, Phase::Forward, 10), t0 + Duration::from_secs(2)), Verdict::Fire { .. }));

        // Off, and a zero duration (given in code) is off too: it would
        // fire at every tick.
        for off in [HangTimeout::Off, HangTimeout::After(Duration::ZERO)] {
            let mut off = HangRule::new(off);
            off.observe(&at(1, Phase::Data, 10), t0);
            assert_eq!(off.observe(&at(1, Phase::Data, 10), t0 + Duration::from_secs(1_000_000)), Verdict::Quiet);
            assert_eq!(off.timeout(), None);
        }
    }

    #[test]
    fn checkpoint_and_eval_pause_it_and_it_fires_once_per_hang_until_recovery() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut rule = HangRule::new(HangTimeout::After(s(10)));
        rule.observe(&at(3, Phase::Optimizer, 10), t0);
        // Nine seconds of training, then a long checkpoint: no alarm.
        assert_eq!(rule.observe(&at(3, Phase::Data, 10), t0 + s(9)), Verdict::Quiet);
        assert_eq!(rule.observe(&at(3, Phase::Checkpoint, 10), t0 + s(100)), Verdict::Quiet);
        assert_eq!(rule.observe(&at(3, Phase::Eval, 10), t0 + s(200)), Verdict::Quiet);
        // The clock restarts when the pause ends.
        assert_eq!(rule.observe(&at(3, Phase::Forward, 10), t0 + s(209)), Verdict::Quiet);
        assert_eq!(rule.observe(&at(3, Phase::DpWait, 10), t0 + s(210)), Verdict::Fire { stalled: s(10) });
        assert!(rule.is_suspected());
        assert_eq!(rule.observe(&at(3, Phase::DpWait, 10), t0 + s(300)), Verdict::Quiet, "once per hang");
        assert_eq!(rule.observe(&at(4, Phase::Data, 10), t0 + s(301)), Verdict::Recovered { stalled: s(101) });
        assert!(!rule.is_suspected(), "a recovery clears the state");
        assert!(matches!(rule.observe(&at(4, Phase::Forward, 10), t0 + s(311)), Verdict::Fire { .. }), "a second hang");
    }

    #[test]
    fn the_line_names_rank_time_phase_iteration_and_the_open_spans() {
        let snapshot = at(4, Phase::Backward, 10);
        let spans = ["megatron.train".to_string(), "megatron.train.iteration".to_string()];
        assert_eq!(
            hang_line(1, Duration::from_millis(2_340), &snapshot, &spans),
            "rank 1: no iteration completed for 2.3 s; in phase backward at iteration 5; open spans: megatron.train > megatron.train.iteration"
        );
        assert_eq!(
            hang_line(0, Duration::from_secs(2), &at(4, Phase::DpWait, 10), &[]),
            "rank 0: no iteration completed for 2.0 s; in phase dp_wait at iteration 5"
        );
    }

    #[test]
    fn the_recovery_line_names_the_stuck_iteration_and_the_stall() {
        assert_eq!(
            recovered_line(2, 3, Duration::from_millis(2_540)),
            "rank 2: iteration 3 completed after 2.5 s; hang suspicion cleared"
        );
    }
}
