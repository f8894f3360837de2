//! `lens control FILE ...`: writes a running job's control file
//! (`<PREFIX>_CONTROL_FILE`, SPEC A24), so that every rank changes its span
//! groups, sampling ratio, per-rank metrics or hang timeout at the same
//! iteration, and shows what it holds (`--show`) or goes back to the launch
//! configuration (`--reset`).
//!
//! It checks a span-group spec against the catalog the job wrote beside the
//! file (`FILE.status`; without one, `--catalog lens|megatron`), with the
//! same "did you mean" error as at launch (exit 2, the file left as it
//! was), and then checks what it would write with the job's own parser
//! (`parse_request`) against the job's launch settings. Without
//! `--from-iteration` it starts the window (or `--reset`) at the job's last
//! iteration plus a margin of two polls, read from the status file, and
//! refuses when it cannot read it, the job stopped updating it, or the job
//! ended (its last status says so); it warns when `--from-iteration` is
//! earlier than the start it would pick, and when no job's status is
//! beside the file. It refuses a window that ends at or before the job's
//! last iteration. It
//! writes the generation after the highest the file or the job has seen,
//! atomically (a temporary file, then a rename) under a lock (`FILE.lock`,
//! `flock`), so that two concurrent calls cannot collide, and warns when the
//! write replaces a version whose window the job has not started (the file
//! holds one version, and the job keeps the latest). It refuses (exit
//! 2, the file left as it was) to write where the job would refuse to read:
//! in a directory other users can write, by the job's own check
//! (`check_file`), with the job's reason. `--show` gives the job's verdict
//! on what the file holds, against the version the job accepted last (a
//! generation reused with another content is refused) and its end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use lens_fallbacks::config::HangTimeout;
use lens_fallbacks::control::{
    CatalogData, ControlRequest, ControlStatus, Settings, check_file, check_generation, describe, job_uid, keys,
    parse_request, read_capped, shown_text, status_path, write_atomic,
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
    /// The window's first iteration, or the reset's (default: the job's last iteration plus two polls).
    #[arg(long, value_name = "N")]
    pub from_iteration: Option<u64>,
    /// How many iterations the window lasts (default: until the next change).
    #[arg(long, value_name = "N", conflicts_with = "until_iteration")]
    pub iterations: Option<u64>,
    /// The window's last iteration, inclusive.
    #[arg(long, value_name = "N")]
    pub until_iteration: Option<u64>,
    /// The per-iteration trace sampling ratio during the window, in [0, 1].
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    pub sampling_ratio: Option<f64>,
    /// Pause (off) or resume (on) the per-rank metrics during the window.
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub rank_metrics: Option<String>,
    /// The hang watchdog's timeout during the window: seconds, 0 (off) or auto.
    #[arg(long = "hang-timeout", value_name = "SECONDS", allow_negative_numbers = true)]
    pub hang_timeout: Option<String>,
    /// The catalog to check --span-groups against when the job wrote no status file [default: lens;
    /// megatron for `megatron-train-sim control`].
    #[arg(long, value_enum)]
    pub catalog: Option<CatalogChoice>,
    /// Go back to the launch configuration (a new generation with no change), from --from-iteration or two polls ahead.
    #[arg(long, conflicts_with_all = ["span_groups", "iterations", "until_iteration",
        "sampling_ratio", "rank_metrics", "hang_timeout", "show"])]
    pub reset: bool,
    /// Print what the file asks for, whether the job accepts it, and what the job last reported.
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

/// The job's last iteration, for messages (`none` before its first).
fn last_iteration(status: &ControlStatus) -> String {
    status.last_iteration.map_or_else(|| "none".to_string(), |i| i.to_string())
}

/// The job's status beside `file` (`None`: none, or not readable), read as
/// the control file is (never through a link, never waiting on a FIFO).
fn read_status(file: &Path) -> Option<ControlStatus> {
    ControlStatus::from_json(&read_capped(&status_path(file)).ok()?)
}

/// The generation the file holds now (0: no file, or none readable).
fn file_generation(file: &Path) -> u64 {
    read_capped(file)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|value| value.get(keys::GENERATION).and_then(serde_json::Value::as_u64))
        .unwrap_or(0)
}

