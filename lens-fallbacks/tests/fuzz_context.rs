//! Property tests of the context decoders: no byte string and no
//! garbage `traceparent` yields a valid context or a panic. (Moved from
//! lens-core's parser fuzzing when propagation moved to the facade.)

#![cfg(feature = "otel")]

use lens_fallbacks::propagation::{decode_context, extract_context};
use proptest::prelude::*;

/// Whether `value` has the shape of a W3C traceparent (which the
/// garbage property excludes: such a value may be valid).
fn traceparent_shaped(value: &str) -> bool {
    let parts: Vec<&str> = value.trim().split('-').collect();
    parts.len() >= 4
        && [2, 32, 16, 2].iter().zip(&parts).all(|(len, part)| part.len() == *len)
        && parts.iter().take(4).all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn bytes_without_a_traceparent_decode_to_no_context(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        prop_assume!(!String::from_utf8_lossy(&bytes).contains("traceparent"));
        prop_assert!(decode_context(&bytes).is_none());
    }

    #[test]
    fn a_garbage_traceparent_never_yields_a_valid_context(
        value in "\\PC{0,80}",
        state in "\\PC{0,40}",
        baggage in "\\PC{0,40}",
    ) {
        prop_assume!(!traceparent_shaped(&value));
        let carrier = [("traceparent", value.as_str()), ("tracestate", state.as_str()), ("baggage", baggage.as_str())];
        prop_assert!(!extract_context(&carrier[..]).is_valid());
        let json = serde_json::json!({"traceparent": value, "tracestate": state, "baggage": baggage}).to_string();
        prop_assert!(decode_context(json.as_bytes()).is_none());
    }
}
