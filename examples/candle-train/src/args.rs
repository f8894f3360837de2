//! The command line: the training schedule (iterations, evaluation and
//! checkpoint intervals), where checkpoints go, and the two test hooks (a
//! stop after an iteration, a deliberate stall), each checked with an error
//! that names the flag, the value and what is accepted.

use std::path::PathBuf;
use std::time::Duration;

/// The usage text, printed with `--help` and after a bad flag.
pub(crate) const USAGE: &str = "\
usage: lens-example-candle [--iterations N] [--eval-every N] [--checkpoint-every N]
                           [--checkpoint-dir DIR] [--stop-after N]
                           [--stall-at-iteration N --stall-s SECONDS] [--data-ms MS]
                           [--seed N]

Trains a small candle model on synthetic data. A checkpoint in DIR
(iter_NNNNNNN.safetensors, the newest named by
latest_checkpointed_iteration.txt) is resumed from: the run continues
after its iteration. --stop-after N stops the run after iteration N (a preemption).
--stall-at-iteration N --stall-s S sleeps S seconds in iteration N's data
phase (a stuck data loader, for the hang watchdog). --data-ms MS makes
every data phase last at least MS milliseconds (a slower data loader).
Defaults: --iterations 12 --eval-every 4 --checkpoint-every 4
--checkpoint-dir checkpoints --seed 42.";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Args {
    /// Iterations of the whole run (across a stop and a resume).
    pub(crate) iterations: u64,
    /// An evaluation after every this many iterations.
    pub(crate) eval_every: u64,
    /// A checkpoint after every this many iterations.
    pub(crate) checkpoint_every: u64,
    /// Where the checkpoint is written and resumed from.
    pub(crate) checkpoint_dir: PathBuf,
    /// Stop after this iteration (a preemption), if set.
    pub(crate) stop_after: Option<u64>,
    /// Stall in this iteration's data phase, if set.
    pub(crate) stall_at_iteration: Option<u64>,
    /// How long the stall lasts.
    pub(crate) stall: Duration,
    /// The least time a data phase takes.
    pub(crate) data_time: Duration,
    /// The seed of the model's initial weights.
    pub(crate) seed: u64,
    /// `--help` was given.
    pub(crate) help: bool,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            iterations: 12,
            eval_every: 4,
            checkpoint_every: 4,
            checkpoint_dir: PathBuf::from("checkpoints"),
            stop_after: None,
            stall_at_iteration: None,
            stall: Duration::ZERO,
            data_time: Duration::ZERO,
            seed: 42,
            help: false,
        }
    }
}

/// A command line the program cannot run with.
#[derive(Debug, PartialEq, thiserror::Error)]
pub(crate) enum ArgsError {
    /// A flag this program does not know.
    #[error("unknown argument `{0}`\n{USAGE}")]
    Unknown(String),
    /// A flag without its value.
    #[error("{0} needs a value\n{USAGE}")]
    MissingValue(&'static str),
    /// A value that is not what the flag accepts.
    #[error("{flag}: `{value}` is not {accepted}")]
    BadValue { flag: &'static str, value: String, accepted: &'static str },
    /// Flags that contradict each other.
    #[error("{0}")]
    Inconsistent(String),
}

fn whole(flag: &'static str, value: &str) -> Result<u64, ArgsError> {
    match value.parse::<u64>() {
        Ok(number) if number >= 1 => Ok(number),
        _ => Err(ArgsError::BadValue { flag, value: value.to_string(), accepted: "a whole number, 1 or more" }),
    }
}

fn seconds(flag: &'static str, value: &str) -> Result<Duration, ArgsError> {
    match value.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 3600.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(ArgsError::BadValue {
            flag,
            value: value.to_string(),
            accepted: "a number of seconds above 0 and at most 3600",
        }),
    }
}

fn millis(flag: &'static str, value: &str) -> Result<Duration, ArgsError> {
    match value.parse::<u64>() {
        Ok(ms) if (1..=60_000).contains(&ms) => Ok(Duration::from_millis(ms)),
        _ => Err(ArgsError::BadValue {
            flag,
            value: value.to_string(),
            accepted: "a whole number of milliseconds, 1 to 60000",
        }),
    }
}

