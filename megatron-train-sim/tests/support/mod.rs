//! Shared by the telemetry tests: running the binary with every wait
//! bounded, and a small reader of the `file` exporter's OTLP/JSON lines
//! (each line one `ExportTraceServiceRequest` or
//! `ExportMetricsServiceRequest`: `resourceSpans[].scopeSpans[].spans[]`
//! with hex ids, `resourceMetrics[].scopeMetrics[].metrics[]`).

#![expect(dead_code, reason = "each test binary uses a part of the support module")]

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod temp_dir;
pub(crate) use temp_dir::TempDir;

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_megatron-train-sim");
/// Small and quick: 4 layers of width 32.
pub(crate) const SMALL: &[&str] = &["--hidden-size", "32", "--seq-length", "16"];

/// Variables of the test runner's environment that would change what the
/// simulator does; removed from every child.
const CLEARED: &[&str] = &[
    "MEGATRON_OTEL_ENABLED",
    "NEMO_LENS_ENABLED",
    "OTEL_SDK_DISABLED",
    "MEGATRON_OTEL_EXPORTER",
    "NEMO_LENS_EXPORTER",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "MEGATRON_OTEL_RUN_ID",
    "NEMO_LENS_RUN_ID",
    "MEGATRON_OTEL_LAUNCH_ID",
    "NEMO_LENS_LAUNCH_ID",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "MEGATRON_OTEL_SPAN_GROUPS",
    "NEMO_LENS_SPAN_GROUPS",
    "MEGATRON_OTEL_RANK_STRATEGY",
    "NEMO_LENS_RANK_STRATEGY",
    "NEMO_LENS_EXPORT_STRATEGY",
    "MEGATRON_OTEL_FILE_DIR",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "MEGATRON_OTEL_RANK_METRICS",
    "NEMO_LENS_RANK_METRICS",
    "SLURM_JOB_ID",
    "SLURM_JOB_START_TIME",
    "SLURM_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "LENS_LAUNCH_SCRIPT_START_TIME",
    "LENS_LAUNCH_SCRIPT_PRESRUN_TIME",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "MEGATRON_TRAIN_SIM_ROLE",
    "TRACEPARENT",
    "TRACESTATE",
    "BAGGAGE",
];

/// A fresh, empty directory under the system's temporary directory,
/// removed when the test passes.
pub(crate) fn temp_dir(name: &str) -> TempDir {
    TempDir::fresh("mtsim", name)
}

/// The binary with `args`, run in `dir` (also its `TMPDIR`), with a clean
/// environment, in a process group of its own that its ranks join (so that
/// [`ChildGuard`] and [`wait_bounded`] kill them with it).
pub(crate) fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .process_group(0);
    for variable in CLEARED {
        command.env_remove(variable);
    }
    // Temporary files (the heartbeat without `--save`) stay in the test's directory.
    command.env("TMPDIR", dir);
    command
}

/// A child started from [`command`] (the leader of its own process group),
/// killed with its whole group and reaped when dropped while it still runs:
/// a failed assertion leaves no launcher or rank behind (holding CPU, ports,
/// or the stderr pipe that a reader thread waits on).
#[derive(Debug)]
pub(crate) struct ChildGuard(Child);

impl ChildGuard {
    /// Spawns `command` (from [`command`]).
    pub(crate) fn spawn(command: &mut Command) -> ChildGuard {
        ChildGuard(command.spawn().unwrap_or_else(|e| panic!("cannot start {command:?}: {e}")))
    }
}

impl std::ops::Deref for ChildGuard {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            kill_group_and_reap(&mut self.0);
        }
    }
}

/// Kills `child`, which runs (not reaped: its pid is still its group's id),
/// with its process group, and reaps it.
fn kill_group_and_reap(child: &mut Child) {
    let pid = i32::try_from(child.id()).expect("pids fit in i32");
    // SAFETY: `killpg` has no memory-safety preconditions.
    unsafe { libc::killpg(pid, libc::SIGKILL) };
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits for `child` at most `limit`; kills it (with its process group) and
/// fails the test after.
pub(crate) fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            kill_group_and_reap(child);
            panic!("the simulator did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Spawns `command`, drains its stderr on a thread and waits at most
/// `limit`; the status and stderr.
pub(crate) fn run_command(mut command: Command, limit: Duration) -> (ExitStatus, String) {
    let mut child = ChildGuard::spawn(&mut command);
    let reader = drain_stderr(&mut child);
    let status = wait_bounded(&mut child, limit);
    (status, reader.join().unwrap())
}

/// Reads `child`'s stderr on a thread (so that it never blocks on a full pipe).
pub(crate) fn drain_stderr(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::Read as _;
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    })
}

