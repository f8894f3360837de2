//! Replaying dead writers' spools, once: at setup (each rank its own rank's
//! spools, rank 0 also those of ranks at or above the world size; read and
//! locked by setup, sent by the [`REPLAY_THREAD`] so that setup never waits
//! for the collector) and in `lens recover DIR` (every rank's).
//!
//! A spool is replayed when its writer is dead: its advisory lock is free
//! (a live writer, an old rank still running elsewhere after a requeue,
//! holds it), it belongs to this user, and it is not this process's own.
//! The replayer holds the lock while it replays, so two replayers never
//! take the same file. Spans keep their trace and span ids, parents, start
//! times and the dead process's resource; open ones end at the last moment
//! the process is known to have lived (its last-alive stamp, its progress
//! record's write, or the latest start, end or event of its spans, so that
//! no span ends before a child that ended) with the closer's marks and the
//! reason [`SPAN_TRUNCATED_REASON_PROCESS_DIED`]. The file is removed
//! (consumed) only after the exporter accepted its spans; a crash between
//! the two replays them again next time (the same ids twice). The progress
//! record is read whatever the export's outcome, and a setup's replay marks
//! it taken in the file, so a kept spool's record is charged once. A damaged
//! file or another format version is one warning naming the file, then
//! left alone.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::SpanData;

use super::format::{self, FormatError, Header, STATE_ENDED, STATE_OPEN};
use super::{ReplayReport, ReplayedProgress};
use crate::batch::{EXPORTER_BUSY, LensBatchRecordProcessor};
use crate::closer::{SPAN_TRUNCATED_REASON_PROCESS_DIED, mark_truncated};
use crate::exporters::FileLimit;
use crate::span_record::SpanRecord;

/// What a replay hands each file's spans to, with the dead process's
/// resource: `Ok` once the exporter accepted them.
pub type ExportFn<'a> = dyn FnMut(Vec<SpanData>, &Resource) -> Result<(), String> + 'a;

/// Which spools a replay takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A rank at setup: its own rank's, and for rank 0 those of ranks at or
    /// above `world_size` (after a change of world size).
    Rank {
        /// This rank.
        rank: u32,
        /// The world size now.
        world_size: u32,
    },
    /// Every rank's (`lens recover`).
    All,
}

impl Claim {
    fn takes(self, rank: u32) -> bool {
        match self {
            Claim::All => true,
            Claim::Rank { rank: own, world_size } => rank == own || (own == 0 && rank >= world_size),
        }
    }

    /// The rank whose progress record the replay keeps: this rank's own
    /// predecessor's at setup (every rank charges goodput, and ranks move
    /// through the iterations together), rank 0's for `lens recover`.
    fn progress_rank(self) -> u32 {
        match self {
            Claim::All => 0,
            Claim::Rank { rank, .. } => rank,
        }
    }
}

/// How a replay sends a spool's spans and what its warnings name, from the
/// replaying program's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// The most spans in one export request: the batch processor's
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (a collector refuses requests past
    /// its size limit, 4 MiB by default for gRPC).
    pub max_batch: usize,
    /// The variable that sizes the spool (`SPOOL_SIZE_KIB` with the
    /// program's prefix), which the warning about a full spool names.
    pub size_variable: String,
}

impl Default for ReplayOptions {
    /// The OpenTelemetry default batch size (512) and lens's own variable
    /// (read whatever the program's prefix).
    fn default() -> ReplayOptions {
        ReplayOptions { max_batch: 512, size_variable: "NEMO_LENS_SPOOL_SIZE_KIB".to_string() }
    }
}

/// A dead writer's spool, read.
#[derive(Debug)]
pub struct DeadSpool {
    /// Its header.
    pub header: Header,
    /// Its spans: ended ones as they ended, open ones truncated.
    pub spans: Vec<SpanData>,
    /// How many of `spans` were open (truncated).
    pub truncated: usize,
    /// Slots that did not decode.
    pub undecodable: usize,
}

