//! `lens analyze` on the export of a plain program that announces its
//! training events through lens-training's event API (the generic
//! `dl.training.*` spans, stamped with `dl.training.event`) and the
//! facade's `file` exporter: a short run (8 iterations) and a long one
//! (80), each with a save at iteration 4, an evaluation and a final save.
//! The goodput view reads each attempt twice and holds the same number of
//! records for both, and its breakdown is exactly the breakdown of every
//! span held at once. (Setup is process-global: this binary holds one
//! test, whose two runs take turns.)

#![expect(dead_code, reason = "this binary uses a part of the support module")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lens_fallbacks::otlp_file;
use lens_fallbacks::{RankContext, Telemetry};
use lens_training::goodput_view;
use lens_training::{RankCoordinates, Training, TrainingOptions};

mod support;
use support::{lens, temp_dir};

/// One run of `iterations` into `dir` (its run id: the directory's name).
fn run(dir: &Path, iterations: u64) {
    let env: BTreeMap<String, String> = [
        ("MYJOB_OTEL_ENABLED", "1"),
        ("MYJOB_OTEL_EXPORTER", "file"),
        ("MYJOB_OTEL_FILE_DIR", dir.to_str().unwrap()),
        ("MYJOB_OTEL_RUN_ID", dir.file_name().unwrap().to_str().unwrap()),
        ("MYJOB_OTEL_SPAN_GROUPS", "all"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let telemetry = Arc::new(
        Telemetry::builder("MYJOB_OTEL")
            .fallback_prefix(None)
            .default_service_name("myjob")
            .env(env)
            .rank(RankContext { rank: 0, world_size: 1, local_rank: 0, node_rank: None })
            .setup()
            .unwrap(),
    );
    let training = Training::new(&telemetry, TrainingOptions::new(RankCoordinates::SINGLE));
    training.loop_started();
    for counter in 0..iterations {
        drop(training.iteration(counter));
        if counter + 1 == 4 {
            training.checkpoint_save(4).durable();
        }
    }
    drop(training.evaluation(iterations));
    training.checkpoint_save(iterations).durable();
    training.finish();
    drop(training);
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(dir.join("traces-rank0.jsonl").is_file(), "{report}");
}

#[test]
fn the_goodput_view_holds_as_much_for_a_long_run_as_for_a_short_one_and_equals_the_whole_list_reading() {
    let mut held = Vec::new();
    for iterations in [8_u64, 80] {
        let root = temp_dir("training");
        let dir = root.join(format!("run-{iterations}"));
        run(&dir, iterations);

        let analysis = lens_command::analyze::analyze(&dir).unwrap();
        let spans = otlp_file::read_span_file(&dir.join("traces-rank0.jsonl"), 0).unwrap().spans;
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let whole = goodput_view::breakdown(&[goodput_view::Attempt { name, rank: 0, spans }]);
        assert_eq!(analysis.goodput.as_ref(), Some(&whole), "two passes against every span at once");
        let view = whole.unwrap();
        assert_eq!(view.totals.productive_iterations, iterations, "{:?}", view.totals);
        assert_eq!(view.attempts[0].iterations, Some((1, iterations)));
        assert_eq!(view.attempts[0].last_checkpoint, Some(iterations));
        assert!(view.attempts[0].ended_normally);
        held.push(analysis.goodput_records);

        let (code, stdout, stderr) = lens(&["analyze".as_ref(), dir.as_path()]);
        assert_eq!(code, 0, "{stderr}");
        assert!(
            stdout.contains(&format!("  iterations: {iterations} kept, 0 pending, 0 lost, over 1 attempt(s)\n")),
            "{stdout}"
        );
    }
    assert_eq!(held[0], held[1], "records held for 8 and for 80 iterations");
    assert!(held[1] < 80, "{held:?}");
}
