//! `lens analyze DIR`: the cross-rank analyses of a `file` export, with no
//! server (docs/ranks.md, docs/goodput.md). Three sections:
//!
//! - "stragglers" (when DIR holds metrics files): per window of log
//!   intervals, the rank that makes its data-parallel peers wait, its phase,
//!   its lateness and the peers' wait (the `stragglers` rule), from the rank
//!   metrics that every rank writes with `<PREFIX>_RANK_METRICS=1`; one
//!   section per run;
//! - "goodput" (when DIR, or its run directories, hold traces files): the
//!   goodput breakdown from the spans (`goodput_view`), one attempt per run
//!   directory (per run of a directory holding several) in time order (DIR
//!   may be the `telemetry/` parent of a crashed and a resumed attempt,
//!   whose directory also holds what it replayed from the crashed one's
//!   spool, read with the crashed attempt: see `attempt_dir`);
//! - "hangs": what the hang watchdog left ([`crate::hangs`]).
//!
//! # Streaming
//!
//! The files are read one line at a time (lens-core's
//! `otlp_file::{metric_lines, span_lines}`) and aggregated as they go; no
//! point or span of the files is collected:
//!
//! - the metrics files of a directory are read twice (directories in the
//!   order their metrics began): once for the ranks of each run, the grid
//!   its counters are differenced on (`stragglers::GridStep`), the
//!   attempts of the run and the hang gauge, then in lockstep (one line of
//!   each file in turn) through `stragglers::IntervalReader`, which
//!   differences each rank's successive exports (a restart of its counters
//!   starts a later attempt), so that an interval is settled as soon as
//!   every rank has reported it or moved past it; complete intervals fill a
//!   window of `stragglers::WINDOW_INTERVALS` within one attempt
//!   (`stragglers::Windows`, which `stragglers::analyze` uses too), which
//!   the rule judges and drops. What is held is a few intervals per rank
//!   ([`Analysis::peak_retained`]);
//! - the traces files feed the hang events; the goodput view reads the
//!   files of the one rank it reads per attempt twice
//!   ([`goodput_view::breakdown_read`]): first keeping only the spans that
//!   are not iterations (startup, loads, saves, finalizes that finalized
//!   something, evaluations, the normal end, with only the attributes it
//!   reads), then counting the iterations between each two of their events.
//!   What it holds grows with checkpoints and evaluations, not with
//!   iterations ([`Analysis::goodput_records`]).
//!
//! # Bad input
//!
//! A directory without any export is a usage error (exit 2, naming the
//! directory and what was expected), and so is one whose files hold no span
//! and no metric point that could be read (random bytes, empty files); a
//! line that is not JSON (a truncated last line, a damaged one) or not an
//! export request (`[1,2,3]`), and a point or span without its values, are
//! skipped and counted, and the count is reported; a directory whose files
//! hold several run ids (a reused `<PREFIX>_FILE_DIR`) is reported per run
//! (one stragglers section, one goodput attempt per run id), with a note;
//! one named after its run that holds other runs' spans holds what a
//! resumed attempt replayed, and gets no such note: those spans join their
//! own runs' directories, or are left out with a note of their own
//! ([`PartialRun`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lens_fallbacks::otlp_file::{self, AttributeValue, MetricLine, MetricPoint, SpanLine};
use lens_fallbacks::semconv;
use lens_training::{goodput_view, stragglers};

use crate::advice::Advice;
use crate::hangs::Hangs;

/// `analyze`: cross-rank analyses of a `file` export.
#[derive(Clone, Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// The `file` exporter's directory (`telemetry/<run id>/`, holding
    /// `metrics-rank<N>.jsonl` and `traces-rank<N>.jsonl`), or its parent
    /// holding several run directories.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// Why `analyze` could not run.
#[derive(Debug)]
pub enum AnalyzeError {
    /// DIR holds no export (or cannot be listed).
    NoExport {
        /// The directory given.
        dir: PathBuf,
        /// Why it could not be listed, if it could not.
        source: Option<io::Error>,
        /// Its subdirectories whose own subdirectories hold exports (a
        /// directory given one level too high).
        deeper: Vec<PathBuf>,
    },
    /// DIR's files hold no span and no metric point that could be read.
    NothingReadable {
        /// The directory given.
        dir: PathBuf,
        /// The metrics and traces files read.
        files: usize,
        /// Lines, points or spans skipped as unreadable.
        skipped: u64,
    },
    /// A file of the export could not be opened.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// What `analyze` expects to find, for its error messages.
pub const EXPECTED: &str = "expected a lens `file` export: a directory holding metrics-rank<N>.jsonl or \
                            traces-rank<N>.jsonl (by default telemetry/<run id>/), or its parent holding run \
                            directories; gather the files of every node into one directory first";

impl AnalyzeError {
    /// The exit code: 2 (the input is not a usable export: no export files,
    /// nothing readable in them, or a file that cannot be opened).
    pub fn exit_code(&self) -> u8 {
        2
    }
}

impl fmt::Display for AnalyzeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnalyzeError::NoExport { dir, source: None, deeper } => {
                write!(
                    f,
                    "analyze {}: no metrics-rank<N>.jsonl or traces-rank<N>.jsonl file there or in its subdirectories",
                    dir.display()
                )?;
                match deeper.as_slice() {
                    [] => write!(f, " ({EXPECTED})"),
                    [one] => write!(f, "; did you mean {}?", one.display()),
                    many => {
                        write!(f, "; runs found under:")?;
                        many.iter().try_for_each(|dir| write!(f, " {}", dir.display()))
                    }
                }
            }
            AnalyzeError::NoExport { dir, source: Some(source), .. } => {
                write!(f, "analyze {}: cannot list it: {source} ({EXPECTED})", dir.display())
            }
            AnalyzeError::NothingReadable { dir, files, skipped } => {
                write!(f, "analyze {}: no span or metric point could be read from its {files} file(s)", dir.display())?;
                if *skipped > 0 {
                    write!(f, " ({skipped} unreadable lines or points skipped)")?;
                }
                write!(
                    f,
                    "; expected OTLP/JSON lines as lens's `file` exporter writes them (one export request a line)"
                )
            }
            AnalyzeError::Read { path, source } => write!(f, "analyze {}: cannot read it: {source}", path.display()),
        }
    }
}

