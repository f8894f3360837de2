//! The span taxonomy table: names form a tree, the groups, goodput flags and
//! attributes are the ones Megatron emits, and the generated docs page
//! matches the table.

use std::collections::HashSet;

use megatron_telemetry::groups::{MEGATRON_CATALOG, MegatronSpanGroup as G};
use megatron_telemetry::taxonomy::{self, Frequency, SPANS, attr};

#[test]
fn names_are_megatron_tree_paths_except_pre_startup_and_the_semconv_templates() {
    // The inference server's HTTP and GenAI spans are named by the semantic
    // conventions' templates, filled in per request.
    let templates = [taxonomy::INFERENCE_HTTP_SERVER.name, taxonomy::INFERENCE_GENERATE.name];
    assert_eq!(templates, ["{http.request.method} {http.route}", "{gen_ai.operation.name} {gen_ai.request.model}"]);
    for span in SPANS {
        assert!(
            span.name == "pre_startup" || span.name.starts_with("megatron.") || templates.contains(&span.name),
            "{}",
            span.name
        );
        assert!(!span.name.ends_with('.') && !span.name.contains(".."), "{}", span.name);
    }
}

#[test]
fn names_are_unique() {
    let mut seen = HashSet::new();
    for span in SPANS {
        assert!(seen.insert(span.name), "duplicate span name {}", span.name);
    }
}

#[test]
fn every_parent_is_in_the_table_and_comes_before_its_children() {
    for (i, span) in SPANS.iter().enumerate() {
        if let Some(parent) = span.parent {
            let at = SPANS.iter().position(|s| s.name == parent);
            assert!(at.is_some(), "{}: parent {parent} is not in the table", span.name);
            assert!(at < Some(i), "{}: parent {parent} comes after it", span.name);
        }
    }
}

#[test]
fn the_trace_roots_are_pre_startup_startup_train_and_the_inference_request_and_step() {
    let roots: Vec<_> = SPANS.iter().filter(|s| s.parent.is_none()).map(|s| s.name).collect();
    assert_eq!(
        roots,
        [
            "pre_startup",
            "megatron.startup",
            "megatron.train",
            "{http.request.method} {http.route}",
            "megatron.inference.step"
        ]
    );
    let training_roots =
        SPANS.iter().filter(|s| s.parent.is_none() && s.group != G::INFERENCE && s.group != G::INFERENCE_STEP);
    assert!(training_roots.clone().all(|s| s.group == G::JOB), "training roots are structural");
}

#[test]
fn counts_match_the_original() {
    // PR #6385: `megatron.startup.*` 12, `megatron.checkpoint.*` 13,
    // `megatron.train.*` 9 (not counting the iteration's two sub-spans).
    let count = |prefix: &str| SPANS.iter().filter(|s| s.name.starts_with(prefix)).count();
    assert_eq!(count("megatron.startup."), 12);
    assert_eq!(count("megatron.checkpoint."), 13);
    assert_eq!(count("megatron.train.") - count("megatron.train.iteration."), 9);
    assert_eq!(SPANS.len(), 63);
}

#[test]
fn every_group_is_in_the_megatron_catalog() {
    for span in SPANS {
        assert_eq!(MEGATRON_CATALOG.group(span.group.name()), Some(span.group), "{}", span.name);
    }
    // Reserved groups with no emitter yet.
    assert_eq!(taxonomy::spans_in(G::TRACE_REGION).count(), 0);
    for group in MEGATRON_CATALOG.groups() {
        if *group != G::TRACE_REGION {
            assert!(taxonomy::spans_in(*group).count() > 0, "{group} has no span");
        }
    }
}

#[test]
fn groups_follow_the_original() {
    let group = |name: &str| taxonomy::find(name).unwrap().group;
    assert_eq!(group("megatron.startup.model_init"), G::MODEL_INIT);
    assert_eq!(group("megatron.checkpoint.load.io_read"), G::LOAD_CHECKPOINT);
    assert_eq!(group("megatron.startup.dataloader"), G::DATA_LOADING);
    assert_eq!(group("megatron.train.first_iteration"), G::FIRST_ITERATION);
    assert_eq!(group("megatron.train.forward_pre_hook"), G::FIRST_ITERATION);
    assert_eq!(group("megatron.checkpoint.timers_log"), G::STEP, "group `step` despite its name");
    assert_eq!(group("megatron.grad_sync.finish"), G::COMMUNICATION);
    assert_eq!(group("megatron.activation.reload"), G::ACTIVATION_OFFLOAD);
    assert_eq!(group("megatron.layer.mamba"), G::LAYER);
}

