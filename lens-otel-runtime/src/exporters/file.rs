//! The `file` exporters: OTLP/JSON lines per signal per rank.
//!
//! Each export appends one line holding one `ExportTraceServiceRequest`,
//! `ExportMetricsServiceRequest` or `ExportLogsServiceRequest` in the OTLP
//! JSON encoding, which is the OpenTelemetry Collector file exporter's
//! format: a Collector's `otlpjsonfile` receiver replays the files later,
//! which is what air-gapped clusters and the zero-setup quickstart need.
//!
//! Files are `traces-rank<N>.jsonl`, `metrics-rank<N>.jsonl` and
//! `logs-rank<N>.jsonl` under a directory the caller chooses (the runtime
//! glue uses `<PREFIX>_FILE_DIR`, default `telemetry/<run_id>/`),
//! created with its parents, opened for appending (a restarted rank adds to
//! its file), and flushed after every export so that a killed job loses at
//! most the batch in flight.
//!
//! Each file has a size cap ([`FileLimit`]; the runtime glue uses
//! `<PREFIX>_FILE_MAX_BYTES`, default 1 GiB, and counts what an existing file
//! already holds). A record that would take a file past its cap is not
//! written: one warning names the file and the cap, and every record dropped
//! so is counted in [`FileLimit::dropped`] (the shutdown report's
//! `dropped_file_full`), never an error to the job or the processor.
//!
//! The encoding is opentelemetry-proto's serde mapping (`with-serde`):
//! lowerCamelCase field names, trace and span ids as hex strings, 64-bit
//! integers (`startTimeUnixNano`, `intValue`, counts) as decimal strings,
//! enums (`kind`, status `code`, `aggregationTemporality`) as integers, as
//! the OTLP JSON specification requires. Deviations from protobuf's
//! canonical JSON (checked against 0.33.1, see docs/exporters.md): default
//! values are written rather than omitted, and a non-finite double outside
//! number data points (histogram sum/min/max, attributes) becomes `null`.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::logs::tonic::group_logs_by_resource_and_scope;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use super::{ExporterError, Signal};

/// The file of `signal` for `rank` under `dir`: `traces-rank3.jsonl`, ...
///
/// ```
/// use lens_otel_runtime::exporters::{Signal, file_path};
/// let path = file_path("telemetry/run-1".as_ref(), Signal::Metrics, 3);
/// assert_eq!(path, std::path::Path::new("telemetry/run-1/metrics-rank3.jsonl"));
/// ```
pub fn file_path(dir: &Path, signal: Signal, rank: u32) -> PathBuf {
    dir.join(format!("{}-rank{rank}.jsonl", signal.as_str()))
}

/// The size cap of the `file` exporter's files, and the count of records
/// it dropped, shared by the exporters of one lifetime.
#[derive(Debug)]
pub struct FileLimit {
    max_bytes: u64,
    dropped: AtomicU64,
    /// The variable that sets the cap, for the warnings.
    variable: Option<String>,
}

impl FileLimit {
    /// A cap of `max_bytes` per file (at least one byte).
    pub fn new(max_bytes: u64) -> Arc<FileLimit> {
        Arc::new(FileLimit { max_bytes: max_bytes.max(1), dropped: AtomicU64::new(0), variable: None })
    }

    /// A cap of `max_bytes` per file set by `variable`
    /// (`<PREFIX>_FILE_MAX_BYTES`), which its warnings name.
    pub fn set_by(max_bytes: u64, variable: impl Into<String>) -> Arc<FileLimit> {
        Arc::new(FileLimit { max_bytes: max_bytes.max(1), dropped: AtomicU64::new(0), variable: Some(variable.into()) })
    }

    /// What a user changes to raise the cap: the variable that sets it,
    /// or the words for it when it is not known.
    pub fn variable(&self) -> &str {
        self.variable.as_deref().unwrap_or("the FILE_MAX_BYTES variable of this program's prefix")
    }

