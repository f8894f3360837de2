//! Phase markers: where each rank spends its iterations, at the cost of a
//! clock read and a few relaxed stores per boundary.
//!
//! The training loop marks phase boundaries ([`Phase`]: `data`, `forward`,
//! `backward`, `optimizer`, the three waits `dp_wait`, `pp_wait`, `tp_wait`,
//! and `checkpoint`, `eval`) whatever the span groups, whenever telemetry is
//! enabled. A [`Phases`] handle accumulates, per phase, the time spent since
//! the clock started ([`Phases::totals`], cumulative: never reset, so that
//! the per-rank counters of [`crate::rank_metrics`] lose no interval) and
//! hands out the totals of a log interval too ([`Phases::take_interval`],
//! the difference since the last call). Time between marked phases
//! (reporting, logging) is [`Phase::Other`], which is kept but not exported.
//!
//! This [`Phase`] is lens-training's one phase model: the event API
//! ([`crate::events`]) marks `checkpoint` and `eval` for its checkpoint and
//! evaluation calls, and the goodput accountant has buckets, not phases.
//!
//! # Threads
//!
//! The training thread is the only writer. Another thread (a hang watchdog)
//! reads [`Phases::snapshot`]: the current phase, how long it has been in it,
//! the running and the last completed iteration and the last step time, all
//! from relaxed atomics, lock-free. [`Phases`] is a cheap `Clone` (an `Arc`)
//! for that purpose.
//!
//! # Cost
//!
//! [`Phases::mark`] is one `Instant::now()` and relaxed loads and stores (no
//! read-modify-write: there is one writer). A disabled handle
//! ([`Phases::disabled`], telemetry off) does nothing but test an `Option`;
//! without the `otel` feature the handle is zero-sized and every method an
//! inline no-op.
//!
//! ```
//! use lens_training::phases::{Phase, Phases};
//!
//! let phases = Phases::new(true);
//! phases.mark(Phase::Forward);
//! {
//!     let _wait = phases.enter(Phase::TpWait); // back to `forward` when dropped
//! }
//! phases.mark(Phase::Optimizer);
//! phases.end_iteration(1, std::time::Duration::from_millis(5));
//! let interval = phases.take_interval();
//! // With the facade's `otel` off the clock records nothing.
//! assert_eq!(interval.iterations, u64::from(phases.is_enabled()));
//! ```

#[cfg(lens_otel)]
use std::sync::Arc;
#[cfg(lens_otel)]
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::time::Duration;
#[cfg(lens_otel)]
use std::time::Instant;

/// A phase of a training iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Loading or generating the batch.
    Data = 0,
    /// Forward compute.
    Forward = 1,
    /// Backward compute.
    Backward = 2,
    /// The optimizer step.
    Optimizer = 3,
    /// Blocked in the data-parallel gradient reduction (and the loop's other
    /// collectives over the whole job).
    DpWait = 4,
    /// Blocked in a pipeline send or receive.
    PpWait = 5,
    /// Blocked in a tensor-parallel collective.
    TpWait = 6,
    /// Saving or loading a checkpoint.
    Checkpoint = 7,
    /// Evaluation.
    Eval = 8,
    /// Anything not marked (reporting, logging): kept, not exported.
    Other = 9,
}

/// The number of phases, [`Phase::Other`] included.
pub const PHASE_COUNT: usize = 10;

/// The exported phases, in the order of the metrics and the docs: every
/// phase but the last, `Other` (what no marker covers).
pub const EXPORTED_PHASES: [Phase; PHASE_COUNT - 1] = match Phase::ALL.split_first_chunk() {
    Some((exported, [Phase::Other])) => *exported,
    _ => panic!("Phase::ALL ends with Phase::Other"),
};

/// The compute phases: where a straggler's lateness comes from.
pub const COMPUTE_PHASES: [Phase; 4] = [Phase::Data, Phase::Forward, Phase::Backward, Phase::Optimizer];

/// The wait phases: a rank's wait is their sum.
pub const WAIT_PHASES: [Phase; 3] = [Phase::DpWait, Phase::PpWait, Phase::TpWait];

impl Phase {
    /// Every phase, by index.
    pub const ALL: [Phase; PHASE_COUNT] = [
        Phase::Data,
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        Phase::DpWait,
        Phase::PpWait,
        Phase::TpWait,
        Phase::Checkpoint,
        Phase::Eval,
        Phase::Other,
    ];

