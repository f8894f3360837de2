//! Goodput: where a training job's wall-clock time went, across restarts
//! (issue #13).
//!
//! Every second of an attempt's wall clock, from its launch stamp on, goes to
//! exactly one [`Bucket`]. The accounting is a pure state machine,
//! [`Accountant`], fed explicit lifecycle events with times in seconds since
//! the attempt's launch stamp (so that tests inject the times): the end of
//! startup, each completed iteration, the begin and end of a checkpoint save,
//! a checkpoint load and an evaluation, and the normal end. Time between two
//! events goes to the bucket that was current in between, so nested phases
//! (a load inside startup, an evaluation inside the loop) are never counted
//! twice and the buckets always sum to the time of the latest event.
//!
//! - `startup`: launch stamp to the start of the training loop, less any
//!   checkpoint load inside it;
//! - `pending`: loop time (iterations, logging) not yet covered by a
//!   durable checkpoint; a normal end moves it to `productive`;
//! - `productive`: what a durable checkpoint covers: a save takes note of
//!   what is pending when it begins ([`Accountant::coverage`]) and keeps it
//!   only once the checkpoint is durable ([`Accountant::checkpoint_durable`]:
//!   a synchronous save that succeeded, an asynchronous one at its
//!   finalize, once the checkpoint's iteration record is written). A save
//!   that fails keeps nothing, and iterations completed while an
//!   asynchronous save is in flight are not its to keep;
//! - `checkpoint_save`, `checkpoint_load`, `evaluation`: the loop blocked
//!   by them;
//! - `lost_progress`: a dead attempt's `pending` time, from its last
//!   durable checkpoint to its last iteration, charged when the next attempt
//!   resumes from that checkpoint ([`GoodputTotals::resume_exactly`] with the
//!   dead attempt's spool, [`GoodputTotals::resume`] without); and the loop
//!   time of the iterations an attempt throws away when it goes back to an
//!   earlier checkpoint inside its own process ([`Accountant::roll_back`]:
//!   they are computed again);
//! - `other`: the rest (after the normal end: barriers, shutdown).
//!
//! Restarts: one rank writes a [`ProgressRecord`] (the run's totals so far)
//! beside the checkpoints, atomically, at every log interval and whenever a
//! checkpoint becomes durable ([`ProgressRecord::write_atomic`], on a thread
//! of the event API's: the training thread never waits on that file system);
//! the next attempt reads it from its
//! `--load` directory ([`ProgressRecord::read`]), charges the dead
//! attempt's pending time as lost and continues the totals. Every rank also
//! writes its progress (iteration reached, last completed, last durable
//! checkpoint) into its crash-safe spool at every iteration
//! (`lens_fallbacks::spool::record_progress`); when the next attempt's setup
//! replays the dead attempt's spool, its last progress and when it was last alive
//! ([`DeadProgress`]) make the charge exact: every iteration completed after
//! the checkpoint the run resumes from is lost, at any log interval, and the
//! dead attempt's time after its last record is charged with it
//! ([`GoodputTotals::resume_exactly`]). Without the spool (`<PREFIX>_SPOOL=0`,
//! a failed mapping) the record alone is read, and lost progress is known
//! only to a log interval ([`LostPrecision::LogInterval`]): the iterations
//! and time after the last record are seen by no one.
//!
//! [`GoodputMetrics`] exports the totals as gauges on the export rank
//! (`dl.goodput.time` per bucket, `dl.goodput.ratio`), with the model FLOPs
//! utilisation of [`crate::mfu`] (`dl.training.mfu`).
//!
//! A program does not call the accountant itself: the event API
//! ([`crate::events::Training`]) feeds it, one call per training event.
//! The blocking activities are buckets ([`Bucket::CheckpointSave`],
//! [`Bucket::CheckpointLoad`], [`Bucket::Evaluation`]; see
//! [`Bucket::is_blocking`]); the phase model is [`crate::phases::Phase`].
//!
//! ```
//! use lens_training::goodput::{Accountant, Bucket, GoodputTotals};
//!
//! let mut goodput = Accountant::new(GoodputTotals::default());
//! goodput.begin(Bucket::CheckpointLoad, 1.0);
//! goodput.end(Bucket::CheckpointLoad, 3.0);
//! goodput.training_started(4.0);
//! goodput.iteration_completed(5.0);
//! goodput.iteration_completed(6.0);
//! goodput.begin(Bucket::CheckpointSave, 6.0);
//! let covers = goodput.coverage(6.0); // what is pending when the save begins
//! goodput.end(Bucket::CheckpointSave, 6.5);
//! goodput.checkpoint_durable(covers, 6.5); // it succeeded: keep what it covers
//! goodput.iteration_completed(7.5); // not covered by a durable checkpoint yet
//! let totals = goodput.snapshot(7.5);
//! assert_eq!(totals.seconds(Bucket::Startup), 2.0);
//! assert_eq!(totals.seconds(Bucket::CheckpointLoad), 2.0);
//! assert_eq!(totals.seconds(Bucket::Productive), 2.0);
//! assert_eq!(totals.seconds(Bucket::Pending), 1.0);
//! assert_eq!(totals.total_seconds(), 7.5);
//! assert_eq!((totals.productive_iterations, totals.pending_iterations), (2, 1));
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a second of wall-clock time went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bucket {
    /// Iterations whose result was kept (covered by a durable checkpoint,
    /// or completed in an attempt that ended normally).
    Productive,
    /// Iterations completed but not yet covered by a durable checkpoint.
    Pending,
    /// Launch stamp to the start of the training loop.
    Startup,
    /// The loop blocked by saving a checkpoint.
    CheckpointSave,
    /// Loading a checkpoint.
    CheckpointLoad,
    /// Evaluation.
    Evaluation,
    /// A dead attempt's pending time, charged when the next attempt resumes,
    /// and the iterations a rollback inside an attempt throws away.
    LostProgress,
    /// The rest.
    Other,
}

