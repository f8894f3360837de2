//! The control file on one rank (SPEC A24): a lens thread that only reads,
//! and the training thread that applies at the iteration hook.
//!
//! With `<PREFIX>_CONTROL_FILE` set, [`crate::Training::new`] starts a
//! thread that looks at the file every `<PREFIX>_CONTROL_POLL_S`: one
//! `stat` per poll, a read (at most 64 KiB, never through a symbolic link)
//! only when the file changed. The thread checks what it read against the
//! job's catalog and launch settings (lens-core's
//! [`control`](lens_fallbacks::control)) and hands an accepted version to
//! the training thread; it warns, once per distinct file version, about a
//! file that does not parse, an unknown key, a bad value, a version without
//! `from_iteration`, a lower generation or one reused with a different
//! content, a file others could have written, or one that is not a regular
//! file or is longer than 64 KiB, and then nothing changes. A window that
//! ended before the rank read it is warned about too; it changes only the
//! generation, as on every rank after the window. The file is opened without
//! blocking and checked before it is read (a FIFO is refused, not waited
//! on), and stopping waits for the thread at most [`STOP_WAIT`].
//!
//! The training thread asks its [`ControlSchedule`] at each
//! [`Training::iteration`](crate::Training::iteration) (one comparison and
//! one relaxed load when nothing is due) and applies a change there: the
//! gate's mask (this is the gate's one writer besides setup and shutdown),
//! the per-iteration sampling ratio, per-rank metrics paused or resumed, the
//! hang watchdog's timeout. It adds a `lens.control.change` event to the
//! current span (the training interval), records `dl.control.generation`,
//! and writes one line on standard error, which says how late a rank that
//! read the file late applied it.
//!
//! Global rank 0 also writes the status file beside the control file
//! (`<FILE>.status`), for `lens control`: the catalog at startup and, after
//! each log interval, the last iteration. Its control thread writes it at
//! its next wake (at most one poll later, and when it stops), so that the
//! training thread makes no file-system call.

