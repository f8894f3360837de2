//! `lens analyze` on hand-written exports: the three sections with their
//! exact lines, advice naming the program's variables, bad input (no
//! export, files with nothing readable, a damaged line, several runs in one
//! directory), memory that does not grow with the files' length, and
//! stragglers from the cumulative counters with known answers: per window
//! (not since the process started), and across a restart under the same
//! run id.

use std::path::{Path, PathBuf};

use lens_command::analyze::analyze;
use lens_fallbacks::semconv;
// Exports written before the rename: the `megatron.rank.*` gauges, one value per log interval.
use lens_training::names::legacy::{ITERATION, PHASE_ATTRIBUTE, PHASE_DURATION_MS, STEP_DURATION_MS};

mod support;
use support::{attributes, double, gauge, int, lens, metrics_line, span, string, temp_dir, traces_line};

/// Ranks of the synthetic data-parallel group.
const RANKS: u32 = 4;

/// The resource of a line: run id, rank and, when given, the program's prefix.
fn resource(run: &str, rank: u32, prefix: Option<&str>) -> String {
    let mut pairs = vec![(semconv::NEMO_RUN_ID, string(run)), (semconv::DL_RANK, int(i64::from(rank)))];
    if let Some(prefix) = prefix {
        pairs.push((semconv::LENS_CONFIG_PREFIX, string(prefix)));
        pairs.push((semconv::LENS_SPAN_GROUPS, string("job,checkpoint,evaluate")));
    }
    attributes(&pairs)
}

/// The attributes of a rank metric's point: rank `rank`, data-parallel
/// rank `rank`, with `phase` (its attribute key, its value) when given.
fn rank_point_attributes(rank: u32, phase: Option<(&str, &str)>) -> String {
    let mut pairs = vec![
        (semconv::DL_RANK, int(i64::from(rank))),
        (semconv::DL_PIPELINE_PARALLEL_RANK, int(0)),
        (semconv::DL_TENSOR_PARALLEL_RANK, int(0)),
        (semconv::DL_DATA_PARALLEL_RANK, int(i64::from(rank))),
    ];
    if let Some((key, value)) = phase {
        pairs.push((key, string(value)));
    }
    attributes(&pairs)
}

/// One log interval of rank metrics: `slow` is the straggler (late in
/// `forward`, waiting for nobody), its peers wait for it in `dp_wait`.
fn rank_metrics_line(run: &str, rank: u32, iteration: u64, slow: u32) -> String {
    let coordinates = |phase: Option<&str>| rank_point_attributes(rank, phase.map(|phase| (PHASE_ATTRIBUTE, phase)));
    let (forward, wait) = if rank == slow { (80.0, 0.0) } else { (30.0, 50.0) };
    let time = iteration * 1_000;
    #[expect(clippy::cast_precision_loss, reason = "small test iterations")]
    let metrics = vec![
        gauge(ITERATION, &coordinates(None), time, iteration as f64),
        gauge(STEP_DURATION_MS, &coordinates(None), time, 100.0),
        gauge(PHASE_DURATION_MS, &coordinates(Some("forward")), time, forward),
        gauge(PHASE_DURATION_MS, &coordinates(Some("dp_wait")), time, wait),
    ];
    metrics_line(&resource(run, rank, None), &metrics)
}

/// Writes `intervals` log intervals of every rank into `dir` (appending).
fn write_rank_metrics(dir: &Path, run: &str, intervals: u64, slow: u32) {
    use std::io::Write as _;
    for rank in 0..RANKS {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("metrics-rank{rank}.jsonl")))
            .unwrap();
        for interval in 1..=intervals {
            file.write_all(rank_metrics_line(run, rank, interval * 2, slow).as_bytes()).unwrap();
        }
    }
}

/// The straggler lines of `stragglers::write_section` for `windows`
/// windows of 4 intervals (2 iterations each), rank `slow` late in forward.
fn straggler_lines(windows: u64, slow: u32) -> String {
    let peers: Vec<String> = (0..RANKS).filter(|r| *r != slow).map(|r| r.to_string()).collect();
    let mut text = String::from(
        "stragglers (4 ranks with rank metrics, windows of 4 log intervals):\n  iterations         rank  phase        \
         late ms/it   peers wait ms   wait ms  peers\n",
    );
    for window in 0..windows {
        let (first, last) = (window * 8 + 2, window * 8 + 8);
        text.push_str(&format!(
            "  {:<17} {:>5}  {:<10} {:>12.1} {:>15.1} {:>9.1}  {}\n",
            format!("{first}-{last}"),
            slow,
            "forward",
            50.0,
            50.0,
            0.0,
            peers.join(",")
        ));
    }
    text
}

#[test]
fn the_straggler_is_named_per_window_and_no_hang_is_suspected() {
    let dir = temp_dir("stragglers");
    write_rank_metrics(&dir, "run-1", 8, 2);
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!("{}hangs (the hang watchdog's span events and gauge):\n  no hang suspected\n", straggler_lines(2, 2))
    );
}