impl Bucket {
    /// Every bucket, in the order of the docs.
    pub const ALL: [Bucket; 8] = [
        Bucket::Productive,
        Bucket::Pending,
        Bucket::Startup,
        Bucket::CheckpointSave,
        Bucket::CheckpointLoad,
        Bucket::Evaluation,
        Bucket::LostProgress,
        Bucket::Other,
    ];

    /// The value of the `dl.goodput.bucket` attribute and the key in
    /// the progress record and the summary.
    pub const fn as_str(self) -> &'static str {
        match self {
            Bucket::Productive => "productive",
            Bucket::Pending => "pending",
            Bucket::Startup => "startup",
            Bucket::CheckpointSave => "checkpoint_save",
            Bucket::CheckpointLoad => "checkpoint_load",
            Bucket::Evaluation => "evaluation",
            Bucket::LostProgress => "lost_progress",
            Bucket::Other => "other",
        }
    }

    /// The bucket named `name` (as [`Bucket::as_str`] spells it).
    pub fn from_name(name: &str) -> Option<Bucket> {
        Bucket::ALL.into_iter().find(|bucket| bucket.as_str() == name)
    }

    const fn index(self) -> usize {
        self as usize
    }

    /// Whether this bucket is a blocking activity that
    /// [`Accountant::begin`] and [`Accountant::end`] take: a checkpoint
    /// save (its blocking part: the dispatch of an asynchronous save, or
    /// its finalize; its end keeps nothing by itself, see
    /// [`Accountant::checkpoint_durable`]), a checkpoint load, an
    /// evaluation.
    pub const fn is_blocking(self) -> bool {
        matches!(self, Bucket::CheckpointSave | Bucket::CheckpointLoad | Bucket::Evaluation)
    }
}

/// The run's totals over its attempts so far: seconds per bucket and the
/// iterations behind `productive`, `pending` and `lost_progress`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GoodputTotals {
    seconds: [f64; 8],
    /// Iterations whose result was kept.
    pub productive_iterations: u64,
    /// Iterations completed but not yet covered by a durable checkpoint.
    pub pending_iterations: u64,
    /// Iterations a crash or a rollback threw away (to be computed again).
    pub lost_iterations: u64,
    /// Attempts counted so far (this one included).
    pub attempts: u32,
    /// How exactly `lost_progress` is known: to the iteration, unless a
    /// resume had to charge a dead attempt from its progress record alone.
    pub lost_precision: LostPrecision,
}

/// How exactly a run's lost progress is known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LostPrecision {
    /// To the iteration: every dead attempt's last progress came from its
    /// spool (or nothing was lost).
    #[default]
    Iteration,
    /// To a log interval: a dead attempt was charged from its progress
    /// record alone (written at log intervals and durable checkpoints), so
    /// what it did after its last record is not counted; or this attempt
    /// writes no spool, so that is how a crash of it would be charged.
    LogInterval,
}

impl LostPrecision {
    /// Both values.
    pub const ALL: [LostPrecision; 2] = [LostPrecision::Iteration, LostPrecision::LogInterval];

    /// The value in the progress record and the summary: `iteration` or
    /// `log_interval`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LostPrecision::Iteration => "iteration",
            LostPrecision::LogInterval => "log_interval",
        }
    }

    /// The value named `name` (as [`LostPrecision::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<LostPrecision> {
        LostPrecision::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The less exact of the two.
    #[must_use]
    pub fn worst(self, other: LostPrecision) -> LostPrecision {
        if self == LostPrecision::LogInterval || other == LostPrecision::LogInterval {
            LostPrecision::LogInterval
        } else {
            LostPrecision::Iteration
        }
    }

    /// What a report says: `lost progress known to the iteration` or `lost
    /// progress known only to a log interval`.
    pub const fn describe(self) -> &'static str {
        match self {
            LostPrecision::Iteration => "lost progress known to the iteration",
            LostPrecision::LogInterval => "lost progress known only to a log interval (no spool)",
        }
    }
}

/// What a dead attempt's spool said at its end (replayed by the next
/// attempt's setup; `lens_fallbacks::spool::replayed_progress`): its last
/// completed iteration, and how long it lived after its last progress record.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeadProgress {
    /// The last iteration it completed (`None`: none).
    pub completed: Option<u64>,
    /// The last time it was known alive minus the time its progress record
    /// was written, in seconds (0 when not known; negative or non-finite
    /// counts as 0).
    pub unseen_seconds: f64,
}

impl GoodputTotals {
    /// The seconds in `bucket`.
    pub fn seconds(&self, bucket: Bucket) -> f64 {
        self.seconds[bucket.index()]
    }

    /// Sets the seconds in `bucket` (negative or non-finite values become 0).
    pub fn set_seconds(&mut self, bucket: Bucket, seconds: f64) {
        self.seconds[bucket.index()] = if seconds.is_finite() { seconds.max(0.0) } else { 0.0 };
    }

