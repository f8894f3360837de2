//! The rank context: where this process sits in a distributed job, read from
//! the launcher's variables.
//!
//! Rank strategies, the resource (`dl.rank`, `dl.world_size`) and the
//! `service.instance.id` all start from a [`RankContext`]. The launchers in
//! use set different variables, so detection reads them in a fixed order
//! (torchrun's `RANK` / `WORLD_SIZE` / `LOCAL_RANK` before SLURM's):
//!
//! | Field | Read from, first set wins | Unset |
//! |---|---|---|
//! | `rank`, `world_size` | `RANK` and `WORLD_SIZE` (torchrun and friends), else `SLURM_PROCID` and `SLURM_NTASKS` | rank 0 of 1 |
//! | `local_rank` | `LOCAL_RANK`, else `SLURM_LOCALID` | 0 |
//! | `node_rank` | `GROUP_RANK` (torchrun), else `NODE_RANK`, else `SLURM_NODEID` | `None` |
//!
//! The rank and the world size always come from the same launcher: when
//! torchrun runs inside a SLURM allocation, `RANK`/`WORLD_SIZE` describe the
//! processes that torchrun started and SLURM's describe the `srun` tasks
//! around it, so mixing them would be wrong. If only one of the pair is set,
//! the other is inferred only where that is unambiguous (rank 0 means a
//! world size of 1, a world size of 1 means rank 0); otherwise detection
//! fails, naming both variables. An empty value counts as unset.

use crate::env::EnvSource;

/// Where this process sits in a distributed job.
///
/// ```
/// use lens_core::identity::RankContext;
///
/// let env = [("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1"), ("GROUP_RANK", "1")];
/// let ctx = RankContext::detect(&env).unwrap();
/// assert_eq!(ctx, RankContext { rank: 3, world_size: 8, local_rank: 1, node_rank: Some(1) });
///
/// let nothing: [(&str, &str); 0] = [];
/// assert_eq!(RankContext::detect(&nothing).unwrap(), RankContext::SINGLE);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankContext {
    /// Global rank, `0..world_size`.
    pub rank: u32,
    /// Number of ranks in the job.
    pub world_size: u32,
    /// Rank within this node (`LOCAL_RANK`, `SLURM_LOCALID`); 0 when unknown.
    pub local_rank: u32,
    /// Index of this node (`GROUP_RANK`, `NODE_RANK`, `SLURM_NODEID`), when known.
    pub node_rank: Option<u32>,
}

/// The variables one launcher uses for the rank and the world size.
struct RankPair {
    rank: &'static str,
    world_size: &'static str,
}

/// torchrun, `torch.distributed.launch`, DeepSpeed, Accelerate, ...
const TORCH: RankPair = RankPair { rank: "RANK", world_size: "WORLD_SIZE" };
/// `srun`.
const SLURM: RankPair = RankPair { rank: "SLURM_PROCID", world_size: "SLURM_NTASKS" };

/// The variables the local rank is read from, first set first.
pub const LOCAL_RANK_VARIABLES: [&str; 2] = ["LOCAL_RANK", "SLURM_LOCALID"];
const NODE_RANK_VARIABLES: [&str; 3] = ["GROUP_RANK", "NODE_RANK", "SLURM_NODEID"];

impl RankContext {
    /// A single-process job: rank 0 of 1.
    pub const SINGLE: RankContext = RankContext { rank: 0, world_size: 1, local_rank: 0, node_rank: None };

    /// Reads the rank context from the launcher's variables (see the
    /// [module documentation](self) for the order).
    ///
    /// Nothing set gives [`RankContext::SINGLE`]. A value that is not a
    /// non-negative integer, a world size of 0, a rank that is not below the
    /// world size, or half a rank/world-size pair that cannot be completed is
    /// an error naming the variables and values. Never panics.
    pub fn detect(env: &(impl EnvSource + ?Sized)) -> Result<RankContext, RankContextError> {
        let pair = [TORCH, SLURM]
            .into_iter()
            .find(|pair| env.non_empty(pair.rank).is_some() || env.non_empty(pair.world_size).is_some());
        let (rank, world_size) = match pair {
            None => (0, 1),
            Some(pair) => {
                let rank = read_u32(env, pair.rank)?;
                let world_size = read_u32(env, pair.world_size)?;
                complete_pair(&pair, rank, world_size)?
            }
        };
        let local_rank = first_u32(env, &LOCAL_RANK_VARIABLES)?;
        let node_rank = first_u32(env, &NODE_RANK_VARIABLES)?;
        if let Some((variable, local_rank)) = local_rank
            && local_rank >= world_size
        {
            return Err(RankContextError::LocalRankOutOfRange { variable, local_rank, world_size });
        }
        Ok(RankContext {
            rank,
            world_size,
            local_rank: local_rank.map_or(0, |(_, value)| value),
            node_rank: node_rank.map(|(_, value)| value),
        })
    }
}

