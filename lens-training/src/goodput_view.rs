//! Goodput computed from the spans of a `file` export (issue #13): the
//! breakdown the end-of-run summary prints, rebuilt offline from one rank's
//! spans per attempt, so that a run without the summary (or a job owner
//! with only the telemetry directory) still sees where the time went.
//!
//! Per attempt (one run directory, in time order), from the spans of one
//! rank: the attempt starts where `megatron.startup` starts (its launch
//! stamp) and ends with its last span. The phase intervals are unioned per
//! bucket, so nested spans never count twice: `checkpoint_load`
//! (`megatron.checkpoint.load`), `checkpoint_save`
//! (`megatron.checkpoint.exposed_save` and `megatron.checkpoint.save`) and
//! `evaluation` (`megatron.evaluate`), a load taking precedence over a save
//! and a save over an evaluation where they overlap. Those intervals, the
//! start of the loop (the first `megatron.train` span), the end of every
//! `megatron.train.iteration` and the normal end
//! (`megatron.checkpoint.exit_finalize`) then drive the very state machine
//! the job runs, [`crate::goodput::Accountant`], with its credit rule: a
//! `megatron.checkpoint.save` covers what was pending when it started (its
//! `megatron.iteration` names the checkpoint) and keeps it once durable: a
//! synchronous save at its end, an asynchronous one (its span carries
//! `nvrx.call_idx`) at the end of the next finalize span
//! (`megatron.checkpoint.save.finalize` or `.exit_finalize`) that carries
//! `nvrx.call_idx` (one save per finalize, in order: the list's values are
//! not read). An attempt without a normal end leaves the rest pending, and
//! the next attempt charges it as lost when it resumes. The time of a
//! finalize span that finalized something is `checkpoint_save`, as the
//! job counts it. What a dead attempt
//! did after its last iteration (up to its last span) goes to `other`.
//!
//! Spans are recognized by the event stamp that lens-training's event API
//! puts on them (`dl.training.event`: `iteration`, `checkpoint_save`,
//! `checkpoint_finalize`, `checkpoint_load`, `evaluation`, `startup`,
//! `shutdown`; [`crate::events`]), whatever the program named them, and
//! otherwise, for exports written before the event API (and the Megatron
//! spans it does not open), by the Megatron names above
//! ([`crate::names::legacy::spans`]). Per role, an attempt whose spans
//! carry the stamp is read by the stamp alone. A stamped save is durable at
//! its end when it carries `dl.training.checkpoint.durable`, at the next
//! durable finalize when it carries `dl.training.checkpoint.async`, and
//! never otherwise (it failed); its iteration is `dl.training.iteration`
//! (or Megatron's `megatron.iteration`), and a stamped iteration span
//! completes `dl.training.iteration` (or `megatron.iteration` + 1).
//!
//! It needs every iteration span: the `step` group (presets `per_step`,
//! `profiling`, `all`), the `checkpoint` group, the `load_checkpoint` group
//! for a resumed attempt, and no ratio sampler (`OTEL_TRACES_SAMPLER`):
//! [`breakdown`] names what is missing instead of guessing.
//!
//! ```
//! use std::collections::BTreeMap;
//! use lens_fallbacks::otlp_file::{AttributeValue, SpanRecord};
//! use lens_training::goodput::Bucket;
//! use lens_training::goodput_view::{Attempt, breakdown};
//!
//! let span = |name: &str, start_s: f64, end_s: f64, iteration: Option<i64>| SpanRecord {
//!     file_rank: 0,
//!     name: name.into(),
//!     start_unix_nano: (start_s * 1e9) as u64,
//!     end_unix_nano: (end_s * 1e9) as u64,
//!     attributes: iteration.map(|i| ("megatron.iteration".to_string(), AttributeValue::Int(i))).into_iter().collect(),
//! };
//! let spans = vec![
//!     span("megatron.startup", 0.0, 1.0, None),
//!     span("megatron.train", 1.0, 5.0, None),
//!     span("megatron.train.iteration", 1.0, 2.0, Some(0)),
//!     span("megatron.checkpoint.save.finalize", 2.0, 2.0, None),
//!     span("megatron.checkpoint.exposed_save", 2.0, 3.0, Some(1)),
//!     span("megatron.train.iteration", 3.0, 4.0, Some(1)),
//!     span("megatron.checkpoint.exit_finalize", 4.0, 4.5, None),
//! ];
//! let view = breakdown(&[Attempt { name: "run".into(), rank: 0, spans }]).unwrap();
//! assert_eq!(view.totals.seconds(Bucket::Startup), 1.0);
//! assert_eq!(view.totals.seconds(Bucket::CheckpointSave), 1.0);
//! assert_eq!(view.totals.seconds(Bucket::Productive), 2.5);
//! assert_eq!(view.totals.seconds(Bucket::Other), 0.5);
//! assert_eq!(view.totals.productive_iterations, 2);
//! ```

