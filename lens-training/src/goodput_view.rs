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
//! Memory: the accountant's `iteration_completed` only advances its clock,
//! so the iterations that end between two other events (a save's begin and
//! end, a durable checkpoint, an evaluation, the normal end) count as one
//! advance and a count. The view therefore reads an attempt's spans twice:
//! [`Boundaries`] keeps the few spans that are not iterations, then
//! [`Iterations`] bins each iteration (its number and end) into the gap
//! between two of their events. It holds what grows with checkpoints and
//! evaluations, never with iterations; `lens analyze` streams both passes
//! from the files ([`breakdown_read`]), [`breakdown`] runs them over a list.
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
use lens_fallbacks::semconv;

use crate::events::Event as TrainingEvent;
use crate::goodput::{Accountant, Bucket, Coverage, GoodputTotals};
use crate::names::legacy::spans as tx;
use crate::names::{ABANDONED, EVENT_ATTRIBUTE, ITERATION_ATTRIBUTE};

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
pub const READ_ATTRIBUTES: [&str; 9] = [
    EVENT_ATTRIBUTE,
    ITERATION_ATTRIBUTE,
    DURABLE_ATTRIBUTE,
    ASYNC_ATTRIBUTE,
    attr::ITERATION,
    attr::NVRX_CALL_IDX,
    semconv::NEMO_SPAN_TRUNCATED,
    semconv::NEMO_SPAN_OPEN,
    semconv::ERROR_TYPE,
];

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
    /// The iteration of its last checkpoint save begun (an asynchronous
    /// one may not have become durable).
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
    /// An attempt without iteration spans that saved a checkpoint (so it
    /// ran iterations), beside attempts that have them: its span groups
    /// lacked `step`.
    AttemptIterationSpans {
        /// The attempt.
        attempt: String,
        /// The checkpoint it saved.
        checkpoint: u64,
    },
    /// A resumed attempt without a load span.
    LoadSpan {
        /// The attempt.
        attempt: String,
        /// Its first iteration.
        first: u64,
    },
}

impl Missing {
    /// The text of [`Missing`]'s `Display`, with the span-group variable of
    /// the program whose export this is: `prefix` is its variable prefix
    /// (the export's resource attribute `lens.config.prefix`, such as
    /// `MYJOB_OTEL`); `None` writes `<PREFIX>_SPAN_GROUPS`.
    ///
    /// ```
    /// use lens_training::goodput_view::Missing;
    ///
    /// let missing = Missing::CheckpointSpans { attempt: "run-2".into() };
    /// assert_eq!(
    ///     missing.advice(Some("MYJOB_OTEL")).to_string(),
    ///     "run-2: no checkpoint spans: the export's span groups lack `checkpoint`; run with \
    ///      MYJOB_OTEL_SPAN_GROUPS=per_step (or all)"
    /// );
    /// assert!(missing.to_string().contains("<PREFIX>_SPAN_GROUPS=per_step"));
    /// ```
    pub fn advice<'a>(&'a self, prefix: Option<&'a str>) -> impl fmt::Display + 'a {
        MissingAdvice { missing: self, prefix }
    }
}

/// [`Missing::advice`].
struct MissingAdvice<'a> {
    missing: &'a Missing,
    prefix: Option<&'a str>,
}

impl fmt::Display for MissingAdvice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = self.prefix.unwrap_or("<PREFIX>");
        let groups = format!("{prefix}_SPAN_GROUPS=per_step (or all)");
        match self.missing {
            Missing::IterationSpans => write!(
                f,
                "no iteration spans: the export's span groups lack `step` (the `default` preset has none); run \
                 with {groups}"
            ),
            Missing::SampledIterations { attempt, missing, first, last } => write!(
                f,
                "{attempt}: {missing} of iterations {first}-{last} have no iteration span: a ratio sampler \
                 (OTEL_TRACES_SAMPLER/OTEL_TRACES_SAMPLER_ARG) dropped them, or a `lens control` window turned \
                 `step` on for some iterations only (its `lens.control.change` events say which); the breakdown \
                 needs every iteration, run with `step` on throughout and without a ratio sampler"
            ),
            Missing::CheckpointSpans { attempt } => write!(
                f,
                "{attempt}: no checkpoint spans: the export's span groups lack `checkpoint`; run with {groups}"
            ),
            Missing::AttemptIterationSpans { attempt, checkpoint } => write!(
                f,
                "{attempt}: saved checkpoint {checkpoint} but has no iteration span: its span groups lacked `step`; \
                 run every attempt with {groups}"
            ),
            Missing::LoadSpan { attempt, first } => write!(
                f,
                "{attempt}: resumed at iteration {first} but has no checkpoint-load span: the export's span groups \
                 lack `load_checkpoint`; run with {groups}"
            ),
        }
    }
}

