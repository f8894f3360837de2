//! The local launcher (`--nproc-per-node N`), like `torchrun --standalone`:
//! it re-executes this binary once per rank with the variables an external
//! launcher would set, forwards SIGTERM and SIGINT to the ranks, waits for
//! them within a bound, and exits with a status that reflects theirs.
//!
//! Each rank gets `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`,
//! `MASTER_ADDR=127.0.0.1` and `MASTER_PORT` (a port free at launch), one
//! run id for all (`MEGATRON_OTEL_RUN_ID`, unless a run-id variable is
//! already set), one fresh launch id per launch
//! (`MEGATRON_OTEL_LAUNCH_ID`, unless a launch-id variable is already set,
//! so that two launches of one pinned run id never share a trace id),
//! `MEGATRON_OTEL_EXPORTER=file` when no exporter is
//! configured, and the launcher's own environment, so `TRACEPARENT`,
//! `TRACESTATE` and `BAGGAGE` pass on and every rank joins the launcher's
//! trace.
//!
//! Exit status: 0 when every rank exits 0; after a forwarded signal,
//! `128 + signal` unless every rank drained to 0; otherwise the status of the
//! first rank that failed (`128 + signal` for a rank killed by a signal;
//! when several end between two looks, every 20 ms, a rank killed by a
//! signal is preferred, being the likelier cause).
//! After the first failure the other ranks get [`FAILURE_GRACE`] to notice
//! (they see the connection end) and are then killed; after a forwarded
//! signal they get [`SIGNAL_GRACE`] to drain.

use std::io::Write as _;
use std::net::TcpListener;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lens_fallbacks::env::{EnvSource, ProcessEnv};

use crate::output;

/// The launch-id variables that, when set, the launcher leaves alone: an
/// outer launcher (SLURM, torchrun, one of several nodes' launchers) already
/// gave every rank of this launch one id (see
/// `lens_fallbacks::identity::resolve_launch_id`).
pub(crate) const LAUNCH_ID_VARIABLES: [&str; 4] =
    ["MEGATRON_OTEL_LAUNCH_ID", "NEMO_LENS_LAUNCH_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"];

/// The variable the launcher sets to hand its ranks one launch id.
pub(crate) const LAUNCH_ID_VARIABLE: &str = "MEGATRON_OTEL_LAUNCH_ID";

/// The launch id this launcher hands its ranks: a fresh one (12 hex
/// characters) unless `env` already has one.
fn launch_id_for_ranks(env: &(impl EnvSource + ?Sized)) -> Option<String> {
    let set = LAUNCH_ID_VARIABLES.iter().any(|v| env.non_empty(v).is_some_and(|id| !id.eq_ignore_ascii_case("none")));
    (!set).then(lens_fallbacks::identity::random_run_id)
}

/// The variable that tells a re-executed process it is a rank, not a launcher.
pub(crate) const ROLE_VARIABLE: &str = "MEGATRON_TRAIN_SIM_ROLE";

/// How long the other ranks have to exit after one fails.
pub(crate) const FAILURE_GRACE: Duration = Duration::from_secs(15);
/// How long the ranks have to exit after a forwarded signal.
pub(crate) const SIGNAL_GRACE: Duration = Duration::from_secs(60);

/// What the launcher adds to the environment of every rank.
#[derive(Debug, Default)]
pub(crate) struct LaunchEnv {
    /// Extra variables for every rank.
    pub(crate) variables: Vec<(String, String)>,
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    1
}