    /// Every bucket with its seconds, in [`Bucket::ALL`] order.
    pub fn buckets(&self) -> impl Iterator<Item = (Bucket, f64)> + '_ {
        Bucket::ALL.into_iter().map(|bucket| (bucket, self.seconds(bucket)))
    }

    /// The sum of the buckets: the wall time of the attempts so far.
    pub fn total_seconds(&self) -> f64 {
        self.seconds.iter().sum()
    }

    /// Goodput: `productive` over the total, or `None` before any time
    /// was counted.
    pub fn ratio(&self) -> Option<f64> {
        let total = self.total_seconds();
        (total > 0.0).then(|| self.seconds(Bucket::Productive) / total)
    }

    /// The totals a new attempt continues from, given the previous
    /// attempt's (from its progress record): its `pending` time and
    /// iterations become `lost_progress` (they were not covered by the
    /// checkpoint the new attempt resumes from), and the attempt count goes
    /// up by one. After a normal end there is nothing pending, so nothing is
    /// lost.
    ///
    /// This is the charge without the dead attempt's spool: what it did
    /// after its last record is not seen ([`ProgressRecord::resume_totals`]
    /// says so in [`GoodputTotals::lost_precision`]; use
    /// [`GoodputTotals::resume_exactly`] when the spool was replayed).
    #[must_use]
    pub fn resume(mut self) -> GoodputTotals {
        self.seconds[Bucket::LostProgress.index()] += self.seconds[Bucket::Pending.index()];
        self.seconds[Bucket::Pending.index()] = 0.0;
        self.lost_iterations = self.lost_iterations.saturating_add(self.pending_iterations);
        self.pending_iterations = 0;
        self
    }

    /// The totals a new attempt continues from, given the previous
    /// attempt's (from its progress record, written after it completed
    /// `record_iteration`), the checkpoint the new attempt resumes from
    /// (`resumed`) and what the dead attempt's spool said at its end
    /// (`dead`). Lost progress is exact, at any log interval: every iteration
    /// it completed after `resumed` is lost; the ones up to `resumed` that the
    /// record still had pending (a checkpoint that became durable after the
    /// record) are kept. Its time after the record (`dead.unseen_seconds`)
    /// joins its pending time, which the two share in proportion to their
    /// iterations; with nothing pending it goes to `other`. The attempt count
    /// goes up by one.
    ///
    /// ```
    /// use lens_training::goodput::{Bucket, DeadProgress, GoodputTotals, LostPrecision};
    ///
    /// // A record written at iteration 10, when the checkpoint of 10 became
    /// // durable (nothing pending); the attempt then died after completing
    /// // 17, 6.5 s later. The next attempt resumes from 10.
    /// let mut record = GoodputTotals::default();
    /// record.productive_iterations = 10;
    /// record.set_seconds(Bucket::Productive, 10.0);
    /// let dead = DeadProgress { completed: Some(17), unseen_seconds: 6.5 };
    /// let resumed = record.resume_exactly(10, 10, dead);
    /// assert_eq!((resumed.lost_iterations, resumed.productive_iterations), (7, 10));
    /// assert_eq!(resumed.seconds(Bucket::LostProgress), 6.5);
    /// assert_eq!(resumed.lost_precision, LostPrecision::Iteration);
    /// // From the record alone, nothing would be lost.
    /// assert_eq!(record.resume().lost_iterations, 0);
    /// ```
    #[must_use]
    pub fn resume_exactly(mut self, record_iteration: u64, resumed: u64, dead: DeadProgress) -> GoodputTotals {
        let completed = dead.completed.unwrap_or(0).max(record_iteration);
        let unseen = if dead.unseen_seconds.is_finite() { dead.unseen_seconds.max(0.0) } else { 0.0 };
        let pending_iterations = self.pending_iterations.saturating_add(completed - record_iteration);
        let lost = completed.saturating_sub(resumed).min(pending_iterations);
        let kept = pending_iterations - lost;
        if pending_iterations == 0 {
            self.seconds[Bucket::Other.index()] += unseen;
        } else {
            let pending_seconds = self.seconds[Bucket::Pending.index()] + unseen;
            let kept_seconds = pending_seconds * kept as f64 / pending_iterations as f64;
            self.seconds[Bucket::Productive.index()] += kept_seconds;
            self.seconds[Bucket::LostProgress.index()] += pending_seconds - kept_seconds;
        }
        self.seconds[Bucket::Pending.index()] = 0.0;
        self.productive_iterations = self.productive_iterations.saturating_add(kept);
        self.lost_iterations = self.lost_iterations.saturating_add(lost);
        self.pending_iterations = 0;
        self
    }

    fn add(&mut self, other: &GoodputTotals) {
        for (mine, theirs) in self.seconds.iter_mut().zip(other.seconds) {
            *mine += theirs;
        }
        self.productive_iterations = self.productive_iterations.saturating_add(other.productive_iterations);
        self.pending_iterations = self.pending_iterations.saturating_add(other.pending_iterations);
        self.lost_iterations = self.lost_iterations.saturating_add(other.lost_iterations);
        self.lost_precision = self.lost_precision.worst(other.lost_precision);
    }
}

/// The largest count a progress record may hold (2^53, the largest integer
/// every JSON reader keeps exact): a larger one is a damaged file, and
/// reading it fails instead of charging absurd totals.
const MAX_RECORD_COUNT: u64 = 1 << 53;

/// Nesting deeper than this is counted in the innermost tracked phase.
const MAX_DEPTH: usize = 4;