#[test]
fn default_preset_still_has_two_per_iteration_spans() {
    let default = MEGATRON_CATALOG.preset("default").unwrap();
    let mut per_iteration: Vec<_> = SPANS
        .iter()
        .filter(|s| default.contains(s.group) && s.frequency == Frequency::EveryIteration)
        .map(|s| s.name)
        .collect();
    per_iteration.sort_unstable();
    assert_eq!(per_iteration, ["megatron.checkpoint.ft_heartbeat", "megatron.checkpoint.save.finalize"]);
}

#[test]
fn goodput_flags_follow_the_original() {
    let not_goodput = [
        "megatron.train.iteration.forward_backward",
        "megatron.train.iteration.optimizer",
        "megatron.microbatch.forward",
        "megatron.layer.forward",
        "megatron.p2p.send_forward",
        "megatron.grad_sync.start",
        "megatron.activation.offload",
        "megatron.evaluate",
        "megatron.evaluate.step",
        "megatron.pp.recv_forward.linked",
    ];
    for name in not_goodput {
        assert!(!taxonomy::find(name).unwrap().goodput, "{name}");
    }
    let goodput = ["megatron.startup", "megatron.train", "megatron.train.iteration", "megatron.checkpoint.save"];
    for name in goodput {
        assert!(taxonomy::find(name).unwrap().goodput, "{name}");
    }
    assert!(SPANS.iter().filter(|s| s.group == G::EVALUATE).all(|s| !s.goodput), "evaluation is not goodput");
}

#[test]
fn pipeline_parallel_linked_spans_are_communication_with_rank_and_microbatch() {
    for (name, parent) in [
        ("megatron.pp.recv_forward.linked", "megatron.p2p.recv_forward"),
        ("megatron.pp.recv_backward.linked", "megatron.p2p.recv_backward"),
    ] {
        let span = taxonomy::find(name).unwrap();
        assert_eq!(span.group, G::COMMUNICATION);
        assert_eq!(span.parent, Some(parent));
        assert_eq!(span.attributes, ["dl.pipeline_parallel.rank", "dl.microbatch_id"]);
    }
}

#[test]
fn attributes_are_known_keys_on_the_right_spans() {
    let mut known: HashSet<_> = attr::ALL.iter().copied().collect();
    assert_eq!(known.len(), attr::ALL.len(), "attribute keys are unique");
    // The inference server's spans carry the HTTP and GenAI semantic
    // conventions' keys, which are lens-core's.
    known.extend(lens_fallbacks::semconv::ALL.iter().map(|key| key.key));
    for span in SPANS {
        for key in span.attributes {
            assert!(known.contains(key), "{}: unknown attribute {key}", span.name);
        }
    }
    for key in attr::ALL.iter().filter(|k| **k != attr::IS_GOODPUT_SPAN) {
        assert!(SPANS.iter().any(|s| s.attributes.contains(key)), "{key} is on no span");
    }
    let attrs = |name: &str| taxonomy::find(name).unwrap().attributes;
    assert_eq!(attrs("megatron.train.iteration.forward_backward"), ["num_microbatches"], "the bare key");
    assert_eq!(attrs("megatron.train.iteration"), ["megatron.iteration", "megatron.skipped"]);
    assert_eq!(attrs("megatron.train.iteration.optimizer"), ["megatron.update_successful"]);
    assert_eq!(attrs("megatron.layer.forward"), ["megatron.layer_number"]);
    assert_eq!(attrs("megatron.evaluate.step"), ["megatron.eval_iteration"]);
    assert_eq!(attrs("megatron.startup"), ["megatron.model_type"]);
    assert!(attrs("megatron.checkpoint.save.finalize").contains(&"nvrx.call_idx"));
}

