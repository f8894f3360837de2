//! `docs/metrics-lens.md` lists every instrument and bucket list exactly as
//! the descriptors declare them, and nothing else.

use lens_instruments::{InstrumentDescriptor, buckets, gym, inference, rl};

fn page() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics-lens.md");
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn code_list(items: &[&str]) -> String {
    if items.is_empty() {
        "—".to_owned()
    } else {
        items.iter().map(|item| format!("`{item}`")).collect::<Vec<_>>().join(", ")
    }
}

/// The docs table row of one instrument.
fn row(descriptor: &InstrumentDescriptor) -> String {
    let unit = if descriptor.unit.is_empty() { "—".to_owned() } else { format!("`{}`", descriptor.unit) };
    format!(
        "| `{}` | {} | {} | {} | {} |",
        descriptor.name,
        descriptor.kind.as_str(),
        unit,
        code_list(descriptor.attributes),
        descriptor.description
    )
}

fn bucket_row(name: &str, bounds: &[f64]) -> String {
    let bounds: Vec<String> = bounds.iter().map(f64::to_string).collect();
    format!("| `buckets::{name}` | {} |", bounds.join(", "))
}

#[test]
fn instrument_tables_match_the_descriptors() {
    let page = page();
    let expected: Vec<String> =
        [inference::INSTRUMENTS, rl::INSTRUMENTS, gym::INSTRUMENTS].into_iter().flatten().map(row).collect();
    for row in &expected {
        assert!(page.lines().any(|line| line == row), "docs/metrics-lens.md lacks the row\n{row}");
    }
    for line in page.lines() {
        let is_instrument_row = ["| `gen_ai.", "| `rl.", "| `gym."].iter().any(|prefix| line.starts_with(prefix));
        if is_instrument_row {
            assert!(expected.iter().any(|row| row == line), "docs/metrics-lens.md has a stale row\n{line}");
        }
    }
}

#[test]
fn bucket_table_matches_the_constants() {
    let page = page();
    let lists = [
        ("GEN_AI_REQUEST_DURATION_S", buckets::GEN_AI_REQUEST_DURATION_S),
        ("GEN_AI_TOKEN_USAGE", buckets::GEN_AI_TOKEN_USAGE),
        ("GEN_AI_TIME_TO_FIRST_TOKEN_S", buckets::GEN_AI_TIME_TO_FIRST_TOKEN_S),
        ("GEN_AI_TIME_PER_OUTPUT_TOKEN_S", buckets::GEN_AI_TIME_PER_OUTPUT_TOKEN_S),
        ("REQUEST_DURATION_MS", buckets::REQUEST_DURATION_MS),
        ("ROLLOUT_DURATION_MS", buckets::ROLLOUT_DURATION_MS),
    ];
    for (name, bounds) in lists {
        let row = bucket_row(name, bounds);
        assert!(page.lines().any(|line| line == row), "docs/metrics-lens.md lacks the row\n{row}");
    }
    let rows = page.lines().filter(|line| line.starts_with("| `buckets::")).count();
    assert_eq!(rows, lists.len(), "docs/metrics-lens.md lists a bucket list the crate does not have");
}
