//! With the `otel` feature off (`cargo test -p lens-fallbacks
//! --no-default-features`), an environment that enables telemetry gets one
//! warning, at the first setup, naming the variable and what to build with;
//! the program runs on with telemetry that records nothing and says it is
//! off; and no telemetry value stops it (SPEC A22): a bad value is a warning.
//!
//! The warning is given once per process, so this file is its own test
//! binary with a single test (`compiled_out_values.rs` holds the bad values).

#![cfg(not(feature = "otel"))]

use lens_fallbacks::{SpanGroup, Telemetry, is_span_group_enabled};

#[test]
fn the_first_setup_warns_once_that_telemetry_is_compiled_out() {
    let setup = || Telemetry::builder("MYJOB_OTEL").env([("MYJOB_OTEL_ENABLED", "1")]).setup().unwrap();
    let first = setup();
    assert!(!first.is_enabled(), "nothing is recorded: telemetry is off");
    assert!(!first.is_exporting());
    assert!(!is_span_group_enabled(SpanGroup::JOB));
    assert_eq!(first.warnings().len(), 1, "{:?}", first.warnings());
    let warning = &first.warnings()[0];
    assert!(warning.starts_with("MYJOB_OTEL_ENABLED enables telemetry"), "{warning}");
    assert!(warning.contains("built without the `otel` feature"), "{warning}");
    assert!(warning.contains("build your application with its `otel` feature"), "{warning}");
    drop(first);

    let second = setup();
    assert!(!second.is_enabled());
    assert!(second.warnings().is_empty(), "{:?}", second.warnings());

    // Not enabled: nothing to warn about.
    let off = Telemetry::builder("MYJOB_OTEL").env([("MYJOB_OTEL_ENABLED", "0")]).setup().unwrap();
    assert!(off.warnings().is_empty(), "{:?}", off.warnings());
}