use std::fmt;
use std::io::{self, Write};

use lens_fallbacks::otlp_file::SpanRecord;

use crate::events::Event as TrainingEvent;
use crate::goodput::{Accountant, Bucket, GoodputTotals};
use crate::names::legacy::spans as tx;
use crate::names::{EVENT_ATTRIBUTE, ITERATION_ATTRIBUTE};

pub use crate::names::{ASYNC_ATTRIBUTE, DURABLE_ATTRIBUTE};

/// The Megatron taxonomy's attribute keys the view reads.
mod attr {
    pub(super) const ITERATION: &str = super::tx::ITERATION_ATTRIBUTE;
    pub(super) const NVRX_CALL_IDX: &str = super::tx::CALL_INDEX_ATTRIBUTE;
}

/// The Megatron lifecycle spans the view reads by name (exports without
/// the `dl.training.event` stamp).
const LEGACY_SPANS: [&str; 9] = [
    tx::STARTUP,
    tx::TRAIN,
    tx::ITERATION,
    tx::LOAD,
    tx::SAVE,
    tx::EXPOSED_SAVE,
    tx::SAVE_FINALIZE,
    tx::EXIT_FINALIZE,
    tx::EVALUATE,
];

/// The span attributes the view reads: a reader that keeps spans for
/// [`breakdown`] (`lens analyze` streams) may drop every other attribute.
pub const READ_ATTRIBUTES: [&str; 6] =
    [EVENT_ATTRIBUTE, ITERATION_ATTRIBUTE, DURABLE_ATTRIBUTE, ASYNC_ATTRIBUTE, attr::ITERATION, attr::NVRX_CALL_IDX];

/// Whether the view reads `span` for a role (stamped with an event, or one
/// of Megatron's lifecycle spans by name); any other span only bounds its
/// attempt (the earliest start and the latest end).
pub fn reads(span: &SpanRecord) -> bool {
    stamped(span).is_some() || LEGACY_SPANS.contains(&span.name.as_str())
}

/// The event a span was stamped with, if any.
fn stamped(span: &SpanRecord) -> Option<TrainingEvent> {
    span.attributes.get(EVENT_ATTRIBUTE)?.as_str().and_then(TrainingEvent::from_name)
}

fn flag(span: &SpanRecord, key: &str) -> bool {
    matches!(span.attributes.get(key), Some(lens_fallbacks::otlp_file::AttributeValue::Bool(true)))
}

/// The spans of one attempt, from one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// The attempt's name (its run directory).
    pub name: String,
    /// The rank whose spans these are.
    pub rank: u32,
    /// Its spans.
    pub spans: Vec<SpanRecord>,
}

/// What one attempt's spans say.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptSummary {
    /// The attempt's name.
    pub name: String,
    /// The rank read.
    pub rank: u32,
    /// Launch stamp to last span, in seconds.
    pub wall_seconds: f64,
    /// The first and last iteration with a span.
    pub iterations: Option<(u64, u64)>,
    /// The iteration of its last checkpoint save.
    pub last_checkpoint: Option<u64>,
    /// Whether it reached the normal end (`megatron.checkpoint.exit_finalize`).
    pub ended_normally: bool,
}

/// The breakdown of every attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanBreakdown {
    /// Per attempt, in time order.
    pub attempts: Vec<AttemptSummary>,
    /// The run's totals over the attempts (the summary's figures).
    pub totals: GoodputTotals,
}

