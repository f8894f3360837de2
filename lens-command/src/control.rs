//! `lens control FILE ...`: writes a running job's control file
//! (`<PREFIX>_CONTROL_FILE`, SPEC A24), so that every rank changes its span
//! groups, sampling ratio, per-rank metrics or hang timeout at the same
//! iteration, and shows what it holds (`--show`) or goes back to the launch
//! configuration (`--reset`).
//!
//! It checks a span-group spec against the catalog the job wrote beside the
//! file (`FILE.status`; without one, `--catalog lens|megatron`), with the
//! same "did you mean" error as at launch (exit 2, the file left as it
//! was). Without `--from-iteration` it starts the window at the job's last
//! iteration plus a margin of two polls, read from the status file, and
//! refuses when it cannot read it. It writes the next generation
//! atomically (a temporary file, then a rename) under a lock
//! (`FILE.lock`, `flock`), so that two concurrent calls cannot collide.
//! It refuses (exit 2, the file left as it was) to write where the job
//! would refuse to read: in a directory other users can write, by the job's
//! own check (`check_file`), with the job's reason.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use lens_fallbacks::config::HangTimeout;
use lens_fallbacks::control::{
    CatalogData, ControlRequest, ControlStatus, check_file, describe, job_uid, keys, read_capped, status_path,
    write_atomic,
};
use lens_fallbacks::groups::{GroupSet, LENS_CATALOG, SpanGroup};

/// The catalog to check a spec against when the job wrote no status file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CatalogChoice {
    /// Lens's base groups and presets.
    Lens,
    /// Megatron's (the simulator's).
    Megatron,
}

/// `lens control`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ControlArgs {
    /// The job's control file (its `<PREFIX>_CONTROL_FILE`).
    pub file: PathBuf,
    /// The span groups during the window: a span-group spec (group names and presets).
    #[arg(long, value_name = "SPEC")]
    pub span_groups: Option<String>,
    /// The window's first iteration (default: the job's last iteration plus two polls).
    #[arg(long, value_name = "N")]
    pub from_iteration: Option<u64>,
    /// How many iterations the window lasts (default: until the next change).
    #[arg(long, value_name = "N", conflicts_with = "until_iteration")]
    pub iterations: Option<u64>,
    /// The window's last iteration, inclusive.
    #[arg(long, value_name = "N")]
    pub until_iteration: Option<u64>,
    /// The per-iteration trace sampling ratio during the window, in [0, 1].
    #[arg(long, value_name = "R")]
    pub sampling_ratio: Option<f64>,
    /// Pause (off) or resume (on) the per-rank metrics during the window.
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub rank_metrics: Option<String>,
    /// The hang watchdog's timeout during the window: seconds, 0 (off) or auto.
    #[arg(long = "hang-timeout", value_name = "SECONDS")]
    pub hang_timeout: Option<String>,
    /// The catalog to check --span-groups against when the job wrote no status file.
    #[arg(long, value_enum, default_value_t = CatalogChoice::Lens)]
    pub catalog: CatalogChoice,
    /// Go back to the launch configuration (a new generation with no change).
    #[arg(long, conflicts_with_all = ["span_groups", "from_iteration", "iterations", "until_iteration",
        "sampling_ratio", "rank_metrics", "hang_timeout", "show"])]
    pub reset: bool,
    /// Print what the file asks for and what the job last reported.
    #[arg(long, conflicts_with_all = ["span_groups", "from_iteration", "iterations", "until_iteration",
        "sampling_ratio", "rank_metrics", "hang_timeout"])]
    pub show: bool,
}

/// One line on standard output, in one write.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Exit status of bad input (the file is left as it was).
const BAD_INPUT: u8 = 2;

/// Runs `lens control`.
pub fn run(args: &ControlArgs) -> ExitCode {
    if args.show {
        return show(args);
    }
    match write(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::BadInput(message)) => {
            crate::error(&message);
            ExitCode::from(BAD_INPUT)
        }
        Err(Failure::Io(message)) => {
            crate::error(&message);
            ExitCode::FAILURE
        }
    }
}

