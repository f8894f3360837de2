//! The event API: one call per training event, for any training loop.
//!
//! A program holds one [`Training`] per rank and announces each event once;
//! that call opens the event's span, marks the phase of
//! [`crate::phases`] and informs the goodput accountant of
//! [`crate::goodput`] together (as one `span.enter()` feeds every
//! `tracing-subscriber` layer), and the per-rank counters, the hang
//! watchdog and MFU follow from the same calls:
//!
//! | Call | Span ([`Event`]) | Phase | Goodput |
//! |---|---|---|---|
//! | [`Training::new`] | — | `other` | the attempt starts (at the launch stamp) |
//! | [`Training::checkpoint_load`] → [`LoadGuard::resumed`] | `checkpoint_load` | `checkpoint` | `checkpoint_load`; the progress record (and the dead attempt's replayed spool) continues the run; once the attempt is under way, a rollback: what followed the checkpoint is lost |
//! | [`Training::loop_started`] | `startup` (backdated) | — | startup ends |
//! | [`Training::iteration`] → [`IterationGuard`] dropped | `iteration` | `other` after it | an iteration completed; `dl.training.iterations`; progress into the spool at both ends |
//! | [`Training::phase`], [`Training::mark`], [`Training::wait`] | the phase's, where configured | that phase | — |
//! | [`Training::checkpoint_save`] → [`SaveGuard::durable`] / [`SaveGuard::failed`] / [`SaveGuard::in_flight`] | `checkpoint_save` | `checkpoint` | `checkpoint_save`; kept once durable |
//! | [`Training::checkpoint_finalize`] → [`FinalizeGuard::durable`] | `checkpoint_finalize` | `checkpoint` | `checkpoint_save`; kept |
//! | [`Training::evaluation`] | `evaluation` | `eval` | `evaluation` |
//! | [`Training::log_interval`] | — | — | gauges, MFU, progress record |
//! | [`Training::finish`] | `shutdown` | — | the normal end: final goodput, record |
//!
//! Span names and groups are the program's: [`SpanNames`] maps each event
//! (and each phase, where the program wants a span per phase) to a group
//! and a name, with generic defaults ([`SpanNames::generic`]: `dl.training.*`
//! names in lens's base groups); a framework with a taxonomy of its own
//! implements [`EventSpans`] (Megatron's `MegatronEventSpans` keeps its
//! `megatron.*` span tree). Every span opened for an event carries
//! [`EVENT_ATTRIBUTE`] (`dl.training.event`) with the event's name, so that
//! `lens analyze` ([`crate::goodput_view`]) recognizes it whatever its name.
//!
//! Every call is cheap and never fails: with telemetry off (or the facade's
//! `otel` compiled out) a `Training` records nothing, and each call costs a
//! branch. The guards are RAII: a dropped [`IterationGuard`] completes its
//! iteration (unless dropped by a panic), a dropped [`SaveGuard`] or
//! [`FinalizeGuard`] without a verdict is a failed save (nothing kept).
//!
//! ```
//! use std::sync::Arc;
//! use lens_training::events::{Training, TrainingOptions};
//! use lens_training::phases::Phase;
//!
//! # fn main() -> Result<(), lens_fallbacks::SetupError> {
//! let telemetry = Arc::new(lens_fallbacks::Telemetry::builder("MYJOB_OTEL").setup()?);
//! // This process's rank as setup found it (RANK and WORLD_SIZE, SLURM_PROCID, ...).
//! let training = Training::new(
//!     &telemetry,
//!     TrainingOptions::for_rank(telemetry.rank()).with_flop_count(|_iteration: u64| 6.0 * 1e6 * 512.0),
//! );
//! training.loop_started();
//! for counter in 0..3_u64 {
//!     let step = training.iteration(counter);
//!     training.mark(Phase::Data);
//!     {
//!         let _forward = training.phase(Phase::Forward);
//!     }
//!     {
//!         let _backward = training.phase(Phase::Backward);
//!     }
//!     training.mark(Phase::Optimizer);
//!     drop(step); // iteration counter + 1 completed
//!     if counter == 1 {
//!         let save = training.checkpoint_save(counter + 1);
//!         save.durable(); // a synchronous save returned Ok
//!     }
//! }
//! {
//!     let _eval = training.evaluation(3);
//! }
//! training.log_interval();
//! training.finish();
//! # telemetry.shutdown(std::time::Duration::from_secs(5));
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use lens_fallbacks::config::{HangTimeout, LensConfig};
use lens_fallbacks::control::Change;
use lens_fallbacks::{KeyValue, SAMPLING_KEY_ATTRIBUTE, SpanGroup, SpanGuard, Telemetry, managed_span, sampling_key};

use crate::control::RankControl;
use crate::goodput::{
    Accountant, Bucket, Coverage, DeadProgress, GoodputMetrics, GoodputTotals, LostPrecision, ProgressRecord,
};
use crate::mfu::FlopCount;
pub use crate::names::EVENT_ATTRIBUTE;
use crate::names::{ASYNC_ATTRIBUTE, DURABLE_ATTRIBUTE, ITERATION_ATTRIBUTE, spans};
use crate::phases::{PHASE_COUNT, Phase, PhaseGuard, Phases};
use crate::rank_metrics::{RankCoordinates, RankMetrics};
use crate::record_writer::RecordWriter;
use crate::watchdog::HangWatchdog;

/// A training event: the kinds of span the event API opens, and the values
/// of [`EVENT_ATTRIBUTE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// One training iteration.
    Iteration,
    /// A checkpoint save's blocking part.
    CheckpointSave,
    /// An asynchronous save's finalize (its checkpoint becomes durable).
    CheckpointFinalize,
    /// A checkpoint load.
    CheckpointLoad,
    /// An evaluation.
    Evaluation,
    /// Startup: the launch stamp to the start of the loop.
    Startup,
    /// The normal end of the attempt.
    Shutdown,
}

impl Event {
    /// Every event.
    pub const ALL: [Event; 7] = [
        Event::Iteration,
        Event::CheckpointSave,
        Event::CheckpointFinalize,
        Event::CheckpointLoad,
        Event::Evaluation,
        Event::Startup,
        Event::Shutdown,
    ];