/// Checks a rank/world-size pair and fills in the half that can be inferred.
fn complete_pair(pair: &RankPair, rank: Option<u32>, world_size: Option<u32>) -> Result<(u32, u32), RankContextError> {
    let (rank, world_size) = match (rank, world_size) {
        (Some(rank), Some(world_size)) => (rank, world_size),
        (Some(0), None) => (0, 1),
        (None, Some(1)) => (0, 1),
        (Some(rank), None) => {
            return Err(RankContextError::Incomplete { present: pair.rank, value: rank, missing: pair.world_size });
        }
        (None, Some(0)) => return Err(RankContextError::ZeroWorldSize { variable: pair.world_size }),
        (None, Some(world_size)) => {
            return Err(RankContextError::Incomplete {
                present: pair.world_size,
                value: world_size,
                missing: pair.rank,
            });
        }
        (None, None) => (0, 1),
    };
    if world_size == 0 {
        return Err(RankContextError::ZeroWorldSize { variable: pair.world_size });
    }
    if rank >= world_size {
        return Err(RankContextError::RankOutOfRange {
            rank_variable: pair.rank,
            rank,
            world_size_variable: pair.world_size,
            world_size,
        });
    }
    Ok((rank, world_size))
}

/// The first of `variables` that is set, with its parsed value.
fn first_u32(
    env: &(impl EnvSource + ?Sized),
    variables: &[&'static str],
) -> Result<Option<(&'static str, u32)>, RankContextError> {
    for &variable in variables {
        if let Some(value) = read_u32(env, variable)? {
            return Ok(Some((variable, value)));
        }
    }
    Ok(None)
}

/// `variable` as a `u32`; `None` when unset or empty.
fn read_u32(env: &(impl EnvSource + ?Sized), variable: &'static str) -> Result<Option<u32>, RankContextError> {
    match env.non_empty(variable) {
        None => Ok(None),
        Some(value) => match value.parse::<u32>() {
            Ok(parsed) if value.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(parsed)),
            _ => Err(RankContextError::NotAnInteger { variable, value }),
        },
    }
}

/// Why the rank context could not be read. Each message names the
/// variables, their values and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RankContextError {
    /// A rank variable holds something other than a non-negative integer.
    #[error("invalid value for {variable}: {value:?}; expected a non-negative integer (0 to 4294967295)")]
    NotAnInteger {
        /// The variable read.
        variable: &'static str,
        /// Its value, trimmed.
        value: String,
    },
    /// The world size is 0.
    #[error("invalid value for {variable}: \"0\"; the world size must be at least 1")]
    ZeroWorldSize {
        /// The variable read (`WORLD_SIZE` or `SLURM_NTASKS`).
        variable: &'static str,
    },
    /// The rank is not below the world size.
    #[error(
        "{rank_variable}={rank} is not below {world_size_variable}={world_size}; \
         a rank must be between 0 and the world size minus 1"
    )]
    RankOutOfRange {
        /// The rank variable read.
        rank_variable: &'static str,
        /// Its value.
        rank: u32,
        /// The world-size variable read.
        world_size_variable: &'static str,
        /// Its value.
        world_size: u32,
    },
    /// The local rank is not below the world size.
    #[error("{variable}={local_rank} is not below the world size {world_size}; a local rank must be below it")]
    LocalRankOutOfRange {
        /// The local-rank variable read.
        variable: &'static str,
        /// Its value.
        local_rank: u32,
        /// The detected world size.
        world_size: u32,
    },
    /// Only half of a rank/world-size pair is set, and the other half
    /// cannot be inferred.
    #[error(
        "{present}={value} is set but {missing} is not; set both \
         (or neither, for a single process of rank 0 of 1)"
    )]
    Incomplete {
        /// The variable that is set.
        present: &'static str,
        /// Its value.
        value: u32,
        /// The variable that is missing.
        missing: &'static str,
    },
}