impl std::error::Error for AnalyzeError {}

/// The stragglers of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunStragglers {
    /// The run (`nemo.run.id`, else the directory's name).
    pub run: String,
    /// Ranks with rank metrics.
    pub ranks: usize,
    /// The named stragglers, in window order.
    pub findings: Vec<stragglers::Straggler>,
    /// What the rule could compare.
    pub compared: stragglers::Compared,
}

/// A directory whose files hold several runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixedRuns {
    /// The directory.
    pub dir: PathBuf,
    /// The run ids found there.
    pub runs: Vec<String>,
}

/// Spans of a process found only as what a resumed attempt replayed from
/// its spool after that process died (its own export is not under DIR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialRun {
    /// Its run id (with the process, `R (process N)`, when another process
    /// of the run is there too).
    pub run: String,
    /// The directory that holds them.
    pub dir: PathBuf,
}

/// One process of a run: an attempt. Its host and `process.pid` tell
/// apart the attempts that share a run id (pinned), in one directory or
/// several; `None` for an export without a pid (each run is then one
/// attempt per directory).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Process {
    run: String,
    host: Option<String>,
    pid: Option<i64>,
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "{} (process {pid})", self.run),
            None => f.write_str(&self.run),
        }
    }
}

/// Who wrote a line's spans: the process (its run id, else the previous
/// line's, else the directory's name; its host and pid; a line without a
/// resource is the previous line's), and whether they were replayed from
/// a dead process's crash spool (`lens.spool.replayed` on the resource,
/// which also carries that process's run id, host and pid).
fn process_of(
    resource: Option<&BTreeMap<String, AttributeValue>>,
    last: &mut Option<(Process, bool)>,
    dir: &str,
) -> (Process, bool) {
    let Some(resource) = resource else {
        return last.clone().unwrap_or_else(|| (Process { run: dir.to_string(), host: None, pid: None }, false));
    };
    let run = match resource.get(semconv::NEMO_RUN_ID).and_then(AttributeValue::as_str) {
        Some(run) => run.to_string(),
        None => last.as_ref().map_or_else(|| dir.to_string(), |(process, _)| process.run.clone()),
    };
    let host = resource.get(semconv::HOST_NAME).and_then(AttributeValue::as_str).map(str::to_string);
    let pid = resource.get(semconv::PROCESS_PID).and_then(AttributeValue::as_i64);
    let replayed = matches!(resource.get(semconv::LENS_SPOOL_REPLAYED), Some(AttributeValue::Bool(true)));
    let found = (Process { run, host, pid }, replayed);
    *last = Some(found.clone());
    found
}

/// The world size of a line: its resource's `dl.world_size`, else the one
/// its file named last (a line without a resource continues the one before).
fn world_size_of(resource: Option<&BTreeMap<String, AttributeValue>>, last: &mut Option<i64>) -> Option<i64> {
    if let Some(resource) = resource {
        *last = resource.get(semconv::DL_WORLD_SIZE).and_then(AttributeValue::as_i64);
    }
    *last
}

/// What the first pass read of one process in one directory (then, joined,
/// of one attempt).
#[derive(Default)]
struct Found {
    boundaries: goodput_view::Boundaries,
    spans: usize,
    /// Some of it is the process's own export (not marked replayed).
    own: bool,
    /// The rank it was read at (its resource's `dl.rank`, else its file's)
    /// and its world size: the goodput view reads one rank per attempt.
    rank: u32,
    world: Option<i64>,
}

impl Found {
    /// Adds what was read of the same process elsewhere.
    fn absorb(&mut self, other: Found) {
        self.boundaries.merge(other.boundaries);
        self.spans += other.spans;
        self.own |= other.own;
        self.rank = self.rank.max(other.rank);
        self.world = self.world.or(other.world);
    }
}

/// The rank of a line: its resource's `dl.rank`, else the one its file named
/// last, else the file's (`lens recover` writes every rank's spans into one
/// file, each under its own resource).
fn rank_of(resource: Option<&BTreeMap<String, AttributeValue>>, last: &mut Option<u32>, file_rank: u32) -> u32 {
    if let Some(rank) = resource
        .and_then(|r| r.get(semconv::DL_RANK))
        .and_then(AttributeValue::as_i64)
        .and_then(|r| u32::try_from(r).ok())
    {
        *last = Some(rank);
    }
    last.unwrap_or(file_rank)
}