/// The catalog a version is checked against: the job's (from its status),
/// else `--catalog`.
fn catalog_of(args: &ControlArgs, status: Option<&ControlStatus>) -> CatalogData {
    match status {
        Some(status) => status.catalog.clone(),
        None => match args.catalog.unwrap_or(CatalogChoice::Lens) {
            CatalogChoice::Lens => CatalogData::of(&LENS_CATALOG),
            CatalogChoice::Megatron => CatalogData::of(&megatron_telemetry::groups::MEGATRON_CATALOG),
        },
    }
}

/// The launch settings and prefix to check a version against as the job
/// does: from the status; without one (or with launch groups this catalog
/// does not know), settings under which only what the status would tell
/// (the `job` group's launch state, per-rank metrics at launch) is not
/// checked: the job checks it when it reads the file.
fn launch_of(status: Option<&ControlStatus>, catalog: &CatalogData, text: &str) -> (Settings, String) {
    let prefix = status.map_or_else(|| "<PREFIX>".to_string(), |s| s.prefix.clone());
    if let Some(launch) = status.and_then(ControlStatus::launch) {
        return (launch, prefix);
    }
    let spec_groups = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| catalog.resolve(value.get(keys::SPAN_GROUPS)?.as_str()?).ok());
    let groups = spec_groups.unwrap_or(GroupSet::from_bits(0));
    (Settings { groups, sampling_ratio: None, rank_metrics: true, hang_timeout: HangTimeout::Auto }, prefix)
}

/// Bad input for the file `file`, which is left as it was.
fn left_as_it_was(file: &Path, message: String) -> Failure {
    Failure::BadInput(format!("{message}; {} left as it was", file.display()))
}

fn write(args: &ControlArgs) -> Result<(), Failure> {
    let bad = |message: String| left_as_it_was(&args.file, message);
    let status = read_status(&args.file);
    let catalog = catalog_of(args, status.as_ref());
    check_where_written(&args.file)?;
    let mut request = ControlRequest::reset(0, 0);
    if !args.reset {
        request = build(args, status.as_ref(), &catalog)?;
    }
    let picked = window(args, status.as_ref(), &mut request)?;
    let _lock = Lock::take(&args.file).map_err(Failure::Io)?;
    let replaced = pending_version(&args.file, status.as_ref(), &catalog);
    let in_file = file_generation(&args.file);
    let highest = in_file.max(status.as_ref().map_or(0, ControlStatus::highest));
    request.generation = highest.checked_add(1).filter(|g| *g <= lens_fallbacks::control::MAX_GENERATION).ok_or_else(|| {
        let source = if in_file == highest { "the file holds" } else { "the job accepted" };
        bad(format!(
            "generation {highest} ({source}) is the highest there is: no later generation can be written, and a job \
             that accepted it takes no further change until it restarts"
        ))
    })?;
    // What the job will do with it: the job's own parser, against its launch.
    let text = request.to_json();
    let (launch, prefix) = launch_of(status.as_ref(), &catalog, &text);
    parse_request(&text, &catalog, &launch, &prefix)
        .map_err(|error| bad(format!("the job would refuse it: {error}")))?;
    write_atomic(&args.file, &text)
        .map_err(|error| Failure::Io(format!("could not write {}: {error}", args.file.display())))?;
    if let Some(picked) = picked {
        say(format_args!("{picked}"));
    }
    if let Some(replaced) = replaced {
        crate::warn(&format_args!("{replaced}: it will never apply (the file holds one version at a time)"));
    }
    match &status {
        None => crate::warn(&format_args!(
            "no status from a job at {}: no job that reads this control file has started (the job writes it at \
             startup), or {} is not the path its <PREFIX>_CONTROL_FILE names",
            status_path(&args.file).display(),
            args.file.display()
        )),
        Some(status) if status.ended => crate::warn(&format_args!(
            "the job that wrote {} ended (at iteration {}): this version applies to the next job started with this \
             control file",
            status_path(&args.file).display(),
            last_iteration(status)
        )),
        Some(_) => {}
    }
    if let (None, Some((spec, set))) = (&status, &request.span_groups)
        && !set.contains(SpanGroup::JOB)
    {
        // Without the status, the launch groups are unknown: every preset
        // has `job`, and the job refuses to change it in flight.
        crate::warn(&format_args!(
            "--span-groups {spec:?} leaves out the 'job' group, which cannot change while the job runs; there is no \
             status from the job at {} to tell whether it was on at launch (it is in every preset): if it was, the \
             job will refuse this version (add 'job' to the list)",
            status_path(&args.file).display()
        ));
    }
    let generation = request.generation;
    if args.reset {
        say(format_args!(
            "wrote generation {generation} to {}: back to the launch configuration from iteration {}",
            args.file.display(),
            request.from_iteration
        ));
    } else {
        let what: Vec<String> = describe(&request).into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        say(format_args!("wrote generation {generation} to {}: {}", args.file.display(), what.join(" ")));
    }
    Ok(())
}