    /// The value of [`EVENT_ATTRIBUTE`].
    pub const fn as_str(self) -> &'static str {
        match self {
            Event::Iteration => "iteration",
            Event::CheckpointSave => "checkpoint_save",
            Event::CheckpointFinalize => "checkpoint_finalize",
            Event::CheckpointLoad => "checkpoint_load",
            Event::Evaluation => "evaluation",
            Event::Startup => "startup",
            Event::Shutdown => "shutdown",
        }
    }

    /// The event named `name` (as [`Event::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|event| event.as_str() == name)
    }

    /// The phase the rank is in during the event, if it has one.
    pub const fn phase(self) -> Option<Phase> {
        match self {
            Event::CheckpointSave | Event::CheckpointFinalize | Event::CheckpointLoad => Some(Phase::Checkpoint),
            Event::Evaluation => Some(Phase::Eval),
            Event::Iteration | Event::Startup | Event::Shutdown => None,
        }
    }

    /// The goodput bucket the event blocks the loop in, if any.
    pub const fn bucket(self) -> Option<Bucket> {
        match self {
            Event::CheckpointSave | Event::CheckpointFinalize => Some(Bucket::CheckpointSave),
            Event::CheckpointLoad => Some(Bucket::CheckpointLoad),
            Event::Evaluation => Some(Bucket::Evaluation),
            Event::Iteration | Event::Startup | Event::Shutdown => None,
        }
    }

    /// The stamp on the event's span: `dl.training.event = <name>`.
    pub fn stamp(self) -> KeyValue {
        KeyValue::new(EVENT_ATTRIBUTE, self.as_str())
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The span of one event: one span, or an inner span inside an outer one
/// (Megatron's first iteration has a wrapper). Dropping it ends the inner
/// span first.
#[must_use = "the event's span ends when this is dropped"]
#[derive(Debug)]
pub struct EventSpan {
    // Declaration order is drop order: the inner span before its wrapper.
    inner: SpanGuard,
    outer: SpanGuard,
}

impl EventSpan {
    /// One span.
    pub fn new(span: SpanGuard) -> EventSpan {
        EventSpan { inner: span, outer: SpanGuard::noop() }
    }

    /// `inner`, inside `outer` (ended after it).
    pub fn nested(outer: SpanGuard, inner: SpanGuard) -> EventSpan {
        EventSpan { inner, outer }
    }

    /// No span.
    pub const fn noop() -> EventSpan {
        EventSpan { inner: SpanGuard::noop(), outer: SpanGuard::noop() }
    }

    /// The event's span (the inner one), for attributes of the program's own.
    pub fn span(&self) -> &SpanGuard {
        &self.inner
    }

    /// The wrapper, when there is one (else a no-op guard).
    pub fn outer(&self) -> &SpanGuard {
        &self.outer
    }
}

/// How a program's event spans are opened: the seam where a framework puts
/// its own span names, groups and attributes (sampling keys, the
/// iteration attribute of its taxonomy). [`SpanNames`] is the generic
/// implementation.
pub trait EventSpans: Send + Sync {
    /// Opens the span of `event`, current until the guard drops, with
    /// `stamp` ([`Event::stamp`]) among its attributes. `iteration` is the
    /// event's iteration: for [`Event::Iteration`], the loop's counter at the
    /// start of the iteration (0 for the first: the iteration completes
    /// `iteration + 1`); for a checkpoint, the checkpoint's iteration; for
    /// an evaluation, the iteration it follows; 0 for a load (its iteration
    /// is set on the span at [`LoadGuard::resumed`]), startup and shutdown.
    fn open(&self, event: Event, iteration: u64, stamp: KeyValue) -> EventSpan;

    /// The span of `phase` ([`Training::phase`]), if the program wants one
    /// (default: none).
    fn open_phase(&self, phase: Phase) -> SpanGuard {
        let _ = phase;
        SpanGuard::noop()
    }

    /// Whether [`Event::Startup`] gets a backdated span at
    /// [`Training::loop_started`] (from the launch stamp); a framework with
    /// a startup trace of its own says no (default: yes).
    fn backdates_startup(&self) -> Option<SpanName> {
        None
    }

    /// The run the spans belong to: [`Training::new`] hands the telemetry
    /// handle's run id and restart attempt before the first event, for the
    /// iteration spans' sampling keys (one ratio decision per iteration,
    /// the same on every rank: SPEC A4). Default: ignored (a framework that
    /// keys its spans knows its run already).
    fn set_run(&mut self, run_id: &str, restart_attempt: u32) {
        let _ = (run_id, restart_attempt);
    }
}

/// A span's group and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanName {
    /// The group that gates it.
    pub group: SpanGroup,
    /// Its name.
    pub name: &'static str,
}

impl SpanName {
    /// `name` in `group`.
    pub const fn new(group: SpanGroup, name: &'static str) -> SpanName {
        SpanName { group, name }
    }
}

/// The generic [`EventSpans`]: a group and a name per event and per phase
/// (`None`: no span), each span stamped with [`EVENT_ATTRIBUTE`] and, for
/// iterations and checkpoints, `dl.training.iteration`. An iteration span
/// also carries its iteration's sampling key
/// ([`SAMPLING_KEY_ATTRIBUTE`], `sampling_key(run id, restart attempt,
/// counter)` with the loop's counter at the iteration's start, as
/// Megatron's) once [`Training::new`] has told it the run: a ratio sampler
/// (`OTEL_TRACES_SAMPLER`) then decides per iteration, the same on every
/// rank, even where the iterations sit inside one long-lived span of the
/// program's (an interval trace), and the phase spans inside follow it.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanNames {
    events: [Option<SpanName>; 7],
    phases: [Option<SpanName>; PHASE_COUNT],
    /// The run id and restart attempt of the sampling keys ([`EventSpans::set_run`]).
    run: Option<(Arc<str>, u32)>,
}

impl SpanNames {
    /// The defaults: `dl.training.*` names in lens's base groups
    /// (iteration in `step`, saves and finalizes in `checkpoint`, loads in
    /// `load_checkpoint`, evaluations in `evaluate`, startup and shutdown in
    /// `job`; the forward and backward phases in `forward_backward`, the
    /// optimizer in `optimizer`; no span for data and the waits).
    pub const fn generic() -> SpanNames {
        let mut phases = [None; PHASE_COUNT];
        phases[Phase::Forward.index()] = Some(SpanName::new(SpanGroup::FORWARD_BACKWARD, spans::FORWARD));
        phases[Phase::Backward.index()] = Some(SpanName::new(SpanGroup::FORWARD_BACKWARD, spans::BACKWARD));
        phases[Phase::Optimizer.index()] = Some(SpanName::new(SpanGroup::OPTIMIZER, spans::OPTIMIZER));
        SpanNames {
            events: [
                Some(SpanName::new(SpanGroup::STEP, spans::ITERATION)),
                Some(SpanName::new(SpanGroup::CHECKPOINT, spans::CHECKPOINT_SAVE)),
                Some(SpanName::new(SpanGroup::CHECKPOINT, spans::CHECKPOINT_FINALIZE)),
                Some(SpanName::new(SpanGroup::LOAD_CHECKPOINT, spans::CHECKPOINT_LOAD)),
                Some(SpanName::new(SpanGroup::EVALUATE, spans::EVALUATION)),
                Some(SpanName::new(SpanGroup::JOB, spans::STARTUP)),
                Some(SpanName::new(SpanGroup::JOB, spans::SHUTDOWN)),
            ],
            phases,
            run: None,
        }
    }

    /// No span at all (phases and goodput only).
    pub const fn none() -> SpanNames {
        SpanNames { events: [None; 7], phases: [None; PHASE_COUNT], run: None }
    }

    /// `event`'s span is `name` (`None`: no span).
    pub const fn with_event(mut self, event: Event, name: Option<SpanName>) -> SpanNames {
        self.events[event as usize] = name;
        self
    }

    /// `phase`'s span is `name` (`None`: no span).
    pub const fn with_phase(mut self, phase: Phase, name: Option<SpanName>) -> SpanNames {
        self.phases[phase.index()] = name;
        self
    }

    /// The span of `event`, if any.
    pub const fn event(&self, event: Event) -> Option<SpanName> {
        self.events[event as usize]
    }
}

impl Default for SpanNames {
    fn default() -> SpanNames {
        SpanNames::generic()
    }
}

impl EventSpans for SpanNames {
    fn open(&self, event: Event, iteration: u64, stamp: KeyValue) -> EventSpan {
        let Some(SpanName { group, name }) = self.event(event) else { return EventSpan::noop() };
        let number = match event {
            Event::Iteration => Some(iteration.saturating_add(1)),
            Event::CheckpointSave | Event::CheckpointFinalize | Event::Evaluation => Some(iteration),
            Event::CheckpointLoad | Event::Startup | Event::Shutdown => None,
        };
        let number = number.map(|n| KeyValue::new(ITERATION_ATTRIBUTE, i64::try_from(n).unwrap_or(i64::MAX)));
        // Computed only where the span is recorded (`managed_span` does not
        // iterate the attributes of a disabled group).
        let key = self.run.as_ref().filter(|_| event == Event::Iteration).into_iter().map(
            move |(run_id, restart_attempt)| {
                KeyValue::new(SAMPLING_KEY_ATTRIBUTE, sampling_key(run_id, *restart_attempt, iteration))
            },
        );
        EventSpan::new(managed_span(group, name, std::iter::once(stamp).chain(number).chain(key)))
    }