#[test]
fn memory_does_not_grow_with_the_files_length() {
    // N and 10N log intervals: the same records held at most (three settled
    // iterations of four ranks wait for the fourth that completes a window),
    // and ten times the findings.
    let mut peaks = Vec::new();
    for intervals in [8, 80] {
        let dir = temp_dir("streaming");
        write_rank_metrics(&dir, "run-1", intervals, 1);
        // Traces of a program without goodput spans: five spans a line.
        let traces: String = (0..intervals)
            .map(|i| {
                let spans: Vec<String> = (0..5)
                    .map(|s| {
                        span("myjob.forward", &format!("{i:04x}{s:02x}"), None, i * 100 + s, i * 100 + s + 50, "[]", "")
                    })
                    .collect();
                traces_line(&resource("run-1", 3, None), &spans)
            })
            .collect();
        std::fs::write(dir.join("traces-rank3.jsonl"), traces).unwrap();
        let analysis = analyze(&dir).unwrap();
        let runs = analysis.stragglers.unwrap();
        assert_eq!(runs[0].findings.len() as u64, intervals / 4);
        // No goodput span: the goodput view holds nothing.
        assert_eq!(analysis.goodput_records, 0);
        peaks.push(analysis.peak_retained);
    }
    assert_eq!(peaks, [3 * RANKS as usize, 3 * RANKS as usize]);
}

#[test]
fn a_directory_without_an_export_is_a_usage_error_naming_it_and_what_was_expected() {
    let dir = temp_dir("empty");
    std::fs::create_dir(dir.join("not-a-run")).unwrap();
    std::fs::write(dir.join("notes.txt"), "hello\n").unwrap();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(
        stderr,
        format!(
            "lens: error: analyze {}: no metrics-rank<N>.jsonl or traces-rank<N>.jsonl file there or in its \
             subdirectories (expected a lens `file` export: a directory holding metrics-rank<N>.jsonl or \
             traces-rank<N>.jsonl (by default telemetry/<run id>/), or its parent holding run directories; gather \
             the files of every node into one directory first)\n",
            dir.display()
        )
    );
    // Given one level too high: the directory that holds `telemetry/`.
    let run = dir.join("not-a-run").join("telemetry").join("run-1");
    std::fs::create_dir_all(&run).unwrap();
    write_rank_metrics(&run, "run-1", 4, 2);
    let (code, _, stderr) = lens(&["analyze".as_ref(), dir.join("not-a-run").as_path()]);
    assert_eq!(code, 2);
    assert!(
        stderr.ends_with(&format!(
            "there or in its subdirectories; did you mean {}?\n",
            dir.join("not-a-run").join("telemetry").display()
        )),
        "{stderr}"
    );
    let missing = dir.join("nope");
    let (code, _, stderr) = lens(&["analyze".as_ref(), missing.as_path()]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with(&format!("lens: error: analyze {}: cannot list it: ", missing.display()))
            && stderr.ends_with("gather the files of every node into one directory first)\n"),
        "{stderr}"
    );
}

#[test]
fn a_truncated_or_damaged_line_is_skipped_and_counted() {
    let dir = temp_dir("damaged");
    write_rank_metrics(&dir, "run-1", 8, 2);
    use std::io::Write as _;
    let mut rank0 = std::fs::OpenOptions::new().append(true).open(dir.join("metrics-rank0.jsonl")).unwrap();
    // A damaged line in the middle of nothing, then a truncated last line.
    rank0.write_all(b"\x00\xffgarbage\n{\"resourceMetrics\":[{\"resource\":{\"attr").unwrap();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with(&straggler_lines(2, 2)), "{stdout}");
    assert!(stdout.ends_with("  no hang suspected\n(2 unreadable lines or points skipped)\n"), "{stdout}");
}

#[test]
fn files_with_nothing_readable_are_a_usage_error_and_every_bad_line_is_counted() {
    // Random bytes under the export's names: no point, no span.
    let random = temp_dir("random");
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let bytes: Vec<u8> = (0..20_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect();
    std::fs::write(random.join("metrics-rank0.jsonl"), &bytes).unwrap();
    std::fs::write(random.join("traces-rank0.jsonl"), &bytes).unwrap();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), random.as_path()]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    let expected = format!(
        "lens: error: analyze {}: no span or metric point could be read from its 2 file(s) (",
        random.display()
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert!(
        stderr.ends_with(
            " unreadable lines or points skipped); expected OTLP/JSON lines as lens's `file` exporter writes them \
             (one export request a line)\n"
        ),
        "{stderr}"
    );

    // JSON that is not an export request is unreadable too, each line counted.
    let garbage = temp_dir("garbage");
    std::fs::write(garbage.join("metrics-rank0.jsonl"), "not json at all\n{\"resourceMetrics\": 5}\n[1,2,3]\n")
        .unwrap();
    let (code, _, stderr) = lens(&["analyze".as_ref(), garbage.as_path()]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "lens: error: analyze {}: no span or metric point could be read from its 1 file(s) (3 unreadable lines \
             or points skipped); expected OTLP/JSON lines as lens's `file` exporter writes them (one export request \
             a line)\n",
            garbage.display()
        )
    );

    // Beside a good export the same lines are skipped and each one counted.
    let mixed = temp_dir("garbage-and-good");
    write_rank_metrics(&mixed, "run-1", 8, 2);
    use std::io::Write as _;
    let mut rank0 = std::fs::OpenOptions::new().append(true).open(mixed.join("metrics-rank0.jsonl")).unwrap();
    rank0.write_all(b"not json at all\n{\"resourceMetrics\": 5}\n[1,2,3]\n").unwrap();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), mixed.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with(&straggler_lines(2, 2)), "{stdout}");
    assert!(stdout.ends_with("  no hang suspected\n(3 unreadable lines or points skipped)\n"), "{stdout}");
}

