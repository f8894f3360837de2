//! Straggler attribution from the per-rank metrics, outside the job: which
//! rank is slow, in which phase, by how much, per window.
//!
//! It reads the cumulative counters (`dl.training.phase_time` and
//! `dl.training.iterations`, [`crate::rank_metrics`]) and, for exports
//! written before the rename (SPEC A21), the old per-interval gauges
//! (`megatron.rank.phase_duration_ms`, `.step_duration_ms`, `.iteration`,
//! attribute `megatron.phase`). Counters are differenced between a rank's
//! successive exports: each rank's cumulative phase time is interpolated,
//! in iteration space, at a grid of iterations common to every rank (the
//! grid step is the largest of the ranks' typical spacing between exports),
//! so that the ranks' intervals line up however their exports fell; an
//! interval's value is the time added in the phase over the iterations
//! added, in ms per iteration. A rank's first export is where its
//! differences start (what came before it, warm-up included, is in no
//! interval), so a window says what happened in that window only.
//!
//! # Restarts
//!
//! A job restarted under the same run id appends to the same files, and its
//! counters start again from zero. A rank's counters have restarted when
//! its iterations or any phase time went down, or when the counters' start
//! time (`startTimeUnixNano`) changed; the old gauges, when the iteration
//! went back. From there the rank's records belong to a later *attempt*
//! ([`RankInterval::attempt`]): the export after a restart starts a new
//! series, and the iterations of an attempt's counters count from its
//! start. Windows never span two attempts.
//!
//! Attempts are numbered across ranks, from the counters' times: a series
//! lasts from its start (`startTimeUnixNano`; the first export when the
//! start time did not change) to its last export, and series of any ranks
//! whose lifetimes overlap, directly or through others, are one attempt (a
//! job's processes all end before its restart's begin; a rank that starts
//! late still starts while its peers run). So a rank that exported nothing
//! during one attempt (it died before its first export) still lines up
//! with its peers in the next, and the attempt it missed is judged on the
//! ranks that reported in it: an interval is complete when every rank with
//! an interval in its attempt has one there. A rank's own later series is
//! always a later attempt: counters that went down within one process
//! (their start time unchanged, which lens's own counters never do) start
//! an attempt of their own, numbered before the job's next restart. Once a
//! collection's iterations counter lacks a start or collection time (0),
//! no lifetimes are told: from there each rank counts its own restarts, as
//! the old gauges do.
//!
//! # The rule
//!
//! A data-parallel all-reduce equalises step times, so comparing step
//! durations finds nothing: the culprit is the rank that arrives late and
//! therefore waits least. The rule, per window of [`WINDOW_INTERVALS`] log
//! intervals and per peer group (ranks with the same pipeline stage and
//! tensor-parallel position, across data-parallel replicas; groups of at
//! least two):
//!
//! 1. each rank's value of a phase in the window is the median, over the
//!    window's intervals, of its mean per iteration; its *wait* is the sum of
//!    its `dp_wait`, `pp_wait` and `tp_wait`;
//! 2. the candidate is the rank with the least wait;
//! 3. its peers' median wait minus its wait must exceed the threshold (its
//!    peers wait for it);
//! 4. in some compute phase (`data`, `forward`, `backward`, `optimizer`) it
//!    must exceed its peers' median by the threshold too (so a pipeline rank
//!    that merely waits less for its upstream stage is not blamed); the
//!    phase where it exceeds them most is the cause, and that excess is its
//!    lateness in ms per iteration.
//!
//! The threshold is [`THRESHOLD_MS`] ms per iteration or
//! [`THRESHOLD_SHARE`] of the peers' median step time, whichever is larger.
//!
//! # Two readers, one windowing
//!
//! The input is [`lens_fallbacks::otlp_file`]'s points from a directory of
//! `metrics-rank<N>.jsonl` files. [`rank_intervals`] and [`analyze`] take
//! every point at once; `lens analyze` streams the files through the same
//! parts, one collection (one line of a file) at a time: [`GridStep`] in a
//! first reading (the grid and the ranks), [`IntervalReader`] in a second
//! (each rank's intervals as its collections arrive) and [`Windows`] (the
//! complete intervals, windowed and judged). [`write_section`] prints the
//! viewer's "stragglers" section.
//!
//! ```
//! use lens_training::stragglers::{analyze_compared, rank_intervals, write_section};
//!
//! // Every point of the export's metrics files (here, none).
//! let points: Vec<lens_fallbacks::otlp_file::MetricPoint> = Vec::new();
//! let (findings, compared) = analyze_compared(&rank_intervals(&points));
//! let mut out = Vec::new();
//! write_section(&mut out, &findings, compared, 4).unwrap();
//! assert!(String::from_utf8(out).unwrap().contains("  not judged: no log interval has every rank's record"));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use lens_fallbacks::otlp_file::MetricPoint;
use lens_fallbacks::semconv;

use crate::names::{ITERATIONS, PHASE_ATTRIBUTE, PHASE_TIME, legacy};
use crate::phases::{COMPUTE_PHASES, PHASE_COUNT, Phase, WAIT_PHASES};

/// Log intervals per analysis window.
pub const WINDOW_INTERVALS: usize = 4;
/// The absolute threshold, ms per iteration.
pub const THRESHOLD_MS: f64 = 10.0;
/// The relative threshold, as a share of the peers' median step time.
pub const THRESHOLD_SHARE: f64 = 0.1;

/// One rank's values for one log interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankInterval {
    /// `dl.rank`.
    pub rank: u32,
    /// `(pipeline, tensor)`: the peer group.
    pub group: (u32, u32),
    /// `dl.data_parallel.rank`.
    pub data: u32,
    /// The rank's attempt: 0, then one more after each restart of its
    /// counters (see the module docs).
    pub attempt: u32,
    /// The last iteration of the interval (of the counters: counted from
    /// the attempt's start).
    pub iteration: u64,
    /// Mean ms per iteration, per phase.
    pub phase_ms: [f64; PHASE_COUNT],
    /// Mean step time, ms.
    pub step_ms: f64,
}

impl RankInterval {
    fn wait(&self) -> f64 {
        WAIT_PHASES.iter().map(|p| self.phase_ms[p.index()]).sum()
    }

    /// Where the interval sits among the run's: attempt, then iteration.
    pub fn key(&self) -> (u32, u64) {
        (self.attempt, self.iteration)
    }
}

/// A named culprit.
#[derive(Clone, Debug, PartialEq)]
pub struct Straggler {
    /// The attempt of the window (0: before any restart).
    pub attempt: u32,
    /// The window's first and last iteration.
    pub iterations: (u64, u64),
    /// The culprit's `dl.rank`.
    pub rank: u32,
    /// The compute phase where it is late.
    pub phase: Phase,
    /// Its excess over its peers' median in that phase, ms per iteration.
    pub lateness_ms: f64,
    /// Its peers' median wait, ms per iteration.
    pub peers_wait_ms: f64,
    /// Its own wait, ms per iteration.
    pub wait_ms: f64,
    /// The peers' ranks.
    pub peers: Vec<u32>,
}

