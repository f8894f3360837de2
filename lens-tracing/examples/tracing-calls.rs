//! One `tracing` span, `N` times, through the bridge or a comparison
//! subscriber, for instruction counts under callgrind (`cargo xtask bench
//! --only tracing` runs it when the wall-time band is too wide to decide):
//! `tracing-calls <mode> <N>` with mode
//!
//! - `bridge`: the span through lens-tracing, lens set up as a job sets it
//!   up (the span recorder, the open-span closer);
//! - `bridge_context_per_span`: the same with `<PREFIX>_CONTEXT_PER_SPAN`
//!   on (the span's OpenTelemetry context attached while it is entered);
//! - `lean`: through `tracing-opentelemetry`, configured lean;
//! - `noop`: `tracing`'s registry with a layer that does nothing;
//! - `filtered_noop`: the same layer behind the bridge's per-layer filter
//!   (what the filter costs a recorded span);
//! - `sdk`: the same span (name, one attribute) started and ended with the
//!   SDK's tracer alone, no `tracing` (what every bridge pays the SDK);
//! - `defaults`: through `tracing-opentelemetry` with its defaults;
//! - `disabled`: a callsite whose group is off, under the bridge;
//! - `none`: the loop alone.
//!
//! The setups are `benches/support/setups.rs`, the bench's own.

#[path = "../benches/support/setups.rs"]
mod setups;

#[expect(clippy::print_stderr, reason = "the errors of a command-line tool")]
fn main() {
    const MODES: &str = "bridge, bridge_context_per_span, lean, defaults, noop, filtered_noop, sdk, disabled, none";
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("usage: tracing-calls <mode> <N> (modes: {MODES})");
        std::process::exit(2);
    };
    let installed = setups::install(mode == "bridge_context_per_span");
    let provider = &installed.provider;
    let (dispatch, call): (tracing::Dispatch, fn()) = match mode.as_str() {
        "bridge" | "bridge_context_per_span" => (setups::bridge(), setups::one_span),
        "lean" => (setups::lean(provider), setups::one_span),
        "defaults" => (setups::defaults(provider), setups::one_span),
        "noop" => (setups::noop(), setups::one_span),
        "filtered_noop" => (setups::filtered_noop(), setups::one_span),
        "disabled" => (setups::bridge(), setups::disabled_callsite),
        "none" => (tracing::Dispatch::none(), setups::one_span),
        "sdk" => {
            let tracer = setups::sdk_tracer(provider);
            for _ in 0..n {
                setups::sdk_span(&tracer);
            }
            return;
        }
        other => {
            eprintln!("tracing-calls: unknown mode {other:?}: accepted: {MODES}");
            std::process::exit(2);
        }
    };
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..n {
            call();
        }
    });
}
