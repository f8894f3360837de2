//! The per-rank crash-safe spool (SPEC A23).
//!
//! SIGKILL, the OOM killer or a hard abort run no handler: every span open
//! at that moment, and every ended span still waiting in the export queue,
//! would be lost. While telemetry is enabled each rank therefore keeps a
//! memory-mapped file (the page cache outlives the process; nothing is
//! fsynced on the hot path) holding:
//!
//! - a header: format version, host, pid, boot id, uid, run id, rank, world
//!   size and the resource as key-values ([`mod@format`]);
//! - one fixed-size slot per open span (ids, parent, name, start time, kind,
//!   attributes up to the slot's size, already redacted by the facade) and
//!   per ended span until the batch processor says its batch was exported
//!   (or dropped); when every slot is taken an ended span gives its slot up
//!   and is counted as overflow;
//! - the progress record ([`record_progress`]), rewritten at each iteration;
//! - a last-alive stamp, refreshed every second by the `lens-spool-alive`
//!   thread.
//!
//! The spool is lens's one open-span registry: the open-span closer
//! ([`crate::closer`]) and, through it, the hang watchdog's flight recorder
//! read the open spans from it. With the spool off (`<PREFIX>_SPOOL=0`, no
//! directory, or the file cannot be mapped) the same table lives in
//! anonymous memory, so the closer and the recorder work the same and
//! nothing survives the process.
//!
//! The next attempt replays dead writers' spools once, at setup
//! ([`replay`]); `lens recover DIR` does the same for a run that is never
//! restarted.
//!
//! Slots are taken and given back without a lock: a bitmap says which are
//! taken, and each taken slot carries a claim (a process-wide number, in
//! start order). A span started by lens's tracer holds its slot as a
//! [`SpoolSlot`] (slot and claim), so neither its start, its end nor its
//! release looks anything up. Spans the closer sees as the SDK's `SpanData`
//! are found by span id, under the table's lock. A slot given up since (a
//! full table, the closer's drain) has another claim, and releasing the old
//! one does nothing.
//!
//! Files are created mode 0600 with `O_EXCL | O_NOFOLLOW`, and their writer
//! holds an exclusive advisory lock (`flock`) on them for its lifetime, so a
//! live writer's spool is never replayed.

pub mod format;
pub mod replay;

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SpanData;

pub use self::format::SpanView;
use self::format::{
    FLAG_CLOSED_CLEANLY, HEADER_SIZE, NONE, OFF_COMPLETED, OFF_DURABLE, OFF_FLAGS, OFF_LAST_ALIVE, OFF_META,
    OFF_META_LEN, OFF_OPEN_UNKEPT, OFF_OVERFLOW, OFF_PROGRESS_AT, OFF_PROGRESS_SEQ, OFF_REACHED, SLOT_SIZE, SLOT_STATE,
    STATE_ENDED, STATE_FREE, STATE_OPEN, STATE_WRITING, nanos,
};
pub use self::replay::replay_dir;
pub use crate::span_record::SpoolSlot;

/// The bit of a slot's claim set once its span has ended: a full table
/// gives up only such a slot, and one compare-and-swap of the claim both
/// checks it and takes it, so two spans starting at once never take the
/// same slot (the state word alone would still read ended for the second
/// while the first has not yet begun writing). Claims are counted from 1
/// and never reach it.
const CLAIM_ENDED: u64 = 1 << 63;

/// The spool directory's name inside a checkpoint or file-export directory.
pub const SPOOL_SUBDIRECTORY: &str = "lens-spool";
/// The spool files' name prefix (`spool-rank<N>-<host>-<pid>-<tag>.lens`).
pub const FILE_PREFIX: &str = "spool-rank";
/// The spool files' extension.
pub const FILE_EXTENSION: &str = "lens";
/// How often the last-alive stamp is refreshed.
pub const ALIVE_PERIOD: Duration = Duration::from_secs(1);
/// The number of slots of the anonymous table used when there is no spool
/// file (`<PREFIX>_SPOOL=0`).
pub const ANONYMOUS_SLOTS: u32 = 4096;
/// The boot id's file.
pub const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";

pub use lens_core::report::{ReplayReport, ReplayedProgress};

/// What setup's replay learned from this rank's dead predecessor's spool.
static REPLAYED: Mutex<Option<ReplayedProgress>> = Mutex::new(None);

/// The spool of this process's telemetry lifetime, for [`record_progress`]:
/// null, or a table leaked on purpose (see [`install`]).
static ACTIVE: AtomicPtr<SpoolTable> = AtomicPtr::new(std::ptr::null_mut());

/// Writes the progress record of this process's spool: a seqlock of a few
/// relaxed stores into the mapping, no syscall; nothing without a spool
/// file (or in a forked child).
#[inline]
pub fn record_progress(reached: u64, completed: Option<u64>, durable: Option<u64>) {
    let table = ACTIVE.load(Ordering::Acquire);
    // SAFETY: the slot holds null or a pointer from `Arc::into_raw` that is
    // never released (see `install`), so the table outlives every reader.
    if let Some(table) = unsafe { table.as_ref() } {
        table.write_progress(reached, completed, durable, SystemTime::now());
    }
}

/// The progress record of this rank's dead predecessor's spool that setup
/// replayed.
pub fn replayed_progress() -> Option<ReplayedProgress> {
    lock(&REPLAYED).clone()
}

pub(crate) fn set_replayed_progress(progress: Option<ReplayedProgress>) {
    *lock(&REPLAYED) = progress;
}

/// Whether this process writes a spool file now.
pub fn is_active() -> bool {
    !ACTIVE.load(Ordering::Acquire).is_null()
}

/// Makes `table` the process's spool for [`record_progress`]. The table is
/// leaked (one mapping per telemetry lifetime, as `active.rs` leaks a
/// tracer): a reader may hold it while shutdown empties the slot.
pub(crate) fn install(table: &Arc<SpoolTable>) {
    let pointer = Arc::into_raw(Arc::clone(table)).cast_mut();
    let previous = ACTIVE.swap(pointer, Ordering::AcqRel);
    let _ = previous; // the previous one (if any) stays leaked
}

