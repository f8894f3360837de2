//! The crash-safe spool (SPEC A23), as instrumented code sees it: the
//! progress record a training loop writes at every iteration, and what
//! setup's replay learned from the previous attempt's rank-0 spool.
//!
//! While telemetry is enabled every rank keeps a memory-mapped spool file
//! (`<PREFIX>_SPOOL`, `<PREFIX>_SPOOL_DIR`, `<PREFIX>_SPOOL_SIZE_KIB`; see
//! `docs/crashes.md`). A program that saves checkpoints passes their
//! directory to setup ([`SetupOptions::with_checkpoint_dir`](crate::setup::SetupOptions::with_checkpoint_dir)):
//! the spool then lives beside the checkpoints, in `<dir>/lens-spool/`.
//!
//! Every function exists in both builds; without `otel` (or without a
//! spool) [`record_progress`] does nothing, [`replayed_progress`] is `None`
//! and [`is_active`] is false.
//!
//! ```
//! use lens_fallbacks::spool;
//!
//! // Nothing is set up: no spool, nothing replayed.
//! spool::record_progress(17, Some(16), Some(10));
//! assert!(!spool::is_active());
//! assert!(spool::replayed_progress().is_none());
//! ```

use std::path::PathBuf;
use std::time::SystemTime;

/// What the previous attempt's rank-0 spool said when setup replayed it:
/// its last progress record and its writer's last-alive stamp.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayedProgress {
    /// The spool file that was replayed.
    pub file: PathBuf,
    /// The run id in that spool's header (it may differ from this run's).
    pub run_id: String,
    /// The last iteration reached (entered) by the dead attempt.
    pub reached: u64,
    /// The last iteration it completed, if any.
    pub completed: Option<u64>,
    /// The last iteration whose checkpoint was durable, if any.
    pub durable: Option<u64>,
    /// When that progress record was written.
    pub recorded_at: SystemTime,
    /// The dead writer's last-alive stamp (refreshed every second while it
    /// lived): the best estimate of its time of death.
    pub last_alive: SystemTime,
}

/// Writes this rank's progress record into its spool: the iteration
/// `reached` (entered), the last `completed` one and the last one whose
/// checkpoint is `durable`. Call it at every iteration boundary; it is a
/// few relaxed stores into the mapping (no syscall, no allocation), and
/// does nothing without a spool or without `otel`.
#[inline]
pub fn record_progress(reached: u64, completed: Option<u64>, durable: Option<u64>) {
    #[cfg(feature = "otel")]
    lens_otel_runtime::spool::record_progress(reached, completed, durable);
    #[cfg(not(feature = "otel"))]
    let _ = (reached, completed, durable);
}

/// The progress record of the previous attempt's rank-0 spool, when this
/// process's setup replayed one (rank 0 only, and only a spool whose writer
/// is dead and that was not consumed before); `None` otherwise, and always
/// without `otel`. When several dead rank-0 spools were replayed, the one
/// with the latest last-alive stamp. It stays readable until the next
/// setup's replay replaces it.
pub fn replayed_progress() -> Option<ReplayedProgress> {
    #[cfg(feature = "otel")]
    return lens_otel_runtime::spool::replayed_progress().map(|replayed| ReplayedProgress {
        file: replayed.file,
        run_id: replayed.run_id,
        reached: replayed.reached,
        completed: replayed.completed,
        durable: replayed.durable,
        recorded_at: replayed.recorded_at,
        last_alive: replayed.last_alive,
    });
    #[cfg(not(feature = "otel"))]
    return None;
}

/// Whether this process writes a spool now (telemetry set up and enabled,
/// `<PREFIX>_SPOOL` not `0`, the file mapped). When false, lost progress is
/// known only to a log interval.
pub fn is_active() -> bool {
    #[cfg(feature = "otel")]
    return lens_otel_runtime::spool::is_active();
    #[cfg(not(feature = "otel"))]
    return false;
}

/// What [`recover`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoverReport {
    /// The spool files replayed and removed.
    pub consumed: Vec<PathBuf>,
    /// Spans exported.
    pub spans: usize,
    /// Of those, spans open when their process died (ended truncated).
    pub truncated: usize,
    /// Ended spans the dead processes had dropped from their full spools.
    pub overflow: u64,
    /// Spools left alone because their writer is alive.
    pub alive: usize,
    /// Spools that could not be read, decoded or exported (each named in a
    /// warning), left in place.
    pub failed: usize,
    /// Warnings (damaged or foreign files, failed exports), also written on
    /// standard error.
    pub warnings: Vec<String>,
}

/// Replays every unconsumed spool in `dir` whose writer is dead, whatever
/// its rank and run id, through `telemetry`'s span exporter, each with its
/// dead process's resource (what `lens recover DIR` does for a run that is
/// never restarted). Call it on a fresh handle, before any span. Spools
/// whose spans cannot be exported stay, with a warning. Empty without
/// `otel`.
pub fn recover(telemetry: &crate::setup::Telemetry, dir: &std::path::Path) -> RecoverReport {
    #[cfg(feature = "otel")]
    {
        let summary = telemetry.pipeline.recover(dir);
        RecoverReport {
            consumed: summary.consumed,
            spans: summary.spans,
            truncated: summary.truncated,
            overflow: summary.overflow,
            alive: summary.alive,
            failed: summary.failed,
            warnings: summary.warnings,
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = (telemetry, dir);
        RecoverReport::default()
    }
}

/// This process's spool file, while it writes one.
pub fn path(telemetry: &crate::setup::Telemetry) -> Option<PathBuf> {
    #[cfg(feature = "otel")]
    return telemetry.pipeline.spool_path().map(std::path::Path::to_path_buf);
    #[cfg(not(feature = "otel"))]
    {
        let _ = telemetry;
        None
    }
}

/// The spool directory beside a program's checkpoints: `<checkpoints>/lens-spool`.
pub fn dir_beside_checkpoints(checkpoints: &std::path::Path) -> PathBuf {
    checkpoints.join(SPOOL_SUBDIRECTORY)
}

/// The name of the spool directory inside a checkpoint or file-export directory.
pub const SPOOL_SUBDIRECTORY: &str = "lens-spool";