/// Where the spans of each process read in each directory belong: the
/// directory of that process's own export. A resumed attempt replays its
/// predecessor's spool into its own directory, with the predecessor's
/// resource (run id, host and pid) marked replayed: those spans join the
/// directory where that process's own spans are. For an export from before
/// the mark: the one named after its run (`telemetry/<run id>/`), else the
/// one where it is the only process read (pinned run ids in a directory per
/// attempt), else the one that holds its startup, else the one that holds
/// the most of its spans. Without a pid, only a directory named after the
/// run is joined.
fn homes<'a>(
    dirs: &'a [ExportDir],
    found: &BTreeMap<(usize, Process), Found>,
    dir_processes: &BTreeMap<usize, BTreeSet<Process>>,
) -> impl Fn(usize, &Process) -> usize + 'a {
    let mut per_process: BTreeMap<Process, Vec<(usize, &Found)>> = BTreeMap::new();
    for ((dir_index, process), read) in found {
        per_process.entry(process.clone()).or_default().push((*dir_index, read));
    }
    let chosen: BTreeMap<Process, usize> = per_process
        .into_iter()
        .filter(|(process, _)| process.pid.is_some())
        .filter_map(|(process, places)| {
            let marked = places.iter().any(|(_, read)| !read.own);
            let own = places.iter().find(|(_, read)| marked && read.own);
            let started = places.iter().find(|(_, read)| read.boundaries.has_startup());
            let named = places.iter().find(|(d, _)| dirs[*d].name == process.run);
            let alone = places.iter().find(|(d, _)| dir_processes.get(d).is_some_and(|p| p.len() == 1));
            let most = places.iter().max_by_key(|(d, read)| (read.spans, std::cmp::Reverse(*d)));
            own.or(named).or(alone).or(started).or(most).map(|(d, _)| (process, *d))
        })
        .collect();
    move |dir: usize, process: &Process| match chosen.get(process) {
        Some(home) => *home,
        None if dirs[dir].name == process.run => dir,
        None => dirs.iter().position(|d| d.name == process.run).unwrap_or(dir),
    }
}

/// What the export held.
#[derive(Debug)]
pub struct Analysis {
    /// Per run, the stragglers (`None`: no metrics files).
    pub stragglers: Option<Vec<RunStragglers>>,
    /// The goodput breakdown from the spans (`None`: no traces files).
    pub goodput: Option<Result<goodput_view::SpanBreakdown, Vec<goodput_view::Missing>>>,
    /// The run ids (`nemo.run.id`, else the directory's name) of the
    /// attempts the goodput section adds up, sorted.
    pub goodput_runs: Vec<String>,
    /// The hang watchdog's evidence.
    pub hangs: Hangs,
    /// What advice names (from the export's resource): the first that
    /// knows the program's prefix.
    pub advice: Advice,
    /// The same per run id ([`Analysis::advice_for`]).
    pub run_advice: BTreeMap<String, Advice>,
    /// Lines, points or spans that could not be read.
    pub skipped: u64,
    /// Directories holding several runs.
    pub mixed: Vec<MixedRuns>,
    /// Runs found only as the spans a later attempt replayed from their
    /// spools (their own directories are not under DIR): not in the
    /// goodput breakdown.
    pub partial: Vec<PartialRun>,
    /// The most iteration records the straggler analysis held at once,
    /// plus the hang records: grows with ranks, not with the files' size.
    pub peak_retained: usize,
    /// The most records the goodput view held at once: per attempt (of the
    /// one rank it reads), its startup, load, save, finalize, evaluation and
    /// end spans in the first pass, then their events and one record per
    /// run of iterations between two of them; grows with checkpoints and
    /// evaluations, not with iterations.
    pub goodput_records: usize,
}

/// One directory of the export.
#[derive(Debug)]
struct ExportDir {
    dir: PathBuf,
    name: String,
    metrics: Vec<(u32, PathBuf)>,
    traces: Vec<(u32, PathBuf)>,
}

fn dir_name(dir: &Path) -> String {
    dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// DIR itself when it holds metrics or traces files, else each of its
/// subdirectories that does, by name.
fn export_dirs(dir: &Path) -> Result<Vec<ExportDir>, AnalyzeError> {
    let no_export =
        |source| AnalyzeError::NoExport { dir: dir.to_path_buf(), source: Some(source), deeper: Vec::new() };
    let read = |dir: &Path| -> io::Result<ExportDir> {
        Ok(ExportDir {
            dir: dir.to_path_buf(),
            name: dir_name(dir),
            metrics: otlp_file::metrics_files(dir)?,
            traces: otlp_file::traces_files(dir)?,
        })
    };
    let top = read(dir).map_err(no_export)?;
    if !top.metrics.is_empty() || !top.traces.is_empty() {
        return Ok(vec![top]);
    }
    let subdirs_of = |dir: &Path| -> io::Result<Vec<PathBuf>> {
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.is_dir())
            .collect();
        subdirs.sort();
        Ok(subdirs)
    };
    let holds_export = |dir: &Path| read(dir).is_ok_and(|e| !e.metrics.is_empty() || !e.traces.is_empty());
    let subdirs = subdirs_of(dir).map_err(no_export)?;
    let found: Vec<ExportDir> = subdirs
        .iter()
        .filter_map(|sub| read(sub).ok())
        .filter(|e| !e.metrics.is_empty() || !e.traces.is_empty())
        .collect();
    if found.is_empty() {
        // Given one level too high (`run1/` for `run1/telemetry/<run>/`)?
        let deeper = subdirs
            .into_iter()
            .filter(|sub| subdirs_of(sub).is_ok_and(|inner| inner.iter().any(|inner| holds_export(inner))))
            .collect();
        return Err(AnalyzeError::NoExport { dir: dir.to_path_buf(), source: None, deeper });
    }
    Ok(found)
}

