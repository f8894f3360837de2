//! Shared by the fault, signal, load and bad-input tests (`e2e_faults`,
//! `e2e_signals`, `e2e_load`, `e2e_bad_input`), on top of the end-to-end
//! harness (`e2e_support`): the collectors that misbehave, written in Rust
//! because a misbehaving collector needs no protocol knowledge, and the
//! readers of what the simulator says about itself.
//!
//! - [`refused_port`]: a port nobody listens on (connection refused).
//! - [`Hanging`]: accepts connections, reads everything, never answers; it
//!   also counts connections, so "nothing was sent here" is checkable.
//! - [`ErrorResponder`]: an HTTP/1.1 server that answers every request with
//!   one status (503), counting the requests.
//! - [`Summary`]: the simulator's `--summary-json` (step times, peak memory,
//!   the telemetry report).
//! - [`RankReport`] / [`rank_reports`]: the per-rank shutdown report lines
//!   (`telemetry (rank N) -> ...: spans: X exported, Y dropped (...)`) that
//!   every exporting rank prints on stderr.
//! - [`run_timed`]: runs the simulator and measures how long it took to exit
//!   after its last training step (the last progress line).
//!
//! Every thread here is bounded in time and stops when its owner is dropped.

#![expect(dead_code, reason = "each test binary uses a part of the support module")]

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::e2e_support::{Finished, Proc, Records};

/// The longest any fault listener runs, whatever happens to its owner.
const LISTENER_LIFETIME: Duration = Duration::from_secs(300);
/// The most connections a fault listener serves.
const MAX_CONNECTIONS: u64 = 10_000;

/// A port on 127.0.0.1 on which nothing listens (bound, then released):
/// connecting to it is refused.
pub(crate) fn refused_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    port
}

