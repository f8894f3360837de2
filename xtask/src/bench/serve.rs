//! The inference server's tokens per second and p99 request latency at a
//! fixed concurrency, telemetry off against the `default` span groups.
//!
//! The simulator trains a two-iteration checkpoint once, then each round
//! starts `megatron-train-sim serve` twice (off and `--otel-enabled
//! --otel-span-groups default`, the file exporter in a scratch directory;
//! the rounds alternate which side runs first)
//! and drives it with a small std-only HTTP/1.1 load client: `CONCURRENCY`
//! threads, each sending `REQUESTS` non-streaming completions of
//! `MAX_TOKENS` tokens one after the other. Throughput is the tokens
//! returned over the wall time; p99 is over every request's latency. The
//! ratios (off over on for throughput, on over off for p99) are the medians
//! of the per-round ratios.
//!
//! Each run also reads the server's CPU time (every thread, user and system,
//! from `/proc/<pid>/stat`) when the load starts and once the process has
//! exited after its drain (before it is reaped), so that the telemetry
//! shutdown's final flush counts: over the tokens generated, that is the
//! server's CPU per generated token, which decides `serve_tokens_per_sec`
//! when the throughput ratios spread wider than its budget
//! ([`super::report::CpuCost`]).
//!
//! On a shared machine that CPU figure moves by ±20% from run to run, far
//! more than the budget's 2%. When its rounds spread wider than the budget
//! too, the whole server's instructions per generated token decide
//! ([`instructions_per_token`]): every thread, under callgrind, off and at
//! `default`, each side run with a small load and with twice that load, so
//! that start-up and the drain cancel out.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::say;

const CONCURRENCY: usize = 16;
const REQUESTS: usize = 20;
const MAX_TOKENS: u64 = 64;

/// One run: tokens per second, the p99 latency in milliseconds, and the
/// server's CPU per generated token in milliseconds (`None` without
/// `/proc`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Load {
    pub(crate) tokens_per_sec: f64,
    pub(crate) p99_ms: f64,
    pub(crate) cpu_ms_per_token: Option<f64>,
}

/// Every round's (off, on) loads.
pub(crate) struct Measured {
    pub(crate) rounds: Vec<(Load, Load)>,
}

fn clean(binary: &Path, scratch: &Path) -> Command {
    clean_under(binary, scratch, None)
}

/// [`clean`], run under callgrind writing to `callgrind_out` when given.
fn clean_under(binary: &Path, scratch: &Path, callgrind_out: Option<&Path>) -> Command {
    let mut cmd = match callgrind_out {
        None => Command::new(binary),
        Some(out) => {
            // One compute thread, so that no thread pool's spinning is counted.
            let mut cmd = Command::new("valgrind");
            cmd.arg("--tool=callgrind").arg(format!("--callgrind-out-file={}", out.display())).arg(binary);
            cmd.env("RAYON_NUM_THREADS", "1");
            cmd
        }
    };
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("OTEL_") || key.starts_with("MEGATRON_OTEL") || key.starts_with("NEMO_LENS") {
            cmd.env_remove(key);
        }
    }
    cmd.env("MEGATRON_OTEL_FILE_DIR", scratch.join("telemetry")).env("MEGATRON_OTEL_RUN_ID", "xtask-bench-serve");
    cmd.current_dir(scratch);
    cmd
}

fn start(binary: &Path, scratch: &Path, telemetry: bool, callgrind_out: Option<&Path>) -> Result<(Child, u16)> {
    let mut cmd = clean_under(binary, scratch, callgrind_out);
    cmd.args(["serve", "--load", "ckpt", "--port", "0", "--max-batch-size", &CONCURRENCY.to_string()]);
    if telemetry {
        cmd.args(["--otel-enabled", "--otel-span-groups", "default"]);
        super::telemetry_env::apply(&mut cmd);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().context("could not start the server")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok());
    match port {
        Some(port) => Ok((child, port)),
        None => {
            let _ = child.kill();
            bail!("the server printed no address: {line:?}")
        }
    }
}