/// What a checkpoint keeps once it is durable: the iterations completed and
/// the loop time spent before its save began ([`Accountant::coverage`]).
/// Opaque; only [`Accountant::checkpoint_durable`] reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Coverage {
    iterations: u64,
    seconds: f64,
}

/// One attempt's goodput state machine; see the module documentation.
///
/// Times are seconds since the attempt's launch stamp, from one clock; a
/// time earlier than the latest one seen counts as the latest (nothing is
/// ever negative). It allocates nothing and costs a few additions per event.
///
/// The credit rule: loop time and iterations are `pending` until a durable
/// checkpoint covers them. A save asks for its [`Coverage`] when it begins
/// (everything completed so far) and hands it to
/// [`Accountant::checkpoint_durable`] once the checkpoint exists; a save
/// that fails never does, and what it would have covered stays pending
/// (lost, if the attempt then dies).
///
/// ```
/// use lens_training::goodput::{Accountant, Bucket, GoodputTotals};
///
/// let mut goodput = Accountant::new(GoodputTotals::default());
/// goodput.training_started(0.0);
/// goodput.iteration_completed(1.0);
/// // An asynchronous save of iteration 1: dispatched, then finalized later.
/// goodput.begin(Bucket::CheckpointSave, 1.0);
/// let covers = goodput.coverage(1.0);
/// goodput.end(Bucket::CheckpointSave, 1.25);
/// goodput.iteration_completed(2.25); // while the write is in flight
/// assert_eq!(goodput.snapshot(2.25).productive_iterations, 0, "nothing kept before the finalize");
/// goodput.checkpoint_durable(covers, 2.25);
/// let totals = goodput.snapshot(2.25);
/// assert_eq!((totals.productive_iterations, totals.pending_iterations), (1, 1));
/// ```
#[derive(Clone, Debug)]
pub struct Accountant {
    prior: GoodputTotals,
    /// This attempt's seconds outside the loop's own time (`productive` and
    /// `pending` are derived from `completed` and `kept`).
    attempt: GoodputTotals,
    /// The loop time and iterations of this attempt so far.
    completed: Coverage,
    /// The part of `completed` that a durable checkpoint or the normal end kept.
    kept: Coverage,
    cursor: f64,
    base: Bucket,
    stack: [Bucket; MAX_DEPTH],
    depth: usize,
    overflow: usize,
}

impl Accountant {
    /// An attempt at its launch stamp (time 0), in startup, continuing from
    /// `prior` (the earlier attempts' totals, already
    /// [resumed](GoodputTotals::resume); the default for a fresh run).
    pub fn new(prior: GoodputTotals) -> Accountant {
        let mut prior = prior;
        prior.attempts = prior.attempts.saturating_add(1);
        Accountant {
            prior,
            attempt: GoodputTotals::default(),
            completed: Coverage::default(),
            kept: Coverage::default(),
            cursor: 0.0,
            base: Bucket::Startup,
            stack: [Bucket::Other; MAX_DEPTH],
            depth: 0,
            overflow: 0,
        }
    }

    fn current(&self) -> Bucket {
        if self.depth == 0 { self.base } else { self.stack[self.depth - 1] }
    }

    /// Gives the time since the previous event to the current bucket.
    #[inline]
    fn advance(&mut self, now: f64) {
        if now > self.cursor {
            match self.current() {
                Bucket::Pending => self.completed.seconds += now - self.cursor,
                bucket => self.attempt.seconds[bucket.index()] += now - self.cursor,
            }
            self.cursor = now;
        }
    }

    /// The blocking activity `bucket` begins at `now` (a bucket that is
    /// not [blocking](Bucket::is_blocking) only advances the clock).
    pub fn begin(&mut self, bucket: Bucket, now: f64) {
        self.advance(now);
        if !bucket.is_blocking() {
            return;
        }
        if self.depth < MAX_DEPTH {
            self.stack[self.depth] = bucket;
            self.depth += 1;
        } else {
            self.overflow += 1;
        }
    }

    /// The blocking activity `bucket` ends at `now`. An end without its begin only advances the
    /// clock. Activities that end out of order (an evaluation's guard
    /// dropped while a save inside it is still open) each end their own
    /// entry: the innermost open `bucket`, wherever it is. The end of a
    /// save keeps nothing: a save's iterations are kept by
    /// [`Accountant::checkpoint_durable`].
    pub fn end(&mut self, bucket: Bucket, now: f64) {
        self.advance(now);
        if !bucket.is_blocking() {
            return;
        }
        if self.overflow > 0 {
            self.overflow -= 1;
        } else if let Some(at) = self.stack[..self.depth].iter().rposition(|open| *open == bucket) {
            self.stack.copy_within(at + 1..self.depth, at);
            self.depth -= 1;
        }
    }

    /// What a checkpoint whose save begins at `now` covers: every iteration
    /// completed so far and the loop time behind them. Keep it with the
    /// save and hand it to [`Accountant::checkpoint_durable`] once the
    /// checkpoint is durable.
    pub fn coverage(&mut self, now: f64) -> Coverage {
        self.advance(now);
        self.completed
    }

    /// The checkpoint that covers `coverage` is durable at `now` (a
    /// synchronous save succeeded; an asynchronous one was finalized, its
    /// iteration record written): what it covers moves from `pending` to
    /// `productive`. Iterations completed after its save began stay
    /// pending; a checkpoint older than one already durable keeps nothing
    /// more.
    pub fn checkpoint_durable(&mut self, coverage: Coverage, now: f64) {
        self.advance(now);
        self.kept.iterations = self.kept.iterations.max(coverage.iterations.min(self.completed.iterations));
        self.kept.seconds = self.kept.seconds.max(coverage.seconds.min(self.completed.seconds));
    }