#[test]
fn several_runs_in_one_directory_get_one_report_each() {
    // A reused file directory: run a (rank 2 late), then run b (rank 1 late)
    // appended to the same files.
    let dir = temp_dir("mixed");
    write_rank_metrics(&dir, "a", 4, 2);
    write_rank_metrics(&dir, "b", 4, 1);
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "note: {} holds 2 runs (a, b): each is reported on its own\nrun a:\n{}run b:\n{}hangs (the hang \
             watchdog's span events and gauge):\n  no hang suspected\n",
            dir.display(),
            straggler_lines(1, 2),
            straggler_lines(1, 1)
        )
    );
}

#[test]
fn hangs_are_read_under_the_old_and_the_shared_names() {
    let dir = temp_dir("hangs");
    let old_event = r#"{"name":"megatron.rank.hang_suspected","timeUnixNano":"900","attributes":"#.to_string()
        + &attributes(&[
            ("megatron.phase", string("backward")),
            ("megatron.iteration", int(5)),
            ("megatron.hang.stalled_s", double(2.5)),
        ])
        + "}";
    let new_event = r#"{"name":"dl.training.hang_suspected","timeUnixNano":"950","attributes":"#.to_string()
        + &attributes(&[
            ("dl.phase", string("dp_wait")),
            ("dl.training.iteration", int(5)),
            ("dl.training.hang.stalled_s", double(2.0)),
        ])
        + "}";
    std::fs::write(
        dir.join("traces-rank1.jsonl"),
        traces_line(
            &resource("r", 1, Some("MYJOB_OTEL")),
            &[span("myjob.backward", "01", None, 100, 1000, "[]", &old_event)],
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("traces-rank3.jsonl"),
        traces_line(
            &resource("r", 3, Some("MYJOB_OTEL")),
            &[span("myjob.allreduce", "02", None, 100, 1000, "[]", &new_event)],
        ),
    )
    .unwrap();
    let rank = attributes(&[(semconv::DL_RANK, int(1))]);
    let gauge_line = |time: u64, value: f64| {
        metrics_line(
            &resource("r", 1, Some("MYJOB_OTEL")),
            &[gauge("megatron.rank.hang_suspected", &rank, time, value)],
        )
    };
    std::fs::write(
        dir.join("metrics-rank1.jsonl"),
        gauge_line(100, 0.0) + &gauge_line(200, 1.0) + &gauge_line(300, 0.0),
    )
    .unwrap();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(concat!(
            "hangs (the hang watchdog's span events and gauge):\n",
            "  rank 1: no iteration completed for 2.5 s, in phase backward at iteration 5 (event on span myjob.backward)\n",
            "  rank 3: no iteration completed for 2.0 s, in phase dp_wait at iteration 5 (event on span myjob.allreduce)\n",
            "  likely culprit at iteration 5: rank 1 (stalled in backward), which rank 3 waited for (dp_wait)\n",
            "  rank 1: hang gauge at 1 in 1 of 3 point(s), back to 0 by its last point\n",
        )),
        "{stdout}"
    );
    // The program's own variables, and nothing of Megatron's.
    assert!(
        stdout.contains(
            "  no rank metrics in this export (lens-training's `Training` records them with MYJOB_OTEL_RANK_METRICS=1)\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  - no iteration spans: the export's span groups (job,checkpoint,evaluate) lack `step`; \
             run with MYJOB_OTEL_SPAN_GROUPS=job,checkpoint,evaluate,step, and announce each with \
             lens-training's `Training::iteration` (docs/goodput.md)\n"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("MEGATRON"), "{stdout}");
}

#[test]
fn an_export_that_predates_the_prefix_attribute_gets_neutral_advice_and_megatrons_gets_megatrons() {
    let dir = temp_dir("older");
    let line = metrics_line(&resource("r", 0, None), &[gauge("other", "[]", 1, 1.0)]);
    std::fs::write(dir.join("metrics-rank0.jsonl"), &line).unwrap();
    let (code, stdout, _) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("(lens-training's `Training` records them with <PREFIX>_RANK_METRICS=1)"), "{stdout}");
    assert!(!stdout.contains("MEGATRON"), "{stdout}");

    let megatron = temp_dir("older-megatron");
    let resource = attributes(&[(semconv::SERVICE_NAME, string("megatron-lm"))]);
    std::fs::write(megatron.join("metrics-rank0.jsonl"), metrics_line(&resource, &[gauge("other", "[]", 1, 1.0)]))
        .unwrap();
    let (_, stdout, _) = lens(&["analyze".as_ref(), megatron.as_path()]);
    assert!(stdout.contains("(run with MEGATRON_OTEL_RANK_METRICS=1)"), "{stdout}");
}