/// A process's state and CPU time so far (user + system, every thread, the
/// ended ones included), from `/proc/<pid>/stat`; `None` without `/proc`.
fn proc_stat(pid: u32) -> Option<(char, Duration)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text, clock_ticks())
}

/// The state (field 3) and `utime + stime` (fields 14 and 15, in clock
/// ticks) of a `/proc/<pid>/stat` line; the command name (field 2, in
/// parentheses) may hold spaces and parentheses, so fields count from its
/// last `)`.
fn parse_stat(text: &str, ticks_per_second: u64) -> Option<(char, Duration)> {
    let after_name = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((state, Duration::from_secs_f64(ticks as f64 / ticks_per_second.max(1) as f64)))
}

/// Clock ticks per second of `/proc`'s times (`getconf CLK_TCK`; 100, the
/// value on Linux, when that cannot be asked).
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// Sends SIGTERM and waits for the drain; the server's CPU time over its
/// whole life, read once it has exited and before it is reaped (`None`
/// without `/proc`).
fn stop(mut child: Child, drain: Duration) -> Result<Option<Duration>> {
    Command::new("kill").arg("-TERM").arg(child.id().to_string()).status()?;
    let deadline = Instant::now() + drain;
    let exited = |status: std::process::ExitStatus, cpu: Option<Duration>| {
        if status.success() { Ok(cpu) } else { bail!("the server exited with {status}") }
    };
    loop {
        // A zombie's stat still holds its CPU time; reaping removes it.
        match proc_stat(child.id()) {
            Some(('Z', time)) => return exited(child.wait()?, Some(time)),
            Some(_) => {}
            None => {
                if let Some(status) = child.try_wait()? {
                    return exited(status, None);
                }
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the server did not drain within {drain:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One completion; the tokens it returned.
fn request(port: u16, client: usize, index: usize) -> Result<u64> {
    let body = format!(
        r#"{{"model":"megatron-sim","prompt":"client {client} request {index}: ","max_tokens":{MAX_TOKENS},"seed":{index}}}"#
    );
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        stream,
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("the server answered {head}: {body}");
    }
    let value: serde_json::Value = serde_json::from_str(body)?;
    value["usage"]["completion_tokens"].as_u64().context("no usage in the answer")
}

/// The tokens generated, their rate, and the p99 latency in milliseconds,
/// with `requests` requests per client.
fn drive(port: u16, requests: usize) -> Result<(u64, f64, f64)> {
    let started = Instant::now();
    let clients: Vec<_> = (0..CONCURRENCY)
        .map(|client| {
            std::thread::spawn(move || -> Result<Vec<(u64, Duration)>> {
                (0..requests)
                    .map(|index| {
                        let t = Instant::now();
                        Ok((request(port, client, index)?, t.elapsed()))
                    })
                    .collect()
            })
        })
        .collect();
    let mut tokens = 0;
    let mut latencies = Vec::new();
    for client in clients {
        for (n, latency) in client.join().map_err(|_| anyhow::anyhow!("a load thread panicked"))?? {
            tokens += n;
            latencies.push(latency.as_secs_f64() * 1e3);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let p99 = latencies[((latencies.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)];
    Ok((tokens, tokens as f64 / wall, p99))
}

/// Trains the checkpoint, then runs `rounds` rounds of one run off and one
/// at `default`, in alternating order.
pub(crate) fn measure(binary: &Path, scratch: &Path, rounds: usize) -> Result<Measured> {
    let out = clean(binary, scratch).args(["--train-iters", "2", "--save", "ckpt"]).output()?;
    if !out.status.success() {
        bail!("training the checkpoint failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut measured = Measured { rounds: Vec::new() };
    for round in 0..rounds {
        say(&format!("xtask bench: serve round {}/{rounds}", round + 1));
        let mut pair = [None, None];
        // Each side goes first in every other round: whichever run comes
        // first in a round (cold caches, a machine still settling) is not
        // always the same side.
        let order = if round % 2 == 0 { [(0, false), (1, true)] } else { [(1, true), (0, false)] };
        for (slot, telemetry) in order {
            let (child, port) = start(binary, scratch, telemetry, None)?;
            let cpu_before = proc_stat(child.id()).map(|(_, time)| time);
            let load = drive(port, REQUESTS);
            let cpu_at_exit = stop(child, Duration::from_secs(30))?;
            let (tokens, tokens_per_sec, p99_ms) = load?;
            let cpu_ms_per_token = cpu_before
                .zip(cpu_at_exit)
                .filter(|_| tokens > 0)
                .map(|(before, after)| after.saturating_sub(before).as_secs_f64() * 1e3 / tokens as f64);
            let cpu =
                cpu_ms_per_token.map_or_else(|| "no CPU figure".to_string(), |ms| format!("{:.2} µs CPU", ms * 1e3));
            let side = if telemetry { "default" } else { "off" };
            say(&format!("xtask bench: serve {side}: {tokens} tokens, {tokens_per_sec:.1} tokens/s, {cpu} per token"));
            pair[slot] = Some(Load { tokens_per_sec, p99_ms, cpu_ms_per_token });
        }
        if let [Some(off), Some(on)] = pair {
            measured.rounds.push((off, on));
        }
    }
    Ok(measured)
}

/// Requests per client of the smaller callgrind load (the larger sends twice
/// as many): 16 × 2 × 64 = 2,048 tokens, a few seconds under callgrind.
const INSTRUCTION_REQUESTS: usize = 2;

/// The whole server's instructions (every thread) for one load of
/// `requests` requests per client, and the tokens it generated.
fn instructions_for(binary: &Path, scratch: &Path, telemetry: bool, requests: usize) -> Result<(u64, u64)> {
    let out = scratch.join("serve.callgrind");
    let _ = std::fs::remove_file(&out);
    let (child, port) = start(binary, scratch, telemetry, Some(&out))?;
    let load = drive(port, requests);
    // Under callgrind the drain (telemetry's final flush included) is slow.
    stop(child, Duration::from_secs(300))?;
    let (tokens, _, _) = load?;
    let text = std::fs::read_to_string(&out).with_context(|| format!("callgrind wrote no {}", out.display()))?;
    let total = super::callgrind::totals(&text).with_context(|| format!("no totals line in {}", out.display()))?;
    Ok((total, tokens))
}

/// The whole server's instructions per generated token (off, at
/// `default`): each side with [`INSTRUCTION_REQUESTS`] and twice as many
/// requests per client, the difference in instructions over the difference
/// in tokens, so that start-up, the checkpoint load and the drain cancel.
pub(crate) fn instructions_per_token(binary: &Path, scratch: &Path) -> Result<(f64, f64)> {
    let mut sides = [0.0; 2];
    for (slot, telemetry) in [(0, false), (1, true)] {
        let side = if telemetry { "default" } else { "off" };
        say(&format!("xtask bench: serve {side} under callgrind"));
        let (once, once_tokens) = instructions_for(binary, scratch, telemetry, INSTRUCTION_REQUESTS)?;
        let (twice, twice_tokens) = instructions_for(binary, scratch, telemetry, 2 * INSTRUCTION_REQUESTS)?;
        if twice_tokens <= once_tokens {
            bail!("the larger callgrind load generated {twice_tokens} tokens, the smaller {once_tokens}");
        }
        sides[slot] = (twice as f64 - once as f64) / (twice_tokens - once_tokens) as f64;
        say(&format!("xtask bench: serve {side}: {:.0} instructions per token (every thread)", sides[slot]));
    }
    Ok((sides[0], sides[1]))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_stat;

    #[test]
    fn stat_lines_give_the_state_and_the_cpu_of_every_thread() {
        // A zombie whose name holds a space and a parenthesis: 150 + 37 ticks.
        let line = "4242 (megatron (sim) Z 1 4242 4242 0 -1 4194560 900 0 0 0 150 37 0 0 20 0 9 0 1000 0 0";
        assert_eq!(parse_stat(line, 100), Some(('Z', Duration::from_millis(1870))));
        assert_eq!(parse_stat(line, 1000), Some(('Z', Duration::from_millis(187))));
        assert_eq!(parse_stat("4242 (x) R 1 2", 100), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_a_state_and_a_cpu_time() {
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (state, _) = parse_stat(&own, 100).unwrap();
        assert!("RSD".contains(state), "{state}");
    }
}
