//! With the `otel` feature off (`cargo test -p lens-fallbacks
//! --no-default-features`), an environment that enables telemetry gets one
//! warning, at the first setup, naming the variable and the missing feature;
//! the program runs on with telemetry that records nothing.
//!
//! The warning is given once per process, so this file is its own test
//! binary with a single test.

#![cfg(not(feature = "otel"))]

use lens_fallbacks::{SpanGroup, Telemetry, is_span_group_enabled};

#[test]
fn the_first_setup_warns_once_that_telemetry_is_compiled_out() {
    let setup = || Telemetry::builder("MYJOB_OTEL").env([("MYJOB_OTEL_ENABLED", "1")]).setup().unwrap();
    let first = setup();
    assert!(first.is_enabled());
    assert!(!first.is_exporting());
    assert!(!is_span_group_enabled(SpanGroup::JOB));
    assert_eq!(first.warnings().len(), 1, "{:?}", first.warnings());
    let warning = &first.warnings()[0];
    assert!(warning.starts_with("MYJOB_OTEL_ENABLED enables telemetry"), "{warning}");
    assert!(warning.contains("without the `otel` feature of lens-fallbacks"), "{warning}");
    drop(first);

    let second = setup();
    assert!(second.is_enabled());
    assert!(second.warnings().is_empty(), "{:?}", second.warnings());

    // Not enabled: nothing to warn about.
    let off = Telemetry::builder("MYJOB_OTEL").env([("MYJOB_OTEL_ENABLED", "0")]).setup().unwrap();
    assert!(off.warnings().is_empty(), "{:?}", off.warnings());
}
