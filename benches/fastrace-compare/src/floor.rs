//! The floor under `lens_span_vs_fastrace`: the least a lens span can cost
//! the calling thread while keeping lens's promises with its defaults on,
//! measured by a recorder that does exactly that work and nothing else
//! (issue 24; `docs/performance.md`, "Where it stands").
//!
//! It is not lens's recorder and nothing ships it: it answers whether a
//! rewrite of lens's span path could meet the budget (1.5× fastrace's
//! `LocalSpan`), by counting what the budget leaves once the work that
//! fastrace does not do is done in the cheapest way this author knows:
//!
//! - **the gate and shutdown:** a relaxed load of the group's switch and
//!   an acquire load of the closer's flag;
//! - **the decision at start, on the calling thread:** a child follows its
//!   parent's sampled flag; a root compares its trace id with the ratio's
//!   threshold;
//! - **ids independent of the program's seed:** xoshiro256++ in the
//!   thread's state, seeded on first use and again after a fork (a
//!   generation compared per span), random trace and span ids;
//! - **two clock reads:** lens's own (`clock_gettime`, no `SystemTime`);
//! - **the open-span slot** (the closer's registry, which lets shutdown and
//!   a crash's next attempt find the spans still open): a slot claimed from
//!   a per-thread cache of free slots (refilled with the free slots of one
//!   word of the table's bitmap, one compare-and-swap), the ids, the start,
//!   the flags and the name's index written into its words (a name is
//!   added to the table's list of names once, and a thread remembers its
//!   index by the name's address: a span's name is a `&'static str`), its
//!   state set to open with a release store; at the end, the end time
//!   written and the state set to ended. The table is sized for the run,
//!   as an export thread that frees slots would keep it: freeing is that
//!   thread's work, which fastrace's collector thread has too, and neither
//!   is counted;
//! - **the current span:** a per-thread stack of frames (the parent's ids
//!   read from the top), pushed at start and popped at end;
//! - **a bounded per-thread buffer of ended spans:** the record pushed at
//!   the end, a full buffer (128 records) handed to a bounded queue under
//!   one lock, what the queue cannot take counted as dropped.
//!
//! All of the thread's state is one `RefCell` (one thread-local access and
//! one borrow a start and an end; a span started while the state is
//! borrowed, by a sampler deciding another, is not recorded). Left out,
//! so that this stays a lower bound (a job with lens's defaults pays them
//! on top): the facade's guard and its attribute conversion, the check of
//! the OpenTelemetry context that keeps a span started through the
//! OpenTelemetry API inside a lens span its child (23 instructions more
//! when added here), the sampler's attributes and trace state, links, and
//! the instrumentation scope in the slot.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use lens_fallbacks::otel::span_record::now_unix_nano;

/// Words of one slot: trace id (2), span id, parent span id, start, end,
/// and the flags with the name's index.
const SLOT_WORDS: usize = 7;
/// Names a thread remembers the index of (a direct-mapped cache keyed by
/// the name's address).
const NAMES: usize = 16;
/// Records a thread's buffer holds before it goes to the queue.
const BUFFER: usize = 128;
/// Full buffers the queue holds.
const QUEUE: usize = 1 << 16;

const STATE_OPEN: u32 = 1;
const STATE_ENDED: u32 = 2;
const SAMPLED: u64 = 1;

/// The open-span table: slots of words, a bitmap of the taken ones, a
/// state per slot.
struct Table {
    words: Box<[AtomicU64]>,
    taken: Box<[AtomicU64]>,
    states: Box<[AtomicU32]>,
    /// The bitmap's word to search first.
    hint: AtomicU64,
    /// Spans started with no free slot (kept out of the table).
    overflow: AtomicU64,
    /// The span names, each once (a crash's reader finds a slot's name
    /// here by its index).
    names: Mutex<Vec<&'static str>>,
}

impl Table {
    fn new(slots: usize) -> Table {
        let slots = slots.div_ceil(64) * 64;
        Table {
            words: (0..slots * SLOT_WORDS).map(|_| AtomicU64::new(0)).collect(),
            taken: (0..slots / 64).map(|_| AtomicU64::new(0)).collect(),
            states: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            hint: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
            names: Mutex::new(Vec::new()),
        }
    }