    /// Startup ends at `now`: from here on, loop time is `pending`.
    pub fn training_started(&mut self, now: f64) {
        self.advance(now);
        if self.base == Bucket::Startup {
            self.base = Bucket::Pending;
        }
    }

    /// An iteration completed at `now`.
    #[inline]
    pub fn iteration_completed(&mut self, now: f64) {
        if self.base == Bucket::Startup {
            self.training_started(now);
        } else {
            self.advance(now);
        }
        self.completed.iterations += 1;
    }

    /// The attempt ended normally at `now`: what is pending is kept, and the
    /// time after this goes to `other`.
    pub fn finish(&mut self, now: f64) {
        self.advance(now);
        self.kept = self.completed;
        self.base = Bucket::Other;
        self.depth = 0;
        self.overflow = 0;
    }

    /// The run's totals at `now`: the earlier attempts', plus this one's,
    /// with the time since the last event in the current bucket. The
    /// buckets sum to the earlier attempts' time plus `now` (or the latest
    /// event's time, when later).
    pub fn snapshot(&self, now: f64) -> GoodputTotals {
        let mut attempt = self.attempt;
        let mut completed = self.completed;
        if self.current() == Bucket::Pending && now > self.cursor {
            completed.seconds += now - self.cursor;
        }
        attempt.seconds[Bucket::Productive.index()] = self.kept.seconds;
        attempt.seconds[Bucket::Pending.index()] = (completed.seconds - self.kept.seconds).max(0.0);
        attempt.productive_iterations = self.kept.iterations;
        attempt.pending_iterations = completed.iterations - self.kept.iterations;
        let current = self.current();
        if current != Bucket::Pending && now > self.cursor {
            attempt.seconds[current.index()] += now - self.cursor;
        }
        let mut totals = self.prior;
        totals.add(&attempt);
        totals
    }

    /// Continues from `prior` (the earlier attempts' totals, already
    /// [resumed](GoodputTotals::resume)) instead of what [`Accountant::new`]
    /// was given: for a resume that is known only once the checkpoint is
    /// found, inside startup.
    pub fn continue_from(&mut self, prior: GoodputTotals) {
        self.prior = prior;
        self.prior.attempts = self.prior.attempts.saturating_add(1);
    }

    /// The earlier attempts' totals this attempt continues from.
    pub fn prior(&self) -> &GoodputTotals {
        &self.prior
    }

    /// This attempt goes back, inside its own process, to an earlier
    /// checkpoint that covers `to` (the [`Coverage`] that checkpoint's save
    /// took; [`Coverage::default`] for the checkpoint the attempt started
    /// from; [`Accountant::coverage_of`] for one whose save it did not see),
    /// at `now`: a rollback (after a loss spike, say). What it completed
    /// after `to` will be computed again: those iterations and their loop
    /// time move to `lost_progress`, whether a newer checkpoint had kept them
    /// or they were pending, and what `to` covers is kept (the checkpoint
    /// exists). The attempt count does not change, and no time is added or
    /// dropped: the buckets still sum to the attempts' time.
    ///
    /// (A resume in a new process is [`Accountant::continue_from`] with the
    /// dead attempt's totals, [resumed](GoodputTotals::resume_exactly).)
    ///
    /// ```
    /// use lens_training::goodput::{Accountant, Bucket, GoodputTotals};
    ///
    /// let mut goodput = Accountant::new(GoodputTotals::default());
    /// goodput.training_started(0.0);
    /// goodput.iteration_completed(1.0);
    /// goodput.iteration_completed(2.0);
    /// let second = goodput.coverage(2.0); // the save of iteration 2
    /// goodput.checkpoint_durable(second, 2.0);
    /// for now in [3.0, 4.0, 5.0] {
    ///     goodput.iteration_completed(now);
    /// }
    /// goodput.roll_back(second, 5.0); // iterations 3 to 5 are computed again
    /// let totals = goodput.snapshot(5.0);
    /// assert_eq!((totals.productive_iterations, totals.lost_iterations, totals.pending_iterations), (2, 3, 0));
    /// assert_eq!((totals.seconds(Bucket::Productive), totals.seconds(Bucket::LostProgress)), (2.0, 3.0));
    /// assert_eq!((totals.total_seconds(), totals.attempts), (5.0, 1));
    /// ```
    pub fn roll_back(&mut self, to: Coverage, now: f64) {
        self.advance(now);
        let to = Coverage {
            iterations: to.iterations.min(self.completed.iterations),
            seconds: to.seconds.clamp(0.0, self.completed.seconds),
        };
        self.attempt.seconds[Bucket::LostProgress.index()] += self.completed.seconds - to.seconds;
        self.attempt.lost_iterations =
            self.attempt.lost_iterations.saturating_add(self.completed.iterations - to.iterations);
        self.completed = to;
        self.kept = to;
    }

    /// An estimate of what the first `iterations` this attempt completed
    /// cover, for [`Accountant::roll_back`] to a checkpoint whose save this
    /// attempt did not see: those iterations (at most all it completed) and
    /// their share of its loop time, in proportion.
    pub fn coverage_of(&self, iterations: u64) -> Coverage {
        let iterations = iterations.min(self.completed.iterations);
        let seconds = if iterations == self.completed.iterations {
            self.completed.seconds
        } else {
            self.completed.seconds * iterations as f64 / self.completed.iterations as f64
        };
        Coverage { iterations, seconds }
    }