    fn open_phase(&self, phase: Phase) -> SpanGuard {
        match self.phases[phase.index()] {
            Some(SpanName { group, name }) => managed_span(group, name, []),
            None => SpanGuard::noop(),
        }
    }

    fn backdates_startup(&self) -> Option<SpanName> {
        self.event(Event::Startup)
    }

    fn set_run(&mut self, run_id: &str, restart_attempt: u32) {
        self.run = Some((Arc::from(run_id), restart_attempt));
    }
}

/// What [`Training::new`] needs beyond the telemetry handle.
pub struct TrainingOptions {
    coordinates: RankCoordinates,
    spans: Box<dyn EventSpans>,
    /// `None`: the telemetry handle's (its configuration's).
    hang_timeout: Option<HangTimeout>,
    flush_timeout: Option<Duration>,
    peak_tflops: Option<f64>,
    flops: Option<Box<dyn FlopCount>>,
    world_size: u32,
    checkpoint_dir: Option<PathBuf>,
    launch: Option<SystemTime>,
    control_hold: u64,
}

impl std::fmt::Debug for TrainingOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainingOptions")
            .field("coordinates", &self.coordinates)
            .field("hang_timeout", &self.hang_timeout)
            .field("peak_tflops", &self.peak_tflops)
            .field("flop_count", &self.flops.is_some())
            .field("world_size", &self.world_size)
            .field("checkpoint_dir", &self.checkpoint_dir)
            .finish_non_exhaustive()
    }
}

impl TrainingOptions {
    /// The options of the rank at `coordinates`: generic span names, the
    /// hang timeout, peak and flush bound of the telemetry handle's
    /// configuration (`<PREFIX>_HANG_TIMEOUT_S`, `<PREFIX>_PEAK_TFLOPS`,
    /// `<PREFIX>_SHUTDOWN_TIMEOUT_MS`: the program reads its configuration
    /// once, at setup), no FLOP count (no MFU), a world of one, no progress
    /// record, the attempt starting now.
    pub fn new(coordinates: RankCoordinates) -> TrainingOptions {
        TrainingOptions {
            coordinates,
            spans: Box::new(SpanNames::generic()),
            hang_timeout: None,
            flush_timeout: None,
            peak_tflops: None,
            flops: None,
            world_size: 1,
            checkpoint_dir: None,
            launch: None,
            control_hold: 0,
        }
    }

    /// The options of the rank that telemetry's setup found this process to
    /// be ([`Telemetry::rank`]: `RANK` and `WORLD_SIZE`, `SLURM_PROCID` and
    /// `SLURM_NTASKS`, ...): its coordinates ([`RankCoordinates::of`]) and
    /// the world size, otherwise as [`new`](Self::new). What a program that
    /// may run as several ranks passes; a job with model parallelism sets
    /// the parallel coordinates with `new` and
    /// [`with_world_size`](Self::with_world_size) instead.
    ///
    /// ```
    /// use lens_fallbacks::RankContext;
    /// use lens_training::{RankCoordinates, TrainingOptions};
    ///
    /// let rank = RankContext { rank: 2, world_size: 4, local_rank: 0, node_rank: Some(1) };
    /// let options = TrainingOptions::for_rank(rank);
    /// assert_eq!(options.coordinates(), RankCoordinates::of(rank));
    /// assert_eq!(options.world_size(), 4);
    /// ```
    pub fn for_rank(rank: lens_fallbacks::RankContext) -> TrainingOptions {
        TrainingOptions::new(RankCoordinates::of(rank)).with_world_size(rank.world_size)
    }

    /// The rank's coordinates.
    pub fn coordinates(&self) -> RankCoordinates {
        self.coordinates
    }

    /// The number of ranks the FLOP count is shared by.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The values of a configuration other than the telemetry handle's:
    /// the hang timeout (`<PREFIX>_HANG_TIMEOUT_S`), the peak
    /// (`<PREFIX>_PEAK_TFLOPS`) and the bound on the watchdog's flush
    /// (`<PREFIX>_SHUTDOWN_TIMEOUT_MS`). A program that set telemetry up
    /// from its configuration needs none of this: [`Training::new`] takes
    /// them from the handle.
    pub fn with_config(mut self, config: &LensConfig) -> TrainingOptions {
        self.hang_timeout = Some(config.hang_timeout);
        self.peak_tflops = config.peak_tflops.or(self.peak_tflops);
        self.flush_timeout = Some(config.shutdown_timeout);
        self
    }

    /// The program's span names ([`SpanNames`]) or its own [`EventSpans`].
    pub fn with_spans(mut self, spans: impl EventSpans + 'static) -> TrainingOptions {
        self.spans = Box::new(spans);
        self
    }

    /// The hang watchdog's timeout ([`HangTimeout::Off`], or a zero
    /// duration: no watchdog).
    pub fn with_hang_timeout(mut self, timeout: HangTimeout) -> TrainingOptions {
        self.hang_timeout = Some(timeout);
        self
    }

    /// The bound on the watchdog's forced flush, and on the wait for the
    /// final progress record at [`Training::finish`] (default: the telemetry
    /// handle's shutdown timeout, `<PREFIX>_SHUTDOWN_TIMEOUT_MS`, 5 s).
    pub fn with_flush_timeout(mut self, timeout: Duration) -> TrainingOptions {
        self.flush_timeout = Some(timeout);
        self
    }

    /// The peak MFU divides by, TFLOP/s per GPU (see [`crate::mfu`]);
    /// `None`: the telemetry handle's (`<PREFIX>_PEAK_TFLOPS`), if any. A
    /// peak that is not a positive number is warned about once, and MFU is
    /// not reported.
    pub fn with_peak_tflops(mut self, peak: Option<f64>) -> TrainingOptions {
        self.peak_tflops = peak;
        self
    }

    /// The program's FLOP count (a closure `Fn(u64) -> f64` or a
    /// [`FlopCount`]): the whole job's model FLOPs per iteration.
    pub fn with_flop_count(mut self, count: impl FlopCount + 'static) -> TrainingOptions {
        self.flops = Some(Box::new(count));
        self
    }

    /// The number of GPUs (ranks) the FLOP count is shared by.
    pub fn with_world_size(mut self, world_size: u32) -> TrainingOptions {
        self.world_size = world_size.max(1);
        self
    }

    /// The directory the checkpoints go to: global rank 0 writes the
    /// progress record (`goodput.json`) there, on a thread of its own (the
    /// training thread never waits on that file system).
    pub fn with_checkpoint_dir(mut self, dir: impl Into<PathBuf>) -> TrainingOptions {
        self.checkpoint_dir = Some(dir.into());
        self
    }

    /// When the attempt was launched (default: when [`Training::new`]
    /// runs): goodput's `startup` starts there.
    pub fn with_launch_stamp(mut self, launch: SystemTime) -> TrainingOptions {
        self.launch = Some(launch);
        self
    }

    /// A test hook for the control file (`<PREFIX>_CONTROL_FILE`): this rank
    /// takes what its control thread read only from iteration `iteration`
    /// on, as a rank whose poll came late would (default 0: at once).
    pub fn with_control_hold(mut self, iteration: u64) -> TrainingOptions {
        self.control_hold = iteration;
        self
    }
}