/// Why the spans cannot give a breakdown: what the export lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// No attempt has a `megatron.train.iteration` span.
    IterationSpans,
    /// Iterations between the first and the last have no span.
    SampledIterations {
        /// The attempt.
        attempt: String,
        /// How many are missing.
        missing: u64,
        /// The first iteration.
        first: u64,
        /// The last iteration (or checkpoint).
        last: u64,
    },
    /// Iterations but no checkpoint spans at all.
    CheckpointSpans {
        /// The attempt.
        attempt: String,
    },
    /// A resumed attempt without a load span.
    LoadSpan {
        /// The attempt.
        attempt: String,
        /// Its first iteration.
        first: u64,
    },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::IterationSpans => write!(
                f,
                "no {} spans: the export's span groups lack `step` (the `default` preset has none); run with \
                 MEGATRON_OTEL_SPAN_GROUPS=per_step (or all)",
                tx::ITERATION
            ),
            Missing::SampledIterations { attempt, missing, first, last } => write!(
                f,
                "{attempt}: {missing} of iterations {first}-{last} have no {} span: a ratio sampler \
                 (OTEL_TRACES_SAMPLER/OTEL_TRACES_SAMPLER_ARG) dropped them; the breakdown needs every iteration, \
                 run without one",
                tx::ITERATION
            ),
            Missing::CheckpointSpans { attempt } => write!(
                f,
                "{attempt}: no {} spans: the export's span groups lack `checkpoint`; run with \
                 MEGATRON_OTEL_SPAN_GROUPS=per_step (or all)",
                tx::SAVE_FINALIZE
            ),
            Missing::LoadSpan { attempt, first } => write!(
                f,
                "{attempt}: resumed at iteration {first} but has no {} span: the export's span groups lack \
                 `load_checkpoint`; run with MEGATRON_OTEL_SPAN_GROUPS=per_step (or all)",
                tx::LOAD
            ),
        }
    }
}

/// Seconds of `ns` after `origin`.
fn seconds(ns: u64, origin: u64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "nanoseconds within an attempt stay far below 2^53")]
    let s = ns.saturating_sub(origin) as f64 / 1e9;
    s
}

/// The union of `intervals`, sorted and disjoint.
fn union(mut intervals: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (start, end) in intervals {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// `intervals` less every interval of `taken` (both sorted and disjoint).
fn subtract(intervals: &[(f64, f64)], taken: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for &(start, end) in intervals {
        let mut cursor = start;
        for &(t0, t1) in taken.iter().filter(|(t0, t1)| *t1 > start && *t0 < end) {
            if t0 > cursor {
                out.push((cursor, t0));
            }
            cursor = cursor.max(t1);
        }
        if end > cursor {
            out.push((cursor, end));
        }
    }
    out
}

/// A save's checkpoint iteration: `dl.training.iteration`, else Megatron's
/// `megatron.iteration`.
fn iteration_of(span: &SpanRecord) -> Option<u64> {
    span.attributes
        .get(ITERATION_ATTRIBUTE)
        .or_else(|| span.attributes.get(attr::ITERATION))?
        .as_i64()
        .and_then(|i| u64::try_from(i).ok())
}

/// The iteration an iteration span completes: `dl.training.iteration`, else
/// Megatron's counter at the step's start (`megatron.iteration`) plus one.
fn completed_by(span: &SpanRecord) -> Option<u64> {
    let get = |key| span.attributes.get(key).and_then(|v| v.as_i64()).and_then(|i| u64::try_from(i).ok());
    get(ITERATION_ATTRIBUTE).or_else(|| get(attr::ITERATION).map(|i| i.saturating_add(1)))
}

/// The spans of an attempt by role: the stamped ones where any span of
/// the role is stamped, else the Megatron names.
struct Roles<'a> {
    spans: &'a [SpanRecord],
}

impl<'a> Roles<'a> {
    fn of(&self, event: TrainingEvent, legacy: &'static [&'static str]) -> Vec<&'a SpanRecord> {
        let marked: Vec<&SpanRecord> = self.spans.iter().filter(|s| stamped(s) == Some(event)).collect();
        if !marked.is_empty() {
            return marked;
        }
        self.spans.iter().filter(|s| stamped(s).is_none() && legacy.contains(&s.name.as_str())).collect()
    }

    fn any_stamped(&self) -> bool {
        self.spans.iter().any(|s| stamped(s).is_some())
    }
}

/// Whether any span of `attempts` is an iteration span (stamped or named).
fn has_iteration_spans(attempts: &[Attempt]) -> bool {
    attempts
        .iter()
        .any(|a| a.spans.iter().any(|s| stamped(s) == Some(TrainingEvent::Iteration) || s.name == tx::ITERATION))
}