/// The stragglers of `dir`'s metrics, every point read at once.
fn at_once(dir: &Path) -> Vec<lens_training::stragglers::Straggler> {
    let mut points = Vec::new();
    for (rank, path) in lens_fallbacks::otlp_file::metrics_files(dir).unwrap() {
        points.extend(lens_fallbacks::otlp_file::read_metric_file(&path, rank).unwrap().points);
    }
    lens_training::stragglers::analyze(&lens_training::stragglers::rank_intervals(&points))
}

#[test]
fn streaming_finds_what_reading_every_point_at_once_finds_even_when_files_are_out_of_step() {
    // Rank 3's file starts with two lines of other metrics and misses one
    // interval: the lockstep reading is out of step, and one iteration is
    // incomplete.
    let dir = temp_dir("out-of-step");
    let other = metrics_line(&resource("run-1", 3, None), &[gauge("other", "[]", 1, 1.0)]);
    std::fs::write(dir.join("metrics-rank3.jsonl"), other.repeat(2)).unwrap();
    write_rank_metrics(&dir, "run-1", 12, 0);
    let rank3 = dir.join("metrics-rank3.jsonl");
    let text = std::fs::read_to_string(&rank3).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let kept: Vec<&str> = lines.iter().enumerate().filter(|(i, _)| *i != 6).map(|(_, l)| *l).collect();
    std::fs::write(&rank3, kept.join("\n") + "\n").unwrap();

    let at_once = at_once(&dir);
    let streamed = analyze(&dir).unwrap().stragglers.unwrap().remove(0).findings;
    assert_eq!(streamed, at_once);
    // 11 complete intervals: windows of 4, 4 and 3, each naming rank 0.
    assert_eq!(
        streamed.iter().map(|f| (f.iterations, f.rank)).collect::<Vec<_>>(),
        [((2, 8), 0), ((12, 18), 0), ((20, 24), 0)]
    );
}

/// One cumulative counter (a monotonic `sum`) with one point, of a process
/// started at `start`.
fn counter(name: &str, point_attributes: &str, start: u64, time: u64, value: f64) -> String {
    format!(
        r#"{{"name":"{name}","sum":{{"dataPoints":[{{"attributes":{point_attributes},"startTimeUnixNano":"{start}","timeUnixNano":"{time}","asDouble":{value}}}],"aggregationTemporality":2,"isMonotonic":true}}}}"#
    )
}

/// Appends one process's counters (`dl.training.iterations`,
/// `dl.training.phase_time`) of every rank to `dir`: a process started at
/// `start`, exporting after every iteration of `exports` (every rank's
/// own when `exports_of` is given); iteration `i` takes `ms(rank, i)` ms of
/// (forward, backward, dp_wait).
fn write_counters(dir: &Path, run: &str, start: u64, exports: &[u64], ms: &dyn Fn(u32, u64) -> [f64; 3]) {
    write_counters_of(dir, run, start, &|_| exports.to_vec(), ms);
}

/// [`write_counters`], rank `rank` exporting after the iterations
/// `exports_of(rank)`.
fn write_counters_of(
    dir: &Path,
    run: &str,
    start: u64,
    exports_of: &dyn Fn(u32) -> Vec<u64>,
    ms: &dyn Fn(u32, u64) -> [f64; 3],
) {
    use lens_training::names::{ITERATIONS, PHASE_ATTRIBUTE as DL_PHASE, PHASE_TIME};
    use std::io::Write as _;
    for rank in 0..RANKS {
        let point_attributes = |phase: Option<&str>| rank_point_attributes(rank, phase.map(|phase| (DL_PHASE, phase)));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("metrics-rank{rank}.jsonl")))
            .unwrap();
        let (mut seconds, mut done) = ([0.0; 3], 0);
        for upto in exports_of(rank) {
            for i in done + 1..=upto {
                for (total, ms) in seconds.iter_mut().zip(ms(rank, i)) {
                    *total += ms / 1e3;
                }
            }
            done = upto;
            let time = start + upto * 1_000_000;
            #[expect(clippy::cast_precision_loss, reason = "small test iterations")]
            let mut metrics = vec![counter(ITERATIONS.name, &point_attributes(None), start, time, upto as f64)];
            for (phase, total) in ["forward", "backward", "dp_wait"].into_iter().zip(seconds) {
                metrics.push(counter(PHASE_TIME.name, &point_attributes(Some(phase)), start, time, total));
            }
            file.write_all(metrics_line(&resource(run, rank, None), &metrics).as_bytes()).unwrap();
        }
    }
}

