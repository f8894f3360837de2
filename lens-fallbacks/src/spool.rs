//! The crash-safe spool (SPEC A23), as instrumented code sees it: the
//! progress record a training loop writes at every iteration, and what
//! setup's replay learned from the previous attempt's spool of this rank.
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

pub use crate::report::{ReplayReport, ReplayedProgress};

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

/// The progress record of the previous attempt's spool of this rank (the
/// same rank number), when this process's setup replayed one (only a spool
/// whose writer is dead, whatever the outcome of its spans' export, and
/// whose record no earlier setup took); `None`
/// otherwise, and always without `otel`. When several dead spools of this
/// rank were replayed, the one with the latest last-alive stamp. Every rank
/// gets its own predecessor's (every rank charges goodput, and ranks move
/// through the iterations together). It stays readable until the next
/// setup's replay replaces it.
pub fn replayed_progress() -> Option<ReplayedProgress> {
    #[cfg(feature = "otel")]
    return lens_otel_runtime::spool::replayed_progress();
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

/// Replays every unconsumed spool in `dir` whose writer is dead, whatever
/// its rank and run id, through `telemetry`'s span exporter, each with its
/// dead process's resource (what `lens recover DIR` does for a run that is
/// never restarted). Call it on a fresh handle, before any span. Spools
/// whose spans cannot be exported stay, with a warning. Empty without
/// `otel`.
pub fn recover(telemetry: &crate::setup::Telemetry, dir: &std::path::Path) -> ReplayReport {
    #[cfg(feature = "otel")]
    return telemetry.pipeline.recover(dir);
    #[cfg(not(feature = "otel"))]
    {
        let _ = (telemetry, dir);
        ReplayReport::default()
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

/// Whether `path` names a spool file (`spool-rank<N>-<host>-<pid>-<tag>.lens`),
/// as the replay recognizes one. Without `otel` nothing writes or replays
/// spools: `false`.
pub fn is_spool_file(path: &std::path::Path) -> bool {
    #[cfg(feature = "otel")]
    return lens_otel_runtime::spool::replay::is_spool_file(path);
    #[cfg(not(feature = "otel"))]
    {
        let _ = path;
        false
    }
}

/// The name of the spool directory inside a checkpoint or file-export directory.
pub const SPOOL_SUBDIRECTORY: &str = "lens-spool";
