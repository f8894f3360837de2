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
//!
//! `--inject-kill RANK:PHASE:ITERATION` makes rank RANK send itself
//! `SIGKILL` inside PHASE at ITERATION: no handler runs and nothing is
//! flushed, as when the OOM killer or a scheduler kills a process (the
//! spool's test, docs/crashes.md). The flag repeats: one value per rank kills
//! every rank at once. `--inject-crash-during-save ITERATION` kills every
//! rank the same way while the asynchronous save of ITERATION is in flight
//! (dispatched, not finalized: its checkpoint never becomes durable); it
//! needs `--async-save` and a save at ITERATION ([`check_crash_during_save`]).

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

/// A fault at one phase of one iteration of one rank: an `--inject-hang`
/// or `--inject-kill` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PhaseFault {
    /// The rank it strikes.
    pub(crate) rank: u32,
    /// The compute phase it strikes in.
    pub(crate) phase: Phase,
    /// The iteration (1-based) it strikes at.
    pub(crate) iteration: u64,
}

/// One `--inject-hang` value: the rank stops there until it is killed.
pub(crate) type Hang = PhaseFault;

/// One `--inject-kill` value: the rank sends itself `SIGKILL` there.
pub(crate) type Kill = PhaseFault;

/// The flag of `--inject-hang` values.
pub(crate) const HANG_FLAG: &str = "--inject-hang";
/// The flag of `--inject-kill` values.
pub(crate) const KILL_FLAG: &str = "--inject-kill";
/// The flag of the crash during an asynchronous save.
pub(crate) const CRASH_DURING_SAVE_FLAG: &str = "--inject-crash-during-save";

/// A 1-based iteration number (`value` is the whole flag value, for the error).
fn parse_iteration(iteration: &str, value: &str) -> Result<u64, String> {
    iteration.trim().parse::<u64>().ok().filter(|i| *i >= 1).ok_or_else(|| {
        format!(
            "ITERATION must be a whole number, 1 or more (the first iteration is 1), got {iteration:?} in {value:?}"
        )
    })
}

/// Parses `RANK:PHASE:ITERATION`.
fn parse_phase_fault(value: &str, example: &str) -> Result<PhaseFault, String> {
    let (rank, phase, iteration) = parse_rank_phase(value, "RANK:PHASE:ITERATION", example)?;
    Ok(PhaseFault { rank, phase, iteration: parse_iteration(iteration, value)? })
}

/// Parses `RANK:PHASE:ITERATION` (clap's value parser of `--inject-hang`).
pub(crate) fn parse_hang(value: &str) -> Result<Hang, String> {
    parse_phase_fault(value, "1:backward:5")
}

/// Parses `RANK:PHASE:ITERATION` (clap's value parser of `--inject-kill`).
pub(crate) fn parse_kill(value: &str) -> Result<Kill, String> {
    parse_phase_fault(value, "0:forward:18")
}

/// Parses `ITERATION` (clap's value parser of `--inject-crash-during-save`).
pub(crate) fn parse_save_iteration(value: &str) -> Result<u64, String> {
    parse_iteration(value, value)
}

/// The problems of the `flag` values `faults` for a world of `world` ranks
/// and `train_iters` iterations.
pub(crate) fn check_phase_faults(flag: &str, faults: &[PhaseFault], world: u32, train_iters: u64) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, f) in faults.iter().enumerate() {
        let value = |f: &PhaseFault| format!("{}:{}:{}", f.rank, f.phase, f.iteration);
        // One value per rank: a rank stops (or dies) once, at the first.
        if let Some(earlier) = faults[..index].iter().find(|e| e.rank == f.rank) {
            problems.push(format!(
                "{flag} {} and {flag} {}: rank {} is given twice; give one value per rank",
                value(earlier),
                value(f),
                f.rank
            ));
        }
        let flag = format!("{flag} {}", value(f));
        if f.rank >= world {
            problems.push(missing_rank(&flag, f.rank, world));
        }
        if f.iteration > train_iters {
            problems
                .push(format!("{flag}: iteration {} is never reached (--train-iters is {train_iters})", f.iteration));
        }
    }
    problems
}

/// What `--inject-crash-during-save ITERATION` needs from the other flags:
/// `--async-save` (a save in flight), `--save` and a save at ITERATION (a
/// multiple of `--save-interval`, or the last iteration, whose save ends
/// the run). The problems, each naming the flags and values.
pub(crate) fn check_crash_during_save(
    iteration: u64,
    async_save: bool,
    save: bool,
    save_interval: Option<u64>,
    train_iters: u64,
) -> Vec<String> {
    let flag = format!("{CRASH_DURING_SAVE_FLAG} {iteration}");
    let mut problems = Vec::new();
    if !async_save {
        problems.push(format!(
            "{flag} needs --async-save (the rank dies while an asynchronous save is in flight; a synchronous save \
             has nothing in flight)"
        ));
    }
    if !save {
        problems.push(format!("{flag} needs --save DIR (and a save at iteration {iteration})"));
    } else if iteration > train_iters {
        problems.push(format!("{flag}: iteration {iteration} is never reached (--train-iters is {train_iters})"));
    } else if iteration != train_iters
        && !save_interval.is_some_and(|every| every > 0 && iteration.is_multiple_of(every))
    {
        let interval = save_interval.map_or_else(|| "not given".to_string(), |every| every.to_string());
        problems.push(format!(
            "{flag}: there is no save at iteration {iteration} (saves come every --save-interval iterations, \
             {interval}, and at the last iteration, --train-iters {train_iters})"
        ));
    }
    problems
}