/// One lifecycle event, in the order events at the same instant apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    End(PhaseKey),
    /// The save with this index into the attempt's saves is durable.
    Durable(usize),
    Iteration,
    /// The save with this index begins: it covers what is pending.
    Covers(usize),
    TrainingStarted,
    Begin(PhaseKey),
    Finish,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PhaseKey {
    Load,
    Save,
    Evaluation,
}

impl PhaseKey {
    const fn bucket(self) -> Bucket {
        match self {
            PhaseKey::Load => Bucket::CheckpointLoad,
            PhaseKey::Save => Bucket::CheckpointSave,
            PhaseKey::Evaluation => Bucket::Evaluation,
        }
    }
}

/// One attempt through the accountant, continuing from `prior`.
fn account(attempt: &Attempt, prior: GoodputTotals) -> Result<(AttemptSummary, GoodputTotals), Missing> {
    let spans = &attempt.spans;
    let roles = Roles { spans };
    let seconds_of = |s: &SpanRecord, origin| (seconds(s.start_unix_nano, origin), seconds(s.end_unix_nano, origin));
    let startup = roles.of(TrainingEvent::Startup, &[tx::STARTUP]);
    let origin = startup
        .iter()
        .map(|s| s.start_unix_nano)
        .min()
        .or_else(|| spans.iter().map(|s| s.start_unix_nano).min())
        .unwrap_or(0);
    let end = spans.iter().map(|s| seconds(s.end_unix_nano, origin)).fold(0.0, f64::max);
    let intervals = |list: &[&SpanRecord]| union(list.iter().map(|s| seconds_of(s, origin)).collect());
    let load = intervals(&roles.of(TrainingEvent::CheckpointLoad, &[tx::LOAD]));
    // A finalize span that finalized something: a stamped one that says
    // durable, or a Megatron one that carries `nvrx.call_idx`.
    let finalizes: Vec<&SpanRecord> = roles
        .of(TrainingEvent::CheckpointFinalize, &[tx::SAVE_FINALIZE, tx::EXIT_FINALIZE])
        .into_iter()
        .filter(|s| {
            if stamped(s).is_some() {
                flag(s, DURABLE_ATTRIBUTE)
            } else {
                s.attributes.contains_key(attr::NVRX_CALL_IDX)
            }
        })
        .collect();
    let save_spans = roles.of(TrainingEvent::CheckpointSave, &[tx::EXPOSED_SAVE, tx::SAVE]);
    let blocked = save_spans.iter().chain(&finalizes).map(|s| seconds_of(s, origin)).collect();
    let save = subtract(&union(blocked), &load);
    let evaluation =
        subtract(&subtract(&intervals(&roles.of(TrainingEvent::Evaluation, &[tx::EVALUATE])), &load), &save);

    let mut iterations: Vec<(u64, f64)> = roles
        .of(TrainingEvent::Iteration, &[tx::ITERATION])
        .into_iter()
        .filter_map(|s| Some((completed_by(s)?, seconds(s.end_unix_nano, origin))))
        .collect();
    iterations.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    iterations.dedup_by_key(|(i, _)| *i);
    let last_checkpoint = save_spans.iter().copied().filter_map(iteration_of).max();
    let name = attempt.name.clone();
    let range = iterations.first().zip(iterations.last()).map(|(a, b)| (a.0, b.0));
    if let Some((first, last)) = range {
        let last = last.max(last_checkpoint.unwrap_or(0));
        let count = u64::try_from(iterations.len()).unwrap_or(u64::MAX);
        let missing = (last - first + 1).saturating_sub(count);
        if missing > 0 {
            return Err(Missing::SampledIterations { attempt: name, missing, first, last });
        }
        // Megatron opens a finalize span every iteration: without one the
        // `checkpoint` group was off. A program of the event API has save
        // spans only when it saves.
        if !roles.any_stamped() && !spans.iter().any(|s| s.name == tx::SAVE_FINALIZE) {
            return Err(Missing::CheckpointSpans { attempt: name });
        }
        if first > 1 && load.is_empty() {
            return Err(Missing::LoadSpan { attempt: name, first });
        }
    }
    let finish = roles
        .of(TrainingEvent::Shutdown, &[tx::EXIT_FINALIZE])
        .into_iter()
        .map(|s| seconds(s.end_unix_nano, origin))
        .reduce(f64::max);
    let training = spans
        .iter()
        .filter(|s| s.name == tx::TRAIN)
        .map(|s| seconds(s.start_unix_nano, origin))
        .reduce(f64::min)
        .or_else(|| startup.iter().map(|s| seconds(s.end_unix_nano, origin)).reduce(f64::max));

    let mut events: Vec<(f64, Event)> = Vec::new();
    for (key, list) in [(PhaseKey::Load, &load), (PhaseKey::Save, &save), (PhaseKey::Evaluation, &evaluation)] {
        for &(start, stop) in list {
            events.push((start, Event::Begin(key)));
            events.push((stop, Event::End(key)));
        }
    }
    events.extend(iterations.iter().map(|&(_, t)| (t, Event::Iteration)));
    // The credit rule: each save covers what is pending at its start and
    // keeps it once durable.
    // The save that covers: a stamped save span, else Megatron's inner
    // `megatron.checkpoint.save`.
    let mut saves: Vec<&SpanRecord> =
        save_spans.iter().copied().filter(|s| stamped(s).is_some() || s.name == tx::SAVE).collect();
    saves.sort_by_key(|s| s.start_unix_nano);
    let mut finalized = finalizes.iter().map(|s| (s.start_unix_nano, s.end_unix_nano)).collect::<Vec<_>>();
    finalized.sort_unstable();
    let mut next_finalize = 0;
    for (index, save) in saves.iter().enumerate() {
        events.push((seconds(save.start_unix_nano, origin), Event::Covers(index)));
        let asynchronous = if stamped(save).is_some() {
            flag(save, ASYNC_ATTRIBUTE)
        } else {
            save.attributes.contains_key(attr::NVRX_CALL_IDX)
        };
        let failed = stamped(save).is_some() && !asynchronous && !flag(save, DURABLE_ATTRIBUTE);
        let durable = if failed {
            None
        } else if asynchronous {
            while finalized.get(next_finalize).is_some_and(|&(start, _)| start < save.start_unix_nano) {
                next_finalize += 1;
            }
            let end = finalized.get(next_finalize).map(|&(_, end)| end);
            next_finalize += 1;
            end
        } else {
            Some(save.end_unix_nano)
        };
        events.extend(durable.map(|end| (seconds(end, origin), Event::Durable(index))));
    }
    events.extend(training.map(|t| (t, Event::TrainingStarted)));
    events.extend(finish.map(|t| (t, Event::Finish)));
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));

    let mut accountant = Accountant::new(prior);
    let mut coverage = vec![None; saves.len()];
    let mut last_event = 0.0_f64;
    for &(t, event) in &events {
        match event {
            Event::Begin(key) => accountant.begin(key.bucket(), t),
            Event::End(key) => accountant.end(key.bucket(), t),
            Event::Covers(index) => coverage[index] = Some(accountant.coverage(t)),
            Event::Durable(index) => {
                if let Some(covers) = coverage[index] {
                    accountant.checkpoint_durable(covers, t);
                }
            }
            Event::Iteration => accountant.iteration_completed(t),
            Event::TrainingStarted => accountant.training_started(t),
            Event::Finish => accountant.finish(t),
        }
        last_event = last_event.max(t);
    }
    let totals = if finish.is_some() {
        accountant.snapshot(end)
    } else {
        // A dead attempt: nobody saw its time after the last event (the
        // job's record neither); the spans do, and it is not progress.
        let mut totals = accountant.snapshot(last_event);
        totals.set_seconds(Bucket::Other, totals.seconds(Bucket::Other) + (end - last_event).max(0.0));
        totals
    };
    let summary = AttemptSummary {
        name,
        rank: attempt.rank,
        wall_seconds: end,
        iterations: range,
        last_checkpoint,
        ended_normally: finish.is_some(),
    };
    Ok((summary, totals))
}

