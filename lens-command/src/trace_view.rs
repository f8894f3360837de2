//! `lens trace-view DIR`: a timeline and a span table from a `file` export,
//! with no server.
//!
//! A program that exports to files (the simulator's zero-setup run, or any
//! program with `<PREFIX>_EXPORTER=file`, or with nothing configured and no
//! collector) writes OTLP/JSON lines (`traces-rank<N>.jsonl`, one
//! `ExportTraceServiceRequest` a line, see lens-core's `file` exporter and
//! docs/exporters.md). This module turns such a directory into the
//! Chrome trace event format, which ui.perfetto.dev and chrome://tracing
//! open directly, and prints one line per span name (count, total, mean,
//! p50, p99), so that a newcomer sees what the run did without a Collector,
//! Jaeger or Tempo. docs/trace-view.md describes what the viewer shows.
//!
//! The mapping:
//!
//! - one process per rank (`pid` = rank + 1, since viewers treat pid 0 as
//!   the kernel's idle task), named `rank N`, sorted by rank;
//! - every span a complete event (`ph: "X"`) whose `args` hold its
//!   attributes and ids; `ts` is relative to the earliest span of the export
//!   (its Unix time is in `otherData`), on a grid of 1/8 µs so that the
//!   viewers' microsecond-to-nanosecond conversion is exact and nesting
//!   survives it;
//! - one thread per rank for spans that nest (each span sits inside an
//!   ancestor of its own trace), plus extra threads ("concurrent spans N")
//!   only for spans that overlap without being descendants (async work, a
//!   span that outlives its parent, a root inside another trace's window);
//! - every span link a flow (`ph: "s"` then `ph: "f"`, one id) from the
//!   linked span to the linking one, across ranks too, each end placed at a
//!   moment when the span is the innermost slice of its thread, so that the
//!   viewers bind the arrow to that very slice.
//!
//! Bad input never panics: a line that is not JSON or not a request and a
//! span without ids or times are skipped and counted. Times are taken as the
//! file gives them, and the arithmetic on them saturates: a span of a bad
//! export that starts at 0 or ends near 2^64 ns is drawn and counted (its
//! total capped at `u64::MAX` ns) rather than overflowing. An input that
//! holds no traces file, or no span at all, is a usage error (exit 2).
//!
//! The footer names the span groups the program recorded and the variable
//! that sets them (`lens.config.prefix`, `lens.span_groups` on the
//! resource), and says when the files hold several runs.
//!
//! Reading the export is lens-core's (`lens_fallbacks::otlp_file::tree`, next
//! to the `file` exporter whose format it is); this module is the viewer:
//! `lens` (and the simulator's alias) calls [`run`] with the parsed
//! [`TraceViewArgs`]; tests call [`view`] and [`write_table`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;
use lens_fallbacks::otlp_file::{self, tree::SpanStatus, tree::SpanTree, tree::TreeSpan};
use serde_json::{Value, json};

/// Nanoseconds per tick of the output grid (1/8 µs: exactly representable
/// in binary floating point, and a whole number of nanoseconds).
const TICK_NS: u64 = 125;
/// Ticks per microsecond.
const TICKS_PER_US: f64 = 8.0;
/// Parent chains longer than this are treated as broken (a cycle in bad
/// input must not loop forever).
const MAX_DEPTH: usize = 256;

/// `trace-view`: convert a `file` export into a Chrome/Perfetto trace and
/// print a per-span-name table.
#[derive(Clone, Debug, clap::Args)]
pub struct TraceViewArgs {
    /// The `file` exporter's directory (holding `traces-rank<N>.jsonl`; by
    /// default `telemetry/<run id>/`), or one such file.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Where to write the trace (default: `DIR/trace.json`).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Chrome)]
    pub format: Format,
}

/// The output formats of `trace-view`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Chrome trace event JSON (ui.perfetto.dev, chrome://tracing).
    Chrome,
}

