//! Rank and sampling strategies: the built-ins, the registries with their
//! protection rules and error texts, the Lens v0.2.0 aliases, and the
//! original's rank hash (the Python `strategies` tests and the
//! `_should_export` matrix of its `handle` tests).
//!
//! The registries are process-global: tests that register use names of
//! their own, and the one that replaces a built-in keeps its behaviour.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lens_core::config::{ConfigProblem, LensConfig};
use lens_core::groups::LENS_CATALOG;
use lens_core::identity::RankContext;
use lens_core::strategies::{
    BUILTIN_RANK_STRATEGIES, BUILTIN_SAMPLING_STRATEGIES, StrategyError, StrategyKind, rank_score, rank_strategy,
    records_spans, register_rank_strategy, register_sampling_strategy, registered_rank_strategies,
    registered_sampling_strategies, should_export, unregister_rank_strategy, unregister_sampling_strategy,
};
use proptest::prelude::*;

fn ctx(rank: u32, world_size: u32) -> RankContext {
    RankContext { rank, world_size, ..RankContext::SINGLE }
}

fn config(strategy: &str) -> LensConfig {
    LensConfig { rank_strategy: strategy.to_string(), ..LensConfig::default() }
}

fn exporting_ranks(config: &LensConfig, world_size: u32) -> Vec<u32> {
    (0..world_size).filter(|&r| should_export(config, &ctx(r, world_size)).unwrap()).collect()
}

// ---------------------------------------------------------------- built-ins

#[test]
fn the_four_builtin_rank_strategies_are_registered() {
    assert_eq!(BUILTIN_RANK_STRATEGIES, ["all_ranks", "first_rank_per_node", "sampled", "single_rank"]);
    let registered = registered_rank_strategies();
    for name in BUILTIN_RANK_STRATEGIES {
        assert!(registered.contains(&name.to_string()), "{name} missing from {registered:?}");
    }
    let mut sorted = registered.clone();
    sorted.sort();
    assert_eq!(registered, sorted, "the list is sorted");
}

#[test]
fn rank_aware_is_the_builtin_sampling_strategy() {
    assert_eq!(BUILTIN_SAMPLING_STRATEGIES, ["rank_aware"]);
    assert!(registered_sampling_strategies().contains(&"rank_aware".to_string()));
}

#[test]
fn all_ranks_exports_everywhere() {
    assert_eq!(exporting_ranks(&config("all_ranks"), 8), (0..8).collect::<Vec<_>>());
}

#[test]
fn single_rank_defaults_to_the_last_rank() {
    assert_eq!(exporting_ranks(&config("single_rank"), 8), [7]);
    assert_eq!(exporting_ranks(&LensConfig::default(), 1), [0]);
}

#[test]
fn single_rank_with_an_explicit_rank() {
    let c = LensConfig { export_rank: 0, ..config("single_rank") };
    assert_eq!(exporting_ranks(&c, 8), [0]);
    let c = LensConfig { export_rank: 3, ..config("single_rank") };
    assert_eq!(exporting_ranks(&c, 8), [3]);
    // A rank beyond the job: the strategy exports from nobody, as the
    // original does, and `should_export` says so instead.
    let c = LensConfig { export_rank: 8, ..config("single_rank") };
    assert!((0..8).all(|r| !lens_core::strategies::single_rank(&c, &ctx(r, 8))));
    for rank in [0, 7] {
        let error = should_export(&c, &ctx(rank, 8)).unwrap_err();
        assert!(matches!(error, StrategyError::ExportRankOutOfRange { export_rank: 8, world_size: 8, .. }));
        assert_eq!(
            error.to_string(),
            "export_rank=8 is not below the world size 8, so no rank would export under single_rank; expected -1 \
             (the last rank) or a rank from 0 to 7"
        );
    }
    // Other strategies do not read it.
    let c = LensConfig { export_rank: 8, ..config("all_ranks") };
    assert_eq!(exporting_ranks(&c, 2), [0, 1]);
}

#[test]
fn first_rank_per_node_uses_the_local_rank() {
    let c = config("first_rank_per_node");
    let on = |local_rank| should_export(&c, &RankContext { rank: 9, world_size: 16, local_rank, node_rank: Some(1) });
    assert!(on(0).unwrap());
    assert!(!on(3).unwrap());
}