/// Names `<PREFIX>_SPAN_GROUPS`: [`Missing::advice`] names the program's.
impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.advice(None).fmt(f)
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

/// The first pass over one attempt's spans (see [`breakdown_read`]): it
/// keeps the few spans that are not iterations (startup, loads, saves,
/// finalizes that finalized something, evaluations, the normal end), with
/// only the attributes the view reads, and a few facts about the rest (the
/// earliest start, the latest end, the loop's start, which events carry a
/// stamp). What it holds grows with the checkpoints and evaluations of the
/// attempt, not with its iterations.
#[derive(Clone, Debug, Default)]
pub struct Boundaries {
    spans: Vec<SpanRecord>,
    /// Bit `event as usize` set: some span carries that event's stamp.
    stamped: u8,
    first_start: Option<u64>,
    last_end: Option<u64>,
    /// The start of the first `megatron.train` span.
    train_start: Option<u64>,
    /// Some span is named `megatron.checkpoint.save.finalize`.
    megatron_finalizes: bool,
    /// Some span is an iteration span (stamped or named).
    iteration_spans: bool,
}

impl Boundaries {
    /// An attempt with no span read yet.
    pub fn new() -> Boundaries {
        Boundaries::default()
    }

    /// Reads `span` (any span of the attempt's rank, in any order). The
    /// hang watchdog's copies of open spans are not the job's spans: left
    /// out.
    pub fn add(&mut self, span: &SpanRecord) {
        if flag(span, semconv::NEMO_SPAN_OPEN) {
            return;
        }
        self.first_start = Some(self.first_start.map_or(span.start_unix_nano, |s| s.min(span.start_unix_nano)));
        self.last_end = Some(self.last_end.map_or(span.end_unix_nano, |e| e.max(span.end_unix_nano)));
        let event = stamped(span);
        if let Some(event) = event {
            self.stamped |= 1 << event as u8;
        }
        let name = span.name.as_str();
        self.megatron_finalizes |= name == tx::SAVE_FINALIZE;
        self.iteration_spans |= event == Some(TrainingEvent::Iteration) || name == tx::ITERATION;
        if name == tx::TRAIN {
            self.train_start = Some(self.train_start.map_or(span.start_unix_nano, |s| s.min(span.start_unix_nano)));
        }
        let keep = match event {
            Some(TrainingEvent::Iteration) => false,
            // A stamped finalize that finalized nothing: only its stamp counts.
            Some(TrainingEvent::CheckpointFinalize) => flag(span, DURABLE_ATTRIBUTE),
            Some(_) => true,
            // Megatron opens a finalize span every iteration; the one that
            // finalized something carries `nvrx.call_idx`.
            None if name == tx::SAVE_FINALIZE => span.attributes.contains_key(attr::NVRX_CALL_IDX),
            None => name != tx::ITERATION && name != tx::TRAIN && LEGACY_SPANS.contains(&name),
        };
        if keep {
            let mut kept = SpanRecord {
                file_rank: span.file_rank,
                name: span.name.clone(),
                start_unix_nano: span.start_unix_nano,
                end_unix_nano: span.end_unix_nano,
                attributes: std::collections::BTreeMap::new(),
            };
            for key in READ_ATTRIBUTES {
                if let Some(value) = span.attributes.get(key) {
                    kept.attributes.insert(key.to_string(), value.clone());
                }
            }
            self.spans.push(kept);
        }
    }

    /// The earliest start of a span read.
    pub fn first_start(&self) -> Option<u64> {
        self.first_start
    }

