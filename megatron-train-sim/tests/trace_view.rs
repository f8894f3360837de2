//! End-to-end tests of `megatron-train-sim trace-view`: a hand-written
//! two-rank `file` export (nesting, an overlap, a cross-rank link, a link
//! to a span that was not exported, malformed input) goes through the
//! built binary, and the tests read the Chrome trace it writes and the
//! table it prints, as a user would.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

mod support;
use support::temp_dir;

const BIN: &str = env!("CARGO_BIN_EXE_megatron-train-sim");
/// The export's earliest span starts here (Unix nanoseconds).
const BASE: u64 = 1_700_000_000_000_000_000;
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const OTHER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn trace_view(args: &[&str]) -> Output {
    Command::new(BIN).arg("trace-view").args(args).stdin(Stdio::null()).output().unwrap()
}

/// One OTLP/JSON span; `start_us`/`end_us` are microseconds after `BASE`.
/// Times are strings (as lens-core writes them) unless `numbers`.
fn span(trace: &str, id: &str, parent: &str, name: &str, start_us: u64, end_us: u64, numbers: bool) -> Value {
    let (start, end) = (BASE + start_us * 1000, BASE + end_us * 1000);
    let (start, end) =
        if numbers { (json!(start), json!(end)) } else { (json!(start.to_string()), json!(end.to_string())) };
    json!({
        "traceId": trace, "spanId": id, "parentSpanId": parent, "name": name, "kind": 1,
        "startTimeUnixNano": start, "endTimeUnixNano": end,
        "attributes": [], "events": [], "links": [], "status": {"code": 0, "message": ""},
    })
}

fn with_links(mut span: Value, links: &[(&str, &str)]) -> Value {
    span["links"] = links.iter().map(|(trace, id)| json!({"traceId": trace, "spanId": id, "attributes": []})).collect();
    span
}

/// One `ExportTraceServiceRequest` line.
fn request(rank: Option<u32>, spans: Vec<Value>) -> String {
    let mut resource = vec![json!({"key": "service.name", "value": {"stringValue": "megatron-lm"}})];
    if let Some(rank) = rank {
        resource.push(json!({"key": "dl.rank", "value": {"intValue": rank.to_string()}}));
    }
    json!({"resourceSpans": [{
        "resource": {"attributes": resource},
        "scopeSpans": [{"scope": {"name": "nemo.lens"}, "spans": spans}],
    }]})
    .to_string()
}

/// Rank 0: an interval `megatron.train` [0, 10 ms] holding two iterations
/// (3 ms each) and a send inside the first; a malformed line; then a root of
/// another trace (`async_finalize`, [7, 12 ms]) that overlaps the interval
/// without nesting in it, and a span without an id.
///
/// Rank 1 (no `dl.rank`: the file name tells): its interval [0.5, 10 ms],
/// a receive that links to rank 0's send, an iteration that links to a span
/// nobody exported, and 100 layer spans of 10, 20, ..., 1000 µs.
fn write_export(dir: &Path) {
    let mut iteration =
        span(TRACE, "a000000000000002", "a000000000000001", "megatron.train.iteration", 1000, 4000, true);
    iteration["attributes"] = json!([{"key": "megatron.iteration", "value": {"intValue": "1"}}]);
    let rank0 = [
        request(
            Some(0),
            vec![
                span(TRACE, "a000000000000001", "", "megatron.train", 0, 10_000, false),
                iteration,
                span(TRACE, "a000000000000003", "a000000000000001", "megatron.train.iteration", 5000, 8000, false),
                span(TRACE, "a000000000000004", "a000000000000002", "megatron.p2p.send_forward", 1500, 2000, false),
            ],
        ),
        "{not json".to_string(),
        request(
            Some(0),
            vec![
                span(OTHER_TRACE, "a000000000000005", "", "megatron.checkpoint.async_finalize", 7000, 12_000, false),
                json!({"traceId": TRACE, "name": "no ids", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}),
            ],
        ),
    ];
    let mut spans1 = vec![
        span(TRACE, "b000000000000001", "", "megatron.train", 500, 10_000, false),
        with_links(
            span(TRACE, "b000000000000002", "b000000000000001", "megatron.pp.recv_forward.linked", 2000, 2500, false),
            &[(TRACE, "a000000000000004")],
        ),
        with_links(
            span(TRACE, "b000000000000003", "b000000000000001", "megatron.train.iteration", 3000, 4000, false),
            &[(TRACE, "ffffffffffffffff")],
        ),
    ];
    // 100 layers of 10 µs .. 1000 µs, back to back from 20 ms.
    let mut at = 20_000;
    for k in 1..=100_u64 {
        spans1.push(span(TRACE, &format!("c{k:015x}"), "", "megatron.layer.forward", at, at + 10 * k, false));
        at += 10 * k;
    }
    std::fs::write(dir.join("traces-rank0.jsonl"), rank0.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("traces-rank1.jsonl"), request(None, spans1) + "\n\n").unwrap();
    // Not a traces file: ignored.
    std::fs::write(dir.join("metrics-rank0.jsonl"), "{}\n").unwrap();
}

fn events<'a>(trace: &'a Value, phase: &str) -> Vec<&'a Value> {
    trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == phase).collect()
}

fn slice<'a>(trace: &'a Value, span_id: &str) -> &'a Value {
    events(trace, "X")
        .into_iter()
        .find(|e| e["args"]["span_id"] == span_id)
        .unwrap_or_else(|| panic!("no slice {span_id}"))
}