/// `dirs` in the order their metrics began, so that a run's attempts in
/// several directories are read in time order whatever their names
/// (`attempt-10` sorts before `attempt-2`): by the earliest start time (else
/// collection time) on the first line of each metrics file that has one
/// (lines that could not be read are passed over). Directories with none
/// keep their name order, after the others.
fn in_metric_time_order(dirs: &[ExportDir]) -> Vec<&ExportDir> {
    if dirs.len() < 2 {
        return dirs.iter().collect();
    }
    let began = |export: &ExportDir| {
        export
            .metrics
            .iter()
            .filter_map(|(rank, path)| {
                otlp_file::open_metric_lines(path, *rank).ok()?.find_map(|line| {
                    line.points
                        .iter()
                        .map(|p| if p.start_time_unix_nano != 0 { p.start_time_unix_nano } else { p.time_unix_nano })
                        .filter(|time| *time != 0)
                        .min()
                })
            })
            .min()
            .unwrap_or(u64::MAX)
    };
    let mut ordered: Vec<(u64, &ExportDir)> = dirs.iter().map(|export| (began(export), export)).collect();
    ordered.sort_by_key(|(began, _)| *began);
    ordered.into_iter().map(|(_, export)| export).collect()
}

/// The run a line belongs to: its resource's `nemo.run.id`, else the one
/// its file named last, else the directory's name.
fn run_of(resource: Option<&BTreeMap<String, AttributeValue>>, last: &mut Option<String>, dir: &str) -> String {
    if let Some(run) = resource.and_then(|r| r.get(semconv::NEMO_RUN_ID)).and_then(AttributeValue::as_str) {
        *last = Some(run.to_string());
    }
    last.clone().unwrap_or_else(|| dir.to_string())
}

/// What the reading gathers besides the analyses.
#[derive(Debug, Default)]
struct Context {
    /// The first advice that knows the program's prefix, else the last read.
    advice: Advice,
    advice_final: bool,
    /// The same per run: runs of different programs in one export are
    /// each advised with their own variables.
    run_advice: BTreeMap<String, (Advice, bool)>,
    skipped: u64,
    run_ids: BTreeMap<PathBuf, BTreeSet<String>>,
}

impl Context {
    /// Notes a line's resource, of `run` (as the line's reading names it).
    fn resource(&mut self, dir: &Path, run: &str, resource: Option<&BTreeMap<String, AttributeValue>>) {
        let Some(resource) = resource else { return };
        if let Some(run) = resource.get(semconv::NEMO_RUN_ID).and_then(AttributeValue::as_str)
            && !self.run_ids.get(dir).is_some_and(|runs| runs.contains(run))
        {
            self.run_ids.entry(dir.to_path_buf()).or_default().insert(run.to_string());
        }
        let (advice, known) = self.run_advice.entry(run.to_string()).or_default();
        if !*known {
            *advice = Advice::from_resource(resource);
            *known = advice.knows_prefix();
        }
        if !self.advice_final {
            self.advice = Advice::from_resource(resource);
            self.advice_final = self.advice.knows_prefix();
        }
    }
}

/// The unreadable items of a metrics line: what lens-core's reader counted
/// (not JSON, points without a value), or 1 for a line that is JSON but
/// held no resource and no point (`[1,2,3]`, `{"resourceMetrics": 5}`: not
/// an export request), which the reader does not count.
fn metric_line_skipped(line: &MetricLine) -> u64 {
    if line.skipped == 0 && !holds_export(line) { 1 } else { line.skipped }
}

/// Whether a metrics line held an export request (a resource or a point):
/// a line that could not be read names no run of its own.
fn holds_export(line: &MetricLine) -> bool {
    line.resource.is_some() || !line.points.is_empty()
}

/// The unreadable items of a traces line, as [`metric_line_skipped`]: 1 for
/// a line that is JSON but held no resource and no span.
fn span_line_skipped(line: &SpanLine) -> u64 {
    if line.skipped == 0 && line.resource.is_none() && line.spans.is_empty() { 1 } else { line.skipped }
}

/// The straggler rule of one run, fed as the files stream by.
#[derive(Debug, Default)]
struct StragglerStream {
    /// The first reading: the grid and the ranks.
    grid: stragglers::GridStep,
    /// The second reading's differencing (made from the grid when it
    /// starts).
    reader: Option<stragglers::IntervalReader>,
    /// Every rank with rank metrics (from the first reading).
    ranks: BTreeSet<u32>,
    /// The ranks an interval waits for: those with any interval.
    expected: BTreeSet<u32>,
    /// Per attempt, the ranks with an interval in it so far: a complete
    /// interval needs each of them (a rank that reported nothing in an
    /// attempt does not keep its peers' intervals from being judged).
    attempt_ranks: BTreeMap<u32, BTreeSet<u32>>,
    /// Per (attempt, iteration) not yet settled, the ranks' records.
    pending: BTreeMap<(u32, u64), BTreeMap<u32, stragglers::RankInterval>>,
    /// Per rank, the latest (attempt, iteration) it reported, and its file.
    latest: BTreeMap<u32, ((u32, u64), usize)>,
    /// Ranks whose file ended.
    done: BTreeSet<u32>,
    /// The last settled (attempt, iteration).
    settled: Option<(u32, u64)>,
    /// The complete intervals, windowed and judged.
    windows: stragglers::Windows,
}

impl StragglerStream {
    /// Ends the first reading of a directory: the ranks, the grid the
    /// second reading uses (the run's first directory sets it, and the
    /// ranks expected in an interval are those with one on that grid), and
    /// the attempts of the series read so far.
    fn start_second_reading(&mut self) {
        self.ranks.extend(self.grid.ranks());
        let reader = self.reader.get_or_insert_with(|| stragglers::IntervalReader::new(self.grid.step()));
        reader.set_attempts(self.grid.attempts());
        self.expected.extend(self.grid.ranks_with_intervals(reader.step()));
    }