    /// A rollback to a checkpoint older than this attempt's first: the
    /// last `iterations` that earlier attempts kept will be computed again.
    /// They move from the earlier attempts' `productive` to `lost_progress`
    /// (at most all they kept), with their share of its time, in proportion.
    pub fn forfeit_earlier(&mut self, iterations: u64) {
        let prior = &mut self.prior;
        let forfeit = iterations.min(prior.productive_iterations);
        if forfeit == 0 {
            return;
        }
        let productive = prior.seconds[Bucket::Productive.index()];
        let seconds = productive * forfeit as f64 / prior.productive_iterations as f64;
        prior.seconds[Bucket::Productive.index()] = (productive - seconds).max(0.0);
        prior.seconds[Bucket::LostProgress.index()] += seconds;
        prior.productive_iterations -= forfeit;
        prior.lost_iterations = prior.lost_iterations.saturating_add(forfeit);
    }
}

/// The file name of the progress record, in the `--save` directory.
pub const PROGRESS_RECORD_FILE: &str = "goodput.json";

/// The `schema` field of a progress record.
pub const PROGRESS_RECORD_SCHEMA: &str = "dl.goodput.progress/1";

/// The `schema` of records written before the rename (SPEC A21): read
/// alike, so that a resume continues a run started by an older version.
pub const LEGACY_PROGRESS_RECORD_SCHEMA: &str = "megatron.goodput.progress/1";

/// What an attempt leaves beside its checkpoints so that the next one can
/// charge the lost time and continue the totals (written by global rank 0).
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressRecord {
    /// The run id (a record of another run is not continued).
    pub run_id: String,
    /// The last iteration completed when the record was written.
    pub iteration: u64,
    /// The iteration of the latest durable checkpoint, if any.
    pub checkpoint_iteration: Option<u64>,
    /// The run's totals when the record was written.
    pub totals: GoodputTotals,
    /// When the record was taken, the time of its totals (`None` in a record
    /// of an older version; the event API's writer thread writes it just
    /// after): the dead attempt's time after it, to when its spool says it
    /// was last alive, is charged at the resume.
    pub written_at: Option<SystemTime>,
    /// Whether the attempt that wrote it had ended normally (nothing
    /// pending, nothing to charge).
    pub normal_end: bool,
}

impl DeadProgress {
    /// The dead attempt's progress from its spool: its last `completed`
    /// iteration and the last time it was known alive (the later of its
    /// spool's last progress write and last-alive stamp), against the
    /// progress record it left (`record_written_at`). `None` when the spool
    /// cannot be the record's writer's: it was last alive more than
    /// [`SPOOL_STALENESS`] before the record was written (a spool of an
    /// earlier attempt, left beside a later attempt's record).
    pub fn from_spool(
        completed: Option<u64>,
        last_alive: SystemTime,
        record_written_at: Option<SystemTime>,
    ) -> Option<DeadProgress> {
        let Some(written) = record_written_at else { return Some(DeadProgress { completed, unseen_seconds: 0.0 }) };
        match last_alive.duration_since(written) {
            Ok(after) => Some(DeadProgress { completed, unseen_seconds: after.as_secs_f64() }),
            Err(before) if before.duration() <= SPOOL_STALENESS => {
                Some(DeadProgress { completed, unseen_seconds: 0.0 })
            }
            Err(_) => None,
        }
    }
}

/// How long before a progress record was written its writer's spool may
/// last have been alive and still be its writer's (the last-alive stamp is
/// refreshed every second).
pub const SPOOL_STALENESS: Duration = Duration::from_secs(3);

/// Why a progress record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file exists but could not be read, or could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The content is not a progress record this version understands.
    #[error(
        "{path} is not a goodput progress record ({problem}); expected JSON with \"schema\": \"{PROGRESS_RECORD_SCHEMA}\""
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