/// The request the flags ask for (its window and generation filled in
/// later).
fn build(args: &ControlArgs, status: Option<&ControlStatus>, catalog: &CatalogData) -> Result<ControlRequest, Failure> {
    let bad = |message: String| left_as_it_was(&args.file, message);
    let mut request = ControlRequest::reset(0, 0);
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
    if request == ControlRequest::reset(0, 0) {
        return Err(bad(
            "nothing to change: give --span-groups, --sampling-ratio, --rank-metrics or --hang-timeout (or --reset, \
             --show)"
                .to_string(),
        ));
    }
    Ok(request)
}

/// The version the file holds, when the job has not started it: its
/// generation is not the one in force and its window starts after the
/// job's last iteration (both from the status). Writing replaces it, read
/// by the job or not: the job keeps one version, the latest.
fn pending_version(file: &Path, status: Option<&ControlStatus>, catalog: &CatalogData) -> Option<String> {
    let status = status?;
    let last = status.last_iteration?;
    // The status lags the job (up to a log interval and a poll): where the
    // job is now is its last iteration extrapolated, as for the start
    // `lens control` picks (not once stale: a job that stopped updating its
    // status, in a long save or a hang, is not where the iteration time
    // would put it). A version whose start the job has reached by then may
    // have applied: replacing it is no loss to warn about.
    let now = now_unix_s();
    let stale = matches!(status.safe_start(now), Err(lens_fallbacks::control::UnknownStart::Stale { .. }));
    let reached = if stale { last } else { status.iteration_now(now).unwrap_or(last) };
    let text = read_capped(file).ok()?;
    let (launch, prefix) = launch_of(Some(status), catalog, &text);
    let pending = parse_request(&text, catalog, &launch, &prefix).ok()?;
    (pending.generation > status.generation && pending.from_iteration > reached && !status.ended).then(|| {
        let what = settings(&pending);
        format!(
            "this replaces generation {} ({}from iteration {}), which the job has not started (its last iteration \
             {last}, {:.1} s ago{})",
            pending.generation,
            if what.is_empty() { String::new() } else { format!("{} ", what.join(" ")) },
            pending.from_iteration,
            (now - status.written_unix_s).max(0.0),
            if reached == last { String::new() } else { format!(", extrapolated to {reached} now") }
        )
    })
}

/// What `request` changes, as `key=value` words, without its generation
/// and window.
fn settings(request: &ControlRequest) -> Vec<String> {
    describe(request)
        .into_iter()
        .filter(|(key, _)| ![keys::GENERATION, keys::FROM_ITERATION, keys::UNTIL_ITERATION].contains(key))
        .map(|(key, value)| format!("{key}={value}"))
        .collect()
}