/// The breakdown of `attempts` (in time order), or everything the export
/// lacks for one.
pub fn breakdown(attempts: &[Attempt]) -> Result<SpanBreakdown, Vec<Missing>> {
    if !has_iteration_spans(attempts) {
        return Err(vec![Missing::IterationSpans]);
    }
    let mut totals = GoodputTotals::default();
    let mut summaries = Vec::new();
    let mut missing = Vec::new();
    for (i, attempt) in attempts.iter().enumerate() {
        let prior = if i == 0 { GoodputTotals::default() } else { totals.resume() };
        match account(attempt, prior) {
            Ok((summary, next)) => {
                summaries.push(summary);
                totals = next;
            }
            Err(why) => missing.push(why),
        }
    }
    if missing.is_empty() { Ok(SpanBreakdown { attempts: summaries, totals }) } else { Err(missing) }
}

/// Writes the "goodput" section: per attempt, then the run's buckets (in
/// seconds), the ratio and the iterations; or what the export lacks.
pub fn write_section(out: &mut dyn Write, result: &Result<SpanBreakdown, Vec<Missing>>) -> io::Result<()> {
    writeln!(out, "goodput (from the spans, one rank per attempt; docs/goodput.md):")?;
    let view = match result {
        Ok(view) => view,
        Err(missing) => {
            writeln!(out, "  not computed: the export lacks what the breakdown needs:")?;
            for why in missing {
                writeln!(out, "  - {why}")?;
            }
            return Ok(());
        }
    };
    for a in &view.attempts {
        let iterations =
            a.iterations.map_or_else(|| "no iterations".to_string(), |(f, l)| format!("iterations {f}-{l}"));
        let checkpoint = a.last_checkpoint.map_or_else(|| "no checkpoint".to_string(), |c| format!("checkpoint {c}"));
        let end = if a.ended_normally { "normal end" } else { "no normal end (crashed or killed)" };
        writeln!(
            out,
            "  attempt {}: rank {}, {:.3} s, {iterations}, {checkpoint}, {end}",
            a.name, a.rank, a.wall_seconds
        )?;
    }
    let t = &view.totals;
    for (bucket, seconds) in t.buckets() {
        writeln!(out, "  {:<16} {:>10.3} s", bucket.as_str(), seconds)?;
    }
    writeln!(out, "  {:<16} {:>10.3} s", "total", t.total_seconds())?;
    match t.ratio() {
        Some(ratio) => writeln!(out, "  {:<16} {:>10.4}", "ratio", ratio)?,
        None => writeln!(out, "  {:<16} {:>10}", "ratio", "n/a")?,
    }
    writeln!(
        out,
        "  iterations: {} kept, {} pending, {} lost, over {} attempt(s)",
        t.productive_iterations, t.pending_iterations, t.lost_iterations, t.attempts
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use lens_fallbacks::otlp_file::AttributeValue;

    use super::*;

    fn span(name: &str, start_s: f64, end_s: f64, iteration: Option<u64>) -> SpanRecord {
        let attributes: BTreeMap<String, AttributeValue> = iteration
            .map(|i| (attr::ITERATION.to_string(), AttributeValue::Int(i64::try_from(i).unwrap())))
            .into_iter()
            .collect();
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "test times")]
        let ns = |s: f64| (s * 1e9).round() as u64;
        SpanRecord {
            file_rank: 1,
            name: name.into(),
            start_unix_nano: ns(start_s),
            end_unix_nano: ns(end_s),
            attributes,
        }
    }

    fn attempt(name: &str, spans: Vec<SpanRecord>) -> Attempt {
        Attempt { name: name.into(), rank: 1, spans }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    /// `span` with `nvrx.call_idx` (an index at dispatch, a list at finalize).
    fn with_call_index(mut span: SpanRecord, value: AttributeValue) -> SpanRecord {
        span.attributes.insert(attr::NVRX_CALL_IDX.to_string(), value);
        span
    }

    #[test]
    fn an_async_save_keeps_its_iterations_only_at_its_finalize() {
        // Iteration 1, an async save of it (call 0) finalized after
        // iteration 2, iteration 3, an async save of it (call 1), iteration
        // 4, then a crash before that save's finalize.
        let spans = vec![
            span("megatron.startup", 0.0, 1.0, None),
            span("megatron.train", 1.0, 5.4, None),
            span("megatron.train.iteration", 1.0, 2.0, Some(0)),
            with_call_index(span("megatron.checkpoint.save", 2.0, 2.2, Some(1)), AttributeValue::Int(0)),
            span("megatron.train.iteration", 2.2, 3.2, Some(1)),
            with_call_index(span("megatron.checkpoint.save.finalize", 3.2, 3.3, None), AttributeValue::Other),
            span("megatron.train.iteration", 3.3, 4.3, Some(2)),
            with_call_index(span("megatron.checkpoint.save", 4.3, 4.4, Some(3)), AttributeValue::Int(1)),
            span("megatron.train.iteration", 4.4, 5.4, Some(3)),
        ];
        let view = breakdown(&[attempt("a1", spans)]).unwrap();
        let t = &view.totals;
        assert_eq!((t.productive_iterations, t.pending_iterations), (1, 3), "{t:?}");
        assert!(close(t.seconds(Bucket::Productive), 1.0), "{t:?}");
        assert!(close(t.seconds(Bucket::Pending), 3.0), "{t:?}");
        assert!(close(t.seconds(Bucket::CheckpointSave), 0.2 + 0.1 + 0.1), "the finalize is save time: {t:?}");
    }

    #[test]
    fn a_crash_loses_the_iterations_after_the_checkpoint_and_nested_spans_count_once() {
        // Attempt 1: iterations 1-3, a save after 2 (nested save spans),
        // crash after 3 with 0.5 s of tail.
        let first = attempt(
            "a1",
            vec![
                span("megatron.startup", 0.0, 1.0, None),
                span("megatron.train", 1.0, 5.5, None),
                span("megatron.train.iteration", 1.0, 2.0, Some(0)),
                span("megatron.train.iteration", 2.0, 3.0, Some(1)),
                span("megatron.checkpoint.save.finalize", 3.0, 3.0, None),
                span("megatron.checkpoint.exposed_save", 3.0, 4.0, Some(2)),
                span("megatron.checkpoint.save", 3.2, 3.9, Some(2)),
                span("megatron.train.iteration", 4.0, 5.0, Some(2)),
            ],
        );
        // Attempt 2: loads (inside startup), iterations 3-4, normal end.
        let second = attempt(
            "a2",
            vec![
                span("megatron.startup", 0.0, 2.0, None),
                span("megatron.checkpoint.load", 1.0, 1.5, None),
                span("megatron.train", 2.0, 4.5, None),
                span("megatron.checkpoint.save.finalize", 2.0, 2.0, None),
                span("megatron.train.iteration", 2.0, 3.0, Some(2)),
                span("megatron.train.iteration", 3.0, 4.0, Some(3)),
                span("megatron.checkpoint.exit_finalize", 4.0, 4.2, None),
            ],
        );
        let view = breakdown(&[first, second]).unwrap();
        let t = &view.totals;
        assert!(close(t.seconds(Bucket::LostProgress), 1.0), "{t:?}");
        assert!(close(t.seconds(Bucket::CheckpointSave), 1.0), "nested save counted once: {t:?}");
        assert!(close(t.seconds(Bucket::CheckpointLoad), 0.5));
        assert!(close(t.seconds(Bucket::Startup), 1.0 + 1.5));
        assert!(close(t.seconds(Bucket::Productive), 2.0 + 2.2));
        assert!(close(t.seconds(Bucket::Other), 0.5 + 0.3), "the dead tail and the normal end's rest");
        assert!(close(t.total_seconds(), 5.5 + 4.5));
        assert_eq!((t.productive_iterations, t.lost_iterations, t.pending_iterations, t.attempts), (4, 1, 0, 2));
        assert!(!view.attempts[0].ended_normally && view.attempts[1].ended_normally);
    }

    /// `span` stamped with lens-training's event (and `extra` attributes).
    fn stamped_span(mut span: SpanRecord, event: &str, extra: &[(&str, AttributeValue)]) -> SpanRecord {
        span.attributes.insert(EVENT_ATTRIBUTE.to_string(), AttributeValue::String(event.to_string()));
        for (key, value) in extra {
            span.attributes.insert((*key).to_string(), value.clone());
        }
        span
    }

    /// Megatron through the event API: its iteration and exposed-save spans
    /// carry the stamp (the save says it is asynchronous), its inner
    /// `megatron.checkpoint.save` and its per-iteration finalize spans do
    /// not: the stamped save covers, the Megatron finalize with
    /// `nvrx.call_idx` makes it durable, and the inner save is not counted
    /// a second time.
    #[test]
    fn stamped_megatron_spans_and_unstamped_finalizes_read_together() {
        let iteration = |start, end, counter| {
            stamped_span(span("megatron.train.iteration", start, end, Some(counter)), "iteration", &[])
        };
        let spans = vec![
            span("megatron.startup", 0.0, 1.0, None),
            span("megatron.train", 1.0, 5.0, None),
            iteration(1.0, 2.0, 0),
            stamped_span(
                span("megatron.checkpoint.exposed_save", 2.0, 2.3, Some(1)),
                "checkpoint_save",
                &[(ASYNC_ATTRIBUTE, AttributeValue::Bool(true))],
            ),
            with_call_index(span("megatron.checkpoint.save", 2.1, 2.2, Some(1)), AttributeValue::Int(0)),
            span("megatron.checkpoint.save.finalize", 2.3, 2.3, None),
            iteration(2.3, 3.3, 1),
            with_call_index(span("megatron.checkpoint.save.finalize", 3.3, 3.5, None), AttributeValue::Other),
            iteration(3.5, 4.5, 2),
        ];
        let view = breakdown(&[attempt("m", spans)]).unwrap();
        let t = &view.totals;
        assert_eq!((t.productive_iterations, t.pending_iterations), (1, 2), "kept at the finalize: {t:?}");
        assert!(close(t.seconds(Bucket::CheckpointSave), 0.3 + 0.2), "{t:?}");
        assert_eq!(view.attempts[0].iterations, Some((1, 3)));
        assert_eq!(view.attempts[0].last_checkpoint, Some(1));
    }

    /// A stamped save that is neither durable nor asynchronous failed: it
    /// keeps nothing, while its time is still save time.
    #[test]
    fn a_stamped_save_without_a_verdict_failed() {
        let spans = vec![
            stamped_span(span("job.startup", 0.0, 1.0, None), "startup", &[]),
            stamped_span(
                span("job.step", 1.0, 2.0, None),
                "iteration",
                &[(ITERATION_ATTRIBUTE, AttributeValue::Int(1))],
            ),
            stamped_span(
                span("job.save", 2.0, 2.5, None),
                "checkpoint_save",
                &[(ITERATION_ATTRIBUTE, AttributeValue::Int(1))],
            ),
            stamped_span(
                span("job.step", 2.5, 3.5, None),
                "iteration",
                &[(ITERATION_ATTRIBUTE, AttributeValue::Int(2))],
            ),
        ];
        let view = breakdown(&[attempt("f", spans)]).unwrap();
        let t = &view.totals;
        assert_eq!((t.productive_iterations, t.pending_iterations), (0, 2), "{t:?}");
        assert!(close(t.seconds(Bucket::CheckpointSave), 0.5), "{t:?}");
        assert!(close(t.seconds(Bucket::Startup), 1.0), "{t:?}");
        assert!(!view.attempts[0].ended_normally);
    }

    #[test]
    fn what_is_missing_is_named() {
        let startup_only =
            attempt("a", vec![span("megatron.startup", 0.0, 1.0, None), span("megatron.train", 1.0, 2.0, None)]);
        assert_eq!(breakdown(&[startup_only]), Err(vec![Missing::IterationSpans]));
        let sampled = attempt(
            "s",
            vec![
                span("megatron.checkpoint.save.finalize", 1.0, 1.0, None),
                span("megatron.train.iteration", 1.0, 2.0, Some(0)),
                span("megatron.train.iteration", 3.0, 4.0, Some(3)),
            ],
        );
        let missing = breakdown(&[sampled]).unwrap_err();
        assert_eq!(missing, vec![Missing::SampledIterations { attempt: "s".into(), missing: 2, first: 1, last: 4 }]);
        assert!(missing[0].to_string().contains("ratio sampler"));
        let resumed = attempt(
            "r",
            vec![
                span("megatron.checkpoint.save.finalize", 1.0, 1.0, None),
                span("megatron.train.iteration", 1.0, 2.0, Some(4)),
            ],
        );
        let missing = breakdown(&[resumed]).unwrap_err();
        assert!(missing[0].to_string().contains("load_checkpoint"), "{}", missing[0]);
        let mut text = Vec::new();
        write_section(&mut text, &Err(vec![Missing::IterationSpans])).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("not computed") && text.contains("MEGATRON_OTEL_SPAN_GROUPS=per_step"), "{text}");
    }
}
