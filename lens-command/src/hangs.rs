//! The "hangs" section of `lens analyze`: what the hang watchdog left in
//! the export (docs/ranks.md, "The hang watchdog").
//!
//! Two kinds of evidence, under today's name and the shared one (the
//! watchdog's names move from `megatron.rank.*` to `dl.training.*`; both
//! are read):
//!
//! - the span event ([`HANG_EVENT_NAMES`]) on the innermost open span of
//!   the stuck rank, with its phase, iteration and seconds stalled (read
//!   from the event attributes whose keys end in `.phase`, `.iteration` and
//!   `stalled_s`, whatever their namespace);
//! - the gauge ([`HANG_GAUGE_NAMES`]), 1 while a hang is suspected.
//!
//! [`Hangs`] aggregates as the lines stream by: one record per hang event
//! (at most [`MAX_EVENTS`] kept, the rest counted) and one gauge state per
//! (run, rank).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use lens_fallbacks::otlp_file::{AttributeValue, MetricPoint, SpanEventRecord};
use lens_fallbacks::semconv;
use lens_training::phases::{Phase, WAIT_PHASES};

/// The watchdog's span event: today's name, then the shared one.
pub const HANG_EVENT_NAMES: [&str; 2] = ["megatron.rank.hang_suspected", "dl.training.hang_suspected"];
/// The watchdog's gauge: today's name, then the shared one.
pub const HANG_GAUGE_NAMES: [&str; 2] = ["megatron.rank.hang_suspected", "dl.training.hang_suspected"];
/// Hang events kept for the report; later ones are counted.
pub const MAX_EVENTS: usize = 64;

/// One hang event.
#[derive(Clone, Debug, PartialEq)]
pub struct HangEvent {
    /// The run it belongs to (`nemo.run.id`, else the directory's name).
    pub run: String,
    /// The stuck rank.
    pub rank: u32,
    /// The iteration it was at, when the event says.
    pub iteration: Option<i64>,
    /// The phase it was in, when the event says.
    pub phase: Option<String>,
    /// Seconds without a completed iteration, when the event says.
    pub stalled_s: Option<f64>,
    /// The span that carries the event.
    pub span: String,
}

/// A rank's hang gauge over the export.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GaugeState {
    /// Points read.
    pub points: u64,
    /// Points at 1.
    pub suspected_points: u64,
    /// The value of the latest point (by time).
    pub last: f64,
    /// The latest point's time.
    pub last_time: u64,
}

/// The ranks of one hang (a run's iteration) that stalled outside a wait
/// phase, and those that stalled waiting for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LikelyCulprit {
    /// The ranks stalled outside a wait phase.
    pub stuck: BTreeSet<u32>,
    /// Their phases.
    pub stuck_phases: BTreeSet<String>,
    /// The ranks stalled in a wait phase.
    pub waiting: BTreeSet<u32>,
    /// Their phases.
    pub wait_phases: BTreeSet<String>,
}

/// "s" for a count other than one.
fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// Phase names, comma-separated.
fn join(phases: &BTreeSet<String>) -> String {
    phases.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
}

/// The hang evidence of an export, aggregated as it streams by.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hangs {
    /// The events kept (at most [`MAX_EVENTS`]).
    pub events: Vec<HangEvent>,
    /// Events beyond [`MAX_EVENTS`].
    pub events_dropped: u64,
    /// Per (run, rank), the gauge.
    pub gauges: BTreeMap<(String, u32), GaugeState>,
}

/// The first attribute whose key ends in `suffix`.
fn by_suffix<'a>(attributes: &'a BTreeMap<String, AttributeValue>, suffix: &str) -> Option<&'a AttributeValue> {
    attributes.iter().find(|(key, _)| key.ends_with(suffix)).map(|(_, value)| value)
}

impl Hangs {
    /// Takes in the events of one traces line (`rank`: its resource's
    /// `dl.rank`, else the file's). Past [`MAX_EVENTS`] the lowest ranks'
    /// are kept, whatever order the files are read in: an event of a lower
    /// rank than the highest kept takes the place of that rank's last one.
    pub fn add_events(&mut self, run: &str, rank: u32, events: &[SpanEventRecord]) {
        for event in events.iter().filter(|e| HANG_EVENT_NAMES.contains(&e.name.as_str())) {
            if self.events.len() >= MAX_EVENTS {
                self.events_dropped += 1;
                let highest = self.events.iter().map(|e| e.rank).max().unwrap_or(0);
                match self.events.iter().rposition(|e| e.rank == highest) {
                    Some(last) if rank < highest => {
                        self.events.remove(last);
                    }
                    _ => continue,
                }
            }
            let stalled_s = by_suffix(&event.attributes, "stalled_s").and_then(|v| match v {
                AttributeValue::Double(v) => Some(*v),
                #[expect(clippy::cast_precision_loss, reason = "seconds")]
                AttributeValue::Int(v) => Some(*v as f64),
                AttributeValue::String(v) => v.parse().ok(),
                _ => None,
            });
            self.events.push(HangEvent {
                run: run.to_string(),
                rank,
                iteration: by_suffix(&event.attributes, ".iteration").and_then(AttributeValue::as_i64),
                phase: by_suffix(&event.attributes, ".phase").and_then(AttributeValue::as_str).map(str::to_string),
                stalled_s,
                span: event.span_name.clone(),
            });
        }
    }

