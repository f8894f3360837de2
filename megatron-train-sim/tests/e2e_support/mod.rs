//! The end-to-end harness: real programs we did not write, started on
//! 127.0.0.1 by the `e2e_*` tests, with every wait bounded.
//!
//! - [`Ctx`]: one test's temporary directory. Every child process started
//!   through it (the simulator, the OTLP sink, rotel, Prometheus, Python
//!   scripts) writes its stdout and stderr to files under `logs/`, and the
//!   simulator's telemetry files land in the same tree, so
//!   [`Ctx::finish`] can scan everything a test produced for the
//!   [`canary_token`] sent in `OTEL_EXPORTER_OTLP_HEADERS` (which must appear
//!   nowhere) before it removes the directory.
//! - [`Sink`]: `e2e/otlp_sink.py`, an OTLP receiver on the official protobuf
//!   definitions (gRPC, HTTP protobuf and JSON, optional TLS and faults),
//!   and typed readers of its JSON lines ([`SinkSpan`], [`SinkMetric`],
//!   [`SinkRequest`]).
//! - [`Sim`] / [`Proc`]: the simulator (or any program) with a clean
//!   environment, run to completion or spawned for signals.
//! - [`Rotel`], [`Prometheus`]: a real collector and a real Prometheus,
//!   scraping or on data backfilled with `promtool` ([`promtool_backfill`]).
//! - [`Pki`]: a private CA and a server certificate for 127.0.0.1 (openssl),
//!   and an unrelated CA.
//!
//! The Python packages and programs come from `.ci/run` (`pip install
//! opentelemetry-proto grpcio protobuf rotel opentelemetry-sdk`, Debian
//! `prometheus` and `openssl`); a missing one fails the test with that
//! command in the message.

#![allow(dead_code, reason = "each e2e test binary uses a part of the harness")]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_megatron-train-sim");
/// Small and quick: width 32, sequence 16.
pub(crate) const SMALL: &[&str] = &["--hidden-size", "32", "--seq-length", "16"];
/// The header that carries [`canary_token`] on every OTLP run.
pub(crate) const CANARY_HEADER: &str = "x-lens-e2e-token";
/// What to install when a program or package is missing.
pub(crate) const INSTALL_HINT: &str = "run .ci/run, or: python3 -m pip install opentelemetry-proto grpcio protobuf openai \
     rotel opentelemetry-sdk && apt-get install -y prometheus openssl";
/// How long a child may take to say it is ready.
pub(crate) const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long a stopped child may take to exit before it is killed.
pub(crate) const STOP_LIMIT: Duration = Duration::from_secs(10);
/// How many times [`start_listening`] starts a server, each time on fresh
/// ports, before the test fails.
pub(crate) const START_ATTEMPTS: usize = 5;

/// Prefixes of the variables removed from every child's environment, so
/// that the test runner's own settings change nothing.
const CLEARED_PREFIXES: &[&str] =
    &["OTEL_", "MEGATRON_", "NEMO_LENS_", "SLURM_", "TORCHELASTIC_", "LENS_", "ROTEL_", "GRPC_"];
/// Single variables removed from every child's environment.
const CLEARED: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TRACEPARENT",
    "TRACESTATE",
    "BAGGAGE",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
];

/// The secret sent as an OTLP header on every run of the suite: 32 random
/// hex characters behind a fixed prefix, the same for one test process.
pub(crate) fn canary_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut state = (nanos as u64) ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
        let mut text = String::from("lens-e2e-canary-");
        for _ in 0..2 {
            // splitmix64: enough to make the token unguessable by accident.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            text.push_str(&format!("{:016x}", z ^ (z >> 31)));
        }
        text
    })
}

/// `OTEL_EXPORTER_OTLP_HEADERS` as every OTLP run of the suite sets it.
pub(crate) fn canary_headers() -> String {
    format!("{CANARY_HEADER}={},x-lens-e2e-plain=visible", canary_token())
}

/// The workspace root.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate lives in the workspace").to_path_buf()
}

/// The Python interpreter (`python3`).
pub(crate) fn python() -> &'static str {
    "python3"
}

/// A command for `program` with the cleared environment.
pub(crate) fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if CLEARED.contains(&key) || CLEARED_PREFIXES.iter().any(|p| key.starts_with(p)) {
            command.env_remove(key);
        }
    }
    command.stdin(Stdio::null());
    command
}

/// One test's directory and the secrets that must not appear in it.
#[derive(Debug)]
pub(crate) struct Ctx {
    name: String,
    dir: PathBuf,
    secrets: Vec<String>,
    started: Instant,
}

impl Ctx {
    /// A fresh directory for test `name`; the canary token is a secret.
    pub(crate) fn new(name: &str) -> Ctx {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lens-e2e-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        Ctx { name: name.to_string(), dir, secrets: vec![canary_token().to_string()], started: Instant::now() }
    }

    /// The test's directory (the simulator's working directory).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// `rel` under the test's directory.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Another string that must appear in none of the outputs.
    pub(crate) fn add_secret(&mut self, secret: &str) {
        self.secrets.push(secret.to_string());
    }

    /// Fresh stdout and stderr files for a child labelled `label`.
    pub(crate) fn log_files(&self, label: &str) -> (PathBuf, PathBuf) {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = self.dir.join("logs").join(format!("{label}-{n}"));
        (base.with_extension("stdout"), base.with_extension("stderr"))
    }