    /// The index of `name` in the table's names, adding it the first time.
    #[cold]
    #[inline(never)]
    fn intern(&self, name: &'static str) -> u32 {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let index = names.iter().position(|known| *known == name).unwrap_or_else(|| {
            names.push(name);
            names.len() - 1
        });
        u32::try_from(index).unwrap_or(u32::MAX)
    }

    /// Takes the free slots of one word of the bitmap into `cache` (empty),
    /// with one compare-and-swap.
    #[cold]
    #[inline(never)]
    fn refill(&self, cache: &mut Vec<u32>) {
        let words = self.taken.len();
        let from = usize::try_from(self.hint.load(Ordering::Relaxed)).unwrap_or(0).min(words);
        for at in (from..words).chain(0..from) {
            let word = &self.taken[at];
            let mut bits = word.load(Ordering::Relaxed);
            while bits != u64::MAX {
                match word.compare_exchange_weak(bits, u64::MAX, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => {
                        let base = u32::try_from(at * 64).unwrap_or(u32::MAX - 64);
                        let mut free = !bits;
                        while free != 0 {
                            cache.push(base + free.trailing_zeros());
                            free &= free - 1;
                        }
                        self.hint.store(at as u64 + 1, Ordering::Relaxed);
                        return;
                    }
                    Err(now) => bits = now,
                }
            }
        }
    }

    /// Frees slot `index` (the export thread's work).
    fn release(&self, index: u32) {
        let index = index as usize;
        self.states[index].store(0, Ordering::Release);
        self.taken[index / 64].fetch_and(!(1 << (index % 64)), Ordering::Release);
    }

    /// The words of slot `index`.
    #[inline]
    fn slot(&self, index: u32) -> &[AtomicU64] {
        let at = index as usize * SLOT_WORDS;
        &self.words[at..at + SLOT_WORDS]
    }
}

/// A span's ids and flags.
#[derive(Clone, Copy)]
struct Ids {
    trace: u128,
    span: u64,
    parent: u64,
    flags: u64,
}

/// A current span.
struct Frame {
    ids: Ids,
    start: u64,
    name: &'static str,
    slot: Option<u32>,
}

/// An ended span, as the export thread gets it.
#[expect(dead_code, reason = "read by an export thread, which the floor does not have")]
pub struct Record {
    ids: Ids,
    start: u64,
    end: u64,
    name: &'static str,
    slot: Option<u32>,
}

/// A thread's state: one thread-local access a start and an end.
struct Local {
    /// Names whose index this thread knows: (address, length, index).
    names: [(usize, usize, u32); NAMES],
    rng: [u64; 4],
    /// The fork generation `rng` was seeded in.
    seeded_in: u64,
    stack: Vec<Frame>,
    buffer: Vec<Record>,
    cache: Vec<u32>,
}

thread_local! {
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local { names: [(0, 0, 0); NAMES], rng: [0; 4], seeded_in: 0, stack: Vec::new(), buffer: Vec::new(), cache: Vec::new() })
    };
}

/// Bumped in a forked child (lens's `fork_generation`): ids are re-seeded.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(1);
/// Seeds a thread's generator.
static SEEDS: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

impl Local {
    /// The next random number (xoshiro256++), seeding the generator first
    /// when it was seeded in another fork generation (or never).
    #[inline]
    fn next(&mut self) -> u64 {
        let generation = FORK_GENERATION.load(Ordering::Relaxed);
        if self.seeded_in != generation {
            self.seed(generation);
        }
        let s = &mut self.rng;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    #[cold]
    fn seed(&mut self, generation: u64) {
        let mut z = SEEDS.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ now_unix_nano();
        for word in &mut self.rng {
            // splitmix64
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            *word = x ^ (x >> 31);
        }
        self.seeded_in = generation;
    }
}

/// The floor's recorder: a table, a gate, a closer's flag, a ratio, a queue.
pub struct Floor {
    table: Table,
    group_enabled: AtomicBool,
    closed: AtomicBool,
    /// A root is sampled when its trace id's low 64 bits are at most this.
    ratio_threshold: u64,
    queue: Mutex<Vec<Vec<Record>>>,
    dropped: AtomicU64,
}

impl Floor {
    /// A recorder whose table holds `slots` spans, every span sampled.
    pub fn new(slots: usize) -> Floor {
        Floor {
            table: Table::new(slots),
            group_enabled: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            ratio_threshold: u64::MAX,
            queue: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
        }
    }

