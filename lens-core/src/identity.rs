//! Who this process is: its rank context, the run id and the detected resource.

/// Where this process sits in a distributed job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankContext {
    /// Global rank, `0..world_size`.
    pub rank: u32,
    /// Number of ranks in the job.
    pub world_size: u32,
    /// Rank within this node (`LOCAL_RANK`, `SLURM_LOCALID`); 0 when unknown.
    pub local_rank: u32,
    /// Index of this node (`GROUP_RANK`, `SLURM_NODEID`), when known.
    pub node_rank: Option<u32>,
}

impl RankContext {
    /// A single-process job: rank 0 of 1.
    pub const SINGLE: RankContext = RankContext { rank: 0, world_size: 1, local_rank: 0, node_rank: None };
}