#[test]
fn first_rank_per_node_with_local_rank_from_the_environment() {
    let c = config("first_rank_per_node");
    let detect = |pairs: &[(&str, &str)]| {
        let env: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RankContext::detect(&env).unwrap()
    };
    let base = [("RANK", "5"), ("WORLD_SIZE", "8")];
    assert!(should_export(&c, &detect(&[base[0], base[1], ("LOCAL_RANK", "0")])).unwrap());
    assert!(!should_export(&c, &detect(&[base[0], base[1], ("LOCAL_RANK", "3")])).unwrap());
    assert!(should_export(&c, &detect(&base)).unwrap(), "a missing LOCAL_RANK counts as 0, as in the original");
}

#[test]
fn sampled_is_deterministic_and_bounded_by_the_rate() {
    let at = |rate| LensConfig { export_sample_rate: rate, ..config("sampled") };
    assert!(exporting_ranks(&at(0.0), 10).is_empty());
    assert_eq!(exporting_ranks(&at(1.0), 10), (0..10).collect::<Vec<_>>());
    assert_eq!(exporting_ranks(&at(0.5), 64), exporting_ranks(&at(0.5), 64));
    // The world size plays no part.
    assert_eq!(should_export(&at(0.5), &ctx(3, 4)), should_export(&at(0.5), &ctx(3, 4096)));
}

// The ranks in 0..64 that pass `sampled` at each rate, computed once with Python:
// python3 -c "import hashlib; print([r for r in range(64) if (int(hashlib.md5(str(r).encode()).hexdigest(),16)%10000)/10000 < 0.5])"
// (with 0.1, 0.25, 0.5 and 0.9 in place of the rate).
const PYTHON_TABLE: [(f64, &[u32]); 4] = [
    (0.1, &[3, 5, 6, 31, 55]),
    (0.25, &[3, 4, 5, 6, 10, 30, 31, 37, 50, 55, 57, 62]),
    (0.5, &[3, 4, 5, 6, 8, 10, 11, 13, 19, 22, 23, 30, 31, 32, 33, 36, 37, 44, 47, 48, 50, 51, 52, 55, 57, 58, 62]),
    (
        0.9,
        &[
            0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26, 27, 28, 29, 30,
            31, 32, 33, 34, 35, 36, 37, 38, 39, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59,
            60, 61, 62, 63,
        ],
    ),
];

#[test]
fn sampled_picks_the_same_ranks_as_the_python_original() {
    for (rate, expected) in PYTHON_TABLE {
        let c = LensConfig { export_sample_rate: rate, ..config("sampled") };
        assert_eq!(exporting_ranks(&c, 64), expected, "rate {rate}");
    }
}

#[test]
fn rank_score_matches_python() {
    // python3 -c "import hashlib; print([int(hashlib.md5(str(r).encode()).hexdigest(),16)%10000 for r in range(8)])"
    let expected = [7850, 8411, 9212, 883, 1900, 693, 412, 5555];
    for (rank, score) in expected.into_iter().enumerate() {
        assert_eq!(rank_score(rank as u32), f64::from(score) / 10_000.0, "rank {rank}");
    }
}

#[test]
fn rank_aware_picks_the_same_ranks_as_sampled_and_honours_the_limits() {
    for (rate, expected) in PYTHON_TABLE {
        let c =
            LensConfig { sampling_strategy: "rank_aware".into(), export_sample_rate: rate, ..LensConfig::default() };
        let recording: Vec<u32> = (0..64).filter(|&r| records_spans(&c, &ctx(r, 64)).unwrap()).collect();
        assert_eq!(recording, expected, "rate {rate}");
    }
    let at =
        |rate| LensConfig { sampling_strategy: "rank_aware".into(), export_sample_rate: rate, ..LensConfig::default() };
    assert!((0..64).all(|r| records_spans(&at(1.0), &ctx(r, 64)).unwrap()), "rate 1 keeps every rank");
    assert!((0..64).all(|r| !records_spans(&at(0.0), &ctx(r, 64)).unwrap()), "rate 0 drops every rank");
}

#[test]
fn no_sampling_strategy_records_on_every_rank() {
    let c = LensConfig { export_sample_rate: 0.0, ..LensConfig::default() };
    assert!((0..16).all(|r| records_spans(&c, &ctx(r, 16)).unwrap()));
}

// ----------------------------------------------------------------- registry