use std::collections::HashSet;
use std::hash::{Hash as _, Hasher as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lens_fallbacks::control::{
    CatalogData, Change, ControlRequest, ControlSchedule, ControlSetup, ControlStatus, check_directory, check_file,
    check_generation, file_version, job_uid, parse_request, read_capped, status_path, write_atomic,
};
use lens_fallbacks::{Gauge, KeyValue, Telemetry};

use crate::names::{
    CONTROL_CHANGE_EVENT, CONTROL_CHANGED_ATTRIBUTE, CONTROL_GENERATION, CONTROL_GENERATION_ATTRIBUTE,
    CONTROL_ITERATION_ATTRIBUTE, CONTROL_LATE_ATTRIBUTE,
};
use crate::rank_metrics::{RankCoordinates, rank_attributes};

/// "No iteration yet" in [`Shared::last_iteration`].
const NO_ITERATION: u64 = u64::MAX;

/// How long [`RankControl::stop`] waits for the control thread: a thread
/// stuck in a read or a write of the file system (a hung NFS server) is
/// left behind, detached, with a warning, so that the job's end does not
/// wait on it.
pub(crate) const STOP_WAIT: Duration = Duration::from_secs(1);

/// What the watcher thread and the training thread share.
struct Shared {
    /// The latest accepted version (`Some(None)`: the file is gone).
    pending: Mutex<Option<Option<ControlRequest>>>,
    has_pending: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
    last_iteration: AtomicU64,
    /// The latest log interval not yet in the status file (global rank
    /// 0): the control thread writes it at its next wake, so that the
    /// training thread makes no file-system call.
    logged: Mutex<Option<Logged>>,
}

/// A log interval, for the status file.
#[derive(Clone, Copy)]
struct Logged {
    /// The last iteration (`None` before the first).
    iteration: Option<u64>,
    /// The generation in force.
    generation: u64,
    at: Instant,
    /// Whether the job is stopping (its last status).
    ended: bool,
}

/// The control of one rank: nothing without a control file.
pub(crate) struct RankControl {
    state: Option<Box<State>>,
}

struct State {
    setup: ControlSetup,
    rank: u32,
    records_spans: bool,
    telemetry: Weak<Telemetry>,
    shared: Arc<Shared>,
    next_due: AtomicU64,
    /// The first iteration this process ran (`u64::MAX` before it): a
    /// window that started before it was applied late because the attempt
    /// began inside it, not because the rank read the file late.
    first_iteration: AtomicU64,
    hold_until: u64,
    schedule: Mutex<ControlSchedule>,
    gauge: Gauge<u64>,
    gauge_attributes: Vec<KeyValue>,
    /// Whether this rank writes the status file (global rank 0).
    writes_status: bool,
    /// The control thread, and what tells that it ended (its sender is
    /// dropped when it returns).
    watcher: Mutex<Option<(JoinHandle<()>, Receiver<()>)>>,
}

impl RankControl {
    /// No control file.
    pub(crate) const fn none() -> RankControl {
        RankControl { state: None }
    }

    /// The control of the rank at `coordinates` when `telemetry` has a
    /// control file (and records); `hold_until`: a test hook, the first
    /// iteration at which this rank takes what its thread read (0: at once).
    pub(crate) fn start(telemetry: &Arc<Telemetry>, coordinates: RankCoordinates, hold_until: u64) -> RankControl {
        let Some(setup) = telemetry.control().cloned() else { return RankControl::none() };
        if !telemetry.is_enabled() {
            return RankControl::none();
        }
        let shared = Arc::new(Shared {
            pending: Mutex::new(None),
            has_pending: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            last_iteration: AtomicU64::new(NO_ITERATION),
            logged: Mutex::new(None),
        });
        let gauge = telemetry
            .meter()
            .u64_gauge(CONTROL_GENERATION.name)
            .with_description(CONTROL_GENERATION.description)
            .build();
        let gauge_attributes = rank_attributes(coordinates);
        gauge.record(0, &gauge_attributes);
        let mut status = (coordinates.rank == 0).then(|| StatusWriter::new(&setup));
        // The catalog at startup, before the first iteration.
        if let Some(status) = &mut status {
            status.write(&Logged { iteration: None, generation: 0, at: Instant::now(), ended: false }, 0, None);
        }
        let writes_status = status.is_some();
        let mut watcher = Watcher::new(&setup, coordinates.rank, Arc::clone(&shared), status);
        // The first look happens here, so that a window still ahead of a
        // resumed attempt is known before its first iteration.
        watcher.poll();
        let poll = setup.poll;
        let (ended, ended_receiver) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("lens-control".to_string())
            .spawn(move || {
                let _ended = ended;
                watcher.run(poll);
            })
            .map_err(|error| warn(&format!("control: could not start the control thread: {error}")))
            .ok()
            .map(|thread| (thread, ended_receiver));
        let state = State {
            schedule: Mutex::new(ControlSchedule::new(setup.launch)),
            setup,
            rank: coordinates.rank,
            records_spans: telemetry.records_spans(),
            telemetry: Arc::downgrade(telemetry),
            shared,
            next_due: AtomicU64::new(0),
            first_iteration: AtomicU64::new(u64::MAX),
            hold_until,
            gauge,
            gauge_attributes,
            writes_status,
            watcher: Mutex::new(thread),
        };
        RankControl { state: Some(Box::new(state)) }
    }

    /// The iteration hook: what changes at the boundary of `iteration` (the
    /// counter [`crate::Training::iteration`] gets), already applied to the
    /// gate, the sampler, the gauge and the interval's span; the caller
    /// applies per-rank metrics and the watchdog. One relaxed load and a
    /// comparison when nothing is due.
    #[inline]
    pub(crate) fn before_iteration(&self, iteration: u64) -> Option<Change> {
        let state = self.state.as_deref()?;
        state.shared.last_iteration.store(iteration, Ordering::Relaxed);
        if iteration < state.next_due.load(Ordering::Relaxed) && !state.shared.has_pending.load(Ordering::Acquire) {
            return None;
        }
        state.due(iteration)
    }

    /// A log interval: global rank 0's control thread writes the status
    /// file at its next wake (at most one poll later, and at stop).
    pub(crate) fn log_interval(&self) {
        if let Some(state) = self.state.as_deref() {
            state.log(false);
        }
    }

    /// Stops the thread (idempotent), waiting for it at most
    /// [`STOP_WAIT`]: a thread that does not end by then is left behind
    /// with a warning. Global rank 0's thread writes the status a last
    /// time first, saying that the job ended: `lens control` then knows no
    /// running job reads the file.
    pub(crate) fn stop(&self) {
        let Some(state) = self.state.as_deref() else { return };
        state.log(true);
        *state.shared.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
        state.shared.wake.notify_all();
        if let Some((thread, ended)) = state.watcher.lock().unwrap_or_else(PoisonError::into_inner).take()
            && !join_within(thread, &ended, STOP_WAIT)
        {
            warn(&format!(
                "control: rank {}: the control thread did not stop within {} s (a read or write of {} or its status \
                 file may be blocked: a hung file system, a FIFO); the job goes on without it",
                state.rank,
                STOP_WAIT.as_secs_f64(),
                state.setup.file.display()
            ));
        }
    }
}

/// Joins `thread` if it ends within `bound` (`ended` disconnects when it
/// does); otherwise leaves it detached and says so (`false`).
fn join_within(thread: JoinHandle<()>, ended: &Receiver<()>, bound: Duration) -> bool {
    match ended.recv_timeout(bound) {
        Err(RecvTimeoutError::Timeout) => false,
        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
            let _ = thread.join();
            true
        }
    }
}

