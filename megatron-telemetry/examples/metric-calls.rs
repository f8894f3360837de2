//! One metric record of `benches/metric_records.rs`'s pairs, `N` times, for
//! instruction counts under callgrind (`cargo xtask bench --only metrics`
//! runs it when the wall-time band is too wide to decide):
//! `metric-calls <mode> <N>` with mode `lens_gauge`, `raw_gauge`,
//! `lens_histogram`, `raw_histogram`, `lens_counter` or `raw_counter`.

#[path = "../benches/support/metric_pairs.rs"]
mod metric_pairs;

use metric_pairs::Pairs;

/// One record of a pair.
type Call = fn(&Pairs);

const MODES: [(&str, Call); 6] = [
    ("lens_gauge", Pairs::lens_gauge),
    ("raw_gauge", Pairs::raw_gauge),
    ("lens_histogram", Pairs::lens_histogram),
    ("raw_histogram", Pairs::raw_histogram),
    ("lens_counter", Pairs::lens_counter),
    ("raw_counter", Pairs::raw_counter),
];

#[expect(clippy::print_stderr, reason = "the errors of a command-line tool")]
fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("usage: metric-calls <mode> <N>");
        std::process::exit(2);
    };
    let Some((_, call)) = MODES.iter().find(|(name, _)| *name == mode) else {
        let names: Vec<&str> = MODES.iter().map(|(name, _)| *name).collect();
        eprintln!("metric-calls: unknown mode {mode:?}: accepted: {}", names.join(", "));
        std::process::exit(2);
    };
    let pairs = Pairs::new();
    for _ in 0..n {
        call(&pairs);
    }
    pairs.shutdown();
}