/// Why `trace-view` could not produce a trace.
#[derive(Debug)]
pub enum TraceViewError {
    /// The input path does not exist or cannot be listed.
    Input {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The directory holds no `traces-rank<N>.jsonl`.
    NoTraceFiles {
        /// The directory given.
        dir: PathBuf,
        /// Subdirectories that do hold traces files (a `telemetry/` parent
        /// of run directories), to suggest.
        runs: Vec<PathBuf>,
    },
    /// The traces files hold no usable span.
    NoSpans {
        /// The files read.
        files: Vec<PathBuf>,
        /// Lines skipped as malformed.
        malformed_lines: usize,
    },
    /// A traces file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The output could not be written.
    Write {
        /// The output file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// `--out` names a file read, or a name of a `file` export's files:
    /// writing the trace there would destroy telemetry.
    OutIsExport {
        /// The output file.
        path: PathBuf,
        /// Whether it is a file read (else only named as an export's).
        read: bool,
    },
}

impl TraceViewError {
    /// 2 for input that is not a usable export (usage), 1 for I/O failures.
    pub fn exit_code(&self) -> u8 {
        match self {
            TraceViewError::Input { .. }
            | TraceViewError::NoTraceFiles { .. }
            | TraceViewError::NoSpans { .. }
            | TraceViewError::OutIsExport { .. } => 2,
            TraceViewError::Read { .. } | TraceViewError::Write { .. } => 1,
        }
    }
}

impl fmt::Display for TraceViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceViewError::Input { path, source } => write!(
                f,
                "trace-view: cannot read {}: {source} (expected the file exporter's directory, \
                 <PREFIX>_FILE_DIR, by default telemetry/<run id>/)",
                path.display()
            ),
            TraceViewError::NoTraceFiles { dir, runs } => {
                write!(f, "trace-view: no traces-rank<N>.jsonl in {}", dir.display())?;
                match runs.as_slice() {
                    [] => write!(
                        f,
                        " (expected the file exporter's directory, <PREFIX>_FILE_DIR, by default telemetry/<run id>/)"
                    ),
                    [one] => write!(f, "; did you mean {}?", one.display()),
                    many => {
                        write!(f, "; runs found:")?;
                        for run in many {
                            write!(f, " {}", run.display())?;
                        }
                        Ok(())
                    }
                }
            }
            TraceViewError::NoSpans { files, malformed_lines } => {
                write!(f, "trace-view: no spans in")?;
                for file in files {
                    write!(f, " {}", file.display())?;
                }
                // A metrics or logs export given as the traces file: its
                // lines are not malformed, only not spans.
                let other = files.iter().find_map(|file| {
                    let name = file.file_name()?.to_str()?;
                    ["metrics-rank", "logs-rank"].into_iter().find(|kind| name.starts_with(kind))
                });
                if *malformed_lines > 0 && other.is_none() {
                    write!(f, " ({malformed_lines} malformed line(s) skipped)")?;
                }
                match other {
                    Some(kind) => write!(
                        f,
                        "; that is a {} export: trace-view reads traces-rank<N>.jsonl, or the directory holding them",
                        kind.trim_end_matches("-rank")
                    ),
                    None => write!(f, " (expected the traces-rank<N>.jsonl of the file exporter, or their directory)"),
                }
            }
            TraceViewError::Read { path, source } => write!(f, "trace-view: cannot read {}: {source}", path.display()),
            TraceViewError::OutIsExport { path, read } => {
                let what = if *read {
                    "that is a file this conversion reads"
                } else {
                    "that is named as a file of a `file` export (traces-, metrics- or logs-rank<N>.jsonl)"
                };
                write!(
                    f,
                    "trace-view: --out {}: {what}, which the trace would overwrite; choose another file, such as \
                     trace.json",
                    path.display()
                )
            }
            TraceViewError::Write { path, source } => {
                write!(
                    f,
                    "trace-view: cannot write the trace to {} (choose the file with --out): {source}",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for TraceViewError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceViewError::Input { source, .. }
            | TraceViewError::Read { source, .. }
            | TraceViewError::Write { source, .. } => Some(source),
            TraceViewError::NoTraceFiles { .. }
            | TraceViewError::NoSpans { .. }
            | TraceViewError::OutIsExport { .. } => None,
        }
    }
}

/// The subcommand: read `args.dir`, write the trace, print the table and
/// where the trace went to stdout; errors to stderr.
pub fn run(args: &TraceViewArgs) -> ExitCode {
    let out = args.out.clone().unwrap_or_else(|| default_output(&args.dir));
    let result = view(&args.dir).and_then(|view| {
        if let Some(read) = over_export(&out, &view.files) {
            return Err(TraceViewError::OutIsExport { path: out.clone(), read });
        }
        write_trace(&out, &view.trace)?;
        Ok(view)
    });
    let view = match result {
        Ok(view) => view,
        Err(error) => {
            crate::error(&error);
            return ExitCode::from(error.exit_code());
        }
    };
    let mut stdout = io::stdout().lock();
    let printed = write_table(&mut stdout, &view.table).and_then(|()| write_footer(&mut stdout, &view, &out));
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is not worth a message.
        Err(_) => ExitCode::from(1),
    }
}

