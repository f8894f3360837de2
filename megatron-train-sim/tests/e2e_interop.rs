//! Interoperability with the Python OpenTelemetry stack: a Python
//! process using the official SDK (`e2e/launch_with_traceparent.py`) starts
//! a job-level span and launches the simulator with its `TRACEPARENT`; at
//! the OTLP sink, every rank's `megatron.startup` span is a child of that
//! Python span, in its trace, and the first `megatron.train` interval links
//! to startup while keeping its own trace id, derived from the run identity.
#![cfg(feature = "otel")]

mod e2e_support;

use std::collections::BTreeSet;
use std::time::Duration;

use e2e_support::{Ctx, Proc, Protocol, Sink, clean_command, python, repo_root, sim_args};
use megatron_telemetry::taxonomy;
use serde_json::Value;

const RANKS: u32 = 2;

#[test]
fn startup_joins_the_trace_of_a_python_sdk_launcher() {
    let ctx = Ctx::new("interop");
    let sink = Sink::start(&ctx);
    let result_path = ctx.path("launcher.json");
    let mut command = clean_command(python());
    command
        .current_dir(ctx.dir())
        .arg(repo_root().join("e2e/launch_with_traceparent.py"))
        .arg("--out")
        .arg(&result_path)
        .args(["--timeout", "120", "--"])
        .arg(e2e_support::BIN)
        .args(sim_args(RANKS, 4))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint(Protocol::Grpc))
        .env("OTEL_EXPORTER_OTLP_HEADERS", e2e_support::canary_headers())
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks");
    let launched = Proc::spawn(&ctx, "python-launcher", command).wait(Duration::from_secs(150));
    launched.assert_success("the Python launcher and the simulator under it");
    let launcher: Value = serde_json::from_str(&std::fs::read_to_string(&result_path).unwrap()).unwrap();
    let (trace_id, span_id) = (launcher["trace_id"].as_str().unwrap(), launcher["span_id"].as_str().unwrap());
    // Version 00, the span's ids, and flags with the sampled bit (recent
    // SDKs also set W3C level 2's random-trace-id bit: `03`).
    let traceparent = launcher["traceparent"].as_str().unwrap();
    let flags = traceparent
        .strip_prefix(&format!("00-{trace_id}-{span_id}-"))
        .and_then(|f| u8::from_str_radix(f, 16).ok())
        .unwrap_or_else(|| panic!("not the SDK span's W3C traceparent: {traceparent}"));
    assert_eq!(flags & 1, 1, "sampled: {traceparent}");
    assert_eq!(launcher["exported_by_sdk"], 1, "the SDK recorded its job span");

    let records = sink.wait_for("startup and interval spans of both ranks", Duration::from_secs(30), |r| {
        r.spans_named(taxonomy::STARTUP.name).count() == RANKS as usize
            && r.spans_named(taxonomy::TRAIN.name).count() == 2 * RANKS as usize
    });
    for rank in 0..i64::from(RANKS) {
        let startup: Vec<_> = records.spans_named(taxonomy::STARTUP.name).filter(|s| s.rank() == Some(rank)).collect();
        assert_eq!(startup.len(), 1, "rank {rank}: one startup span");
        let startup = startup[0];
        assert_eq!(startup.trace_id, trace_id, "rank {rank}: startup is in the Python span's trace");
        assert_eq!(startup.parent_span_id, span_id, "rank {rank}: startup's parent is the Python span");
        // The startup children stay in that trace.
        let children: Vec<_> = records
            .spans
            .iter()
            .filter(|s| s.parent_span_id == startup.span_id)
            .map(|s| (s.name.as_str(), s.trace_id.as_str()))
            .collect();
        assert!(children.iter().any(|(name, _)| *name == taxonomy::STARTUP_MODEL_INIT.name), "{children:?}");
        assert!(children.iter().all(|(_, trace)| *trace == trace_id), "{children:?}");

        let first = records
            .spans_named(taxonomy::TRAIN.name)
            .filter(|s| s.rank() == Some(rank))
            .min_by_key(|s| s.start_ns)
            .expect("an interval");
        assert_eq!(
            first.links,
            vec![(startup.trace_id.clone(), startup.span_id.clone())],
            "rank {rank}: the first interval links to startup"
        );
        assert!(first.parent_span_id.is_empty(), "rank {rank}: the interval is a root of its own trace");
        assert_ne!(first.trace_id, trace_id, "rank {rank}: the interval keeps its derived trace id");
    }
    // Both ranks' first intervals share one derived trace, not the launcher's.
    let first_traces: BTreeSet<_> = records
        .spans_named(taxonomy::TRAIN.name)
        .filter(|s| s.links.first().is_some_and(|(t, _)| t == trace_id))
        .map(|s| s.trace_id.clone())
        .collect();
    assert_eq!(first_traces.len(), 1, "{first_traces:?}");
    sink.stop();
    ctx.finish();
}