/// Rank 2 twice as slow in backward (40 ms an iteration instead of 20)
/// where `slow(i)`, its peers then waiting 21 ms for it; 1 ms of wait
/// everywhere otherwise.
fn rank_2_twice_as_slow(slow: impl Fn(u64) -> bool) -> impl Fn(u32, u64) -> [f64; 3] {
    move |rank, i| match (slow(i), rank == 2) {
        (false, _) => [10.0, 20.0, 1.0],
        (true, true) => [10.0, 40.0, 1.0],
        (true, false) => [10.0, 20.0, 21.0],
    }
}

/// The stragglers section's heading and column names, for 4 ranks.
const STRAGGLERS_HEAD: &str = "stragglers (4 ranks with rank metrics, windows of 4 log intervals):\n  iterations         \
                               rank  phase        late ms/it   peers wait ms   wait ms  peers\n";

/// One finding's line: rank 2 late in backward by 20 ms per iteration.
fn rank_2_line(iterations: &str) -> String {
    format!("  {iterations:<17}     2  backward           20.0            21.0       1.0  0,1,3\n")
}

#[test]
fn a_rank_slow_only_late_in_the_run_is_named_in_those_windows_with_its_slowdown_there() {
    // Exports every 5 iterations, 5 to 85: intervals of 5 from the first
    // export, windows 10-25, 30-45, 50-65 and 70-85. Rank 2 is twice as
    // slow from iteration 46 on: in the last two windows only. Averaged
    // since the process started, its excess would be 6.2 and 9.4 ms: under
    // the 10 ms threshold, and named nowhere.
    let dir = temp_dir("late-straggler");
    let exports: Vec<u64> = (1..=17).map(|e| e * 5).collect();
    write_counters(&dir, "run-1", 1_000, &exports, &rank_2_twice_as_slow(|i| i > 45));
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!("{STRAGGLERS_HEAD}{}{}hangs", rank_2_line("50-65"), rank_2_line("70-85"))),
        "{stdout}"
    );
    // The values, within 1e-6 ms per iteration: 20 late, peers 21, its own 1.
    let findings = analyze(&dir).unwrap().stragglers.unwrap().remove(0).findings;
    let windows: Vec<((u64, u64), u32)> = findings.iter().map(|f| (f.iterations, f.rank)).collect();
    assert_eq!(windows, [((50, 65), 2), ((70, 85), 2)], "{findings:?}");
    assert!(
        findings.iter().all(|f| (f.lateness_ms - 20.0).abs() < 1e-6
            && (f.peers_wait_ms - 21.0).abs() < 1e-6
            && (f.wait_ms - 1.0).abs() < 1e-6),
        "{findings:?}"
    );
    // Streaming and reading every point at once share the windowing.
    let at_once = at_once(&dir);
    assert_eq!(findings, at_once);
}

#[test]
fn a_rank_slow_only_after_a_restart_under_the_same_run_id_is_named_after_it() {
    // Attempt 1 (started at t=1000): 40 iterations, nobody slow, then a
    // crash. Attempt 2 (t=9000), appended to the same files with counters
    // from zero: rank 2 twice as slow throughout. Its windows count
    // iterations from its own first export: 10-25, 30-40.
    let exports: Vec<u64> = (1..=8).map(|e| e * 5).collect();
    let analyzed = |name: &str, slow_before: bool| {
        let dir = temp_dir(name);
        write_counters(&dir, "run-1", 1_000, &exports, &rank_2_twice_as_slow(|_| slow_before));
        write_counters(&dir, "run-1", 9_000_000_000, &exports, &rank_2_twice_as_slow(|_| true));
        let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
        assert_eq!(code, 0, "{stderr}");
        (dir, stdout)
    };
    let windows = rank_2_line("10-25") + &rank_2_line("30-40");
    let (dir, stdout) = analyzed("resumed", false);
    assert!(stdout.starts_with(&format!("{STRAGGLERS_HEAD}  after restart 1:\n{windows}hangs")), "{stdout}");
    let findings = analyze(&dir).unwrap().stragglers.unwrap().remove(0).findings;
    assert!(findings.iter().all(|f| f.attempt == 1 && (f.lateness_ms - 20.0).abs() < 1e-6), "{findings:?}");

    // Slow in both attempts: each attempt's windows under its own line.
    let (_, stdout) = analyzed("resumed-both", true);
    assert!(
        stdout.starts_with(&format!(
            "{STRAGGLERS_HEAD}  before any restart:\n{windows}  after restart 1:\n{windows}hangs"
        )),
        "{stdout}"
    );
}

