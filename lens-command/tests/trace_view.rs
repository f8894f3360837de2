//! `lens trace-view` on hand-written exports: the footer names the span
//! groups the program recorded with its own variable, and says when the
//! files hold several runs; a bad export's extreme times are viewed, not a
//! panic; an output that cannot be written names `--out`.

#![expect(dead_code, reason = "this binary uses a part of the support module")]

use lens_fallbacks::semconv;

mod support;
use support::{attributes, gauge, int, lens, metrics_line, span, string, temp_dir, traces_line};

fn resource(run: &str, prefix: Option<&str>) -> String {
    let mut pairs = vec![(semconv::NEMO_RUN_ID, string(run)), (semconv::DL_RANK, int(0))];
    if let Some(prefix) = prefix {
        pairs.push((semconv::LENS_CONFIG_PREFIX, string(prefix)));
        pairs.push((semconv::LENS_SPAN_GROUPS, string("job,step")));
    }
    attributes(&pairs)
}

#[test]
fn the_footer_names_the_programs_groups_and_several_runs() {
    let dir = temp_dir("trace-view");
    let text =
        traces_line(&resource("a", Some("MYJOB_OTEL")), &[span("myjob.step", "01", None, 1_000, 5_000, "[]", "")])
            + &traces_line(
                &resource("b", Some("MYJOB_OTEL")),
                &[span("myjob.step", "02", None, 6_000, 9_000, "[]", "")],
            );
    std::fs::write(dir.join("traces-rank0.jsonl"), text).unwrap();
    let (code, stdout, stderr) = lens(&["trace-view".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(concat!(
            "read 2 span(s) of 1 rank(s) from 1 file(s); 0 link(s) drawn as flows\n",
            "note: the files hold 2 runs (a, b); give one run's directory to view one run\n",
            "span groups recorded: job,step (change them with MYJOB_OTEL_SPAN_GROUPS)\n",
        )),
        "{stdout}"
    );

    // Runs of two programs: one's groups and variable are not said of both.
    let two = temp_dir("trace-view-two-programs");
    let text =
        traces_line(&resource("a", Some("MYJOB_OTEL")), &[span("myjob.step", "01", None, 1_000, 5_000, "[]", "")])
            + &traces_line(
                &resource("b", Some("MEGATRON_OTEL")),
                &[span("megatron.step", "02", None, 6_000, 9_000, "[]", "")],
            );
    std::fs::write(two.join("traces-rank0.jsonl"), text).unwrap();
    let (code, stdout, stderr) = lens(&["trace-view".as_ref(), two.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("note: the files hold 2 runs (a, b)"), "{stdout}");
    assert!(!stdout.contains("span groups recorded"), "{stdout}");

    // An export that predates the attributes: no groups line, no Megatron.
    let older = temp_dir("trace-view-older");
    std::fs::write(
        older.join("traces-rank0.jsonl"),
        traces_line(&resource("a", None), &[span("step", "01", None, 1_000, 5_000, "[]", "")]),
    )
    .unwrap();
    let (code, stdout, _) = lens(&["trace-view".as_ref(), older.as_path()]);
    assert_eq!(code, 0);
    assert!(!stdout.contains("span groups recorded") && !stdout.contains("MEGATRON"), "{stdout}");
}

#[test]
fn a_directory_without_traces_names_the_neutral_variable() {
    let dir = temp_dir("trace-view-empty");
    let (code, _, stderr) = lens(&["trace-view".as_ref(), dir.as_path()]);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!(
            "lens: error: trace-view: no traces-rank<N>.jsonl in {} (expected the file exporter's directory, \
             <PREFIX>_FILE_DIR, by default telemetry/<run id>/)\n",
            dir.display()
        )
    );
    // A traces file that cannot be read (a dangling link; a directory of
    // that name reads the same) is named, exit 1: not "no traces file".
    let link = dir.join("traces-rank0.jsonl");
    std::os::unix::fs::symlink(dir.join("gone"), &link).unwrap();
    let (code, _, stderr) = lens(&["trace-view".as_ref(), dir.as_path()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&format!("cannot read {}", link.display())), "{stderr}");
}

/// One span of a hand-written bad export, with its times as given.
fn raw_span(id: &str, start: &str, end: &str) -> String {
    format!(
        r#"{{"traceId":"0123456789abcdef0123456789abcdef","spanId":"{id}","name":"step","startTimeUnixNano":"{start}","endTimeUnixNano":"{end}"}}"#
    )
}

#[test]
fn extreme_times_in_a_bad_export_are_viewed_without_a_panic() {
    // A span from 0 to 2^64 - 1 ns (its end is where the tick rounding
    // would overflow), and two spans whose durations sum past 2^64 ns.
    for (name, spans, count) in [
        ("trace-view-extreme-end", vec![raw_span("0123456789abcdef", "0", "18446744073709551615")], 1),
        (
            "trace-view-extreme-sum",
            vec![
                raw_span("0123456789abcdef", "1000", "10000000000000000000"),
                raw_span("1123456789abcdef", "1000", "10000000000000000000"),
            ],
            2,
        ),
    ] {
        let dir = temp_dir(name);
        std::fs::write(dir.join("traces-rank0.jsonl"), traces_line("[]", &spans)).unwrap();
        let (code, stdout, stderr) = lens(&["trace-view".as_ref(), dir.as_path()]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        let row = stdout.lines().find(|line| line.starts_with("step ")).unwrap_or_else(|| panic!("{name}: {stdout}"));
        assert_eq!(row.split_whitespace().nth(1), Some(count.to_string().as_str()), "{name}: {stdout}");
        assert!(stdout.contains(&format!("read {count} span(s) of 1 rank(s) from 1 file(s)")), "{name}: {stdout}");
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
        let slices = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").count();
        assert_eq!(slices, count, "{name}");
    }
}

#[test]
fn an_output_that_cannot_be_written_is_named_with_the_flag_that_moves_it() {
    let dir = temp_dir("trace-view-unwritable");
    std::fs::write(
        dir.join("traces-rank0.jsonl"),
        traces_line(&resource("a", None), &[span("step", "01", None, 1_000, 5_000, "[]", "")]),
    )
    .unwrap();
    let out = dir.join("missing").join("trace.json");
    let (code, stdout, stderr) = lens(&["trace-view".as_ref(), dir.as_path(), "--out".as_ref(), out.as_path()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stderr.starts_with(&format!(
            "lens: error: trace-view: cannot write the trace to {} (choose the file with --out): ",
            out.display()
        )),
        "{stderr}"
    );
}

#[test]
fn an_output_over_a_file_of_the_export_is_refused_and_the_export_kept() {
    let dir = temp_dir("trace-view-over-input");
    let input = dir.join("traces-rank0.jsonl");
    let text = traces_line(&resource("a", None), &[span("step", "01", None, 1_000, 5_000, "[]", "")]);
    std::fs::write(&input, &text).unwrap();
    // A single file of any name, the same file given by another path.
    let spans = dir.join("spans.jsonl");
    std::fs::write(&spans, &text).unwrap();
    let same_file_elsewhere = dir.join(".").join("spans.jsonl");
    // A hard link: the same file under a name of its own (no link to
    // resolve), once overwritten.
    let hard = dir.join("hard.json");
    std::fs::hard_link(&input, &hard).unwrap();
    // The file read (given as the directory, and as the file itself),
    // another rank's metrics by name: each refused, nothing written.
    let read = "that is a file this conversion reads";
    let named = "that is named as a file of a `file` export";
    for (source, out, why) in [
        (dir.clone(), input.clone(), read),
        (input.clone(), input.clone(), read),
        (spans.clone(), same_file_elsewhere, read),
        (dir.clone(), hard.clone(), read),
        (dir.clone(), dir.join("metrics-rank3.jsonl"), named),
    ] {
        let (code, stdout, stderr) = lens(&["trace-view".as_ref(), source.as_path(), "--out".as_ref(), out.as_path()]);
        assert_eq!(code, 2, "{stdout}");
        assert!(stderr.starts_with(&format!("lens: error: trace-view: --out {}: {why}", out.display())), "{stderr}");
        assert_eq!(std::fs::read_to_string(&input).unwrap(), text, "the export is kept");
        assert_eq!(std::fs::read_to_string(&spans).unwrap(), text, "the file read is kept");
    }
    assert!(!dir.join("metrics-rank3.jsonl").exists());
}

#[test]
fn the_watchdogs_copy_of_an_open_span_is_drawn_but_not_counted_in_the_table() {
    // Iterations of 2 ms and 6 ms; the watchdog fired 3 ms into the second,
    // copying it as open then.
    let dir = temp_dir("trace-view-watchdog");
    let open = attributes(&[(semconv::NEMO_SPAN_OPEN, r#"{"boolValue":true}"#.to_string())]);
    let spans = [
        span("step", "01", None, 1_000_000, 3_000_000, "[]", ""),
        span("step", "02", None, 4_000_000, 10_000_000, "[]", ""),
        span("step", "03", None, 4_000_000, 7_000_000, &open, ""),
    ];
    std::fs::write(dir.join("traces-rank0.jsonl"), traces_line(&resource("a", None), &spans)).unwrap();
    let (code, stdout, stderr) = lens(&["trace-view".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("step         2         8.000       4.000       2.000       6.000\n"), "{stdout}");
    assert!(
        stdout.contains(concat!(
            "read 3 span(s) of 1 rank(s) from 1 file(s); 0 link(s) drawn as flows\n",
            "1 hang-watchdog copy of a span open when it fired (nemo.span.open): drawn, not counted in the table\n",
        )),
        "{stdout}"
    );
}

#[test]
fn a_metrics_file_given_as_the_traces_file_is_named_as_one() {
    let dir = temp_dir("trace-view-metrics");
    let file = dir.join("metrics-rank0.jsonl");
    std::fs::write(&file, metrics_line(&resource("a", None), &[gauge("other", "[]", 1, 1.0)])).unwrap();
    let (code, _, stderr) = lens(&["trace-view".as_ref(), file.as_path()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "no spans in {}; that is a metrics export: trace-view reads traces-rank<N>.jsonl, or the directory \
             holding them",
            file.display()
        )),
        "{stderr}"
    );
}