impl Args {
    /// Parses the arguments after the program name.
    pub(crate) fn parse(arguments: impl IntoIterator<Item = String>) -> Result<Args, ArgsError> {
        let mut args = Args::default();
        let mut stall_s = None;
        let mut arguments = arguments.into_iter();
        while let Some(argument) = arguments.next() {
            let (name, inline) = match argument.split_once('=') {
                Some((name, value)) if name.starts_with("--") => (name.to_string(), Some(value.to_string())),
                _ => (argument.clone(), None),
            };
            let flag: &'static str = match name.as_str() {
                "--help" | "-h" => {
                    args.help = true;
                    continue;
                }
                "--iterations" => "--iterations",
                "--eval-every" => "--eval-every",
                "--checkpoint-every" => "--checkpoint-every",
                "--checkpoint-dir" => "--checkpoint-dir",
                "--stop-after" => "--stop-after",
                "--stall-at-iteration" => "--stall-at-iteration",
                "--stall-s" => "--stall-s",
                "--data-ms" => "--data-ms",
                "--seed" => "--seed",
                _ => return Err(ArgsError::Unknown(argument)),
            };
            let value = match inline.or_else(|| arguments.next()) {
                Some(value) => value,
                None => return Err(ArgsError::MissingValue(flag)),
            };
            match flag {
                "--iterations" => args.iterations = whole(flag, &value)?,
                "--eval-every" => args.eval_every = whole(flag, &value)?,
                "--checkpoint-every" => args.checkpoint_every = whole(flag, &value)?,
                "--checkpoint-dir" => args.checkpoint_dir = PathBuf::from(value),
                "--stop-after" => args.stop_after = Some(whole(flag, &value)?),
                "--stall-at-iteration" => args.stall_at_iteration = Some(whole(flag, &value)?),
                "--stall-s" => stall_s = Some(seconds(flag, &value)?),
                "--data-ms" => args.data_time = millis(flag, &value)?,
                _ => {
                    args.seed = value.parse().map_err(|_| ArgsError::BadValue {
                        flag,
                        value: value.clone(),
                        accepted: "a whole number",
                    })?
                }
            }
        }
        match (args.stall_at_iteration, stall_s) {
            (Some(_), Some(stall)) => args.stall = stall,
            (None, None) => {}
            (Some(_), None) => {
                return Err(ArgsError::Inconsistent("--stall-at-iteration needs --stall-s SECONDS".to_string()));
            }
            (None, Some(_)) => {
                return Err(ArgsError::Inconsistent("--stall-s needs --stall-at-iteration N".to_string()));
            }
        }
        if let Some(stop) = args.stop_after.filter(|stop| *stop > args.iterations) {
            return Err(ArgsError::Inconsistent(format!(
                "--stop-after {stop} is past the end of the run (--iterations {})",
                args.iterations
            )));
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Args, ArgsError> {
        Args::parse(line.split_whitespace().map(str::to_string))
    }

    #[test]
    fn flags_set_the_schedule() {
        let args =
            parse("--iterations 20 --eval-every=5 --stop-after 7 --stall-at-iteration 3 --stall-s 1.5 --data-ms 20")
                .unwrap();
        assert_eq!(args.data_time, Duration::from_millis(20));
        assert_eq!(args.iterations, 20);
        assert_eq!(args.eval_every, 5);
        assert_eq!(args.stop_after, Some(7));
        assert_eq!(args.stall_at_iteration, Some(3));
        assert_eq!(args.stall, Duration::from_millis(1500));
        assert_eq!(args.checkpoint_every, 4);
    }

    #[test]
    fn the_usage_states_the_defaults() {
        let defaults = Args::default();
        for (flag, value) in [
            ("--iterations", defaults.iterations.to_string()),
            ("--eval-every", defaults.eval_every.to_string()),
            ("--checkpoint-every", defaults.checkpoint_every.to_string()),
            ("--checkpoint-dir", defaults.checkpoint_dir.display().to_string()),
            ("--seed", defaults.seed.to_string()),
        ] {
            assert!(USAGE.contains(&format!("{flag} {value}")), "{flag} {value} in\n{USAGE}");
        }
    }

    #[test]
    fn bad_values_name_the_flag_the_value_and_what_is_accepted() {
        let error = parse("--iterations 0").unwrap_err().to_string();
        assert_eq!(error, "--iterations: `0` is not a whole number, 1 or more");
        let error = parse("--stall-at-iteration 2 --stall-s nan").unwrap_err().to_string();
        assert!(error.starts_with("--stall-s: `nan` is not a number of seconds"), "{error}");
        assert_eq!(
            parse("--data-ms 60001").unwrap_err().to_string(),
            "--data-ms: `60001` is not a whole number of milliseconds, 1 to 60000"
        );
        assert_eq!(parse("--stall-s 2").unwrap_err().to_string(), "--stall-s needs --stall-at-iteration N");
        assert!(parse("--frobnicate").unwrap_err().to_string().starts_with("unknown argument `--frobnicate`"));
        assert!(parse("--seed").unwrap_err().to_string().starts_with("--seed needs a value"));
        assert_eq!(
            parse("--iterations 4 --stop-after 5").unwrap_err().to_string(),
            "--stop-after 5 is past the end of the run (--iterations 4)"
        );
    }
}