    /// Takes in the points of one metrics line.
    pub fn add_points(&mut self, run: &str, points: &[MetricPoint]) {
        for point in points.iter().filter(|p| HANG_GAUGE_NAMES.contains(&p.metric.as_str())) {
            let rank = point
                .attributes
                .get(semconv::DL_RANK)
                .and_then(AttributeValue::as_i64)
                .and_then(|r| u32::try_from(r).ok())
                .unwrap_or(point.file_rank);
            let state = self.gauges.entry((run.to_string(), rank)).or_default();
            state.points += 1;
            if point.value >= 1.0 {
                state.suspected_points += 1;
            }
            if point.time_unix_nano >= state.last_time {
                state.last_time = point.time_unix_nano;
                state.last = point.value;
            }
        }
    }

    /// Items held (for the streaming test): events plus gauge states.
    pub fn retained(&self) -> usize {
        self.events.len() + self.gauges.len()
    }

    /// Whether any hang is suspected (an event, or a gauge at 1).
    pub fn any(&self) -> bool {
        !self.events.is_empty() || self.events_dropped > 0 || self.gauges.values().any(|g| g.suspected_points > 0)
    }

    /// Per (run, iteration) of the hang events, the ranks that stalled
    /// outside a wait phase while others stalled in one (`dp_wait`,
    /// `pp_wait`, `tp_wait`): the ranks the others wait for. Only where
    /// both are seen: ranks all waiting, or all computing, name no one.
    pub fn likely_culprits(&self) -> BTreeMap<(String, i64), LikelyCulprit> {
        let mut by_hang: BTreeMap<(String, i64), LikelyCulprit> = BTreeMap::new();
        for e in &self.events {
            let (Some(iteration), Some(phase)) = (e.iteration, e.phase.as_deref()) else { continue };
            let likely = by_hang.entry((e.run.clone(), iteration)).or_default();
            let waits = Phase::from_name(phase).is_some_and(|p| WAIT_PHASES.contains(&p));
            if waits {
                likely.waiting.insert(e.rank);
                likely.wait_phases.insert(phase.to_string());
            } else {
                likely.stuck.insert(e.rank);
                likely.stuck_phases.insert(phase.to_string());
            }
        }
        // A rank on both sides is two hangs at one iteration (attempts of
        // one run): which waited for which is not known.
        by_hang.retain(|_, likely| {
            !likely.stuck.is_empty() && !likely.waiting.is_empty() && likely.stuck.is_disjoint(&likely.waiting)
        });
        by_hang
    }

