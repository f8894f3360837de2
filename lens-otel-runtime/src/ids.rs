//! Trace and span IDs that never repeat across ranks, threads or forked
//! children.
//!
//! Megatron seeds every data-parallel rank identically. In the Python
//! original that made OpenTelemetry's default generator, which draws from the
//! global `random` module, hand out the *same* trace and span IDs on every
//! rank, and backends then merged unrelated spans. Rust has no global seed, but
//! the same promise is kept here explicitly and tested: the
//! [`SeedIndependentIdGenerator`] draws from its own generator, seeded from the
//! operating system's entropy, one per thread, re-seeded in a forked child (a
//! data-loader worker would otherwise continue the parent's sequence).
//!
//! The generator is `rand`'s `SmallRng` (xoshiro256++), as the SDK's own
//! id generator: ids need to be unique and unpredictable enough to never
//! collide, not secret, and a cryptographic generator (`StdRng`, ChaCha12)
//! costs about a hundred instructions more per span.
//!
//! Fork detection: on Unix a `pthread_atfork` child handler bumps a fork
//! generation (one relaxed atomic load per ID to check it); comparing process
//! ids instead would cost a `getpid` system call per ID (about 80 ns measured
//! here, a tenth of a span). If the handler cannot be registered, the process
//! id is compared after all. Other platforms have no `fork`.

use std::cell::{Cell, UnsafeCell};

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::IdGenerator;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// An [`IdGenerator`] independent of any seeding the program does, distinct
/// across threads, processes and forked children, and never returning the
/// invalid all-zero ID.
///
/// Each thread owns a generator seeded from the operating system's entropy;
/// a thread that finds itself in a new process (after `fork`) re-seeds before
/// drawing. Install it with
/// `SdkTracerProvider::builder().with_id_generator(SeedIndependentIdGenerator::new())`.
///
/// ```
/// use lens_otel_runtime::ids::SeedIndependentIdGenerator;
/// use opentelemetry::trace::{SpanId, TraceId};
/// use opentelemetry_sdk::trace::IdGenerator;
///
/// let ids = SeedIndependentIdGenerator::new();
/// assert_ne!(ids.new_trace_id(), TraceId::INVALID);
/// assert_ne!(ids.new_span_id(), SpanId::INVALID);
/// assert_ne!(ids.new_span_id(), ids.new_span_id());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SeedIndependentIdGenerator {
    _private: (),
}

impl SeedIndependentIdGenerator {
    /// A generator; all instances share the per-thread state, so creating one
    /// is free.
    pub const fn new() -> SeedIndependentIdGenerator {
        SeedIndependentIdGenerator { _private: () }
    }
}

impl IdGenerator for SeedIndependentIdGenerator {
    fn new_trace_id(&self) -> TraceId {
        // A trace id chosen by the caller for the next root span started on
        // this thread (see `with_next_trace_id`); one thread-local read.
        if let Ok(Some(chosen)) = NEXT_TRACE_ID.try_with(Cell::take) {
            return TraceId::from(chosen);
        }
        TraceId::from(with_rng(|rng| nonzero_u128(rng.random::<u128>())))
    }

    fn new_span_id(&self) -> SpanId {
        SpanId::from(with_rng(|rng| nonzero_u64(rng.random::<u64>())))
    }
}

thread_local! {
    /// The trace id the next `new_trace_id` call on this thread returns
    /// instead of a random one; taken (reset) by that call.
    static NEXT_TRACE_ID: Cell<Option<u128>> = const { Cell::new(None) };
}

/// Runs `start` with `trace_id` as the trace id that the generator hands to
/// the next root span started on this thread (the structural traces have ids
/// derived from the run identity, so that every rank's spans of one interval share a
/// trace). The override is cleared afterwards whether or not `start` used it,
/// so it never leaks into a later span. A zero `trace_id` is invalid and is
/// ignored (the span gets a random id).
pub fn with_next_trace_id<T>(trace_id: u128, start: impl FnOnce() -> T) -> T {
    if trace_id == 0 {
        return start();
    }
    let _ = NEXT_TRACE_ID.try_with(|next| next.set(Some(trace_id)));
    let result = start();
    let _ = NEXT_TRACE_ID.try_with(|next| next.set(None));
    result
}

/// A random number from the same per-thread generator (for retry jitter).
pub(crate) fn random_u64() -> u64 {
    with_rng(|rng| rng.random())
}

/// The thread's generator and the fork generation it was seeded in.
struct ThreadRng {
    generation: u64,
    rng: SmallRng,
}

thread_local! {
    static RNG: UnsafeCell<Option<ThreadRng>> = const { UnsafeCell::new(None) };
}