    /// Adds what `other` read (the same attempt's spans, read elsewhere:
    /// the part a later attempt replayed into its own directory).
    pub fn merge(&mut self, other: Boundaries) {
        let min = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).min();
        self.first_start = min(self.first_start, other.first_start);
        self.last_end = self.last_end.into_iter().chain(other.last_end).max();
        self.train_start = min(self.train_start, other.train_start);
        self.stamped |= other.stamped;
        self.megatron_finalizes |= other.megatron_finalizes;
        self.iteration_spans |= other.iteration_spans;
        self.spans.extend(other.spans);
    }

    /// Whether the attempt's startup was read: an attempt's own export has
    /// it; the part of a dead attempt that a later one replayed from its
    /// spool (what it had not exported when it died) does not.
    pub fn has_startup(&self) -> bool {
        !self.of(TrainingEvent::Startup, &[tx::STARTUP]).is_empty()
    }

    /// The spans held (the records this pass keeps).
    pub fn records(&self) -> usize {
        self.spans.len()
    }

    /// The kept spans of `event`'s role: the stamped ones where any span
    /// carries the stamp, else the unstamped ones named in `legacy`.
    fn of(&self, event: TrainingEvent, legacy: &[&str]) -> Vec<&SpanRecord> {
        if self.stamped & (1 << event as u8) != 0 {
            return self.spans.iter().filter(|s| stamped(s) == Some(event)).collect();
        }
        self.spans.iter().filter(|s| stamped(s).is_none() && legacy.contains(&s.name.as_str())).collect()
    }

    /// Ends the first pass: the attempt's origin, its phase intervals and
    /// checkpoints as the accountant's events, ready for the second pass.
    pub fn into_iterations(self) -> Iterations {
        let startup = self.of(TrainingEvent::Startup, &[tx::STARTUP]);
        let origin = startup.iter().map(|s| s.start_unix_nano).min().or(self.first_start).unwrap_or(0);
        let end = self.last_end.map_or(0.0, |end| seconds(end, origin));
        let seconds_of = |s: &SpanRecord| (seconds(s.start_unix_nano, origin), seconds(s.end_unix_nano, origin));
        let intervals = |list: &[&SpanRecord]| union(list.iter().map(|s| seconds_of(s)).collect());
        let load = intervals(&self.of(TrainingEvent::CheckpointLoad, &[tx::LOAD]));
        // A finalize span that finalized something: a stamped one that says
        // durable, or a Megatron one that carries `nvrx.call_idx` (the
        // first pass kept no other).
        let finalizes = self.of(TrainingEvent::CheckpointFinalize, &[tx::SAVE_FINALIZE, tx::EXIT_FINALIZE]);
        let finalizes: Vec<&SpanRecord> = finalizes
            .into_iter()
            .filter(|s| {
                if stamped(s).is_some() {
                    flag(s, DURABLE_ATTRIBUTE)
                } else {
                    s.attributes.contains_key(attr::NVRX_CALL_IDX)
                }
            })
            .collect();
        let save_spans = self.of(TrainingEvent::CheckpointSave, &[tx::EXPOSED_SAVE, tx::SAVE]);
        let blocked = save_spans.iter().chain(&finalizes).map(|s| seconds_of(s)).collect();
        let save = subtract(&union(blocked), &load);
        let evaluation =
            subtract(&subtract(&intervals(&self.of(TrainingEvent::Evaluation, &[tx::EVALUATE])), &load), &save);
        // A save the process died in (ended truncated: open at shutdown, or
        // replayed after a kill) saved nothing: its time is save time, and
        // it neither names the attempt's checkpoint nor keeps iterations.
        let last_checkpoint = save_spans
            .iter()
            .copied()
            .filter(|s| !flag(s, semconv::NEMO_SPAN_TRUNCATED))
            .filter_map(iteration_of)
            .max();
        let finish = self
            .of(TrainingEvent::Shutdown, &[tx::EXIT_FINALIZE])
            .into_iter()
            .map(|s| seconds(s.end_unix_nano, origin))
            .reduce(f64::max);
        let training = self
            .train_start
            .map(|start| seconds(start, origin))
            .or_else(|| startup.iter().map(|s| seconds(s.end_unix_nano, origin)).reduce(f64::max));

        let mut events: Vec<(f64, Event)> = Vec::new();
        for (key, list) in [(PhaseKey::Load, &load), (PhaseKey::Save, &save), (PhaseKey::Evaluation, &evaluation)] {
            for &(start, stop) in list {
                events.push((start, Event::Begin(key)));
                events.push((stop, Event::End(key)));
            }
        }
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
            let failed = flag(save, semconv::NEMO_SPAN_TRUNCATED)
                || (stamped(save).is_some() && !asynchronous && !flag(save, DURABLE_ATTRIBUTE));
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
        let bins = vec![None; events.len() + 1];
        Iterations {
            origin,
            end,
            events,
            saves: saves.len(),
            bins,
            stamped_iterations: self.stamped & (1 << TrainingEvent::Iteration as u8) != 0,
            iteration_spans: self.iteration_spans,
            any_stamped: self.stamped != 0,
            megatron_finalizes: self.megatron_finalizes,
            no_load: load.is_empty(),
            last_checkpoint,
            finish,
        }
    }
}

/// The iterations that end between two consecutive events of the attempt
/// (a gap): the accountant only advances its clock at an iteration, so a
/// run of them with no other event between is one advance and a count.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bin {
    /// Iteration spans read.
    count: u64,
    /// Distinct iteration numbers (exact when the numbers increase within
    /// the gap, as one rank writes them).
    distinct: u64,
    last_number: u64,
    first_end: f64,
    last_end: f64,
    min: u64,
    max: u64,
}