/// The per-rank intervals found in `points` (the rank metrics of every
/// rank): one per rank, attempt and grid iteration, in (attempt,
/// iteration, rank) order. Counters and old gauges are both read (see the
/// module docs); an export holding only the old gauges says so through
/// [`predates_rename`].
pub fn rank_intervals(points: &[MetricPoint]) -> Vec<RankInterval> {
    // Per collection (its file and line, in export order), its points.
    let mut collections: BTreeMap<(u32, usize), Vec<&MetricPoint>> = BTreeMap::new();
    for p in points {
        collections.entry((p.file_rank, p.export)).or_default().push(p);
    }
    let mut grid = GridStep::default();
    collections.values().for_each(|c| grid.push(c.iter().copied()));
    let mut reader = IntervalReader::new(grid.step()).with_attempts(grid.attempts());
    let mut out: Vec<RankInterval> = collections.values().flat_map(|c| reader.push(c.iter().copied())).collect();
    out.sort_by_key(|r| (r.attempt, r.iteration, r.rank));
    out
}

/// Whether `points` hold per-rank metrics under the names before the rename
/// (`megatron.rank.*`) and none under the new ones: `lens analyze` says the
/// export predates the rename.
pub fn predates_rename(points: &[MetricPoint]) -> bool {
    let old = points.iter().any(|p| p.metric == legacy::PHASE_DURATION_MS || p.metric == legacy::ITERATION);
    let new = points.iter().any(|p| p.metric == PHASE_TIME.name || p.metric == ITERATIONS.name);
    old && !new
}

/// `(rank, pipeline, tensor, data)` of a point.
type Coordinates = (u32, u32, u32, u32);

fn coordinates(p: &MetricPoint) -> Option<Coordinates> {
    let get = |key| p.attributes.get(key).and_then(|v| v.as_i64()).and_then(|v| u32::try_from(v).ok());
    Some((
        get(semconv::DL_RANK)?,
        get(semconv::DL_PIPELINE_PARALLEL_RANK)?,
        get(semconv::DL_TENSOR_PARALLEL_RANK)?,
        get(semconv::DL_DATA_PARALLEL_RANK)?,
    ))
}

/// One rank's cumulative counters in one collection.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    coordinates: Coordinates,
    iterations: f64,
    seconds: [f64; PHASE_COUNT],
    /// The iterations counter's `startTimeUnixNano` (0: not written).
    start: u64,
    /// The iterations counter's `timeUnixNano`: when it was collected.
    time: u64,
}

impl Sample {
    /// When the series that `self` starts began (after the rank's `last`
    /// sample): its start time when that tells it from the last series,
    /// else its first collection (counters that went down in one process).
    fn series_begin(&self, last: Option<&Sample>) -> u64 {
        if self.start != 0 && last.is_none_or(|last| last.start != self.start) { self.start } else { self.time }
    }

    /// Whether `next` comes from restarted counters (see the module docs).
    fn restarted_by(&self, next: &Sample) -> bool {
        next.iterations < self.iterations
            || (self.start != 0 && next.start != 0 && next.start != self.start)
            || next.seconds.iter().zip(self.seconds).any(|(n, s)| n + 1e-9 < s)
    }
}

/// One rank's old per-interval gauges in one collection.
#[derive(Clone, Copy, Debug, Default)]
struct Gauges {
    coordinates: Option<Coordinates>,
    iteration: Option<u64>,
    phase_ms: [f64; PHASE_COUNT],
    step_ms: Option<f64>,
}

/// What one collection held, per rank: counters and old gauges.
#[derive(Debug, Default)]
struct Collection {
    counters: BTreeMap<u32, Sample>,
    gauges: BTreeMap<u32, (Coordinates, u64, [f64; PHASE_COUNT], f64)>,
}

impl Collection {
    fn read<'a>(points: impl IntoIterator<Item = &'a MetricPoint>) -> Collection {
        #[derive(Default)]
        struct Counters {
            coordinates: Option<Coordinates>,
            iterations: Option<(f64, u64, u64)>,
            seconds: [f64; PHASE_COUNT],
        }
        let mut counters: BTreeMap<u32, Counters> = BTreeMap::new();
        let mut gauges: BTreeMap<u32, Gauges> = BTreeMap::new();
        for p in points {
            let Some(coords) = coordinates(p) else { continue };
            let rank = coords.0;
            if p.metric == PHASE_TIME.name || p.metric == ITERATIONS.name {
                let c = counters.entry(rank).or_default();
                c.coordinates = c.coordinates.or(Some(coords));
                if p.metric == ITERATIONS.name {
                    c.iterations = Some((p.value, p.start_time_unix_nano, p.time_unix_nano));
                } else if let Some(phase) =
                    p.attributes.get(PHASE_ATTRIBUTE).and_then(|v| v.as_str()).and_then(Phase::from_name)
                {
                    c.seconds[phase.index()] = p.value;
                }
            } else if p.metric == legacy::ITERATION {
                let g = gauges.entry(rank).or_default();
                g.coordinates = g.coordinates.or(Some(coords));
                #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an iteration count")]
                let iteration = p.value.max(0.0) as u64;
                g.iteration = Some(iteration);
            } else if p.metric == legacy::STEP_DURATION_MS {
                let g = gauges.entry(rank).or_default();
                g.coordinates = g.coordinates.or(Some(coords));
                g.step_ms = Some(p.value);
            } else if p.metric == legacy::PHASE_DURATION_MS
                && let Some(phase) =
                    p.attributes.get(legacy::PHASE_ATTRIBUTE).and_then(|v| v.as_str()).and_then(Phase::from_name)
            {
                let g = gauges.entry(rank).or_default();
                g.coordinates = g.coordinates.or(Some(coords));
                g.phase_ms[phase.index()] = p.value;
            }
        }
        Collection {
            counters: counters
                .into_iter()
                .filter_map(|(rank, c)| {
                    let (iterations, start, time) = c.iterations?;
                    Some((rank, Sample { coordinates: c.coordinates?, iterations, seconds: c.seconds, start, time }))
                })
                .collect(),
            gauges: gauges
                .into_iter()
                .filter_map(|(rank, g)| Some((rank, (g.coordinates?, g.iteration?, g.phase_ms, g.step_ms?))))
                .collect(),
        }
    }
}

/// The grid and the ranks of a run, from a first reading of its
/// collections (each rank's in export order): the grid step is the largest
/// of the ranks' median spacing between exports, in iterations.
#[derive(Debug, Default)]
pub struct GridStep {
    ranks: BTreeMap<u32, StepRank>,
}