    /// The simulator with `args`, in this directory, clean environment.
    pub(crate) fn sim(&self, args: &[&str]) -> Sim<'_> {
        let mut command = clean_command(BIN);
        // Temporary files (the heartbeat that a job a signal ended leaves
        // without `--save`) stay in the test's directory.
        command.current_dir(&self.dir).args(args).env("TMPDIR", &self.dir);
        Sim { ctx: self, command, label: "sim".to_string() }
    }

    /// Scans every file of the test's directory (logs, telemetry files, the
    /// sink's records) for the secrets; panics naming each file and line
    /// that holds one, else removes the directory (kept when the variable
    /// `LENS_E2E_KEEP` is set, for a look at the logs).
    pub(crate) fn finish(self) {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        let findings = scan_for_secrets(&self.dir, &secrets);
        assert!(
            findings.is_empty(),
            "test {}: a secret appears in the outputs (kept in {}):\n{}",
            self.name,
            self.dir.display(),
            findings.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
        if std::env::var_os("LENS_E2E_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// How long the test has run.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// One occurrence of a secret in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// The file.
    pub(crate) path: PathBuf,
    /// The 1-based line.
    pub(crate) line: usize,
    /// Which secret (its index in the list: the secret itself is not shown).
    pub(crate) secret: usize,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: secret #{}", self.path.display(), self.line, self.secret)
    }
}

/// Every occurrence of any of `secrets` in the files under `root`
/// (recursively, binary files included, symbolic links not followed).
pub(crate) fn scan_for_secrets(root: &Path, secrets: &[&str]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    let mut visited = 0_usize;
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            visited += 1;
            assert!(visited < 100_000, "scan_for_secrets: more than 100000 files under {}", root.display());
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                let Ok(bytes) = std::fs::read(&path) else { continue };
                for (index, secret) in secrets.iter().enumerate() {
                    let needle = secret.as_bytes();
                    if needle.is_empty() || bytes.len() < needle.len() {
                        continue;
                    }
                    for start in 0..=bytes.len() - needle.len() {
                        if &bytes[start..start + needle.len()] == needle {
                            let line = 1 + bytes[..start].iter().filter(|&&b| b == b'\n').count();
                            findings.push(Finding { path: path.clone(), line, secret: index });
                        }
                    }
                }
            }
        }
    }
    findings.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    findings
}

/// A child process whose stdout and stderr go to files, leading a process
/// group of its own that its children (a launcher's ranks, the simulator
/// under a Python launcher) join; dropping it, on every path (a finished
/// wait, a failed assertion's unwinding), kills that whole group and reaps
/// the child, so that nothing a test started outlives it.
///
/// The child is reaped only there: until then an exited child stays a
/// zombie (its status is read with `waitid(WNOWAIT)`), which keeps its pid,
/// and so its group's id, from being reused, and the group can always be
/// signalled safely, even after the leader has exited and left some of its
/// children behind.
#[derive(Debug)]
pub(crate) struct Proc {
    /// What it is (for messages).
    pub(crate) label: String,
    child: Child,
    /// Its stdout file.
    pub(crate) stdout: PathBuf,
    /// Its stderr file.
    pub(crate) stderr: PathBuf,
    started: Instant,
    /// Its exit status, once seen.
    exited: Option<ExitStatus>,
    /// Whether it is reaped (its pid and group id may be reused from then on).
    reaped: bool,
}

/// What a finished child left.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Its exit status.
    pub(crate) status: ExitStatus,
    /// Its stdout.
    pub(crate) stdout: String,
    /// Its stderr.
    pub(crate) stderr: String,
    /// From spawn to exit (as observed, to 20 ms).
    pub(crate) elapsed: Duration,
}

impl Finished {
    /// Panics with the output unless the exit status is 0.
    pub(crate) fn assert_success(&self, what: &str) {
        assert!(self.status.success(), "{what}: {}\nstdout:\n{}\nstderr:\n{}", self.status, self.stdout, self.stderr);
    }
}

impl Proc {
    /// Spawns `command` with its output in `ctx`'s log files, in a process
    /// group of its own.
    pub(crate) fn spawn(ctx: &Ctx, label: &str, mut command: Command) -> Proc {
        let (stdout, stderr) = ctx.log_files(label);
        command.stdout(File::create(&stdout).unwrap()).stderr(File::create(&stderr).unwrap()).process_group(0);
        let child =
            command.spawn().unwrap_or_else(|e| panic!("cannot start {label} ({command:?}): {e}; {INSTALL_HINT}"));
        Proc { label: label.to_string(), child, stdout, stderr, started: Instant::now(), exited: None, reaped: false }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pids fit in i32")
    }

    /// Sends `signal` (a `libc::SIG*`).
    pub(crate) fn signal(&self, signal: i32) {
        // SAFETY: `kill` has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal}) of {}", self.pid(), self.label);
    }

    /// Sends `SIGKILL` to its whole process group at once (the launcher and
    /// every rank).
    pub(crate) fn kill_group(&self) {
        // SAFETY: `killpg` has no memory-safety preconditions; the leader is
        // not reaped (see [`Proc`]), so the group id is still its own.
        let rc = unsafe { libc::killpg(self.pid(), libc::SIGKILL) };
        assert_eq!(rc, 0, "killpg({}, SIGKILL) of {}", self.pid(), self.label);
    }