#[test]
fn a_registered_rank_strategy_is_looked_up_and_dispatched() {
    register_rank_strategy("test_even_ranks", |_, ctx| ctx.rank % 2 == 0, false).unwrap();
    assert!(registered_rank_strategies().contains(&"test_even_ranks".to_string()));
    let strategy = rank_strategy("test_even_ranks").unwrap();
    assert!(strategy(&LensConfig::default(), &ctx(2, 4)));
    assert_eq!(exporting_ranks(&config("test_even_ranks"), 6), [0, 2, 4]);
    // The configuration accepts the name once it is registered.
    let c = LensConfig::from_env(&[("NEMO_LENS_RANK_STRATEGY", "test_even_ranks")], "NEMO_LENS", None, &LENS_CATALOG)
        .unwrap();
    assert_eq!(c.rank_strategy, "test_even_ranks");
}

#[test]
fn a_registered_strategy_sees_the_configuration() {
    register_rank_strategy("test_rank_from_config", |c, ctx| i64::from(ctx.rank) == c.export_rank * 2, false).unwrap();
    let c = LensConfig { export_rank: 2, ..config("test_rank_from_config") };
    assert_eq!(exporting_ranks(&c, 8), [4]);
}

#[test]
fn an_empty_name_is_rejected() {
    for name in ["", "   "] {
        let err = register_rank_strategy(name, |_, _| true, false).unwrap_err();
        assert_eq!(err, StrategyError::EmptyName);
        assert_eq!(err.to_string(), "Strategy name must be a non-empty string.");
        assert_eq!(register_sampling_strategy(name, |_, _| true, true).unwrap_err(), StrategyError::EmptyName);
    }
}

#[test]
fn a_duplicate_needs_allow_override() {
    register_rank_strategy("test_duplicate", |_, _| false, false).unwrap();
    let err = register_rank_strategy("test_duplicate", |_, _| true, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Strategy 'test_duplicate' is already registered. Pass allow_override=true to replace it."
    );
    assert!(!should_export(&config("test_duplicate"), &ctx(0, 1)).unwrap(), "the first one stays");
    register_rank_strategy("test_duplicate", |_, _| true, true).unwrap();
    assert!(should_export(&config("test_duplicate"), &ctx(0, 1)).unwrap(), "replaced with allow_override");
}

#[test]
fn builtins_are_protected_unless_allow_override() {
    let err = register_rank_strategy("single_rank", |_, _| true, false).unwrap_err();
    assert_eq!(err, StrategyError::AlreadyRegistered("single_rank".into()));
    let err = register_sampling_strategy("rank_aware", |_, _| true, false).unwrap_err();
    assert_eq!(err, StrategyError::AlreadyRegistered("rank_aware".into()));

    // Replace `sampled` with a counting wrapper that decides the same, so
    // that tests running concurrently see no difference, then restore it.
    let original = rank_strategy("sampled").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (inner, counter) = (Arc::clone(&original), Arc::clone(&calls));
    register_rank_strategy(
        "sampled",
        move |c, x| {
            counter.fetch_add(1, Ordering::Relaxed);
            inner(c, x)
        },
        true,
    )
    .unwrap();
    let c = LensConfig { export_sample_rate: 0.5, ..config("sampled") };
    assert!(should_export(&c, &ctx(3, 8)).unwrap(), "rank 3 passes at 0.5");
    assert!(calls.load(Ordering::Relaxed) >= 1, "the replacement ran");
    register_rank_strategy("sampled", move |c, x| original(c, x), true).unwrap();
    // Replaced or not, a built-in cannot be unregistered.
    assert_eq!(
        unregister_rank_strategy("sampled").unwrap_err().to_string(),
        "Cannot unregister built-in strategy 'sampled'."
    );
}

#[test]
fn unregistering_custom_unknown_and_builtin_strategies() {
    register_rank_strategy("test_to_remove", |_, _| true, false).unwrap();
    unregister_rank_strategy("test_to_remove").unwrap();
    assert!(!registered_rank_strategies().contains(&"test_to_remove".to_string()));
    assert_eq!(
        unregister_rank_strategy("test_to_remove").unwrap_err().to_string(),
        "Strategy 'test_to_remove' is not registered."
    );
    for name in BUILTIN_RANK_STRATEGIES {
        assert_eq!(unregister_rank_strategy(name).unwrap_err(), StrategyError::Builtin(name.into()));
    }
    assert_eq!(
        unregister_sampling_strategy("rank_aware").unwrap_err().to_string(),
        "Cannot unregister built-in strategy 'rank_aware'."
    );
    assert_eq!(
        unregister_sampling_strategy("test_nope").unwrap_err(),
        StrategyError::NotRegistered("test_nope".into())
    );
}