/// Decodes a whole spool file's bytes.
pub fn read_spool(bytes: &[u8]) -> Result<DeadSpool, FormatError> {
    let header = format::read_header(bytes)?;
    let mut spans = Vec::new();
    let mut open = Vec::new();
    let mut undecodable = 0;
    // The last moment the process is known to have lived: its last-alive
    // stamp (every second), its progress record's write, and any span it
    // started or ended since (a child that ended after the stamp).
    let mut alive = header.last_alive.max(header.progress.map_or(UNIX_EPOCH, |p| p.at));
    for index in 0..header.slot_count {
        let slot = &bytes[format::slot_range(index)];
        let state = format::get_u32(slot, format::SLOT_STATE);
        if state == format::STATE_FREE || state == format::STATE_WRITING {
            continue;
        }
        // A state no writer sets: the slot was overwritten.
        if state != STATE_OPEN && state != STATE_ENDED {
            undecodable += 1;
            continue;
        }
        let Some(span) = format::decode_span(slot) else {
            undecodable += 1;
            continue;
        };
        let events = span.events.iter().map(|event| event.timestamp);
        alive = events.fold(alive.max(span.start_time), SystemTime::max);
        if state == STATE_OPEN {
            open.push(span);
        } else {
            alive = alive.max(span.end_time);
            spans.push(span);
        }
    }
    // Spans open at the death end when it was last known alive, so that
    // none ends before a child that ended.
    let truncated = open.len();
    spans.extend(open.into_iter().map(|span| mark_truncated(span, alive, SPAN_TRUNCATED_REASON_PROCESS_DIED)));
    // Parents before children, as they started.
    spans.sort_by_key(|span| span.start_time);
    Ok(DeadSpool { header, spans, truncated, undecodable })
}

/// The resource stored in a spool's header, marked replayed
/// (`lens.spool.replayed`), with the header's own run id, host and pid where
/// the stored resource lacks them (it is cut to what its block holds): what
/// tells the dead process's spans from others'.
pub fn resource_of(header: &Header) -> Resource {
    use lens_core::semconv::{HOST_NAME, LENS_SPOOL_REPLAYED, NEMO_RUN_ID, PROCESS_PID};
    use opentelemetry::KeyValue;
    let has = |key: &str| header.resource.iter().any(|kv| kv.key.as_str() == key);
    let mut missing = Vec::new();
    if !has(NEMO_RUN_ID) && !header.run_id.is_empty() {
        missing.push(KeyValue::new(NEMO_RUN_ID, header.run_id.clone()));
    }
    if !has(HOST_NAME) && !header.host.is_empty() {
        missing.push(KeyValue::new(HOST_NAME, header.host.clone()));
    }
    if !has(PROCESS_PID) {
        missing.push(KeyValue::new(PROCESS_PID, i64::from(header.pid)));
    }
    let replayed = KeyValue::new(LENS_SPOOL_REPLAYED, true);
    Resource::builder_empty().with_attributes(header.resource.iter().cloned().chain(missing).chain([replayed])).build()
}

/// The rank in a spool file's name (`spool-rank<N>-...`).
fn rank_in_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix(super::FILE_PREFIX)?.split('-').next()?.parse().ok()
}

/// Whether `path` names a spool file.
pub fn is_spool_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with(super::FILE_PREFIX) && path.extension().and_then(|e| e.to_str()) == Some(super::FILE_EXTENSION)
}

/// A dead writer's spool, read, and still locked by the replay: its spans
/// wait for their export.
#[derive(Debug)]
pub struct ClaimedSpool {
    path: PathBuf,
    /// The open file: its advisory lock is held until the spool is
    /// consumed or left (dropped).
    file: File,
    header: Header,
    spans: Vec<SpanData>,
    truncated: usize,
    /// Its slots that did not decode: once the rest are exported, a damaged
    /// file is set aside (`.damaged`), not removed.
    undecodable: usize,
}

impl ClaimedSpool {
    /// The spool file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What a replay took: the dead writers' spools it read and locked, and
/// what reading them found (warnings, spools alive or failed, the progress
/// record). [`export`](Self::export) sends their spans.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The spools read and locked, in file-name order.
    pub spools: Vec<ClaimedSpool>,
    /// What reading them found; [`export`](Self::export) completes it.
    pub report: ReplayReport,
    /// The most spans in one export request ([`ReplayOptions::max_batch`]).
    max_batch: usize,
}

