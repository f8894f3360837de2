//! Fault injection for the straggler tools (docs/ranks.md):
//! `--inject-straggler RANK:PHASE:MS` adds MS milliseconds to PHASE
//! (`data`, `forward`, `backward` or `optimizer`) on rank RANK in every
//! training iteration. The flag repeats; the delays of one rank and phase
//! add up. The rank is checked against the world size with the other
//! arguments (`Args::validate`).

use std::time::Duration;

use megatron_telemetry::phases::{COMPUTE_PHASES, Phase};

/// One `--inject-straggler` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Straggler {
    /// The slow rank.
    pub(crate) rank: u32,
    /// The compute phase that gets slower.
    pub(crate) phase: Phase,
    /// The delay per iteration.
    pub(crate) delay: Duration,
}

/// Parses `RANK:PHASE:MS` (clap's value parser of `--inject-straggler`).
pub(crate) fn parse_straggler(value: &str) -> Result<Straggler, String> {
    let accepted = COMPUTE_PHASES.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ");
    let parts: Vec<&str> = value.split(':').collect();
    let [rank, phase, ms] = parts.as_slice() else {
        return Err(format!("expected RANK:PHASE:MS (for example 2:forward:30), got {value:?}"));
    };
    let rank =
        rank.trim().parse::<u32>().map_err(|_| format!("RANK must be a rank number, got {rank:?} in {value:?}"))?;
    let phase = Phase::from_name(phase.trim())
        .filter(|p| p.is_compute())
        .ok_or_else(|| format!("PHASE must be one of {accepted}, got {phase:?} in {value:?}"))?;
    let ms = ms.trim().parse::<u64>().ok().filter(|ms| (1..=600_000).contains(ms)).ok_or_else(|| {
        format!("MS must be a whole number of milliseconds from 1 to 600000, got {ms:?} in {value:?}")
    })?;
    Ok(Straggler { rank, phase, delay: Duration::from_millis(ms) })
}

/// The problems of `stragglers` for a world of `world` ranks.
pub(crate) fn check_ranks(stragglers: &[Straggler], world: u32) -> Vec<String> {
    stragglers
        .iter()
        .filter(|s| s.rank >= world)
        .map(|s| {
            format!(
                "--inject-straggler {}:{}:{}: rank {} does not exist (the world has {world} ranks: 0 to {})",
                s.rank,
                s.phase,
                s.delay.as_millis(),
                s.rank,
                world.saturating_sub(1)
            )
        })
        .collect()
}

/// This rank's injected delays, per compute phase.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Delays {
    per_phase: [Duration; 4],
}

impl Delays {
    /// The delays of `rank` among `stragglers`.
    pub(crate) fn for_rank(stragglers: &[Straggler], rank: u32) -> Delays {
        let mut delays = Delays::default();
        for s in stragglers.iter().filter(|s| s.rank == rank) {
            if let Some(slot) = COMPUTE_PHASES.iter().position(|p| *p == s.phase) {
                delays.per_phase[slot] += s.delay;
            }
        }
        delays
    }

    /// Sleeps this rank's delay for `phase` (nothing for most ranks).
    pub(crate) fn apply(&self, phase: Phase) {
        if let Some(slot) = COMPUTE_PHASES.iter().position(|p| *p == phase)
            && !self.per_phase[slot].is_zero()
        {
            std::thread::sleep(self.per_phase[slot]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn straggler_values_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(
            parse_straggler("2:forward:30").unwrap(),
            Straggler { rank: 2, phase: Phase::Forward, delay: Duration::from_millis(30) }
        );
        let error = parse_straggler("2:dp_wait:30").unwrap_err();
        assert!(error.contains("PHASE must be one of data, forward, backward, optimizer"), "{error}");
        assert!(parse_straggler("x:forward:30").unwrap_err().contains("RANK must be a rank number"));
        assert!(parse_straggler("1:forward:0").unwrap_err().contains("MS must be"));
        assert!(parse_straggler("1:forward").unwrap_err().contains("expected RANK:PHASE:MS"));
        let stragglers = [parse_straggler("4:data:5").unwrap()];
        assert!(check_ranks(&stragglers, 4)[0].contains("rank 4 does not exist"));
        assert!(check_ranks(&stragglers, 5).is_empty());
    }

    #[test]
    fn repeated_flags_add_up_per_rank_and_phase() {
        let all = [
            parse_straggler("1:backward:10").unwrap(),
            parse_straggler("1:backward:5").unwrap(),
            parse_straggler("0:data:7").unwrap(),
        ];
        let delays = Delays::for_rank(&all, 1);
        assert_eq!(delays.per_phase[2], Duration::from_millis(15));
        assert_eq!(delays.per_phase[0], Duration::ZERO);
    }
}