/// Whether `out` is one of the files read (`Some(true)`), or is named as a
/// file of a `file` export (`traces-rank3.jsonl`, `metrics-rank0.jsonl`,
/// ...: `Some(false)`): the trace must never be written over telemetry.
///
/// One of the files read is the same path once links are resolved, or
/// the same file under another name: a hard link has no path of its own
/// to resolve, so the device and inode numbers are compared too.
fn over_export(out: &Path, read: &[PathBuf]) -> Option<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let out_real = out.canonicalize().ok();
    let out_id = std::fs::metadata(out).ok().map(|m| (m.dev(), m.ino()));
    let same = |file: &PathBuf| {
        let same_inode = out_id.is_some() && std::fs::metadata(file).ok().map(|m| (m.dev(), m.ino())) == out_id;
        same_inode
            || match (&out_real, file.canonicalize()) {
                (Some(a), Ok(b)) => *a == b,
                _ => out == file.as_path(),
            }
    };
    if read.iter().any(same) { Some(true) } else { otlp_file::is_export_file_name(out).then_some(false) }
}

/// `DIR/trace.json`, or `trace.json` next to a single input file.
fn default_output(input: &Path) -> PathBuf {
    if input.is_file() { input.with_file_name("trace.json") } else { input.join("trace.json") }
}

fn write_trace(path: &Path, trace: &Value) -> Result<(), TraceViewError> {
    let failure = |source| TraceViewError::Write { path: path.to_path_buf(), source };
    let mut writer = BufWriter::new(File::create(path).map_err(failure)?);
    serde_json::to_writer(&mut writer, trace).map_err(|error| failure(io::Error::other(error)))?;
    writer.write_all(b"\n").and_then(|()| writer.flush()).map_err(failure)
}

/// What was read from an export: the spans (lens-core's reader) and the
/// files they came from.
#[derive(Debug, Default)]
struct Export {
    tree: SpanTree,
    files: Vec<PathBuf>,
}

/// Statistics of one span name, over every rank.
#[derive(Clone, Debug, PartialEq)]
pub struct NameStats {
    /// The span name.
    pub name: String,
    /// How many spans have it.
    pub count: usize,
    /// Sum of their durations, in nanoseconds (capped at `u64::MAX`, which
    /// only the absurd times of a bad export reach).
    pub total_ns: u64,
    /// Mean duration, in nanoseconds.
    pub mean_ns: f64,
    /// Median (nearest-rank), in nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile (nearest-rank), in nanoseconds.
    pub p99_ns: u64,
}