/// Reads and locks every unconsumed spool in `dir` that `claim` takes and
/// whose writer is dead (see [`replay_dir`]), and picks the progress
/// record: the latest (by last-alive stamp) of the replaying rank's own
/// number whose record no earlier setup took. A setup's claim
/// ([`Claim::Rank`]) marks that record taken in its file, so that a spool
/// kept after a failed export does not charge the dead attempt's loss
/// again when it is replayed later; `lens recover` ([`Claim::All`]) charges
/// nothing and marks nothing.
pub fn claim_dir(dir: &Path, claim: Claim, own: Option<&Path>, options: &ReplayOptions) -> Claimed {
    let mut claimed = Claimed { max_batch: options.max_batch, ..Claimed::default() };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return claimed;
    };
    let mut paths: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| is_spool_file(p)).collect();
    paths.sort();
    let uid = super::uid();
    for path in paths {
        if own.is_some_and(|own| own == path) {
            continue;
        }
        // Another rank's file is not even opened: taking its lock, even for a
        // moment, would make its own rank (replaying at the same time) see a
        // live writer and skip it.
        if rank_in_name(&path).is_some_and(|rank| !claim.takes(rank)) {
            continue;
        }
        if let Some(spool) = claim_file(&path, (claim, options), uid, &mut claimed.report) {
            claimed.spools.push(spool);
        }
    }
    claimed.take_progress(claim);
    claimed
}

/// Replays every unconsumed spool in `dir` that `claim` takes and whose
/// writer is dead, handing each file's spans with its resource to
/// `export`, and removes each file whose export succeeded. `own` is this
/// process's spool file (never replayed). A missing directory replays
/// nothing. The progress record is read whatever the export's outcome
/// ([`claim_dir`]).
pub fn replay_dir(
    dir: &Path,
    claim: Claim,
    own: Option<&Path>,
    options: &ReplayOptions,
    export: &mut ExportFn<'_>,
) -> ReplayReport {
    claim_dir(dir, claim, own, options).export(export)
}

impl Claimed {
    /// Whether no spool was taken.
    pub fn is_empty(&self) -> bool {
        self.spools.is_empty()
    }

    /// The progress record of the spools taken (see [`claim_dir`]).
    fn take_progress(&mut self, claim: Claim) {
        let chosen = self
            .spools
            .iter()
            .enumerate()
            .filter(|(_, spool)| {
                spool.header.rank == claim.progress_rank()
                    && spool.header.progress.is_some()
                    && !spool.header.progress_taken
            })
            .max_by_key(|(_, spool)| spool.header.last_alive)
            .map(|(index, _)| index);
        let Some(spool) = chosen.map(|index| &self.spools[index]) else { return };
        let (header, path) = (&spool.header, &spool.path);
        let Some(progress) = header.progress else { return };
        if matches!(claim, Claim::Rank { .. })
            && let Err(error) = mark_progress_taken(&spool.file)
        {
            warn(
                &mut self.report,
                format!(
                    "spool {}: cannot mark its progress record as counted ({error}); if the spool is kept, a \
                     later attempt counts its lost progress again",
                    path.display()
                ),
            );
        }
        self.report.progress = Some(ReplayedProgress::new(
            path.clone(),
            header.run_id.clone(),
            (progress.reached, progress.completed, progress.durable),
            progress.at,
            header.last_alive,
        ));
    }

    /// Hands each spool's spans with its dead process's resource to
    /// `export`, removes each spool whose export succeeded (its lock goes
    /// with it) and keeps the others, with a warning.
    pub fn export(self, export: &mut ExportFn<'_>) -> ReplayReport {
        self.export_while(&|| true, export)
    }

    /// [`export`](Self::export), spool after spool while `keep_going`
    /// says so; the spools not sent then are kept (their locks released),
    /// with one warning.
    pub fn export_while(self, keep_going: &dyn Fn() -> bool, export: &mut ExportFn<'_>) -> ReplayReport {
        let Claimed { spools, mut report, max_batch } = self;
        let mut spools = spools.into_iter();
        for spool in spools.by_ref() {
            if !keep_going() {
                let left = 1 + spools.len();
                warn(
                    &mut report,
                    format!(
                        "telemetry shut down before {left} spool file(s) of a previous attempt were replayed (the \
                         first {}); kept for the next attempt or `lens recover`",
                        spool.path.display()
                    ),
                );
                report.failed += left;
                break;
            }
            export_spool(spool, max_batch, &mut report, export);
        }
        report
    }
}