    /// No cap (`u64::MAX` bytes).
    pub fn unlimited() -> Arc<FileLimit> {
        FileLimit::new(u64::MAX)
    }

    /// The cap per file, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Records (spans, metric collections, log records) not written because
    /// their file had reached the cap.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Whether the file at `path`, `length` bytes long, ends with a newline
/// (unknown counts as yes: a file that cannot be read is not appended to
/// either).
fn ends_with_newline(path: &Path, length: u64) -> bool {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut last = [0_u8];
    File::open(path)
        .and_then(|mut file| file.seek(SeekFrom::Start(length - 1)).and_then(|_| file.read_exact(&mut last)))
        .map_or(true, |()| last[0] == b'\n')
}

/// Opens (making it if missing) the regular file at `path` for appending,
/// or says what else is there.
///
/// A FIFO at the path would block an ordinary open until some process
/// reads it, which hangs the job at setup with no message: the path is
/// checked first, and the open is non-blocking (`O_NONBLOCK`: a FIFO made
/// between the check and the open fails at once, with no reader, or is
/// refused by the check of the opened file), so that only a regular file
/// is ever written. A device (`/dev/null` named by a link) is refused the
/// same way: what is written there reaches no reader.
fn open_regular(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let refuse = |file_type: std::fs::FileType| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {}, not a regular file", lens_core::control::kind_of(file_type)),
        )
    };
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        return Err(refuse(meta.file_type()));
    }
    let file = OpenOptions::new().create(true).append(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refuse(meta.file_type()));
    }
    Ok(file)
}

/// One append-only OTLP/JSON lines file.
struct JsonLines {
    path: PathBuf,
    writer: Mutex<Option<BufWriter<File>>>,
    /// Bytes in the file: what it held when opened plus what was appended.
    written: AtomicU64,
    limit: Arc<FileLimit>,
    warned_full: AtomicBool,
    /// Whether the file's deletion was said ([`JsonLines::reopen`]).
    warned_deleted: AtomicBool,
    /// The file ends inside a line (a write that failed and could not be
    /// cut back, or a file left so by an earlier process): the next request
    /// starts a new line, so that it is read whole.
    open_line: AtomicBool,
}

impl JsonLines {
    fn open(dir: &Path, signal: Signal, rank: u32, limit: Arc<FileLimit>) -> Result<JsonLines, ExporterError> {
        let path = file_path(dir, signal, rank);
        // `create_dir_all` of a path that is a file says "File exists":
        // name what is wrong instead.
        let not_a_directory = || {
            (dir.exists() && !dir.is_dir()).then(|| {
                std::io::Error::new(std::io::ErrorKind::NotADirectory, format!("{} is not a directory", dir.display()))
            })
        };
        let file = std::fs::create_dir_all(dir)
            .map_err(|error| not_a_directory().unwrap_or(error))
            .and_then(|()| open_regular(&path))
            .map_err(|source| ExporterError::File {
                variable: "the file exporter's directory".to_string(),
                path: path.clone(),
                source,
            })?;
        let held = file.metadata().map_or(0, |m| m.len());
        let open_line = held > 0 && !ends_with_newline(&path, held);
        Ok(JsonLines {
            path,
            writer: Mutex::new(Some(BufWriter::new(file))),
            written: AtomicU64::new(held),
            limit,
            warned_full: AtomicBool::new(false),
            warned_deleted: AtomicBool::new(false),
            open_line: AtomicBool::new(open_line),
        })
    }

