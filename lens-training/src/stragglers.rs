//! Straggler attribution from the per-rank metrics, outside the job: which
//! rank is slow, in which phase, by how much.
//!
//! It reads the cumulative counters (`dl.training.phase_time` and
//! `dl.training.iterations`, [`crate::rank_metrics`]) and, for exports
//! written before the rename (SPEC A21), the old per-interval gauges
//! (`megatron.rank.phase_duration_ms`, `.step_duration_ms`, `.iteration`,
//! attribute `megatron.phase`). Counters are differenced: each rank's
//! cumulative phase time is interpolated, in iteration space, at a grid of
//! iterations common to every rank (the grid step is the largest of the
//! ranks' typical spacing between exports), so that the ranks' intervals
//! line up however their exports fell; an interval's value is the time
//! added in the phase over the iterations added, in ms per iteration.
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
//! The input is [`lens_fallbacks::otlp_file`]'s points from a directory of
//! `metrics-rank<N>.jsonl` files; [`analyze`] returns the findings and
//! [`write_section`] prints the viewer's "stragglers" section.

use std::collections::BTreeMap;
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
    /// The last iteration of the interval.
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
}

/// A named culprit.
#[derive(Clone, Debug, PartialEq)]
pub struct Straggler {
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
/// rank): one per rank and distinct iteration value, in iteration order.
/// Counters and old gauges are both read (see the module docs); an export
/// holding only the old gauges says so through [`predates_rename`].
pub fn rank_intervals(points: &[MetricPoint]) -> Vec<RankInterval> {
    let mut out = legacy_intervals(points);
    let seen: std::collections::BTreeSet<u32> = out.iter().map(|r| r.rank).collect();
    out.extend(counter_intervals(points).into_iter().filter(|r| !seen.contains(&r.rank)));
    out.sort_by_key(|r| (r.iteration, r.rank));
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

fn coordinates(p: &MetricPoint) -> Option<(u32, u32, u32, u32)> {
    let get = |key| p.attributes.get(key).and_then(|v| v.as_i64()).and_then(|v| u32::try_from(v).ok());
    Some((
        get(semconv::DL_RANK)?,
        get(semconv::DL_PIPELINE_PARALLEL_RANK)?,
        get(semconv::DL_TENSOR_PARALLEL_RANK)?,
        get(semconv::DL_DATA_PARALLEL_RANK)?,
    ))
}

/// One rank's cumulative samples: (iterations, seconds per phase), in
/// export order, starting from zero.
type Samples = Vec<(f64, [f64; PHASE_COUNT])>;

/// The intervals of the cumulative counters (see the module docs).
fn counter_intervals(points: &[MetricPoint]) -> Vec<RankInterval> {
    #[derive(Default)]
    struct Collection {
        iterations: Option<f64>,
        seconds: [f64; PHASE_COUNT],
    }
    /// A rank's coordinates, and per collection (its file and line, in
    /// export order) what it held.
    type RankCollections = ((u32, u32, u32), BTreeMap<(u32, usize), Collection>);
    let mut ranks: BTreeMap<u32, RankCollections> = BTreeMap::new();
    for p in points {
        let is_time = p.metric == PHASE_TIME.name;
        if !is_time && p.metric != ITERATIONS.name {
            continue;
        }
        let Some((rank, pipeline, tensor, data)) = coordinates(p) else { continue };
        let entry = ranks.entry(rank).or_insert_with(|| ((pipeline, tensor, data), BTreeMap::new()));
        let c = entry.1.entry((p.file_rank, p.export)).or_default();
        if is_time {
            if let Some(phase) = p.attributes.get(PHASE_ATTRIBUTE).and_then(|v| v.as_str()).and_then(Phase::from_name) {
                c.seconds[phase.index()] = p.value;
            }
        } else {
            c.iterations = Some(p.value);
        }
    }
    let samples: BTreeMap<u32, ((u32, u32, u32), Samples)> = ranks
        .into_iter()
        .map(|(rank, (coords, collections))| {
            let mut samples: Samples = vec![(0.0, [0.0; PHASE_COUNT])];
            for c in collections.into_values() {
                let Some(iterations) = c.iterations else { continue };
                if iterations > samples.last().map_or(0.0, |s| s.0) {
                    samples.push((iterations, c.seconds));
                }
            }
            (rank, (coords, samples))
        })
        .filter(|(_, (_, samples))| samples.len() >= 2)
        .collect();
    if samples.is_empty() {
        return Vec::new();
    }
    // The grid: the largest of the ranks' median spacing, up to the
    // iterations every rank reached.
    let spacing = |s: &Samples| {
        let mut gaps: Vec<f64> = s.windows(2).map(|w| w[1].0 - w[0].0).collect();
        median(&mut gaps)
    };
    let step = samples.values().map(|(_, s)| spacing(s)).fold(1.0_f64, f64::max).round().max(1.0);
    let reached = samples.values().map(|(_, s)| s.last().map_or(0.0, |l| l.0)).fold(f64::INFINITY, f64::min);
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an iteration count")]
    let cells = (reached / step).floor() as u64;
    let at = |s: &Samples, iterations: f64| -> [f64; PHASE_COUNT] {
        let upper = s.iter().position(|(i, _)| *i >= iterations).unwrap_or(s.len() - 1);
        let (hi_i, hi) = s[upper];
        if upper == 0 || hi_i <= iterations {
            return hi;
        }
        let (lo_i, lo) = s[upper - 1];
        let share = (iterations - lo_i) / (hi_i - lo_i);
        let mut out = [0.0; PHASE_COUNT];
        for ((o, l), h) in out.iter_mut().zip(lo).zip(hi) {
            *o = l + (h - l) * share;
        }
        out
    };
    let mut out = Vec::new();
    for (&rank, ((pipeline, tensor, data), s)) in &samples {
        for cell in 1..=cells {
            #[expect(clippy::cast_precision_loss, reason = "iteration counts stay far below 2^53")]
            let (from, to) = ((cell - 1) as f64 * step, cell as f64 * step);
            let (a, b) = (at(s, from), at(s, to));
            let mut phase_ms = [0.0; PHASE_COUNT];
            for (index, ms) in phase_ms.iter_mut().enumerate() {
                *ms = (b[index] - a[index]).max(0.0) * 1e3 / step;
            }
            let step_ms = COMPUTE_PHASES.iter().chain(&WAIT_PHASES).map(|p| phase_ms[p.index()]).sum();
            #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an iteration count")]
            let iteration = to as u64;
            out.push(RankInterval { rank, group: (*pipeline, *tensor), data: *data, iteration, phase_ms, step_ms });
        }
    }
    out
}

/// The intervals of the gauges before the rename.
fn legacy_intervals(points: &[MetricPoint]) -> Vec<RankInterval> {
    // (file rank, export) -> what that collection held.
    #[derive(Default)]
    struct Collection {
        coords: Option<(u32, u32, u32, u32)>,
        iteration: Option<u64>,
        phase_ms: [f64; PHASE_COUNT],
        step_ms: Option<f64>,
    }
    let mut collections: BTreeMap<(u32, usize), Collection> = BTreeMap::new();
    for p in points {
        let c = collections.entry((p.file_rank, p.export)).or_default();
        let coords = coordinates(p);
        if p.metric == legacy::ITERATION {
            c.coords = c.coords.or(coords);
            #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an iteration count")]
            let iteration = p.value.max(0.0) as u64;
            c.iteration = Some(iteration);
        } else if p.metric == legacy::STEP_DURATION_MS {
            c.coords = c.coords.or(coords);
            c.step_ms = Some(p.value);
        } else if p.metric == legacy::PHASE_DURATION_MS
            && let Some(phase) =
                p.attributes.get(legacy::PHASE_ATTRIBUTE).and_then(|v| v.as_str()).and_then(Phase::from_name)
        {
            c.coords = c.coords.or(coords);
            c.phase_ms[phase.index()] = p.value;
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out: Vec<RankInterval> = collections
        .into_values()
        .filter_map(|c| {
            let (rank, pipeline, tensor, data) = c.coords?;
            let iteration = c.iteration?;
            seen.insert((rank, iteration)).then_some(RankInterval {
                rank,
                group: (pipeline, tensor),
                data,
                iteration,
                phase_ms: c.phase_ms,
                step_ms: c.step_ms?,
            })
        })
        .collect();
    out.sort_by_key(|r| (r.iteration, r.rank));
    out
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 }
}

/// Applies the rule of the module docs to `intervals`.
pub fn analyze(intervals: &[RankInterval]) -> Vec<Straggler> {
    // The iterations that every rank reported, in order.
    let ranks: std::collections::BTreeSet<u32> = intervals.iter().map(|r| r.rank).collect();
    let mut by_iteration: BTreeMap<u64, Vec<&RankInterval>> = BTreeMap::new();
    for r in intervals {
        by_iteration.entry(r.iteration).or_default().push(r);
    }
    let complete: Vec<u64> = by_iteration.iter().filter(|(_, rs)| rs.len() == ranks.len()).map(|(i, _)| *i).collect();
    let mut findings = Vec::new();
    for window in complete.chunks(WINDOW_INTERVALS) {
        let (first, last) = (window[0], window[window.len() - 1]);
        // Per rank: the median over the window of each phase and the step.
        // The window's rows by rank, in one pass (a scan of every row per
        // rank was quadratic in the ranks: 3.9 s a window at 8,000).
        let mut rows_of: BTreeMap<u32, Vec<&RankInterval>> = BTreeMap::new();
        for iteration in window {
            for &row in &by_iteration[iteration] {
                rows_of.entry(row.rank).or_default().push(row);
            }
        }
        let mut summary: BTreeMap<u32, RankInterval> = BTreeMap::new();
        for (&rank, rows) in &rows_of {
            let Some(first_row) = rows.first() else { continue };
            let mut combined = **first_row;
            for phase in Phase::ALL {
                combined.phase_ms[phase.index()] =
                    median(&mut rows.iter().map(|r| r.phase_ms[phase.index()]).collect::<Vec<_>>());
            }
            combined.step_ms = median(&mut rows.iter().map(|r| r.step_ms).collect::<Vec<_>>());
            summary.insert(rank, combined);
        }
        let mut groups: BTreeMap<(u32, u32), Vec<RankInterval>> = BTreeMap::new();
        for r in summary.values() {
            groups.entry(r.group).or_default().push(*r);
        }
        for members in groups.values().filter(|m| m.len() >= 2) {
            if let Some(mut finding) = judge(members) {
                finding.iterations = (first, last);
                findings.push(finding);
            }
        }
    }
    findings
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
        iterations: (0, 0),
        rank: candidate.rank,
        phase,
        lateness_ms: excess,
        peers_wait_ms: peers_wait,
        wait_ms: candidate.wait(),
        peers: peers.iter().map(|r| r.rank).collect(),
    })
}

/// Prints the "stragglers" section: a heading, then one line per finding,
/// or a line saying that no rank is late. Its advice names Megatron's
/// variable; [`write_section_with_prefix`] names the program's.
pub fn write_section(out: &mut dyn Write, findings: &[Straggler], ranks: usize) -> io::Result<()> {
    write_section_with_prefix(out, findings, ranks, "MEGATRON_OTEL")
}

/// [`write_section`], its advice naming `<prefix>_RANK_METRICS` (the
/// program's prefix, as recorded on its resource).
pub fn write_section_with_prefix(
    out: &mut dyn Write,
    findings: &[Straggler],
    ranks: usize,
    prefix: &str,
) -> io::Result<()> {
    writeln!(out, "stragglers ({ranks} ranks with rank metrics, windows of {WINDOW_INTERVALS} log intervals):")?;
    if ranks == 0 {
        return writeln!(
            out,
            "  no rank metrics in this export (run with {prefix}_{}=1)",
            crate::names::RANK_METRICS_VARIABLE
        );
    }
    if findings.is_empty() {
        return writeln!(out, "  none: no rank is late");
    }
    writeln!(
        out,
        "  {:<17} {:>5}  {:<10} {:>12} {:>15} {:>9}  peers",
        "iterations", "rank", "phase", "late ms/it", "peers wait ms", "wait ms"
    )?;
    for f in findings {
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
        RankInterval { rank, group: (0, 0), data, iteration, phase_ms, step_ms: 100.0 }
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
            time_unix_nano: export as u64,
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
        // The grid follows the sparsest rank: 10 iterations, 4 cells.
        let rank1: Vec<u64> = intervals.iter().filter(|r| r.rank == 1).map(|r| r.iteration).collect();
        assert_eq!(rank1, [10, 20, 30, 40]);
        let late = intervals.iter().find(|r| r.rank == 2).unwrap();
        assert!((late.phase_ms[Phase::Backward.index()] - 50.0).abs() < 1e-6, "{late:?}");
        assert!((late.step_ms - 61.0).abs() < 1e-6, "compute and waits: {late:?}");
        let findings = analyze(&intervals);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!((findings[0].rank, findings[0].phase, findings[0].iterations), (2, Phase::Backward, (10, 40)));
        assert!((findings[0].lateness_ms - 30.0).abs() < 1e-6, "{findings:?}");
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
    fn the_advice_names_the_programs_prefix() {
        let mut out = Vec::new();
        write_section_with_prefix(&mut out, &[], 0, "MYJOB").unwrap();
        assert!(String::from_utf8(out).unwrap().contains("run with MYJOB_RANK_METRICS=1"));
    }

    #[test]
    fn equal_ranks_have_no_culprit() {
        let rows: Vec<RankInterval> = (0..4).map(|r| interval(r, r, 5, 20.0, 3.0 + f64::from(r))).collect();
        assert!(analyze(&rows).is_empty());
        let mut out = Vec::new();
        write_section(&mut out, &[], 4).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("none: no rank is late"));
    }
}