#[test]
fn streaming_and_reading_at_once_agree_on_counters_exported_unevenly_across_restarts() {
    // Twelve seeded cases: every rank exports every 3 to 7 iterations (its
    // own spacing, so exports never line up), up to iteration 60 to 99;
    // half the cases restart once (new start time, counters from zero);
    // rank 2 turns twice as slow in backward from a random iteration.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let mut named = 0;
    for case in 0..12 {
        let dir = temp_dir(&format!("agree-{case}"));
        let slow_from = 10 + next(50);
        for attempt in 0..=(case % 2) {
            let last = 60 + next(40);
            let spacing: Vec<u64> = (0..RANKS).map(|_| 3 + next(5)).collect();
            let exports_of = |rank: u32| -> Vec<u64> {
                let every = spacing[rank as usize];
                (1..).map(|e| e * every).take_while(|i| *i <= last).collect()
            };
            let slow = rank_2_twice_as_slow(|i| attempt == 1 || i >= slow_from);
            write_counters_of(&dir, "run-1", 1_000 + attempt * 1_000_000_000, &exports_of, &slow);
        }
        let at_once = at_once(&dir);
        let streamed = analyze(&dir).unwrap().stragglers.unwrap().remove(0).findings;
        assert_eq!(streamed, at_once, "case {case}");
        // Rank 2 in backward, never in a window that ends before it turned
        // slow, and after the restart too.
        assert!(
            streamed.iter().all(|f| f.rank == 2
                && f.phase == lens_training::phases::Phase::Backward
                && (f.attempt == 1 || f.iterations.1 > slow_from)),
            "case {case}, slow from {slow_from}: {streamed:?}"
        );
        assert!(case % 2 == 0 || streamed.iter().any(|f| f.attempt == 1), "case {case}: {streamed:?}");
        named += streamed.len();
    }
    assert!(named >= 12, "rank 2 named in only {named} windows over twelve runs");
}

#[test]
fn a_later_directory_of_the_run_with_a_finer_log_interval_keeps_its_windows() {
    // telemetry/a: the first attempt, exporting every 10 iterations up to
    // 40 (rank 3 once only, so it has no interval there); telemetry/b: the
    // resumed attempt of the same run id, exporting every 5 iterations to
    // 80, rank 2 twice as slow throughout, rank 3 exporting at 5 and 10
    // only. The run's grid is the first directory's (10 iterations), on
    // which rank 3 has no interval in either attempt: the windows of the
    // resumed attempt do not wait for it. (Judged on the finer grid of
    // both directories, rank 3 was expected in every interval of the
    // resumed attempt, and every one of its windows was dropped.)
    let telemetry = temp_dir("finer-later");
    let (first, resumed) = (telemetry.join("a"), telemetry.join("b"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&resumed).unwrap();
    let every = |step: u64, last: u64| (1..).map(|e| e * step).take_while(|i| *i <= last).collect::<Vec<u64>>();
    write_counters_of(
        &first,
        "run-1",
        1_000,
        &|rank| if rank == 3 { vec![10] } else { every(10, 40) },
        &rank_2_twice_as_slow(|_| false),
    );
    write_counters_of(
        &resumed,
        "run-1",
        9_000_000_000,
        &|rank| if rank == 3 { vec![5, 10] } else { every(5, 80) },
        &rank_2_twice_as_slow(|_| true),
    );
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), telemetry.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    let findings = analyze(&telemetry).unwrap().stragglers.unwrap().remove(0).findings;
    assert!(!findings.is_empty(), "the resumed attempt's windows were dropped:\n{stdout}");
    assert!(
        findings.iter().all(|f| f.rank == 2
            && f.attempt == 1
            && f.iterations.0 >= 10
            && (f.lateness_ms - 20.0).abs() < 1e-6
            && (f.peers_wait_ms - 21.0).abs() < 1e-6),
        "{findings:?}"
    );
    assert!(stdout.contains("  after restart 1:\n"), "{stdout}");
}

/// Three attempts of 40 iterations under one run id, exports every 5
/// iterations, started at 0, 9 and 18 s, each attempt's files in
/// `dir_of(attempt)`: rank 3 died before its first export in the second
/// attempt (no line from it there); in attempt `slow` (0-based), rank 2 is
/// twice as slow in backward.
fn rank_3_dead_in_attempt_2_rank_2_slow_in(slow: usize, dir_of: impl Fn(usize) -> PathBuf) {
    let exports: Vec<u64> = (1..=8).map(|e| e * 5).collect();
    for (attempt, start) in [1_000, 9_000_000_000, 18_000_000_000].into_iter().enumerate() {
        let files = dir_of(attempt);
        std::fs::create_dir_all(&files).unwrap();
        let exports_of = |rank: u32| if attempt == 1 && rank == 3 { Vec::new() } else { exports.clone() };
        write_counters_of(&files, "run-1", start, &exports_of, &rank_2_twice_as_slow(|_| attempt == slow));
    }
}

/// [`rank_3_dead_in_attempt_2_rank_2_slow_in`] the third attempt: `lens
/// analyze DIR` must name rank 2 in that attempt's windows.
fn rank_3_dead_in_attempt_2_then_rank_2_slow(dir: &Path, dir_of: impl Fn(usize) -> PathBuf) {
    rank_3_dead_in_attempt_2_rank_2_slow_in(2, dir_of);
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir]);
    assert_eq!(code, 0, "{stderr}");
    let windows = rank_2_line("10-25") + &rank_2_line("30-40");
    assert!(stdout.starts_with(&format!("{STRAGGLERS_HEAD}  after restart 2:\n{windows}hangs")), "{stdout}");
}