impl Drop for RankControl {
    fn drop(&mut self) {
        self.stop();
    }
}

impl State {
    /// Hands the status of now to the control thread (global rank 0),
    /// `ended` when the job stops.
    #[cold]
    fn log(&self, ended: bool) {
        if !self.writes_status {
            return;
        }
        let generation = self.schedule.lock().unwrap_or_else(PoisonError::into_inner).generation();
        let last = self.shared.last_iteration.load(Ordering::Relaxed);
        let iteration = (last != NO_ITERATION).then_some(last);
        *self.shared.logged.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Logged { iteration, generation, at: Instant::now(), ended });
    }

    #[cold]
    fn due(&self, iteration: u64) -> Option<Change> {
        // `next_due` starts at 0: the first iteration always comes here.
        self.first_iteration.fetch_min(iteration, Ordering::Relaxed);
        let mut schedule = self.schedule.lock().unwrap_or_else(PoisonError::into_inner);
        if iteration >= self.hold_until && self.shared.has_pending.swap(false, Ordering::AcqRel) {
            let taken = self.shared.pending.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(request) = taken {
                schedule.set_request(request);
            }
        }
        let change = schedule.at_iteration(iteration);
        self.next_due.store(schedule.next_due(iteration), Ordering::Relaxed);
        drop(schedule);
        let change = change?;
        self.apply(&change);
        Some(change)
    }

    fn apply(&self, change: &Change) {
        if change.before.groups != change.after.groups && self.records_spans {
            lens_fallbacks::groups::set_enabled_span_groups(change.after.groups);
        }
        if change.before.sampling_ratio != change.after.sampling_ratio
            && let Some(telemetry) = self.telemetry.upgrade()
        {
            telemetry.set_sampling_ratio(change.after.sampling_ratio);
        }
        self.gauge.record(change.generation, &self.gauge_attributes);
        let changed = change.before.changes_to(&change.after, self.setup.catalog);
        let changed_text = if changed.is_empty() { "nothing".to_string() } else { changed.join(" ") };
        lens_fallbacks::span::add_event_to_current(
            CONTROL_CHANGE_EVENT,
            [
                KeyValue::new(CONTROL_GENERATION_ATTRIBUTE, i64::try_from(change.generation).unwrap_or(i64::MAX)),
                KeyValue::new(CONTROL_CHANGED_ATTRIBUTE, changed_text.clone()),
                KeyValue::new(CONTROL_ITERATION_ATTRIBUTE, i64::try_from(change.iteration).unwrap_or(i64::MAX)),
                KeyValue::new(CONTROL_LATE_ATTRIBUTE, i64::try_from(change.late_by).unwrap_or(i64::MAX)),
            ],
        );
        let what = if change.window_end { "ends the window of" } else { "applies" };
        let late = if change.late_by > 0 {
            let start = change.iteration - change.late_by;
            let first = self.first_iteration.load(Ordering::Relaxed);
            // Applied late at the attempt's first iteration: the attempt
            // started inside the window.
            let why = if change.iteration == first {
                format!("this attempt began at iteration {first}, inside the window")
            } else {
                "this rank read the file late".to_string()
            };
            format!(", {} iteration(s) late (the window starts at iteration {start}; {why})", change.late_by)
        } else {
            String::new()
        };
        note(&format!(
            "control: rank {} {what} generation {} at iteration {}{late}: {changed_text}",
            self.rank, change.generation, change.iteration
        ));
    }
}