    /// The value of the `dl.phase` attribute.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Data => "data",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::DpWait => "dp_wait",
            Phase::PpWait => "pp_wait",
            Phase::TpWait => "tp_wait",
            Phase::Checkpoint => "checkpoint",
            Phase::Eval => "eval",
            Phase::Other => "other",
        }
    }

    /// The phase named `name` (as [`Phase::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The index of this phase in [`Phase::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Whether this is a `*_wait` phase.
    pub const fn is_wait(self) -> bool {
        matches!(self, Phase::DpWait | Phase::PpWait | Phase::TpWait)
    }

    /// Whether this is a compute phase (`data`, `forward`, `backward`, `optimizer`).
    pub const fn is_compute(self) -> bool {
        matches!(self, Phase::Data | Phase::Forward | Phase::Backward | Phase::Optimizer)
    }

    #[cfg(lens_otel)]
    fn from_index(index: u8) -> Phase {
        Phase::ALL.get(usize::from(index)).copied().unwrap_or(Phase::Other)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The per-phase totals of one log interval ([`Phases::take_interval`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IntervalPhases {
    /// Iterations completed in the interval.
    pub iterations: u64,
    /// Nanoseconds spent in each phase, indexed by [`Phase::index`].
    pub phase_ns: [u64; PHASE_COUNT],
    /// Sum of the step times of the interval's iterations, nanoseconds.
    pub step_ns: u64,
    /// The last completed iteration (absolute).
    pub last_iteration: u64,
}

impl IntervalPhases {
    /// Mean milliseconds per iteration in `phase` (0 with no iteration).
    pub fn mean_ms(&self, phase: Phase) -> f64 {
        per_iteration_ms(self.phase_ns[phase.index()], self.iterations)
    }

    /// Mean step time of the interval, milliseconds.
    pub fn mean_step_ms(&self) -> f64 {
        per_iteration_ms(self.step_ns, self.iterations)
    }
}

fn per_iteration_ms(ns: u64, iterations: u64) -> f64 {
    if iterations == 0 { 0.0 } else { ns as f64 / 1e6 / iterations as f64 }
}

/// A rank's cumulative totals since its clock started ([`Phases::totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseTotals {
    /// Iterations completed.
    pub iterations: u64,
    /// Nanoseconds spent in each phase, indexed by [`Phase::index`].
    pub phase_ns: [u64; PHASE_COUNT],
    /// Sum of the step times, nanoseconds.
    pub step_ns: u64,
}

impl PhaseTotals {
    /// What was added since `earlier` (a total never shrinks; a saturating
    /// difference all the same).
    pub fn since(&self, earlier: &PhaseTotals) -> PhaseTotals {
        let mut phase_ns = [0; PHASE_COUNT];
        for ((delta, now), then) in phase_ns.iter_mut().zip(self.phase_ns).zip(earlier.phase_ns) {
            *delta = now.saturating_sub(then);
        }
        PhaseTotals {
            iterations: self.iterations.saturating_sub(earlier.iterations),
            phase_ns,
            step_ns: self.step_ns.saturating_sub(earlier.step_ns),
        }
    }

    /// The larger of the two in each field: totals read on two threads
    /// (the training thread, the hang watchdog) may reach a recorder in
    /// either order, and what was recorded never goes back.
    pub fn max_each(&self, other: &PhaseTotals) -> PhaseTotals {
        let mut phase_ns = self.phase_ns;
        for (mine, theirs) in phase_ns.iter_mut().zip(other.phase_ns) {
            *mine = (*mine).max(theirs);
        }
        PhaseTotals {
            iterations: self.iterations.max(other.iterations),
            phase_ns,
            step_ns: self.step_ns.max(other.step_ns),
        }
    }

    /// Seconds in `phase`.
    pub fn seconds(&self, phase: Phase) -> f64 {
        self.phase_ns[phase.index()] as f64 / 1e9
    }
}

/// What another thread can read about a rank's progress ([`Phases::snapshot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseSnapshot {
    /// The phase the training thread is in.
    pub phase: Phase,
    /// How long it has been in it.
    pub in_phase: Duration,
    /// The iteration running now (the last [`Phases::begin_iteration`]).
    pub iteration: u64,
    /// The last completed iteration (0 before the first).
    pub last_completed_iteration: u64,
    /// The step time of the last completed iteration.
    pub last_step: Duration,
    /// How many iterations this process has completed (a resumed attempt's
    /// `last_completed_iteration` counts those before it too).
    pub completed_here: u64,
}

#[cfg(lens_otel)]
#[derive(Debug)]
struct PhaseState {
    epoch: Instant,
    current: AtomicU8,
    since_ns: AtomicU64,
    accumulated_ns: [AtomicU64; PHASE_COUNT],
    iteration: AtomicU64,
    completed: AtomicU64,
    last_step_ns: AtomicU64,
    /// Cumulative completed iterations and step time.
    iterations: AtomicU64,
    step_ns: AtomicU64,
    /// The totals at the last [`Phases::take_interval`] (training thread only).
    taken: std::sync::Mutex<PhaseTotals>,
}

#[cfg(lens_otel)]
impl PhaseState {
    #[inline]
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Credits the time since the last boundary to the current phase and
    /// switches to `phase`; the phase left.
    #[inline]
    fn switch(&self, phase: Phase) -> Phase {
        let now = self.now_ns();
        let previous = Phase::from_index(self.current.load(Relaxed));
        let slot = &self.accumulated_ns[previous.index()];
        slot.store(slot.load(Relaxed) + now.saturating_sub(self.since_ns.load(Relaxed)), Relaxed);
        self.since_ns.store(now, Relaxed);
        self.current.store(phase as u8, Relaxed);
        previous
    }

    /// The totals, the time in the current phase so far included; reads
    /// only (any thread).
    fn totals(&self) -> PhaseTotals {
        let mut phase_ns = [0; PHASE_COUNT];
        for (total, slot) in phase_ns.iter_mut().zip(&self.accumulated_ns) {
            *total = slot.load(Relaxed);
        }
        let current = Phase::from_index(self.current.load(Relaxed));
        let open = self.now_ns().saturating_sub(self.since_ns.load(Relaxed));
        phase_ns[current.index()] = phase_ns[current.index()].saturating_add(open);
        PhaseTotals { iterations: self.iterations.load(Relaxed), phase_ns, step_ns: self.step_ns.load(Relaxed) }
    }
}

/// One rank's phase clock: the marker API (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Phases {
    #[cfg(lens_otel)]
    state: Option<Arc<PhaseState>>,
}