    /// One line of file `file`.
    fn push_line(&mut self, file: usize, points: &[MetricPoint]) {
        let Some(reader) = &mut self.reader else { return };
        for record in reader.push(points) {
            self.push(file, record);
        }
    }

    fn push(&mut self, file: usize, record: stragglers::RankInterval) {
        let key = record.key();
        self.attempt_ranks.entry(record.attempt).or_default().insert(record.rank);
        if self.settled.is_some_and(|settled| key <= settled) {
            return;
        }
        self.pending.entry(key).or_default().entry(record.rank).or_insert(record);
        let latest = self.latest.entry(record.rank).or_insert((key, file));
        *latest = (latest.0.max(key), file);
    }

    fn file_done(&mut self, file: usize) {
        let ranks: Vec<u32> = self.latest.iter().filter(|(_, (_, f))| *f == file).map(|(rank, _)| *rank).collect();
        self.done.extend(ranks);
    }

    /// Settles every interval that no rank can still report.
    fn settle(&mut self, everything: bool) {
        while let Some((&key, reported)) = self.pending.first_key_value() {
            let settled = everything
                || self.expected.iter().all(|rank| {
                    reported.contains_key(rank)
                        || self.done.contains(rank)
                        || self.latest.get(rank).is_some_and(|&(latest, _)| latest > key)
                });
            if !settled {
                break;
            }
            let Some((_, reported)) = self.pending.pop_first() else { break };
            self.settled = Some(key);
            // Unless forced (a directory's end), every rank that can still
            // report at `key` has, so the ranks of its attempt are all
            // known: each of them reported here. A forced settle judges an
            // attempt on the ranks this directory and the ones before gave
            // it (see docs/ranks.md on the per-rank fallback).
            if self.attempt_ranks.get(&key.0).is_some_and(|ranks| ranks.iter().all(|rank| reported.contains_key(rank)))
            {
                self.windows.push(reported.into_values());
            }
        }
    }

    fn retained(&self) -> usize {
        self.pending.values().map(BTreeMap::len).sum::<usize>() + self.windows.retained()
    }
}

