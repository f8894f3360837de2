//! Straggler attribution from the per-rank metrics, outside the job
//! (`megatron.rank.*`): which rank is slow, in which phase, by how much.
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

use crate::phases::{COMPUTE_PHASES, PHASE_COUNT, Phase, WAIT_PHASES};
use crate::rank_metrics::{ITERATION, PHASE_ATTRIBUTE, PHASE_DURATION_MS, STEP_DURATION_MS};

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
pub fn rank_intervals(points: &[MetricPoint]) -> Vec<RankInterval> {
    // (file rank, export) -> what that collection held.
    #[derive(Default)]
    struct Collection {
        coords: Option<(u32, u32, u32, u32)>,
        iteration: Option<u64>,
        phase_ms: [f64; PHASE_COUNT],
        step_ms: Option<f64>,
    }
    let mut collections: BTreeMap<(u32, usize), Collection> = BTreeMap::new();
    let coordinate = |p: &MetricPoint, key: &str| p.attributes.get(key).and_then(|v| v.as_i64());
    for p in points {
        let c = collections.entry((p.file_rank, p.export)).or_default();
        let coords = (|| {
            let get = |key| coordinate(p, key).and_then(|v| u32::try_from(v).ok());
            Some((
                get(semconv::DL_RANK)?,
                get(semconv::DL_PIPELINE_PARALLEL_RANK)?,
                get(semconv::DL_TENSOR_PARALLEL_RANK)?,
                get(semconv::DL_DATA_PARALLEL_RANK)?,
            ))
        })();
        if p.metric == ITERATION.name {
            c.coords = c.coords.or(coords);
            #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an iteration count")]
            let iteration = p.value.max(0.0) as u64;
            c.iteration = Some(iteration);
        } else if p.metric == STEP_DURATION_MS.name {
            c.coords = c.coords.or(coords);
            c.step_ms = Some(p.value);
        } else if p.metric == PHASE_DURATION_MS.name
            && let Some(phase) = p.attributes.get(PHASE_ATTRIBUTE).and_then(|v| v.as_str()).and_then(Phase::from_name)
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
        let mut summary: BTreeMap<u32, RankInterval> = BTreeMap::new();
        for &rank in &ranks {
            let rows: Vec<&RankInterval> =
                window.iter().flat_map(|i| by_iteration[i].iter().copied().filter(move |r| r.rank == rank)).collect();
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
/// or a line saying that no rank is late.
pub fn write_section(out: &mut dyn Write, findings: &[Straggler], ranks: usize) -> io::Result<()> {
    writeln!(out, "stragglers ({ranks} ranks with rank metrics, windows of {WINDOW_INTERVALS} log intervals):")?;
    if ranks == 0 {
        return writeln!(out, "  no rank metrics in this export (run with MEGATRON_OTEL_RANK_METRICS=1)");
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

    #[test]
    fn equal_ranks_have_no_culprit() {
        let rows: Vec<RankInterval> = (0..4).map(|r| interval(r, r, 5, 20.0, 3.0 + f64::from(r))).collect();
        assert!(analyze(&rows).is_empty());
        let mut out = Vec::new();
        write_section(&mut out, &[], 4).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("none: no rank is late"));
    }
}