    /// Appends one encoded request (`serde_json::to_vec` at the call site, so
    /// that this crate needs no direct serde dependency) and a newline,
    /// unless that takes the file past its cap: then the `records` of the
    /// request are counted as dropped (one warning per file) and the export
    /// succeeds.
    fn append(&self, encoded: serde_json::Result<Vec<u8>>, records: u64) -> OTelSdkResult {
        let failure = |error: &dyn fmt::Display| {
            OTelSdkError::InternalFailure(format!("file exporter: cannot write {}: {error}", self.path.display()))
        };
        let mut guard = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let writer = guard.as_mut().ok_or(OTelSdkError::AlreadyShutdown)?;
        // The file's length before this request (the writer's buffer is
        // empty: each request is flushed), what a failure cuts back to.
        let mut before = writer.get_ref().metadata().ok();
        if before.as_ref().is_some_and(|m| m.nlink() == 0) {
            // The file was deleted (by hand, or with its directory, by a
            // cleanup): what is appended to it now reaches no reader. Make
            // it again where it was.
            *writer = BufWriter::new(self.reopen().map_err(|error| failure(&error))?);
            before = writer.get_ref().metadata().ok();
        }
        let line = encoded.map_err(|error| failure(&error))?;
        let newline_first = self.open_line.load(Ordering::Relaxed);
        let size = line.len() as u64 + 1 + u64::from(newline_first);
        let written = self.written.load(Ordering::Relaxed);
        if written.saturating_add(size) > self.limit.max_bytes {
            self.limit.dropped.fetch_add(records, Ordering::Relaxed);
            if !self.warned_full.swap(true, Ordering::Relaxed) {
                crate::diag::warn(format_args!(
                    "{} reached its cap of {} bytes: further records for it are dropped and counted in the \
                     shutdown report (raise the cap with {})",
                    self.path.display(),
                    self.limit.max_bytes,
                    self.limit.variable()
                ));
            }
            return Ok(());
        }
        let before = before.map(|m| m.len());
        let wrote = (if newline_first { writer.write_all(b"\n") } else { Ok(()) })
            .and_then(|()| writer.write_all(&line))
            .and_then(|()| writer.write_all(b"\n"))
            .and_then(|()| writer.flush());
        if let Err(error) = wrote {
            // A full disk takes part of a request: cut the file back to its
            // last whole line, so that neither the part nor a retry glued
            // onto it is a line no reader can read.
            self.cut_back(&mut guard, before);
            return Err(failure(&error));
        }
        self.open_line.store(false, Ordering::Relaxed);
        self.written.store(written + size, Ordering::Relaxed);
        Ok(())
    }

    /// The file made again, with its directory, after it was deleted: its
    /// count of bytes starts again from what it holds (nothing, unless
    /// another writer made it first). Said once per file.
    #[cold]
    fn reopen(&self) -> std::io::Result<File> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_regular(&self.path)?;
        let held = file.metadata().map_or(0, |m| m.len());
        self.written.store(held, Ordering::Relaxed);
        self.open_line.store(held > 0 && !ends_with_newline(&self.path, held), Ordering::Relaxed);
        if !self.warned_deleted.swap(true, Ordering::Relaxed) {
            crate::diag::warn(format_args!(
                "{} was deleted while the job wrote to it; lens made it again and writes there (what it held is \
                 gone, and so is a crash spool deleted with its directory: spans open at a crash are then lost)",
                self.path.display()
            ));
        }
        Ok(file)
    }

    /// After a failed append: drops what the writer still buffers and cuts
    /// the file back to `before` bytes, its length when the request began
    /// (never growing it: a file truncated since, by hand or by a rotation,
    /// is shorter); when it cannot be cut, or its length was unknown, the
    /// next request starts on a line of its own if the file now ends inside
    /// one.
    fn cut_back(&self, slot: &mut Option<BufWriter<File>>, before: Option<u64>) {
        let Some(writer) = slot.take() else { return };
        let (file, _unwritten) = writer.into_parts();
        let now = file.metadata().map(|m| m.len()).ok();
        let cut = match (before, now) {
            (Some(before), Some(now)) if now > before => file.set_len(before).is_ok(),
            (Some(_), Some(_)) => true,
            _ => false,
        };
        if !cut {
            let length = file.metadata().map_or(0, |m| m.len());
            self.open_line.store(length > 0 && !ends_with_newline(&self.path, length), Ordering::Relaxed);
        }
        *slot = Some(BufWriter::new(file));
    }

    fn flush(&self) -> OTelSdkResult {
        let mut guard = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match guard.as_mut() {
            Some(writer) => writer.flush().map_err(|error| {
                OTelSdkError::InternalFailure(format!("file exporter: cannot flush {}: {error}", self.path.display()))
            }),
            None => Ok(()),
        }
    }

    fn close(&self) -> OTelSdkResult {
        let writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        match writer {
            Some(mut writer) => writer.flush().map_err(|error| {
                OTelSdkError::InternalFailure(format!("file exporter: cannot flush {}: {error}", self.path.display()))
            }),
            None => Err(OTelSdkError::AlreadyShutdown),
        }
    }
}

