//! `managed_span!` evaluates its name and attributes only when the group's
//! gate passes, in both facade modes.

use std::cell::Cell;

use lens_fallbacks::{GroupSet, SpanGroup, managed_span, set_enabled_span_groups};

/// A value whose evaluation is seen.
fn observed(evaluated: &Cell<u32>, value: u64) -> u64 {
    evaluated.set(evaluated.get() + 1);
    value
}

/// Opens a step span whose two attribute values count their evaluations;
/// the guard is inert either way (nothing is set up) and dropped at once.
fn open_step_span(evaluated: &Cell<u32>) {
    let span = managed_span!(
        SpanGroup::STEP,
        "test.step",
        "test.iteration" => observed(evaluated, 7),
        "test.loss" => observed(evaluated, 2) as f64,
    );
    assert!(!span.is_recording());
}

#[test]
fn a_disabled_group_evaluates_no_attribute_and_an_enabled_one_evaluates_each_once() {
    let evaluated = Cell::new(0);

    set_enabled_span_groups(GroupSet::EMPTY);
    open_step_span(&evaluated);
    assert_eq!(evaluated.get(), 0, "a disabled span must not evaluate its attributes");

    set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));
    open_step_span(&evaluated);
    set_enabled_span_groups(GroupSet::EMPTY);
    // With `otel` the gate passed and both values were evaluated once each;
    // without it the gate is always closed.
    let expected = if cfg!(feature = "otel") { 2 } else { 0 };
    assert_eq!(evaluated.get(), expected);
}

#[test]
fn the_macro_takes_no_attributes_and_a_trailing_comma() {
    let _plain = managed_span!(SpanGroup::JOB, "test.job");
    let _trailing = managed_span!(SpanGroup::JOB, "test.job", "test.key" => "value",);
}