/// Empties the slot of [`install`].
pub(crate) fn uninstall() {
    ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where the table lives.
enum Backing {
    /// A spool file, mapped shared, locked by this process.
    File { _map: memmap2::MmapMut, file: File, path: PathBuf },
    /// Anonymous memory: the open-span registry without crash safety.
    Anonymous { _map: memmap2::MmapMut },
    /// A header on the heap, no slots (no memory could be mapped).
    Heap { _memory: Box<[u64]> },
}

/// Hashes a span id as itself: span ids are random already, and SipHash
/// would cost more than the rest of a lookup.
#[derive(Default)]
struct SpanIdHasher(u64);

impl Hasher for SpanIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Where a span the closer sees as the SDK's `SpanData` is held.
#[derive(Clone, Copy)]
struct Held {
    slot: u32,
    /// The slot's claim when it was taken (see [`SpoolSlot`]).
    order: NonZeroU64,
    /// The numbers of attributes and events (kept and dropped) the slot was
    /// written with: a span that ends with the same numbers (and no error
    /// status) only gets its end time and state written, not a second
    /// encoding.
    attributes: usize,
    events: usize,
}

/// The numbers [`Held`] and [`SpoolSlot`] compare for `span`.
fn shape(span: &SpanView<'_>) -> (usize, usize) {
    (
        span.attributes.len() + span.dropped_attributes_count as usize,
        span.events.len() + span.dropped_events_count as usize,
    )
}

/// What the batch processor releases from the spool once a span is
/// exported: a lens span's slot, or the SDK's span by span id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolKey {
    /// A span registered as the SDK's `SpanData`, by span id.
    Span(u64),
    /// A span started by lens's tracer.
    Slot(SpoolSlot),
}

impl From<u64> for SpoolKey {
    fn from(span_id: u64) -> SpoolKey {
        SpoolKey::Span(span_id)
    }
}

/// The next claim: unique in the process (a forked child goes on from its
/// parent's), and in start order; never 0, which marks a free slot.
static NEXT_ORDER: AtomicU64 = AtomicU64::new(1);

fn next_order() -> NonZeroU64 {
    NonZeroU64::new(NEXT_ORDER.fetch_add(1, Ordering::Relaxed)).unwrap_or(NonZeroU64::MIN)
}

/// The process side of the slots the SDK's spans hold: which slot holds
/// which span.
#[derive(Default)]
struct Slots {
    /// Span id → where it is held (an entry whose slot was given up since
    /// stays until its span is released; its claim no longer matches).
    by_span: HashMap<u64, Held, BuildHasherDefault<SpanIdHasher>>,
}

/// The bitmap of `slot_count` free slots (the bits past the last slot set).
fn free_bitmap(slot_count: u32) -> Box<[AtomicU64]> {
    let count = slot_count as usize;
    (0..count.div_ceil(64))
        .map(|word| {
            let past = (word + 1) * 64;
            let taken = if past > count { u64::MAX << (64 - (past - count)) } else { 0 };
            AtomicU64::new(taken)
        })
        .collect()
}

/// One spool: the mapped header and slots, and which slot holds which
/// span. Clones of the `Arc` are shared by the closer, the batch processor,
/// the last-alive thread and [`record_progress`].
pub struct SpoolTable {
    base: *mut u8,
    len: usize,
    slot_count: u32,
    /// One bit per slot, set while a span holds it.
    taken: Box<[AtomicU64]>,
    /// Per slot, the claim of the span holding it (0 when free), with
    /// [`CLAIM_ENDED`] once that span has ended.
    orders: Box<[AtomicU64]>,
    /// The word of `taken` where the next search for a free slot starts.
    hint: AtomicUsize,
    /// The slot where the next search for an ended span starts (a full
    /// table).
    steal_at: AtomicUsize,
    /// How many slots hold an ended span.
    ended: AtomicUsize,
    /// Whether a span got no slot yet (warned once).
    warned_full: AtomicBool,
    /// What the warning of a full table advises (which variable sizes it).
    full_advice: OnceLock<String>,
    slots: Mutex<Slots>,
    backing: Backing,
    closed: AtomicBool,
    /// The fork generation that owns the table; a forked child never writes
    /// into its parent's mapping.
    generation: u64,
}

// SAFETY: the mapping is process-wide memory; slot bytes are written only
// by the holder of the slot (its bit and claim), header fields through
// atomics.
unsafe impl Send for SpoolTable {}
// SAFETY: as above.
unsafe impl Sync for SpoolTable {}

impl std::fmt::Debug for SpoolTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpoolTable")
            .field("path", &self.path())
            .field("slots", &self.slot_count)
            .finish_non_exhaustive()
    }
}

/// Why a spool file could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The file could not be created, sized, locked or mapped.
    #[error("cannot create the spool file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The spool's directory could not be created (a file is in its place,
    /// no permission).
    #[error("cannot create the spool directory {path}: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// Who writes a spool: the header's identity fields.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The rank.
    pub rank: u32,
    /// The world size.
    pub world_size: u32,
    /// The run id.
    pub run_id: String,
    /// The host name.
    pub host: String,
}

/// This machine's boot id (empty when it cannot be read).
pub fn boot_id() -> String {
    std::fs::read_to_string(BOOT_ID_FILE).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// This process's user id.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn file_name(identity: &Identity, pid: u32) -> String {
    let host: String = identity
        .host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '_' { c } else { '_' })
        .collect();
    let tag = crate::ids::random_u64() & 0xffff_ffff;
    format!("{FILE_PREFIX}{}-{host}-{pid}-{tag:08x}.{FILE_EXTENSION}", identity.rank)
}

/// Gives `file` a length of `len` bytes with every block of it allocated
/// (`posix_fallocate`), so that a store into its mapping never needs a block
/// the file system no longer has: a sparse file on a full file system
/// raises SIGBUS in the writing process at the first store into an
/// unbacked page, and that process is the training job. A file system
/// without `fallocate` gets the C library's fallback (a write per block).
fn reserve(file: &File, len: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    // A signal may interrupt it (EINTR): tried again, a bounded number of times.
    for _ in 0..64 {
        // SAFETY: the descriptor is open for writing for the whole call;
        // posix_fallocate reads no memory of ours.
        match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
            0 => return Ok(()),
            libc::EINTR => continue,
            error => return Err(std::io::Error::from_raw_os_error(error)),
        }
    }
    Err(std::io::Error::from_raw_os_error(libc::EINTR))
}