/// One rank's training diagnosis: the event API (see the module docs).
/// `Send + Sync`; every call takes `&self`.
pub struct Training {
    spans: Box<dyn EventSpans>,
    phases: Phases,
    rank_metrics: Arc<RankMetrics>,
    watchdog: Mutex<HangWatchdog>,
    goodput: Option<Mutex<GoodputState>>,
    launch: SystemTime,
    control: RankControl,
    /// What a control change of the hang timeout restarts the watchdog with.
    watchdog_inputs: Option<WatchdogInputs>,
}

/// The watchdog's inputs besides its timeout.
struct WatchdogInputs {
    telemetry: std::sync::Weak<Telemetry>,
    coordinates: RankCoordinates,
    flush_timeout: Duration,
}

impl std::fmt::Debug for Training {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Training")
            .field("enabled", &self.is_enabled())
            .field("rank_metrics", &!self.rank_metrics.is_noop())
            .finish_non_exhaustive()
    }
}

struct GoodputState {
    accountant: Accountant,
    origin: Instant,
    /// Seconds from the launch stamp to `origin`.
    offset: f64,
    run_id: String,
    /// Global rank 0's writer of the progress record (none elsewhere, or
    /// without a checkpoint directory).
    record: Option<RecordWriter>,
    metrics: GoodputMetrics,
    peak_tflops: Option<f64>,
    flops: Option<Box<dyn FlopCount>>,
    world_size: u32,
    /// The last iteration reached (entered), the last completed and the
    /// latest durable checkpoint's: the progress written into the spool at
    /// every iteration and into the record at log intervals.
    reached: u64,
    iteration: u64,
    checkpoint_iteration: Option<u64>,
    /// The iteration this attempt's own iterations start after: 0, or the
    /// checkpoint it resumed from (or rolled back to, when older).
    start: u64,
    /// The durable checkpoints of this attempt (iteration and what it
    /// covers), the latest [`REMEMBERED_CHECKPOINTS`]: a rollback to one of
    /// them is charged exactly.
    checkpoints: VecDeque<(u64, Coverage)>,
    /// Whether the attempt is under way (an iteration completed, or its
    /// totals published): a load now is a rollback inside the attempt, not
    /// a resume from an earlier one.
    under_way: bool,
    /// MFU's window: FLOPs since the last log interval, and the step time
    /// total at its start.
    window_flops: f64,
    window_step_ns: u64,
    last_mfu: Option<f64>,
    /// Whether an MFU above 1 was warned about.
    mfu_warned: bool,
    /// When the per-rank counters were last brought up to date.
    last_flush: Instant,
    finished: bool,
    /// Whether this attempt writes a spool (seen at [`Training::new`], after
    /// setup; shutdown closes it before a program's summary reads the totals).
    spool: bool,
}

/// What is wrong when a rank's options disagree with the rank telemetry was
/// set up as (`TrainingOptions::new(RankCoordinates::SINGLE)` in a job of
/// several ranks): every rank's series would say rank 0, every rank would
/// write the progress record and MFU would count one GPU. `None` when they
/// agree, or when the world size counts more GPUs than there are processes
/// (a process that drives several).
fn rank_mismatch(coordinates: RankCoordinates, world_size: u32, rank: lens_fallbacks::RankContext) -> Option<String> {
    // More GPUs than processes is a process driving several; fewer is wrong.
    (coordinates.rank != rank.rank || world_size < rank.world_size).then(|| {
        format!(
            "the training diagnosis was given rank {} of {world_size} but telemetry runs as rank {} of {}: its \
             per-rank series, hang lines, progress record and MFU would name the wrong rank or world; build its \
             options with TrainingOptions::for_rank(telemetry.rank())",
            coordinates.rank, rank.rank, rank.world_size
        )
    })
}

/// How often the per-rank counters follow the iterations at most (also at
/// every log interval and at the end).
const COUNTER_FLUSH: Duration = Duration::from_secs(1);

/// How many of an attempt's latest durable checkpoints a rollback is charged
/// exactly to (an older one: in proportion to its iterations).
const REMEMBERED_CHECKPOINTS: usize = 64;

impl Training {
    /// The diagnosis of one rank on `telemetry` (the program's handle):
    /// phases and goodput while telemetry is enabled, the per-rank counters
    /// where it exports rank metrics (`<PREFIX>_RANK_METRICS=1`), the
    /// goodput and MFU gauges where it exports, the hang watchdog unless its
    /// timeout is off. The attempt's startup starts at the launch stamp.
    pub fn new(telemetry: &Arc<Telemetry>, options: TrainingOptions) -> Training {
        let TrainingOptions {
            coordinates,
            mut spans,
            hang_timeout,
            flush_timeout,
            peak_tflops,
            flops,
            world_size,
            checkpoint_dir,
            launch,
            control_hold,
        } = options;
        spans.set_run(telemetry.run_id(), telemetry.restart_attempt());
        let launch = launch.unwrap_or_else(SystemTime::now);
        let hang_timeout = hang_timeout.unwrap_or_else(|| telemetry.hang_timeout());
        let flush_timeout = flush_timeout.unwrap_or_else(|| telemetry.shutdown_timeout());
        let peak_tflops = match peak_tflops {
            // A peak given in code is checked as the variable's is (which
            // setup refuses): said once, and MFU is not reported.
            Some(peak) if !(peak.is_finite() && peak > 0.0) => {
                if telemetry.is_enabled() {
                    lens_fallbacks::diag::warn_once(format_args!(
                        "with_peak_tflops({peak}): a peak must be a positive number of TFLOP/s per GPU; MFU is not \
                         reported"
                    ));
                }
                None
            }
            given => given.or_else(|| telemetry.peak_tflops()),
        };
        let enabled = telemetry.is_enabled();
        if enabled && let Some(warning) = rank_mismatch(coordinates, world_size, telemetry.rank()) {
            lens_fallbacks::diag::warn_once(warning);
        }
        let phases = Phases::new(enabled);
        let rank_metrics = Arc::new(RankMetrics::new(telemetry, coordinates));
        let watchdog = HangWatchdog::start_with_counters(
            Arc::downgrade(telemetry),
            hang_timeout,
            &phases,
            coordinates,
            flush_timeout,
            Some(Arc::clone(&rank_metrics)),
        );
        let goodput = enabled.then(|| {
            let offset = SystemTime::now().duration_since(launch).map_or(0.0, |elapsed| elapsed.as_secs_f64());
            let metrics =
                if telemetry.is_exporting() { GoodputMetrics::new(telemetry.meter()) } else { GoodputMetrics::noop() };
            Mutex::new(GoodputState {
                accountant: Accountant::new(GoodputTotals::default()),
                origin: Instant::now(),
                offset,
                run_id: telemetry.run_id().to_string(),
                record: checkpoint_dir
                    .filter(|_| coordinates.rank == 0)
                    .map(|dir| RecordWriter::new(dir, flush_timeout)),
                metrics,
                peak_tflops,
                flops,
                world_size,
                reached: 0,
                iteration: 0,
                checkpoint_iteration: None,
                start: 0,
                checkpoints: VecDeque::new(),
                under_way: false,
                window_flops: 0.0,
                window_step_ns: 0,
                last_mfu: None,
                mfu_warned: false,
                last_flush: Instant::now(),
                finished: false,
                spool: lens_fallbacks::spool::is_active(),
            })
        });
        Training {
            spans,
            phases,
            rank_metrics,
            watchdog: Mutex::new(watchdog),
            goodput,
            launch,
            control: RankControl::start(telemetry, coordinates, control_hold),
            watchdog_inputs: Some(WatchdogInputs { telemetry: Arc::downgrade(telemetry), coordinates, flush_timeout }),
        }
    }