/// The converted export.
#[derive(Debug)]
pub struct View {
    /// The Chrome trace (`{"traceEvents": [...], ...}`).
    pub trace: Value,
    /// One row per span name, by total duration, largest first.
    pub table: Vec<NameStats>,
    /// The traces files read.
    pub files: Vec<PathBuf>,
    /// Spans converted.
    pub spans: usize,
    /// Ranks seen.
    pub ranks: usize,
    /// Links drawn as flows.
    pub flows: usize,
    /// Links whose linked span is not in the export (a rank that did not
    /// export, a span from another job).
    pub unresolved_links: usize,
    /// Lines that were not an OTLP/JSON traces request.
    pub malformed_lines: usize,
    /// Spans without ids or times.
    pub malformed_spans: usize,
    /// The run ids of the export (more than one: several runs).
    pub run_ids: Vec<String>,
    /// What the export's resource says about the program's configuration.
    pub advice: crate::advice::Advice,
    /// Whether runs of several programs (or span groups) are in the export:
    /// `advice` is then one run's.
    pub programs_differ: bool,
    /// The hang watchdog's copies of open spans (`nemo.span.open`): drawn,
    /// not counted in `table`.
    pub watchdog_copies: usize,
}

/// Reads the export at `input` (a directory or one traces file) and
/// converts it.
pub fn view(input: &Path) -> Result<View, TraceViewError> {
    let export = read_export(input)?;
    if export.tree.spans.is_empty() {
        return Err(TraceViewError::NoSpans { files: export.files, malformed_lines: export.tree.malformed_lines });
    }
    Ok(convert(export))
}

/// The traces files directly under `dir`, by rank.
fn traces_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(otlp_file::traces_files(dir)?.into_iter().map(|(_, path)| path).collect())
}

fn read_export(input: &Path) -> Result<Export, TraceViewError> {
    let metadata =
        std::fs::metadata(input).map_err(|source| TraceViewError::Input { path: input.to_path_buf(), source })?;
    let files = if metadata.is_file() {
        vec![input.to_path_buf()]
    } else {
        let files =
            traces_files(input).map_err(|source| TraceViewError::Input { path: input.to_path_buf(), source })?;
        if files.is_empty() {
            return Err(TraceViewError::NoTraceFiles { dir: input.to_path_buf(), runs: runs_below(input) });
        }
        files
    };
    let mut export = Export::default();
    for path in files {
        export.tree.read_file(&path, 0).map_err(|source| TraceViewError::Read { path: path.clone(), source })?;
        export.files.push(path);
    }
    Ok(export)
}

/// Subdirectories of `dir` that hold traces files (at most 8).
fn runs_below(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut runs: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_dir() && traces_files(path).is_ok_and(|files| !files.is_empty()))
        .collect();
    runs.sort();
    runs.truncate(8);
    runs
}

/// Where a span landed: its thread (lane) and its interval in ticks.
#[derive(Clone, Copy, Debug, Default)]
struct Placement {
    lane: usize,
    start: u64,
    end: u64,
}

