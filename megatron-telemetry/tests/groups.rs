//! Megatron's span-group catalog: the original's `test_span_groups`
//! adapted. The catalog is pure data, so every test here also runs in
//! the build without `otel` (the original's "without Lens" stub cases become
//! "the no-otel build still resolves specs").

use std::collections::HashSet;

use lens_fallbacks::groups::{GroupSet, LENS_CATALOG, LENS_GROUPS, SpanGroup};
use megatron_telemetry::groups::{
    MEGATRON_CATALOG, MEGATRON_GROUPS, MEGATRON_ONLY_GROUPS, MegatronSpanGroup as G, presets_containing, summary,
};

fn preset(name: &str) -> GroupSet {
    MEGATRON_CATALOG.preset(name).unwrap_or_else(|| panic!("preset {name} missing"))
}

#[test]
fn megatron_groups_have_the_original_names_and_bits_8_to_15_then_inference_step() {
    let expected = [
        (G::MICROBATCH, "microbatch"),
        (G::LAYER, "layer"),
        (G::COMMUNICATION, "communication"),
        (G::ACTIVATION_OFFLOAD, "activation_offload"),
        (G::DATA_LOADING, "data_loading"),
        (G::FIRST_ITERATION, "first_iteration"),
        (G::TRACE_REGION, "trace_region"),
        (G::INFERENCE, "inference"),
        (G::INFERENCE_STEP, "inference_step"),
    ];
    for (i, (group, name)) in expected.iter().enumerate() {
        assert_eq!(group.name(), *name);
        assert_eq!(usize::from(group.bit()), 8 + i, "{name}");
        assert_eq!(MEGATRON_ONLY_GROUPS[i], *group);
    }
}

#[test]
fn megatron_groups_are_distinct() {
    let names: HashSet<_> = MEGATRON_ONLY_GROUPS.iter().map(|g| g.name()).collect();
    let bits: HashSet<_> = MEGATRON_ONLY_GROUPS.iter().map(|g| g.bit()).collect();
    assert_eq!(names.len(), 9);
    assert_eq!(bits.len(), 9);
}

#[test]
fn megatron_groups_do_not_collide_with_the_base_groups() {
    for own in MEGATRON_ONLY_GROUPS {
        for base in LENS_GROUPS {
            assert_ne!(own.name(), base.name());
            assert_ne!(own.bit(), base.bit());
        }
    }
}

#[test]
fn base_constants_are_re_exposed_unchanged() {
    let pairs = [
        (G::JOB, SpanGroup::JOB),
        (G::CHECKPOINT, SpanGroup::CHECKPOINT),
        (G::EVALUATE, SpanGroup::EVALUATE),
        (G::MODEL_INIT, SpanGroup::MODEL_INIT),
        (G::LOAD_CHECKPOINT, SpanGroup::LOAD_CHECKPOINT),
        (G::STEP, SpanGroup::STEP),
        (G::FORWARD_BACKWARD, SpanGroup::FORWARD_BACKWARD),
        (G::OPTIMIZER, SpanGroup::OPTIMIZER),
    ];
    for (ours, base) in pairs {
        assert_eq!(ours, base);
        assert_eq!(ours.name(), base.name());
    }
    assert_eq!(&MEGATRON_GROUPS[..8], &LENS_GROUPS[..]);
}

#[test]
fn all_groups_is_the_union_of_base_and_megatron_groups() {
    let base = LENS_CATALOG.all_groups();
    let own = GroupSet::of(&MEGATRON_ONLY_GROUPS);
    assert!(G::ALL_GROUPS.is_superset(base));
    assert!(G::ALL_GROUPS.is_superset(own));
    assert_eq!(G::ALL_GROUPS, base.union(own));
    assert_eq!(G::ALL_GROUPS.len(), 17);
    assert_eq!(MEGATRON_CATALOG.all_groups(), G::ALL_GROUPS);
    assert_eq!(G::ALL_GROUPS.bits(), 0x1ffff, "bits 0 to 16");
}

#[test]
fn groups_are_listed_in_bit_order() {
    for (i, group) in MEGATRON_CATALOG.groups().iter().enumerate() {
        assert_eq!(usize::from(group.bit()), i, "{group}");
    }
}

#[test]
fn presets_are_exactly_default_per_step_profiling_all() {
    let names: Vec<_> = MEGATRON_CATALOG.presets().iter().map(|p| p.name).collect();
    assert_eq!(names, ["default", "per_step", "profiling", "all"]);
    assert!(
        MEGATRON_CATALOG.preset("full").is_none(),
        "no `full` preset: Megatron's help advertised one that does not exist"
    );
}

#[test]
fn every_preset_is_within_all_groups() {
    for p in MEGATRON_CATALOG.presets() {
        assert!(G::ALL_GROUPS.is_superset(p.groups), "{}", p.name);
    }
}