    /// Starts a span named `name`, current until the guard drops.
    #[inline]
    pub fn span(&self, name: &'static str) -> FloorGuard<'_> {
        let started = self.group_enabled.load(Ordering::Relaxed)
            && !self.closed.load(Ordering::Acquire)
            && LOCAL
                .try_with(|local| local.try_borrow_mut().is_ok_and(|mut local| self.start(&mut local, name)))
                .unwrap_or(false);
        FloorGuard { floor: self, started }
    }

    fn start(&self, local: &mut Local, name: &'static str) -> bool {
        let parent = local.stack.last().map(|frame| frame.ids);
        let span = local.next();
        let ids = match parent {
            Some(parent) if parent.flags & SAMPLED == 0 => return false,
            Some(parent) => Ids { trace: parent.trace, span, parent: parent.span, flags: parent.flags },
            None => {
                let low = local.next();
                if low > self.ratio_threshold {
                    return false;
                }
                Ids { trace: u128::from(span) << 64 | u128::from(low), span, parent: 0, flags: SAMPLED }
            }
        };
        let start = now_unix_nano();
        if local.cache.is_empty() {
            self.table.refill(&mut local.cache);
        }
        let slot = local.cache.pop();
        match slot {
            Some(index) => {
                let words = self.table.slot(index);
                words[0].store(ids.trace as u64, Ordering::Relaxed);
                words[1].store((ids.trace >> 64) as u64, Ordering::Relaxed);
                words[2].store(ids.span, Ordering::Relaxed);
                words[3].store(ids.parent, Ordering::Relaxed);
                words[4].store(start, Ordering::Relaxed);
                words[5].store(0, Ordering::Relaxed);
                words[6].store(ids.flags | u64::from(self.name_index(local, name)) << 8, Ordering::Relaxed);
                self.table.states[index as usize].store(STATE_OPEN, Ordering::Release);
            }
            None => {
                self.table.overflow.fetch_add(1, Ordering::Relaxed);
            }
        }
        local.stack.push(Frame { ids, start, name, slot });
        true
    }

    /// `name`'s index in the table, from the thread's cache.
    #[inline]
    fn name_index(&self, local: &mut Local, name: &'static str) -> u32 {
        let key = name.as_ptr() as usize;
        let entry = &mut local.names[(key >> 3) % NAMES];
        if entry.0 != key || entry.1 != name.len() {
            *entry = (key, name.len(), self.table.intern(name));
        }
        entry.2
    }

    fn end(&self, local: &mut Local) {
        let Some(frame) = local.stack.pop() else { return };
        let end = now_unix_nano();
        if let Some(index) = frame.slot {
            self.table.slot(index)[5].store(end, Ordering::Relaxed);
            self.table.states[index as usize].store(STATE_ENDED, Ordering::Release);
        }
        if local.buffer.len() >= BUFFER {
            self.hand_over(&mut local.buffer);
        }
        local.buffer.push(Record { ids: frame.ids, start: frame.start, end, name: frame.name, slot: frame.slot });
    }

    /// Hands a full buffer to the queue under one lock (the thread gets a
    /// fresh one); what the queue cannot take is dropped and counted.
    #[cold]
    #[inline(never)]
    fn hand_over(&self, buffer: &mut Vec<Record>) {
        let full = std::mem::replace(buffer, Vec::with_capacity(BUFFER));
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.len() < QUEUE {
            queue.push(full);
        } else {
            self.dropped.fetch_add(full.len() as u64, Ordering::Relaxed);
        }
    }

    /// What the export thread would do at shutdown: takes this thread's
    /// buffer and the queue, frees their slots, and returns how many spans
    /// were recorded and how many started without a slot or were dropped.
    pub fn finish(&self) -> (u64, u64) {
        let _ = LOCAL.try_with(|local| {
            if let Ok(mut local) = local.try_borrow_mut() {
                let buffer = std::mem::take(&mut local.buffer);
                self.queue.lock().unwrap_or_else(PoisonError::into_inner).push(buffer);
            }
        });
        let queue = std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner));
        let mut recorded = 0;
        for record in queue.iter().flatten() {
            recorded += 1;
            if let Some(index) = record.slot {
                self.table.release(index);
            }
        }
        (recorded, self.table.overflow.load(Ordering::Relaxed) + self.dropped.load(Ordering::Relaxed))
    }
}

/// A span of the floor's recorder, ended when dropped.
pub struct FloorGuard<'a> {
    floor: &'a Floor,
    started: bool,
}

impl Drop for FloorGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.started {
            let _ = LOCAL.try_with(|local| {
                if let Ok(mut local) = local.try_borrow_mut() {
                    self.floor.end(&mut local);
                }
            });
        }
    }
}