/// Assigns every span of one rank to a lane so that, in each lane, a span
/// lies inside the span below it on the stack only when that span is one of
/// its ancestors. Returns the lane count and, per span, the spans directly
/// inside it on its lane (in time order).
fn assign_lanes(
    spans: &[TreeSpan],
    members: &[usize],
    placements: &mut [Placement],
) -> (usize, HashMap<usize, Vec<usize>>) {
    let by_id: HashMap<(&str, &str), usize> =
        members.iter().map(|&i| ((spans[i].trace_id.as_str(), spans[i].span_id.as_str()), i)).collect();
    let parent = |i: usize| -> Option<usize> {
        let span = &spans[i];
        by_id.get(&(span.trace_id.as_str(), span.parent_span_id.as_deref()?)).copied().filter(|&p| p != i)
    };
    let depth = |i: usize| -> usize {
        let mut depth = 0;
        let mut current = i;
        while let Some(p) = parent(current)
            && depth < MAX_DEPTH
        {
            depth += 1;
            current = p;
        }
        depth
    };
    let is_ancestor = |candidate: usize, i: usize| -> bool {
        let mut current = i;
        for _ in 0..MAX_DEPTH {
            match parent(current) {
                Some(p) if p == candidate => return true,
                Some(p) => current = p,
                None => return false,
            }
        }
        false
    };
    let mut order: Vec<(u64, std::cmp::Reverse<u64>, usize, usize)> =
        members.iter().map(|&i| (placements[i].start, std::cmp::Reverse(placements[i].end), depth(i), i)).collect();
    order.sort_unstable();

    let mut lanes: Vec<Vec<usize>> = Vec::new();
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    for (start, std::cmp::Reverse(end), _, i) in order {
        for stack in &mut lanes {
            while stack.last().is_some_and(|&top| placements[top].end <= start) {
                stack.pop();
            }
        }
        let fits = |stack: &Vec<usize>| match stack.last() {
            None => true,
            Some(&top) => placements[top].end >= end && is_ancestor(top, i),
        };
        let preferred = parent(i).map(|p| placements[p].lane).filter(|&lane| lanes.get(lane).is_some_and(fits));
        let lane = preferred.or_else(|| lanes.iter().position(fits)).unwrap_or_else(|| {
            lanes.push(Vec::new());
            lanes.len() - 1
        });
        if let Some(&top) = lanes[lane].last() {
            children.entry(top).or_default().push(i);
        }
        lanes[lane].push(i);
        placements[i].lane = lane;
    }
    (lanes.len(), children)
}

/// A moment (ns after the trace start) strictly inside span `i` where no
/// deeper slice of its lane is open: the earliest such moment (`first`, for
/// the start of a flow) or the latest (for its end), so that an arrow
/// between two overlapping spans still runs forward in time. Half a tick
/// from a slice boundary keeps the viewers from having to order a flow
/// event and a slice edge at the same timestamp.
fn free_point(i: usize, placements: &[Placement], children: &HashMap<usize, Vec<usize>>, first: bool) -> u64 {
    let span = placements[i];
    let mut gaps = Vec::new();
    let mut cursor = span.start;
    for &child in children.get(&i).map_or(&[][..], Vec::as_slice) {
        let child = placements[child];
        if child.start > cursor {
            gaps.push((cursor, child.start));
        }
        cursor = cursor.max(child.end);
    }
    if span.end > cursor {
        gaps.push((cursor, span.end));
    }
    let gap = if first { gaps.first() } else { gaps.last() };
    // With no free moment (children cover the span), the arrow binds to
    // the innermost slice at the span's first or last moment instead.
    let (from, to) = gap.copied().unwrap_or((span.start, span.end));
    // Saturating: a bad export's times can put a tick near u64::MAX / TICK_NS.
    match (to > from, first) {
        (false, _) => from.saturating_mul(TICK_NS),
        (true, true) => from.saturating_mul(TICK_NS).saturating_add(TICK_NS / 2),
        (true, false) => to.saturating_mul(TICK_NS).saturating_sub(TICK_NS / 2),
    }
}

fn micros(ticks: u64) -> Value {
    #[expect(
        clippy::cast_precision_loss,
        reason = "ticks after the trace start stay far below 2^53 in a real run; a bad export's absurd times only lose \
                  display precision"
    )]
    let micros = ticks as f64 / TICKS_PER_US;
    json!(micros)
}

