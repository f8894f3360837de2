//! The startup timestamps: the moments of the startup, captured before
//! telemetry is set up, read from the launcher's variables and turned into
//! backdated spans of the startup trace.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lens_fallbacks::env::EnvSource;

use crate::taxonomy::{self, SpanDef};

/// Launch-script start, in seconds since the epoch (a float, as Python's
/// `time.time()` prints it).
pub const LAUNCH_SCRIPT_START_ENV: &str = "LENS_LAUNCH_SCRIPT_START_TIME";
/// Launch-script time just before `srun`, in seconds since the epoch.
pub const LAUNCH_SCRIPT_PRESRUN_ENV: &str = "LENS_LAUNCH_SCRIPT_PRESRUN_TIME";
/// The SLURM job's start, in seconds since the epoch (set by SLURM).
pub const SLURM_JOB_START_ENV: &str = "SLURM_JOB_START_TIME";

/// Moments of the startup, captured as early as possible (before telemetry
/// is set up) and turned into backdated spans of the startup trace. Missing stamps
/// skip the spans that need them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartupTimestamps {
    /// The SLURM job's start (`SLURM_JOB_START_TIME`).
    pub slurm_job_start: Option<SystemTime>,
    /// The launch script's start (`LENS_LAUNCH_SCRIPT_START_TIME`).
    pub launch_script_start: Option<SystemTime>,
    /// The launch script, just before `srun` (`LENS_LAUNCH_SCRIPT_PRESRUN_TIME`).
    pub launch_script_presrun: Option<SystemTime>,
    /// The program's first line.
    pub program_start: Option<SystemTime>,
    /// `main` entered (imports done).
    pub main_entry: Option<SystemTime>,
    /// `pretrain` entered (arguments parsed).
    pub pretrain_entry: Option<SystemTime>,
    /// In-process restart setup done.
    pub after_inprocess: Option<SystemTime>,
    /// Fault-tolerance setup done.
    pub after_ft_setup: Option<SystemTime>,
    /// Distributed initialisation done.
    pub after_initialize_megatron: Option<SystemTime>,
    /// JIT fusion options set.
    pub after_jit_fusion: Option<SystemTime>,
}

/// The backdated startup phases, in order: the span, its start, its end,
/// and whether it exists only when the launch phases fold.
type Phase = (&'static SpanDef, Option<SystemTime>, Option<SystemTime>, bool);

impl StartupTimestamps {
    /// Fills the three launcher stamps that are still `None` from `env`
    /// ([`LAUNCH_SCRIPT_START_ENV`], [`LAUNCH_SCRIPT_PRESRUN_ENV`],
    /// [`SLURM_JOB_START_ENV`]: seconds since the epoch, integer or
    /// fractional). A value that is not a finite, non-negative number is
    /// ignored; all such values are named in one warning.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use megatron_telemetry::lifecycle::StartupTimestamps;
    ///
    /// let env = [("LENS_LAUNCH_SCRIPT_START_TIME", "1700000000.5"), ("SLURM_JOB_START_TIME", "soon")];
    /// let stamps = StartupTimestamps::default().with_env(&env);
    /// assert_eq!(stamps.launch_script_start, Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_500)));
    /// assert_eq!(stamps.slurm_job_start, None); // ignored, with a warning
    /// ```
    #[must_use]
    pub fn with_env(mut self, env: &(impl EnvSource + ?Sized)) -> StartupTimestamps {
        let mut bad = Vec::new();
        let mut read = |slot: &mut Option<SystemTime>, variable: &'static str| {
            if slot.is_some() {
                return;
            }
            if let Some(value) = env.non_empty(variable) {
                match parse_epoch_seconds(&value) {
                    Some(time) => *slot = Some(time),
                    None => bad.push(format!("{variable}={value:?}")),
                }
            }
        };
        read(&mut self.launch_script_start, LAUNCH_SCRIPT_START_ENV);
        read(&mut self.launch_script_presrun, LAUNCH_SCRIPT_PRESRUN_ENV);
        read(&mut self.slurm_job_start, SLURM_JOB_START_ENV);
        if !bad.is_empty() {
            lens_fallbacks::diag::warn(format_args!(
                "ignoring startup timestamps that are not seconds since the epoch: {}",
                bad.join(", ")
            ));
        }
        self
    }

    /// Whether the launch phases fold into the startup trace: launch-script
    /// start ≤ pre-srun ≤ program start, all known. The startup span then
    /// starts at the launch-script start, else at the program start.
    pub fn launch_folds(&self) -> bool {
        matches!(
            (self.launch_script_start, self.launch_script_presrun, self.program_start),
            (Some(a), Some(b), Some(c)) if a <= b && b <= c
        )
    }

    pub(super) fn phases(&self) -> [Phase; 8] {
        [
            (&taxonomy::STARTUP_LAUNCH_SCRIPT, self.launch_script_start, self.launch_script_presrun, true),
            (&taxonomy::STARTUP_CONTAINER_LOAD, self.launch_script_presrun, self.program_start, true),
            (&taxonomy::STARTUP_IMPORTS, self.program_start, self.main_entry, false),
            (&taxonomy::STARTUP_ARG_PARSE, self.main_entry, self.pretrain_entry, false),
            (&taxonomy::STARTUP_INPROCESS_SETUP, self.pretrain_entry, self.after_inprocess, false),
            (&taxonomy::STARTUP_IN_JOB_SETUP, self.after_inprocess, self.after_ft_setup, false),
            (&taxonomy::STARTUP_INITIALIZE_MEGATRON, self.after_ft_setup, self.after_initialize_megatron, false),
            (&taxonomy::STARTUP_JIT_FUSION_OPTIONS, self.after_initialize_megatron, self.after_jit_fusion, false),
        ]
    }
}

fn parse_epoch_seconds(value: &str) -> Option<SystemTime> {
    let seconds: f64 = value.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    let duration = Duration::try_from_secs_f64(seconds).ok()?;
    UNIX_EPOCH.checked_add(duration)
}

pub(super) fn merge(mut known: StartupTimestamps, new: &StartupTimestamps) -> StartupTimestamps {
    let pairs = [
        (&mut known.slurm_job_start, new.slurm_job_start),
        (&mut known.launch_script_start, new.launch_script_start),
        (&mut known.launch_script_presrun, new.launch_script_presrun),
        (&mut known.program_start, new.program_start),
        (&mut known.main_entry, new.main_entry),
        (&mut known.pretrain_entry, new.pretrain_entry),
        (&mut known.after_inprocess, new.after_inprocess),
        (&mut known.after_ft_setup, new.after_ft_setup),
        (&mut known.after_initialize_megatron, new.after_initialize_megatron),
        (&mut known.after_jit_fusion, new.after_jit_fusion),
    ];
    for (slot, value) in pairs {
        if slot.is_none() {
            *slot = value;
        }
    }
    known
}