#[derive(Debug, Default)]
struct StepRank {
    /// The old gauges: the rank is read from them alone.
    gauges: bool,
    /// The last sample of the counters.
    last: Option<Sample>,
    /// The spacings between successive exports, counted by size.
    gaps: BTreeMap<u64, u64>,
    /// Per series (the rank's attempts, in its own count), the first and
    /// last iterations of the counters.
    spans: Vec<(f64, f64)>,
    /// Per series, its lifetime in nanoseconds since the Unix epoch: its
    /// start time (the first export when it did not change) and its last
    /// export.
    lifetimes: Vec<(u64, u64)>,
    /// Whether a collection had no start or collection time (0): no
    /// lifetimes can be told.
    no_times: bool,
}

impl GridStep {
    /// Reads one collection's points.
    pub fn push<'a>(&mut self, collection: impl IntoIterator<Item = &'a MetricPoint>) {
        let collection = Collection::read(collection);
        for &rank in collection.gauges.keys() {
            self.ranks.entry(rank).or_default().gauges = true;
        }
        for (rank, sample) in collection.counters {
            let r = self.ranks.entry(rank).or_default();
            if r.gauges {
                continue;
            }
            r.no_times |= sample.start == 0 || sample.time == 0;
            match r.last {
                Some(last) if !last.restarted_by(&sample) => {
                    if let Some(lifetime) = r.lifetimes.last_mut() {
                        lifetime.1 = lifetime.1.max(sample.time);
                    }
                    if sample.iterations > last.iterations {
                        #[expect(
                            clippy::cast_possible_truncation,
                            clippy::cast_sign_loss,
                            reason = "an iteration count"
                        )]
                        let gap = (sample.iterations - last.iterations).round() as u64;
                        *r.gaps.entry(gap).or_default() += 1;
                        if let Some(span) = r.spans.last_mut() {
                            span.1 = sample.iterations;
                        }
                        r.last = Some(sample);
                    }
                }
                _ => {
                    let begin = sample.series_begin(r.last.as_ref());
                    r.spans.push((sample.iterations, sample.iterations));
                    r.lifetimes.push((begin, begin.max(sample.time)));
                    r.last = Some(sample);
                }
            }
        }
    }

    /// The grid step, in iterations (at least 1).
    pub fn step(&self) -> f64 {
        let median = |gaps: &BTreeMap<u64, u64>| {
            let count: u64 = gaps.values().sum();
            if count == 0 {
                return 0.0;
            }
            // The middle one, or the mean of the middle two.
            let nth = |n: u64| {
                let mut seen = 0;
                gaps.iter().find(|(_, c)| {
                    seen += **c;
                    seen > n
                })
            };
            let value = |n| nth(n).map_or(0, |(gap, _)| *gap);
            #[expect(clippy::cast_precision_loss, reason = "iteration gaps stay far below 2^53")]
            let middle = if count % 2 == 1 {
                value(count / 2) as f64
            } else {
                (value(count / 2 - 1) + value(count / 2)) as f64 / 2.0
            };
            middle
        };
        self.ranks.values().map(|r| median(&r.gaps)).fold(1.0_f64, f64::max).round().max(1.0)
    }

    /// The ranks with rank metrics.
    pub fn ranks(&self) -> BTreeSet<u32> {
        self.ranks.keys().copied().collect()
    }

    /// The ranks whose metrics give at least one interval on a grid of
    /// `step` iterations (what an [`IntervalReader`] of that step will give
    /// them): a complete interval needs each of these.
    pub fn ranks_with_intervals(&self, step: f64) -> BTreeSet<u32> {
        self.ranks
            .iter()
            .filter(|(_, r)| {
                r.gauges || r.spans.iter().any(|(first, last)| (last / step).floor() > (first / step).ceil())
            })
            .map(|(rank, _)| *rank)
            .collect()
    }

    /// The run's attempt of each rank's series, numbered across ranks (see
    /// the module docs): series whose lifetimes overlap, directly or through
    /// others, are one attempt; a rank with several series in one attempt
    /// (counters that went down in one process) has its later ones in
    /// attempts of their own, numbered before the next attempt's. An
    /// iterations counter without a start or collection time tells no
    /// lifetime: then no numbering is given, and each rank counts its own
    /// restarts.
    pub fn attempts(&self) -> Attempts {
        if self.ranks.values().any(|r| r.no_times) {
            return Attempts::default();
        }
        let mut series: Vec<(u64, u64, u32)> = self
            .ranks
            .iter()
            .filter(|(_, r)| !r.gauges)
            .flat_map(|(rank, r)| r.lifetimes.iter().map(|&(begin, end)| (begin, end, *rank)))
            .collect();
        series.sort_unstable();
        // Overlapping lifetimes, in begin order: one cluster.
        let mut clustered: Vec<(u32, u64, u32)> = Vec::with_capacity(series.len());
        let (mut cluster, mut reaches) = (0_u32, None::<u64>);
        for (begin, end, rank) in series {
            match reaches {
                Some(reach) if begin > reach => {
                    cluster += 1;
                    reaches = Some(end);
                }
                _ => reaches = Some(reaches.map_or(end, |reach| reach.max(end))),
            }
            clustered.push((rank, begin, cluster));
        }
        // A rank's later series in the same cluster: one bump more.
        clustered.sort_unstable();
        let mut keyed: Vec<((u32, u32), u32, u64)> = Vec::with_capacity(clustered.len());
        let mut previous: Option<(u32, u32, u32)> = None;
        for (rank, begin, cluster) in clustered {
            let bump = match previous {
                Some((r, c, bump)) if r == rank && c == cluster => bump + 1,
                _ => 0,
            };
            previous = Some((rank, cluster, bump));
            keyed.push(((cluster, bump), rank, begin));
        }
        // The attempts: the (cluster, bump) pairs, numbered densely.
        keyed.sort_unstable();
        let mut per_rank: BTreeMap<u32, BTreeMap<u64, u32>> = BTreeMap::new();
        let (mut number, mut last) = (0_u32, None);
        for (pair, rank, begin) in keyed {
            if last.is_some_and(|last| last != pair) {
                number += 1;
            }
            last = Some(pair);
            per_rank.entry(rank).or_default().insert(begin, number);
        }
        Attempts { per_rank }
    }
}

/// The run's attempt of each rank's series of counters, by the series'
/// begin ([`GridStep::attempts`]): what [`IntervalReader`] numbers the
/// intervals of a series with, whatever order the series are read in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    per_rank: BTreeMap<u32, BTreeMap<u64, u32>>,
}

impl Attempts {
    /// The attempt of `rank`'s series that began at `begin`, if known.
    fn of(&self, rank: u32, begin: u64) -> Option<u32> {
        self.per_rank.get(&rank)?.get(&begin).copied()
    }
}

/// Each rank's intervals, as its collections arrive (each rank's in export
/// order; the ranks may interleave): counters differenced on the grid from
/// the rank's first export on, a restart starting a later attempt (see the
/// module docs); the old gauges as they are.
#[derive(Debug)]
pub struct IntervalReader {
    step: f64,
    attempts: Attempts,
    ranks: BTreeMap<u32, ReaderRank>,
}