/// Runs `draw` with this thread's generator, seeding it first when the
/// thread has none yet or the process id changed (a forked child).
fn with_rng<T>(draw: fn(&mut SmallRng) -> T) -> T {
    let generation = fork_generation();
    let drawn = RNG.try_with(|slot| {
        // SAFETY: the only reference to this thread's generator while it
        // lives: `draw` is a plain function given the generator alone, and
        // neither it nor `seeded_rng` draws an id, so nothing re-enters
        // `with_rng` on this thread meanwhile (a `RefCell`'s flag, checked
        // per id, would only turn that into a panic). lens's signal handler
        // writes one byte to a pipe; a program's handler that started a
        // span would not be async-signal-safe anyway (a span allocates).
        let slot = unsafe { &mut *slot.get() };
        let state = match slot {
            Some(state) if state.generation == generation => state,
            other => other.insert(ThreadRng { generation, rng: seeded_rng() }),
        };
        draw(&mut state.rng)
    });
    match drawn {
        Ok(value) => value,
        // The thread-local is gone (an ID drawn while this thread is being
        // torn down): use a fresh generator for this one draw.
        Err(_) => draw(&mut seeded_rng()),
    }
}

/// A generator seeded from the operating system; if the OS refuses, a seed
/// mixed from the time, the process, the thread and a stack address, so that
/// drawing an ID never panics.
#[cold]
fn seeded_rng() -> SmallRng {
    SmallRng::try_from_os_rng().unwrap_or_else(|_| SmallRng::seed_from_u64(fallback_seed()))
}

fn fallback_seed() -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    // `RandomState` keys its hasher from the OS once per thread, then
    // increments; mixing in the time and the pid keeps even that path distinct.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    nanos.hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    std::thread::current().id().hash(&mut hasher);
    let local = 0_u8;
    (&raw const local as usize).hash(&mut hasher);
    hasher.finish()
}

/// A value that changes in a forked child (and never otherwise): state
/// kept with the generation it was made in belongs to another process once
/// the two differ.
///
/// One relaxed load once the fork handler is registered (a few spans'
/// parts read it: the ids, the spool, the recorder's buffer).
#[cfg(unix)]
#[inline]
pub fn fork_generation() -> u64 {
    let generation = fork::GENERATION.load(std::sync::atomic::Ordering::Relaxed);
    if generation < fork::USE_PID {
        return generation;
    }
    fork::generation_slow()
}

#[cfg(unix)]
mod fork {
    use std::sync::Once;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The handler is not registered yet.
    const UNREGISTERED: u64 = u64::MAX;
    /// The handler could not be registered: the process id tells a child.
    pub(super) const USE_PID: u64 = u64::MAX - 1;

    /// The fork generation (counted up in each forked child), or one of
    /// the two markers above (never reached by counting).
    pub(super) static GENERATION: AtomicU64 = AtomicU64::new(UNREGISTERED);
    static REGISTER: Once = Once::new();

    unsafe extern "C" {
        fn pthread_atfork(
            prepare: Option<unsafe extern "C" fn()>,
            parent: Option<unsafe extern "C" fn()>,
            child: Option<unsafe extern "C" fn()>,
        ) -> i32;
    }

    unsafe extern "C" fn after_fork_in_child() {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }

    /// Registers the handler on first use; the process id when it could
    /// not be registered.
    #[cold]
    pub(super) fn generation_slow() -> u64 {
        REGISTER.call_once(|| {
            // SAFETY: registers a child handler that only increments an
            // atomic, which is async-signal-safe; the function lives for
            // the whole process.
            let status = unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
            GENERATION.store(if status == 0 { 0 } else { USE_PID }, Ordering::Relaxed);
        });
        match GENERATION.load(Ordering::Relaxed) {
            USE_PID => u64::from(std::process::id()) | (1 << 63),
            generation => generation,
        }
    }
}

/// Without `fork`, the generation never changes.
#[cfg(not(unix))]
pub fn fork_generation() -> u64 {
    0
}

fn nonzero_u64(value: u64) -> u64 {
    if value == 0 { 1 } else { value }
}

fn nonzero_u128(value: u128) -> u128 {
    if value == 0 { 1 } else { value }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn zero_draws_are_replaced() {
        assert_eq!(nonzero_u64(0), 1);
        assert_eq!(nonzero_u128(0), 1);
        assert_eq!(nonzero_u64(7), 7);
    }

    #[test]
    fn ids_differ_across_threads() {
        let ids = SeedIndependentIdGenerator::new();
        let mine: Vec<SpanId> = (0..64).map(|_| ids.new_span_id()).collect();
        let theirs: Vec<SpanId> =
            std::thread::spawn(move || (0..64).map(|_| ids.new_span_id()).collect()).join().unwrap_or_default();
        assert_eq!(theirs.len(), 64);
        let all: HashSet<SpanId> = mine.iter().chain(&theirs).copied().collect();
        assert_eq!(all.len(), 128, "two threads drew a common span id");
    }

    #[test]
    fn a_chosen_trace_id_is_used_once() {
        let ids = SeedIndependentIdGenerator::new();
        let chosen = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef_u128;
        let (first, second) = with_next_trace_id(chosen, || (ids.new_trace_id(), ids.new_trace_id()));
        assert_eq!(first, TraceId::from(chosen));
        assert_ne!(second, TraceId::from(chosen));
        // Cleared even when unused; zero is ignored.
        with_next_trace_id(chosen, || ());
        assert_ne!(ids.new_trace_id(), TraceId::from(chosen));
        assert_ne!(with_next_trace_id(0, || ids.new_trace_id()), TraceId::INVALID);
    }

    #[test]
    fn fallback_seeds_differ() {
        assert_ne!(fallback_seed(), fallback_seed());
    }
}