    /// A diagnosis that records nothing (telemetry off).
    pub fn disabled() -> Training {
        Training {
            spans: Box::new(SpanNames::none()),
            phases: Phases::disabled(),
            rank_metrics: Arc::new(RankMetrics::noop()),
            watchdog: Mutex::new(HangWatchdog::inert()),
            goodput: None,
            launch: SystemTime::now(),
            control: RankControl::none(),
            watchdog_inputs: None,
        }
    }

    /// Whether this diagnosis records (telemetry enabled, the facade's
    /// `otel` compiled in).
    pub fn is_enabled(&self) -> bool {
        self.phases.is_enabled()
    }

    /// The phase clock (a cheap clone shares it: hand it to code that
    /// blocks, such as a communicator, for [`Phases::enter_wait`]).
    pub fn phases(&self) -> &Phases {
        &self.phases
    }

    fn with_goodput(&self, body: impl FnOnce(&mut GoodputState, f64)) {
        if let Some(state) = &self.goodput {
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            let now = state.offset + state.origin.elapsed().as_secs_f64();
            body(&mut state, now);
        }
    }

    fn open(&self, event: Event, iteration: u64) -> EventSpan {
        self.spans.open(event, iteration, event.stamp())
    }

    /// The training loop starts: startup ends (goodput's `startup` bucket
    /// closes; with [`SpanNames`] a backdated `startup` span from the launch
    /// stamp to now is recorded).
    pub fn loop_started(&self) {
        if !self.is_enabled() {
            return;
        }
        if let Some(SpanName { group, name }) = self.spans.backdates_startup() {
            lens_fallbacks::span(group, name)
                .start_time(self.launch)
                .attributes([Event::Startup.stamp()])
                .start()
                .end_at(SystemTime::now());
        }
        self.with_goodput(|s, now| s.accountant.training_started(now));
    }

    /// Iteration `counter + 1` begins (`counter`: iterations completed
    /// before it, the loop's counter). Its span opens; dropping the guard
    /// completes it: the span ends, the rank enters `other`, goodput counts
    /// the iteration, `dl.training.iterations` follows, the watchdog sees
    /// progress and the FLOP count adds to MFU's window. Both ends write the
    /// rank's progress into its spool (`lens_fallbacks::spool::record_progress`:
    /// a few stores), so that a crash at any iteration is charged exactly.
    ///
    /// With a control file (`<PREFIX>_CONTROL_FILE`), this is where a change
    /// it asks for applies, at the iteration it names, before the
    /// iteration's span opens (see the `control` module).
    pub fn iteration(&self, counter: u64) -> IterationGuard<'_> {
        if let Some(change) = self.control.before_iteration(counter) {
            self.apply_control(&change);
        }
        self.phases.begin_iteration(counter);
        self.with_goodput(|s, _| {
            s.reached = counter.saturating_add(1);
            s.record_progress();
        });
        IterationGuard {
            training: self,
            span: self.open(Event::Iteration, counter),
            counter,
            started: Instant::now(),
            abandoned: false,
            ended: false,
        }
    }

    /// The parts of a control change that are this handle's: per-rank
    /// metrics paused or resumed, the watchdog restarted with the new
    /// timeout.
    #[cold]
    fn apply_control(&self, change: &Change) {
        if change.before.rank_metrics != change.after.rank_metrics {
            // The counters come up to date at the boundary: before a pause,
            // what ran until now is counted; before a resume (still paused),
            // the paused time is passed over, not counted.
            self.rank_metrics.record(&self.phases.totals());
            self.rank_metrics.set_paused(!change.after.rank_metrics);
        }
        if change.before.hang_timeout != change.after.hang_timeout
            && let Some(inputs) = &self.watchdog_inputs
        {
            let mut watchdog = self.watchdog.lock().unwrap_or_else(PoisonError::into_inner);
            watchdog.stop();
            *watchdog = HangWatchdog::start_with_counters(
                inputs.telemetry.clone(),
                change.after.hang_timeout,
                &self.phases,
                inputs.coordinates,
                inputs.flush_timeout,
                Some(Arc::clone(&self.rank_metrics)),
            );
        }
    }

    fn complete_iteration(&self, counter: u64, step: Duration) {
        let completed = counter.saturating_add(1);
        self.phases.end_iteration(completed, step);
        self.phases.mark(Phase::Other);
        let mut flush = false;
        self.with_goodput(|s, now| {
            s.accountant.iteration_completed(now);
            s.under_way = true;
            s.iteration = completed;
            s.reached = s.reached.max(completed);
            s.record_progress();
            if let Some(flops) = &s.flops {
                s.window_flops += flops.flops(completed);
            }
            if s.last_flush.elapsed() >= COUNTER_FLUSH {
                s.last_flush = Instant::now();
                flush = true;
            }
        });
        if flush {
            self.rank_metrics.record(&self.phases.totals());
        }
    }

    /// A phase boundary without a span: the rank enters `phase` (until the
    /// next boundary).
    #[inline]
    pub fn mark(&self, phase: Phase) {
        self.phases.mark(phase);
    }

    /// The rank enters `phase` until the guard drops (then returns to the
    /// phase it was in), inside the phase's span where the program wants
    /// one ([`SpanNames::with_phase`]).
    pub fn phase(&self, phase: Phase) -> PhaseSpan<'_> {
        let span = self.spans.open_phase(phase);
        PhaseSpan { _guard: self.phases.enter(phase), span }
    }

    /// A blocking wait (`dp_wait`, `pp_wait`, `tp_wait`) until the guard
    /// drops, unless the rank's phase already says where the time goes (a
    /// wait, `checkpoint` or `eval`). No span.
    pub fn wait(&self, wait: Phase) -> PhaseGuard<'_> {
        self.phases.enter_wait(wait)
    }

    /// A checkpoint load begins: its span, phase `checkpoint`, goodput's
    /// `checkpoint_load`, until the guard drops. Tell it where the run
    /// resumes from with [`LoadGuard::resumed`] (the iteration is known
    /// only once the checkpoint is found, so the span gets it there).
    pub fn checkpoint_load(&self) -> LoadGuard<'_> {
        let span = self.open(Event::CheckpointLoad, 0);
        let phase = self.phases.enter(Phase::Checkpoint);
        self.with_goodput(|s, now| s.accountant.begin(Bucket::CheckpointLoad, now));
        LoadGuard { training: self, _phase: phase, span }
    }

    /// The save of the checkpoint of `iteration` begins (its blocking
    /// part): its span, phase `checkpoint`, goodput's `checkpoint_save`;
    /// it covers what is pending now once it is durable. Give the verdict
    /// on the guard: [`SaveGuard::durable`] (a synchronous save returned
    /// well), [`SaveGuard::in_flight`] (an asynchronous save dispatched: the
    /// handle is finalized later), [`SaveGuard::failed`]; a guard dropped
    /// without one is a failed save.
    pub fn checkpoint_save(&self, iteration: u64) -> SaveGuard<'_> {
        let span = self.open(Event::CheckpointSave, iteration);
        let phase = self.phases.enter(Phase::Checkpoint);
        let mut coverage = None;
        self.with_goodput(|s, now| {
            s.accountant.begin(Bucket::CheckpointSave, now);
            coverage = Some(s.accountant.coverage(now));
        });
        SaveGuard { end: BlockingEnd { training: self, _phase: phase, span }, iteration, coverage, decided: false }
    }

    /// The finalize of an asynchronous save begins (the loop blocks until
    /// the checkpoint is durable): its span (when the program names one),
    /// phase `checkpoint`, goodput's `checkpoint_save`. Say
    /// [`FinalizeGuard::durable`] once the checkpoint is durable; a guard
    /// dropped without it keeps nothing.
    pub fn checkpoint_finalize(&self, pending: PendingCheckpoint) -> FinalizeGuard<'_> {
        let span = self.open(Event::CheckpointFinalize, pending.iteration);
        let phase = self.phases.enter(Phase::Checkpoint);
        self.with_goodput(|s, now| s.accountant.begin(Bucket::CheckpointSave, now));
        FinalizeGuard { end: BlockingEnd { training: self, _phase: phase, span }, pending, decided: false }
    }

    /// An evaluation after iteration `iteration`, until the guard drops:
    /// its span, phase `eval`, goodput's `evaluation`.
    pub fn evaluation(&self, iteration: u64) -> EvaluationGuard<'_> {
        let span = self.open(Event::Evaluation, iteration);
        let phase = self.phases.enter(Phase::Eval);
        self.with_goodput(|s, now| s.accountant.begin(Bucket::Evaluation, now));
        EvaluationGuard { end: BlockingEnd { training: self, _phase: phase, span }, bucket: Bucket::Evaluation }
    }

    /// A log interval: the per-rank counters catch up, MFU over the
    /// interval (the FLOP count over the step time since the last
    /// interval), the goodput and MFU gauges on the export rank, and the
    /// progress record.
    pub fn log_interval(&self) {
        self.control.log_interval();
        let totals = self.phases.totals();
        self.rank_metrics.record(&totals);
        self.with_goodput(|s, now| {
            let step_ns = totals.step_ns.saturating_sub(s.window_step_ns);
            if s.flops.is_some() && step_ns > 0 {
                s.last_mfu = crate::mfu::mfu_of(s.window_flops, step_ns as f64 / 1e9, s.world_size, s.peak_tflops);
                if let Some(mfu) = s.last_mfu.filter(|mfu| *mfu > 1.0)
                    && !std::mem::replace(&mut s.mfu_warned, true)
                {
                    // Exported as computed (the dashboard shows the same
                    // impossible value), and said once: the inputs are wrong.
                    lens_fallbacks::diag::warn(format_args!(
                        "MFU came out at {mfu:.3}, above 1: the FLOP count (with_flop_count) is the whole job's per \
                         iteration and the peak ({} TFLOP/s) is one GPU's; one of them is off",
                        s.peak_tflops.unwrap_or(f64::NAN)
                    ));
                }
            }
            s.window_flops = 0.0;
            s.window_step_ns = totals.step_ns;
            s.last_flush = Instant::now();
            s.publish(now);
        });
    }

    /// The attempt ended normally: what is pending is kept, the counters,
    /// gauges and progress record get their final values, a `shutdown`
    /// span marks the end (where named), and the watchdog stops.
    /// Idempotent.
    ///
    /// The progress record is written off the training thread at every
    /// log interval and durable checkpoint; this call waits for the final
    /// one (`normal_end`) at most the flush timeout
    /// ([`TrainingOptions::with_flush_timeout`]). A file system that does
    /// not answer by then is warned about once and the call returns: the
    /// record is written if it comes back before the process exits.
    pub fn finish(&self) {
        let mut first = false;
        self.with_goodput(|s, _| first = !std::mem::replace(&mut s.finished, true));
        if !first {
            self.stop_watchdog();
            return;
        }
        self.log_interval();
        drop(self.open(Event::Shutdown, 0));
        let mut flush = None;
        self.with_goodput(|s, now| {
            s.accountant.finish(now);
            s.publish(now);
            flush = s.record.as_ref().map(RecordWriter::flush_handle);
        });
        // The final record is waited for, outside the lock and at most the
        // flush timeout: a stalled file system never holds up the exit.
        if let Some(flush) = flush {
            flush.wait();
        }
        self.stop_watchdog();
    }

    /// Stops the hang watchdog and the control thread (the loop is over; a
    /// crash path that skips [`Training::finish`] calls this), global rank
    /// 0's control thread writing the control status a last time, saying
    /// that the job ended. Idempotent.
    pub fn stop_watchdog(&self) {
        self.control.stop();
        self.watchdog.lock().unwrap_or_else(PoisonError::into_inner).stop();
    }

    /// The run's goodput totals now (`None` with telemetry off). Their
    /// [`lost_precision`](GoodputTotals::lost_precision) says
    /// [`LostPrecision::LogInterval`] when a resume charged a dead attempt
    /// from its progress record alone, or when this attempt writes no spool
    /// (`<PREFIX>_SPOOL=0`, a failed mapping): a crash of it would be charged
    /// to the last log interval.
    pub fn totals(&self) -> Option<GoodputTotals> {
        let state = self.goodput.as_ref()?.lock().unwrap_or_else(PoisonError::into_inner);
        let mut totals = state.accountant.snapshot(state.offset + state.origin.elapsed().as_secs_f64());
        if !state.spool {
            totals.lost_precision = LostPrecision::LogInterval;
        }
        Some(totals)
    }

    /// The MFU of the latest log interval (`None` without a peak, a FLOP
    /// count or a log interval).
    pub fn mfu(&self) -> Option<f64> {
        self.goodput.as_ref()?.lock().unwrap_or_else(PoisonError::into_inner).last_mfu
    }
}

