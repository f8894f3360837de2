//! The process-wide gate (the original's `state` tests). Its own test binary,
//! because it changes process-global state; one test, so that no other test
//! in this binary races with it.

use lens_core::groups::{
    GroupSet, LENS_CATALOG, SpanGroup, enabled_span_groups, is_span_group_enabled, set_enabled_span_groups,
};

#[test]
fn gate_lifecycle() {
    // All disabled by default.
    for group in LENS_CATALOG.groups() {
        assert!(!is_span_group_enabled(*group), "{group} enabled before setup");
    }
    assert_eq!(enabled_span_groups(), GroupSet::EMPTY);

    // Enable.
    set_enabled_span_groups(LENS_CATALOG.resolve("default").unwrap());
    assert!(is_span_group_enabled(SpanGroup::JOB));
    assert!(is_span_group_enabled(SpanGroup::CHECKPOINT));
    assert!(!is_span_group_enabled(SpanGroup::STEP));

    // Override replaces, not merges.
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));
    assert!(is_span_group_enabled(SpanGroup::STEP));
    assert!(!is_span_group_enabled(SpanGroup::JOB));

    // A group of another catalog whose bit is unset is off.
    assert!(!is_span_group_enabled(SpanGroup::new("unknown", 63)));

    // Clear.
    set_enabled_span_groups(GroupSet::EMPTY);
    assert!(!is_span_group_enabled(SpanGroup::STEP));
}