impl ProgressRecord {
    /// The record as JSON (one object; see `docs/goodput.md`).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\n");
        let _ = writeln!(out, "  \"schema\": \"{PROGRESS_RECORD_SCHEMA}\",");
        let _ = writeln!(out, "  \"run_id\": {},", serde_json::Value::from(self.run_id.as_str()));
        let _ = writeln!(out, "  \"iteration\": {},", self.iteration);
        match self.checkpoint_iteration {
            Some(it) => writeln!(out, "  \"checkpoint_iteration\": {it},"),
            None => writeln!(out, "  \"checkpoint_iteration\": null,"),
        }
        .ok();
        let t = &self.totals;
        let _ = writeln!(out, "  \"attempts\": {},", t.attempts);
        let _ = writeln!(out, "  \"productive_iterations\": {},", t.productive_iterations);
        let _ = writeln!(out, "  \"pending_iterations\": {},", t.pending_iterations);
        let _ = writeln!(out, "  \"lost_iterations\": {},", t.lost_iterations);
        let _ = writeln!(out, "  \"lost_precision\": \"{}\",", t.lost_precision.as_str());
        let _ = writeln!(out, "  \"normal_end\": {},", self.normal_end);
        if let Some(at) = self.written_at {
            let seconds = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
            let _ = writeln!(out, "  \"written_unix_s\": {},", serde_json::Value::from(seconds));
        }
        out.push_str("  \"seconds\": {");
        for (i, (bucket, seconds)) in t.buckets().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(out, "{sep}\"{}\": {}", bucket.as_str(), serde_json::Value::from(seconds));
        }
        out.push_str("}\n}\n");
        out
    }

    /// Parses a record written by [`ProgressRecord::to_json`]; `path` is for
    /// the error only.
    pub fn from_json(text: &str, path: &Path) -> Result<ProgressRecord, RecordError> {
        let invalid = |problem: String| RecordError::Invalid { path: path.to_path_buf(), problem };
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let schema = value.get("schema").and_then(|s| s.as_str()).unwrap_or("");
        if schema != PROGRESS_RECORD_SCHEMA && schema != LEGACY_PROGRESS_RECORD_SCHEMA {
            return Err(invalid(format!("schema {schema:?}")));
        }
        let count = |key: &str| -> Result<u64, RecordError> {
            let found = value.get(key).ok_or_else(|| invalid(format!("no count {key:?}")))?;
            let count =
                found.as_u64().ok_or_else(|| invalid(format!("{key} is {found}; expected a count, 0 or more")))?;
            if count > MAX_RECORD_COUNT {
                return Err(invalid(format!("{key} is {count}; expected a count of at most {MAX_RECORD_COUNT}")));
            }
            Ok(count)
        };
        let mut totals = GoodputTotals {
            productive_iterations: count("productive_iterations")?,
            pending_iterations: count("pending_iterations")?,
            lost_iterations: count("lost_iterations")?,
            attempts: u32::try_from(count("attempts")?).map_err(|_| invalid("attempts out of range".into()))?,
            ..GoodputTotals::default()
        };
        let seconds = value.get("seconds").ok_or_else(|| invalid("no \"seconds\"".into()))?;
        for bucket in Bucket::ALL {
            let v = seconds
                .get(bucket.as_str())
                .and_then(serde_json::Value::as_f64)
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| invalid(format!("seconds.{} is not a non-negative number", bucket.as_str())))?;
            totals.set_seconds(bucket, v);
        }
        // Added with the spool (issue 22); absent from older records, whose
        // losses were charged from the record alone.
        totals.lost_precision = match value.get("lost_precision") {
            None | Some(serde_json::Value::Null) if totals.lost_iterations == 0 => LostPrecision::Iteration,
            None | Some(serde_json::Value::Null) => LostPrecision::LogInterval,
            Some(v) => v
                .as_str()
                .and_then(LostPrecision::from_name)
                .ok_or_else(|| invalid(format!("lost_precision is {v}; expected \"iteration\" or \"log_interval\"")))?,
        };
        let written_at = match value.get("written_unix_s") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => {
                let seconds = v.as_f64().filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e11);
                let seconds = seconds.ok_or_else(|| invalid("written_unix_s is not a time in seconds".into()))?;
                Some(UNIX_EPOCH + Duration::from_secs_f64(seconds))
            }
        };
        let checkpoint_iteration = match value.get("checkpoint_iteration") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| invalid("checkpoint_iteration is not a count".into()))?),
        };
        Ok(ProgressRecord {
            run_id: value.get("run_id").and_then(|s| s.as_str()).unwrap_or("").to_string(),
            iteration: count("iteration")?,
            checkpoint_iteration,
            totals,
            written_at,
            normal_end: value.get("normal_end").and_then(serde_json::Value::as_bool).unwrap_or(false),
        })
    }

    /// The totals the attempt resuming from the checkpoint of `resumed`
    /// continues from. With the dead attempt's spool (`dead`), the charge is
    /// exact ([`GoodputTotals::resume_exactly`]); without, its pending time
    /// and iterations at this record are lost ([`GoodputTotals::resume`]) and
    /// what it did after the record is not seen: lost progress is then known
    /// only to a log interval ([`LostPrecision::LogInterval`]), unless the
    /// attempt ended normally (nothing was pending).
    ///
    /// ```
    /// use lens_training::goodput::{DeadProgress, GoodputTotals, LostPrecision, ProgressRecord};
    ///
    /// // Checkpoint 10 durable at iteration 10 (its record), then a crash
    /// // after iteration 17 at the default log interval of 10.
    /// let mut totals = GoodputTotals::default();
    /// totals.productive_iterations = 10;
    /// let record = ProgressRecord {
    ///     run_id: "r".into(),
    ///     iteration: 10,
    ///     checkpoint_iteration: Some(10),
    ///     totals,
    ///     written_at: None,
    ///     normal_end: false,
    /// };
    /// let exact = record.resume_totals(10, Some(DeadProgress { completed: Some(17), unseen_seconds: 7.0 }));
    /// assert_eq!((exact.lost_iterations, exact.lost_precision), (7, LostPrecision::Iteration));
    /// let rough = record.resume_totals(10, None);
    /// assert_eq!((rough.lost_iterations, rough.lost_precision), (0, LostPrecision::LogInterval));
    /// ```
    pub fn resume_totals(&self, resumed: u64, dead: Option<DeadProgress>) -> GoodputTotals {
        match dead {
            Some(dead) => self.totals.resume_exactly(self.iteration, resumed, dead),
            None => {
                let mut totals = self.totals.resume();
                if !self.normal_end {
                    totals.lost_precision = LostPrecision::LogInterval;
                }
                totals
            }
        }
    }

    /// Writes the record to `dir`/[`PROGRESS_RECORD_FILE`] atomically: a
    /// temporary file in the same directory, then a rename, so a crash
    /// leaves the previous record or the new one, never half of one.
    pub fn write_atomic(&self, dir: &Path) -> Result<(), RecordError> {
        let path = dir.join(PROGRESS_RECORD_FILE);
        let temp = dir.join(format!(".{PROGRESS_RECORD_FILE}.tmp{}", std::process::id()));
        let io = |source| RecordError::Io { path: path.clone(), source };
        std::fs::write(&temp, self.to_json()).map_err(io)?;
        std::fs::rename(&temp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            io(e)
        })
    }

    /// Reads `dir`/[`PROGRESS_RECORD_FILE`]: `Ok(None)` when there is none
    /// (a checkpoint directory of a run without goodput accounting).
    ///
    /// Only a regular file of at most [`MAX_PROGRESS_RECORD_BYTES`] is read:
    /// a FIFO at its name would block the resume forever in `open`, and a
    /// device (`/dev/zero` through a link) would fill the job's memory. The
    /// open is non-blocking, the opened file is checked, and the read stops
    /// past the cap.
    pub fn read(dir: &Path) -> Result<Option<ProgressRecord>, RecordError> {
        let path = dir.join(PROGRESS_RECORD_FILE);
        match read_regular(&path) {
            Ok(text) => ProgressRecord::from_json(&text, &path).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(RecordError::Io { path, source }),
        }
    }
}