fn convert(export: Export) -> View {
    let Export {
        tree: SpanTree { spans, malformed_lines, malformed_spans, run_ids, resource, programs_differ },
        files,
    } = export;
    let advice = crate::advice::Advice::from_json_resource(&resource);
    let origin = spans.iter().map(|span| span.start_unix_nano).min().unwrap_or(0);
    // Saturating: a bad export may hold a span that ends near u64::MAX.
    let tick = |ns: u64| ns.saturating_sub(origin).saturating_add(TICK_NS / 2) / TICK_NS;
    let mut placements: Vec<Placement> = spans
        .iter()
        .map(|span| Placement { lane: 0, start: tick(span.start_unix_nano), end: tick(span.end_unix_nano) })
        .collect();

    let mut by_rank: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, span) in spans.iter().enumerate() {
        by_rank.entry(span.rank).or_default().push(i);
    }
    let mut events = Vec::with_capacity(spans.len() + 4 * by_rank.len());
    let mut children = HashMap::new();
    for (&rank, members) in &by_rank {
        let (lanes, rank_children) = assign_lanes(&spans, members, &mut placements);
        children.extend(rank_children);
        let pid = u64::from(rank) + 1;
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("rank {rank}")}}));
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": rank}}));
        for lane in 0..lanes {
            let name = if lane == 0 { "spans".to_string() } else { format!("concurrent spans {lane}") };
            let tid = lane + 1;
            events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
            events.push(
                json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": lane}}),
            );
        }
    }

    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| {
        (placements[i].start, std::cmp::Reverse(placements[i].end), spans[i].rank, placements[i].lane)
    });
    for &i in &order {
        let span = &spans[i];
        let placement = placements[i];
        let mut args = span.attributes.clone();
        args.insert("trace_id".into(), json!(span.trace_id));
        args.insert("span_id".into(), json!(span.span_id));
        if let Some(parent) = &span.parent_span_id {
            args.insert("parent_span_id".into(), json!(parent));
        }
        if let Some(SpanStatus { code, message }) = &span.status {
            let code = match code {
                1 => "OK".to_string(),
                2 => "ERROR".to_string(),
                other => other.to_string(),
            };
            args.insert("otel.status_code".into(), json!(code));
            if !message.is_empty() {
                args.insert("otel.status_description".into(), json!(message));
            }
        }
        if !span.links.is_empty() {
            let links: Vec<String> =
                span.links.iter().map(|link| format!("{}:{}", link.trace_id, link.span_id)).collect();
            args.insert("links".into(), json!(links));
        }
        args.insert("start_time_unix_nano".into(), json!(span.start_unix_nano.to_string()));
        args.insert("duration_ns".into(), json!(span.end_unix_nano.saturating_sub(span.start_unix_nano)));
        events.push(json!({
            "ph": "X",
            "name": span.name,
            "cat": span.scope,
            "pid": u64::from(span.rank) + 1,
            "tid": placement.lane + 1,
            "ts": micros(placement.start),
            "dur": micros(placement.end - placement.start),
            "args": args,
        }));
    }

    let index: HashMap<(&str, &str), usize> =
        spans.iter().enumerate().map(|(i, span)| ((span.trace_id.as_str(), span.span_id.as_str()), i)).collect();
    let mut flows = 0_u64;
    let mut unresolved_links = 0;
    for &target in &order {
        for link in &spans[target].links {
            let Some(&source) = index.get(&(link.trace_id.as_str(), link.span_id.as_str())) else {
                unresolved_links += 1;
                continue;
            };
            flows += 1;
            let from_ns = free_point(source, &placements, &children, true);
            let to_ns = free_point(target, &placements, &children, false);
            #[expect(
                clippy::cast_precision_loss,
                reason = "nanoseconds after the trace start stay far below 2^53 in a real run; a bad export's absurd \
                          times only lose display precision"
            )]
            let (from_us, to_us) = (from_ns as f64 / 1000.0, to_ns as f64 / 1000.0);
            events.push(json!({
                "ph": "s", "id": flows, "name": "link", "cat": "link",
                "pid": u64::from(spans[source].rank) + 1, "tid": placements[source].lane + 1, "ts": from_us,
            }));
            events.push(json!({
                "ph": "f", "bp": "e", "id": flows, "name": "link", "cat": "link",
                "pid": u64::from(spans[target].rank) + 1, "tid": placements[target].lane + 1, "ts": to_us,
            }));
        }
    }

    let table = table(&spans);
    let watchdog_copies = spans.iter().filter(|span| watchdog_copy(span)).count();
    let trace = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "lens trace-view",
            "start_time_unix_nano": origin.to_string(),
            "sources": files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        },
    });
    View {
        trace,
        table,
        files,
        spans: spans.len(),
        ranks: by_rank.len(),
        flows: usize::try_from(flows).unwrap_or(usize::MAX),
        unresolved_links,
        malformed_lines,
        malformed_spans,
        run_ids: run_ids.into_iter().collect(),
        advice,
        programs_differ,
        watchdog_copies,
    }
}