/// Sets the request's window: its first iteration (`--from-iteration`, or
/// the job's last iteration plus two polls, from its status) and its last
/// (`--iterations`, `--until-iteration`); a window that ends at or before
/// the job's last iteration is refused, as no rank would apply any of it.
/// The start it picked, in words, to say once the version is written.
fn window(
    args: &ControlArgs,
    status: Option<&ControlStatus>,
    request: &mut ControlRequest,
) -> Result<Option<String>, Failure> {
    let bad = |message: String| left_as_it_was(&args.file, message);
    let mut picked = None;
    let from = match args.from_iteration {
        Some(from) => {
            warn_if_behind(status, from);
            from
        }
        None => {
            let path = status_path(&args.file);
            if let Some(status) = status.filter(|status| status.ended) {
                return Err(bad(format!(
                    "the job that wrote {} ended (at iteration {}): no running job reads this file, so there is no \
                     start to pick; give --from-iteration for the next job started with it",
                    path.display(),
                    last_iteration(status)
                )));
            }
            let Some(status) = status else {
                return Err(bad(format!(
                    "cannot read the job's last iteration: no status from the job at {} (the job writes it at startup \
                     and at each log interval); give --from-iteration",
                    path.display()
                )));
            };
            let now = now_unix_s();
            let start = status.safe_start(now).map_err(|why| {
                bad(format!(
                    "cannot pick the start from the job's status {}: {why}; give --from-iteration",
                    path.display()
                ))
            })?;
            let last = status.last_iteration.unwrap_or(0);
            picked = Some(format!(
                "from iteration {start} (the job's last iteration {last}, {:.1} s ago, extrapolated to now, plus a \
                 margin of two polls)",
                (now - status.written_unix_s).max(0.0)
            ));
            start
        }
    };
    request.from_iteration = from;
    request.until_iteration = match (args.iterations, args.until_iteration) {
        (Some(0), _) => return Err(bad("--iterations 0: expected 1 or more".to_string())),
        (Some(n), _) => Some(from.checked_add(n - 1).ok_or_else(|| {
            bad(format!("--iterations {n}: the window would end past the last iteration there is ({})", u64::MAX))
        })?),
        (None, Some(until)) if until < from => {
            return Err(bad(format!("--until-iteration {until}: before the window's first iteration {from}")));
        }
        (None, until) => until,
    };
    if let (Some(until), Some(last)) = (request.until_iteration, status.and_then(|s| s.last_iteration))
        && request.ended_by(last)
    {
        let flag = match args.iterations {
            Some(n) => format!("--iterations {n} from iteration {from}"),
            None => format!("--until-iteration {until}"),
        };
        return Err(bad(format!(
            "{flag}: the window ends at iteration {until}, at or before the job's last iteration {last} (from {}): \
             no rank would apply any of it; give a window that ends after it",
            status_path(&args.file).display()
        )));
    }
    Ok(picked)
}

/// Warns when `--from-iteration` is earlier than the start `lens control`
/// would pick (the job's last iteration, extrapolated to now, plus two
/// polls), while the job runs: ranks read the file once a poll, and one
/// that reads it after the window began applies it late, at the iteration
/// it reads it, or none of it once the window is over.
fn warn_if_behind(status: Option<&ControlStatus>, from: u64) {
    let Some(status) = status.filter(|status| !status.ended) else { return };
    let now = now_unix_s();
    let (Ok(safe), Some(reached), Some(last)) =
        (status.safe_start(now), status.iteration_now(now), status.last_iteration)
    else {
        return;
    };
    if from < safe {
        crate::warn(&format_args!(
            "--from-iteration {from}: the job is at about iteration {reached} now (its last iteration {last}, {:.1} s \
             ago{}), and ranks read the file once a poll ({} s): a rank that reads it after iteration {from} began \
             applies it late, at the iteration it reads it (none of it once the window is over); without \
             --from-iteration lens control picks {safe}",
            (now - status.written_unix_s).max(0.0),
            if reached == last { "" } else { ", extrapolated" },
            status.poll_s
        ));
    }
}

