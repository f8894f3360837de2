//! `lens` on a plain program's export: a program that is not Megatron sets
//! telemetry up through the facade with its own prefix (`MYJOB_OTEL`) and
//! the `file` exporter, records a few spans and a counter, and shuts down;
//! `lens analyze` and `lens trace-view` then read its directory, and their
//! advice names `MYJOB_OTEL_*` and the program's span groups, never
//! Megatron's. (Setup is process-global: this binary holds one test.)

#![expect(dead_code, reason = "this binary uses a part of the support module")]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use lens_fallbacks::{KeyValue, RankContext, SpanGroup, Telemetry, in_managed_span};

mod support;
use support::{lens, temp_dir};

/// Telemetry of rank 0 of run `myrun` with span groups `groups`, exporting
/// files into `dir`.
fn setup(dir: &Path, groups: &str) -> Telemetry {
    let env: BTreeMap<String, String> = [
        ("MYJOB_OTEL_ENABLED", "1"),
        ("MYJOB_OTEL_EXPORTER", "file"),
        ("MYJOB_OTEL_FILE_DIR", dir.to_str().unwrap()),
        ("MYJOB_OTEL_RUN_ID", "myrun"),
        ("MYJOB_OTEL_SPAN_GROUPS", groups),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Telemetry::builder("MYJOB_OTEL")
        .fallback_prefix(None)
        .default_service_name("myjob")
        .env(env)
        .rank(RankContext { rank: 0, world_size: 1, local_rank: 0, node_rank: None })
        .setup()
        .unwrap()
}

#[test]
fn a_plain_programs_export_is_analyzed_and_viewed_with_advice_naming_its_own_variables() {
    let root = temp_dir("facade");
    let dir = root.join("myrun");
    let telemetry = setup(&dir, "default");
    let samples = telemetry.meter().u64_counter("myjob.samples").build();
    in_managed_span(SpanGroup::JOB, "myjob.train", [], |_| {
        for epoch in 0..2_i64 {
            in_managed_span(SpanGroup::EVALUATE, "myjob.evaluate", [KeyValue::new("myjob.epoch", epoch)], |_| {
                samples.add(8, &[]);
            });
        }
    });
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(dir.join("traces-rank0.jsonl").is_file() && dir.join("metrics-rank0.jsonl").is_file(), "{report}");

    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        concat!(
            "stragglers (0 ranks with rank metrics, windows of 4 log intervals):\n",
            "  no rank metrics in this export (lens-training's `Training` records them with MYJOB_OTEL_RANK_METRICS=1)\n",
            "goodput (from the spans, one rank per attempt; docs/goodput.md):\n",
            "  not computed: the export lacks what the breakdown needs:\n",
            "  - no iteration spans: the export's span groups (job,checkpoint,evaluate) lack `step`; ",
            "run with MYJOB_OTEL_SPAN_GROUPS=job,checkpoint,evaluate,step, and announce each with ",
            "lens-training's `Training::iteration` (docs/goodput.md)\n",
            "hangs (the hang watchdog's span events and gauge):\n",
            "  no hang suspected\n",
        )
    );

    let (code, stdout, stderr) = lens(&["trace-view".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\nread 3 span(s) of 1 rank(s) from 1 file(s); 0 link(s) drawn as flows\n"), "{stdout}");
    assert!(
        stdout.contains("span groups recorded: job,checkpoint,evaluate (change them with MYJOB_OTEL_SPAN_GROUPS)\n"),
        "{stdout}"
    );
    let evaluate = stdout.lines().find(|l| l.starts_with("myjob.evaluate ")).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(evaluate.split_whitespace().nth(1), Some("2"), "{evaluate}");
    assert!(!stdout.contains("MEGATRON") && !stderr.contains("MEGATRON"), "{stdout}{stderr}");

    // The program records the `step` group with a span of its own, as a new
    // user's first program does: no span is an iteration, and the advice
    // names the call that announces one instead of the group it already has.
    let dir = root.join("steps");
    let telemetry = setup(&dir, "all");
    for iteration in 0..2_i64 {
        in_managed_span(SpanGroup::STEP, "myjob.train_step", [KeyValue::new("myjob.iteration", iteration)], |_| {});
    }
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(dir.join("traces-rank0.jsonl").is_file(), "{report}");
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "  - no iteration spans: the export records `step`, but no span is an iteration: announce each with \
             lens-training's `Training::iteration` (docs/goodput.md)\n"
        ),
        "{stdout}"
    );
}