/// Kills this process with `SIGKILL` (no handler runs, nothing is
/// flushed), after one line on stderr saying why.
pub(crate) fn die(rank: u32, why: &str) -> ! {
    crate::output::note(&format!("rank {rank}: {why}: SIGKILL"));
    #[cfg(unix)]
    // SAFETY: `raise` has no memory-safety preconditions.
    unsafe {
        libc::raise(libc::SIGKILL);
    }
    std::process::abort()
}

/// Kills this rank ([`die`]) when `kills` (this rank's) has `phase` at
/// `iteration` (1-based).
pub(crate) fn kill_if_injected(kills: &[Kill], rank: u32, phase: Phase, iteration: u64) {
    if let Some(k) = kills.iter().find(|k| k.phase == phase && k.iteration == iteration) {
        die(rank, &format!("{KILL_FLAG} {}:{}:{}", k.rank, k.phase, k.iteration));
    }
}

/// Stops forever when `hangs` (this rank's) has `phase` at `iteration`
/// (1-based), after one line on stderr saying so: the process ends only
/// when it is killed.
pub(crate) fn hang_if_injected(hangs: &[Hang], rank: u32, phase: Phase, iteration: u64) {
    if let Some(h) = hangs.iter().find(|h| h.phase == phase && h.iteration == iteration) {
        crate::output::note(&format!(
            "rank {rank}: {HANG_FLAG} {}:{}:{}: stopped until killed",
            h.rank, h.phase, h.iteration
        ));
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
        let problems = check_phase_faults(HANG_FLAG, &hangs, 4, 10);
        assert!(problems[0].contains("--inject-hang 4:data:20: rank 4 does not exist"), "{problems:?}");
        assert!(problems[1].contains("iteration 20 is never reached (--train-iters is 10)"), "{problems:?}");
        assert!(check_phase_faults(HANG_FLAG, &hangs, 5, 20).is_empty());
    }

    #[test]
    fn kill_values_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(parse_kill("0:forward:18").unwrap(), Kill { rank: 0, phase: Phase::Forward, iteration: 18 });
        assert_eq!(parse_kill(" 1 : optimizer : 3 ").unwrap(), Kill { rank: 1, phase: Phase::Optimizer, iteration: 3 });
        let error = parse_kill("0:checkpoint:18").unwrap_err();
        assert!(
            error.contains("PHASE must be one of data, forward, backward, optimizer, got \"checkpoint\""),
            "{error}"
        );
        let error = parse_kill("0:forward:0").unwrap_err();
        assert!(error.contains("ITERATION must be a whole number, 1 or more"), "{error}");
        assert!(parse_kill("-1:forward:3").unwrap_err().contains("RANK must be a rank number"));
        let error = parse_kill("0:forward").unwrap_err();
        assert!(error.contains("expected RANK:PHASE:ITERATION (for example 0:forward:18)"), "{error}");
        let kills = [parse_kill("2:backward:9").unwrap()];
        let problems = check_phase_faults(KILL_FLAG, &kills, 2, 8);
        assert_eq!(
            problems,
            [
                "--inject-kill 2:backward:9: rank 2 does not exist (the world has 2 ranks: 0 to 1)",
                "--inject-kill 2:backward:9: iteration 9 is never reached (--train-iters is 8)",
            ]
        );
        assert!(check_phase_faults(KILL_FLAG, &kills, 3, 9).is_empty());
    }

    #[test]
    fn a_crash_during_a_save_needs_an_async_save_at_that_iteration() {
        assert_eq!(parse_save_iteration("20"), Ok(20));
        assert!(parse_save_iteration("0").unwrap_err().contains("ITERATION must be a whole number, 1 or more"));
        assert!(parse_save_iteration("twenty").unwrap_err().contains("got \"twenty\""));
        // A save every 10 of 40 iterations, asynchronous: 20 and 40 have one.
        assert!(check_crash_during_save(20, true, true, Some(10), 40).is_empty());
        assert!(check_crash_during_save(40, true, true, Some(10), 40).is_empty());
        // The last iteration always saves (with --save), interval or not.
        assert!(check_crash_during_save(7, true, true, None, 7).is_empty());
        let problems = check_crash_during_save(20, false, true, Some(10), 40);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("--inject-crash-during-save 20 needs --async-save"), "{problems:?}");
        let problems = check_crash_during_save(15, true, true, Some(10), 40);
        assert_eq!(
            problems,
            ["--inject-crash-during-save 15: there is no save at iteration 15 (saves come every --save-interval \
              iterations, 10, and at the last iteration, --train-iters 40)"]
        );
        let problems = check_crash_during_save(15, true, true, None, 40);
        assert!(problems[0].contains("every --save-interval iterations, not given"), "{problems:?}");
        let problems = check_crash_during_save(50, true, true, Some(10), 40);
        assert!(problems[0].contains("iteration 50 is never reached (--train-iters is 40)"), "{problems:?}");
        let problems = check_crash_during_save(20, false, false, None, 40);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[1].contains("needs --save DIR"), "{problems:?}");
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