#[derive(Debug, Default)]
struct ReaderRank {
    attempt: u32,
    /// The rank's series of counters so far, less one (its own count of
    /// restarts).
    series: u32,
    /// The old gauges: the rank is read from them alone.
    gauges: bool,
    /// The last iteration of the old gauges.
    last_iteration: Option<u64>,
    /// The last sample of the counters.
    last: Option<Sample>,
    /// The index of the last grid point reached in this attempt and the
    /// seconds there.
    grid: Option<(u64, [f64; PHASE_COUNT])>,
}

impl IntervalReader {
    /// The grid's step, in iterations.
    pub fn step(&self) -> f64 {
        self.step
    }

    /// A reader on a grid of `step` iterations ([`GridStep::step`]).
    pub fn new(step: f64) -> IntervalReader {
        IntervalReader { step: step.max(1.0), attempts: Attempts::default(), ranks: BTreeMap::new() }
    }

    /// Numbers the counters' series with `attempts` (from the first
    /// reading, [`GridStep::attempts`]); without, each rank counts its own
    /// restarts.
    #[must_use]
    pub fn with_attempts(mut self, attempts: Attempts) -> IntervalReader {
        self.attempts = attempts;
        self
    }

    /// Replaces the numbering of the series ([`with_attempts`](Self::with_attempts)),
    /// for a first reading that read more (the next directory of a run).
    pub fn set_attempts(&mut self, attempts: Attempts) {
        self.attempts = attempts;
    }

    /// The intervals that one more collection completes.
    pub fn push<'a>(&mut self, collection: impl IntoIterator<Item = &'a MetricPoint>) -> Vec<RankInterval> {
        let collection = Collection::read(collection);
        let mut out = Vec::new();
        for (rank, (coordinates, iteration, phase_ms, step_ms)) in collection.gauges {
            let r = self.ranks.entry(rank).or_default();
            r.gauges = true;
            match r.last_iteration {
                Some(last) if iteration == last => continue,
                Some(last) if iteration < last => r.attempt += 1,
                _ => {}
            }
            r.last_iteration = Some(iteration);
            let (_, pipeline, tensor, data) = coordinates;
            let group = (pipeline, tensor);
            out.push(RankInterval { rank, group, data, attempt: r.attempt, iteration, phase_ms, step_ms });
        }
        for (rank, sample) in collection.counters {
            let step = self.step;
            let r = self.ranks.entry(rank).or_default();
            if r.gauges {
                continue;
            }
            let Some(last) = r.last.filter(|last| !last.restarted_by(&sample)) else {
                // The first export of a series: where its differences
                // start, in the run's attempt of the series (a later one
                // than the rank's last, whatever the numbering says).
                let begin = sample.series_begin(r.last.as_ref());
                let previous = r.last.map(|_| r.attempt);
                if previous.is_some() {
                    r.series += 1;
                }
                let attempt = self.attempts.of(rank, begin).unwrap_or(r.series);
                r.attempt = previous.map_or(attempt, |previous| attempt.max(previous + 1));
                r.last = Some(sample);
                let index = (sample.iterations / step).ceil();
                #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a grid index")]
                let on_grid = (index * step == sample.iterations).then_some((index as u64, sample.seconds));
                r.grid = on_grid;
                continue;
            };
            if sample.iterations <= last.iterations {
                continue;
            }
            #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a grid index")]
            let (first, end) = ((last.iterations / step).floor() as u64 + 1, (sample.iterations / step).floor() as u64);
            for index in first..=end {
                #[expect(clippy::cast_precision_loss, reason = "grid indices stay far below 2^53")]
                let at = index as f64 * step;
                let share = (at - last.iterations) / (sample.iterations - last.iterations);
                let mut seconds = [0.0; PHASE_COUNT];
                for ((s, l), n) in seconds.iter_mut().zip(last.seconds).zip(sample.seconds) {
                    *s = l + (n - l) * share;
                }
                if let Some((before, then)) = r.grid
                    && before + 1 == index
                {
                    let mut phase_ms = [0.0; PHASE_COUNT];
                    for ((ms, now), then) in phase_ms.iter_mut().zip(seconds).zip(then) {
                        *ms = (now - then).max(0.0) * 1e3 / step;
                    }
                    let step_ms = COMPUTE_PHASES.iter().chain(&WAIT_PHASES).map(|p| phase_ms[p.index()]).sum();
                    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an iteration count")]
                    let iteration = at as u64;
                    let (_, pipeline, tensor, data) = sample.coordinates;
                    let group = (pipeline, tensor);
                    out.push(RankInterval { rank, group, data, attempt: r.attempt, iteration, phase_ms, step_ms });
                }
                r.grid = Some((index, seconds));
            }
            r.last = Some(sample);
        }
        out
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 }
}

/// Applies the rule of the module docs to `intervals`: the intervals that
/// every rank of their attempt reported (every rank with an interval in
/// that attempt), windowed per attempt ([`Windows`]).
pub fn analyze(intervals: &[RankInterval]) -> Vec<Straggler> {
    analyze_compared(intervals).0
}

/// [`analyze`], and what it could compare ([`Compared`]: the section tells
/// "no rank is late" from "nothing to compare").
pub fn analyze_compared(intervals: &[RankInterval]) -> (Vec<Straggler>, Compared) {
    let mut attempt_ranks: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut by_key: BTreeMap<(u32, u64), Vec<RankInterval>> = BTreeMap::new();
    for r in intervals {
        attempt_ranks.entry(r.attempt).or_default().insert(r.rank);
        by_key.entry(r.key()).or_default().push(*r);
    }
    let mut windows = Windows::default();
    for ((attempt, _), rows) in by_key {
        let reported: BTreeSet<u32> = rows.iter().map(|r| r.rank).collect();
        if attempt_ranks.get(&attempt).is_some_and(|ranks| reported.len() == ranks.len()) {
            windows.push(rows);
        }
    }
    windows.finish();
    let compared = windows.compared();
    (windows.into_findings(), compared)
}

/// What the windows judged: how many windows, and how many peer groups of
/// two or more ranks in them. With no finding, "no rank is late" holds only
/// when some peer group was compared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compared {
    /// Windows judged (each with at least one complete interval).
    pub windows: u64,
    /// Peer groups of two or more ranks judged, over all windows.
    pub peer_groups: u64,
    /// Whether any rank of a judged peer group spent time in a wait phase
    /// (`dp_wait`, `pp_wait`, `tp_wait`): the rule finds a straggler by its
    /// peers' wait, so a loop that marks none can name no one.
    pub waits_seen: bool,
    /// Whether two ranks of one peer group were seen in the run, in any
    /// windows: with no peer group judged, their intervals never fell in
    /// one window (their exports did not line up), which is not a layout
    /// without peers.
    pub peers_in_run: bool,
}