/// Reads `dir` and runs the analyses.
pub fn analyze(dir: &Path) -> Result<Analysis, AnalyzeError> {
    let dirs = export_dirs(dir)?;
    let mut context = Context::default();
    let mut hangs = Hangs::default();
    let mut streams: BTreeMap<String, StragglerStream> = BTreeMap::new();
    // The runs in the order their metrics began (the directories are read
    // so), which the report keeps: a restart with a new run id comes after
    // the attempt it resumed, whatever the ids' order.
    let mut run_order: Vec<String> = Vec::new();
    let mut peak_retained = 0;
    let any_metrics = dirs.iter().any(|d| !d.metrics.is_empty());
    // What could be read at all: with no point and no span the input is not
    // an export, whatever its files are named.
    let mut points_read = 0_usize;
    let mut spans_read = 0_usize;

    for export in in_metric_time_order(&dirs) {
        // First reading: the ranks of each run, the hang gauge, the resource.
        for (rank, path) in &export.metrics {
            let lines = otlp_file::open_metric_lines(path, *rank)
                .map_err(|source| AnalyzeError::Read { path: path.clone(), source })?;
            let mut last_run = None;
            for line in lines {
                context.skipped += metric_line_skipped(&line);
                points_read += line.points.len();
                let run = run_of(line.resource.as_ref(), &mut last_run, &export.name);
                context.resource(&export.dir, &run, line.resource.as_ref());
                hangs.add_points(&run, &line.points);
                if holds_export(&line) {
                    if !streams.contains_key(&run) {
                        run_order.push(run.clone());
                    }
                    streams.entry(run).or_default().grid.push(&line.points);
                }
            }
        }
        streams.values_mut().for_each(StragglerStream::start_second_reading);
        // Second reading, in lockstep: the straggler rule as it goes.
        let mut files = Vec::new();
        for (rank, path) in &export.metrics {
            let lines = otlp_file::open_metric_lines(path, *rank)
                .map_err(|source| AnalyzeError::Read { path: path.clone(), source })?;
            files.push(Some((lines, None::<String>)));
        }
        while files.iter().any(Option::is_some) {
            for (index, slot) in files.iter_mut().enumerate() {
                let Some((lines, last_run)) = slot else { continue };
                let Some(line) = lines.next() else {
                    *slot = None;
                    streams.values_mut().for_each(|s| s.file_done(index));
                    continue;
                };
                let run = run_of(line.resource.as_ref(), last_run, &export.name);
                if holds_export(&line) {
                    streams.entry(run).or_default().push_line(index, &line.points);
                }
            }
            streams.values_mut().for_each(|s| s.settle(false));
            let held = streams.values().map(StragglerStream::retained).sum::<usize>() + hangs.retained();
            peak_retained = peak_retained.max(held);
        }
        for stream in streams.values_mut() {
            stream.settle(true);
            stream.windows.finish();
            stream.latest.clear();
            stream.done.clear();
        }
    }

    // The traces: hang events from every rank; the goodput view's first
    // pass over the spans of each attempt's highest rank in each directory
    // (the export rank under the default rank strategy; every rank's time
    // splits alike): the files are read from the highest rank down, and the
    // rank of a run at one world size is the first file holding its spans
    // (runs of different world sizes, and attempts of one run restarted
    // with fewer ranks, may share a directory).
    // An attempt is a process of a run: its run id and its `process.pid`
    // (attempts that share a pinned run id, even in one directory, are
    // apart), read first per directory, then joined where the same
    // process's spans lie in several directories ([`homes`]: the spans a
    // resumed attempt replayed from its predecessor's spool).
    let mut found: BTreeMap<(usize, Process), Found> = BTreeMap::new();
    // Per directory, the rank each run is read at per world size, and the
    // files holding lines read for it.
    let mut pinned: Vec<BTreeMap<(String, Option<i64>), u32>> = vec![BTreeMap::new(); dirs.len()];
    let mut goodput_files: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); dirs.len()];
    for (dir_index, export) in dirs.iter().enumerate() {
        for (file_rank, path) in export.traces.iter().rev() {
            let lines = otlp_file::open_span_lines(path, *file_rank)
                .map_err(|source| AnalyzeError::Read { path: path.clone(), source })?;
            let (mut last, mut last_world, mut last_rank) = (None, None, None);
            for line in lines {
                context.skipped += span_line_skipped(&line);
                spans_read += line.spans.len();
                let (process, replayed) = process_of(line.resource.as_ref(), &mut last, &export.name);
                let run = process.run.clone();
                context.resource(&export.dir, &run, line.resource.as_ref());
                let rank = rank_of(line.resource.as_ref(), &mut last_rank, *file_rank);
                let world = world_size_of(line.resource.as_ref(), &mut last_world);
                hangs.add_events(&run, rank, &line.events);
                if line.spans.is_empty() {
                    continue;
                }
                let key = (run, world);
                match pinned[dir_index].get(&key).copied() {
                    Some(highest) if highest > rank => continue,
                    // A higher rank after a lower one (a file holding
                    // several ranks): what was read of the lower goes.
                    Some(highest) if highest < rank => found.retain(|(d, p), read| {
                        !(*d == dir_index && p.run == key.0 && read.world == key.1 && read.rank < rank)
                    }),
                    _ => {}
                }
                pinned[dir_index].insert(key, rank);
                goodput_files[dir_index].insert(*file_rank);
                let read = found.entry((dir_index, process)).or_default();
                (read.rank, read.world) = (rank, world);
                line.spans.iter().for_each(|span| read.boundaries.add(span));
                read.spans += line.spans.len();
                read.own |= !replayed;
            }
        }
    }
    if points_read == 0 && spans_read == 0 {
        return Err(AnalyzeError::NothingReadable {
            dir: dir.to_path_buf(),
            files: dirs.iter().map(|d| d.metrics.len() + d.traces.len()).sum(),
            skipped: context.skipped,
        });
    }
    // Per directory, the processes read in its goodput rank's file, and
    // whether any of its lines is marked replayed (an export from before the
    // mark has none).
    let mut dir_processes: BTreeMap<usize, BTreeSet<Process>> = BTreeMap::new();
    let mut dir_marked: BTreeSet<usize> = BTreeSet::new();
    for ((dir_index, process), read) in &found {
        dir_processes.entry(*dir_index).or_default().insert(process.clone());
        if !read.own {
            dir_marked.insert(*dir_index);
        }
    }
    let home = homes(&dirs, &found, &dir_processes);
    // Per attempt, what was read of it, joined from every directory.
    let mut attempts: BTreeMap<(usize, Process), Found> = BTreeMap::new();
    for ((dir_index, process), read) in found {
        let at = home(dir_index, &process);
        attempts.entry((at, process)).or_default().absorb(read);
    }
    // What a resumed attempt replayed from a predecessor whose own export is
    // not under DIR is a part of that attempt only: left out of the
    // breakdown, with a note, rather than read as an attempt that resumed
    // without a load (unless the replay holds the predecessor's startup:
    // then it is all of it). Its spans are all marked replayed; in an
    // export from before the mark, they are of another run in a directory
    // named after its own run, or of a process with no startup in a
    // directory where another process of its run has one.
    let started: BTreeSet<(usize, Process)> =
        attempts.iter().filter(|(_, read)| read.boundaries.has_startup()).map(|(key, _)| key.clone()).collect();
    // Per run and world size, the highest rank whose own export was read: a run's goodput
    // is read at one rank, so what was replayed of a lower rank's process
    // (a rank killed below the highest, replayed by its next attempt) is
    // no part of it, and its own export not being read is no loss.
    let mut own_rank: BTreeMap<(String, Option<i64>), u32> = BTreeMap::new();
    for ((_, process), read) in attempts.iter().filter(|(_, read)| read.own) {
        let highest = own_rank.entry((process.run.clone(), read.world)).or_insert(read.rank);
        *highest = (*highest).max(read.rank);
    }
    let mut partial: Vec<PartialRun> = Vec::new();
    attempts.retain(|(dir_index, process), read| {
        let export = &dirs[*dir_index];
        let here = dir_processes.get(dir_index);
        let other_run = export.name != process.run && here.is_some_and(|p| p.iter().any(|o| o.run == export.name));
        let unmarked_part = !dir_marked.contains(dir_index)
            && process.pid.is_some()
            && !started.contains(&(*dir_index, process.clone()))
            && started.iter().any(|(d, o)| d == dir_index && o.run == process.run && o != process);
        let read_above = own_rank.get(&(process.run.clone(), read.world)).is_some_and(|highest| *highest > read.rank);
        // An attempt whose startup is among what was replayed of it
        // exported nothing itself (startup ends first, and goes in its first
        // export): its spool, replayed, is all of it, so it is counted
        // (unless a higher rank of its run is read: the run is read there).
        let whole_replay = !read.own && !read_above && started.contains(&(*dir_index, process.clone()));
        let replayed = (!read.own && !whole_replay) || other_run || unmarked_part;
        if replayed && !read_above {
            let same_run = here.is_some_and(|p| p.iter().any(|o| o.run == process.run && o != process));
            let run = if same_run { process.to_string() } else { process.run.clone() };
            partial.push(PartialRun { run, dir: export.dir.clone() });
        }
        !replayed
    });
    // Per directory, the processes whose attempts it names.
    let mut attempt_processes: BTreeMap<usize, BTreeSet<Process>> = BTreeMap::new();
    for (dir_index, process) in attempts.keys() {
        attempt_processes.entry(*dir_index).or_default().insert(process.clone());
    }
    // The second pass: the iterations of the same files, binned between
    // the events the first pass found.
    let first_pass = attempts.values().map(|read| read.boundaries.records()).sum::<usize>();
    let ranks: BTreeMap<(usize, Process), u32> = attempts.iter().map(|(key, read)| (key.clone(), read.rank)).collect();
    let mut attempts: BTreeMap<(usize, Process), (u64, goodput_view::Iterations)> = attempts
        .into_iter()
        .map(|(key, read)| {
            let first = read.boundaries.first_start().unwrap_or(u64::MAX);
            (key, (first, read.boundaries.into_iterations()))
        })
        .collect();
    for (dir_index, export) in dirs.iter().enumerate() {
        let files = &goodput_files[dir_index];
        for (file_rank, path) in export.traces.iter().filter(|(rank, _)| files.contains(rank)) {
            let lines = otlp_file::open_span_lines(path, *file_rank)
                .map_err(|source| AnalyzeError::Read { path: path.clone(), source })?;
            let (mut last, mut last_world, mut last_rank) = (None, None, None);
            for line in lines {
                let (process, _) = process_of(line.resource.as_ref(), &mut last, &export.name);
                let rank = rank_of(line.resource.as_ref(), &mut last_rank, *file_rank);
                let world = world_size_of(line.resource.as_ref(), &mut last_world);
                if pinned[dir_index].get(&(process.run.clone(), world)) != Some(&rank) {
                    continue;
                }
                let at = home(dir_index, &process);
                if let Some((_, attempt)) = attempts.get_mut(&(at, process)) {
                    line.spans.iter().for_each(|span| attempt.add(span));
                }
            }
        }
    }
    let second_pass = attempts.values().map(|(_, read)| read.records()).sum::<usize>();
    let goodput_runs: Vec<String> =
        attempts.keys().map(|(_, process)| process.run.clone()).collect::<BTreeSet<String>>().into_iter().collect();
    let goodput_records = first_pass.max(second_pass);
    // Without the `checkpoint` group no save is seen, and every iteration
    // would read as pending: a program that stamps its spans (the event
    // API) is not caught by the view's own test, which cannot tell an
    // attempt that never saved from one whose saves were not recorded; the
    // resource's groups can.
    let lacks_checkpoint = context.advice.recorded_groups().is_some() && !context.advice.records_group("checkpoint");
    let goodput = (!attempts.is_empty()).then(|| {
        let mut read: Vec<(u64, goodput_view::ReadAttempt)> = attempts
            .into_iter()
            .map(|((dir_index, process), (first_start, read))| {
                let export = &dirs[dir_index];
                let here = attempt_processes.get(&dir_index);
                let name = if here.is_some_and(|p| p.iter().any(|o| o.run != process.run)) {
                    format!("{} (run {})", export.name, process.run)
                } else if here.is_some_and(|p| p.len() > 1) {
                    let pid = process.pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
                    let clash = here.is_some_and(|p| p.iter().any(|o| o.pid == process.pid && o != &process));
                    match (&process.host, clash) {
                        (Some(host), true) => format!("{} (process {pid} on {host})", export.name),
                        _ => format!("{} (process {pid})", export.name),
                    }
                } else {
                    export.name.clone()
                };
                let rank = ranks.get(&(dir_index, process.clone())).copied().unwrap_or(0);
                (first_start, goodput_view::ReadAttempt { name, rank, read })
            })
            .collect();
        // Attempts in time order: by their first span.
        read.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        let read: Vec<goodput_view::ReadAttempt> = read.into_iter().map(|(_, attempt)| attempt).collect();
        match goodput_view::breakdown_read(&read) {
            Ok(_) if lacks_checkpoint => Err(read
                .iter()
                .map(|attempt| goodput_view::Missing::CheckpointSpans { attempt: attempt.name.clone() })
                .collect()),
            result => result,
        }
    });

    let stragglers = any_metrics.then(|| {
        let mut streams = streams;
        let mut in_order: Vec<(String, StragglerStream)> =
            run_order.into_iter().filter_map(|run| streams.remove_entry(&run)).collect();
        in_order.extend(streams);
        in_order
            .into_iter()
            .map(|(run, stream)| RunStragglers {
                run,
                ranks: stream.ranks.len(),
                compared: stream.windows.compared(),
                findings: stream.windows.into_findings(),
            })
            .collect()
    });
    // A directory named after one of its runs holds the others' replayed
    // spans (they are read with their own runs): not a mix of runs.
    let mixed = context
        .run_ids
        .iter()
        .filter(|(dir, runs)| runs.len() > 1 && !runs.contains(&dir_name(dir)))
        .map(|(dir, runs)| MixedRuns { dir: dir.clone(), runs: runs.iter().cloned().collect() })
        .collect();
    Ok(Analysis {
        stragglers,
        goodput,
        goodput_runs,
        hangs,
        advice: context.advice,
        run_advice: context.run_advice.into_iter().map(|(run, (advice, _))| (run, advice)).collect(),
        skipped: context.skipped,
        mixed,
        partial,
        peak_retained,
        goodput_records,
    })
}

