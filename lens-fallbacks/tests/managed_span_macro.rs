//! `managed_span!` evaluates its name and attributes only when the group's
//! gate passes, in both facade modes.

use std::cell::Cell;

use lens_fallbacks::{SpanGroup, managed_span};

/// A value whose evaluation is seen.
fn observed(evaluated: &Cell<u32>, value: u64) -> u64 {
    evaluated.set(evaluated.get() + 1);
    value
}

/// Opens a step span whose two attribute values count their evaluations,
/// drops it at once and says whether it was recording.
fn open_step_span(evaluated: &Cell<u32>) -> bool {
    let span = managed_span!(
        SpanGroup::STEP,
        "test.step",
        "test.iteration" => observed(evaluated, 7),
        "test.loss" => observed(evaluated, 2) as f64,
    );
    span.is_recording()
}

#[test]
fn a_disabled_group_evaluates_no_attribute_and_an_enabled_one_evaluates_each_once() {
    let evaluated = Cell::new(0);

    // Nothing is set up: every group is disabled.
    assert!(!open_step_span(&evaluated));
    assert_eq!(evaluated.get(), 0, "a disabled span must not evaluate its attributes");

    // With the in-memory tracer the gate passes and both values are
    // evaluated once each (the enabled half needs `testing`).
    #[cfg(feature = "testing")]
    {
        let spans = lens_fallbacks::testing::capture(&[SpanGroup::STEP]);
        assert!(open_step_span(&evaluated));
        assert_eq!(evaluated.get(), 2);
        assert_eq!(spans.span_names(), ["test.step"]);
    }
}

#[test]
fn the_macro_takes_no_attributes_and_a_trailing_comma() {
    let _plain = managed_span!(SpanGroup::JOB, "test.job");
    let _trailing = managed_span!(SpanGroup::JOB, "test.job", "test.key" => "value",);
}