/// The name of the thread that sends a setup's replayed spans.
pub const REPLAY_THREAD: &str = "lens-replay";

/// Sends `claimed`'s spans through `exporter` on a thread of its own
/// ([`REPLAY_THREAD`]), so that setup never waits for the collector: the
/// thread holds the spools' locks until each is sent and removed, or kept
/// (a failed export, or `keep_going` false: this lifetime shut down); then
/// says what it replayed. Spools without spans (a clean shutdown's progress
/// record) are consumed at once, on the caller's thread. The returned
/// [`ReplayDone`] (`None`: nothing left to send) lets shutdown wait for the
/// thread within its own deadline, before the exporter it sends through
/// shuts down.
pub(crate) fn export_in_background(
    claimed: Claimed,
    exporter: ReplayExporter,
    dir: PathBuf,
    keep_going: fn() -> bool,
) -> Option<ReplayDone> {
    if claimed.spools.iter().all(|spool| spool.spans.is_empty()) {
        let report = claimed.export(&mut |_, _| Ok(()));
        note_replayed(&report, &dir);
        return None;
    }
    let replayed = dir.clone();
    let done = ReplayDone::default();
    let finished = done.clone();
    let spawned = std::thread::Builder::new().name(REPLAY_THREAD.into()).spawn(move || {
        // Its exports are lens's own: the `tracing` and log bridges record
        // nothing of what the exporter's libraries say on this thread.
        crate::export_path::mark_thread();
        let report = claimed.export_while(&keep_going, &mut |spans, resource| exporter.export(spans, resource));
        note_replayed(&report, &replayed);
        finished.set();
    });
    match spawned {
        Ok(_) => Some(done),
        Err(error) => {
            crate::diag::warn(format_args!(
                "could not start the {REPLAY_THREAD} thread ({error}); the previous attempt's spools in {} are kept \
                 for the next attempt or `lens recover`",
                dir.display()
            ));
            None
        }
    }
}