/// The second pass over one attempt's spans (see [`breakdown_read`]): each
/// iteration span (its number and end) goes into the gap between the
/// attempt's events where it ends. What it holds grows with the attempt's
/// checkpoints, evaluations and loads, not with its iterations.
#[derive(Clone, Debug)]
pub struct Iterations {
    origin: u64,
    end: f64,
    /// The accountant's events but iterations, in the order they apply.
    events: Vec<(f64, Event)>,
    saves: usize,
    /// Per gap (before `events[i]`, the last after every event).
    bins: Vec<Option<Bin>>,
    stamped_iterations: bool,
    iteration_spans: bool,
    any_stamped: bool,
    megatron_finalizes: bool,
    no_load: bool,
    last_checkpoint: Option<u64>,
    finish: Option<f64>,
}

impl Iterations {
    /// Reads `span` (the attempt's spans again, in any order; only its
    /// iteration spans count). An iteration span the job did not end does
    /// not complete its iteration: the hang watchdog's copy of it, or one
    /// ended truncated (open at shutdown, or replayed after its process
    /// died); nor does one the job abandoned (its step failed or panicked,
    /// as when a peer died: `error.type` is [`ABANDONED`]; a program's own
    /// `error.type` on an iteration it completed counts).
    pub fn add(&mut self, span: &SpanRecord) {
        let abandoned =
            span.attributes.get(semconv::ERROR_TYPE).and_then(lens_fallbacks::otlp_file::AttributeValue::as_str)
                == Some(ABANDONED);
        if flag(span, semconv::NEMO_SPAN_OPEN) || flag(span, semconv::NEMO_SPAN_TRUNCATED) || abandoned {
            return;
        }
        let iteration = if self.stamped_iterations {
            stamped(span) == Some(TrainingEvent::Iteration)
        } else {
            stamped(span).is_none() && span.name == tx::ITERATION
        };
        let Some(number) = iteration.then(|| completed_by(span)).flatten() else { return };
        let t = seconds(span.end_unix_nano, self.origin);
        // An iteration applies after the ends and durable checkpoints at
        // its instant and before anything that begins then.
        let gap =
            self.events.partition_point(|&(at, event)| at.total_cmp(&t).then(event.cmp(&Event::Iteration)).is_lt());
        let bin = &mut self.bins[gap];
        match bin {
            None => {
                *bin = Some(Bin {
                    count: 1,
                    distinct: 1,
                    last_number: number,
                    first_end: t,
                    last_end: t,
                    min: number,
                    max: number,
                });
            }
            Some(bin) => {
                bin.count += 1;
                if number != bin.last_number {
                    bin.distinct += 1;
                    bin.last_number = number;
                }
                bin.first_end = bin.first_end.min(t);
                bin.last_end = bin.last_end.max(t);
                bin.min = bin.min.min(number);
                bin.max = bin.max.max(number);
            }
        }
    }

    /// The records held: one per event of the attempt and one per gap
    /// that holds iterations.
    pub fn records(&self) -> usize {
        self.events.len() + self.bins.iter().flatten().count()
    }
}

/// One attempt read in two passes ([`Boundaries`], then [`Iterations`]).
#[derive(Clone, Debug)]
pub struct ReadAttempt {
    /// The attempt's name (its run directory).
    pub name: String,
    /// The rank whose spans these are.
    pub rank: u32,
    /// Its spans, read twice.
    pub read: Iterations,
}