#[test]
fn lookup_helpers_agree_with_the_table() {
    assert_eq!(taxonomy::find("megatron.train"), Some(&taxonomy::TRAIN));
    assert_eq!(taxonomy::find("megatron.pretrain"), None, "stale names are not in the table");
    let children: Vec<_> = taxonomy::children_of("megatron.train.iteration").map(|s| s.name).collect();
    assert_eq!(children, ["megatron.train.iteration.forward_backward", "megatron.train.iteration.optimizer"]);
}

#[test]
fn markdown_lists_every_span_once() {
    let text = megatron_telemetry::markdown::span_taxonomy();
    for span in SPANS {
        let row = format!("`{}` | `{}` |", span.name, span.group.name());
        assert_eq!(text.matches(&row).count(), 1, "{}", span.name);
    }
}

#[test]
fn span_taxonomy_docs_are_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/span-taxonomy.md");
    let text = std::fs::read_to_string(path).expect("docs/span-taxonomy.md exists");
    assert!(
        text == megatron_telemetry::markdown::span_taxonomy(),
        "docs/span-taxonomy.md is out of date: run `cargo xtask codegen`"
    );
}

/// Structure is never sampled away: every span emitted every iteration or
/// log interval directly below the interval is keyed by its iteration; the spans inside
/// them follow their parent; startup, the intervals, checkpoint save and load,
/// evaluation and the closing spans are structural; a server's roots are
/// the sampler's.
#[test]
fn the_sampling_column_keys_per_iteration_spans_and_keeps_the_structure() {
    use taxonomy::Sampling;
    for span in SPANS {
        let below_interval = span.parent == Some(taxonomy::TRAIN.name);
        let every = matches!(span.frequency, Frequency::EveryIteration | Frequency::Periodic);
        if every && below_interval {
            assert_eq!(span.sampling, Sampling::Iteration, "{}", span.name);
        }
        if matches!(span.frequency, Frequency::PerMicrobatch | Frequency::PerLayer) {
            assert_eq!(span.sampling, Sampling::Parent, "{}", span.name);
        }
        // The inference request tree follows its root, the HTTP server span
        // (itself parent-based on the request's `traceparent`).
        let inference = span.group == G::INFERENCE || span.group == G::INFERENCE_STEP;
        if span.sampling == Sampling::Parent && !inference {
            let parent = taxonomy::find(span.parent.unwrap()).unwrap();
            assert_ne!(parent.sampling, Sampling::Structural, "{} follows a structural parent", span.name);
            assert_eq!(span.parent_group, Some(parent.group), "{}", span.name);
        }
    }
    let keyed: Vec<&str> = SPANS.iter().filter(|s| s.sampling == Sampling::Iteration).map(|s| s.name).collect();
    assert_eq!(
        keyed,
        [
            "megatron.checkpoint.ft_heartbeat",
            "megatron.checkpoint.save.finalize",
            "megatron.train.first_iteration",
            "megatron.train.iteration",
            "megatron.train.forward_pre_hook",
            "megatron.train.iteration_report",
            "megatron.train.sniff_test",
            "megatron.train.gc_collect",
        ]
    );
    for name in [
        "pre_startup",
        "megatron.startup",
        "megatron.startup.model_init",
        "megatron.checkpoint.load",
        "megatron.checkpoint.load.io_read",
        "megatron.train",
        "megatron.evaluate",
        "megatron.evaluate.step",
        "megatron.checkpoint.exposed_save",
        "megatron.checkpoint.save",
        "megatron.checkpoint.save.io_write",
        "megatron.checkpoint.timers_log",
        "megatron.checkpoint.exit_finalize",
    ] {
        assert_eq!(taxonomy::find(name).unwrap().sampling, Sampling::Structural, "{name}");
    }
    // A server's roots are traces like any other: the configured sampler
    // decides them (only training is structural).
    for name in [taxonomy::INFERENCE_HTTP_SERVER.name, "megatron.inference.step"] {
        assert_eq!(taxonomy::find(name).unwrap().sampling, Sampling::Sampler, "{name}");
    }
}
