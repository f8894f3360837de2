//! Counts under callgrind: `N` spans of one mode in a loop, so that `cargo
//! xtask bench` can count the calling thread's instructions for `N` and `2N`
//! and take the difference (what one more span costs the thread that
//! records it; lens's export thread and fastrace's collector thread run on
//! their own threads and are not counted).
//!
//! ```text
//! fastrace-calls <lens|fastrace|lens_5_attrs|fastrace_5_props|recorder|recorder_5_attrs|lens_context_per_span|floor> <N>
//! ```
//!
//! `lens_context_per_span` is `lens` with `<PREFIX>_CONTEXT_PER_SPAN` on:
//! what putting every current span in the OpenTelemetry context costs.
//! `floor` is the floor's recorder (`fastrace_compare::floor`): what a
//! rewrite of lens's span path could reach.

use std::process::ExitCode;

use fastrace_compare::floor::Floor;
use fastrace_compare::{
    ROOT_EVERY, fastrace_spans, fastrace_spans_5_props, finish_fastrace, finish_lens, finish_recorder, floor_spans,
    lens_spans, lens_spans_5_attrs, recorder_spans, recorder_spans_5_attrs, setup_fastrace, setup_lens_with,
    setup_recorder,
};
use lens_fallbacks::otel::recorder::Recorder;

const USAGE: &str = "usage: fastrace-calls <lens|fastrace|lens_5_attrs|fastrace_5_props|recorder|recorder_5_attrs|lens_context_per_span|floor> <N>";

#[expect(clippy::print_stderr, reason = "the errors of a command-line tool")]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|n| n.parse::<u64>().ok());
    let (Some(mode), Some(n)) = (args.first().map(String::as_str), n) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if mode == "floor" {
        // A table with a slot for every span of the run: the export thread
        // that would free them is not there.
        let floor =
            Floor::new(usize::try_from(n).unwrap_or(usize::MAX).saturating_add(n.div_ceil(ROOT_EVERY) as usize) + 64);
        floor_spans(&floor, n);
        let (recorded, lost) = floor.finish();
        if lost > 0 || recorded != n + n.div_ceil(ROOT_EVERY) {
            eprintln!(
                "fastrace-calls: the floor recorded {recorded} spans and lost {lost}; the count measured something else"
            );
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    if let Some(spans) = match mode {
        "recorder" => Some(recorder_spans as fn(&Recorder, u64)),
        "recorder_5_attrs" => Some(recorder_spans_5_attrs as fn(&Recorder, u64)),
        _ => None,
    } {
        let recorder = setup_recorder();
        spans(&recorder, n);
        let dropped = finish_recorder(&recorder);
        if dropped > 0 {
            eprintln!("fastrace-calls: the recorder dropped {dropped} spans; the count measured a full queue");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    let (spans, context_per_span): (fn(u64), bool) = match mode {
        "lens" => (lens_spans, false),
        "lens_context_per_span" => (lens_spans, true),
        "lens_5_attrs" => (lens_spans_5_attrs, false),
        "fastrace" => (fastrace_spans, false),
        "fastrace_5_props" => (fastrace_spans_5_props, false),
        other => {
            eprintln!("fastrace-calls: unknown mode `{other}`\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Both are set up in every mode, so that start-up is the same for both.
    let telemetry = setup_lens_with(context_per_span);
    setup_fastrace();
    spans(n);
    finish_fastrace();
    let dropped = finish_lens(&telemetry);
    if dropped > 0 {
        eprintln!("fastrace-calls: lens dropped {dropped} spans; the count measured a full queue");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
