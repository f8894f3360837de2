//! The run id, the restart attempt and the `service.instance.id`.
//!
//! Every rank of one job must agree on the run id, because it names the job
//! in the resource (`nemo.run.id`, `service.instance.id`) and seeds the
//! deterministic trace ids that let the ranks' spans land in one trace
//! without any communication between ranks. [`resolve_run_id`] takes the
//! first of:
//!
//! 1. the configured id (`<PREFIX>_RUN_ID`, read by the configuration),
//! 2. `NEMO_LENS_RUN_ID`,
//! 3. `SLURM_JOB_ID`,
//! 4. `TORCHELASTIC_RUN_ID`, unless it is torchrun's default `none`,
//! 5. 12 random lowercase hex characters from the operating system's
//!    entropy, independent of any seeding the job does.
//!
//! Only the last one differs between ranks: [`RunIdSource::is_shared`] tells
//! setup when to warn that the ranks' telemetry will be filed as separate
//! runs.
//!
//! ```
//! use lens_core::identity::{resolve_run_id, RunIdSource};
//!
//! let env = [("SLURM_JOB_ID", "4242"), ("TORCHELASTIC_RUN_ID", "none")];
//! let id = resolve_run_id("", &env);
//! assert_eq!(id.value, "4242");
//! assert_eq!(id.source, RunIdSource::SlurmJobId);
//! assert_eq!(resolve_run_id("my-run", &env).value, "my-run");
//! ```

use std::fmt;

use std::time::{SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng, TryRngCore};

use crate::env::EnvSource;

/// A run id and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunId {
    /// The id, never empty.
    pub value: String,
    /// Where [`value`](RunId::value) came from.
    pub source: RunIdSource,
}

/// Where a run id came from, in priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunIdSource {
    /// The configuration's `run_id` (`<PREFIX>_RUN_ID`).
    Configured,
    /// `NEMO_LENS_RUN_ID`.
    NemoLensRunId,
    /// `SLURM_JOB_ID`.
    SlurmJobId,
    /// `TORCHELASTIC_RUN_ID`.
    TorchElasticRunId,
    /// Drawn at random in this process: other ranks drew their own.
    Random,
}

impl RunIdSource {
    /// Whether every rank of the job sees the same id: true for every
    /// source except [`Random`](RunIdSource::Random).
    pub const fn is_shared(self) -> bool {
        !matches!(self, RunIdSource::Random)
    }

    /// The environment variable the id was read from, where it is fixed
    /// (`None` for the configured id, whose name depends on the prefix, and
    /// for a random one).
    pub const fn variable(self) -> Option<&'static str> {
        match self {
            RunIdSource::NemoLensRunId => Some(NEMO_LENS_RUN_ID),
            RunIdSource::SlurmJobId => Some(SLURM_JOB_ID),
            RunIdSource::TorchElasticRunId => Some(TORCHELASTIC_RUN_ID),
            RunIdSource::Configured | RunIdSource::Random => None,
        }
    }
}

impl fmt::Display for RunIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.variable()) {
            (_, Some(variable)) => f.write_str(variable),
            (RunIdSource::Configured, None) => f.write_str("the configured run id (<PREFIX>_RUN_ID)"),
            (_, None) => f.write_str("a random id"),
        }
    }
}

const NEMO_LENS_RUN_ID: &str = "NEMO_LENS_RUN_ID";
const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
const TORCHELASTIC_RUN_ID: &str = "TORCHELASTIC_RUN_ID";

/// The run id: the first source that has one, in the order of the [module
/// documentation](self).
///
/// `configured` is the configuration's `run_id` (empty when unset). Values
/// are trimmed; an empty one counts as unset. Never fails.
pub fn resolve_run_id(configured: &str, env: &(impl EnvSource + ?Sized)) -> RunId {
    let configured = configured.trim();
    if !configured.is_empty() {
        return RunId { value: configured.to_string(), source: RunIdSource::Configured };
    }
    if let Some(value) = env.non_empty(NEMO_LENS_RUN_ID) {
        return RunId { value, source: RunIdSource::NemoLensRunId };
    }
    if let Some(value) = env.non_empty(SLURM_JOB_ID) {
        return RunId { value, source: RunIdSource::SlurmJobId };
    }
    if let Some(value) = env.non_empty(TORCHELASTIC_RUN_ID).filter(|v| !v.eq_ignore_ascii_case("none")) {
        return RunId { value, source: RunIdSource::TorchElasticRunId };
    }
    RunId { value: random_run_id(), source: RunIdSource::Random }
}

/// 12 random lowercase hex characters from the operating system's entropy
/// (from the clock and the pid if that fails), so a
/// job that seeds its own generators identically on every rank still gets
/// distinct ids.
///
/// ```
/// let id = lens_core::identity::random_run_id();
/// assert_eq!(id.len(), 12);
/// assert!(id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
/// ```
pub fn random_run_id() -> String {
    let mut bytes = [0_u8; 6];
    if rand::rngs::OsRng.try_fill_bytes(&mut bytes).is_err() {
        // No OS entropy (very rare): the clock and the pid still differ
        // between ranks, and no seeding by the job reaches them.
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let seed = (nanos as u64) ^ (u64::from(std::process::id()) << 32);
        StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The restart attempt of this incarnation of the job, one of the inputs of
/// the deterministic trace ids of the structural traces: `SLURM_RESTART_COUNT` (requeues) in
/// the high 16 bits and `TORCHELASTIC_RESTART_COUNT` (torchrun restarts) in
/// the low 16 bits, each saturating at 65535, so that two incarnations
/// with different counts never share an attempt. 0 when neither is set;
/// a value that is not a non-negative integer counts as 0.
///
/// ```
/// use lens_core::identity::restart_attempt;
///
/// assert_eq!(restart_attempt(&[("SLURM_RESTART_COUNT", "0")]), 0);
/// assert_eq!(restart_attempt(&[("TORCHELASTIC_RESTART_COUNT", "2")]), 2);
/// assert_eq!(restart_attempt(&[("SLURM_RESTART_COUNT", "1")]), 1 << 16);
/// ```
pub fn restart_attempt(env: &(impl EnvSource + ?Sized)) -> u32 {
    let count = |variable: &str| -> u32 {
        env.non_empty(variable).and_then(|v| v.parse::<u32>().ok()).map_or(0, |v| v.min(u32::from(u16::MAX)))
    };
    (count("SLURM_RESTART_COUNT") << 16) | count("TORCHELASTIC_RESTART_COUNT")
}

/// The `service.instance.id` of one rank: `{run_id}-rank{rank}`.
///
/// ```
/// assert_eq!(lens_core::identity::service_instance_id("4242", 7), "4242-rank7");
/// ```
pub fn service_instance_id(run_id: &str, rank: u32) -> String {
    format!("{run_id}-rank{rank}")
}