/// A listener thread with a stop flag and a connection counter.
#[derive(Debug)]
struct Listener {
    port: u16,
    stop: Arc<AtomicBool>,
    connections: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Listens on a free 127.0.0.1 port; `serve` handles each connection
    /// (on its own thread) until it returns or `stop` is set.
    fn start(serve: impl Fn(TcpStream, &AtomicBool) + Send + Sync + 'static) -> Listener {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(AtomicU64::new(0));
        let (stop2, connections2) = (Arc::clone(&stop), Arc::clone(&connections));
        let serve = Arc::new(serve);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut handlers = Vec::new();
            while !stop2.load(Ordering::Relaxed)
                && started.elapsed() < LISTENER_LIFETIME
                && connections2.load(Ordering::Relaxed) < MAX_CONNECTIONS
            {
                match listener.accept() {
                    Ok((stream, _)) => {
                        connections2.fetch_add(1, Ordering::Relaxed);
                        let _ = stream.set_nonblocking(false);
                        let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
                        let (serve, stop3) = (Arc::clone(&serve), Arc::clone(&stop2));
                        handlers.push(std::thread::spawn(move || serve(stream, &stop3)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            stop2.store(true, Ordering::Relaxed);
            for handler in handlers {
                let _ = handler.join();
            }
        });
        Listener { port, stop, connections, thread: Some(thread) }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether a stopped or timed-out listener should end a handler's loop.
fn finished(stop: &AtomicBool, started: Instant) -> bool {
    stop.load(Ordering::Relaxed) || started.elapsed() > LISTENER_LIFETIME
}

/// A "collector" that accepts connections and never answers: it reads and
/// discards whatever arrives until it is dropped.
#[derive(Debug)]
pub(crate) struct Hanging {
    listener: Listener,
    bytes: Arc<AtomicU64>,
}

impl Hanging {
    /// Starts it on a free port.
    pub(crate) fn start() -> Hanging {
        let bytes = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&bytes);
        let listener = Listener::start(move |mut stream, stop| {
            let started = Instant::now();
            let mut buffer = [0_u8; 16 * 1024];
            while !finished(stop, started) {
                match stream.read(&mut buffer) {
                    Ok(0) => return,
                    Ok(n) => {
                        counted.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => return,
                }
            }
        });
        Hanging { listener, bytes }
    }

    /// Its port.
    pub(crate) fn port(&self) -> u16 {
        self.listener.port
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.listener.port)
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> u64 {
        self.listener.connections.load(Ordering::Relaxed)
    }

    /// Bytes received so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// An HTTP/1.1 server that answers every request with one status and an
/// empty body (keep-alive), counting the requests.
#[derive(Debug)]
pub(crate) struct ErrorResponder {
    listener: Listener,
    requests: Arc<AtomicU64>,
}

impl ErrorResponder {
    /// Answers every request with `status` (e.g. `503 Service Unavailable`).
    pub(crate) fn start(status: &'static str) -> ErrorResponder {
        let requests = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&requests);
        let listener = Listener::start(move |stream, stop| serve_errors(stream, stop, status, &counted));
        ErrorResponder { listener, requests }
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.listener.port)
    }

    /// Requests answered so far.
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// Reads requests (head, then a `Content-Length` body) and answers each
/// with `status`, until the peer closes or the listener stops.
fn serve_errors(stream: TcpStream, stop: &AtomicBool, status: &str, requests: &AtomicU64) {
    let started = Instant::now();
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    while !finished(stop, started) {
        // The head, line by line (a read timeout only means "nothing yet").
        let mut content_length = 0_usize;
        let mut saw_request_line = false;
        loop {
            if finished(stop, started) {
                return;
            }
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    if line.is_empty() {
                        continue;
                    }
                }
                Err(_) => return,
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                if saw_request_line {
                    break;
                }
                continue;
            }
            saw_request_line = true;
            if let Some((name, value)) = trimmed.split_once(':')
                && name.trim().eq_ignore_ascii_case("content-length")
            {
                content_length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0_u8; content_length.min(64 * 1024 * 1024)];
        let mut read = 0;
        while read < body.len() && !finished(stop, started) {
            match reader.read(&mut body[read..]) {
                Ok(0) => return,
                Ok(n) => read += n,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
        requests.fetch_add(1, Ordering::Relaxed);
        let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nContent-Type: text/plain\r\n\r\n");
        if writer.write_all(reply.as_bytes()).and_then(|()| writer.flush()).is_err() {
            return;
        }
    }
}

/// The simulator's `--summary-json`.
#[derive(Clone, Debug)]
pub(crate) struct Summary {
    /// The whole document.
    pub(crate) json: Value,
}

impl Summary {
    /// Reads it from `path`.
    pub(crate) fn read(path: &Path) -> Summary {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("no summary at {}: {e}", path.display()));
        Summary { json: serde_json::from_str(&text).unwrap() }
    }

    /// Each iteration's step time, ms.
    pub(crate) fn step_times_ms(&self) -> Vec<f64> {
        self.json["step_times_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
    }

    /// The last rank's peak resident memory.
    pub(crate) fn peak_memory_bytes(&self) -> u64 {
        self.json["peak_memory_bytes"].as_u64().unwrap()
    }

    /// `telemetry.<key>` as an integer.
    pub(crate) fn telemetry_u64(&self, key: &str) -> u64 {
        self.json["telemetry"][key].as_u64().unwrap_or_else(|| panic!("telemetry.{key} in {}", self.json))
    }

    /// The shutdown report as text.
    pub(crate) fn report(&self) -> String {
        self.json["telemetry"]["report"].as_str().unwrap_or_default().to_string()
    }

    /// Iterations run.
    pub(crate) fn iterations_run(&self) -> u64 {
        self.json["iterations_run"].as_u64().unwrap()
    }

    /// Panics unless every step was shorter than `bound_ms`: no step waited
    /// on the exporter (a waiting step takes an export timeout or a retry
    /// backoff, seconds).
    pub(crate) fn assert_no_step_waited(&self, bound_ms: f64, what: &str) {
        let times = self.step_times_ms();
        assert!(!times.is_empty(), "{what}: no step times");
        let (slowest, at) =
            times.iter().enumerate().map(|(i, t)| (*t, i + 1)).fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
        assert!(slowest < bound_ms, "{what}: iteration {at} took {slowest:.1} ms (bound {bound_ms} ms); {times:?}");
    }
}

/// One exporting rank's shutdown report, as it prints it on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RankReport {
    /// The rank.
    pub(crate) rank: u32,
    /// Spans exported.
    pub(crate) exported: u64,
    /// Spans dropped, all reasons.
    pub(crate) dropped: u64,
    /// Dropped because the queue was full.
    pub(crate) queue_full: u64,
    /// Dropped after the retry window.
    pub(crate) export_failed: u64,
    /// Still queued at shutdown's deadline.
    pub(crate) at_shutdown: u64,
    /// Failed export attempts.
    pub(crate) export_errors: u64,
    /// Metric points exported.
    pub(crate) metric_points: u64,
}

/// The number before `label` in `text` (`"12 exported"` → 12).
fn number_before(text: &str, label: &str) -> Option<u64> {
    let at = text.find(label)?;
    text[..at].split(|c: char| !c.is_ascii_digit()).rev().find(|s| !s.is_empty())?.parse().ok()
}

impl RankReport {
    /// Parses the text of a report
    /// (`spans: X exported, Y dropped (a queue full, b export failed, c at
    /// shutdown), E export errors; metric points: P exported, ...`).
    pub(crate) fn parse(rank: u32, report: &str) -> Option<RankReport> {
        let spans = report.split("spans: ").nth(1)?;
        let (spans, metrics) = spans.split_once("metric points: ")?;
        Some(RankReport {
            rank,
            exported: number_before(spans, " exported")?,
            dropped: number_before(spans, " dropped")?,
            queue_full: number_before(spans, " queue full")?,
            export_failed: number_before(spans, " export failed")?,
            at_shutdown: number_before(spans, " at shutdown")?,
            export_errors: number_before(spans, " export errors")?,
            metric_points: number_before(metrics, " exported")?,
        })
    }
}

/// Every `telemetry (rank N) -> ...: <report>` line of `stderr`, by rank.
pub(crate) fn rank_reports(stderr: &str) -> BTreeMap<u32, RankReport> {
    stderr
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("telemetry (rank ")?;
            let (rank, rest) = rest.split_once(')')?;
            let rank: u32 = rank.trim().parse().ok()?;
            RankReport::parse(rank, rest)
        })
        .map(|r| (r.rank, r))
        .collect()
}

/// Span ids (trace id, span id) received by a sink, each once.
pub(crate) fn unique_spans(records: &Records) -> HashSet<(String, String)> {
    records.spans.iter().map(|s| (s.trace_id.clone(), s.span_id.clone())).collect()
}

/// Unique spans of rank `rank` (by the resource's `dl.rank`).
pub(crate) fn unique_spans_of(records: &Records, rank: i64) -> HashSet<(String, String)> {
    records.spans.iter().filter(|s| s.rank() == Some(rank)).map(|s| (s.trace_id.clone(), s.span_id.clone())).collect()
}

/// A finished run and how long it took to exit after its last step.
#[derive(Debug)]
pub(crate) struct TimedRun {
    /// The outcome.
    pub(crate) finished: Finished,
    /// From the moment the last progress line (`iter N/N `) appeared on
    /// stderr to the moment the process had exited (to 10 ms).
    pub(crate) after_last_step: Duration,
}

/// Waits (at most `limit`) for `proc`, a run of `iterations` iterations
/// whose last rank prints progress; measures the time from its final
/// progress line (always printed) to its exit.
pub(crate) fn run_timed(mut proc: Proc, iterations: u32, limit: Duration) -> TimedRun {
    let needle = format!("iter {iterations}/{iterations} ");
    let deadline = Instant::now() + limit;
    let mut last_step: Option<Instant> = None;
    loop {
        if last_step.is_none() && proc.stderr_text().contains(&needle) {
            last_step = Some(Instant::now());
        }
        if let Some(status) = proc.try_wait() {
            let exited = Instant::now();
            let finished = proc.wait(Duration::from_secs(1));
            assert_eq!(finished.status.code(), status.code());
            // The line and the exit can both fall between this loop's read
            // of stderr and its `try_wait`: then the exit is the bound.
            let last = last_step.or_else(|| finished.stderr.contains(&needle).then_some(exited));
            let last =
                last.unwrap_or_else(|| panic!("the run printed no {needle:?} line ({status}):\n{}", finished.stderr));
            return TimedRun { after_last_step: exited.duration_since(last), finished };
        }
        if Instant::now() > deadline {
            // Proc::wait kills it and panics with its output.
            let finished = proc.wait(Duration::ZERO);
            panic!("the run exited just as its {limit:?} ran out: {}\n{}", finished.status, finished.stderr);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `stderr` shows a panic.
pub(crate) fn panicked(stderr: &str) -> bool {
    stderr.contains("panicked at") || stderr.contains("RUST_BACKTRACE")
}