    /// Waits at most `limit` until its stderr contains every one of
    /// `lines`, and returns it; panics (after killing it) otherwise.
    pub(crate) fn wait_for_stderr_lines(&mut self, lines: &[String], limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = self.stderr_text();
            if lines.iter().all(|line| text.contains(line.as_str())) {
                return text;
            }
            if let Some(status) = self.try_wait() {
                panic!("{} exited ({status}) before printing {lines:?}; stderr:\n{text}", self.label);
            }
            assert!(Instant::now() < deadline, "{} printed no {lines:?} within {limit:?}; stderr:\n{text}", self.label);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The exit status if it has exited (it is left unreaped: see [`Proc`]).
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = exit_status_unreaped(self.pid());
        }
        self.exited
    }

    /// Kills its whole group (whatever is left of it) and reaps it; its exit
    /// status.
    fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        if !std::mem::replace(&mut self.reaped, true) {
            // SAFETY: `killpg` has no memory-safety preconditions; the leader
            // is not reaped yet, so the group id is still its own.
            unsafe { libc::killpg(self.pid(), libc::SIGKILL) };
            let _ = self.child.kill();
            if let Ok(status) = self.child.wait() {
                self.exited.get_or_insert(status);
            }
        }
        self.exited
    }

    /// Its stdout so far.
    pub(crate) fn stdout_text(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Its stderr so far.
    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits at most `limit` for it to exit; kills it and panics after.
    pub(crate) fn wait(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait() {
                return self.finished(status);
            }
            if Instant::now() > deadline {
                let _ = self.kill_and_reap();
                panic!(
                    "{} did not exit within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    self.label,
                    self.stdout_text(),
                    self.stderr_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits at most [`STOP_LIMIT`]; SIGKILL after that
    /// (the outcome then shows a signal death).
    pub(crate) fn stop(mut self) -> Finished {
        if self.try_wait().is_none() {
            // SAFETY: `kill` has no memory-safety preconditions.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        }
        let deadline = Instant::now() + STOP_LIMIT;
        loop {
            if let Some(status) = self.try_wait() {
                return self.finished(status);
            }
            if Instant::now() > deadline {
                let status = self.kill_and_reap().expect("the killed child is reaped");
                return self.finished(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn finished(&self, status: ExitStatus) -> Finished {
        Finished { status, stdout: self.stdout_text(), stderr: self.stderr_text(), elapsed: self.started.elapsed() }
    }

    /// Waits at most `limit` for a line of its stdout that starts with
    /// `prefix`; panics (with its output) if it exits or the time runs out.
    pub(crate) fn wait_for_stdout_line(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(line) = self.stdout_text().lines().find(|l| l.starts_with(prefix)) {
                return line.to_string();
            }
            if let Some(status) = self.try_wait() {
                panic!("{} exited ({status}) before printing {prefix:?}; stderr:\n{}", self.label, self.stderr_text());
            }
            assert!(
                Instant::now() < deadline,
                "{} printed no {prefix:?} within {limit:?}; stderr:\n{}",
                self.label,
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    /// Kills what still runs of its group (the child, or what an exited
    /// child left behind) and reaps the child.
    fn drop(&mut self) {
        let _ = self.kill_and_reap();
    }
}

/// The exit status of child `pid` if it has exited, leaving it unreaped
/// (`waitid` with `WNOWAIT`); `None` while it runs.
fn exit_status_unreaped(pid: i32) -> Option<ExitStatus> {
    use std::os::unix::process::ExitStatusExt as _;
    // SAFETY: all-zero is a valid `siginfo_t` (plain integers); `waitid`
    // writes into it and nothing else, and leaves `si_pid` 0 when no child
    // changed state (`WNOHANG`).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let id = libc::id_t::try_from(pid).expect("a child's pid is positive");
    // SAFETY: `info` is a valid, writable `siginfo_t`.
    let rc = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
    assert_eq!(rc, 0, "waitid({pid}): {}", std::io::Error::last_os_error());
    // SAFETY: `waitid` filled `info` in for a child (or left it zeroed).
    let (child, status) = unsafe { (info.si_pid(), info.si_status()) };
    if child == 0 {
        return None;
    }
    // The encoding `waitpid` reports, which `ExitStatus` decodes.
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    Some(ExitStatus::from_raw(raw))
}

/// The simulator about to run (see [`Ctx::sim`]).
#[derive(Debug)]
pub(crate) struct Sim<'a> {
    ctx: &'a Ctx,
    command: Command,
    label: String,
}

/// An OTLP protocol as `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// `grpc`.
    Grpc,
    /// `http/protobuf`.
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

impl Protocol {
    /// All three.
    pub(crate) const ALL: [Protocol; 3] = [Protocol::Grpc, Protocol::HttpProtobuf, Protocol::HttpJson];

    /// The variable's value, which is also the sink's `transport`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
        }
    }
}

impl<'a> Sim<'a> {
    /// Sets one environment variable.
    #[must_use]
    pub(crate) fn env(mut self, key: &str, value: &str) -> Self {
        self.command.env(key, value);
        self
    }

    /// Sets several.
    #[must_use]
    pub(crate) fn envs(mut self, pairs: &[(&str, &str)]) -> Self {
        for (key, value) in pairs {
            self.command.env(key, value);
        }
        self
    }

    /// Names the run in log file names.
    #[must_use]
    pub(crate) fn label(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }

    /// Exports over OTLP with `protocol` to `endpoint` (a base URL), every
    /// rank exporting, metrics every 200 ms, with the canary header.
    #[must_use]
    pub(crate) fn otlp(self, protocol: Protocol, endpoint: &str) -> Self {
        self.envs(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.as_str()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_EXPORTER_OTLP_HEADERS", &canary_headers()),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
            ("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks"),
        ])
    }

    /// Starts it, in a process group of its own that its ranks join:
    /// [`Proc::kill_group`] kills them all at once, and dropping the
    /// [`Proc`] leaves no rank behind.
    pub(crate) fn spawn(self) -> Proc {
        Proc::spawn(self.ctx, &self.label, self.command)
    }

    /// Runs it to the end (at most `limit`).
    pub(crate) fn run(self, limit: Duration) -> Finished {
        self.spawn().wait(limit)
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (and may be taken by
/// anyone from then on: for an address where nothing listens, or a start
/// that is retried, see [`start_listening`]).
pub(crate) fn free_port() -> u16 {
    free_port_set(1)[0]
}

/// `count` distinct TCP ports on 127.0.0.1 that were free a moment ago
/// (probed at the same time, so never one twice).
fn free_port_set(count: usize) -> Vec<u16> {
    let probes: Vec<TcpListener> =
        (0..count).map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0")).collect();
    probes.iter().map(|probe| probe.local_addr().unwrap().port()).collect()
}

/// `count` consecutive TCP ports on 127.0.0.1, held (bound by this process)
/// until [`release`](Self::release): for the Prometheus endpoints that a
/// run's ranks bind themselves (the base port + the local rank), so that
/// nothing the test starts before the run (its Prometheus, which takes a
/// free port) can take one of them. Released just before the run is
/// spawned, they can still be taken by another process before the ranks
/// bind them at setup, a window of well under a second that only the
/// simulator choosing its own ports could close.
#[derive(Debug)]
pub(crate) struct HeldPorts {
    base: u16,
    held: Vec<TcpListener>,
}

impl HeldPorts {
    /// `count` consecutive free ports, held.
    pub(crate) fn hold(count: u16) -> HeldPorts {
        for _ in 0..200 {
            let base = free_port();
            if base.checked_add(count).is_none() {
                continue;
            }
            let held: Vec<_> =
                (0..count).map_while(|i| TcpListener::bind((Ipv4Addr::LOCALHOST, base + i)).ok()).collect();
            if held.len() == usize::from(count) {
                return HeldPorts { base, held };
            }
        }
        panic!("no {count} consecutive free ports on 127.0.0.1");
    }

    /// The first port.
    pub(crate) fn base(&self) -> u16 {
        self.base
    }

    /// Frees them for the run to be spawned next; the first port.
    pub(crate) fn release(self) -> u16 {
        drop(self.held);
        self.base
    }
}

/// The TCP ports on which process `pid` itself holds a listening socket
/// bound to 127.0.0.1 (Linux: the socket inodes among its descriptors,
/// looked up in its network namespace's `/proc/<pid>/net/tcp`). Empty once
/// it has exited.
pub(crate) fn listening_ports(pid: i32) -> BTreeSet<u16> {
    let inodes: HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect();
    // The kernel writes the address as the hex of the 32-bit word in host
    // byte order, the port in hex, and the state `0A` for LISTEN.
    let loopback = format!("{:08X}", u32::from_ne_bytes(Ipv4Addr::LOCALHOST.octets()));
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (address, port) = fields.get(1)?.split_once(':')?;
            let inode: u64 = fields.get(9)?.parse().ok()?;
            let mine = address == loopback && fields.get(3) == Some(&"0A") && inodes.contains(&inode);
            mine.then(|| u16::from_str_radix(port, 16).ok()).flatten()
        })
        .collect()
}

/// Starts a server that takes its ports on the command line and cannot
/// choose free ones itself (rotel panics on port 0): `command` builds its
/// command for `count` ports that were free a moment ago, and it is up once
/// it listens on every one of them itself, on 127.0.0.1 only
/// ([`listening_ports`]; a port that answers for another process does not
/// count), and `ready` agrees. Another process can take a port between the
/// probe and the server's bind: the server then exits at once (rotel and
/// Prometheus both exit 1 on "address already in use") or never listens
/// there, and the whole start is tried again on fresh ports, at most
/// [`START_ATTEMPTS`] times, each for at most [`READY_LIMIT`]. Panics naming
/// each attempt's ports, outcome and output when none came up.
pub(crate) fn start_listening(
    ctx: &Ctx,
    label: &str,
    count: usize,
    command: impl Fn(&[u16]) -> Command,
    ready: impl Fn(&[u16]) -> bool,
) -> (Proc, Vec<u16>) {
    let mut failures = Vec::new();
    for attempt in 1..=START_ATTEMPTS {
        let ports = free_port_set(count);
        let mut proc = Proc::spawn(ctx, label, command(&ports));
        let deadline = Instant::now() + READY_LIMIT;
        let outcome = loop {
            if let Some(status) = proc.try_wait() {
                break format!("exited ({status})");
            }
            let listening = listening_ports(proc.pid());
            if ports.iter().all(|port| listening.contains(port)) && ready(&ports) {
                return (proc, ports);
            }
            if Instant::now() > deadline {
                break format!("not up within {READY_LIMIT:?} (listening itself on {listening:?})");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        failures.push(format!(
            "attempt {attempt}, ports {ports:?}: {outcome}\nstdout:\n{}\nstderr:\n{}",
            proc.stdout_text(),
            proc.stderr_text()
        ));
        // Dropping it kills it (with its group) before the next attempt.
        drop(proc);
    }
    panic!("{label} did not come up on 127.0.0.1 in {START_ATTEMPTS} attempts:\n{}", failures.join("\n"));
}

/// Waits at most `limit` until something accepts TCP connections on
/// 127.0.0.1:`port`.
pub(crate) fn wait_for_port(port: u16, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return;
        }
        assert!(Instant::now() < deadline, "{what} is not listening on 127.0.0.1:{port} after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `probe` every 100 ms for at most `limit`; its first `Some`, or a
/// panic naming `what`.
pub(crate) fn wait_until<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A plain HTTP/1.0 GET of `path` from 127.0.0.1:`port`: status and body.
pub(crate) fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.take(64 * 1024 * 1024).read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// `text` percent-encoded for a URL query value.
pub(crate) fn url_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

// ---- The OTLP sink ----------------------------------------------------------

/// How to start the sink.
#[derive(Clone, Debug, Default)]
pub(crate) struct SinkOptions {
    /// The gRPC port (0: a free one).
    pub(crate) grpc_port: u16,
    /// The HTTP port (0: a free one).
    pub(crate) http_port: u16,
    /// `--fail-mode`: `http503`, `grpc-unavailable`, `hang` (None: `none`).
    pub(crate) fail_mode: Option<&'static str>,
    /// `--fail-count`: fail only the first N exports.
    pub(crate) fail_count: Option<u32>,
    /// Serve TLS with this certificate chain and key (PEM files).
    pub(crate) tls: Option<(PathBuf, PathBuf)>,
    /// Reject exports whose [`CANARY_HEADER`] does not hold this value
    /// (HTTP 401, gRPC UNAUTHENTICATED); usually [`canary_token`].
    pub(crate) required_token: Option<String>,
    /// The records file (default: a fresh one in the test directory); a
    /// restarted sink can append to its predecessor's.
    pub(crate) out: Option<PathBuf>,
}

/// `e2e/otlp_sink.py`, running.
#[derive(Debug)]
pub(crate) struct Sink {
    proc: Proc,
    /// Its gRPC port.
    pub(crate) grpc_port: u16,
    /// Its HTTP port.
    pub(crate) http_port: u16,
    /// The records file.
    pub(crate) out: PathBuf,
    tls: bool,
}

impl Sink {
    /// Starts a plain sink on free ports.
    pub(crate) fn start(ctx: &Ctx) -> Sink {
        Sink::start_with(ctx, SinkOptions::default())
    }

    /// Starts a sink; returns once both servers listen (at most
    /// [`READY_LIMIT`]).
    pub(crate) fn start_with(ctx: &Ctx, options: SinkOptions) -> Sink {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let out = options
            .out
            .clone()
            .unwrap_or_else(|| ctx.path(&format!("sink-{}.jsonl", COUNTER.fetch_add(1, Ordering::Relaxed))));
        let mut command = clean_command(python());
        command
            .arg(repo_root().join("e2e/otlp_sink.py"))
            .args(["--grpc-port", &options.grpc_port.to_string()])
            .args(["--http-port", &options.http_port.to_string()])
            .arg("--out")
            .arg(&out)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        if let Some(mode) = options.fail_mode {
            command.args(["--fail-mode", mode]);
        }
        if let Some(count) = options.fail_count {
            command.args(["--fail-count", &count.to_string()]);
        }
        if let Some((cert, key)) = &options.tls {
            command.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        if let Some(token) = &options.required_token {
            command.args(["--require-header", CANARY_HEADER]).env("OTLP_SINK_REQUIRED_HEADER_VALUE", token);
        }
        let mut proc = Proc::spawn(ctx, "sink", command);
        let ready = proc.wait_for_stdout_line("READY ", READY_LIMIT);
        let port = |key: &str| -> u16 {
            ready
                .split_whitespace()
                .find_map(|part| part.strip_prefix(key)?.parse().ok())
                .unwrap_or_else(|| panic!("bad sink READY line {ready:?}"))
        };
        let (grpc_port, http_port) = (port("grpc="), port("http="));
        Sink { proc, grpc_port, http_port, out, tls: options.tls.is_some() }
    }

    /// The base URL for `protocol` (`http://127.0.0.1:<port>`, `https`
    /// with TLS).
    pub(crate) fn endpoint(&self, protocol: Protocol) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let port = if protocol == Protocol::Grpc { self.grpc_port } else { self.http_port };
        format!("{scheme}://127.0.0.1:{port}")
    }

    /// Every record written so far.
    pub(crate) fn records(&self) -> Records {
        Records::read(&self.out)
    }

    /// Polls the records (at most `limit`) until `done` holds; returns them.
    pub(crate) fn wait_for(&self, what: &str, limit: Duration, done: impl Fn(&Records) -> bool) -> Records {
        wait_until(what, limit, || {
            let records = self.records();
            done(&records).then_some(records)
        })
    }

    /// Sends a signal to the sink (SIGUSR1 switches its fault off).
    pub(crate) fn signal(&self, signal: i32) {
        self.proc.signal(signal);
    }

    /// Stops it (SIGTERM, bounded); panics unless it exited 0 in time.
    pub(crate) fn stop(self) -> Records {
        let out = self.out.clone();
        let finished = self.proc.stop();
        finished.assert_success("the OTLP sink's shutdown");
        Records::read(&out)
    }
}

/// One span as the sink decoded it.
#[derive(Clone, Debug)]
pub(crate) struct SinkSpan {
    /// `grpc`, `http/protobuf` or `http/json`.
    pub(crate) transport: String,
    /// Lowercase hex.
    pub(crate) trace_id: String,
    /// Lowercase hex.
    pub(crate) span_id: String,
    /// Lowercase hex; empty for a root.
    pub(crate) parent_span_id: String,
    /// The span name.
    pub(crate) name: String,
    /// `internal`, `server`, ...
    pub(crate) kind: String,
    /// Start, ns since the epoch.
    pub(crate) start_ns: u64,
    /// End, ns since the epoch.
    pub(crate) end_ns: u64,
    /// The span's attributes.
    pub(crate) attributes: BTreeMap<String, Value>,
    /// (trace id, span id) of each link.
    pub(crate) links: Vec<(String, String)>,
    /// (name, attributes) of each event.
    pub(crate) events: Vec<(String, BTreeMap<String, Value>)>,
    /// `unset`, `ok` or `error`.
    pub(crate) status: String,
    /// The resource's attributes.
    pub(crate) resource: BTreeMap<String, Value>,
}

impl SinkSpan {
    /// The resource's `dl.rank`.
    pub(crate) fn rank(&self) -> Option<i64> {
        self.resource.get("dl.rank").and_then(Value::as_i64)
    }
}

/// One metric of one export as the sink decoded it.
#[derive(Clone, Debug)]
pub(crate) struct SinkMetric {
    /// `grpc`, `http/protobuf` or `http/json`.
    pub(crate) transport: String,
    /// The instrument name.
    pub(crate) name: String,
    /// `gauge`, `sum`, `histogram`, ...
    pub(crate) kind: String,
    /// The unit ("" when none).
    pub(crate) unit: String,
    /// For sums.
    pub(crate) is_monotonic: Option<bool>,
    /// `delta` or `cumulative` for sums and histograms.
    pub(crate) temporality: Option<String>,
    /// The data points as the sink wrote them (`value`, or `count`, `sum`,
    /// `bucket_counts`, `explicit_bounds`; `attributes`).
    pub(crate) data_points: Vec<Value>,
    /// The resource's attributes.
    pub(crate) resource: BTreeMap<String, Value>,
}

/// One export request the sink answered.
#[derive(Clone, Debug)]
pub(crate) struct SinkRequest {
    /// `grpc`, `http/protobuf`, `http/json` (or the content type of an
    /// undecodable one).
    pub(crate) transport: String,
    /// `traces`, `metrics` or `logs`.
    pub(crate) signal: String,
    /// Spans, metrics or log records in it.
    pub(crate) items: u64,
    /// `ok`, `http503`, `grpc-unavailable`, `hang`, `unauthenticated`,
    /// `undecodable`.
    pub(crate) outcome: String,
    /// Whether the required header was there (true when none is required).
    pub(crate) header_ok: bool,
}

/// Everything the sink wrote.
#[derive(Clone, Debug, Default)]
pub(crate) struct Records {
    /// Spans of accepted requests.
    pub(crate) spans: Vec<SinkSpan>,
    /// Metrics of accepted requests.
    pub(crate) metrics: Vec<SinkMetric>,
    /// Log records of accepted requests (raw).
    pub(crate) logs: Vec<Value>,
    /// Every request.
    pub(crate) requests: Vec<SinkRequest>,
}

fn object(value: &Value, key: &str) -> BTreeMap<String, Value> {
    value[key].as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
}

fn string(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

impl Records {
    /// Reads a sink's records file (a missing file: nothing yet; a torn last
    /// line, being written, is skipped).
    pub(crate) fn read(path: &Path) -> Records {
        let mut records = Records::default();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<Value>(line) else { continue };
            match value["type"].as_str() {
                Some("span") => records.spans.push(SinkSpan {
                    transport: string(&value, "transport"),
                    trace_id: string(&value, "trace_id"),
                    span_id: string(&value, "span_id"),
                    parent_span_id: string(&value, "parent_span_id"),
                    name: string(&value, "name"),
                    kind: string(&value, "kind"),
                    start_ns: value["start_ns"].as_u64().unwrap_or_default(),
                    end_ns: value["end_ns"].as_u64().unwrap_or_default(),
                    attributes: object(&value, "attributes"),
                    links: value["links"]
                        .as_array()
                        .map(|links| links.iter().map(|l| (string(l, "trace_id"), string(l, "span_id"))).collect())
                        .unwrap_or_default(),
                    events: value["events"]
                        .as_array()
                        .map(|events| events.iter().map(|e| (string(e, "name"), object(e, "attributes"))).collect())
                        .unwrap_or_default(),
                    status: value["status"]["code"].as_str().unwrap_or_default().to_string(),
                    resource: object(&value, "resource"),
                }),
                Some("metric") => records.metrics.push(SinkMetric {
                    transport: string(&value, "transport"),
                    name: string(&value, "name"),
                    kind: string(&value, "kind"),
                    unit: string(&value, "unit"),
                    is_monotonic: value["is_monotonic"].as_bool(),
                    temporality: value["temporality"].as_str().map(str::to_string),
                    data_points: value["data_points"].as_array().cloned().unwrap_or_default(),
                    resource: object(&value, "resource"),
                }),
                Some("log") => records.logs.push(value),
                Some("request") => records.requests.push(SinkRequest {
                    transport: string(&value, "transport"),
                    signal: string(&value, "signal"),
                    items: value["items"].as_u64().unwrap_or_default(),
                    outcome: string(&value, "outcome"),
                    header_ok: value["header_ok"].as_bool().unwrap_or(false),
                }),
                _ => {}
            }
        }
        records
    }

    /// Spans named `name`.
    pub(crate) fn spans_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a SinkSpan> + 'a {
        self.spans.iter().filter(move |s| s.name == name)
    }

    /// Spans by span id.
    pub(crate) fn by_id(&self) -> HashMap<&str, &SinkSpan> {
        self.spans.iter().map(|s| (s.span_id.as_str(), s)).collect()
    }

    /// The name of `span`'s parent, if the parent is among the records.
    pub(crate) fn parent_name<'a>(&'a self, by_id: &HashMap<&str, &'a SinkSpan>, span: &SinkSpan) -> Option<&'a str> {
        by_id.get(span.parent_span_id.as_str()).map(|p| p.name.as_str())
    }

    /// Metrics named `name`.
    pub(crate) fn metrics_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a SinkMetric> + 'a {
        self.metrics.iter().filter(move |m| m.name == name)
    }

    /// Items of accepted requests of `signal` (`traces`, `metrics`, `logs`).
    pub(crate) fn accepted_items(&self, signal: &str) -> u64 {
        self.requests.iter().filter(|r| r.signal == signal && r.outcome == "ok").map(|r| r.items).sum()
    }
}

// ---- rotel ------------------------------------------------------------------

/// The `rotel` collector (PyPI `rotel` ships its agent binary).
#[derive(Debug)]
pub(crate) struct Rotel {
    proc: Proc,
    /// Where it receives OTLP/gRPC.
    pub(crate) grpc_port: u16,
    /// Where it receives OTLP/HTTP.
    pub(crate) http_port: u16,
}

/// The path of rotel's agent binary inside the installed Python package.
pub(crate) fn rotel_binary() -> PathBuf {
    let output = clean_command(python())
        .args(["-c", "import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", python()));
    assert!(output.status.success(), "the rotel package is missing: {INSTALL_HINT}");
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert!(path.is_file(), "no rotel agent at {}: {INSTALL_HINT}", path.display());
    path
}

impl Rotel {
    /// Starts rotel in the foreground, receiving on free ports and
    /// exporting over OTLP/gRPC to `exporter_endpoint` (for example the
    /// sink's gRPC endpoint); returns once both receivers listen (see
    /// [`start_listening`]: rotel cannot take port 0).
    pub(crate) fn start(ctx: &Ctx, exporter_endpoint: &str) -> Rotel {
        let binary = rotel_binary();
        let command = |ports: &[u16]| {
            let mut command = clean_command(&binary);
            command
                .current_dir(ctx.dir())
                .arg("start")
                .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{}", ports[0])])
                .args(["--otlp-http-endpoint", &format!("127.0.0.1:{}", ports[1])])
                .args(["--exporter", "otlp"])
                .args(["--otlp-exporter-endpoint", exporter_endpoint])
                .args(["--otlp-exporter-protocol", "grpc"])
                .args(["--batch-timeout", "100ms"])
                .arg("--pid-file")
                .arg(ctx.path(&format!("rotel-{}.pid", ports[0])))
                .arg("--log-file")
                .arg(ctx.path(&format!("logs/rotel-agent-{}.log", ports[0])));
            command
        };
        let (proc, ports) = start_listening(ctx, "rotel", 2, command, |_| true);
        Rotel { proc, grpc_port: ports[0], http_port: ports[1] }
    }

    /// Its receiver's base URL for `protocol`.
    pub(crate) fn endpoint(&self, protocol: Protocol) -> String {
        let port = if protocol == Protocol::Grpc { self.grpc_port } else { self.http_port };
        format!("http://127.0.0.1:{port}")
    }

    /// Stops it (SIGTERM: it flushes what it holds), bounded.
    pub(crate) fn stop(self) -> Finished {
        self.proc.stop()
    }
}

// ---- Prometheus ---------------------------------------------------------------

/// A Prometheus server with its own configuration and storage in the test
/// directory, listening on 127.0.0.1 only.
#[derive(Debug)]
pub(crate) struct Prometheus {
    proc: Proc,
    /// Its HTTP port (API and UI).
    pub(crate) port: u16,
}

impl Prometheus {
    /// Starts `prometheus` scraping `targets` (`127.0.0.1:port`) every
    /// second; returns once `/-/ready` answers 200.
    pub(crate) fn start(ctx: &Ctx, targets: &[String]) -> Prometheus {
        Prometheus::launch(ctx, targets, &ctx.path("prometheus-data"))
    }

    /// Starts `prometheus` on the storage `data` (blocks written by
    /// [`promtool_backfill`]), scraping nothing; returns once ready.
    pub(crate) fn on_data(ctx: &Ctx, data: &Path) -> Prometheus {
        Prometheus::launch(ctx, &[], data)
    }

    fn launch(ctx: &Ctx, targets: &[String], data: &Path) -> Prometheus {
        let config = ctx.path("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: megatron\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .unwrap();
        let command = |ports: &[u16]| {
            let mut command = clean_command("prometheus");
            command
                .current_dir(ctx.dir())
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{}", ports[0]))
                .arg("--log.level=warn");
            command
        };
        let ready = |ports: &[u16]| matches!(http_get(ports[0], "/-/ready"), Ok((200, _)));
        let (proc, ports) = start_listening(ctx, "prometheus", 1, command, ready);
        Prometheus { proc, port: ports[0] }
    }

    /// `/api/v1/query?query=<promql>`: the `data.result` vector.
    pub(crate) fn query(&self, promql: &str) -> Vec<Value> {
        self.query_path(promql, &format!("/api/v1/query?query={}", url_encode(promql)))
    }

    /// The same, evaluated at `time` (Unix seconds).
    pub(crate) fn query_at(&self, promql: &str, time: f64) -> Vec<Value> {
        self.query_path(promql, &format!("/api/v1/query?query={}&time={time:.3}", url_encode(promql)))
    }

    fn query_path(&self, promql: &str, path: &str) -> Vec<Value> {
        let (status, body) = http_get(self.port, path).unwrap_or_else(|e| panic!("query {promql}: {e}"));
        let value: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("query {promql}: HTTP {status}, {e}: {body}"));
        assert_eq!(value["status"], "success", "query {promql}: {body}");
        value["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `promql` (at most `limit`) until it returns at least one series.
    pub(crate) fn wait_for_series(&self, promql: &str, limit: Duration) -> Vec<Value> {
        wait_until(&format!("prometheus to return a series for {promql}"), limit, || {
            let result = self.query(promql);
            (!result.is_empty()).then_some(result)
        })
    }

    /// Stops it, bounded.
    pub(crate) fn stop(self) -> Finished {
        self.proc.stop()
    }
}

/// The fenced block after `<!-- recipe: NAME -->` in `page` (docs/backends.md).
pub(crate) fn documented_recipe(page: &str, name: &str) -> String {
    let marker = format!("<!-- recipe: {name} -->");
    let after = page.split(&marker).nth(1).unwrap_or_else(|| panic!("docs/backends.md has no {marker}"));
    let block = after.split("```").nth(1).unwrap_or_else(|| panic!("no code block after {marker}"));
    block.split_once('\n').map_or(block, |(_, body)| body).trim().to_string()
}

/// Prometheus's backfill: writes `openmetrics` (the OpenMetrics text
/// format with timestamps, ending with `# EOF`) into storage blocks with
/// `promtool tsdb create-blocks-from openmetrics`, so that a real
/// Prometheus ([`Prometheus::on_data`]) answers queries over data it did
/// not scrape. The storage directory.
pub(crate) fn promtool_backfill(ctx: &Ctx, openmetrics: &str) -> PathBuf {
    let input = ctx.path("backfill.om");
    std::fs::write(&input, openmetrics).unwrap();
    let data = ctx.path("prometheus-backfill");
    let mut command = clean_command("promtool");
    command.current_dir(ctx.dir()).args(["tsdb", "create-blocks-from", "openmetrics"]).arg(&input).arg(&data);
    Proc::spawn(ctx, "promtool", command).wait(READY_LIMIT).assert_success("promtool tsdb create-blocks-from");
    data
}

// ---- A private CA ---------------------------------------------------------------

/// A private CA and a certificate for 127.0.0.1 signed by it (P-256 keys,
/// made by `openssl`), and a second CA that signed nothing.
#[derive(Clone, Debug)]
pub(crate) struct Pki {
    /// The CA certificate (PEM): what `OTEL_EXPORTER_OTLP_CERTIFICATE` names.
    pub(crate) ca_cert: PathBuf,
    /// The server certificate (PEM), for `IP:127.0.0.1` and `DNS:localhost`.
    pub(crate) server_cert: PathBuf,
    /// The server key (PEM, PKCS#8).
    pub(crate) server_key: PathBuf,
    /// An unrelated CA certificate (PEM).
    pub(crate) other_ca_cert: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = clean_command("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl: {e}; {INSTALL_HINT}"));
    assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

impl Pki {
    /// Generates everything under `ctx`'s `pki/` directory.
    pub(crate) fn generate(ctx: &Ctx) -> Pki {
        let dir = ctx.path("pki");
        std::fs::create_dir_all(&dir).unwrap();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for (name, cn) in [("ca", "lens e2e CA"), ("other-ca", "lens e2e unrelated CA")] {
            let key = format!("{name}.key");
            let cert = format!("{name}.pem");
            let subject = format!("/CN={cn}");
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend([
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "2",
                "-subj",
                &subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(&dir, &args);
        }
        let mut args = vec!["req"];
        args.extend(ec);
        args.extend(["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
        openssl(&dir, &args);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        Pki {
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            other_ca_cert: dir.join("other-ca.pem"),
        }
    }
}

/// The common simulator flags of the e2e runs: `ranks` ranks as a pipeline
/// of `ranks` stages, preset `all`, `iters` iterations, metrics every 2
/// iterations, a checkpoint interval of 2 (so there are several
/// `megatron.train` intervals), small sizes.
pub(crate) fn sim_args(ranks: u32, iters: u32) -> Vec<String> {
    let mut args: Vec<String> = [
        "--otel-enabled",
        "--otel-span-groups",
        "all",
        "--nproc-per-node",
        &ranks.to_string(),
        "--pipeline-model-parallel-size",
        &ranks.to_string(),
        "--train-iters",
        &iters.to_string(),
        "--log-interval",
        "2",
        "--save",
        "ckpt",
        "--save-interval",
        "2",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    args.extend(SMALL.iter().map(|s| (*s).to_string()));
    args
}

/// `strings` as `&str`s.
pub(crate) fn strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}