#[test]
fn a_rank_that_died_before_its_first_export_lines_up_with_its_peers_after_the_next_restart() {
    // Numbered by each rank's own restarts, rank 3's third attempt would be
    // its second, and no interval of the third attempt would have every
    // rank: nothing named.
    let dir = temp_dir("died-early");
    rank_3_dead_in_attempt_2_then_rank_2_slow(&dir, |_| dir.clone());
    let findings = analyze(&dir).unwrap().stragglers.unwrap().remove(0).findings;
    assert!(findings.iter().all(|f| f.attempt == 2 && (f.lateness_ms - 20.0).abs() < 1e-6), "{findings:?}");
    assert_eq!(findings, at_once(&dir));
}

#[test]
fn the_attempt_a_rank_missed_is_judged_on_the_ranks_that_reported_in_it() {
    // Rank 2 is slow in the attempt where rank 3 exported nothing: its
    // peers there are ranks 0 and 1. Needing every rank of the run, no
    // interval of that attempt would be complete, and nothing was named.
    let dir = temp_dir("missed-attempt");
    rank_3_dead_in_attempt_2_rank_2_slow_in(1, |_| dir.to_path_buf());
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), &dir]);
    assert_eq!(code, 0, "{stderr}");
    let line = |iterations: &str| {
        format!("  {iterations:<17}     2  backward           20.0            21.0       1.0  0,1\n")
    };
    let windows = line("10-25") + &line("30-40");
    assert!(stdout.starts_with(&format!("{STRAGGLERS_HEAD}  after restart 1:\n{windows}hangs")), "{stdout}");
    assert_eq!(analyze(&dir).unwrap().stragglers.unwrap().remove(0).findings, at_once(&dir));
}

#[test]
fn attempts_in_directories_whose_names_sort_out_of_time_order_are_read_in_time_order() {
    // Each attempt in a directory of its own under one `telemetry/`:
    // `attempt-1`, `attempt-2` and `attempt-10`; by name, `attempt-10` (the
    // last) comes before `attempt-2`. Each file of `attempt-2` begins with
    // a line that is not an export: its time is read from the next.
    let telemetry = temp_dir("out-of-name-order");
    let names = ["attempt-1", "attempt-2", "attempt-10"];
    let damaged = telemetry.join("attempt-2");
    for rank in 0..RANKS {
        std::fs::create_dir_all(&damaged).unwrap();
        std::fs::write(damaged.join(format!("metrics-rank{rank}.jsonl")), "not an export\n").unwrap();
    }
    rank_3_dead_in_attempt_2_then_rank_2_slow(&telemetry, |attempt| telemetry.join(names[attempt]));
}

#[test]
fn runs_with_their_own_ids_are_reported_in_the_order_they_ran() {
    // A restart that took a new run id: `zulu` ran first, `alpha` second
    // (by name, the other way round). Each run's stragglers come in the
    // order the runs' metrics began, as the goodput section's attempts do.
    let telemetry = temp_dir("runs-in-time-order");
    let exports: Vec<u64> = (1..=8).map(|e| e * 5).collect();
    for (run, start) in [("zulu", 1_000), ("alpha", 9_000_000_000)] {
        let files = telemetry.join(run);
        std::fs::create_dir_all(&files).unwrap();
        write_counters_of(&files, run, start, &|_| exports.clone(), &rank_2_twice_as_slow(|_| true));
    }
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), telemetry.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    let (zulu, alpha) = (stdout.find("run zulu:\n"), stdout.find("run alpha:\n"));
    assert!(zulu.zip(alpha).is_some_and(|(zulu, alpha)| zulu < alpha), "the first run first: {stdout}");
}

#[test]
fn goodput_over_several_run_ids_says_it_adds_them_up_as_one_job() {
    // Two attempts under one `telemetry/`: with one run id (a restart), the
    // section is the job's; with two (two unrelated runs, as two runs of
    // the quickstart leave), it says it adds them up and how to see one.
    for (runs, noted) in [(["run-a", "run-a"], false), (["run-a", "run-b"], true)] {
        let telemetry = temp_dir("goodput-runs");
        for (attempt, run) in runs.into_iter().enumerate() {
            let dir = telemetry.join(format!("attempt-{attempt}"));
            std::fs::create_dir_all(&dir).unwrap();
            let start = 1_000_000_000 * (1 + 10 * attempt as u64);
            let line = traces_line(
                &resource(run, 0, Some("MYJOB_OTEL")),
                &[span("myjob.train", "01", None, start, start + 1_000_000, "[]", "")],
            );
            std::fs::write(dir.join("traces-rank0.jsonl"), line).unwrap();
        }
        let (code, stdout, stderr) = lens(&["analyze".as_ref(), telemetry.as_path()]);
        assert_eq!(code, 0, "{stderr}");
        let note = "note: the goodput section adds up 2 runs (run-a, run-b) as attempts of one job; for one run \
                    alone, give its directory\ngoodput (";
        assert_eq!(stdout.contains(note), noted, "{stdout}");
        assert_eq!(stdout.contains("note: the goodput section"), noted, "{stdout}");
    }
}