impl Analysis {
    /// What advice names for the program of run `run`.
    pub fn advice_for(&self, run: &str) -> &Advice {
        self.run_advice.get(run).unwrap_or(&self.advice)
    }
}

/// Prints the "goodput" section: the view's, or what the export lacks with
/// advice naming the program's variables.
fn write_goodput(
    out: &mut dyn Write,
    result: &Result<goodput_view::SpanBreakdown, Vec<goodput_view::Missing>>,
    advice: &Advice,
) -> io::Result<()> {
    let Err(missing) = result else { return goodput_view::write_section(out, result) };
    writeln!(out, "goodput (from the spans, one rank per attempt; docs/goodput.md):")?;
    writeln!(out, "  not computed: the export lacks what the breakdown needs:")?;
    let groups = advice.recorded_groups().map_or_else(String::new, |g| format!(" ({g})"));
    // With the group recorded, the spans are missing because the program
    // does not announce the event (a span of its own in the group is not
    // one): say which call does.
    let lacks = |group: &str, event: &str, call: &str| {
        let announce = advice.announce_with(call);
        if advice.records_group(group) {
            let announce = announce.map_or_else(String::new, |a| format!(": {a}"));
            format!("the export records `{group}`, but no span is {event}{announce}")
        } else {
            let announce = announce.map_or_else(String::new, |a| format!(", and {a}"));
            format!(
                "the export's span groups{groups} lack `{group}`; run with {}{announce}",
                advice.span_groups_with(&[group])
            )
        }
    };
    for why in missing {
        match why {
            goodput_view::Missing::IterationSpans => {
                writeln!(out, "  - no iteration spans: {}", lacks("step", "an iteration", "Training::iteration"))?;
            }
            goodput_view::Missing::CheckpointSpans { attempt } => writeln!(
                out,
                "  - {attempt}: no checkpoint spans: {}",
                lacks("checkpoint", "a checkpoint save", "Training::checkpoint_save")
            )?,
            goodput_view::Missing::AttemptIterationSpans { attempt, checkpoint } => writeln!(
                out,
                "  - {attempt}: saved checkpoint {checkpoint} but has no iteration span: {}",
                lacks("step", "an iteration", "Training::iteration")
            )?,
            goodput_view::Missing::LoadSpan { attempt, first } => writeln!(
                out,
                "  - {attempt}: resumed at iteration {first} but has no checkpoint-load span: {}",
                lacks("load_checkpoint", "a checkpoint load", "Training::checkpoint_load")
            )?,
            other => writeln!(out, "  - {other}")?,
        }
    }
    Ok(())
}