/// Set once the [`REPLAY_THREAD`] has sent (or kept) every spool it
/// claimed; shutdown waits for it, bounded by its deadline.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReplayDone(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl ReplayDone {
    fn set(&self) {
        let (done, changed) = &*self.0;
        *done.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        changed.notify_all();
    }

    /// Whether the thread is done.
    pub(crate) fn is_done(&self) -> bool {
        *self.0.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until the thread is done or `deadline` passes; whether it is
    /// done.
    pub(crate) fn wait_until(&self, deadline: Instant) -> bool {
        let (done, changed) = &*self.0;
        let mut finished = done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while !*finished {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            finished = changed.wait_timeout(finished, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
        true
    }
}

/// Says what a setup's replay sent: nothing when it sent no span (no spool
/// consumed, or only clean shutdowns' progress records, which every run
/// leaves behind and the next one takes quietly).
pub(crate) fn note_replayed(report: &ReplayReport, dir: &Path) {
    if report.spans > 0 {
        crate::diag::note(format_args!(
            "replayed {} span(s) of {} ({} open when their process died, ended truncated) from {} spool \
             file(s) of a previous attempt in {}",
            report.spans,
            report.runs_named(),
            report.truncated,
            report.consumed.len(),
            dir.display()
        ));
    }
}

/// Sets the header's progress-taken flag in the file (the replayer holds
/// its lock).
fn mark_progress_taken(file: &File) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut flags = [0_u8; 8];
    file.read_exact_at(&mut flags, format::OFF_FLAGS as u64)?;
    let flags = u64::from_le_bytes(flags) | format::FLAG_PROGRESS_TAKEN;
    file.write_all_at(&flags.to_le_bytes(), format::OFF_FLAGS as u64)
}

fn warn(summary: &mut ReplayReport, message: String) {
    crate::diag::warn(format_args!("{message}"));
    summary.warnings.push(message);
}

/// Opens, locks and reads one spool; `None` (counted and warned where it
/// matters) when it is not to be replayed now.
fn claim_file(
    path: &Path,
    (claim, options): (Claim, &ReplayOptions),
    uid: u32,
    summary: &mut ReplayReport,
) -> Option<ClaimedSpool> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        // Gone: another replayer consumed it.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        // Another user's file, at setup: not this job's.
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied && claim != Claim::All => return None,
        // No access, a symbolic link (`O_NOFOLLOW`), a directory...: said,
        // so that `lens recover` does not end as if it had replayed it.
        Err(error) => {
            let reason = if error.raw_os_error() == Some(libc::ELOOP) {
                "it is a symbolic link, which a spool never is".to_string()
            } else {
                error.to_string()
            };
            warn(
                summary,
                format!("spool {}: cannot open it for reading and writing ({reason}); left alone", path.display()),
            );
            summary.failed += 1;
            return None;
        }
    };
    let metadata = match file.metadata() {
        Ok(metadata) => metadata,
        Err(error) => {
            warn(summary, format!("spool {}: cannot read its metadata ({error}); left alone", path.display()));
            summary.failed += 1;
            return None;
        }
    };
    if !metadata.is_file() || metadata.uid() != uid {
        // At setup another user's file is not this job's; `lens recover`
        // says why it leaves one.
        if claim == Claim::All {
            let reason = if metadata.is_file() {
                format!(
                    "it belongs to user id {}, not to this user ({uid}): run `lens recover` as its owner",
                    metadata.uid()
                )
            } else {
                "not a regular file".to_string()
            };
            warn(summary, format!("spool {}: {reason}; left alone", path.display()));
            summary.failed += 1;
        }
        return None;
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            summary.alive += 1;
            return None;
        }
        Err(std::fs::TryLockError::Error(error)) => {
            warn(summary, format!("spool {}: cannot lock it ({error}); left alone", path.display()));
            summary.failed += 1;
            return None;
        }
    }
    let bytes = match read_all(&file) {
        Ok(bytes) => bytes,
        Err(error) => {
            warn(summary, format!("spool {}: cannot read it ({error}); left alone", path.display()));
            summary.failed += 1;
            return None;
        }
    };
    // The rank is read before the whole file is trusted: a file that is
    // not this rank's is left for its own rank, damaged or not.
    if let Ok(header) = format::read_header(&bytes)
        && !claim.takes(header.rank)
    {
        return None;
    }
    let dead = match read_spool(&bytes) {
        Ok(dead) => dead,
        Err(error) => {
            warn(summary, format!("spool {}: {error}; ignored", path.display()));
            summary.failed += 1;
            return None;
        }
    };
    // A writer that shut down cleanly exported or counted every span.
    if dead.header.overflow > 0 && !dead.header.closed_cleanly {
        warn(
            summary,
            format!(
                "spool {}: {} ended span(s) gave their slot up to new spans while the dead process's spool was \
                 full; those it had not exported before it died are not in this replay (raise {} to keep more)",
                path.display(),
                dead.header.overflow,
                options.size_variable
            ),
        );
    }
    if dead.header.open_unkept > 0 && !dead.header.closed_cleanly {
        warn(
            summary,
            format!(
                "spool {}: {} span(s) open when the dead process last wrote had no slot (every slot held an \
                 open span) and are lost (raise {} to keep more)",
                path.display(),
                dead.header.open_unkept,
                options.size_variable
            ),
        );
    }
    let DeadSpool { header, spans, truncated, undecodable } = dead;
    Some(ClaimedSpool { path: path.to_path_buf(), file, header, spans, truncated, undecodable })
}

/// Where a damaged spool is kept once what decoded of it is replayed: out
/// of every later replay's way (not a spool file's name), beside it.
fn damaged_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".damaged");
    path.with_file_name(name)
}

