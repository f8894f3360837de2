//! With the facade's `otel` feature off (`cargo test -p lens-instruments`,
//! which builds lens-fallbacks without it), the recording structs are
//! zero-sized: they are built from the facade's metric handles, which hold
//! nothing in that build. A field that leaked into the off build would cost
//! every caller memory even with telemetry compiled out.

use std::mem::size_of;

use lens_fallbacks::setup::COMPILED_IN;
use lens_instruments::gym::GymMetrics;
use lens_instruments::inference::InferenceMetrics;
use lens_instruments::rl::RlMetrics;

#[test]
fn recording_structs_are_zero_sized_when_the_facade_records_nothing() {
    let sizes = [
        ("InferenceMetrics", size_of::<InferenceMetrics>()),
        ("RlMetrics", size_of::<RlMetrics>()),
        ("GymMetrics", size_of::<GymMetrics>()),
    ];
    if COMPILED_IN {
        // A build that unified the facade's `otel` on (a workspace-wide
        // test run): the handles are real, so the structs hold them.
        assert!(sizes.iter().all(|(_, size)| *size > 0), "{sizes:?}");
        return;
    }
    let sized: Vec<_> = sizes.iter().filter(|(_, size)| *size != 0).collect();
    assert!(sized.is_empty(), "not zero-sized with `otel` off (name, bytes): {sized:?}");
}