enum Failure {
    BadInput(String),
    Io(String),
}

fn now_unix_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn read_status(file: &Path) -> Option<ControlStatus> {
    ControlStatus::from_json(&std::fs::read_to_string(status_path(file)).ok()?)
}

/// The generation the file holds now (0: no file, or none readable).
fn current_generation(file: &Path) -> u64 {
    read_capped(file)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|value| value.get(keys::GENERATION).and_then(serde_json::Value::as_u64))
        .unwrap_or(0)
}

fn write(args: &ControlArgs) -> Result<(), Failure> {
    let status = read_status(&args.file);
    let catalog = match &status {
        Some(status) => status.catalog.clone(),
        None => match args.catalog {
            CatalogChoice::Lens => CatalogData::of(&LENS_CATALOG),
            CatalogChoice::Megatron => CatalogData::of(&megatron_telemetry::groups::MEGATRON_CATALOG),
        },
    };
    check_where_written(&args.file)?;
    let mut request = ControlRequest::reset(0);
    if !args.reset {
        request = build(args, status.as_ref(), &catalog)?;
    }
    let _lock = Lock::take(&args.file).map_err(Failure::Io)?;
    let generation = current_generation(&args.file).max(status.as_ref().map_or(0, |s| s.generation)) + 1;
    request.generation = generation;
    write_atomic(&args.file, &request.to_json())
        .map_err(|error| Failure::Io(format!("could not write {}: {error}", args.file.display())))?;
    if args.reset {
        say(format_args!("wrote generation {generation} to {}: back to the launch configuration", args.file.display()));
    } else {
        let what: Vec<String> = describe(&request).into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        say(format_args!("wrote generation {generation} to {}: {}", args.file.display(), what.join(" ")));
    }
    Ok(())
}

/// The request the flags ask for (generation filled in later).
fn build(args: &ControlArgs, status: Option<&ControlStatus>, catalog: &CatalogData) -> Result<ControlRequest, Failure> {
    let bad = |message: String| Failure::BadInput(format!("{message}; {} left as it was", args.file.display()));
    let mut request = ControlRequest::reset(0);
    if let Some(spec) = &args.span_groups {
        let set = catalog.resolve(spec).map_err(|error| bad(format!("--span-groups {spec:?}: {error}")))?;
        if let Some(status) = status {
            let launch_job = status.launch_groups.iter().any(|g| g == SpanGroup::JOB.name());
            if launch_job != set.contains(SpanGroup::JOB) {
                let state = if launch_job { "on" } else { "off" };
                return Err(bad(format!(
                    "--span-groups {spec:?}: the 'job' group (the intervals) cannot change while the job runs; it \
                     was {state} at launch, keep it {state}"
                )));
            }
        }
        request.span_groups = Some((spec.clone(), GroupSet::from_bits(set.bits())));
    }
    if let Some(ratio) = args.sampling_ratio {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(bad(format!("--sampling-ratio {ratio}: expected a number in [0.0, 1.0]")));
        }
        request.sampling_ratio = Some(ratio);
    }
    request.rank_metrics = args.rank_metrics.as_deref().map(|v| v == "on");
    if let Some(timeout) = &args.hang_timeout {
        request.hang_timeout = Some(
            HangTimeout::parse(timeout)
                .ok_or_else(|| bad(format!("--hang-timeout {timeout:?}: expected {}", HangTimeout::EXPECTED)))?,
        );
    }
    if request == ControlRequest::reset(0) {
        return Err(bad(
            "nothing to change: give --span-groups, --sampling-ratio, --rank-metrics or --hang-timeout (or --reset, \
             --show)"
                .to_string(),
        ));
    }
    let from = match args.from_iteration {
        Some(from) => from,
        None => {
            let start = status.and_then(|s| s.safe_start(now_unix_s())).ok_or_else(|| {
                bad(format!(
                    "cannot read the job's last iteration from {} (the job writes it at each log interval); give \
                     --from-iteration",
                    status_path(&args.file).display()
                ))
            })?;
            let last = status.and_then(|s| s.last_iteration).unwrap_or(0);
            say(format_args!("from iteration {start} (the job's last iteration {last} plus a margin of two polls)"));
            start
        }
    };
    request.from_iteration = from;
    request.until_iteration = match (args.iterations, args.until_iteration) {
        (Some(0), _) => return Err(bad("--iterations 0: expected 1 or more".to_string())),
        (Some(n), _) => Some(from.saturating_add(n - 1)),
        (None, Some(until)) if until < from => {
            return Err(bad(format!("--until-iteration {until}: before the window's first iteration {from}")));
        }
        (None, until) => until,
    };
    Ok(request)
}