#[test]
fn an_unknown_rank_strategy_lists_the_registered_ones_and_suggests() {
    let err = should_export(&config("all_rank"), &ctx(0, 1)).unwrap_err();
    let StrategyError::Unknown { kind, name, registered, suggestion } = &err else { panic!("{err:?}") };
    assert_eq!((*kind, name.as_str()), (StrategyKind::Rank, "all_rank"));
    assert!(BUILTIN_RANK_STRATEGIES.iter().all(|b| registered.contains(&b.to_string())));
    assert_eq!(suggestion.as_deref(), Some("all_ranks"));
    let text = err.to_string();
    assert!(text.starts_with("Unknown rank strategy 'all_rank'. Registered strategies: ['all_ranks', "), "{text}");
    assert!(text.ends_with(". Did you mean 'all_ranks'?"), "{text}");
    let text = should_export(&config("zzz"), &ctx(0, 1)).unwrap_err().to_string();
    assert!(!text.contains("Did you mean"), "no suggestion for a far-off name: {text}");
}

#[test]
fn a_registered_sampling_strategy_decides_which_ranks_record() {
    register_sampling_strategy("test_first_half", |_, ctx| ctx.rank < ctx.world_size / 2, false).unwrap();
    assert!(registered_sampling_strategies().contains(&"test_first_half".to_string()));
    let c =
        LensConfig::from_env(&[("NEMO_LENS_SAMPLING_STRATEGY", "test_first_half")], "NEMO_LENS", None, &LENS_CATALOG)
            .unwrap();
    let recording: Vec<u32> = (0..8).filter(|&r| records_spans(&c, &ctx(r, 8)).unwrap()).collect();
    assert_eq!(recording, [0, 1, 2, 3]);
    register_sampling_strategy("test_removed_sampler", |_, _| true, false).unwrap();
    unregister_sampling_strategy("test_removed_sampler").unwrap();
    let c = LensConfig { sampling_strategy: "test_removed_sampler".into(), ..LensConfig::default() };
    let err = records_spans(&c, &ctx(0, 1)).unwrap_err();
    assert!(err.to_string().starts_with("Unknown sampling strategy 'test_removed_sampler'."), "{err}");
    assert!(matches!(
        c.validate().unwrap_err().problems(),
        [ConfigProblem::UnknownStrategy { variable, .. }] if variable == "LensConfig.sampling_strategy"
    ));
}

#[test]
fn a_strategy_that_registers_another_does_not_deadlock() {
    // The registry lock is released before a strategy runs.
    register_rank_strategy(
        "test_reentrant",
        |_, _| register_rank_strategy("test_registered_inside", |_, _| true, true).is_ok(),
        false,
    )
    .unwrap();
    assert!(should_export(&config("test_reentrant"), &ctx(0, 1)).unwrap());
}

proptest! {
    #[test]
    fn sampled_is_monotone_in_the_rate(rank in 0u32..100_000, low in 0.0f64..=1.0, high in 0.0f64..=1.0) {
        let (low, high) = if low <= high { (low, high) } else { (high, low) };
        let at = |rate| should_export(&LensConfig { export_sample_rate: rate, ..config("sampled") }, &ctx(rank, 100_000)).unwrap();
        prop_assert!(!at(low) || at(high), "a rank kept at {} is kept at {}", low, high);
    }

    #[test]
    fn rank_aware_agrees_with_sampled_inside_the_open_interval(rank in 0u32..100_000, rate in 0.0001f64..0.9999) {
        let sampled = should_export(&LensConfig { export_sample_rate: rate, ..config("sampled") }, &ctx(rank, 1)).unwrap();
        let c = LensConfig { sampling_strategy: "rank_aware".into(), export_sample_rate: rate, ..LensConfig::default() };
        prop_assert_eq!(records_spans(&c, &ctx(rank, 1)).unwrap(), sampled);
    }

    #[test]
    fn rank_score_is_in_the_unit_interval_with_four_decimals(rank in any::<u32>()) {
        let score = rank_score(rank);
        prop_assert!((0.0..1.0).contains(&score));
        prop_assert_eq!((score * 10_000.0).round() / 10_000.0, score);
    }
}
