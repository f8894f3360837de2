//! The simulator's configuration types: what the command line ([`crate::cli`])
//! parses into and the training loop, the model, the device and the
//! checkpoints read. Data only: no flag parsing, no dependency on another
//! module of the simulator.

use clap::ValueEnum;

/// The learning-rate decay after the warm-up (Megatron's `--lr-decay-style`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum DecayStyle {
    /// Stay at --lr.
    Constant,
    /// Straight line from --lr to --min-lr.
    Linear,
    /// Half a cosine from --lr to --min-lr.
    Cosine,
}

/// The optimizer (Megatron's `--optimizer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OptimizerKind {
    /// Adam (beta1 0.9, beta2 0.999, eps 1e-8), no weight decay.
    Adam,
    /// Plain stochastic gradient descent.
    Sgd,
}

/// Where the matrix products run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum DeviceChoice {
    /// The CPU.
    Cpu,
    /// An NVIDIA GPU (needs the `cuda` cargo feature).
    Cuda,
    /// A GPU when one is usable, else the CPU.
    Auto,
}

/// The parallel layout: world = TP × PP × DP.
///
/// Ranks are numbered as Megatron numbers them with its default order
/// `tp-cp-ep-dp-pp` (context and expert parallelism are 1 here): the
/// tensor-parallel rank varies fastest, then the data-parallel rank, then the
/// pipeline stage: `rank = tp + TP·dp + TP·DP·pp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Tensor-parallel size.
    pub(crate) tp: u32,
    /// Pipeline-parallel size.
    pub(crate) pp: u32,
    /// Data-parallel size.
    pub(crate) dp: u32,
}

/// One rank's coordinates in a [`Layout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Coords {
    /// Tensor-parallel rank.
    pub(crate) tp: u32,
    /// Data-parallel rank.
    pub(crate) dp: u32,
    /// Pipeline stage.
    pub(crate) pp: u32,
}

impl Layout {
    /// The number of ranks.
    pub(crate) fn world(self) -> u32 {
        self.tp * self.pp * self.dp
    }

    /// The coordinates of `rank`.
    pub(crate) fn coords(self, rank: u32) -> Coords {
        Coords { tp: rank % self.tp, dp: (rank / self.tp) % self.dp, pp: rank / (self.tp * self.dp) }
    }

    /// The rank at `coords`.
    pub(crate) fn rank(self, coords: Coords) -> u32 {
        coords.tp + self.tp * coords.dp + self.tp * self.dp * coords.pp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatron_rank_order_puts_tensor_parallel_fastest_then_data_then_pipeline() {
        let layout = Layout { tp: 2, pp: 2, dp: 2 };
        assert_eq!(layout.coords(1), Coords { tp: 1, dp: 0, pp: 0 });
        assert_eq!(layout.coords(2), Coords { tp: 0, dp: 1, pp: 0 });
        assert_eq!(layout.coords(4), Coords { tp: 0, dp: 0, pp: 1 });
        for rank in 0..8 {
            assert_eq!(layout.rank(layout.coords(rank)), rank);
        }
    }
}