#[test]
fn default_is_within_per_step() {
    assert!(preset("per_step").is_superset(preset("default")));
    assert_ne!(preset("per_step"), preset("default"));
}

#[test]
fn all_and_profiling_are_every_group() {
    assert_eq!(preset("all"), G::ALL_GROUPS);
    assert_eq!(preset("profiling"), G::ALL_GROUPS);
}

#[test]
fn default_preset_is_structure_checkpoints_evaluation_first_iteration_inference() {
    let default = preset("default");
    assert_eq!(MEGATRON_CATALOG.names(default), ["job", "checkpoint", "evaluate", "first_iteration", "inference"]);
    for excluded in [G::STEP, G::FORWARD_BACKWARD, G::MICROBATCH] {
        assert!(!default.contains(excluded), "{excluded}");
    }
}

#[test]
fn per_step_preset_has_the_step_groups() {
    let per_step = preset("per_step");
    for group in [
        G::STEP,
        G::FORWARD_BACKWARD,
        G::OPTIMIZER,
        G::MODEL_INIT,
        G::LOAD_CHECKPOINT,
        G::COMMUNICATION,
        G::DATA_LOADING,
    ] {
        assert!(per_step.contains(group), "{group}");
    }
    assert_eq!(per_step.len(), 12);
}

#[test]
fn profiling_only_groups_are_outside_per_step_but_in_all() {
    for group in [G::MICROBATCH, G::LAYER, G::ACTIVATION_OFFLOAD, G::TRACE_REGION] {
        assert!(!preset("per_step").contains(group), "{group}");
        assert!(preset("all").contains(group), "{group}");
        assert_eq!(presets_containing(group), ["profiling", "all"], "{group}");
    }
}

#[test]
fn megatron_presets_replace_the_base_presets() {
    assert_ne!(MEGATRON_CATALOG.preset("default"), LENS_CATALOG.preset("default"));
    assert!(LENS_CATALOG.preset("profiling").is_none());
    assert!(LENS_CATALOG.resolve("microbatch").is_err(), "the base catalog knows no Megatron group");
    assert_eq!(LENS_CATALOG.groups().len(), 8, "the base has exactly the eight shared groups");
}

#[test]
fn resolve_returns_the_presets() {
    assert_eq!(G::resolve("default").unwrap(), preset("default"));
    assert_eq!(G::resolve("all").unwrap(), G::ALL_GROUPS);
    assert_eq!(MEGATRON_CATALOG.resolve("per_step").unwrap(), preset("per_step"));
}

#[test]
fn every_group_resolves_by_name() {
    for group in MEGATRON_GROUPS {
        assert_eq!(G::resolve(group.name()).unwrap(), GroupSet::of(&[group]));
    }
}

#[test]
fn specs_mix_presets_and_names_case_insensitively() {
    let set = G::resolve("  Default , MICROBATCH,,layer ").unwrap();
    assert_eq!(set, preset("default").with(G::MICROBATCH).with(G::LAYER));
    assert_eq!(G::resolve("").unwrap(), GroupSet::EMPTY);
    assert_eq!(G::resolve("per_step,trace_region").unwrap(), preset("per_step").with(G::TRACE_REGION));
}

#[test]
fn unknown_words_are_errors_naming_the_valid_words() {
    let err = G::resolve("default,full").unwrap_err();
    assert_eq!(err.word, "full");
    let text = err.to_string();
    assert!(text.contains("Unknown span group or preset: 'full'"), "{text}");
    assert!(text.contains("'profiling'") && text.contains("'microbatch'"), "{text}");
    assert!(!err.valid.contains(&"full"));

    let err = G::resolve("-step").unwrap_err();
    assert_eq!(err.word, "-step", "no negation syntax");

    let err = G::resolve("per-step").unwrap_err();
    assert_eq!(err.suggestion, Some("per_step"));
}

#[test]
fn inference_step_is_in_profiling_and_all_only() {
    assert_eq!(megatron_telemetry::groups::presets_containing(G::INFERENCE_STEP), ["profiling", "all"]);
    assert!(megatron_telemetry::groups::presets_containing(G::INFERENCE).contains(&"default"));
}

#[test]
fn every_group_has_a_summary() {
    for group in MEGATRON_GROUPS {
        assert!(summary(group).is_some_and(|s| !s.is_empty()), "{group}");
    }
    assert_eq!(summary(SpanGroup::new("other", 40)), None);
}

#[test]
fn span_groups_docs_are_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/span-groups.md");
    let text = std::fs::read_to_string(path).expect("docs/span-groups.md exists");
    let generated = megatron_telemetry::markdown::groups_reference();
    assert!(
        text.contains(&format!("<!-- generated:groups:start -->\n{generated}<!-- generated:groups:end -->")),
        "docs/span-groups.md is out of date: run `cargo xtask codegen`"
    );
}