/// Restores the phase that was current when it was made ([`Phases::enter`]).
#[must_use = "the phase ends when the guard is dropped"]
#[derive(Debug)]
pub struct PhaseGuard<'a> {
    #[cfg(lens_otel)]
    restore: Option<(&'a PhaseState, Phase)>,
    #[cfg(not(lens_otel))]
    _phases: std::marker::PhantomData<&'a Phases>,
}

impl Drop for PhaseGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(lens_otel)]
        if let Some((state, phase)) = self.restore {
            state.switch(phase);
        }
    }
}

impl Phases {
    /// A clock that records when `enabled` (telemetry on), starting in
    /// [`Phase::Other`]; a disabled one otherwise.
    pub fn new(enabled: bool) -> Phases {
        #[cfg(lens_otel)]
        {
            let state = enabled.then(|| {
                Arc::new(PhaseState {
                    epoch: Instant::now(),
                    current: AtomicU8::new(Phase::Other as u8),
                    since_ns: AtomicU64::new(0),
                    accumulated_ns: Default::default(),
                    iteration: AtomicU64::new(0),
                    completed: AtomicU64::new(0),
                    last_step_ns: AtomicU64::new(0),
                    iterations: AtomicU64::new(0),
                    step_ns: AtomicU64::new(0),
                    taken: std::sync::Mutex::new(PhaseTotals::default()),
                })
            });
            Phases { state }
        }
        #[cfg(not(lens_otel))]
        {
            let _ = enabled;
            Phases {}
        }
    }

    /// A clock that records nothing.
    pub const fn disabled() -> Phases {
        Phases {
            #[cfg(lens_otel)]
            state: None,
        }
    }

