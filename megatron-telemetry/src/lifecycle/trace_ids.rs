//! Interval re-rooting: the derived ids of the structural traces (startup
//! and each `megatron.train` interval), alike on every rank, and when a loop
//! pass opens a new interval.

use std::sync::atomic::{AtomicBool, Ordering};

use md5::{Digest as _, Md5};

use super::configuration::ENV_PREFIX;
use crate::taxonomy;

/// The `first_iteration` that [`derived_trace_id`] reads as "the startup
/// trace" rather than an interval.
pub const STARTUP_TRACE: u64 = u64::MAX;

/// The trace id of a structural trace, alike on every rank: the 16 bytes of the MD5
/// digest of the UTF-8 text
/// `"megatron.train/{run}/{restart_attempt}/{lifetime}/{first_iteration}"`
/// for an interval, or `"megatron.startup/{run}/{restart_attempt}/{lifetime}"`
/// when `first_iteration` is [`STARTUP_TRACE`], where `{run}` is the run id,
/// followed by `@{launch_id}` when there is a launch id.
///
/// Every rank computes the same id for the same interval with no
/// communication, on every platform (Python:
/// `hashlib.md5(text.encode()).digest()`). The first iteration is the
/// absolute one, so a resumed run does not reuse an earlier trace; the
/// launch id ([`lens_fallbacks::identity::resolve_launch_id`]) keeps two launches
/// of one pinned run id apart, such as a hand resubmission that resumes at
/// the iteration where the crashed launch opened an interval; the restart
/// attempt and the lifetime index keep restarts and a second lifetime in one
/// process apart. An all-zero digest (invalid as a trace id) has its last
/// byte set to 1.
///
/// ```
/// use megatron_telemetry::lifecycle::{STARTUP_TRACE, derived_trace_id};
///
/// let a = derived_trace_id("run-1", None, 0, 1, 100);
/// assert_eq!(a, derived_trace_id("run-1", None, 0, 1, 100));
/// assert_ne!(a, derived_trace_id("run-1", None, 0, 1, 200)); // next interval
/// assert_ne!(a, derived_trace_id("run-1", None, 1, 1, 100)); // restart attempt
/// assert_ne!(a, derived_trace_id("run-1", None, 0, 2, 100)); // second lifetime
/// assert_ne!(a, derived_trace_id("run-1", None, 0, 1, STARTUP_TRACE));
/// // A resubmission of the pinned run id "run-1", resuming at iteration 100:
/// assert_ne!(derived_trace_id("run-1", Some("job-7"), 0, 1, 100), derived_trace_id("run-1", Some("job-8"), 0, 1, 100));
/// ```
pub fn derived_trace_id(
    run_id: &str,
    launch_id: Option<&str>,
    restart_attempt: u32,
    lifetime: u32,
    first_iteration: u64,
) -> [u8; 16] {
    let run = run_and_launch(run_id, launch_id);
    let text = if first_iteration == STARTUP_TRACE {
        format!("{}/{run}/{restart_attempt}/{lifetime}", taxonomy::STARTUP.name)
    } else {
        format!("{}/{run}/{restart_attempt}/{lifetime}/{first_iteration}", taxonomy::TRAIN.name)
    };
    trace_id_of(&text)
}

/// `{run_id}`, or `{run_id}@{launch_id}` with a launch id: the run part of
/// the texts that the structural trace ids are digests of.
pub(super) fn run_and_launch(run_id: &str, launch_id: Option<&str>) -> String {
    match launch_id {
        Some(launch) => format!("{run_id}@{launch}"),
        None => run_id.to_string(),
    }
}

/// The warning, once per process, when the run id is pinned and no launch id
/// exists (see [`derived_trace_id`]).
static WARNED_NO_LAUNCH_ID: AtomicBool = AtomicBool::new(false);

pub(super) fn warn_no_launch_id(run_id_variable: &str) {
    if !WARNED_NO_LAUNCH_ID.swap(true, Ordering::Relaxed) {
        lens_fallbacks::diag::warn(format_args!(
            "the run id is pinned ({run_id_variable}) and no launch id is set ({ENV_PREFIX}_LAUNCH_ID, SLURM_JOB_ID \
             or TORCHELASTIC_RUN_ID): a resubmission of this run that resumes from a checkpoint reuses this \
             launch's trace ids; have the launcher set {ENV_PREFIX}_LAUNCH_ID to a fresh id for every launch"
        ));
    }
}

pub(super) fn trace_id_of(text: &str) -> [u8; 16] {
    let mut id: [u8; 16] = Md5::digest(text.as_bytes()).into();
    if id == [0; 16] {
        id[15] = 1;
    }
    id
}

/// Whether the loop pass numbered `loop_counter` (0 for the first pass of
/// each training loop, independent of the iteration a resumed run starts
/// at) opens a new `megatron.train` interval.
///
/// With a save interval `n > 0`: every `n` passes, starting with the first.
/// Without one (`None` or 0): only the first pass, so the whole loop is one
/// interval (the original opened none).
///
/// ```
/// use megatron_telemetry::lifecycle::should_reroot;
///
/// assert!(should_reroot(0, Some(100)));
/// assert!(!should_reroot(99, Some(100)));
/// assert!(should_reroot(100, Some(100)));
/// assert!(should_reroot(0, None) && !should_reroot(1, None));
/// assert!(should_reroot(0, Some(0)) && !should_reroot(5, Some(0)));
/// ```
pub const fn should_reroot(loop_counter: u64, save_interval: Option<u64>) -> bool {
    match save_interval {
        Some(n) if n > 0 => loop_counter.is_multiple_of(n),
        _ => loop_counter == 0,
    }
}