/// The watcher thread's state: what it saw and what it warned about.
struct Watcher {
    path: PathBuf,
    setup: ControlSetup,
    rank: u32,
    uid: u32,
    shared: Arc<Shared>,
    last_version: Option<[u64; 6]>,
    present: bool,
    /// The highest generation accepted, and that version.
    highest: u64,
    accepted: Option<ControlRequest>,
    /// The file went away after `accepted` was applied (the job went back to
    /// its launch configuration): the same version, put back, applies again.
    reverted: bool,
    warned: HashSet<u64>,
    /// Global rank 0's status file.
    status: Option<StatusWriter>,
}

impl Watcher {
    fn new(setup: &ControlSetup, rank: u32, shared: Arc<Shared>, status: Option<StatusWriter>) -> Watcher {
        Watcher {
            path: setup.file.clone(),
            setup: setup.clone(),
            rank,
            uid: job_uid(),
            shared,
            last_version: None,
            present: false,
            highest: 0,
            accepted: None,
            reverted: false,
            warned: HashSet::new(),
            status,
        }
    }

    /// Writes the status file when a log interval asked for it.
    fn write_status_if_due(&mut self) {
        let Some(status) = &mut self.status else { return };
        let logged = self.shared.logged.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(logged) = logged {
            status.write(&logged, self.highest, self.accepted.as_ref());
        }
    }

    fn run(mut self, poll: Duration) {
        loop {
            {
                let stop = self.shared.stop.lock().unwrap_or_else(PoisonError::into_inner);
                let (stop, _) = self
                    .shared
                    .wake
                    .wait_timeout_while(stop, poll, |stop| !*stop)
                    .unwrap_or_else(PoisonError::into_inner);
                if *stop {
                    drop(stop);
                    self.write_status_if_due();
                    return;
                }
            }
            self.write_status_if_due();
            self.poll();
        }
    }

    /// One look: a `stat`, and a read when the file changed.
    fn poll(&mut self) {
        // One `stat` when nothing changed; the full check (the directory
        // too) and the read only for a new version.
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && self.last_version == Some(file_version(&meta))
        {
            return;
        }
        match check_file(&self.path, self.uid) {
            Err(refusal) => {
                let version = std::fs::symlink_metadata(&self.path).ok().map(|m| file_version(&m));
                self.last_version = None;
                self.warn_once(
                    &(refusal.to_string(), version),
                    &format!(
                        "control file {}: refused, {refusal}; nothing changes ({})",
                        self.path.display(),
                        refusal.accepted()
                    ),
                );
            }
            Ok(None) => {
                self.last_version = None;
                if std::mem::replace(&mut self.present, false) {
                    note(&format!(
                        "control: rank {}: control file {} is gone: back to the launch configuration",
                        self.rank,
                        self.path.display()
                    ));
                    self.reverted = true;
                    self.hand(None);
                }
            }
            Ok(Some(meta)) => {
                self.present = true;
                let version = file_version(&meta);
                if self.last_version == Some(version) {
                    return;
                }
                self.last_version = Some(version);
                let text = match read_capped(&self.path) {
                    Ok(text) => text,
                    Err(error) => {
                        self.warn_once(
                            &(error.clone(), version),
                            &format!("control file {}: {error}; nothing changes", self.path.display()),
                        );
                        return;
                    }
                };
                let request = match parse_request(&text, self.setup.catalog, &self.setup.launch, &self.setup.prefix)
                    .and_then(|request| {
                        check_generation(&request, self.highest, self.accepted.as_ref()).map(|new| (request, new))
                    }) {
                    Err(error) => {
                        self.warn_once(
                            &text,
                            &format!("control file {}: {error}; nothing changes", self.path.display()),
                        );
                        return;
                    }
                    // The accepted version again: nothing to do, unless the
                    // file was removed since (back to the launch) and is back.
                    Ok((request, false)) if self.reverted => request,
                    Ok((_, false)) => return,
                    Ok((request, true)) => request,
                };
                let last = self.shared.last_iteration.load(Ordering::Relaxed);
                if last != NO_ITERATION
                    && request.ended_by(last)
                    && let Some(until) = request.until_iteration
                {
                    self.warn_once(
                        &text,
                        &format!(
                            "control file {}: generation {}'s window (iterations {} to {}) ended before this rank read \
                             it at iteration {last}: none of its settings apply; this rank moves to generation {} with \
                             the launch configuration, as every rank does after the window (write a window ahead of \
                             the job: lens control picks one)",
                            self.path.display(),
                            request.generation,
                            request.from_iteration,
                            until,
                            request.generation
                        ),
                    );
                }
                self.highest = request.generation;
                self.accepted = Some(request.clone());
                self.reverted = false;
                self.hand(Some(request));
            }
        }
    }