    /// Whether this clock records.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        #[cfg(lens_otel)]
        return self.state.is_some();
        #[cfg(not(lens_otel))]
        false
    }

    /// A phase boundary: the training thread enters `phase`.
    #[inline]
    pub fn mark(&self, phase: Phase) {
        #[cfg(lens_otel)]
        if let Some(state) = &self.state {
            state.switch(phase);
        }
        #[cfg(not(lens_otel))]
        let _ = phase;
    }

    /// Enters `phase` until the guard drops, then returns to the phase that
    /// was current (so a wait inside `forward` goes back to `forward`).
    #[inline]
    pub fn enter(&self, phase: Phase) -> PhaseGuard<'_> {
        #[cfg(lens_otel)]
        {
            let restore = self.state.as_deref().map(|state| (state, state.switch(phase)));
            PhaseGuard { restore }
        }
        #[cfg(not(lens_otel))]
        {
            let _ = phase;
            PhaseGuard { _phases: std::marker::PhantomData }
        }
    }

    /// A blocking receive: enters `wait` unless the current phase already
    /// says where the time goes (a wait phase, `checkpoint` or `eval`), so
    /// that no blocking receive of the loop is counted as compute.
    #[inline]
    pub fn enter_wait(&self, wait: Phase) -> PhaseGuard<'_> {
        #[cfg(lens_otel)]
        {
            let restore = self.state.as_deref().and_then(|state| {
                let current = Phase::from_index(state.current.load(Relaxed));
                let keep = current.is_wait() || matches!(current, Phase::Checkpoint | Phase::Eval);
                (!keep).then(|| (state, state.switch(wait)))
            });
            PhaseGuard { restore }
        }
        #[cfg(not(lens_otel))]
        {
            let _ = wait;
            PhaseGuard { _phases: std::marker::PhantomData }
        }
    }

    /// Iteration `iteration` (absolute, 0-based as the loop counts) starts.
    #[inline]
    pub fn begin_iteration(&self, iteration: u64) {
        #[cfg(lens_otel)]
        if let Some(state) = &self.state {
            state.iteration.store(iteration, Relaxed);
        }
        #[cfg(not(lens_otel))]
        let _ = iteration;
    }

    /// Iteration `completed` (absolute, 1-based) ended after `step`.
    #[inline]
    pub fn end_iteration(&self, completed: u64, step: Duration) {
        #[cfg(lens_otel)]
        if let Some(state) = &self.state {
            let step_ns = u64::try_from(step.as_nanos()).unwrap_or(u64::MAX);
            state.completed.store(completed, Relaxed);
            state.last_step_ns.store(step_ns, Relaxed);
            state.iterations.store(state.iterations.load(Relaxed) + 1, Relaxed);
            state.step_ns.store(state.step_ns.load(Relaxed) + step_ns, Relaxed);
        }
        #[cfg(not(lens_otel))]
        let _ = (completed, step);
    }

    /// The totals since the last call (training thread only), then starts a
    /// new interval. Empty when disabled. The cumulative totals
    /// ([`Phases::totals`]) are not touched.
    pub fn take_interval(&self) -> IntervalPhases {
        #[cfg(lens_otel)]
        if let Some(state) = &self.state {
            let now = state.totals();
            let mut taken = state.taken.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let delta = now.since(&taken);
            *taken = now;
            return IntervalPhases {
                iterations: delta.iterations,
                phase_ns: delta.phase_ns,
                step_ns: delta.step_ns,
                last_iteration: state.completed.load(Relaxed),
            };
        }
        IntervalPhases::default()
    }

    /// The cumulative totals since the clock started (any thread; the time
    /// in the current phase so far is credited to it). Zero when disabled.
    pub fn totals(&self) -> PhaseTotals {
        #[cfg(lens_otel)]
        if let Some(state) = &self.state {
            return state.totals();
        }
        PhaseTotals::default()
    }

    /// The rank's progress, readable from any thread without a lock;
    /// `None` when disabled.
    pub fn snapshot(&self) -> Option<PhaseSnapshot> {
        #[cfg(lens_otel)]
        if let Some(state) = &self.state {
            let now = state.now_ns();
            return Some(PhaseSnapshot {
                phase: Phase::from_index(state.current.load(Relaxed)),
                in_phase: Duration::from_nanos(now.saturating_sub(state.since_ns.load(Relaxed))),
                iteration: state.iteration.load(Relaxed),
                last_completed_iteration: state.completed.load(Relaxed),
                last_step: Duration::from_nanos(state.last_step_ns.load(Relaxed)),
                completed_here: state.iterations.load(Relaxed),
            });
        }
        None
    }
}

#[cfg(all(test, lens_otel))]
mod tests {
    use super::*;