impl ReadAttempt {
    /// `attempt`'s spans read in two passes.
    pub fn of(attempt: &Attempt) -> ReadAttempt {
        let mut boundaries = Boundaries::new();
        attempt.spans.iter().for_each(|span| boundaries.add(span));
        let mut read = boundaries.into_iterations();
        attempt.spans.iter().for_each(|span| read.add(span));
        ReadAttempt { name: attempt.name.clone(), rank: attempt.rank, read }
    }
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

/// `event` at `t` through the accountant (`coverage`: per save, what it
/// covers once it has begun).
fn apply(accountant: &mut Accountant, coverage: &mut [Option<Coverage>], t: f64, event: Event) {
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
}

/// The totals at the attempt's end (`last_event`: the time of its latest
/// event).
fn closing_totals(accountant: &Accountant, read: &Iterations, last_event: f64) -> GoodputTotals {
    if read.finish.is_some() {
        return accountant.snapshot(read.end);
    }
    // A dead attempt: nobody saw its time after the last event (the job's
    // record neither); the spans do, and it is not progress.
    let mut totals = accountant.snapshot(last_event);
    totals.set_seconds(Bucket::Other, totals.seconds(Bucket::Other) + (read.end - last_event).max(0.0));
    totals
}

/// One attempt through the accountant, continuing from `prior`.
fn account(attempt: &ReadAttempt, prior: GoodputTotals) -> Result<(AttemptSummary, GoodputTotals), Missing> {
    let read = &attempt.read;
    let bins = read.bins.iter().flatten();
    let range = bins.clone().map(|b| (b.min, b.max)).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    let name = attempt.name.clone();
    if let Some((first, last)) = range {
        let last = last.max(read.last_checkpoint.unwrap_or(0));
        let count = bins.clone().map(|b| b.distinct).sum::<u64>();
        let missing = (last - first + 1).saturating_sub(count);
        if missing > 0 {
            return Err(Missing::SampledIterations { attempt: name, missing, first, last });
        }
        // Megatron opens a finalize span every iteration: without one the
        // `checkpoint` group was off. A program of the event API has save
        // spans only when it saves.
        if !read.any_stamped && !read.megatron_finalizes {
            return Err(Missing::CheckpointSpans { attempt: name });
        }
        if first > 1 && read.no_load {
            return Err(Missing::LoadSpan { attempt: name, first });
        }
    } else if let Some(checkpoint) = read.last_checkpoint.filter(|_| read.saves > 0) {
        // It saved, so it ran iterations, and none was recorded (the view
        // is asked only when some attempt has iteration spans).
        return Err(Missing::AttemptIterationSpans { attempt: name, checkpoint });
    }

    let mut accountant = Accountant::new(prior);
    let mut coverage = vec![None; read.saves];
    let mut last_event = 0.0_f64;
    for (gap, bin) in read.bins.iter().enumerate() {
        if let Some(bin) = bin {
            // The accountant's `iteration_completed` only advances the
            // clock: the gap's iterations are the first (which may start
            // training), a count, and one advance to the last.
            accountant.iteration_completed(bin.first_end);
            for _ in 2..bin.distinct {
                accountant.iteration_completed(bin.first_end);
            }
            if bin.distinct > 1 {
                accountant.iteration_completed(bin.last_end);
            }
            last_event = last_event.max(bin.last_end);
        }
        let Some(&(t, event)) = read.events.get(gap) else { continue };
        apply(&mut accountant, &mut coverage, t, event);
        last_event = last_event.max(t);
    }
    let end = read.end;
    let totals = closing_totals(&accountant, read, last_event);
    let summary = AttemptSummary {
        name,
        rank: attempt.rank,
        wall_seconds: end,
        iterations: range,
        last_checkpoint: read.last_checkpoint,
        ended_normally: read.finish.is_some(),
    };
    Ok((summary, totals))
}

/// The breakdown of `attempts` (in time order), or everything the export
/// lacks for one. Holds every span: a reader of large exports reads each
/// attempt twice instead ([`breakdown_read`]), with the same result.
pub fn breakdown(attempts: &[Attempt]) -> Result<SpanBreakdown, Vec<Missing>> {
    breakdown_read(&attempts.iter().map(ReadAttempt::of).collect::<Vec<_>>())
}

/// The breakdown of `attempts` read in two passes (in time order), or
/// everything the export lacks for one: memory that grows with the
/// attempts' checkpoints and evaluations, not with their iterations.
///
/// ```
/// use lens_fallbacks::otlp_file::{AttributeValue, SpanRecord};
/// use lens_training::goodput_view::{Boundaries, ReadAttempt, breakdown_read};
///
/// let span = |name: &str, start: u64, end: u64, iteration: Option<i64>| SpanRecord {
///     file_rank: 0,
///     name: name.into(),
///     start_unix_nano: start * 1_000_000_000,
///     end_unix_nano: end * 1_000_000_000,
///     attributes: iteration.map(|i| ("megatron.iteration".to_string(), AttributeValue::Int(i))).into_iter().collect(),
/// };
/// let spans = || {
///     [span("megatron.startup", 0, 1, None), span("megatron.train", 1, 1000, None)]
///         .into_iter()
///         .chain((0..999).map(|i| span("megatron.train.iteration", i + 1, i + 2, Some(i as i64))))
///         .chain([span("megatron.checkpoint.save.finalize", 1000, 1000, None)])
///         .chain([span("megatron.checkpoint.exit_finalize", 1000, 1000, None)])
/// };
/// let mut boundaries = Boundaries::new();
/// spans().for_each(|span| boundaries.add(&span)); // first pass
/// assert_eq!(boundaries.records(), 2, "the startup and the normal end");
/// let mut read = boundaries.into_iterations();
/// spans().for_each(|span| read.add(&span)); // second pass
/// assert_eq!(read.records(), 3, "two events, and the 999 iterations between them");
/// let view = breakdown_read(&[ReadAttempt { name: "run".into(), rank: 0, read }]).unwrap();
/// assert_eq!(view.totals.productive_iterations, 999);
/// ```
pub fn breakdown_read(attempts: &[ReadAttempt]) -> Result<SpanBreakdown, Vec<Missing>> {
    if !attempts.iter().any(|a| a.read.iteration_spans) {
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
        // The last save begun: an asynchronous one may not have become
        // durable (the accounting counts only what did).
        let checkpoint = a.last_checkpoint.map_or_else(|| "no save".to_string(), |c| format!("last save at {c}"));
        let end = if a.ended_normally { "normal end" } else { "no normal end (stopped, crashed or killed)" };
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

    #[test]
    fn an_iteration_the_job_never_ended_completes_nothing() {
        // Iterations 1-4, then iteration 5 hangs until a SIGTERM at 8 s:
        // the watchdog's copy of its span (`nemo.span.open`) ends at 6 s
        // when it fires, the span itself ends truncated at shutdown. Neither
        // completes iteration 5: its 3 s are the dead tail, not pending.
        let flagged = |mut span: SpanRecord, key: &str| {
            span.attributes.insert(key.to_string(), AttributeValue::Bool(true));
            span
        };
        let mut spans = vec![
            span("megatron.startup", 0.0, 1.0, None),
            flagged(span("megatron.train", 1.0, 8.0, None), semconv::NEMO_SPAN_TRUNCATED),
            // Megatron's finalize, every iteration: the checkpoint group is on.
            span("megatron.checkpoint.save.finalize", 1.0, 1.0, None),
        ];
        spans.extend((0..4).map(|i| span("megatron.train.iteration", 1.0 + i as f64, 2.0 + i as f64, Some(i))));
        spans.push(flagged(span("megatron.train.iteration", 5.0, 6.0, Some(4)), semconv::NEMO_SPAN_OPEN));
        spans.push(flagged(span("megatron.train.iteration", 5.0, 8.0, Some(4)), semconv::NEMO_SPAN_TRUNCATED));
        let view = breakdown(&[attempt("a1", spans)]).unwrap();
        let t = &view.totals;
        assert_eq!((t.productive_iterations, t.pending_iterations), (0, 4), "{t:?}");
        assert!(close(t.seconds(Bucket::Pending), 4.0), "{t:?}");
        assert!(close(t.seconds(Bucket::Other), 3.0), "{t:?}");
        assert!(close(t.seconds(Bucket::Startup), 1.0), "{t:?}");
        assert_eq!(view.attempts[0].iterations, Some((1, 4)), "{view:?}");
    }

    #[test]
    fn an_iteration_the_job_abandoned_completes_nothing() {
        // Iterations 1-4, then iteration 5's step fails (a peer died) at
        // 6 s and the job stops: the span ends there, abandoned.
        let mut spans = vec![
            span("megatron.startup", 0.0, 1.0, None),
            span("megatron.train", 1.0, 6.0, None),
            span("megatron.checkpoint.save.finalize", 1.0, 1.0, None),
        ];
        spans.extend((0..4).map(|i| span("megatron.train.iteration", 1.0 + i as f64, 2.0 + i as f64, Some(i))));
        let mut abandoned = span("megatron.train.iteration", 5.0, 6.0, Some(4));
        abandoned
            .attributes
            .insert(semconv::ERROR_TYPE.to_string(), AttributeValue::String(crate::events::ABANDONED.to_string()));
        spans.push(abandoned);
        let view = breakdown(&[attempt("a1", spans)]).unwrap();
        let t = &view.totals;
        assert_eq!((t.productive_iterations, t.pending_iterations), (0, 4), "{t:?}");
        assert!(close(t.seconds(Bucket::Other), 1.0), "{t:?}");
        assert_eq!(view.attempts[0].iterations, Some((1, 4)), "{view:?}");
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

    /// A Megatron save the process died in (replayed after a kill, ended
    /// truncated) keeps nothing and names no checkpoint: the iterations
    /// before it stay pending; its time is still save time.
    #[test]
    fn a_save_the_process_died_in_keeps_nothing() {
        let mut killed = span("megatron.checkpoint.save", 3.0, 3.4, Some(2));
        killed.attributes.insert(semconv::NEMO_SPAN_TRUNCATED.to_string(), AttributeValue::Bool(true));
        let spans = vec![
            span("megatron.startup", 0.0, 1.0, None),
            span("megatron.train", 1.0, 3.4, None),
            span("megatron.checkpoint.save.finalize", 1.0, 1.0, None),
            span("megatron.train.iteration", 1.0, 2.0, Some(0)),
            span("megatron.train.iteration", 2.0, 3.0, Some(1)),
            killed,
        ];
        let view = breakdown(&[attempt("k", spans)]).unwrap();
        let t = &view.totals;
        assert_eq!((t.productive_iterations, t.pending_iterations), (0, 2), "{t:?}");
        assert!(close(t.seconds(Bucket::CheckpointSave), 0.4), "{t:?}");
        assert_eq!(view.attempts[0].last_checkpoint, None);
    }

    /// The reading the two passes replace: every iteration its own event
    /// (deduplicated by number), through the accountant one by one.
    fn per_iteration(attempts: &[Attempt]) -> GoodputTotals {
        let mut totals = GoodputTotals::default();
        for (i, attempt) in attempts.iter().enumerate() {
            let read = ReadAttempt::of(attempt).read;
            let mut iterations: Vec<(u64, f64)> = attempt
                .spans
                .iter()
                .filter(|s| {
                    if read.stamped_iterations {
                        stamped(s) == Some(TrainingEvent::Iteration)
                    } else {
                        stamped(s).is_none() && s.name == tx::ITERATION
                    }
                })
                .filter_map(|s| Some((completed_by(s)?, seconds(s.end_unix_nano, read.origin))))
                .collect();
            iterations.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
            iterations.dedup_by_key(|(i, _)| *i);
            let mut events = read.events.clone();
            events.extend(iterations.iter().map(|&(_, t)| (t, Event::Iteration)));
            events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let prior = if i == 0 { GoodputTotals::default() } else { totals.resume() };
            let mut accountant = Accountant::new(prior);
            let mut coverage = vec![None; read.saves];
            let mut last_event = 0.0_f64;
            for &(t, event) in &events {
                apply(&mut accountant, &mut coverage, t, event);
                last_event = last_event.max(t);
            }
            totals = closing_totals(&accountant, &read, last_event);
        }
        totals
    }

    /// The two passes give what one event per iteration gives (to the
    /// float rounding of one advance against many).
    fn assert_same_as_per_iteration(attempts: &[Attempt]) -> SpanBreakdown {
        let view = breakdown(attempts).unwrap();
        let reference = per_iteration(attempts);
        let (t, r) = (&view.totals, &reference);
        for ((bucket, seconds), (_, expected)) in t.buckets().zip(r.buckets()) {
            assert!((seconds - expected).abs() < 1e-9, "{bucket:?}: {seconds} != {expected}\n{t:?}\n{r:?}");
        }
        assert_eq!(
            (t.productive_iterations, t.pending_iterations, t.lost_iterations, t.attempts),
            (r.productive_iterations, r.pending_iterations, r.lost_iterations, r.attempts)
        );
        view
    }

    /// A Megatron-named attempt of `iterations` (1 s each): a sync save
    /// every `save_every` (0.25 s), an async save every `async_every`
    /// finalized at the next iteration, an evaluation every `eval_every`
    /// (0.5 s); a normal end, or a crash after the last iteration.
    fn megatron_attempt(
        name: &str,
        first: u64,
        iterations: u64,
        (save_every, async_every, eval_every): (u64, u64, u64),
        normal_end: bool,
    ) -> Attempt {
        let mut spans = vec![span("megatron.startup", 0.0, 2.0, None)];
        if first > 0 {
            spans.push(span("megatron.checkpoint.load", 0.5, 1.5, None));
        }
        let mut t = 2.0;
        let mut in_flight = None;
        let mut call = 0;
        for counter in first..first + iterations {
            let finalize_call = in_flight.take();
            let finalize = span("megatron.checkpoint.save.finalize", t, t + 0.1, None);
            spans.push(match finalize_call {
                Some(c) => with_call_index(finalize, AttributeValue::Int(c)),
                None => finalize,
            });
            t += 0.1;
            spans.push(span("megatron.train.iteration", t, t + 1.0, Some(counter)));
            t += 1.0;
            let done = counter + 1;
            if done % save_every == 0 {
                spans.push(span("megatron.checkpoint.exposed_save", t, t + 0.25, Some(done)));
                spans.push(span("megatron.checkpoint.save", t + 0.05, t + 0.2, Some(done)));
                t += 0.25;
            } else if done % async_every == 0 {
                spans.push(span("megatron.checkpoint.exposed_save", t, t + 0.1, Some(done)));
                spans.push(with_call_index(
                    span("megatron.checkpoint.save", t, t + 0.05, Some(done)),
                    AttributeValue::Int(call),
                ));
                in_flight = Some(call);
                call += 1;
                t += 0.1;
            }
            if done % eval_every == 0 {
                spans.push(span("megatron.evaluate", t, t + 0.5, Some(done)));
                t += 0.5;
            }
        }
        if normal_end {
            spans.push(with_call_index(
                span("megatron.checkpoint.exit_finalize", t, t + 0.3, None),
                AttributeValue::Other,
            ));
            t += 0.3;
        } else {
            t += 0.7;
        }
        spans.insert(1, span("megatron.train", 2.0, t, None));
        attempt(name, spans)
    }

    #[test]
    fn two_passes_give_what_every_iteration_through_the_accountant_gives() {
        let schedule = (7, 5, 6);
        for iterations in [8, 80] {
            let crashed = megatron_attempt("a1", 0, iterations, schedule, false);
            let view = assert_same_as_per_iteration(std::slice::from_ref(&crashed));
            assert!(!view.attempts[0].ended_normally);
            // The resumed attempt starts from the crashed one's last save.
            let last_save = view.attempts[0].last_checkpoint.unwrap();
            let resumed = megatron_attempt("a2", last_save, iterations, schedule, true);
            let view = assert_same_as_per_iteration(&[crashed, resumed]);
            assert_eq!(view.totals.attempts, 2);
            assert!(view.totals.lost_iterations > 0, "{:?}", view.totals);
        }
        // Every earlier fixture, stamped and unstamped.
        // A stamped run: a durable save after 1, an evaluation after 3.
        let step = |start: f64, number: i64| {
            stamped_span(
                span("job.step", start, start + 1.0, None),
                "iteration",
                &[(ITERATION_ATTRIBUTE, AttributeValue::Int(number))],
            )
        };
        let durable = [(ITERATION_ATTRIBUTE, AttributeValue::Int(1)), (DURABLE_ATTRIBUTE, AttributeValue::Bool(true))];
        let stamped_run = vec![
            stamped_span(span("job.startup", 0.0, 1.0, None), "startup", &[]),
            step(1.0, 1),
            stamped_span(span("job.save", 2.0, 2.5, None), "checkpoint_save", &durable),
            step(2.5, 2),
            step(3.5, 3),
            stamped_span(span("job.eval", 4.5, 5.0, None), "evaluation", &[]),
            step(5.0, 4),
            stamped_span(span("job.end", 6.0, 6.2, None), "shutdown", &[]),
        ];
        let view = assert_same_as_per_iteration(&[attempt("s", stamped_run)]);
        assert_eq!((view.totals.productive_iterations, view.attempts[0].iterations), (4, Some((1, 4))));
    }

    /// What the two passes hold grows with the checkpoints and
    /// evaluations, not with the iterations.
    #[test]
    fn the_records_held_do_not_grow_with_the_iterations() {
        let held = |iterations: u64| {
            // Saves only at the end: the same boundaries for any length.
            let attempt = megatron_attempt("a", 0, iterations, (iterations, u64::MAX, u64::MAX), true);
            let mut boundaries = Boundaries::new();
            attempt.spans.iter().for_each(|s| boundaries.add(s));
            let first = boundaries.records();
            let mut read = boundaries.into_iterations();
            attempt.spans.iter().for_each(|s| read.add(s));
            let view = breakdown_read(&[ReadAttempt { name: "a".into(), rank: 1, read: read.clone() }]).unwrap();
            assert_eq!(view.totals.productive_iterations, iterations);
            (first, read.records())
        };
        // Startup, the save's two spans, the normal end; then the events
        // (training starts, the save's begin, end, cover and durable, the
        // normal end) and one gap of iterations.
        assert_eq!(held(8), (4, 7));
        assert_eq!(held(800), held(8));
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
        // Either cause is named: the spans cannot tell them apart.
        let said = missing[0].to_string();
        assert!(said.contains("ratio sampler") && said.contains("a `lens control` window turned `step` on"), "{said}");
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
        assert_eq!(
            text,
            "goodput (from the spans, one rank per attempt; docs/goodput.md):\n  not computed: the export lacks what \
             the breakdown needs:\n  - no iteration spans: the export's span groups lack `step` (the `default` preset \
             has none); run with <PREFIX>_SPAN_GROUPS=per_step (or all)\n"
        );
        assert_eq!(
            missing[0].advice(Some("MYJOB_OTEL")).to_string(),
            "r: resumed at iteration 5 but has no checkpoint-load span: the export's span groups lack \
             `load_checkpoint`; run with MYJOB_OTEL_SPAN_GROUPS=per_step (or all)"
        );
        assert!(!format!("{}{:?}", missing[0], missing[0]).contains("MEGATRON"));

        // An attempt that saved checkpoint 6 with no iteration span, after
        // one that has them: its iterations ran unrecorded (its groups
        // lacked `step`), which is said rather than a breakdown without
        // them.
        let first = attempt(
            "first",
            vec![
                span("megatron.checkpoint.save.finalize", 1.0, 1.0, None),
                span("megatron.train.iteration", 1.0, 2.0, Some(0)),
                span("megatron.checkpoint.save", 2.0, 2.1, Some(1)),
            ],
        );
        let unrecorded = attempt(
            "second",
            vec![
                span("megatron.checkpoint.load", 3.0, 3.1, Some(1)),
                span("megatron.checkpoint.save.finalize", 3.2, 3.2, None),
                span("megatron.checkpoint.save", 4.0, 4.1, Some(6)),
            ],
        );
        let missing = breakdown(&[first, unrecorded]).unwrap_err();
        assert_eq!(missing, vec![Missing::AttemptIterationSpans { attempt: "second".into(), checkpoint: 6 }]);
        assert_eq!(
            missing[0].to_string(),
            "second: saved checkpoint 6 but has no iteration span: its span groups lacked `step`; run every \
             attempt with <PREFIX>_SPAN_GROUPS=per_step (or all)"
        );
    }
}