impl GoodputState {
    fn publish(&mut self, now: f64) {
        let totals = self.accountant.snapshot(now);
        self.metrics.record(&totals, self.last_mfu);
        self.write_record(now);
    }

    /// This rank's progress into its spool (nothing without one).
    fn record_progress(&self) {
        let completed = (self.iteration > 0).then_some(self.iteration);
        lens_fallbacks::spool::record_progress(self.reached, completed, self.checkpoint_iteration);
    }

    /// Hands the progress record to its writer thread: building it is the
    /// training thread's only cost; the file system is never waited on here
    /// (see [`crate::record_writer`]).
    fn write_record(&mut self, now: f64) {
        self.under_way = true;
        let Some(writer) = &mut self.record else { return };
        writer.submit(ProgressRecord {
            run_id: self.run_id.clone(),
            iteration: self.iteration,
            checkpoint_iteration: self.checkpoint_iteration,
            totals: self.accountant.snapshot(now),
            written_at: Some(SystemTime::now()),
            normal_end: self.finished,
        });
    }

    /// The checkpoint of `iteration` in `dir` was loaded, at `now`: a
    /// resume from an earlier attempt before this one is under way, else a
    /// rollback inside it.
    fn resume(&mut self, dir: &Path, iteration: u64, now: f64) {
        let rollback = self.under_way;
        self.iteration = iteration;
        self.reached = iteration;
        self.checkpoint_iteration = Some(iteration);
        self.record_progress();
        if rollback {
            self.roll_back(iteration, now);
        } else {
            self.start = iteration;
            self.continue_run(dir, iteration);
        }
    }

    /// A durable checkpoint of this attempt, remembered for a rollback.
    fn remember_checkpoint(&mut self, iteration: u64, coverage: Coverage) {
        if self.checkpoints.len() == REMEMBERED_CHECKPOINTS {
            self.checkpoints.pop_front();
        }
        self.checkpoints.push_back((iteration, coverage));
    }

    /// A rollback inside this attempt to the checkpoint of `iteration`, at
    /// `now`: what was completed after it is lost (it is computed again),
    /// charged exactly to one of this attempt's checkpoints or its start, in
    /// proportion otherwise; the earlier attempts' kept iterations after it,
    /// when it is older than this attempt's start, too. The record already
    /// holds this attempt's time, so it is not read: the accountant goes on
    /// from its own totals, and the record and gauges say the rollback at
    /// once. No record of this attempt is read back, so none of its pending
    /// writes can race the read.
    fn roll_back(&mut self, iteration: u64, now: f64) {
        let to = if iteration <= self.start {
            self.accountant.forfeit_earlier(self.start - iteration);
            self.start = iteration;
            Coverage::default()
        } else {
            let remembered = self.checkpoints.iter().rev().find(|(i, _)| *i == iteration).map(|(_, c)| *c);
            remembered.unwrap_or_else(|| self.accountant.coverage_of(iteration - self.start))
        };
        self.accountant.roll_back(to, now);
        // The checkpoints after it belong to the iterations thrown away.
        self.checkpoints.retain(|(i, _)| *i < iteration);
        self.remember_checkpoint(iteration, to);
        self.publish(now);
    }