/// The most a progress record may hold: 1 MiB (a record is under 1 KiB).
pub const MAX_PROGRESS_RECORD_BYTES: u64 = 1 << 20;

/// The text of the regular file at `path`, at most
/// [`MAX_PROGRESS_RECORD_BYTES`] ([`read_bounded`](lens_fallbacks::control::read_bounded));
/// anything else is an error saying what is there ("it is a FIFO (named
/// pipe), not a regular file").
fn read_regular(path: &Path) -> std::io::Result<String> {
    use lens_fallbacks::control::{BoundedReadError, read_bounded};
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let bytes = read_bounded(path, MAX_PROGRESS_RECORD_BYTES, true).map_err(|error| match error {
        BoundedReadError::Io(error) => error,
        BoundedReadError::NotRegular(kind) => invalid(format!("it is {kind}, not a regular file")),
        BoundedReadError::TooLong(length) => invalid(format!(
            "it is {length} bytes long, more than the {MAX_PROGRESS_RECORD_BYTES} bytes (1 MiB) a progress record \
             may hold"
        )),
        BoundedReadError::Grew => {
            invalid(format!("it grew past {MAX_PROGRESS_RECORD_BYTES} bytes (1 MiB) while being read"))
        }
    })?;
    String::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text".to_string()))
}

pub use crate::names::{BUCKET_ATTRIBUTE, GOODPUT_METRICS, GOODPUT_RATIO, GOODPUT_TIME, MFU as TRAINING_MFU};

/// The goodput gauges and the MFU gauge, created once from a meter (on the
/// export rank; elsewhere [`GoodputMetrics::noop`]). One definition on lens's
/// metric handles: without the `otel` feature every handle is a no-op.
#[derive(Debug)]
pub struct GoodputMetrics {
    instruments: Option<GoodputInstruments>,
}

#[derive(Debug)]
struct GoodputInstruments {
    time: lens_fallbacks::Gauge<f64>,
    ratio: lens_fallbacks::Gauge<f64>,
    mfu: lens_fallbacks::Gauge<f64>,
    bucket_attributes: [[lens_fallbacks::KeyValue; 1]; 8],
}

impl GoodputMetrics {
    /// Creates the three gauges on `meter` (lens's meter, or anything that
    /// converts into it).
    pub fn new<M: Clone + Into<lens_fallbacks::Meter>>(meter: &M) -> GoodputMetrics {
        let meter: lens_fallbacks::Meter = meter.clone().into();
        let mut time = meter.f64_gauge(GOODPUT_TIME.name).with_description(GOODPUT_TIME.description);
        if let Some(unit) = GOODPUT_TIME.unit {
            time = time.with_unit(unit);
        }
        let instruments = GoodputInstruments {
            time: time.build(),
            ratio: meter.f64_gauge(GOODPUT_RATIO.name).with_description(GOODPUT_RATIO.description).build(),
            mfu: meter.f64_gauge(TRAINING_MFU.name).with_description(TRAINING_MFU.description).build(),
            bucket_attributes: Bucket::ALL.map(|b| [lens_fallbacks::KeyValue::new(BUCKET_ATTRIBUTE, b.as_str())]),
        };
        GoodputMetrics { instruments: Some(instruments) }
    }

    /// A handle that records nothing.
    pub const fn noop() -> GoodputMetrics {
        GoodputMetrics { instruments: None }
    }

    /// Whether this handle records nothing.
    pub fn is_noop(&self) -> bool {
        self.instruments.is_none()
    }

    /// Records every bucket's total, the ratio (when time was counted) and
    /// the MFU (when known).
    pub fn record(&self, totals: &GoodputTotals, mfu: Option<f64>) {
        let Some(i) = &self.instruments else { return };
        for (bucket, attributes) in Bucket::ALL.into_iter().zip(&i.bucket_attributes) {
            i.time.record(totals.seconds(bucket), attributes);
        }
        if let Some(ratio) = totals.ratio() {
            i.ratio.record(ratio, &[]);
        }
        if let Some(mfu) = mfu {
            i.mfu.record(mfu, &[]);
        }
    }
}