/// Starts `nproc` ranks and supervises them; the exit status.
pub(crate) fn launch(nproc: u32, extra: &LaunchEnv, pids_file: Option<&std::path::Path>) -> i32 {
    let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(address) => address.port(),
        Err(error) => {
            output::error(None, &format!("no free port for MASTER_PORT on 127.0.0.1: {error}"));
            return 1;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => {
            output::error(None, &format!("cannot find this executable to start the ranks: {error}"));
            return 1;
        }
    };
    let pids: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new(Vec::new()));
    let received = Arc::new(AtomicI32::new(0));
    forward_signals(Arc::clone(&pids), Arc::clone(&received));

    let launch_id = launch_id_for_ranks(&ProcessEnv);
    let mut children: Vec<Child> = Vec::new();
    for rank in 0..nproc {
        let mut command = Command::new(&exe);
        command
            .args(std::env::args_os().skip(1))
            .env(ROLE_VARIABLE, "rank")
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", nproc.to_string())
            .env("LOCAL_WORLD_SIZE", nproc.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string());
        if let Some(id) = &launch_id {
            command.env(LAUNCH_ID_VARIABLE, id);
        }
        for (key, value) in &extra.variables {
            command.env(key, value);
        }
        match command.spawn() {
            Ok(child) => {
                if let Ok(mut list) = pids.lock() {
                    list.push(child.id());
                }
                children.push(child);
            }
            Err(error) => {
                output::error(None, &format!("could not start rank {rank}: {error}"));
                for child in &mut children {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return 1;
            }
        }
    }
    if let Some(path) = pids_file {
        let lines: String =
            children.iter().enumerate().map(|(rank, child)| format!("{rank} {}\n", child.id())).collect();
        if let Err(error) = std::fs::File::create(path).and_then(|mut f| f.write_all(lines.as_bytes())) {
            output::error(None, &format!("--rank-pids-file {}: {error}", path.display()));
        }
    }
    supervise(children, &received)
}

fn supervise(mut children: Vec<Child>, received: &AtomicI32) -> i32 {
    let mut codes: Vec<Option<i32>> = vec![None; children.len()];
    let mut first_failure: Option<i32> = None;
    let mut deadline: Option<Instant> = None;
    let mut signal_seen = false;
    loop {
        // Ranks that ended since the last look; among them a rank killed by
        // a signal is the likelier cause of the others' failure.
        let mut ended: Vec<(usize, i32)> = Vec::new();
        for (rank, child) in children.iter_mut().enumerate() {
            if codes[rank].is_some() {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let code = exit_code(status);
                codes[rank] = Some(code);
                ended.push((rank, code));
            }
        }
        let failed = ended.iter().find(|(_, code)| *code > 128).or_else(|| ended.iter().find(|(_, code)| *code != 0));
        if let Some(&(rank, code)) = failed
            && first_failure.is_none()
            && received.load(Ordering::Acquire) == 0
        {
            first_failure = Some(code);
            output::note(&format!(
                "rank {rank} exited with status {code}; the other ranks have {} s to stop",
                FAILURE_GRACE.as_secs()
            ));
            deadline = Some(Instant::now() + FAILURE_GRACE);
        }
        if codes.iter().all(Option::is_some) {
            break;
        }
        if !signal_seen && received.load(Ordering::Acquire) != 0 {
            signal_seen = true;
            let signal_deadline = Instant::now() + SIGNAL_GRACE;
            deadline = Some(deadline.map_or(signal_deadline, |d| d.min(signal_deadline)));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            for (rank, child) in children.iter_mut().enumerate() {
                if codes[rank].is_none() {
                    output::note(&format!("rank {rank} did not stop in time; killing it"));
                    let _ = child.kill();
                }
            }
            deadline = None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let signal = received.load(Ordering::Acquire);
    if signal != 0 {
        return if codes.iter().all(|c| *c == Some(0)) { 0 } else { 128 + signal };
    }
    first_failure.unwrap_or(0)
}

#[cfg(unix)]
fn forward_signals(pids: Arc<Mutex<Vec<u32>>>, received: Arc<AtomicI32>) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;

    let Ok(mut signals) = Signals::new([SIGTERM, SIGINT]) else {
        output::error(None, &"could not install the signal handlers; signals will not be forwarded");
        return;
    };
    let spawned = std::thread::Builder::new().name("forward-signals".into()).spawn(move || {
        for signal in signals.forever() {
            let _ = received.compare_exchange(0, signal, Ordering::AcqRel, Ordering::Acquire);
            let list = pids.lock().map(|l| l.clone()).unwrap_or_default();
            for pid in list {
                let Ok(pid) = libc::pid_t::try_from(pid) else { continue };
                // SAFETY: `kill` has no memory-safety preconditions. `pid`
                // is one of our children; one already reaped could in
                // principle have had its id reused, a window of the few
                // milliseconds between its exit and the end of the run.
                unsafe {
                    libc::kill(pid, signal);
                }
            }
        }
    });
    if spawned.is_err() {
        output::error(None, &"could not start the signal thread; signals will not be forwarded");
    }
}

#[cfg(not(unix))]
fn forward_signals(_pids: Arc<Mutex<Vec<u32>>>, _received: Arc<AtomicI32>) {}