    /// A resume from an earlier attempt: the totals continue from the
    /// progress record in `dir`, charging the dead attempt's lost progress.
    /// This attempt has handed in no record yet (it is not under way), so
    /// no write of its own is pending.
    fn continue_run(&mut self, dir: &Path, iteration: u64) {
        match ProgressRecord::read(dir) {
            Ok(None) => {}
            Ok(Some(record)) => {
                if record.checkpoint_iteration != Some(iteration) {
                    lens_fallbacks::diag::warn(format_args!(
                        "goodput: the progress record in {} knows the checkpoint of iteration {}, the run resumes \
                         from iteration {iteration}; lost progress is counted from the record's",
                        dir.display(),
                        record.checkpoint_iteration.map_or_else(|| "none".to_string(), |i| i.to_string())
                    ));
                }
                // The dead attempt's last progress, from its spool when setup
                // replayed it: the charge is then exact.
                // It lived at least until the later of its last progress
                // write (every iteration) and its last-alive stamp (every
                // second).
                let dead = lens_fallbacks::spool::replayed_progress().and_then(|spool| {
                    let alive = spool.last_alive.max(spool.recorded_at);
                    DeadProgress::from_spool(spool.completed, alive, record.written_at)
                });
                self.accountant.continue_from(record.resume_totals(iteration, dead));
            }
            Err(error) => lens_fallbacks::diag::warn(format_args!("goodput: {error}; the goodput totals start fresh")),
        }
    }
}

/// One iteration ([`Training::iteration`]); dropping it completes the
/// iteration (unless a panic unwinds through it, or it was
/// [abandoned](IterationGuard::abandon)).
#[must_use = "the iteration completes when the guard drops: bind it with `let _step = ...`"]
pub struct IterationGuard<'a> {
    training: &'a Training,
    span: EventSpan,
    counter: u64,
    started: Instant,
    abandoned: bool,
    ended: bool,
}

impl std::fmt::Debug for IterationGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IterationGuard").field("iteration", &self.iteration()).finish_non_exhaustive()
    }
}

/// The `error.type` of an iteration span [`IterationGuard::abandon`] ended.
pub use crate::names::ABANDONED;

impl IterationGuard<'_> {
    /// The iteration's span (for attributes of the program's own).
    pub fn span(&self) -> &SpanGuard {
        self.span.span()
    }

    /// The event span (with the wrapper, when the program's
    /// [`EventSpans`] opened one).
    pub fn event_span(&self) -> &EventSpan {
        &self.span
    }

    /// The iteration this guard completes (1-based: the counter plus one).
    pub fn iteration(&self) -> u64 {
        self.counter.saturating_add(1)
    }

    /// Ends the span without completing the iteration (the step failed):
    /// marked so in the export, `error.type` [`ABANDONED`] and an error
    /// status, so that a reader of the spans (`lens analyze`) does not
    /// count the iteration either.
    pub fn abandon(mut self) {
        self.abandoned = true;
        self.mark_abandoned("the iteration did not complete: its step failed");
        self.end();
    }

    /// Marks the span (and the wrapper) as an iteration that did not
    /// complete, for a reader of the export.
    fn mark_abandoned(&self, why: &'static str) {
        for span in [self.span.span(), self.span.outer()] {
            span.set_attribute(lens_fallbacks::semconv::ERROR_TYPE, ABANDONED);
            span.set_status_error(why);
        }
    }

    /// Completes the iteration now (as dropping the guard does) and returns
    /// its step time, the one the phases, the watchdog and MFU count: a
    /// program that reports step times reports the same figure.
    pub fn complete(mut self) -> Duration {
        self.end()
    }

    fn end(&mut self) -> Duration {
        let step = self.started.elapsed();
        if !std::mem::replace(&mut self.ended, true) {
            // A panic unwinding through the guard: the iteration does not
            // complete, and the export says so too.
            if std::thread::panicking() && !self.abandoned {
                self.mark_abandoned("the iteration did not complete: its step panicked");
            }
            // The span ends first: what follows is bookkeeping.
            drop(std::mem::replace(&mut self.span, EventSpan::noop()));
            if !self.abandoned && !std::thread::panicking() {
                self.training.complete_iteration(self.counter, step);
            }
        }
        step
    }
}

impl Drop for IterationGuard<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

/// A phase with its span ([`Training::phase`]): the span ends, then the
/// rank returns to the phase it was in.
#[must_use = "the phase ends when the guard drops"]
#[derive(Debug)]
pub struct PhaseSpan<'a> {
    span: SpanGuard,
    _guard: PhaseGuard<'a>,
}

impl PhaseSpan<'_> {
    /// The phase's span (a no-op guard when it has none).
    pub fn span(&self) -> &SpanGuard {
        &self.span
    }
}

/// The end common to the blocking events: the span ends, the phase
/// returns, goodput's bucket closes.
struct BlockingEnd<'a> {
    training: &'a Training,
    // Declaration order is drop order: the span, then the phase.
    span: EventSpan,
    _phase: PhaseGuard<'a>,
}

impl BlockingEnd<'_> {
    fn close(&self, bucket: Bucket) {
        self.training.with_goodput(|s, now| s.accountant.end(bucket, now));
    }
}

/// A checkpoint load ([`Training::checkpoint_load`]).
#[must_use = "the load ends when the guard drops"]
pub struct LoadGuard<'a> {
    training: &'a Training,
    span: EventSpan,
    _phase: PhaseGuard<'a>,
}

impl std::fmt::Debug for LoadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadGuard").finish_non_exhaustive()
    }
}

impl LoadGuard<'_> {
    /// The load's span.
    pub fn span(&self) -> &SpanGuard {
        self.span.span()
    }

    /// The run resumes from the checkpoint of `iteration` in `dir`: the
    /// goodput totals continue from the progress record there (a record of
    /// the schema before the rename reads alike), if any, charging the dead
    /// attempt's lost progress: exactly (every iteration it completed after
    /// `iteration`) when setup replayed its spool
    /// (`lens_fallbacks::spool::replayed_progress`), else its pending time
    /// at the record, known only to a log interval. A record that cannot be
    /// read is a warning, and the totals start fresh.
    ///
    /// A load once this attempt is under way (it completed an iteration, or
    /// published its totals at a log interval or a durable checkpoint) is a
    /// rollback inside the attempt (back to an earlier checkpoint after a
    /// loss spike, say), not a resume: the record is not read (it already
    /// holds this attempt's time), the attempt is counted once, and every
    /// iteration completed after `iteration` is lost progress (it is
    /// computed again), with its loop time, whether a newer checkpoint had
    /// kept it or not (see [`crate::goodput::Accountant::roll_back`]). The
    /// time is charged exactly back to this attempt's start and its latest
    /// durable checkpoints, in proportion to the iterations for a checkpoint
    /// whose save this attempt did not announce; a checkpoint older than the
    /// attempt's start also takes back what earlier attempts kept after it.
    /// No time is counted twice or dropped, and the progress record and
    /// gauges say the rollback at once.
    pub fn resumed(&self, dir: &Path, iteration: u64) {
        self.span().set_attribute(ITERATION_ATTRIBUTE, i64::try_from(iteration).unwrap_or(i64::MAX));
        self.training.with_goodput(|s, now| s.resume(dir, iteration, now));
    }
}