/// The nearest-rank percentile `p` (0-100) of sorted, non-empty `values`.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Whether `span` is the hang watchdog's copy of a span open when it fired
/// (the span itself ends later, or never if the job died): drawn, on a
/// track of its own, but not counted in the table.
fn watchdog_copy(span: &TreeSpan) -> bool {
    span.attributes.get(lens_fallbacks::semconv::NEMO_SPAN_OPEN) == Some(&Value::Bool(true))
}

/// Per span name: count, total, mean, p50, p99 (nearest rank), by total
/// duration, largest first (ties by name); the watchdog's copies left out.
fn table(spans: &[TreeSpan]) -> Vec<NameStats> {
    let mut durations: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for span in spans.iter().filter(|span| !watchdog_copy(span)) {
        durations.entry(span.name.as_str()).or_default().push(span.end_unix_nano.saturating_sub(span.start_unix_nano));
    }
    let mut rows: Vec<NameStats> = durations
        .into_iter()
        .map(|(name, mut values)| {
            values.sort_unstable();
            // In u128: the durations of a bad export (spans of 2^63 ns) can
            // overflow a u64 sum; the mean stays exact, the total is capped.
            let total: u128 = values.iter().copied().map(u128::from).sum();
            let total_ns = u64::try_from(total).unwrap_or(u64::MAX);
            #[expect(clippy::cast_precision_loss, reason = "a mean for display")]
            let mean_ns = total as f64 / values.len() as f64;
            NameStats {
                name: name.to_string(),
                count: values.len(),
                total_ns,
                mean_ns,
                p50_ns: percentile(&values, 50),
                p99_ns: percentile(&values, 99),
            }
        })
        .collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    rows
}

/// Milliseconds with three decimals.
fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

/// Writes the per-span-name table (durations in milliseconds).
pub fn write_table(out: &mut dyn Write, rows: &[NameStats]) -> io::Result<()> {
    let width = rows.iter().map(|row| row.name.len()).max().unwrap_or(0).max("span".len());
    writeln!(
        out,
        "{:<width$}  {:>8}  {:>12}  {:>10}  {:>10}  {:>10}",
        "span", "count", "total ms", "mean ms", "p50 ms", "p99 ms"
    )?;
    for row in rows {
        #[expect(clippy::cast_precision_loss, reason = "durations for display")]
        let (total, p50, p99) = (row.total_ns as f64, row.p50_ns as f64, row.p99_ns as f64);
        writeln!(
            out,
            "{:<width$}  {:>8}  {:>12}  {:>10}  {:>10}  {:>10}",
            row.name,
            row.count,
            ms(total),
            ms(row.mean_ns),
            ms(p50),
            ms(p99)
        )?;
    }
    Ok(())
}