/// Waits until `path` lists `ranks` "RANK PID" lines (at most 30 s).
pub(crate) fn read_pids(path: &Path, ranks: usize) -> Vec<i32> {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            let pids: Vec<i32> = text.lines().filter_map(|l| l.split_whitespace().nth(1)?.parse().ok()).collect();
            if pids.len() == ranks {
                return pids;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no pids file");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` to `pid`.
pub(crate) fn kill(pid: i32, signal: i32) {
    // SAFETY: `kill` has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill({pid}, {signal})");
}

/// `base` followed by `extra`.
pub(crate) fn with(base: &[&'static str], extra: &[&'static str]) -> Vec<&'static str> {
    base.iter().chain(extra).copied().collect()
}

/// One exported span.
#[derive(Clone, Debug)]
pub(crate) struct Span {
    /// The rank whose file it came from.
    pub(crate) rank: u32,
    /// The span name.
    pub(crate) name: String,
    /// Hex trace id.
    pub(crate) trace_id: String,
    /// Hex span id.
    pub(crate) span_id: String,
    /// Hex parent span id (`None` for a root).
    pub(crate) parent: Option<String>,
    /// Links: (trace id, span id).
    pub(crate) links: Vec<(String, String)>,
    /// Attributes, values as plain JSON (strings, numbers, booleans, arrays).
    pub(crate) attributes: BTreeMap<String, Value>,
    /// Start and end, ns since the epoch.
    pub(crate) start: u64,
    /// End, ns since the epoch.
    pub(crate) end: u64,
}

/// What one rank's trace file holds.
#[derive(Debug)]
pub(crate) struct RankTraces {
    /// The rank (from the file name).
    pub(crate) rank: u32,
    /// The resource attributes of its export requests (the first request's).
    pub(crate) resource: BTreeMap<String, Value>,
    /// Every span, in file order.
    pub(crate) spans: Vec<Span>,
}

/// One metric data point.
#[derive(Clone, Debug)]
pub(crate) struct MetricPoint {
    /// The rank whose file it came from.
    pub(crate) rank: u32,
    /// The instrument name.
    pub(crate) name: String,
    /// Its unit (empty when none).
    pub(crate) unit: String,
    /// `histogram`, `gauge` or `sum`.
    pub(crate) kind: String,
    /// Whether a `sum` is monotonic.
    pub(crate) monotonic: bool,
    /// The value: a gauge's or sum's value, a histogram's sum.
    pub(crate) value: f64,
    /// A histogram's count (1 for the others).
    pub(crate) count: u64,
    /// The point's time, ns since the epoch.
    pub(crate) time: u64,
}

/// An OTLP/JSON `AnyValue` as plain JSON.
fn any_value(value: &Value) -> Value {
    if let Some(s) = value.get("stringValue") {
        return s.clone();
    }
    if let Some(b) = value.get("boolValue") {
        return b.clone();
    }
    if let Some(i) = value.get("intValue") {
        let n = i.as_i64().or_else(|| i.as_str().and_then(|s| s.parse().ok())).unwrap();
        return Value::from(n);
    }
    if let Some(d) = value.get("doubleValue") {
        return d.clone();
    }
    if let Some(array) = value.get("arrayValue") {
        let values = array.get("values").and_then(Value::as_array).cloned().unwrap_or_default();
        return Value::Array(values.iter().map(any_value).collect());
    }
    Value::Null
}

fn attributes(list: Option<&Value>) -> BTreeMap<String, Value> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|kv| (kv["key"].as_str().unwrap().to_string(), any_value(&kv["value"])))
        .collect()
}

fn nanos(value: &Value) -> u64 {
    value.as_u64().or_else(|| value.as_str().and_then(|s| s.parse().ok())).unwrap_or(0)
}

fn non_empty(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty() && s.chars().any(|c| c != '0')).map(str::to_string)
}

/// The rank in a file name `<prefix>-rank<N>.jsonl`.
fn rank_of(path: &Path, prefix: &str) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix(prefix)?.strip_prefix("-rank")?.strip_suffix(".jsonl")?.parse().ok()
}

