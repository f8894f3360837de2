//! The launch id: one value per launch of the job, shared by every rank of
//! that launch, different for the next launch, so that two launches of one
//! pinned run id never share a trace id.
//!
//! The run id names the run across its attempts, and a user may pin it
//! (`MEGATRON_OTEL_RUN_ID`) so that a hand resubmission that resumes from a
//! checkpoint continues the same run. The derived trace ids must still
//! differ between those attempts, or the resumed run's first interval lands
//! in the crashed run's trace. The restart counts (`SLURM_RESTART_COUNT`,
//! `TORCHELASTIC_RESTART_COUNT`) tell requeues and elastic restarts apart,
//! but a resubmission by hand has neither; the launch id does.
//! [`resolve_launch_id`] takes the first of:
//!
//! 1. the configured id (`<PREFIX>_LAUNCH_ID`, read by the configuration),
//!    which a launcher sets to a fresh value for every launch (the
//!    simulator's launcher does);
//! 2. `SLURM_JOB_ID` (a resubmission is a new job; a requeue keeps the id
//!    but counts in `SLURM_RESTART_COUNT`);
//! 3. `TORCHELASTIC_RUN_ID`, unless it is torchrun's default `none`.
//!
//! Otherwise there is none. Wall clocks and files beside the checkpoint are
//! not candidates: clocks differ between ranks, and two attempts can resume
//! from one checkpoint.
//!
//! ```
//! use lens_core::identity::{LaunchIdSource, resolve_launch_id};
//!
//! let env = [("SLURM_JOB_ID", "4242"), ("TORCHELASTIC_RUN_ID", "none")];
//! let id = resolve_launch_id("", &env).unwrap();
//! assert_eq!((id.value.as_str(), id.source), ("4242", LaunchIdSource::SlurmJobId));
//! assert_eq!(resolve_launch_id("launch-7", &env).unwrap().value, "launch-7");
//! assert_eq!(resolve_launch_id("", &[("TORCHELASTIC_RUN_ID", "none")]), None);
//! ```

use std::fmt;

use crate::env::EnvSource;

/// A launch id and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchId {
    /// The id, never empty.
    pub value: String,
    /// Where [`value`](LaunchId::value) came from.
    pub source: LaunchIdSource,
}

/// Where a launch id came from, in priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchIdSource {
    /// The configuration's `launch_id` (`<PREFIX>_LAUNCH_ID`).
    Configured,
    /// `SLURM_JOB_ID`.
    SlurmJobId,
    /// `TORCHELASTIC_RUN_ID`.
    TorchElasticRunId,
}

impl fmt::Display for LaunchIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LaunchIdSource::Configured => "the configured launch id (<PREFIX>_LAUNCH_ID)",
            LaunchIdSource::SlurmJobId => SLURM_JOB_ID,
            LaunchIdSource::TorchElasticRunId => TORCHELASTIC_RUN_ID,
        })
    }
}

const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
const TORCHELASTIC_RUN_ID: &str = "TORCHELASTIC_RUN_ID";

/// The launch id by the priority of the [module documentation](self), or
/// `None` when no launcher provides one.
///
/// `configured` is the configuration's `launch_id` (empty when unset).
/// Values are trimmed; an empty one counts as unset. Never fails.
pub fn resolve_launch_id(configured: &str, env: &(impl EnvSource + ?Sized)) -> Option<LaunchId> {
    let configured = configured.trim();
    if !configured.is_empty() {
        return Some(LaunchId { value: configured.to_string(), source: LaunchIdSource::Configured });
    }
    if let Some(value) = env.non_empty(SLURM_JOB_ID) {
        return Some(LaunchId { value, source: LaunchIdSource::SlurmJobId });
    }
    env.non_empty(TORCHELASTIC_RUN_ID)
        .filter(|v| !v.eq_ignore_ascii_case("none"))
        .map(|value| LaunchId { value, source: LaunchIdSource::TorchElasticRunId })
}