fn show(args: &ControlArgs) -> ExitCode {
    match read_capped(&args.file) {
        Err(_) if !args.file.exists() => {
            say(format_args!("{}: no control file: the launch configuration holds", args.file.display()));
        }
        Err(error) => say(format_args!("{}: {error}", args.file.display())),
        Ok(text) => {
            say(format_args!("{}:", args.file.display()));
            say(format_args!("  {}", text.trim()));
            // The job's own check: what the file says applies only if it passes.
            if let Err(refusal) = check_file(&args.file, job_uid()) {
                say(format_args!("  the job refuses this file ({refusal}): nothing in it applies"));
            }
        }
    }
    match read_status(&args.file) {
        Some(status) => {
            let last = status.last_iteration.map_or_else(|| "none yet".to_string(), |i| i.to_string());
            say(format_args!(
                "job (rank 0): last iteration {last}, generation {} in force, catalog {}, launch span groups {}, \
                 poll {} s",
                status.generation,
                status.catalog.name,
                status.launch_groups.join(","),
                status.poll_s
            ));
        }
        None => say(format_args!("no status from the job at {}", status_path(&args.file).display())),
    }
    ExitCode::SUCCESS
}

/// Runs the job's own check (`check_file`) on a file written where `file`
/// will be, as `write_atomic` writes it (a regular file that this user
/// creates with mode 0600, not through a link), then removes it: the job
/// refuses the control file the write would leave there for the same reason
/// (a directory other users can write, an owner that is not this user on a
/// squashing file system). The old file's own faults do not count: the
/// rename replaces it.
fn check_where_written(file: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // Absolute, so that a refusal names the directory (`/tmp`, not `.`).
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let name = file.file_name().map_or_else(|| "control".into(), |n| n.to_string_lossy().into_owned());
    let probe = dir.join(format!(".{name}.{}.check", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&probe)
        .map_err(|error| {
            Failure::Io(format!("could not write {} (to check {}): {error}", probe.display(), file.display()))
        })?;
    let checked = check_file(&probe, job_uid());
    let _ = std::fs::remove_file(&probe);
    checked.map(|_| ()).map_err(|refusal| {
        Failure::BadInput(format!(
            "control file {}: refused, {refusal}: the job refuses a control file written there, so nothing would \
             change; keep it in a directory only you can write (chmod 700); {} left as it was",
            file.display(),
            file.display()
        ))
    })
}

/// An exclusive `flock` on `FILE.lock`, released when dropped.
struct Lock {
    _file: std::fs::File,
}

impl Lock {
    fn take(file: &Path) -> Result<Lock, String> {
        use std::os::unix::fs::OpenOptionsExt as _;
        use std::os::unix::io::AsRawFd as _;
        let mut name = file.as_os_str().to_os_string();
        name.push(".lock");
        let path = PathBuf::from(name);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|error| format!("could not open the lock {}: {error}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it blocks until
        // the other writer is done.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(format!("could not lock {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        Ok(Lock { _file: lock })
    }
}