    fn hand(&self, request: Option<ControlRequest>) {
        *self.shared.pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(request);
        self.shared.has_pending.store(true, Ordering::Release);
    }

    fn warn_once(&mut self, version: &impl std::hash::Hash, message: &str) {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        version.hash(&mut hasher);
        message.hash(&mut hasher);
        if self.warned.insert(hasher.finish()) {
            warn(&format!("rank {}: {message}", self.rank));
        }
    }
}

/// Global rank 0's status file.
struct StatusWriter {
    path: PathBuf,
    catalog: CatalogData,
    launch_groups: Vec<String>,
    prefix: String,
    poll_s: f64,
    launch_rank_metrics: bool,
    last_log: Option<(Instant, u64)>,
    /// When the previous update was due (startup included).
    last_update: Option<Instant>,
    iteration_time_s: Option<f64>,
    warned: bool,
}

impl StatusWriter {
    fn new(setup: &ControlSetup) -> StatusWriter {
        StatusWriter {
            path: status_path(&setup.file),
            catalog: CatalogData::of(setup.catalog),
            launch_groups: setup.catalog.names(setup.launch.groups).into_iter().map(str::to_string).collect(),
            prefix: setup.prefix.clone(),
            poll_s: setup.poll.as_secs_f64(),
            launch_rank_metrics: setup.launch.rank_metrics,
            last_log: None,
            last_update: None,
            iteration_time_s: None,
            warned: false,
        }
    }

    /// Writes the file for a log interval, or the job's end, `logged` (the
    /// catalog alone at startup: no iteration yet); `highest`: the highest
    /// generation accepted, whose version is `accepted`.
    fn write(&mut self, logged: &Logged, highest: u64, accepted: Option<&ControlRequest>) {
        let Logged { iteration: last_iteration, generation, at: logged, ended } = *logged;
        if let Some(last) = last_iteration {
            if let Some((at, iteration)) = self.last_log
                && last > iteration
            {
                self.iteration_time_s = Some(logged.duration_since(at).as_secs_f64() / (last - iteration) as f64);
            }
            self.last_log = Some((logged, last));
        }
        let update_period_s = self.last_update.map(|at| logged.saturating_duration_since(at).as_secs_f64());
        self.last_update = Some(logged);
        // A directory other users can write: every control file there is
        // refused, and the job writes nothing there either.
        if let Err(refusal) = check_directory(&self.path) {
            if !std::mem::replace(&mut self.warned, true) {
                warn(&format!(
                    "control: the status file {} is not written, and a control file beside it is refused: {refusal}; \
                     {}",
                    self.path.display(),
                    refusal.accepted()
                ));
            }
            return;
        }
        let status = ControlStatus {
            catalog: self.catalog.clone(),
            launch_groups: self.launch_groups.clone(),
            prefix: self.prefix.clone(),
            poll_s: self.poll_s,
            last_iteration,
            iteration_time_s: self.iteration_time_s,
            generation,
            highest_generation: highest.max(generation),
            launch_rank_metrics: Some(self.launch_rank_metrics),
            update_period_s,
            written_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
            accepted: accepted.map(ControlRequest::to_json),
            ended,
        };
        if let Err(error) = write_atomic(&self.path, &status.to_json())
            && !std::mem::replace(&mut self.warned, true)
        {
            warn(&format!("control: could not write the status file {} (warned once): {error}", self.path.display()));
        }
    }
}

/// One warning line on standard error, in one write.
fn warn(message: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(format!("lens: warning: {message}\n").as_bytes());
}

/// One information line on standard error, in one write.
fn note(message: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(format!("lens: {message}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_control_thread_is_left_behind_within_the_bound() {
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (ended, ended_receiver) = std::sync::mpsc::channel::<()>();
        let stuck = std::thread::spawn(move || {
            let _ended = ended;
            // Stuck as in a read of a hung file system, until released.
            let _ = blocked.recv();
        });
        let started = Instant::now();
        assert!(!join_within(stuck, &ended_receiver, Duration::from_millis(100)), "not joined");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(5), "{waited:?}");
        drop(release);

        let (ended, ended_receiver) = std::sync::mpsc::channel::<()>();
        let done = std::thread::spawn(move || drop(ended));
        assert!(join_within(done, &ended_receiver, Duration::from_secs(5)), "a thread that ends is joined");
    }
}