/// An iteration span stamped by lens-training's event API (iteration 1),
/// 1 ms long from `start`.
fn iteration_span(id: &str, start: u64) -> String {
    let stamp = attributes(&[
        (lens_training::names::EVENT_ATTRIBUTE, string("iteration")),
        (lens_training::names::ITERATION_ATTRIBUTE, int(1)),
    ]);
    span("myjob.iteration", id, None, start, start + 1_000_000, &stamp, "")
}

/// The resource of rank `rank` of a `world`-rank attempt of run `r`,
/// process `pid`.
fn attempt_resource(rank: u32, world: i64, pid: i64) -> String {
    attributes(&[
        (semconv::NEMO_RUN_ID, string("r")),
        (semconv::DL_RANK, int(i64::from(rank))),
        (semconv::DL_WORLD_SIZE, int(world)),
        (semconv::PROCESS_PID, int(pid)),
    ])
}

#[test]
fn runs_of_different_programs_and_world_sizes_in_one_directory_are_each_counted_and_advised_as_their_own() {
    // One reused file directory: run a, two ranks of a program of one's
    // own; then run b, one rank of Megatron, appended to rank 0's files.
    let dir = temp_dir("two-programs");
    let a = |rank| resource("a", rank, Some("MYJOB_OTEL"));
    let b = resource("b", 0, Some("MEGATRON_OTEL"));
    let train = |start: u64| [iteration_span("01", start)];
    let other = [gauge("other", "[]", 1, 1.0)];
    let rank0_traces = format!("{}{}", traces_line(&a(0), &train(1_000)), traces_line(&b, &train(9_000_000)));
    std::fs::write(dir.join("traces-rank0.jsonl"), rank0_traces).unwrap();
    std::fs::write(dir.join("traces-rank1.jsonl"), traces_line(&a(1), &train(1_000))).unwrap();
    let rank0_metrics = format!("{}{}", metrics_line(&a(0), &other), metrics_line(&b, &other));
    std::fs::write(dir.join("metrics-rank0.jsonl"), rank0_metrics).unwrap();
    std::fs::write(dir.join("metrics-rank1.jsonl"), metrics_line(&a(1), &other)).unwrap();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    let stragglers = "stragglers (0 ranks with rank metrics, windows of 4 log intervals):\n  no rank metrics in this \
                      export";
    assert!(
        stdout.contains(&format!(
            "run a:\n{stragglers} (lens-training's `Training` records them with MYJOB_OTEL_RANK_METRICS=1)\nrun \
             b:\n{stragglers} (run with MEGATRON_OTEL_RANK_METRICS=1)\n"
        )),
        "{stdout}"
    );
    // Run b, found in rank 0's file only, is counted with rank 0; run a
    // with its highest rank.
    assert!(stdout.contains("note: the goodput section adds up 2 runs (a, b) as attempts of one job"), "{stdout}");
    let name = dir.file_name().unwrap().to_string_lossy();
    assert!(stdout.contains(&format!("  attempt {name} (run a): rank 1, ")), "{stdout}");
    assert!(stdout.contains(&format!("  attempt {name} (run b): rank 0, ")), "{stdout}");
}

#[test]
fn attempts_of_one_run_at_two_world_sizes_in_one_directory_are_each_read_at_their_highest_rank() {
    // A run restarted with fewer ranks, appended to the same files: the
    // first attempt had ranks 0-3, the second ranks 0-1.
    let dir = temp_dir("shrunk");
    for rank in 0..4 {
        let pid = i64::from(rank);
        let mut text = traces_line(&attempt_resource(rank, 4, 100 + pid), &[iteration_span("01", 1_000_000_000)]);
        if rank < 2 {
            text += &traces_line(&attempt_resource(rank, 2, 200 + pid), &[iteration_span("02", 5_000_000_000)]);
        }
        std::fs::write(dir.join(format!("traces-rank{rank}.jsonl")), text).unwrap();
    }
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    let name = dir.file_name().unwrap().to_string_lossy();
    assert!(stdout.contains(&format!("  attempt {name} (process 103): rank 3, ")), "{stdout}");
    assert!(stdout.contains(&format!("  attempt {name} (process 201): rank 1, ")), "{stdout}");
}

#[test]
fn a_file_holding_several_ranks_is_read_at_its_highest_rank_by_the_resource() {
    // `lens recover --to-files` writes every rank's spans into one
    // traces-rank0.jsonl, each under its own resource: rank 0's first.
    let dir = temp_dir("one-file");
    let iteration = [iteration_span("01", 1_000_000_000)];
    let text =
        traces_line(&attempt_resource(0, 2, 300), &iteration) + &traces_line(&attempt_resource(1, 2, 301), &iteration);
    std::fs::write(dir.join("traces-rank0.jsonl"), text).unwrap();
    let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
    assert_eq!(code, 0, "{stderr}");
    let name = dir.file_name().unwrap().to_string_lossy();
    assert!(stdout.contains(&format!("  attempt {name}: rank 1, ")), "{stdout}");
    assert_eq!(stdout.matches("  attempt ").count(), 1, "one attempt, not two: {stdout}");
}