/// Prints the report of `analysis`.
pub fn write_report(out: &mut dyn Write, analysis: &Analysis) -> io::Result<()> {
    for mixed in &analysis.mixed {
        writeln!(
            out,
            "note: {} holds {} runs ({}): each is reported on its own",
            mixed.dir.display(),
            mixed.runs.len(),
            mixed.runs.join(", ")
        )?;
    }
    if let Some(runs) = &analysis.stragglers {
        let several = runs.len() > 1;
        for run in runs {
            if several {
                writeln!(out, "run {}:", run.run)?;
            }
            let advice = analysis.advice_for(&run.run).rank_metrics();
            stragglers::write_section_with_advice(out, &run.findings, run.compared, run.ranks, &advice)?;
        }
    }
    for partial in &analysis.partial {
        writeln!(
            out,
            "note: {} holds spans of run {} replayed from a crash spool after their process died (by a later attempt \
             or lens recover); that process's own export is not there, so the goodput section leaves it out (give \
             the directory above both \
             to count it)",
            partial.dir.display(),
            partial.run
        )?;
    }
    if let Some(goodput) = &analysis.goodput {
        // Attempts of one job may each have their own run id, so they are
        // added up; unrelated runs in one `telemetry/` are too: say so.
        if analysis.goodput_runs.len() > 1 {
            writeln!(
                out,
                "note: the goodput section adds up {} runs ({}) as attempts of one job; for one run alone, give its \
                 directory",
                analysis.goodput_runs.len(),
                analysis.goodput_runs.join(", ")
            )?;
        }
        let advice = match analysis.goodput_runs.as_slice() {
            [run] => analysis.advice_for(run),
            _ => &analysis.advice,
        };
        write_goodput(out, goodput, advice)?;
    }
    let several_runs = analysis.stragglers.as_ref().is_some_and(|runs| runs.len() > 1) || !analysis.mixed.is_empty();
    analysis.hangs.write_section(out, several_runs)?;
    if analysis.skipped > 0 {
        writeln!(out, "({} unreadable lines or points skipped)", analysis.skipped)?;
    }
    Ok(())
}

/// Runs `analyze` for the command line: the sections on standard output,
/// an error on standard error (exit 2).
pub fn run(args: &AnalyzeArgs) -> ExitCode {
    match analyze(&args.dir) {
        Ok(analysis) => {
            let mut out = io::stdout().lock();
            if write_report(&mut out, &analysis).is_err() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        Err(error) => {
            crate::error(&error);
            ExitCode::from(error.exit_code())
        }
    }
}