impl Drop for LoadGuard<'_> {
    fn drop(&mut self) {
        drop(std::mem::replace(&mut self.span, EventSpan::noop()));
        self.training.with_goodput(|s, now| s.accountant.end(Bucket::CheckpointLoad, now));
    }
}

/// An asynchronous save whose checkpoint is not durable yet
/// ([`SaveGuard::in_flight`]); finalize it with
/// [`Training::checkpoint_finalize`], possibly iterations later. `Send`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PendingCheckpoint {
    iteration: u64,
    coverage: Option<Coverage>,
}

impl PendingCheckpoint {
    /// The checkpoint's iteration.
    pub fn iteration(&self) -> u64 {
        self.iteration
    }
}

fn make_durable(training: &Training, iteration: u64, coverage: Option<Coverage>) {
    training.with_goodput(|s, now| {
        if let Some(coverage) = coverage {
            s.accountant.checkpoint_durable(coverage, now);
            s.remember_checkpoint(iteration, coverage);
        }
        s.checkpoint_iteration = Some(s.checkpoint_iteration.map_or(iteration, |c| c.max(iteration)));
        s.record_progress();
        s.write_record(now);
    });
}

/// A checkpoint save's blocking part ([`Training::checkpoint_save`]).
#[must_use = "give the save its verdict: durable(), in_flight() or failed()"]
pub struct SaveGuard<'a> {
    end: BlockingEnd<'a>,
    iteration: u64,
    coverage: Option<Coverage>,
    decided: bool,
}

impl std::fmt::Debug for SaveGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaveGuard").field("iteration", &self.iteration).finish_non_exhaustive()
    }
}

impl SaveGuard<'_> {
    /// The save's span (for attributes of the program's own).
    pub fn span(&self) -> &SpanGuard {
        self.end.span.span()
    }

    /// The save returned well and its checkpoint is durable now (a
    /// synchronous save): the blocking part ends and goodput keeps what
    /// the save covers; the progress record says so.
    pub fn durable(mut self) {
        self.decided = true;
        self.span().set_attribute(DURABLE_ATTRIBUTE, true);
        self.end.close(Bucket::CheckpointSave);
        make_durable(self.end.training, self.iteration, self.coverage);
    }

    /// An asynchronous save was dispatched: the blocking part ends now,
    /// the checkpoint becomes durable at its finalize
    /// ([`Training::checkpoint_finalize`] with the handle).
    pub fn in_flight(mut self) -> PendingCheckpoint {
        self.decided = true;
        self.span().set_attribute(ASYNC_ATTRIBUTE, true);
        self.end.close(Bucket::CheckpointSave);
        PendingCheckpoint { iteration: self.iteration, coverage: self.coverage }
    }

    /// The save failed: nothing is kept (the same as dropping the guard).
    pub fn failed(self) {}
}

impl Drop for SaveGuard<'_> {
    fn drop(&mut self) {
        if !self.decided {
            self.end.close(Bucket::CheckpointSave);
        }
    }
}

/// An asynchronous save's finalize ([`Training::checkpoint_finalize`]).
#[must_use = "say durable() once the checkpoint is durable"]
pub struct FinalizeGuard<'a> {
    end: BlockingEnd<'a>,
    pending: PendingCheckpoint,
    decided: bool,
}

impl std::fmt::Debug for FinalizeGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinalizeGuard").field("iteration", &self.pending.iteration).finish_non_exhaustive()
    }
}

impl FinalizeGuard<'_> {
    /// The finalize's span (for attributes of the program's own).
    pub fn span(&self) -> &SpanGuard {
        self.end.span.span()
    }

    /// The checkpoint is durable (its files and its iteration record are
    /// written): goodput keeps what its save covered.
    pub fn durable(mut self) {
        self.decided = true;
        self.span().set_attribute(DURABLE_ATTRIBUTE, true);
        self.end.close(Bucket::CheckpointSave);
        make_durable(self.end.training, self.pending.iteration, self.pending.coverage);
    }

    /// The checkpoint did not become durable: nothing is kept (the same as
    /// dropping the guard).
    pub fn failed(self) {}
}

impl Drop for FinalizeGuard<'_> {
    fn drop(&mut self) {
        if !self.decided {
            self.end.close(Bucket::CheckpointSave);
        }
    }
}

/// An evaluation ([`Training::evaluation`]).
#[must_use = "the evaluation ends when the guard drops"]
pub struct EvaluationGuard<'a> {
    end: BlockingEnd<'a>,
    bucket: Bucket,
}

impl std::fmt::Debug for EvaluationGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvaluationGuard").finish_non_exhaustive()
    }
}

impl EvaluationGuard<'_> {
    /// The evaluation's span (for attributes of the program's own).
    pub fn span(&self) -> &SpanGuard {
        self.end.span.span()
    }
}

impl Drop for EvaluationGuard<'_> {
    fn drop(&mut self) {
        self.end.close(self.bucket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module docs' claim: one `Training` can be shared between threads
    /// (an `Arc<Training>` in a communicator, a data loader thread).
    #[test]
    fn training_and_its_pending_checkpoint_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Training>();
        send_sync::<PendingCheckpoint>();
        send_sync::<TrainingOptions>();
    }

    /// `TrainingOptions::new(RankCoordinates::SINGLE)` on rank 2 of 4 is
    /// warned about, naming both and the fix; `for_rank` of the same rank,
    /// and `SINGLE` in a single process, are not.
    #[test]
    fn options_that_disagree_with_telemetry_s_rank_are_named() {
        let rank = lens_fallbacks::RankContext { rank: 2, world_size: 4, local_rank: 2, node_rank: None };
        let single = TrainingOptions::new(RankCoordinates::SINGLE);
        assert_eq!(
            rank_mismatch(single.coordinates, single.world_size, rank).as_deref(),
            Some(
                "the training diagnosis was given rank 0 of 1 but telemetry runs as rank 2 of 4: its per-rank \
                 series, hang lines, progress record and MFU would name the wrong rank or world; build its options \
                 with TrainingOptions::for_rank(telemetry.rank())"
            )
        );
        // The right rank with the world left at 1 (MFU would count one GPU).
        let no_world = TrainingOptions::new(RankCoordinates::of(rank));
        assert!(rank_mismatch(no_world.coordinates, no_world.world_size, rank).is_some());
        // One process driving 8 GPUs: more GPUs than processes is no mistake.
        let one_process = TrainingOptions::new(RankCoordinates::SINGLE).with_world_size(8);
        let one_rank = lens_fallbacks::RankContext::SINGLE;
        assert_eq!(rank_mismatch(one_process.coordinates, one_process.world_size, one_rank), None);
        let right = TrainingOptions::for_rank(rank);
        assert_eq!(rank_mismatch(right.coordinates, right.world_size, rank), None);
        assert_eq!(rank_mismatch(single.coordinates, single.world_size, lens_fallbacks::RankContext::SINGLE), None);
    }

    #[test]
    fn event_names_round_trip_and_say_their_phase_and_bucket() {
        for event in Event::ALL {
            assert_eq!(Event::from_name(event.as_str()), Some(event));
        }
        assert_eq!(Event::CheckpointSave.phase(), Some(Phase::Checkpoint));
        assert_eq!(Event::CheckpointFinalize.bucket(), Some(Bucket::CheckpointSave));
        assert_eq!(Event::Evaluation.bucket(), Some(Bucket::Evaluation));
        assert_eq!(Event::Iteration.bucket(), None);
        assert_eq!(Event::from_name("lunch"), None);
    }
}
