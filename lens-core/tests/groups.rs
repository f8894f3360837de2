//! Span groups: presets, the spec grammar and the catalog extension
//! mechanism (the original's `groups` tests, and the catalog that
//! frameworks extend).

use lens_core::groups::{GroupSet, LENS_CATALOG, LENS_GROUPS, Preset, SpanGroup, SpanGroupCatalog};
use proptest::prelude::*;

fn set(groups: &[SpanGroup]) -> GroupSet {
    GroupSet::of(groups)
}

#[test]
fn presets_are_exactly_the_originals() {
    assert_eq!(
        LENS_CATALOG.resolve("default").unwrap(),
        set(&[SpanGroup::JOB, SpanGroup::CHECKPOINT, SpanGroup::EVALUATE])
    );
    assert_eq!(LENS_CATALOG.resolve("per_step").unwrap(), set(&LENS_GROUPS));
    assert_eq!(LENS_CATALOG.resolve("all").unwrap(), LENS_CATALOG.all_groups());
    assert_eq!(LENS_CATALOG.all_groups().len(), 8);
    let names: Vec<_> = LENS_CATALOG.presets().iter().map(|p| p.name).collect();
    assert_eq!(names, ["default", "per_step", "all"]);
}

#[test]
fn base_group_names_are_the_originals() {
    let names: Vec<_> = LENS_GROUPS.iter().map(|g| g.name()).collect();
    assert_eq!(
        names,
        ["job", "checkpoint", "evaluate", "model_init", "load_checkpoint", "step", "forward_backward", "optimizer"]
    );
}

#[test]
fn every_group_resolves_by_name() {
    for group in LENS_CATALOG.groups() {
        assert_eq!(LENS_CATALOG.resolve(group.name()).unwrap(), set(&[*group]), "{group}");
    }
}

#[test]
fn comma_lists_and_preset_mixes_are_unions() {
    assert_eq!(LENS_CATALOG.resolve("step,optimizer").unwrap(), set(&[SpanGroup::STEP, SpanGroup::OPTIMIZER]));
    assert_eq!(
        LENS_CATALOG.resolve("default,step").unwrap(),
        set(&[SpanGroup::JOB, SpanGroup::CHECKPOINT, SpanGroup::EVALUATE, SpanGroup::STEP])
    );
}

#[test]
fn case_and_whitespace_do_not_matter_and_empty_items_are_skipped() {
    assert_eq!(LENS_CATALOG.resolve("  Default ,STEP,, ").unwrap(), LENS_CATALOG.resolve("default,step").unwrap());
    assert_eq!(LENS_CATALOG.resolve("").unwrap(), GroupSet::EMPTY);
    assert_eq!(LENS_CATALOG.resolve(" , ,").unwrap(), GroupSet::EMPTY);
}

#[test]
fn unknown_names_are_errors_with_the_originals_text_and_a_suggestion() {
    let err = LENS_CATALOG.resolve("default,setp").unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("Unknown span group or preset: 'setp'. Valid options: ["), "{text}");
    assert!(text.contains("'per_step'") && text.contains("'optimizer'"), "{text}");
    assert!(text.ends_with("(did you mean 'step'?)"), "{text}");
    assert_eq!(err.suggestion, Some("step"));
}

#[test]
fn negation_is_not_a_syntax() {
    let err = LENS_CATALOG.resolve("all,-step").unwrap_err();
    assert_eq!(err.word, "-step");
    // No "did you mean 'step'": that would suggest turning it on.
    assert!(!err.to_string().contains("did you mean"), "{err}");
    let err = LENS_CATALOG.resolve("stpe").unwrap_err();
    assert!(err.to_string().contains("(did you mean 'step'?)"), "{err}");
}

#[test]
fn a_framework_extends_the_catalog_and_replaces_presets() {
    const EXTRA: SpanGroup = SpanGroup::new("microbatch", 8);
    const GROUPS: [SpanGroup; 9] = [
        LENS_GROUPS[0],
        LENS_GROUPS[1],
        LENS_GROUPS[2],
        LENS_GROUPS[3],
        LENS_GROUPS[4],
        LENS_GROUPS[5],
        LENS_GROUPS[6],
        LENS_GROUPS[7],
        EXTRA,
    ];
    const CATALOG: SpanGroupCatalog = SpanGroupCatalog::new(
        "test",
        &GROUPS,
        &[Preset::new("default", &[SpanGroup::JOB]), Preset::new("profiling", &GROUPS)],
    );
    assert_eq!(CATALOG.resolve("default").unwrap(), set(&[SpanGroup::JOB]));
    assert!(CATALOG.resolve("profiling").unwrap().contains(EXTRA));
    assert!(CATALOG.all_groups().is_superset(LENS_CATALOG.all_groups()));
    // Presets replace, not merge: the base `per_step` is not part of this catalog.
    assert!(CATALOG.resolve("per_step").is_err());
    assert!(LENS_CATALOG.resolve("microbatch").is_err());
}

proptest! {
    #[test]
    fn the_parser_never_panics(spec in ".{0,64}") {
        let _ = LENS_CATALOG.resolve(&spec);
    }

    #[test]
    fn resolution_is_a_union_of_items(a in 0usize..11, b in 0usize..11) {
        let words = LENS_CATALOG.valid_words();
        let (a, b) = (words[a % words.len()], words[b % words.len()]);
        let both = LENS_CATALOG.resolve(&format!("{a},{b}")).unwrap();
        let union = LENS_CATALOG.resolve(a).unwrap().union(LENS_CATALOG.resolve(b).unwrap());
        prop_assert_eq!(both, union);
    }

    #[test]
    fn case_and_padding_do_not_change_the_result(i in 0usize..11, upper in any::<bool>(), pad in " {0,3}") {
        let words = LENS_CATALOG.valid_words();
        let word = words[i % words.len()];
        let written = if upper { word.to_uppercase() } else { word.to_string() };
        prop_assert_eq!(
            LENS_CATALOG.resolve(&format!("{pad}{written}{pad}")).unwrap(),
            LENS_CATALOG.resolve(word).unwrap()
        );
    }
}
