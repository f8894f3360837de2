//! The bench report: one [`Row`] per scenario with its [`Verdict`], the
//! statistics the verdicts use (median and band of per-round ratios), the
//! [`Machine`] the figures come from, and the markdown table. A leaf module:
//! the bench parts build rows, `bench` renders them.

use std::fmt::Write as _;

/// One line of the table.
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) measured: String,
    pub(crate) budget: String,
    pub(crate) verdict: Verdict,
    pub(crate) python: &'static str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pass,
    PassByInstructions,
    Fail,
    FailByInstructions,
}

impl Verdict {
    pub(crate) fn text(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::PassByInstructions => "pass (by instructions)",
            Verdict::Fail => "**FAIL**",
            Verdict::FailByInstructions => "**FAIL** (by instructions)",
        }
    }

    pub(crate) fn is_fail(self) -> bool {
        matches!(self, Verdict::Fail | Verdict::FailByInstructions)
    }

    /// The verdict of an instruction count that decides for a noisy wall time.
    pub(crate) fn by_instructions(within: bool) -> Verdict {
        if within { Verdict::PassByInstructions } else { Verdict::FailByInstructions }
    }
}

/// Whether the wall-time band `lo..=hi` is wider than the budget's margin
/// (`max_ratio - 1`, or the nanoseconds allowed): wall time cannot decide it.
pub(crate) fn wider_than(lo: f64, hi: f64, margin: f64) -> bool {
    hi - lo > margin
}
// ------------------------------------------------------------- statistics

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if !n.is_multiple_of(2) => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The spread (min, max) of `values`.
pub(crate) fn band(values: &[f64]) -> (f64, f64) {
    values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)))
}

pub(crate) fn ns(value: f64) -> String {
    if value.abs() >= 1000.0 { format!("{:.2} µs", value / 1000.0) } else { format!("{value:.2} ns") }
}
// ----------------------------------------------------------------- report

/// The machine the figures come from.
pub(crate) struct Machine {
    pub(crate) cores: usize,
    pub(crate) model: String,
}

impl Machine {
    pub(crate) fn describe(&self) -> String {
        format!("{} cores, {}", self.cores, self.model)
    }
}

pub(crate) fn machine() -> Machine {
    let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| Some(l.split(':').nth(1)?.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    Machine { cores, model }
}

pub(crate) fn render(rows: &[Row], machine: &Machine) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Machine: {} (`nproc` = {}).", machine.model, machine.cores);
    let _ = writeln!(out);
    let _ = writeln!(out, "| Scenario | Measured | Budget | Verdict | Python original |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for row in rows {
        let python = if row.python.is_empty() { "—" } else { row.python };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {python} |",
            row.scenario,
            row.measured,
            row.budget,
            row.verdict.text()
        );
    }
    out
}
#[cfg(test)]
mod tests {
    use super::{band, median, wider_than};

    #[test]
    fn median_and_band() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(band(&[1.0, 3.0, 2.0]), (1.0, 3.0));
    }

    #[test]
    fn a_band_wider_than_the_margin_is_too_noisy_to_decide() {
        // The run that called 1.297× a failure: 1.075–1.298 spans 0.223, more than 0.15.
        assert!(wider_than(1.075, 1.298, 0.15));
        assert!(!wider_than(1.022, 1.086, 0.15));
    }
}
