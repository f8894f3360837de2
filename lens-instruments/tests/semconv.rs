//! lens-instruments mirrors the `gen_ai.*`, `rl.*` and `gym.*` keys of
//! lens-core's `semconv` module under the same constant names (it keeps its
//! own copies so that its metric descriptors are `const`). This test holds
//! the two in step: every mirrored constant exists in lens-core with the same
//! key, and every lens-core key of those namespaces is mirrored. `cargo xtask
//! tidy` runs it.

use lens_core::semconv as core;
use lens_instruments::semconv as instruments;

#[test]
fn every_mirrored_key_equals_lens_core() {
    for (name, key) in instruments::ALL {
        let theirs = core::ALL.iter().find(|k| k.name == *name);
        let Some(theirs) = theirs else {
            panic!("lens_instruments::semconv::{name} has no constant of that name in lens_core::semconv");
        };
        assert_eq!(theirs.key, *key, "{name}: lens-instruments says {key:?}, lens-core says {:?}", theirs.key);
    }
}

#[test]
fn every_lens_core_key_of_the_shared_namespaces_is_mirrored() {
    for key in core::ALL.iter().filter(|k| ["gen_ai.", "rl.", "gym."].iter().any(|p| k.key.starts_with(p))) {
        assert!(
            instruments::ALL.iter().any(|(name, value)| *name == key.name && *value == key.key),
            "lens_core::semconv::{} ({}) is not mirrored in lens_instruments::semconv",
            key.name,
            key.key
        );
    }
}