/// The complete intervals of a run (every rank's record at one attempt
/// and iteration), in order, grouped into windows of [`WINDOW_INTERVALS`]
/// within an attempt; each window is judged when it fills, when the
/// attempt changes and at [`Windows::finish`], then dropped.
#[derive(Debug, Default)]
pub struct Windows {
    rows: Vec<RankInterval>,
    intervals: usize,
    attempt: Option<u32>,
    findings: Vec<Straggler>,
    compared: Compared,
    /// Per peer group, the first rank seen in it (for
    /// [`Compared::peers_in_run`]).
    first_of_group: BTreeMap<(u32, u32), u32>,
}

impl Windows {
    /// Adds one complete interval: every rank's record at one attempt and
    /// iteration, later than the ones before.
    pub fn push(&mut self, rows: impl IntoIterator<Item = RankInterval>) {
        let start = self.rows.len();
        self.rows.extend(rows);
        let Some(attempt) = self.rows.get(start).map(|r| r.attempt) else { return };
        if self.attempt.is_some_and(|a| a != attempt) {
            let next = self.rows.split_off(start);
            self.judge();
            self.rows = next;
        }
        self.attempt = Some(attempt);
        self.intervals += 1;
        if self.intervals == WINDOW_INTERVALS {
            self.judge();
        }
    }

    /// Judges the window being filled, if any.
    pub fn finish(&mut self) {
        self.judge();
    }

    /// The records held: the window being filled.
    pub fn retained(&self) -> usize {
        self.rows.len()
    }

    /// What the windows judged so far.
    pub fn compared(&self) -> Compared {
        self.compared
    }

    /// The findings, in window order.
    pub fn into_findings(self) -> Vec<Straggler> {
        self.findings
    }

    fn judge(&mut self) {
        let rows = std::mem::take(&mut self.rows);
        self.intervals = 0;
        let (Some(first), Some(last)) =
            (rows.iter().map(|r| r.iteration).min(), rows.iter().map(|r| r.iteration).max())
        else {
            return;
        };
        self.compared.windows += 1;
        // Per rank: the median over the window of each phase and the step.
        // The window's rows by rank, in one pass (a scan of every row per
        // rank was quadratic in the ranks: 3.9 s a window at 8,000).
        let mut rows_of: BTreeMap<u32, Vec<&RankInterval>> = BTreeMap::new();
        for row in &rows {
            rows_of.entry(row.rank).or_default().push(row);
        }
        let mut groups: BTreeMap<(u32, u32), Vec<RankInterval>> = BTreeMap::new();
        for ranks_rows in rows_of.values() {
            let Some(first_row) = ranks_rows.first() else { continue };
            let mut combined = **first_row;
            for phase in Phase::ALL {
                combined.phase_ms[phase.index()] =
                    median(&mut ranks_rows.iter().map(|r| r.phase_ms[phase.index()]).collect::<Vec<_>>());
            }
            combined.step_ms = median(&mut ranks_rows.iter().map(|r| r.step_ms).collect::<Vec<_>>());
            let first = *self.first_of_group.entry(combined.group).or_insert(combined.rank);
            self.compared.peers_in_run |= first != combined.rank;
            groups.entry(combined.group).or_default().push(combined);
        }
        for members in groups.values().filter(|m| m.len() >= 2) {
            self.compared.peer_groups += 1;
            self.compared.waits_seen |= members.iter().any(|m| m.wait() > 0.0);
            if let Some(mut finding) = judge(members) {
                finding.iterations = (first, last);
                self.findings.push(finding);
            }
        }
    }
}

/// One peer group in one window.
fn judge(members: &[RankInterval]) -> Option<Straggler> {
    let candidate = members.iter().min_by(|a, b| a.wait().total_cmp(&b.wait()).then(a.rank.cmp(&b.rank)))?;
    let peers: Vec<&RankInterval> = members.iter().filter(|r| r.rank != candidate.rank).collect();
    let peers_median = |f: &dyn Fn(&RankInterval) -> f64| median(&mut peers.iter().map(|r| f(r)).collect::<Vec<_>>());
    let threshold = THRESHOLD_MS.max(THRESHOLD_SHARE * peers_median(&|r| r.step_ms));
    let peers_wait = peers_median(&|r| r.wait());
    if peers_wait - candidate.wait() <= threshold {
        return None;
    }
    let (phase, excess) = COMPUTE_PHASES
        .iter()
        .map(|&p| (p, candidate.phase_ms[p.index()] - peers_median(&|r| r.phase_ms[p.index()])))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (excess > threshold).then(|| Straggler {
        attempt: candidate.attempt,
        iterations: (0, 0),
        rank: candidate.rank,
        phase,
        lateness_ms: excess,
        peers_wait_ms: peers_wait,
        wait_ms: candidate.wait(),
        peers: peers.iter().map(|r| r.rank).collect(),
    })
}

/// Prints the "stragglers" section: a heading, then one line per finding;
/// without one, a line saying that no rank is late when some peer group was
/// `compared`, else why nothing could be. When some finding comes after a
/// restart, each attempt's lines follow a line naming it (`before any
/// restart:`, `after restart N:`). Without rank metrics its advice names
/// Megatron's variable; [`write_section_with_advice`] says the program's.
pub fn write_section(out: &mut dyn Write, findings: &[Straggler], compared: Compared, ranks: usize) -> io::Result<()> {
    let advice = format!("run with MEGATRON_OTEL_{}=1", crate::names::RANK_METRICS_VARIABLE);
    write_section_with_advice(out, findings, compared, ranks, &advice)
}