fn write_footer(out: &mut dyn Write, view: &View, path: &Path) -> io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "read {} span(s) of {} rank(s) from {} file(s); {} link(s) drawn as flows",
        view.spans,
        view.ranks,
        view.files.len(),
        view.flows
    )?;
    if view.watchdog_copies > 0 {
        let (copies, spans) = if view.watchdog_copies == 1 { ("copy", "a span") } else { ("copies", "spans") };
        writeln!(
            out,
            "{} hang-watchdog {copies} of {spans} open when it fired (nemo.span.open): drawn, not counted in the table",
            view.watchdog_copies
        )?;
    }
    if view.unresolved_links > 0 {
        writeln!(out, "{} link(s) point at spans that are not in the export (not drawn)", view.unresolved_links)?;
    }
    if view.malformed_lines > 0 || view.malformed_spans > 0 {
        writeln!(
            out,
            "skipped {} malformed line(s) and {} malformed span(s)",
            view.malformed_lines, view.malformed_spans
        )?;
    }
    if view.run_ids.len() > 1 {
        writeln!(
            out,
            "note: the files hold {} runs ({}); give one run's directory to view one run",
            view.run_ids.len(),
            view.run_ids.join(", ")
        )?;
    }
    // Of runs of several programs (or span groups), the groups and the
    // variable would be one run's, said of all: left out.
    if let Some(groups) = view.advice.recorded_groups().filter(|_| !view.programs_differ) {
        writeln!(out, "span groups recorded: {groups} (change them with {})", view.advice.variable("SPAN_GROUPS"))?;
    }
    writeln!(out, "wrote {} (open it in https://ui.perfetto.dev or chrome://tracing)", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lens_fallbacks::otlp_file::tree::SpanLink;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), 50);
        assert_eq!(percentile(&values, 99), 99);
        assert_eq!(percentile(&[7], 50), 7);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[1, 2, 3, 4], 50), 2);
        assert_eq!(percentile(&[1, 2, 3, 4], 99), 4);
        assert_eq!(percentile(&[1, 2, 3], 50), 2);
    }

    fn span(name: &str, id: &str, parent: Option<&str>, start_us: u64, end_us: u64) -> TreeSpan {
        TreeSpan {
            rank: 0,
            trace_id: "t".into(),
            span_id: id.into(),
            parent_span_id: parent.map(str::to_string),
            name: name.into(),
            scope: String::new(),
            start_unix_nano: start_us * 1000,
            end_unix_nano: end_us * 1000,
            attributes: serde_json::Map::new(),
            status: None,
            links: Vec::new(),
        }
    }

    fn lanes_of(spans: Vec<TreeSpan>) -> Vec<usize> {
        let view = convert(Export { tree: SpanTree { spans, ..SpanTree::default() }, ..Export::default() });
        let mut lanes: Vec<(String, usize)> = view.trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| (e["args"]["span_id"].as_str().unwrap().to_string(), e["tid"].as_u64().unwrap() as usize))
            .collect();
        lanes.sort();
        lanes.into_iter().map(|(_, tid)| tid).collect()
    }

    #[test]
    fn nested_spans_share_a_thread_and_overlaps_get_another() {
        // a [0,100] > b [10,50] > c [20,30]; d [40,60] is a child of a that
        // overlaps b: it cannot nest in b, so it moves to a second thread.
        let spans = vec![
            span("a", "a", None, 0, 100),
            span("b", "b", Some("a"), 10, 50),
            span("c", "c", Some("b"), 20, 30),
            span("d", "d", Some("a"), 40, 60),
        ];
        assert_eq!(lanes_of(spans), vec![1, 1, 1, 2]);
        // An unrelated root inside a's window does not pose as a's child.
        let spans = vec![span("a", "a", None, 0, 100), span("x", "x", None, 10, 20), span("e", "e", Some("a"), 30, 40)];
        assert_eq!(lanes_of(spans), vec![1, 1, 2]);
    }

    #[test]
    fn flow_points_avoid_children() {
        // a [0,100] with a child b [0,50] on its lane: a's first free moment
        // is just after b ends; b's last free moment is just before its end.
        let mut linked = span("b", "b", Some("a"), 0, 50);
        linked.links.push(SpanLink { trace_id: "t".into(), span_id: "a".into() });
        let spans = vec![span("a", "a", None, 0, 100), linked];
        let view = convert(Export { tree: SpanTree { spans, ..SpanTree::default() }, ..Export::default() });
        let events = view.trace["traceEvents"].as_array().unwrap();
        let start = events.iter().find(|e| e["ph"] == "s").unwrap();
        let finish = events.iter().find(|e| e["ph"] == "f").unwrap();
        assert_eq!(start["ts"], json!(50.062));
        assert_eq!(finish["ts"], json!(49.938));
        assert_eq!(view.flows, 1);
    }
}
