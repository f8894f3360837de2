//! A tiny program for counting instructions under callgrind: it calls one
//! disabled-path helper `N` times in a loop, so that `cargo xtask bench` can
//! run it for `N` and `2N` and take the difference, which leaves exactly the
//! instructions one more loop iteration costs (start-up and shutdown cancel).
//!
//! ```text
//! disabled-calls <baseline|gate|managed_span|managed_span_5_attrs> <N>
//! ```
//!
//! - `baseline`: an empty closure called through `black_box`, the same
//!   baseline the criterion benches use;
//! - `gate`: `is_span_group_enabled` for a group that is off;
//! - `managed_span`: `managed_span` for a group that is off, the guard dropped
//!   at once;
//! - `managed_span_5_attrs`: the `managed_span!` macro for a group that is
//!   off, with five attributes whose values are runtime variables (read
//!   through `black_box` once, before the loop), the guard dropped at once.
//!
//! Built with `otel` (the default) nothing is set up, so every group is off
//! and the helpers take lens-core's gated path; built with
//! `--no-default-features` they are the facade's inline no-ops. The xtask
//! subtracts the baseline's count from each helper's: the instructions a call
//! adds. Callgrind counts are repeatable, unlike wall time on a shared machine.

use std::hint::black_box;
use std::process::ExitCode;

use lens_fallbacks::{SpanGroup, is_span_group_enabled, managed_span};

#[inline(never)]
fn baseline(n: u64) {
    let empty = || {};
    for _ in 0..n {
        black_box(empty)();
    }
}

#[inline(never)]
fn gate(n: u64) {
    for _ in 0..n {
        black_box(is_span_group_enabled(black_box(SpanGroup::STEP)));
    }
}

#[inline(never)]
fn span_5_attrs(n: u64) {
    let (iteration, loss, model, ok, tokens) = black_box((7_u64, 2.5_f64, "gpt", true, 4096_i64));
    for _ in 0..n {
        drop(managed_span!(
            SpanGroup::STEP,
            "bench.span",
            "bench.iteration" => iteration,
            "bench.loss" => loss,
            "bench.model" => model,
            "bench.ok" => ok,
            "bench.tokens" => tokens,
        ));
    }
}

#[inline(never)]
fn span(n: u64) {
    for _ in 0..n {
        drop(managed_span(SpanGroup::STEP, "bench.span", []));
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|n| n.parse::<u64>().ok());
    match (args.first().map(String::as_str), n) {
        (Some("baseline"), Some(n)) => baseline(n),
        (Some("gate"), Some(n)) => gate(n),
        (Some("managed_span"), Some(n)) => span(n),
        (Some("managed_span_5_attrs"), Some(n)) => span_5_attrs(n),
        _ => {
            #[expect(clippy::print_stderr, reason = "a usage error of a command-line tool")]
            {
                eprintln!("usage: disabled-calls <baseline|gate|managed_span|managed_span_5_attrs> <N>");
            }
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