    #[test]
    fn time_goes_to_the_phase_that_was_current_and_a_guard_restores_it() {
        let phases = Phases::new(true);
        phases.mark(Phase::Forward);
        std::thread::sleep(Duration::from_millis(20));
        {
            let _wait = phases.enter(Phase::TpWait);
            assert_eq!(phases.snapshot().unwrap().phase, Phase::TpWait);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(phases.snapshot().unwrap().phase, Phase::Forward);
        {
            let _nested = phases.enter_wait(Phase::DpWait);
            assert_eq!(phases.snapshot().unwrap().phase, Phase::DpWait);
            let _inner = phases.enter_wait(Phase::PpWait);
            assert_eq!(phases.snapshot().unwrap().phase, Phase::DpWait, "a wait inside a wait stays that wait");
        }
        phases.end_iteration(7, Duration::from_millis(40));
        let interval = phases.take_interval();
        assert_eq!(interval.iterations, 1);
        assert_eq!(interval.last_iteration, 7);
        assert!(interval.mean_ms(Phase::Forward) >= 19.0, "{interval:?}");
        assert!(interval.mean_ms(Phase::TpWait) >= 19.0, "{interval:?}");
        assert!((interval.mean_step_ms() - 40.0).abs() < 1e-9);
        let next = phases.take_interval();
        assert_eq!(next.iterations, 0, "taking an interval starts a new one");
        assert_eq!(next.mean_ms(Phase::Forward), 0.0);
        let totals = phases.totals();
        assert_eq!(totals.iterations, 1, "the cumulative totals survive taking an interval");
        assert!(totals.seconds(Phase::Forward) >= 0.019, "{totals:?}");
    }

    #[test]
    fn waits_inside_checkpoint_and_eval_stay_there() {
        let phases = Phases::new(true);
        phases.mark(Phase::Eval);
        let _wait = phases.enter_wait(Phase::DpWait);
        assert_eq!(phases.snapshot().unwrap().phase, Phase::Eval);
    }

    #[test]
    fn a_disabled_clock_reports_nothing() {
        let phases = Phases::new(false);
        phases.mark(Phase::Forward);
        phases.end_iteration(1, Duration::from_millis(1));
        assert!(phases.snapshot().is_none());
        assert_eq!(phases.take_interval(), IntervalPhases::default());
    }

    #[test]
    fn max_each_keeps_the_larger_of_each_field() {
        let mut earlier = PhaseTotals { iterations: 7, step_ns: 900, ..PhaseTotals::default() };
        earlier.phase_ns[Phase::Forward.index()] = 500;
        earlier.phase_ns[Phase::Backward.index()] = 40;
        let mut later = PhaseTotals { iterations: 5, step_ns: 1_000, ..PhaseTotals::default() };
        later.phase_ns[Phase::Forward.index()] = 300;
        later.phase_ns[Phase::Backward.index()] = 60;
        later.phase_ns[Phase::DpWait.index()] = 8;
        let mut expected = PhaseTotals { iterations: 7, step_ns: 1_000, ..PhaseTotals::default() };
        expected.phase_ns[Phase::Forward.index()] = 500;
        expected.phase_ns[Phase::Backward.index()] = 60;
        expected.phase_ns[Phase::DpWait.index()] = 8;
        assert_eq!(earlier.max_each(&later), expected);
        assert_eq!(later.max_each(&earlier), expected, "either order");
        assert_eq!(expected.max_each(&PhaseTotals::default()), expected, "nothing goes back");
    }

    #[test]
    fn phase_names_round_trip() {
        for phase in Phase::ALL {
            assert_eq!(Phase::from_name(phase.as_str()), Some(phase));
        }
        assert_eq!(Phase::from_name("lunch"), None);
    }
}

#[cfg(all(test, not(lens_otel)))]
mod off_tests {
    use super::*;

    /// The module docs' claim: without `otel`, what the training loop holds
    /// is zero-sized (a field leaking into the off build costs every caller).
    #[test]
    fn without_otel_the_handle_and_its_guard_are_zero_sized() {
        assert_eq!(std::mem::size_of::<Phases>(), 0);
        assert_eq!(std::mem::size_of::<PhaseGuard<'_>>(), 0);
        let phases = Phases::new(true);
        assert_eq!(std::mem::size_of_val(&phases.enter(Phase::TpWait)), 0);
    }
}