fn files(dir: &Path, prefix: &str) -> Vec<(u32, PathBuf)> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|path| Some((rank_of(&path, prefix)?, path)))
        .collect();
    found.sort();
    found
}

/// The ranks that wrote a trace file under `dir`.
pub(crate) fn trace_ranks(dir: &Path) -> Vec<u32> {
    files(dir, "traces").into_iter().map(|(rank, _)| rank).collect()
}

/// Every `traces-rank<N>.jsonl` under `dir`, parsed.
pub(crate) fn read_traces(dir: &Path) -> Vec<RankTraces> {
    files(dir, "traces")
        .into_iter()
        .map(|(rank, path)| {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut resource = BTreeMap::new();
            let mut spans = Vec::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let request: Value = serde_json::from_str(line).unwrap();
                for resource_spans in request["resourceSpans"].as_array().into_iter().flatten() {
                    if resource.is_empty() {
                        resource = attributes(resource_spans["resource"].get("attributes"));
                    }
                    for scope in resource_spans["scopeSpans"].as_array().into_iter().flatten() {
                        for span in scope["spans"].as_array().into_iter().flatten() {
                            spans.push(Span {
                                rank,
                                name: span["name"].as_str().unwrap().to_string(),
                                trace_id: span["traceId"].as_str().unwrap().to_string(),
                                span_id: span["spanId"].as_str().unwrap().to_string(),
                                parent: non_empty(&span["parentSpanId"]),
                                links: span["links"]
                                    .as_array()
                                    .into_iter()
                                    .flatten()
                                    .map(|l| {
                                        (
                                            l["traceId"].as_str().unwrap().to_string(),
                                            l["spanId"].as_str().unwrap().to_string(),
                                        )
                                    })
                                    .collect(),
                                attributes: attributes(span.get("attributes")),
                                start: nanos(&span["startTimeUnixNano"]),
                                end: nanos(&span["endTimeUnixNano"]),
                            });
                        }
                    }
                }
            }
            RankTraces { rank, resource, spans }
        })
        .collect()
}

/// Every data point of every `metrics-rank<N>.jsonl` under `dir`, in file order.
pub(crate) fn read_metrics(dir: &Path) -> Vec<MetricPoint> {
    let mut points = Vec::new();
    for (rank, path) in files(dir, "metrics") {
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let request: Value = serde_json::from_str(line).unwrap();
            for resource in request["resourceMetrics"].as_array().into_iter().flatten() {
                for scope in resource["scopeMetrics"].as_array().into_iter().flatten() {
                    for metric in scope["metrics"].as_array().into_iter().flatten() {
                        for kind in ["histogram", "gauge", "sum"] {
                            let Some(data) = metric.get(kind) else { continue };
                            for point in data["dataPoints"].as_array().into_iter().flatten() {
                                let value = point
                                    .get("asDouble")
                                    .and_then(Value::as_f64)
                                    .or_else(|| point.get("asInt").map(|v| nanos(v) as f64))
                                    .or_else(|| point.get("sum").and_then(Value::as_f64))
                                    .unwrap_or(f64::NAN);
                                points.push(MetricPoint {
                                    rank,
                                    name: metric["name"].as_str().unwrap().to_string(),
                                    unit: metric["unit"].as_str().unwrap_or("").to_string(),
                                    kind: kind.to_string(),
                                    monotonic: data.get("isMonotonic").and_then(Value::as_bool).unwrap_or(false),
                                    value,
                                    count: point.get("count").map_or(1, nanos),
                                    time: nanos(&point["timeUnixNano"]),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    points
}

/// The run directories under `dir/telemetry/`: every subdirectory but the
/// crash-safe spool's (`telemetry/lens-spool/`, where the spool lives when
/// the run has no `--save` directory; docs/crashes.md).
pub(crate) fn run_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir.join("telemetry"))
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    runs.retain(|path| path.file_name().is_some_and(|name| name != lens_fallbacks::spool::SPOOL_SUBDIRECTORY));
    runs.sort();
    runs
}

/// The one run directory under `dir/telemetry/` ([`run_dirs`]).
pub(crate) fn run_dir(dir: &Path) -> PathBuf {
    let entries = run_dirs(dir);
    assert_eq!(entries.len(), 1, "one run directory expected: {entries:?}");
    entries.into_iter().next().unwrap()
}