/// Exports one claimed spool's spans, then removes it; keeps it, with a
/// warning, when the export failed.
fn export_spool(spool: ClaimedSpool, max_batch: usize, summary: &mut ReplayReport, export: &mut ExportFn<'_>) {
    let ClaimedSpool { path, file, header, spans, truncated, undecodable } = spool;
    let count = spans.len();
    let resource = resource_of(&header);
    // Requests of at most `max_batch` spans, parents first (as they
    // started). A failed one keeps the spool: the requests sent before it
    // are sent again by the next replay (the same ids).
    let mut spans = spans.into_iter();
    let mut sent = 0;
    loop {
        let batch: Vec<SpanData> = spans.by_ref().take(max_batch.max(1)).collect();
        if batch.is_empty() {
            break;
        }
        let size = batch.len();
        if let Err(error) = export(batch, &resource) {
            let unsent = count - sent;
            warn(
                summary,
                format!(
                    "spool {}: {unsent} of its {count} span(s) could not be exported ({error}); kept for the next \
                     attempt or `lens recover`",
                    path.display()
                ),
            );
            summary.failed += 1;
            return;
        }
        sent += size;
    }
    if undecodable > 0 {
        set_aside(&path, (undecodable, count), summary);
    } else {
        if let Err(error) = std::fs::remove_file(&path) {
            warn(
                summary,
                format!("spool {}: replayed, but cannot remove it ({error}); it may be replayed again", path.display()),
            );
        }
        summary.consumed.push(path);
    }
    drop(file);
    if count > 0 && !summary.runs.contains(&header.run_id) {
        summary.runs.push(header.run_id.clone());
    }
    summary.spans += count;
    summary.truncated += truncated;
    summary.overflow += header.overflow;
}

/// Sets a damaged spool aside once what decoded of it (`replayed` of
/// `undecodable` more records) was exported: renamed out of every later
/// replay's way ([`damaged_path`]), named in the report.
fn set_aside(path: &Path, (undecodable, replayed): (usize, usize), summary: &mut ReplayReport) {
    let aside = damaged_path(path);
    let damage = format!("spool {}: {undecodable} span record(s) did not decode (the file is damaged)", path.display());
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            let message = format!(
                "{damage}: the {replayed} that did were replayed, and the file is set aside as {} for inspection",
                aside.display()
            );
            warn(summary, message);
            summary.set_aside.push(aside);
        }
        Err(error) => {
            let message = format!(
                "{damage}; the {replayed} that did were replayed, but the file cannot be set aside ({error}): they \
                 may be replayed again"
            );
            warn(summary, message);
            summary.failed += 1;
        }
    }
}

/// What a lifetime replays through: its span batch processor, its own
/// resource (put back on the exporter after each replayed request), the
/// export timeout and the `file` exporter's cap.
#[derive(Clone)]
pub(crate) struct ReplayExporter {
    pub(crate) batch: LensBatchRecordProcessor,
    pub(crate) resource: Resource,
    pub(crate) timeout: Duration,
    pub(crate) file_limit: Option<Arc<FileLimit>>,
    pub(crate) options: ReplayOptions,
}

impl ReplayExporter {
    /// Exports `spans` with their dead process's `resource`: `Err` when the
    /// export failed, and when the `file` exporter dropped some of them at
    /// its cap (the spool is then kept, not consumed).
    pub(crate) fn export(&self, spans: Vec<SpanData>, resource: &Resource) -> Result<(), String> {
        let count = spans.len();
        let dropped = || self.file_limit.as_ref().map_or(0, |limit| limit.dropped());
        let before = dropped();
        // The processor's own export in flight holds the exporter: tried
        // again until it is free, within the export timeout (at most one
        // try per 20 ms).
        let deadline = Instant::now() + self.timeout;
        loop {
            let records = spans.iter().cloned().map(SpanRecord::from_span_data).collect();
            match self.batch.export_with_resource(records, resource, &self.resource, self.timeout) {
                Ok(()) => break,
                Err(OTelSdkError::InternalFailure(reason)) if reason == EXPORTER_BUSY && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(error) => return Err(error.to_string()),
            }
        }
        let lost = dropped().saturating_sub(before);
        match &self.file_limit {
            Some(limit) if lost > 0 => Err(format!(
                "{lost} of {count} span(s) were not written: the file exporter's file reached its cap of {} bytes; \
                 raise {}",
                limit.max_bytes(),
                limit.variable()
            )),
            _ => Ok(()),
        }
    }
}

fn read_all(mut file: &File) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}