fn show(args: &ControlArgs) -> ExitCode {
    let status = read_status(&args.file);
    // The job's own order: the file's owner, mode and kind first (a link is
    // refused as a link), then its content.
    if std::fs::symlink_metadata(&args.file).is_err() {
        say(format_args!("{}: no control file: the launch configuration holds", args.file.display()));
    } else if let Err(refusal) = check_file(&args.file, job_uid()) {
        let accepted = refusal.accepted();
        say(format_args!(
            "{}: the job refuses this file: {refusal}; {accepted}; nothing in it applies",
            args.file.display()
        ));
    } else {
        match read_capped(&args.file) {
            Err(error) => {
                say(format_args!("{}: the job refuses this file: {error}; nothing in it applies", args.file.display()))
            }
            Ok(text) => {
                say(format_args!("{}:", args.file.display()));
                // Not as written when it holds a key that may carry a
                // credential (the job refuses such a file anyway).
                say(format_args!("  {}", shown_text(&text)));
                say(format_args!("  {}", verdict(args, status.as_ref(), &text)));
            }
        }
    }
    match &status {
        Some(status) => {
            let last = status.last_iteration.map_or_else(|| "none yet".to_string(), |i| i.to_string());
            let state = if status.ended { "ended, at" } else { "last" };
            say(format_args!(
                "job (rank 0): {state} iteration {last}, generation {} in force (highest accepted {}), catalog {}, \
                 launch span groups {}, poll {} s",
                status.generation,
                status.highest(),
                status.catalog.name,
                status.launch_groups.join(","),
                status.poll_s
            ));
            if !status.ended
                && let Err(why @ lens_fallbacks::control::UnknownStart::Stale { .. }) = status.safe_start(now_unix_s())
            {
                say(format_args!("  the job's status is stale: {why}"));
            }
        }
        None => say(format_args!("no status from the job at {}", status_path(&args.file).display())),
    }
    ExitCode::SUCCESS
}

/// What the job does with `text`, in one line: the job's own parser against
/// the job's catalog and launch (from its status; without one, `--catalog`),
/// then its generation and its window against what the job last said.
fn verdict(args: &ControlArgs, status: Option<&ControlStatus>, text: &str) -> String {
    let catalog = catalog_of(args, status);
    let (launch, prefix) = launch_of(status, &catalog, text);
    let unchecked = if status.is_none() {
        format!(
            " (checked against the {} catalog; without the job's status its launch span groups and per-rank metrics \
             are not known)",
            catalog.name
        )
    } else {
        String::new()
    };
    let request = match parse_request(text, &catalog, &launch, &prefix) {
        Ok(request) => request,
        Err(error) => return format!("the job refuses this version ({error}): nothing in it applies{unchecked}"),
    };
    if let Some(status) = status {
        if status.ended {
            let last = last_iteration(status);
            return format!(
                "the job ended (at iteration {last}): nothing in it applies unless a job starts with this control \
                 file (a job applies a window still ahead of it)"
            );
        }
        // The job's own generation rule, against the version it accepted
        // (`None`: a status from an older job, which does not say it).
        let accepted = status.accepted.as_deref().and_then(|text| parse_request(text, &catalog, &launch, &prefix).ok());
        if let Err(error) = check_generation(&request, status.highest(), accepted.as_ref()) {
            return format!("the job refuses this version ({error}): nothing in it applies");
        }
        if let Some(last) = status.last_iteration
            && request.ended_by(last)
        {
            let until = request.until_iteration.map_or_else(String::new, |u| format!(" to {u}"));
            return if status.highest() >= request.generation {
                format!(
                    "generation {}'s window (from iteration {}{until}) is over at the job's last iteration {last}: the \
                     job is back on the launch configuration",
                    request.generation, request.from_iteration
                )
            } else {
                format!(
                    "its window (from iteration {}{until}) ended at or before the job's last iteration {last}, before \
                     the job read it: none of its settings apply (the job moves to generation {} with the launch \
                     configuration)",
                    request.from_iteration, request.generation
                )
            };
        }
    }
    let window = match request.until_iteration {
        Some(until) => format!("from iteration {} to {until}", request.from_iteration),
        None => format!("from iteration {} until the next change", request.from_iteration),
    };
    let mut settings = settings(&request);
    if settings.is_empty() {
        settings.push("the launch configuration".to_string());
    }
    format!("the job accepts it: generation {} applies {window}: {}{unchecked}", request.generation, settings.join(" "))
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
    if !dir.is_dir() {
        let what = if dir.exists() { "is not a directory" } else { "does not exist" };
        return Err(left_as_it_was(
            file,
            format!(
                "control file {}: its directory {} {what}; give the path the job's <PREFIX>_CONTROL_FILE names",
                file.display(),
                dir.display()
            ),
        ));
    }
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
            // Never waits on a FIFO put there (no reader: refused at once).
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
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