#[test]
fn a_two_rank_export_becomes_a_chrome_trace_and_a_table() {
    let dir = temp_dir("two-ranks");
    write_export(&dir);
    let out = dir.join("view.json");
    let output = trace_view(&[dir.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();

    // One process per rank, named and sorted by rank (pid = rank + 1).
    let names: Vec<(u64, &str)> = events(&trace, "M")
        .into_iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(names, vec![(1, "rank 0"), (2, "rank 1")]);

    // Every well-formed span is a slice with its times in µs after the
    // earliest span, its attributes and ids in args.
    assert_eq!(events(&trace, "X").len(), 4 + 1 + 3 + 100);
    let iteration = slice(&trace, "a000000000000002");
    assert_eq!((iteration["ts"].as_f64(), iteration["dur"].as_f64()), (Some(1000.0), Some(3000.0)));
    assert_eq!((iteration["pid"].as_u64(), iteration["tid"].as_u64()), (Some(1), Some(1)));
    assert_eq!(iteration["name"], "megatron.train.iteration");
    assert_eq!(iteration["args"]["megatron.iteration"], 1);
    assert_eq!(iteration["args"]["trace_id"], TRACE);
    assert_eq!(iteration["args"]["parent_span_id"], "a000000000000001");
    let receive = slice(&trace, "b000000000000002");
    assert_eq!((receive["ts"].as_f64(), receive["dur"].as_f64()), (Some(2000.0), Some(500.0)));
    assert_eq!((receive["pid"].as_u64(), receive["tid"].as_u64()), (Some(2), Some(1)));
    assert_eq!(trace["otherData"]["start_time_unix_nano"], BASE.to_string());

    // Nested spans share the rank's first thread; the overlapping root of
    // another trace moves to a second one, named as such.
    for id in ["a000000000000001", "a000000000000003", "a000000000000004"] {
        assert_eq!(slice(&trace, id)["tid"], 1, "{id}");
    }
    assert_eq!(slice(&trace, "a000000000000005")["tid"], 2);
    let threads: Vec<(u64, u64, &str)> = events(&trace, "M")
        .into_iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(threads, vec![(1, 1, "spans"), (1, 2, "concurrent spans 1"), (2, 1, "spans")]);

    // The cross-rank link is one flow: start on rank 0's send, end (bound
    // to the enclosing slice) on rank 1's receive, forward in time.
    let (starts, finishes) = (events(&trace, "s"), events(&trace, "f"));
    assert_eq!((starts.len(), finishes.len()), (1, 1));
    let (start, finish) = (starts[0], finishes[0]);
    assert_eq!(start["id"], finish["id"]);
    assert_eq!((start["cat"].clone(), start["name"].clone()), (finish["cat"].clone(), finish["name"].clone()));
    assert_eq!(finish["bp"], "e");
    assert_eq!((start["pid"].as_u64(), start["tid"].as_u64()), (Some(1), Some(1)));
    assert_eq!((finish["pid"].as_u64(), finish["tid"].as_u64()), (Some(2), Some(1)));
    let (from, to) = (start["ts"].as_f64().unwrap(), finish["ts"].as_f64().unwrap());
    assert!(1500.0 < from && from < 2000.0, "flow start {from} is not inside the send [1500, 2000]");
    assert!(2000.0 < to && to < 2500.0, "flow end {to} is not inside the receive [2000, 2500]");
    assert!(from <= to);

    // The table: 100 layers of 10..1000 µs, nearest-rank percentiles.
    let row = |name: &str| -> Vec<String> {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}:\n{stdout}"));
        line.split_whitespace().skip(1).map(str::to_string).collect()
    };
    assert_eq!(row("megatron.layer.forward"), ["100", "50.500", "0.505", "0.500", "0.990"]);
    assert_eq!(row("megatron.train.iteration"), ["3", "7.000", "2.333", "3.000", "3.000"]);
    let totals: Vec<f64> = stdout
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(totals.len(), 6, "{stdout}");
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "not sorted by total: {totals:?}");
    assert!(stdout.contains("read 108 span(s) of 2 rank(s) from 2 file(s); 1 link(s) drawn as flows"), "{stdout}");
    assert!(stdout.contains("1 link(s) point at spans that are not in the export"), "{stdout}");
    assert!(stdout.contains("skipped 1 malformed line(s) and 1 malformed span(s)"), "{stdout}");
    assert!(stdout.contains(&format!("wrote {}", out.display())), "{stdout}");
}

#[test]
fn the_trace_goes_next_to_the_export_by_default() {
    let dir = temp_dir("default-out");
    write_export(&dir);
    let output = trace_view(&[dir.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    assert_eq!(events(&trace, "X").len(), 108);
    // Converting again does not read its own output as input.
    let again = trace_view(&[dir.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("read 108 span(s)"));
}

#[test]
fn a_missing_or_empty_directory_is_a_usage_error() {
    let dir = temp_dir("empty");
    let missing = dir.join("nope");
    let output = trace_view(&[missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot read") && stderr.contains("nope"), "{stderr}");

    // A directory without traces files; it names the run directory below.
    let run = dir.join("telemetry").join("run-1");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("traces-rank0.jsonl"), "").unwrap();
    let output = trace_view(&[dir.join("telemetry").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no traces-rank<N>.jsonl") && stderr.contains("did you mean"), "{stderr}");
    assert!(stderr.contains(&run.display().to_string()), "{stderr}");

    // Traces files with nothing usable in them.
    std::fs::write(run.join("traces-rank0.jsonl"), "garbage\n{\"resourceSpans\": []}\n").unwrap();
    let output = trace_view(&[run.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no spans in") && stderr.contains("1 malformed line(s)"), "{stderr}");
    assert!(!run.join("trace.json").exists());
}

#[test]
fn training_flags_and_the_subcommand_do_not_mix() {
    let output =
        Command::new(BIN).args(["--train-iters", "3", "trace-view", "x"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let help = Command::new(BIN).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("trace-view"));
}