impl SpoolTable {
    /// Creates, sizes, locks and maps a new spool file of `size` bytes in
    /// `dir` (created if missing, mode 0700), mode 0600, `O_EXCL |
    /// O_NOFOLLOW`. Every block of the file is allocated before it is
    /// mapped; when they cannot be (a full file system, `ENOSPC`), the file
    /// is removed and the error returned, so that setup goes on without a
    /// spool rather than the job dying of SIGBUS at a later store.
    pub fn create(dir: &Path, size: usize, identity: &Identity) -> Result<Arc<SpoolTable>, SpoolError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SpoolError::Io { path, source }
        };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|source| {
            // `create` of a path that is a file says only "File exists".
            let source = if dir.exists() && !dir.is_dir() {
                std::io::Error::new(std::io::ErrorKind::NotADirectory, "a file, not a directory, is there")
            } else {
                source
            };
            SpoolError::Directory { path: dir.to_path_buf(), source }
        })?;
        let pid = std::process::id();
        let path = dir.join(file_name(identity, pid));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(io(&path))?;
        let built = (|| {
            file.try_lock().map_err(|error| match error {
                std::fs::TryLockError::Error(error) => error,
                std::fs::TryLockError::WouldBlock => std::io::Error::other("the file is locked by another process"),
            })?;
            let slots = format::slot_count(size);
            let size = HEADER_SIZE + slots as usize * SLOT_SIZE;
            reserve(&file, size)?;
            // SAFETY: the file was just created by this process (O_EXCL), is
            // locked by it, and is only ever written through this mapping;
            // another process that maps it (a replay) finds the lock held and
            // leaves it alone.
            let map = unsafe { memmap2::MmapMut::map_mut(&file) }?;
            Ok::<_, std::io::Error>((map, slots))
        })();
        let (map, slots) = match built {
            Ok(built) => built,
            Err(source) => {
                let _ = std::fs::remove_file(&path);
                return Err(SpoolError::Io { path, source });
            }
        };
        let table = SpoolTable::from_map(map, slots, |map| Backing::File { _map: map, file, path });
        table.init_header(identity, pid);
        Ok(table)
    }

    /// The same table in anonymous memory: the open-span registry with no
    /// file behind it.
    pub fn anonymous(slots: u32) -> Arc<SpoolTable> {
        let size = HEADER_SIZE + slots as usize * SLOT_SIZE;
        match memmap2::MmapMut::map_anon(size) {
            Ok(map) => SpoolTable::from_map(map, slots, |map| Backing::Anonymous { _map: map }),
            // No memory to map: a header on the heap and no slots (open
            // spans are not tracked).
            Err(error) => {
                crate::diag::warn_once(format_args!(
                    "cannot map memory for the open-span table ({error}); open spans are not tracked"
                ));
                let mut heap = vec![0_u64; HEADER_SIZE / 8].into_boxed_slice();
                let base = heap.as_mut_ptr().cast::<u8>();
                Arc::new(SpoolTable {
                    base,
                    len: HEADER_SIZE,
                    slot_count: 0,
                    taken: Box::new([]),
                    orders: Box::new([]),
                    hint: AtomicUsize::new(0),
                    steal_at: AtomicUsize::new(0),
                    ended: AtomicUsize::new(0),
                    warned_full: AtomicBool::new(false),
                    full_advice: OnceLock::new(),
                    slots: Mutex::new(Slots::default()),
                    backing: Backing::Heap { _memory: heap },
                    closed: AtomicBool::new(false),
                    generation: crate::ids::fork_generation(),
                })
            }
        }
    }

    fn from_map(
        mut map: memmap2::MmapMut,
        slot_count: u32,
        backing: impl FnOnce(memmap2::MmapMut) -> Backing,
    ) -> Arc<SpoolTable> {
        let base = map.as_mut_ptr();
        let len = map.len();
        Arc::new(SpoolTable {
            base,
            len,
            slot_count,
            taken: free_bitmap(slot_count),
            orders: (0..slot_count).map(|_| AtomicU64::new(0)).collect(),
            hint: AtomicUsize::new(0),
            steal_at: AtomicUsize::new(0),
            ended: AtomicUsize::new(0),
            warned_full: AtomicBool::new(false),
            full_advice: OnceLock::new(),
            slots: Mutex::new(Slots::default()),
            backing: backing(map),
            closed: AtomicBool::new(false),
            generation: crate::ids::fork_generation(),
        })
    }

    fn init_header(&self, identity: &Identity, pid: u32) {
        // SAFETY: nothing else references the header yet.
        let header = unsafe { std::slice::from_raw_parts_mut(self.base, HEADER_SIZE) };
        format::write_header(
            header,
            self.slot_count,
            pid,
            uid(),
            identity.rank,
            identity.world_size,
            &boot_id(),
            SystemTime::now(),
        );
        self.write_meta(identity, &[]);
    }

    /// Rewrites the metadata block (host, run id, resource): setup calls it
    /// once the resource is known, before any span.
    pub fn write_meta(&self, identity: &Identity, resource: &[KeyValue]) {
        if !self.is_file() {
            return;
        }
        let _slots = lock(&self.slots);
        // SAFETY: the metadata block is written only here, under the lock.
        let meta = unsafe { std::slice::from_raw_parts_mut(self.base.add(OFF_META), HEADER_SIZE - OFF_META) };
        let len = format::encode_meta(meta, &identity.host, &identity.run_id, resource);
        self.atomic_u32(OFF_META_LEN).store(len as u32, Ordering::Release);
    }

    /// The spool file, if the table has one.
    pub fn path(&self) -> Option<&Path> {
        match &self.backing {
            Backing::File { path, .. } => Some(path),
            Backing::Anonymous { .. } | Backing::Heap { .. } => None,
        }
    }

    /// Whether the table is backed by a file.
    pub fn is_file(&self) -> bool {
        matches!(self.backing, Backing::File { .. })
    }

    /// The number of slots.
    pub fn slot_count(&self) -> u32 {
        self.slot_count
    }

    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= HEADER_SIZE);
        // SAFETY: the mapping is page-aligned, `offset` is a multiple of 8
        // within the header, and the mapping lives as long as `self`.
        unsafe { AtomicU64::from_ptr(self.base.add(offset).cast()) }
    }

    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= self.len);
        // SAFETY: as for `atomic_u64`, with 4-byte alignment.
        unsafe { AtomicU32::from_ptr(self.base.add(offset).cast()) }
    }

    fn writable(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && crate::ids::fork_generation() == self.generation
    }

    /// Refreshes the last-alive stamp.
    pub fn touch(&self, now: SystemTime) {
        if self.writable() {
            self.atomic_u64(OFF_LAST_ALIVE).store(nanos(now), Ordering::Relaxed);
        }
    }

    /// Writes the progress record (a seqlock: odd while writing).
    pub fn write_progress(&self, reached: u64, completed: Option<u64>, durable: Option<u64>, now: SystemTime) {
        if !self.is_file() || crate::ids::fork_generation() != self.generation {
            return;
        }
        let seq = self.atomic_u64(OFF_PROGRESS_SEQ);
        let start = seq.load(Ordering::Relaxed);
        seq.store(start | 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        self.atomic_u64(OFF_REACHED).store(reached, Ordering::Relaxed);
        self.atomic_u64(OFF_COMPLETED).store(completed.unwrap_or(NONE), Ordering::Relaxed);
        self.atomic_u64(OFF_DURABLE).store(durable.unwrap_or(NONE), Ordering::Relaxed);
        self.atomic_u64(OFF_PROGRESS_AT).store(nanos(now).max(1), Ordering::Relaxed);
        seq.store((start | 1) + 1, Ordering::Release);
    }

    /// Ended spans that gave their slot up to a new span because every slot
    /// was taken: not in the spool if the process dies before they are
    /// exported.
    pub fn overflow(&self) -> u64 {
        self.atomic_u64(OFF_OVERFLOW).load(Ordering::Relaxed)
    }

    fn slots(&self) -> Option<MutexGuard<'_, Slots>> {
        if !self.writable() {
            return None;
        }
        Some(lock(&self.slots))
    }

    /// Records a started span (the SDK's, found by span id) in a free
    /// slot, or, when none is free, in the slot of an ended span, which is
    /// counted as overflow. Returns whether it was recorded.
    pub fn span_started<'a>(&self, span: impl Into<SpanView<'a>>) -> bool {
        let span = &span.into();
        let Some(mut slots) = self.slots() else { return false };
        let order = next_order();
        let Some(index) = self.claim(order) else {
            // Counted until it ends, under its span id.
            self.open_unkept_started();
            slots.by_span.insert(span.key(), Held { slot: SpoolSlot::UNKEPT, order, attributes: 0, events: 0 });
            return false;
        };
        let (attributes, events) = shape(span);
        slots.by_span.insert(span.key(), Held { slot: index, order, attributes, events });
        self.write_slot(index, span, STATE_OPEN);
        true
    }

    /// Records `span` as ended in its slot (kept until [`released`](Self::released)).
    pub fn span_ended<'a>(&self, span: impl Into<SpanView<'a>>) {
        let span = &span.into();
        let Some(mut slots) = self.slots() else { return };
        let Some(&held) = slots.by_span.get(&span.key()) else { return };
        if held.slot == SpoolSlot::UNKEPT {
            slots.by_span.remove(&span.key());
            self.open_unkept_ended();
            return;
        }
        if self.holds(held.slot, held.order) {
            self.end_in_slot(held.slot, held.order, span, (held.attributes, held.events));
        }
    }

    /// Records a span started by lens's tracer: [`span_started`](Self::span_started)
    /// without a lock or a lookup. `None` when the table is closed; a slot
    /// that [is not kept](SpoolSlot::is_kept) when every slot holds an open
    /// span (counted until it ends: [`open_unkept`](Self::open_unkept)).
    pub(crate) fn record_started(&self, span: &SpanView<'_>) -> Option<SpoolSlot> {
        if !self.writable() {
            return None;
        }
        let order = next_order();
        let Some(index) = self.claim(order) else {
            self.open_unkept_started();
            return Some(SpoolSlot { order, index: SpoolSlot::UNKEPT, attributes: 0, events: 0 });
        };
        self.write_slot(index, span, STATE_OPEN);
        let (attributes, events) = shape(span);
        let saturate = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        Some(SpoolSlot { order, index, attributes: saturate(attributes), events: saturate(events) })
    }

    /// Writes the span in `slot`, still open, again as `span` (it gained an
    /// event): the closer's truncated copy, the flight recorder and a
    /// replay after a kill then have it. Nothing when the slot was given up.
    ///
    /// Under the lock the readers of open slots hold (`collect_open`): the
    /// state word tells a reader an open slot from one being ended, not from
    /// one being written again while open (OPEN, WRITING, OPEN), so without
    /// it a reader could copy a mix of both versions, or skip the span as
    /// busy at the closer's drain and lose it.
    pub(crate) fn record_changed(&self, slot: &mut SpoolSlot, span: &SpanView<'_>) {
        let Some(_readers) = self.slots() else { return };
        if !self.holds(slot.index, slot.order) {
            return;
        }
        self.write_slot(slot.index, span, STATE_OPEN);
        let (attributes, events) = shape(span);
        let saturate = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        (slot.attributes, slot.events) = (saturate(attributes), saturate(events));
    }

    /// Records that the span in `slot` ended as `span`, kept (a file, a
    /// sampled span) until the processor releases the returned slot;
    /// [`release_ended`](Self::release_ended) frees a slot that is not kept.
    pub(crate) fn record_ended(&self, slot: SpoolSlot, span: &SpanView<'_>) -> Option<SpoolSlot> {
        if !self.writable() {
            return None;
        }
        if !slot.is_kept() {
            self.open_unkept_ended();
            return None;
        }
        if !self.holds(slot.index, slot.order) {
            return None;
        }
        self.end_in_slot(slot.index, slot.order, span, (usize::from(slot.attributes), usize::from(slot.events)));
        Some(slot)
    }

    /// A span ended and is not kept (no file, or not sampled): its slot is
    /// free at once.
    pub(crate) fn release_ended(&self, slot: SpoolSlot) {
        if !self.writable() {
            return;
        }
        if slot.is_kept() {
            self.release(slot.index, slot.order);
        } else {
            self.open_unkept_ended();
        }
    }

    /// Spans open now that got no slot because every slot held an open
    /// span: neither the closer nor a crash's replay has them, so they are
    /// lost if still open at shutdown or when the process dies.
    pub fn open_unkept(&self) -> u64 {
        u64::from(self.atomic_u32(OFF_OPEN_UNKEPT).load(Ordering::Relaxed))
    }

    /// Says what a full table's warning advises: `advice` (which variable
    /// gives it more slots). Set once, by setup.
    pub(crate) fn advise_when_full(&self, advice: String) {
        let _ = self.full_advice.set(advice);
    }

    /// A span got no slot: counted (in the header, for a crash's replay),
    /// and said once.
    #[cold]
    fn open_unkept_started(&self) {
        self.atomic_u32(OFF_OPEN_UNKEPT).fetch_add(1, Ordering::Relaxed);
        if !self.warned_full.swap(true, Ordering::Relaxed) {
            let advice = self.full_advice.get().map_or_else(String::new, |advice| format!("; {advice}"));
            crate::diag::warn(format_args!(
                "more spans are open at once than the open-span table's {} slots: a span started while it is full \
                 is not kept, and is lost if it is still open at shutdown or when the process dies (the shutdown \
                 report counts them){advice}",
                self.slot_count
            ));
        }
    }

    /// A span that got no slot ended (its count goes down).
    fn open_unkept_ended(&self) {
        let _ =
            self.atomic_u32(OFF_OPEN_UNKEPT).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Writes the end of `span` into its slot `index`, held under the claim
    /// `order` since it started with `started` attributes and events, and
    /// marks the claim ended (the slot may be given up from then on).
    fn end_in_slot(&self, index: u32, order: NonZeroU64, span: &SpanView<'_>, started: (usize, usize)) {
        let unchanged = started == shape(span) && !matches!(span.status, opentelemetry::trace::Status::Error { .. });
        // Counted before the state says so, so that a release or a steal
        // never counts it down first.
        self.ended.fetch_add(1, Ordering::Relaxed);
        if !(unchanged && self.mark_ended(index, span)) {
            self.write_slot(index, span, STATE_ENDED);
        }
        // Fails only when the closer's drain adopted the slot meanwhile: the
        // slot is then released by the truncated copy's export.
        let _ = self.orders[index as usize].compare_exchange(
            order.get(),
            order.get() | CLAIM_ENDED,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// The batch processor exported (or finally dropped) these spans: their
    /// slots are free again.
    pub fn released<K: Into<SpoolKey>>(&self, keys: impl IntoIterator<Item = K>) {
        if !self.writable() {
            return;
        }
        let mut slots = None;
        for key in keys {
            match key.into() {
                SpoolKey::Slot(slot) => {
                    self.release(slot.index, slot.order);
                }
                SpoolKey::Span(span_id) => {
                    let slots = slots.get_or_insert_with(|| lock(&self.slots));
                    match slots.by_span.remove(&span_id) {
                        Some(held) if held.slot == SpoolSlot::UNKEPT => self.open_unkept_ended(),
                        Some(held) => self.release(held.slot, held.order),
                        None => {}
                    }
                }
            }
        }
    }

    /// Forgets an open span without keeping it (a span that ended unsampled).
    pub fn forget(&self, span_id: u64) {
        self.released([span_id]);
    }

    /// Whether slot `index` is held under the claim `order` (its span open
    /// or ended).
    fn holds(&self, index: u32, order: NonZeroU64) -> bool {
        self.orders.get(index as usize).is_some_and(|claim| claim.load(Ordering::Acquire) & !CLAIM_ENDED == order.get())
    }

    /// Takes a free slot for the claim `order`, or, when none is free, the
    /// slot of an ended span (counted as overflow); `None` when every slot
    /// holds an open span.
    fn claim(&self, order: NonZeroU64) -> Option<u32> {
        let index = match self.take_free() {
            Some(index) => index,
            None => {
                let stolen = self.steal(order)?;
                self.atomic_u64(OFF_OVERFLOW).fetch_add(1, Ordering::Relaxed);
                return Some(stolen);
            }
        };
        self.orders[index as usize].store(order.get(), Ordering::Release);
        Some(index)
    }

    /// Sets the first clear bit of `taken`, searching from `hint`.
    fn take_free(&self) -> Option<u32> {
        let words = self.taken.len();
        let start = self.hint.load(Ordering::Relaxed);
        for step in 0..words {
            let at = if start + step >= words { start + step - words } else { start + step };
            let word = &self.taken[at];
            let mut bits = word.load(Ordering::Relaxed);
            while bits != u64::MAX {
                let bit = (!bits).trailing_zeros();
                match word.compare_exchange_weak(bits, bits | 1 << bit, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => {
                        if at != start {
                            self.hint.store(at, Ordering::Relaxed);
                        }
                        return Some(at as u32 * 64 + bit);
                    }
                    Err(now) => bits = now,
                }
            }
        }
        None
    }

    /// Gives the slot of an ended span (not yet exported) to the claim
    /// `order`; `None` when every slot holds an open span.
    fn steal(&self, order: NonZeroU64) -> Option<u32> {
        if self.ended.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let count = self.orders.len();
        let start = self.steal_at.load(Ordering::Relaxed).min(count);
        for step in 0..count {
            let index = if start + step >= count { start + step - count } else { start + step };
            let claim = &self.orders[index];
            let was = claim.load(Ordering::Acquire);
            if was & CLAIM_ENDED == 0 {
                continue;
            }
            if claim.compare_exchange(was, order.get(), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                self.ended.fetch_sub(1, Ordering::Relaxed);
                self.steal_at.store(index + 1, Ordering::Relaxed);
                return Some(index as u32);
            }
        }
        None
    }

    /// Frees slot `index` if it is still held under the claim `order`.
    fn release(&self, index: u32, order: NonZeroU64) {
        let Some(claim) = self.orders.get(index as usize) else { return };
        let mut was = claim.load(Ordering::Relaxed);
        loop {
            if was & !CLAIM_ENDED != order.get() {
                return;
            }
            match claim.compare_exchange_weak(was, 0, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => was = now,
            }
        }
        let state = self.state(index);
        if state.load(Ordering::Relaxed) == STATE_ENDED {
            self.ended.fetch_sub(1, Ordering::Relaxed);
        }
        state.store(STATE_FREE, Ordering::Release);
        self.taken[index as usize / 64].fetch_and(!(1 << (index % 64)), Ordering::Release);
    }

    /// The state word of slot `index`.
    fn state(&self, index: u32) -> &AtomicU32 {
        self.atomic_u32(format::slot_range(index).start + SLOT_STATE)
    }

    fn write_slot(&self, index: u32, span: &SpanView<'_>, state: u32) {
        let state_word = self.state(index);
        state_word.store(STATE_WRITING, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        let range = format::slot_range(index);
        // SAFETY: in bounds (`index` is below `slot_count`), and exclusive:
        // the caller holds the slot (its bit and claim). A reader of open
        // spans copies it as a seqlock reader (see `read_open`).
        let slot = unsafe { &mut *self.base.add(range.start).cast::<[u8; SLOT_SIZE]>() };
        format::encode_span(slot, span);
        state_word.store(state, Ordering::Release);
    }

    /// Marks the span in slot `index` ended without encoding it again: its
    /// end time, status and state. `false` (nothing written) when the
    /// slot's name is not the span's (renamed after it started).
    fn mark_ended(&self, index: u32, span: &SpanView<'_>) -> bool {
        let range = format::slot_range(index);
        // SAFETY: in bounds, and exclusive: the caller holds the slot.
        let slot = unsafe { std::slice::from_raw_parts_mut(self.base.add(range.start), SLOT_SIZE) };
        if !format::holds_name(slot, span.name) {
            return false;
        }
        let state_word = self.state(index);
        state_word.store(STATE_WRITING, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        format::encode_end(slot, span);
        state_word.store(STATE_ENDED, Ordering::Release);
        true
    }

    /// The taken slots, in order.
    fn taken_slots(&self) -> impl Iterator<Item = u32> + '_ {
        let count = self.slot_count;
        self.taken.iter().enumerate().flat_map(move |(at, word)| {
            let mut bits = word.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                Some(at as u32 * 64 + bit)
            })
            .filter(move |&index| index < count)
        })
    }

    /// Copies slot `index` into `bytes` when it holds an open span, as a
    /// seqlock reader (the span may be ending on another thread): its state
    /// and claim are the same after the copy as before. Returns its claim.
    fn read_open(&self, index: u32, bytes: &mut [u8; SLOT_SIZE]) -> Option<u64> {
        let state = self.state(index);
        let claim = &self.orders[index as usize];
        let order = claim.load(Ordering::Acquire);
        if order == 0 || state.load(Ordering::Acquire) != STATE_OPEN {
            return None;
        }
        let range = format::slot_range(index);
        // SAFETY: in bounds. The holder may be writing the slot now: the
        // bytes are copied as they are, and used only if the state and claim
        // checked after the copy are unchanged.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(range.start), bytes.as_mut_ptr(), SLOT_SIZE) };
        std::sync::atomic::fence(Ordering::Acquire);
        (state.load(Ordering::Relaxed) == STATE_OPEN && claim.load(Ordering::Relaxed) == order).then_some(order)
    }

    /// The spans open now, decoded from their slots, with their claims (in
    /// start order).
    pub fn open_spans(&self) -> Vec<(u64, SpanData)> {
        self.collect_open(false)
    }

    /// [`open_spans`](Self::open_spans) for the closer's drain: a lens
    /// span's slot is handed over to its span id, so that the truncated
    /// copy the processor exports (same span id) releases it, and the
    /// original's later end writes nothing.
    pub(crate) fn take_open_spans(&self) -> Vec<(u64, SpanData)> {
        self.collect_open(true)
    }

    fn collect_open(&self, adopt: bool) -> Vec<(u64, SpanData)> {
        let Some(mut slots) = self.slots() else { return Vec::new() };
        let mut open = Vec::new();
        let mut bytes = Box::new([0_u8; SLOT_SIZE]);
        for index in self.taken_slots() {
            let Some(order) = self.read_open(index, &mut bytes) else { continue };
            let Some(span) = format::decode_span(&bytes[..]) else { continue };
            let key = span_key(&span);
            if adopt && !slots.by_span.get(&key).is_some_and(|held| held.slot == index && held.order.get() == order) {
                let adopted = next_order();
                if self.orders[index as usize]
                    .compare_exchange(order, adopted.get(), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    let (attributes, events) = shape(&SpanView::from(&span));
                    slots.by_span.insert(key, Held { slot: index, order: adopted, attributes, events });
                }
            }
            open.push((order, span));
        }
        open
    }

    /// The number of open spans.
    pub fn open_count(&self) -> usize {
        if !self.writable() {
            return 0;
        }
        self.taken_slots().filter(|&index| self.state(index).load(Ordering::Acquire) == STATE_OPEN).count()
    }

    /// Forgets every span (the closer's drain, and a forked child's).
    pub fn clear(&self) {
        let Some(mut slots) = self.slots() else { return };
        self.clear_locked(&mut slots);
    }

    fn clear_locked(&self, slots: &mut Slots) {
        for index in self.taken_slots().collect::<Vec<_>>() {
            self.state(index).store(STATE_FREE, Ordering::Release);
            self.orders[index as usize].store(0, Ordering::Release);
        }
        for (word, free) in self.taken.iter().zip(free_bitmap(self.slot_count)) {
            word.store(free.into_inner(), Ordering::Release);
        }
        self.ended.store(0, Ordering::Relaxed);
        self.atomic_u32(OFF_OPEN_UNKEPT).store(0, Ordering::Relaxed);
        slots.by_span.clear();
    }

    /// After a clean shutdown (every span exported or counted): frees every
    /// slot, marks the file closed cleanly (its progress record stays for
    /// the next attempt) and stops writing. The lock goes with the process
    /// (or with [`close_file`](Self::close_file)).
    pub fn close_cleanly(&self) {
        if crate::ids::fork_generation() != self.generation {
            return;
        }
        let mut slots = lock(&self.slots);
        self.clear_locked(&mut slots);
        // Every span was exported or counted: the slots given up during the
        // run cost nothing, and a later reader must not warn of them.
        self.atomic_u64(OFF_OVERFLOW).store(0, Ordering::Relaxed);
        self.atomic_u64(OFF_LAST_ALIVE).store(nanos(SystemTime::now()), Ordering::Relaxed);
        self.atomic_u64(OFF_FLAGS).fetch_or(FLAG_CLOSED_CLEANLY, Ordering::Release);
        self.closed.store(true, Ordering::Release);
        drop(slots);
        self.close_file();
    }

    /// Releases the advisory lock (the mapping stays, unwritten). Nothing
    /// in a forked child: the lock is on the file description the child
    /// shares with its parent, so releasing it there would let another
    /// process replay (and remove) the live parent's spool.
    pub fn close_file(&self) {
        if crate::ids::fork_generation() != self.generation {
            return;
        }
        if let Backing::File { file, .. } = &self.backing {
            let _ = file.unlock();
        }
    }

    /// Stops writing (a shutdown that did not finish cleanly keeps the
    /// spans for the next attempt).
    pub fn stop(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether writing has stopped.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The key of a span in the table: its span id as a number.
pub(crate) fn span_key(span: &SpanData) -> u64 {
    SpanView::from(span).key()
}

/// Starts the thread that refreshes `table`'s last-alive stamp every
/// second until the table is closed. Without a thread (none to be had), the
/// stamp stays at the time setup wrote it; a warning says so.
pub(crate) fn start_alive_thread(table: &Arc<SpoolTable>) {
    let table = Arc::clone(table);
    let spawned = std::thread::Builder::new().name("lens-spool-alive".into()).spawn(move || {
        while !table.is_closed() {
            table.touch(SystemTime::now());
            std::thread::sleep(ALIVE_PERIOD);
        }
    });
    if let Err(error) = spawned {
        crate::diag::warn_once(format_args!(
            "could not start the spool's last-alive thread ({error}); a replay will end open spans at setup's time"
        ));
    }
}

/// Where this rank's spool goes: `<PREFIX>_SPOOL_DIR`, else beside the
/// checkpoints, else under the file-export directory (when the file
/// exporter is configured for traces); `None` for an OTLP-only program
/// without checkpoints.
pub fn spool_dir(
    configured: Option<&Path>,
    checkpoint_dir: Option<&Path>,
    file_export_dir: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(dir) = configured {
        return Some(dir.to_path_buf());
    }
    if let Some(dir) = checkpoint_dir {
        return Some(dir.join(SPOOL_SUBDIRECTORY));
    }
    file_export_dir.map(|dir| dir.join(SPOOL_SUBDIRECTORY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::Event;

    fn span(id: u64) -> SpanData {
        format::tests_support::span("s", id, 0, id)
    }

    #[test]
    fn a_full_table_gives_up_an_ended_span_and_counts_it() {
        let table = SpoolTable::anonymous(2);
        assert!(table.span_started(&span(1)));
        assert!(table.span_started(&span(2)));
        table.span_ended(&span(1));
        table.span_ended(&span(2));
        // Full: an ended span (span 1, in the first slot) gives its slot up.
        assert!(table.span_started(&span(3)));
        assert_eq!(table.overflow(), 1);
        table.span_ended(&span(3));
        table.released([3_u64]);
        assert!(table.span_started(&span(4)));
        assert_eq!(table.overflow(), 1, "a released slot is reused without overflow");
        // Two open spans fill it: a third is not tracked, and counted as
        // open without a slot (not as overflow) until it ends.
        table.released([2_u64]);
        assert!(table.span_started(&span(5)));
        assert!(!table.span_started(&span(6)));
        assert_eq!((table.overflow(), table.open_unkept()), (1, 1));
        let mut open: Vec<u64> =
            table.open_spans().iter().map(|(_, s)| u64::from_be_bytes(s.span_context.span_id().to_bytes())).collect();
        open.sort_unstable();
        assert_eq!(open, [4, 5]);
        table.span_ended(&span(6));
        assert_eq!(table.open_unkept(), 0, "counted until it ends");
    }

    #[test]
    fn a_lens_span_that_gets_no_slot_is_counted_until_it_ends() {
        let table = SpoolTable::anonymous(1);
        let first = table.record_started(&SpanView::from(&span(1))).expect("a free slot");
        let second = table.record_started(&SpanView::from(&span(2))).expect("a slot that is not kept");
        assert!(first.is_kept() && !second.is_kept());
        assert_eq!((table.open_unkept(), table.overflow(), table.open_count()), (1, 0, 1));
        // Ended in a spool file (kept) or not, it is no longer counted.
        assert_eq!(table.record_ended(second, &SpanView::from(&span(2))), None);
        assert_eq!(table.open_unkept(), 0);
        let third = table.record_started(&SpanView::from(&span(3))).expect("a slot that is not kept");
        table.release_ended(third);
        assert_eq!(table.open_unkept(), 0);
        table.release_ended(first);
        assert_eq!(table.taken_slots().count(), 0);
    }

    #[test]
    fn the_ended_list_does_not_grow_while_a_span_stays_open() {
        let table = SpoolTable::anonymous(8);
        assert!(table.span_started(&span(1)));
        for id in 2..1000 {
            assert!(table.span_started(&span(id)));
            table.span_ended(&span(id));
            table.released([id]);
        }
        assert_eq!(table.ended.load(Ordering::Relaxed), 0);
        assert_eq!(lock(&table.slots).by_span.len(), 1);
        assert_eq!(table.overflow(), 0);
        assert_eq!(table.open_count(), 1);
    }

    /// The span held for `id`, decoded from its slot.
    fn held_span(table: &SpoolTable, id: u64) -> SpanData {
        let held = lock(&table.slots).by_span[&id];
        let range = format::slot_range(held.slot);
        // SAFETY: in bounds; no other thread writes this test's table.
        let bytes = unsafe { std::slice::from_raw_parts(table.base.add(range.start), SLOT_SIZE) };
        format::decode_span(bytes).expect("the slot decodes")
    }

    #[test]
    fn an_ended_span_keeps_what_changed_after_it_started() {
        use opentelemetry::trace::Status;
        let table = SpoolTable::anonymous(8);
        let later = |mut span: SpanData| {
            span.end_time = span.start_time + Duration::from_millis(250);
            span
        };
        // Unchanged but for its end and an `Ok` status: the end is written in place.
        assert!(table.span_started(&span(1)));
        let mut ended = later(span(1));
        ended.status = Status::Ok;
        table.span_ended(&ended);
        let held = held_span(&table, 1);
        assert_eq!((held.end_time, &held.status, held.attributes.len()), (ended.end_time, &Status::Ok, 4));
        assert_eq!(table.open_count(), 0);
        // An attribute set and an error after the start: both are kept.
        assert!(table.span_started(&span(2)));
        let mut ended = later(span(2));
        ended.attributes.push(KeyValue::new("gen_ai.usage.output_tokens", 12_i64));
        ended.status = Status::error("the engine stopped");
        table.span_ended(&ended);
        let held = held_span(&table, 2);
        assert_eq!(held.attributes.last(), Some(&KeyValue::new("gen_ai.usage.output_tokens", 12_i64)));
        assert_eq!(held.status, Status::error("the engine stopped"));
        // Renamed after it started: the new name is kept.
        assert!(table.span_started(&span(3)));
        let mut ended = later(span(3));
        ended.name = "renamed".into();
        table.span_ended(&ended);
        assert_eq!(held_span(&table, 3).name, "renamed");
        assert_eq!(held_span(&table, 3).end_time, ended.end_time);
    }

    #[test]
    fn a_lens_span_holds_its_slot_by_claim_without_the_lookup_table() {
        let table = SpoolTable::anonymous(2);
        let first = span(1);
        let slot = table.record_started(&SpanView::from(&first)).expect("a free slot");
        assert_eq!(table.open_count(), 1);
        assert!(lock(&table.slots).by_span.is_empty(), "no span-id entry for a lens span");
        let open = table.open_spans();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].1.span_context.span_id(), first.span_context.span_id());
        // Kept (a spool file): ended in place until the processor releases the slot.
        let mut ended = first.clone();
        ended.end_time = ended.start_time + Duration::from_millis(3);
        let kept = table.record_ended(slot, &SpanView::from(&ended)).expect("kept");
        assert_eq!((table.open_count(), table.ended.load(Ordering::Relaxed)), (0, 1));
        table.released([SpoolKey::Slot(kept)]);
        assert_eq!((table.taken_slots().count(), table.ended.load(Ordering::Relaxed)), (0, 0));
        // Not kept (no file): free at once.
        let slot = table.record_started(&SpanView::from(&span(2))).expect("a free slot");
        table.release_ended(slot);
        assert_eq!(table.taken_slots().count(), 0);
        assert_eq!(table.overflow(), 0);
    }

    #[test]
    fn a_slot_given_up_to_another_span_is_not_released_by_its_old_holder() {
        let table = SpoolTable::anonymous(1);
        let slot = table.record_started(&SpanView::from(&span(1))).expect("a free slot");
        let old = table.record_ended(slot, &SpanView::from(&span(1))).expect("kept");
        // Full: the ended span gives its slot up, counted.
        let new = table.record_started(&SpanView::from(&span(2))).expect("the ended span's slot");
        assert_eq!(table.overflow(), 1);
        // The export of the first span releases nothing: the second stays open.
        table.released([SpoolKey::Slot(old)]);
        let open = table.open_spans();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].1.span_context.span_id(), span(2).span_context.span_id());
        // Every slot open: a third span is not kept, and counted apart.
        let third = table.record_started(&SpanView::from(&span(3))).expect("a slot that is not kept");
        assert!(!third.is_kept());
        assert_eq!((table.overflow(), table.open_unkept()), (1, 1));
        table.released([SpoolKey::Slot(new)]);
        assert_eq!(table.open_count(), 0);
    }

    #[test]
    fn open_spans_read_while_other_threads_start_and_end_spans_decode_whole() {
        let table = SpoolTable::anonymous(64);
        let stop = AtomicBool::new(false);
        // The writers run until the reader has seen enough (however the
        // threads are scheduled on a loaded machine), bounded in time and
        // count.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        std::thread::scope(|scope| {
            for thread in 0..2_u64 {
                let (table, stop) = (&table, &stop);
                scope.spawn(move || {
                    // At most 2,000,000 spans a thread. Each outer span
                    // stays open while an inner one starts and ends.
                    for n in 0..1_000_000_u64 {
                        if stop.load(Ordering::Relaxed) || (n % 1024 == 0 && std::time::Instant::now() > deadline) {
                            break;
                        }
                        let outer = span(thread << 32 | (2 * n + 1));
                        let inner = span(thread << 32 | (2 * n + 2));
                        let (outer, inner) = (SpanView::from(&outer), SpanView::from(&inner));
                        let held = table.record_started(&outer);
                        if let Some(slot) = table.record_started(&inner) {
                            if n % 2 == 1 {
                                table.release_ended(slot);
                            } else if let Some(kept) = table.record_ended(slot, &inner) {
                                table.released([SpoolKey::Slot(kept)]);
                            }
                        }
                        if let Some(slot) = held {
                            table.release_ended(slot);
                        }
                    }
                });
            }
            // At most 1,000,000 reads, until 2,000 open spans were read.
            let mut seen = 0;
            for _ in 0..1_000_000 {
                for (order, open) in table.open_spans() {
                    assert!(order > 0);
                    let id = u64::from_be_bytes(open.span_context.span_id().to_bytes());
                    assert_eq!(open, span(id), "a slot read whole");
                    seen += 1;
                }
                if seen >= 2_000 || std::time::Instant::now() > deadline {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            assert!(seen > 0, "open spans were seen");
        });
        assert_eq!(table.open_count(), 0);
    }
    #[test]
    fn a_span_written_again_while_open_is_read_whole_and_never_missed() {
        // One open span gains events (each a whole write of its slot) while
        // the closer's readers copy the open slots: every read finds it,
        // with as many events as some write gave it, never a mix.
        let table = SpoolTable::anonymous(4);
        let mut open = span(7);
        let mut slot = table.record_started(&SpanView::from(&open)).expect("a free slot");
        let stop = AtomicBool::new(false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        std::thread::scope(|scope| {
            let (table, stop) = (&table, &stop);
            scope.spawn(move || {
                // At most 200,000 writes; the event count cycles 0 to 3.
                for n in 0..200_000_u32 {
                    if stop.load(Ordering::Relaxed) || (n % 1024 == 0 && std::time::Instant::now() > deadline) {
                        break;
                    }
                    let events =
                        (0..n % 4).map(|i| Event::new("e", open.start_time, vec![KeyValue::new("i", i64::from(i))], 0));
                    open.events.events = events.collect();
                    table.record_changed(&mut slot, &SpanView::from(&open));
                }
            });
            // At most 200,000 reads, until 5,000 were made.
            for read in 0..200_000 {
                let spans = table.open_spans();
                assert_eq!(spans.len(), 1, "read {read}: the open span was missed");
                let events = &spans[0].1.events.events;
                assert!(events.len() < 4, "{events:?}");
                for (i, event) in events.iter().enumerate() {
                    assert_eq!(event.attributes, [KeyValue::new("i", i as i64)], "a slot read whole");
                }
                if read >= 5_000 || std::time::Instant::now() > deadline {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn concurrent_starts_on_a_table_full_of_ended_spans_never_share_a_slot() {
        // Eight slots, four threads, nothing released (an export that lags):
        // every start takes an ended span's slot. Two threads taking the same
        // slot would write one span over the other (an open span's copy with
        // another's attributes), and the slot's holder would lose it before
        // its end.
        let table = SpoolTable::anonymous(8);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let per_thread = 25_000_u64;
        std::thread::scope(|scope| {
            for thread in 0..4_u64 {
                let table = &table;
                scope.spawn(move || {
                    for n in 0..per_thread {
                        if n % 1024 == 0 && std::time::Instant::now() > deadline {
                            break;
                        }
                        let started = span(thread * per_thread + n + 1);
                        let Some(slot) = table.record_started(&SpanView::from(&started)) else { continue };
                        let kept = table.record_ended(slot, &SpanView::from(&started));
                        assert!(kept.is_some(), "span {n} of thread {thread}: its slot was taken while it was open");
                    }
                });
            }
        });
        assert_eq!(table.open_count(), 0, "every span ended");
        let ended_slots =
            table.taken_slots().filter(|&index| table.state(index).load(Ordering::Acquire) == STATE_ENDED).count();
        assert_eq!((ended_slots, table.ended.load(Ordering::Relaxed)), (8, 8));
        let mut ids: Vec<u64> = (0..8)
            .map(|index| {
                let range = format::slot_range(index);
                // SAFETY: in bounds; the threads have finished.
                let bytes = unsafe { std::slice::from_raw_parts(table.base.add(range.start), SLOT_SIZE) };
                let span = format::decode_span(bytes).expect("the slot decodes");
                u64::from_be_bytes(span.span_context.span_id().to_bytes())
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 8, "each slot holds its own span");
    }
}