/// Appends one `ExportTraceServiceRequest` per export to
/// `traces-rank<N>.jsonl`.
pub struct FileSpanExporter {
    file: JsonLines,
    resource: ResourceAttributesWithSchema,
}

impl FileSpanExporter {
    /// Creates `dir` (with parents) and opens the rank's traces file for
    /// appending, capped by `limit`.
    pub fn create(dir: &Path, rank: u32, limit: Arc<FileLimit>) -> Result<Self, ExporterError> {
        Ok(FileSpanExporter { file: JsonLines::open(dir, Signal::Traces, rank, limit)?, resource: Default::default() })
    }

    /// The file this exporter appends to.
    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

impl fmt::Debug for FileSpanExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSpanExporter").field("path", &self.file.path).finish()
    }
}

impl SpanExporter for FileSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        if batch.is_empty() {
            return Ok(());
        }
        let records = batch.len() as u64;
        let request =
            ExportTraceServiceRequest { resource_spans: group_spans_by_resource_and_scope(batch, &self.resource) };
        self.file.append(serde_json::to_vec(&request), records)
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.file.close()
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.file.flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

/// Appends one `ExportMetricsServiceRequest` per export to
/// `metrics-rank<N>.jsonl` (cumulative temporality).
pub struct FileMetricExporter {
    file: JsonLines,
}

impl FileMetricExporter {
    /// Creates `dir` (with parents) and opens the rank's metrics file for
    /// appending.
    pub fn create(dir: &Path, rank: u32, limit: Arc<FileLimit>) -> Result<Self, ExporterError> {
        Ok(FileMetricExporter { file: JsonLines::open(dir, Signal::Metrics, rank, limit)? })
    }

    /// The file this exporter appends to.
    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

impl fmt::Debug for FileMetricExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileMetricExporter").field("path", &self.file.path).finish()
    }
}

impl PushMetricExporter for FileMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        self.file.append(serde_json::to_vec(&ExportMetricsServiceRequest::from(metrics)), 1)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.file.flush()
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.file.close()
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// Appends one `ExportLogsServiceRequest` per export to
/// `logs-rank<N>.jsonl`.
pub struct FileLogExporter {
    file: JsonLines,
    resource: ResourceAttributesWithSchema,
}

impl FileLogExporter {
    /// Creates `dir` (with parents) and opens the rank's logs file for
    /// appending.
    pub fn create(dir: &Path, rank: u32, limit: Arc<FileLimit>) -> Result<Self, ExporterError> {
        Ok(FileLogExporter { file: JsonLines::open(dir, Signal::Logs, rank, limit)?, resource: Default::default() })
    }

    /// The file this exporter appends to.
    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

impl fmt::Debug for FileLogExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLogExporter").field("path", &self.file.path).finish()
    }
}

impl LogExporter for FileLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let records = batch.iter().count() as u64;
        let request =
            ExportLogsServiceRequest { resource_logs: group_logs_by_resource_and_scope(&batch, &self.resource) };
        self.file.append(serde_json::to_vec(&request), records)
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.file.close()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}