    /// Prints the "hangs" section. `several_runs`: name the run on each line.
    pub fn write_section(&self, out: &mut dyn Write, several_runs: bool) -> io::Result<()> {
        writeln!(out, "hangs (the hang watchdog's span events and gauge):")?;
        let run = |run: &str| if several_runs { format!(" (run {run})") } else { String::new() };
        // By rank, each rank's in the order read (its file's order),
        // whatever order the files were read in.
        let mut events: Vec<&HangEvent> = self.events.iter().collect();
        events.sort_by_key(|e| e.rank);
        for e in events {
            let stalled = e.stalled_s.map_or_else(|| "?".to_string(), |s| format!("{s:.1}"));
            let phase = e.phase.as_deref().unwrap_or("?");
            let iteration = e.iteration.map_or_else(|| "?".to_string(), |i| i.to_string());
            writeln!(
                out,
                "  rank {}{}: no iteration completed for {stalled} s, in phase {phase} at iteration {iteration} \
                 (event on span {})",
                e.rank,
                run(&e.run),
                e.span
            )?;
        }
        if self.events_dropped > 0 {
            writeln!(out, "  ... and {} more hang event(s)", self.events_dropped)?;
        }
        for ((name, iteration), likely) in self.likely_culprits() {
            let list = |ranks: &BTreeSet<u32>| ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            let (stuck, stuck_phases) = (&likely.stuck, &likely.stuck_phases);
            let (waiting, wait_phases) = (&likely.waiting, &likely.wait_phases);
            writeln!(
                out,
                "  likely culprit{} at iteration {iteration}: rank{} {} (stalled in {}), which rank{} {} waited for \
                 ({})",
                run(&name),
                plural(stuck.len()),
                list(stuck),
                join(stuck_phases),
                plural(waiting.len()),
                list(waiting),
                join(wait_phases),
            )?;
        }
        for ((name, rank), g) in self.gauges.iter().filter(|(_, g)| g.suspected_points > 0) {
            let end = if g.last >= 1.0 { "still 1 at its last point" } else { "back to 0 by its last point" };
            writeln!(
                out,
                "  rank {rank}{}: hang gauge at 1 in {} of {} point(s), {end}",
                run(name),
                g.suspected_points,
                g.points
            )?;
        }
        if !self.any() {
            let watched = self.gauges.len();
            if watched > 0 {
                writeln!(out, "  no hang suspected (the watchdog's gauge was read on {watched} rank(s))")?;
            } else {
                writeln!(out, "  no hang suspected")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(rank: u32, n: usize) -> Vec<SpanEventRecord> {
        (0..n)
            .map(|i| SpanEventRecord {
                file_rank: rank,
                span_name: format!("span-{i}"),
                name: HANG_EVENT_NAMES[1].to_string(),
                time_unix_nano: i as u64,
                attributes: BTreeMap::new(),
            })
            .collect()
    }

    /// The watchdog's events of one hang: `(rank, phase)` at iteration 5.
    fn hang(phases: &[(u32, &str)]) -> Hangs {
        let mut hangs = Hangs::default();
        for &(rank, phase) in phases {
            let attributes = BTreeMap::from([
                ("dl.phase".to_string(), AttributeValue::String(phase.to_string())),
                ("dl.training.iteration".to_string(), AttributeValue::Int(5)),
                ("stalled_s".to_string(), AttributeValue::Double(2.0)),
            ]);
            let event = SpanEventRecord {
                file_rank: rank,
                span_name: "megatron.train.iteration".into(),
                name: HANG_EVENT_NAMES[1].to_string(),
                time_unix_nano: 1,
                attributes,
            };
            hangs.add_events("r", rank, &[event]);
        }
        hangs
    }

    fn section(hangs: &Hangs) -> String {
        let mut out = Vec::new();
        hangs.write_section(&mut out, false).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_rank_its_peers_wait_for_is_named_the_likely_culprit() {
        // Rank 1 hung in backward; the others block in the gradient
        // all-reduce, waiting for it.
        let hangs = hang(&[(0, "dp_wait"), (1, "backward"), (2, "dp_wait"), (3, "dp_wait")]);
        let text = section(&hangs);
        assert!(
            text.contains("  likely culprit at iteration 5: rank 1 (stalled in backward), which ranks 0, 2, 3 waited for (dp_wait)\n"),
            "{text}"
        );
        // All waiting (the culprit exported nothing), or all computing: no one is named.
        assert!(!section(&hang(&[(0, "dp_wait"), (2, "pp_wait")])).contains("likely culprit"));
        assert!(!section(&hang(&[(0, "forward"), (1, "backward")])).contains("likely culprit"));
        // Two hangs at one iteration (two attempts), a rank on both sides:
        // no one is named.
        let twice = hang(&[(0, "dp_wait"), (1, "backward"), (1, "dp_wait"), (0, "forward")]);
        assert!(!section(&twice).contains("likely culprit"), "{}", section(&twice));
    }

    #[test]
    fn past_the_cap_the_lowest_ranks_events_are_kept_in_their_order_whatever_the_order_read() {
        // Read from the highest rank down, as `lens analyze` reads files:
        // 40 events each of ranks 3, 2 and 1 (120, against a cap of 64).
        let mut hangs = Hangs::default();
        for rank in [3, 2, 1] {
            hangs.add_events("r", rank, &events(rank, 40));
        }
        assert_eq!(hangs.events.len(), MAX_EVENTS);
        assert_eq!(hangs.events_dropped, 120 - MAX_EVENTS as u64);
        let mut kept: Vec<(u32, String)> = hangs.events.iter().map(|e| (e.rank, e.span.clone())).collect();
        kept.sort_by_key(|(rank, _)| *rank);
        // All 40 of rank 1, the first 24 of rank 2 (in their order), none of rank 3.
        let expected: Vec<(u32, String)> =
            (0..40).map(|i| (1, format!("span-{i}"))).chain((0..24).map(|i| (2, format!("span-{i}")))).collect();
        assert_eq!(kept, expected);
    }
}
