//! Fault injection for the straggler tools (docs/ranks.md):
//! `--inject-straggler RANK:PHASE:MS` adds MS milliseconds to PHASE
//! (`data`, `forward`, `backward` or `optimizer`) on rank RANK in every
//! training iteration. The flag repeats; the delays of one rank and phase
//! add up. The rank is checked against the world size with the other
//! arguments (`Args::validate`).
//!
//! `--inject-hang RANK:PHASE:ITERATION` makes rank RANK stop inside PHASE
//! (one of the same four) at ITERATION (1-based, as logged) until it is
//! killed: the hang watchdog's test (docs/ranks.md). The flag repeats.

use std::time::Duration;

use lens_training::phases::{COMPUTE_PHASES, Phase};

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

/// Splits `RANK:PHASE:<last>` into the rank, the compute phase and the last
/// field (`shape` names it, e.g. `RANK:PHASE:MS`; `example` is a valid value).
fn parse_rank_phase<'v>(value: &'v str, shape: &str, example: &str) -> Result<(u32, Phase, &'v str), String> {
    let accepted = COMPUTE_PHASES.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ");
    let parts: Vec<&str> = value.split(':').collect();
    let [rank, phase, last] = parts.as_slice() else {
        return Err(format!("expected {shape} (for example {example}), got {value:?}"));
    };
    let rank =
        rank.trim().parse::<u32>().map_err(|_| format!("RANK must be a rank number, got {rank:?} in {value:?}"))?;
    let phase = Phase::from_name(phase.trim())
        .filter(|p| p.is_compute())
        .ok_or_else(|| format!("PHASE must be one of {accepted}, got {phase:?} in {value:?}"))?;
    Ok((rank, phase, last))
}

/// Parses `RANK:PHASE:MS` (clap's value parser of `--inject-straggler`).
pub(crate) fn parse_straggler(value: &str) -> Result<Straggler, String> {
    let (rank, phase, ms) = parse_rank_phase(value, "RANK:PHASE:MS", "2:forward:30")?;
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
            missing_rank(&format!("--inject-straggler {}:{}:{}", s.rank, s.phase, s.delay.as_millis()), s.rank, world)
        })
        .collect()
}

fn missing_rank(flag: &str, rank: u32, world: u32) -> String {
    format!("{flag}: rank {rank} does not exist (the world has {world} ranks: 0 to {})", world.saturating_sub(1))
}

/// One `--inject-hang` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hang {
    /// The rank that stops.
    pub(crate) rank: u32,
    /// The compute phase it stops in.
    pub(crate) phase: Phase,
    /// The iteration (1-based) it stops at.
    pub(crate) iteration: u64,
}

/// Parses `RANK:PHASE:ITERATION` (clap's value parser of `--inject-hang`).
pub(crate) fn parse_hang(value: &str) -> Result<Hang, String> {
    let (rank, phase, iteration) = parse_rank_phase(value, "RANK:PHASE:ITERATION", "1:backward:5")?;
    let iteration = iteration.trim().parse::<u64>().ok().filter(|i| *i >= 1).ok_or_else(|| {
        format!(
            "ITERATION must be a whole number, 1 or more (the first iteration is 1), got {iteration:?} in {value:?}"
        )
    })?;
    Ok(Hang { rank, phase, iteration })
}

/// The problems of `hangs` for a world of `world` ranks and `train_iters`
/// iterations.
pub(crate) fn check_hangs(hangs: &[Hang], world: u32, train_iters: u64) -> Vec<String> {
    let mut problems = Vec::new();
    for h in hangs {
        let flag = format!("--inject-hang {}:{}:{}", h.rank, h.phase, h.iteration);
        if h.rank >= world {
            problems.push(missing_rank(&flag, h.rank, world));
        }
        if h.iteration > train_iters {
            problems
                .push(format!("{flag}: iteration {} is never reached (--train-iters is {train_iters})", h.iteration));
        }
    }
    problems
}

/// Stops forever when `hangs` has this rank in `phase` at `iteration`
/// (1-based): the process ends only when it is killed.
pub(crate) fn hang_if_injected(hangs: &[Hang], phase: Phase, iteration: u64) {
    if hangs.iter().any(|h| h.phase == phase && h.iteration == iteration) {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
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
    fn hang_values_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(parse_hang("1:backward:5").unwrap(), Hang { rank: 1, phase: Phase::Backward, iteration: 5 });
        let error = parse_hang("1:pp_wait:5").unwrap_err();
        assert!(error.contains("PHASE must be one of data, forward, backward, optimizer"), "{error}");
        assert!(parse_hang("1:forward:0").unwrap_err().contains("ITERATION must be a whole number, 1 or more"));
        assert!(parse_hang("1:forward").unwrap_err().contains("expected RANK:PHASE:ITERATION"));
        let hangs = [parse_hang("4:data:20").unwrap()];
        let problems = check_hangs(&hangs, 4, 10);
        assert!(problems[0].contains("--inject-hang 4:data:20: rank 4 does not exist"), "{problems:?}");
        assert!(problems[1].contains("iteration 20 is never reached (--train-iters is 10)"), "{problems:?}");
        assert!(check_hangs(&hangs, 5, 20).is_empty());
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
