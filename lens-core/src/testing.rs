//! Test support (feature `testing`): set the span-group gate directly.

use crate::groups::GroupSet;

/// Replaces the enabled span groups, as setup and shutdown do. For tests and
/// benchmarks that drive the gate without a full setup; instrumented code
/// only reads the gate ([`crate::groups::is_span_group_enabled`]).
#[cold]
pub fn set_enabled_span_groups(groups: GroupSet) {
    crate::groups::set_enabled_span_groups(groups);
}