/// [`write_section`], saying `advice` (how the program gets rank metrics:
/// `run with MYJOB_OTEL_RANK_METRICS=1`) when there are none.
pub fn write_section_with_advice(
    out: &mut dyn Write,
    findings: &[Straggler],
    compared: Compared,
    ranks: usize,
    advice: &str,
) -> io::Result<()> {
    writeln!(out, "stragglers ({ranks} ranks with rank metrics, windows of {WINDOW_INTERVALS} log intervals):")?;
    if ranks == 0 {
        return writeln!(out, "  no rank metrics in this export ({advice})");
    }
    if findings.is_empty() {
        if compared.windows == 0 {
            // A rank's interval lies between two of its exports.
            return writeln!(
                out,
                "  not judged: no log interval has every rank's record (a rank's interval lies between two of its \
                 metric exports; a run shorter than two export intervals has none: lower OTEL_METRIC_EXPORT_INTERVAL, \
                 10000 ms by default)"
            );
        }
        if compared.peer_groups == 0 && compared.peers_in_run {
            return writeln!(
                out,
                "  not judged: no window held two peers' intervals (their metric exports did not line up, as in a \
                 run a few export intervals long: lower OTEL_METRIC_EXPORT_INTERVAL, 10000 ms by default)"
            );
        }
        if compared.peer_groups == 0 {
            return writeln!(
                out,
                "  not judged: no two ranks are peers (the rule compares the data-parallel replicas of one pipeline \
                 stage and tensor-parallel position; no window had two of any)"
            );
        }
        if !compared.waits_seen {
            return writeln!(
                out,
                "  none found: no rank spent time waiting for its peers (dp_wait, pp_wait, tp_wait are all zero), \
                 and the rule finds a slow rank by its peers' wait; mark the collectives with Training::wait \
                 (Phase::DpWait, PpWait, TpWait)"
            );
        }
        return writeln!(out, "  none: no rank is late");
    }
    writeln!(
        out,
        "  {:<17} {:>5}  {:<10} {:>12} {:>15} {:>9}  peers",
        "iterations", "rank", "phase", "late ms/it", "peers wait ms", "wait ms"
    )?;
    let restarted = findings.iter().any(|f| f.attempt > 0);
    let mut attempt = None;
    for f in findings {
        if restarted && attempt != Some(f.attempt) {
            attempt = Some(f.attempt);
            match f.attempt {
                0 => writeln!(out, "  before any restart:")?,
                n => writeln!(out, "  after restart {n}:")?,
            }
        }
        let peers: Vec<String> = f.peers.iter().map(u32::to_string).collect();
        writeln!(
            out,
            "  {:<17} {:>5}  {:<10} {:>12.1} {:>15.1} {:>9.1}  {}",
            format!("{}-{}", f.iterations.0, f.iterations.1),
            f.rank,
            f.phase.as_str(),
            f.lateness_ms,
            f.peers_wait_ms,
            f.wait_ms,
            peers.join(",")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(rank: u32, data: u32, iteration: u64, forward: f64, dp_wait: f64) -> RankInterval {
        let mut phase_ms = [0.0; PHASE_COUNT];
        phase_ms[Phase::Forward.index()] = forward;
        phase_ms[Phase::DpWait.index()] = dp_wait;
        RankInterval { rank, group: (0, 0), data, attempt: 0, iteration, phase_ms, step_ms: 100.0 }
    }

    #[test]
    fn the_rank_that_waits_least_and_computes_longest_is_named() {
        let rows: Vec<RankInterval> = (1..=4)
            .flat_map(|i| {
                (0..4).map(
                    move |r| if r == 2 { interval(r, r, i * 5, 50.0, 1.0) } else { interval(r, r, i * 5, 20.0, 31.0) },
                )
            })
            .collect();
        let findings = analyze(&rows);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let f = &findings[0];
        assert_eq!((f.rank, f.phase, f.iterations), (2, Phase::Forward, (5, 20)));
        assert!((f.lateness_ms - 30.0).abs() < 1e-9 && (f.peers_wait_ms - 31.0).abs() < 1e-9);
    }

    #[test]
    fn a_rank_that_only_waits_less_is_not_blamed() {
        let rows: Vec<RankInterval> =
            (0..4).map(|r| interval(r, r, 5, 20.0, if r == 1 { 0.0 } else { 30.0 })).collect();
        assert!(analyze(&rows).is_empty());
    }

    use lens_fallbacks::otlp_file::AttributeValue;

    /// A point of `metric` from rank `rank` (data-parallel rank = rank),
    /// collection `export`, with `phase` when given.
    fn point(rank: u32, export: usize, metric: &str, phase: Option<(&str, &str)>, value: f64) -> MetricPoint {
        MetricPoint { start_time_unix_nano: 1, ..point_of(rank, export, 1, metric, phase, value) }
    }

    /// [`point`] of a process started at `start` (the counters'
    /// `startTimeUnixNano`).
    fn point_of(
        rank: u32,
        export: usize,
        start: u64,
        metric: &str,
        phase: Option<(&str, &str)>,
        value: f64,
    ) -> MetricPoint {
        let mut attributes: BTreeMap<String, AttributeValue> = [
            (semconv::DL_RANK, rank),
            (semconv::DL_PIPELINE_PARALLEL_RANK, 0),
            (semconv::DL_TENSOR_PARALLEL_RANK, 0),
            (semconv::DL_DATA_PARALLEL_RANK, rank),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), AttributeValue::Int(i64::from(v))))
        .collect();
        if let Some((key, value)) = phase {
            attributes.insert(key.to_string(), AttributeValue::String(value.to_string()));
        }
        MetricPoint {
            file_rank: rank,
            export,
            metric: metric.to_string(),
            attributes,
            time_unix_nano: start + export as u64,
            start_time_unix_nano: start,
            value,
        }
    }

    /// Four ranks, rank 2 late in `backward` by 30 ms per iteration, its
    /// peers waiting for it: as cumulative counters exported every 5
    /// iterations on ranks 0, 2 and 3 but every 10 on rank 1 (exports never
    /// line up), or as the old per-interval gauges.
    fn run(counters: bool) -> Vec<MetricPoint> {
        let mut points = Vec::new();
        for rank in 0..4_u32 {
            let (backward, wait) = if rank == 2 { (0.050, 0.001) } else { (0.020, 0.031) };
            let every: u32 = if rank == 1 && counters { 10 } else { 5 };
            for (export, done) in (every..=40).step_by(every as usize).enumerate() {
                let n = f64::from(done);
                if counters {
                    points.push(point(rank, export, ITERATIONS.name, None, n));
                    for (phase, per) in [("backward", backward), ("dp_wait", wait), ("forward", 0.01)] {
                        points.push(point(rank, export, PHASE_TIME.name, Some((PHASE_ATTRIBUTE, phase)), per * n));
                    }
                } else {
                    points.push(point(rank, export, legacy::ITERATION, None, n));
                    points.push(point(rank, export, legacy::STEP_DURATION_MS, None, 100.0));
                    for (phase, per) in [("backward", backward), ("dp_wait", wait), ("forward", 0.01)] {
                        let attribute = Some((legacy::PHASE_ATTRIBUTE, phase));
                        points.push(point(rank, export, legacy::PHASE_DURATION_MS, attribute, per * 1e3));
                    }
                }
            }
        }
        points
    }

    #[test]
    fn cumulative_counters_are_differenced_per_rank_on_a_common_grid() {
        let points = run(true);
        assert!(!predates_rename(&points));
        let intervals = rank_intervals(&points);
        // The grid follows the sparsest rank: 10 iterations; its first
        // export (10) is where its differences start: 3 cells.
        let rank1: Vec<u64> = intervals.iter().filter(|r| r.rank == 1).map(|r| r.iteration).collect();
        assert_eq!(rank1, [20, 30, 40]);
        let late = intervals.iter().find(|r| r.rank == 2).unwrap();
        assert!((late.phase_ms[Phase::Backward.index()] - 50.0).abs() < 1e-6, "{late:?}");
        assert!((late.step_ms - 61.0).abs() < 1e-6, "compute and waits: {late:?}");
        let findings = analyze(&intervals);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!((findings[0].rank, findings[0].phase, findings[0].iterations), (2, Phase::Backward, (20, 40)));
        assert!((findings[0].lateness_ms - 30.0).abs() < 1e-6, "{findings:?}");
    }

    /// The counters of four ranks over one process started at `start`:
    /// exports at iterations `exports`, iteration `i` taking `ms(rank, i)`
    /// (forward, backward, dp_wait) in ms; `export` numbers the lines from
    /// `first_export`.
    fn process(
        start: u64,
        first_export: usize,
        exports: &[u64],
        ms: impl Fn(u32, u64) -> [f64; 3],
    ) -> Vec<MetricPoint> {
        let mut points = Vec::new();
        for rank in 0..4_u32 {
            let mut totals = [0.0; 3];
            let mut done = 0;
            for (line, &upto) in exports.iter().enumerate() {
                for i in done + 1..=upto {
                    for (total, ms) in totals.iter_mut().zip(ms(rank, i)) {
                        *total += ms / 1e3;
                    }
                }
                done = upto;
                let export = first_export + line;
                #[expect(clippy::cast_precision_loss, reason = "small test iterations")]
                points.push(point_of(rank, export, start, ITERATIONS.name, None, upto as f64));
                for (phase, total) in ["forward", "backward", "dp_wait"].into_iter().zip(totals) {
                    points.push(point_of(rank, export, start, PHASE_TIME.name, Some((PHASE_ATTRIBUTE, phase)), total));
                }
            }
        }
        points
    }

    /// Rank 2 twice as slow in backward (40 ms instead of 20) when `slow`
    /// says so, its peers then waiting 21 ms for it; everyone waits 1 ms
    /// otherwise.
    fn twice_as_slow(slow: impl Fn(u64) -> bool) -> impl Fn(u32, u64) -> [f64; 3] {
        move |rank, i| match (slow(i), rank == 2) {
            (false, _) => [10.0, 20.0, 1.0],
            (true, true) => [10.0, 40.0, 1.0],
            (true, false) => [10.0, 20.0, 21.0],
        }
    }

    fn summary(findings: &[Straggler]) -> Vec<(u32, (u64, u64), u32, Phase)> {
        findings.iter().map(|f| (f.attempt, f.iterations, f.rank, f.phase)).collect()
    }

    #[test]
    fn a_rank_slow_late_in_the_run_is_named_in_those_windows_only_with_its_slowdown_there() {
        // Exports every 5 iterations, 5 to 85: cells of 5 from the first
        // export, windows 10-25, 30-45, 50-65, 70-85; slow from 46.
        let exports: Vec<u64> = (1..=17).map(|e| e * 5).collect();
        let points = process(1, 0, &exports, twice_as_slow(|i| i > 45));
        let findings = analyze(&rank_intervals(&points));
        assert_eq!(summary(&findings), [(0, (50, 65), 2, Phase::Backward), (0, (70, 85), 2, Phase::Backward)]);
        for f in &findings {
            // Exact in the window (not diluted by the 45 fast iterations
            // before): 20 ms per iteration late, peers waiting 21, itself 1.
            assert!((f.lateness_ms - 20.0).abs() < 1e-6, "{f:?}");
            assert!((f.peers_wait_ms - 21.0).abs() < 1e-6 && (f.wait_ms - 1.0).abs() < 1e-6, "{f:?}");
        }
    }

    #[test]
    fn a_restart_starts_a_new_attempt_whose_windows_count_from_its_first_export() {
        // Attempt 1: exports at 5..40, nobody slow. Attempt 2 (the same
        // files, counters from zero, a new start time): rank 2 slow.
        let exports: Vec<u64> = (1..=8).map(|e| e * 5).collect();
        let mut points = process(1_000, 0, &exports, twice_as_slow(|_| false));
        points.extend(process(2_000, 8, &exports, twice_as_slow(|_| true)));
        let intervals = rank_intervals(&points);
        assert_eq!(intervals.iter().filter(|r| r.attempt == 1).count(), 4 * 7, "{intervals:?}");
        assert!(intervals.iter().all(|r| r.phase_ms.iter().all(|ms| *ms >= 0.0)), "{intervals:?}");
        let (findings, compared) = analyze_compared(&intervals);
        assert_eq!(summary(&findings), [(1, (10, 25), 2, Phase::Backward), (1, (30, 40), 2, Phase::Backward)]);
        assert!(findings.iter().all(|f| (f.lateness_ms - 20.0).abs() < 1e-6), "{findings:?}");
        let mut out = Vec::new();
        write_section(&mut out, &findings, compared, 4).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("  after restart 1:\n  10-25 "), "{text}");
        assert!(!text.contains("before any restart"), "{text}");
    }

    #[test]
    fn a_new_start_time_is_a_restart_even_when_the_counters_do_not_go_down() {
        // Attempt 1 dies after one export (5); attempt 2's first export
        // (10) is above it in every counter: only the start time tells.
        let mut points = process(1_000, 0, &[5], twice_as_slow(|_| false));
        let exports: Vec<u64> = (2..=10).map(|e| e * 5).collect();
        points.extend(process(2_000, 1, &exports, twice_as_slow(|_| true)));
        let findings = analyze(&rank_intervals(&points));
        assert_eq!(summary(&findings), [(1, (15, 30), 2, Phase::Backward), (1, (35, 50), 2, Phase::Backward)]);
        assert!(findings.iter().all(|f| (f.lateness_ms - 20.0).abs() < 1e-6), "{findings:?}");
    }

    /// One export of a rank's counters: (start time, collection time,
    /// iterations).
    type Export = (u64, u64, f64);

    /// The attempts [`GridStep::attempts`] gives `series`: per rank, its
    /// exports.
    fn attempts_of(series: &[(u32, &[Export])]) -> BTreeMap<u32, Vec<u32>> {
        let mut grid = GridStep::default();
        for &(rank, exports) in series {
            for (export, &(start, time, iterations)) in exports.iter().enumerate() {
                let mut point = point_of(rank, export, start, ITERATIONS.name, None, iterations);
                point.time_unix_nano = time;
                grid.push([&point]);
            }
        }
        grid.attempts().per_rank.into_iter().map(|(rank, series)| (rank, series.into_values().collect())).collect()
    }

    #[test]
    fn attempts_are_numbered_across_ranks_by_overlapping_lifetimes() {
        // Attempt 0: ranks 0 and 1 from t=100; rank 2 starts late (t=130,
        // after their first exports at 120 and 121) while they still run.
        // Attempt 1: from t=1000, after every export of attempt 0; rank 2
        // died before its first export there. Attempt 2: from t=2000.
        let rank_0: &[Export] = &[(100, 120, 5.0), (100, 140, 10.0), (1000, 1020, 5.0), (2000, 2020, 5.0)];
        let rank_1: &[Export] = &[(100, 121, 5.0), (100, 141, 10.0), (1000, 1021, 5.0), (2000, 2021, 5.0)];
        let rank_2: &[Export] = &[(130, 160, 5.0), (2000, 2022, 5.0)];
        let attempts = attempts_of(&[(0, rank_0), (1, rank_1), (2, rank_2)]);
        assert_eq!(attempts, BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 1, 2]), (2, vec![0, 2])]));

        // Counters that went down within one process (same start time): an
        // attempt of their own for that rank, even though its lifetime
        // overlaps its peers'; at the job's restart (t=1000) every rank is
        // in the same attempt again.
        let reset: &[Export] = &[(100, 120, 10.0), (100, 140, 5.0), (1000, 1020, 5.0)];
        let steady: &[Export] = &[(100, 121, 10.0), (100, 141, 20.0), (1000, 1021, 5.0)];
        let attempts = attempts_of(&[(0, reset), (1, steady)]);
        assert_eq!(attempts, BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 2])]));

        // Without start times, or collection times (0), the lifetimes are
        // unknown: no numbering, and each rank counts its own restarts.
        let no_start: &[Export] = &[(0, 120, 5.0), (0, 140, 10.0), (0, 500, 5.0)];
        let other: &[Export] = &[(0, 121, 5.0), (0, 141, 10.0), (0, 501, 5.0)];
        assert!(attempts_of(&[(0, no_start), (1, other)]).is_empty());
        let no_time: &[Export] = &[(100, 0, 5.0), (100, 0, 10.0)];
        assert!(attempts_of(&[(0, no_time), (1, steady)]).is_empty());
    }

    #[test]
    fn the_first_reading_predicts_which_ranks_the_second_gives_intervals() {
        // Rank 3 exports once: it has rank metrics, but no interval.
        let exports: Vec<u64> = (1..=8).map(|e| e * 5).collect();
        let mut points = process(1, 0, &exports, twice_as_slow(|_| true));
        points.retain(|p| p.file_rank != 3 || p.export == 0);
        let mut grid = GridStep::default();
        let mut collections: BTreeMap<(u32, usize), Vec<&MetricPoint>> = BTreeMap::new();
        for p in &points {
            collections.entry((p.file_rank, p.export)).or_default().push(p);
        }
        collections.values().for_each(|c| grid.push(c.iter().copied()));
        assert!((grid.step() - 5.0).abs() < f64::EPSILON);
        assert_eq!(grid.ranks(), BTreeSet::from([0, 1, 2, 3]));
        assert_eq!(grid.ranks_with_intervals(grid.step()), BTreeSet::from([0, 1, 2]));
        let given: BTreeSet<u32> = rank_intervals(&points).iter().map(|r| r.rank).collect();
        assert_eq!(given, grid.ranks_with_intervals(grid.step()));
    }

    #[test]
    fn an_export_under_the_old_names_is_read_and_said_to_predate_the_rename() {
        let points = run(false);
        assert!(predates_rename(&points));
        let findings = analyze(&rank_intervals(&points));
        assert_eq!(findings.len(), 2, "two windows of four intervals: {findings:?}");
        assert!(findings.iter().all(|f| f.rank == 2 && f.phase == Phase::Backward), "{findings:?}");
    }

    #[test]
    fn without_rank_metrics_the_section_gives_the_advice_it_is_given() {
        let mut out = Vec::new();
        write_section_with_advice(&mut out, &[], Compared::default(), 0, "run with MYJOB_RANK_METRICS=1").unwrap();
        assert!(
            String::from_utf8(out)
                .unwrap()
                .ends_with("  no rank metrics in this export (run with MYJOB_RANK_METRICS=1)\n")
        );
        let mut out = Vec::new();
        write_section(&mut out, &[], Compared::default(), 0).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("(run with MEGATRON_OTEL_RANK_METRICS=1)"));
    }

    /// Two peers whose intervals never share a window (their exports did
    /// not line up) are not a layout without peers: the section says which.
    #[test]
    fn peers_whose_intervals_never_meet_are_not_called_a_layout_without_peers() {
        let section = |second_group: (u32, u32)| {
            let mut windows = Windows::default();
            for (rank, iterations) in [(0, 1..=4), (1, 5..=8)] {
                for i in iterations {
                    let mut row = interval(rank, rank, i * 5, 20.0, 1.0);
                    if rank == 1 {
                        row.group = second_group;
                    }
                    windows.push([row]);
                }
            }
            windows.finish();
            let compared = windows.compared();
            assert_eq!((compared.windows, compared.peer_groups), (2, 0), "{compared:?}");
            let mut out = Vec::new();
            write_section(&mut out, &[], compared, 2).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(section((0, 0)).contains("not judged: no window held two peers' intervals"), "{}", section((0, 0)));
        assert!(section((1, 0)).contains("not judged: no two ranks are peers"), "{}", section((1, 0)));
    }

    #[test]
    fn equal_ranks_have_no_culprit() {
        let rows: Vec<RankInterval> = (0..4).map(|r| interval(r, r, 5, 20.0, 3.0 + f64::from(r))).collect();
        let (findings, compared) = analyze_compared(&rows);
        assert!(findings.is_empty());
        assert_eq!(compared, Compared { windows: 1, peer_groups: 1, waits_seen: true, peers_in_run: true });
        let mut out = Vec::new();
        write_section(&mut out, &findings, compared, 4).unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with("  none: no rank is late\n"));
        // A loop that marks no wait phase: one rank three times slower is
        // not named, and the section says why.
        let rows: Vec<RankInterval> = (0..4)
            .map(|r| {
                let mut row = interval(r, r, 5, if r == 2 { 60.0 } else { 20.0 }, 0.0);
                WAIT_PHASES.iter().for_each(|p| row.phase_ms[p.index()] = 0.0);
                row
            })
            .collect();
        let (findings, compared) = analyze_compared(&rows);
        assert!(findings.is_empty() && !compared.waits_seen, "{findings:?}");
        let mut out = Vec::new();
        write_section(&mut out, &findings, compared, 4).unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with(
            "  none found: no rank spent time waiting for its peers (dp_wait, pp_wait, tp_wait are all zero), and \
                 the rule finds a slow rank by its peers' wait; mark the collectives with Training::wait \
                 (Phase::DpWait, PpWait, TpWait)\n"
        ));
    }

    #[test]
    fn with_nothing_to_compare_the_section_says_why_instead_of_no_rank_is_late() {
        let section = |points: &[MetricPoint]| {
            let (findings, compared) = analyze_compared(&rank_intervals(points));
            let mut out = Vec::new();
            write_section(&mut out, &findings, compared, 4).unwrap();
            String::from_utf8(out).unwrap()
        };
        // One export per rank (a short run at the default 10 s interval):
        // no interval at all, whoever was slow.
        let once = process(1_000, 0, &[20], twice_as_slow(|_| true));
        assert!(section(&once).contains("  not judged: no log interval has every rank's record"), "{}", section(&once));
        // Complete intervals, but every rank alone in its peer group (PP4
        // × DP1): rank 2's slowness has nobody to be compared with.
        let mut alone = process(1_000, 0, &(1..=8).map(|e| e * 5).collect::<Vec<_>>(), twice_as_slow(|_| true));
        for point in &mut alone {
            let rank = i64::from(point.file_rank);
            point.attributes.insert(semconv::DL_PIPELINE_PARALLEL_RANK.into(), AttributeValue::Int(rank));
            point.attributes.insert(semconv::DL_DATA_PARALLEL_RANK.into(), AttributeValue::Int(0));
        }
        let text = section(&alone);
        assert!(text.contains("  not judged: no two ranks are peers"), "{text}");
    }
}
