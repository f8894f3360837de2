//! The configuration model: defaults, environment parsing, prefixes and
//! aliases, command-line overrides, the standard `OTEL_*` variables and
//! validation (the original's `config` tests, and this project's names,
//! precedence and exporter selection).
//!
//! Every environment here is a map: no test touches the process environment.

use std::collections::HashMap;
use std::time::Duration;

use lens_core::config::{
    CliOverrides, Compression, ConfigLoader, ConfigProblem, ExporterKind, Headers, LensConfig, OtlpProtocol,
    Propagator, Signal, TracesSampler,
};
use lens_core::groups::{GroupSet, LENS_CATALOG, LENS_GROUPS, Preset, SpanGroup, SpanGroupCatalog};
use proptest::prelude::*;

const SECRET: &str = "Bearer s3cr3t-t0ken";

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Lens's own prefix, as NeMo uses it.
fn lens(pairs: &[(&str, &str)]) -> Result<LensConfig, lens_core::config::ConfigError> {
    LensConfig::from_env(&env(pairs), "NEMO_LENS", None, &LENS_CATALOG)
}

/// Megatron's prefixes: `MEGATRON_OTEL_*` with `NEMO_LENS_*` as fallback.
fn megatron(pairs: &[(&str, &str)]) -> Result<LensConfig, lens_core::config::ConfigError> {
    LensConfig::from_env(&env(pairs), "MEGATRON_OTEL", Some("NEMO_LENS"), &LENS_CATALOG)
}

fn problems(pairs: &[(&str, &str)]) -> Vec<ConfigProblem> {
    megatron(pairs).expect_err("expected a configuration error").into_problems()
}

fn message(pairs: &[(&str, &str)]) -> String {
    megatron(pairs).expect_err("expected a configuration error").to_string()
}

// ---------------------------------------------------------------- defaults

#[test]
fn defaults_are_the_originals() {
    let c = LensConfig::default();
    assert!(!c.enabled);
    assert_eq!(c.service_name, "nemo");
    assert_eq!(c.rank_strategy, "single_rank");
    assert_eq!(c.export_rank, -1);
    assert_eq!(c.export_sample_rate, 1.0);
    assert_eq!(c.sampling_strategy, "");
    assert!(c.traces_enabled);
    assert!(c.metrics_enabled);
    assert!(!c.logs_enabled);
    assert_eq!(c.span_groups, "default");
    assert_eq!(c.exporter, None);
    assert_eq!(c.run_id, "");
    assert_eq!(c.user, "");
    assert_eq!((c.wandb_entity.as_str(), c.wandb_project.as_str()), ("", ""));
    assert_eq!(c.catalog.name(), "lens");
    assert!(c.validate().is_ok());
}

#[test]
fn default_exporter_is_otlp_but_not_configured() {
    let c = LensConfig::default();
    for signal in Signal::ALL {
        assert_eq!(c.exporter_for(signal), ExporterKind::Otlp);
    }
    assert!(!c.exporter_configured());
}

#[test]
fn default_span_groups_resolve_to_job_checkpoint_evaluate() {
    let groups = LensConfig::default().resolved_span_groups().unwrap();
    assert_eq!(groups, GroupSet::of(&[SpanGroup::JOB, SpanGroup::CHECKPOINT, SpanGroup::EVALUATE]));
}

#[test]
fn lens_extras_have_their_defaults() {
    let c = LensConfig::default();
    assert_eq!(c.file_dir, None);
    assert_eq!(c.file_dir_for("abc123"), std::path::Path::new("telemetry/abc123"));
    assert_eq!(c.export_retry_window, Duration::from_secs(30));
    assert_eq!(c.shutdown_timeout, Duration::from_secs(5));
    assert_eq!(c.prometheus_linger, Duration::ZERO);
    assert_eq!(c.prometheus_resource_labels, ["nemo.run.id", "service.instance.id"]);
}

#[test]
fn otel_defaults_follow_the_original_and_lens_throughput_choices() {
    let o = LensConfig::default().otel;
    assert!(!o.sdk_disabled);
    assert_eq!((o.traces_exporter, o.metrics_exporter, o.logs_exporter), (None, None, None));
    assert_eq!(o.traces_sampler, TracesSampler::ParentBasedAlwaysOn);
    assert_eq!(o.metric_export_interval, Duration::from_secs(10), "the original's 10 s, not the SDK's 60 s");
    assert_eq!((o.prometheus_host.as_str(), o.prometheus_port), ("localhost", 9464));
    assert_eq!(o.propagators, [Propagator::TraceContext, Propagator::Baggage]);
    assert_eq!(o.batch.max_queue_size, 65_536);
    assert_eq!(o.batch.max_export_batch_size, 4096);
    assert_eq!(o.batch.schedule_delay, Duration::from_millis(200));
    assert_eq!(o.batch.max_concurrent_exports, 2);
    for signal in Signal::ALL {
        let s = o.otlp(signal);
        assert_eq!(s.protocol, OtlpProtocol::Grpc);
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert_eq!(s.compression, Compression::None);
        assert!(s.headers.is_empty() && s.endpoint.is_none() && s.certificate.is_none());
        assert_eq!(s.endpoint_url(signal), "http://localhost:4317");
    }
}

#[test]
fn empty_environment_gives_the_defaults() {
    let c = lens(&[]).unwrap();
    assert_eq!(format!("{c:?}"), format!("{:?}", LensConfig::default()));
}

// ------------------------------------------------------------ env parsing

#[test]
fn every_lens_variable_is_read() {
    let c = lens(&[
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_RANK_STRATEGY", "all_ranks"),
        ("NEMO_LENS_EXPORT_RANK", "3"),
        ("NEMO_LENS_EXPORT_SAMPLE_RATE", "0.25"),
        ("NEMO_LENS_SAMPLING_STRATEGY", "rank_aware"),
        ("NEMO_LENS_TRACES_ENABLED", "0"),
        ("NEMO_LENS_METRICS_ENABLED", "no"),
        ("NEMO_LENS_RANK_METRICS", "1"),
        ("NEMO_LENS_LOGS_ENABLED", "on"),
        ("NEMO_LENS_SPAN_GROUPS", "per_step"),
        ("NEMO_LENS_EXPORTER", "console"),
        ("NEMO_LENS_RUN_ID", "run-42"),
        ("NEMO_LENS_LAUNCH_ID", "launch-7"),
        ("NEMO_LENS_USER_ID", "team-a"),
        ("USER", "not-this-one"),
        ("WANDB_ENTITY", "ent"),
        ("WANDB_PROJECT", "proj"),
        ("NEMO_LENS_FILE_DIR", "/tmp/telemetry"),
        ("NEMO_LENS_EXPORT_RETRY_WINDOW_MS", "1500"),
        ("NEMO_LENS_SHUTDOWN_TIMEOUT_MS", "250"),
        ("NEMO_LENS_PROMETHEUS_LINGER_MS", "60000"),
        ("NEMO_LENS_PROMETHEUS_RESOURCE_LABELS", "nemo.run.id, host.name"),
    ])
    .unwrap();
    assert!(c.enabled);
    assert_eq!(c.rank_strategy, "all_ranks");
    assert_eq!(c.export_rank, 3);
    assert_eq!(c.export_sample_rate, 0.25);
    assert_eq!(c.sampling_strategy, "rank_aware");
    assert!(!c.traces_enabled && !c.metrics_enabled && c.logs_enabled);
    assert!(c.rank_metrics, "NEMO_LENS_RANK_METRICS=1 turns per-rank metrics on");
    assert_eq!(c.span_groups, "per_step");
    assert_eq!(c.exporter, Some(ExporterKind::Console));
    assert_eq!(c.run_id, "run-42");
    assert_eq!(c.launch_id, "launch-7");
    assert_eq!(c.user, "team-a", "the user comes from *_USER_ID, not USER");
    assert_eq!((c.wandb_entity.as_str(), c.wandb_project.as_str()), ("ent", "proj"));
    assert_eq!(c.file_dir.as_deref(), Some(std::path::Path::new("/tmp/telemetry")));
    assert_eq!(c.export_retry_window, Duration::from_millis(1500));
    assert_eq!(c.shutdown_timeout, Duration::from_millis(250));
    assert_eq!(c.prometheus_linger, Duration::from_secs(60));
    assert_eq!(c.prometheus_resource_labels, ["nemo.run.id", "host.name"]);
}

#[test]
fn rank_metrics_is_off_by_default_and_validated_like_every_boolean() {
    assert!(!lens(&[]).unwrap().rank_metrics);
    let text = lens(&[("NEMO_LENS_RANK_METRICS", "sometimes")]).unwrap_err().to_string();
    assert!(text.contains("Invalid boolean for NEMO_LENS_RANK_METRICS: 'sometimes'."), "{text}");
}

#[test]
fn boolean_spellings_are_the_originals() {
    for spelling in ["1", "true", "yes", "on", "True", "YES", " on "] {
        assert!(lens(&[("NEMO_LENS_ENABLED", spelling)]).unwrap().enabled, "{spelling:?}");
    }
    for spelling in ["0", "false", "no", "off", "FALSE"] {
        let c = lens(&[("NEMO_LENS_ENABLED", spelling), ("NEMO_LENS_TRACES_ENABLED", spelling)]).unwrap();
        assert!(!c.enabled && !c.traces_enabled, "{spelling:?}");
    }
}

#[test]
fn invalid_boolean_names_the_variable_with_the_original_text() {
    assert_eq!(
        message(&[("MEGATRON_OTEL_ENABLED", "maybe")]),
        "Invalid boolean for MEGATRON_OTEL_ENABLED: 'maybe'. Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
    );
}

#[test]
fn invalid_integer_and_float_name_the_variable_and_what_is_accepted() {
    assert_eq!(
        message(&[("MEGATRON_OTEL_EXPORT_RANK", "last")]),
        "Invalid integer for MEGATRON_OTEL_EXPORT_RANK: 'last'. Expected a rank, 0 or more (below the world size), or -1 for the last rank."
    );
    assert_eq!(
        message(&[("MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "half")]),
        "Invalid float for MEGATRON_OTEL_EXPORT_SAMPLE_RATE: 'half'. Expected a number from 0.0 to 1.0."
    );
}

#[test]
fn a_bad_value_from_the_fallback_prefix_is_reported_under_the_fallback_name() {
    // The original named the primary prefix here, which sent users looking
    // for a variable they never set.
    let text = message(&[("NEMO_LENS_ENABLED", "maybe")]);
    assert!(text.starts_with("Invalid boolean for NEMO_LENS_ENABLED: 'maybe'."), "{text}");
    let text = message(&[("NEMO_LENS_EXPORT_RANK", "x")]);
    assert_eq!(
        text,
        "Invalid integer for NEMO_LENS_EXPORT_RANK: 'x'. Expected a rank, 0 or more (below the world size), or -1 for the last rank."
    );
}

#[test]
fn integers_and_floats_accept_python_spellings() {
    let c = lens(&[("NEMO_LENS_EXPORT_RANK", "+1_0"), ("NEMO_LENS_EXPORT_SAMPLE_RATE", "5e-1")]).unwrap();
    assert_eq!((c.export_rank, c.export_sample_rate), (10, 0.5));
    assert!(lens(&[("NEMO_LENS_EXPORT_RANK", "1__0")]).is_err());
    assert!(lens(&[("NEMO_LENS_EXPORT_RANK", "1.0")]).is_err());
}

#[test]
fn empty_and_blank_values_count_as_unset() {
    let c = megatron(&[
        ("MEGATRON_OTEL_EXPORTER", "  "),
        ("NEMO_LENS_EXPORTER", "console"),
        ("MEGATRON_OTEL_ENABLED", ""),
        ("NEMO_LENS_SPAN_GROUPS", ""),
        ("OTEL_SERVICE_NAME", "   "),
    ])
    .unwrap();
    assert_eq!(c.exporter, Some(ExporterKind::Console), "a blank primary falls through to the fallback");
    assert!(!c.enabled);
    assert_eq!(c.span_groups, "default");
    assert_eq!(c.service_name, "nemo");
}

// ------------------------------------------------------ prefix precedence

#[test]
fn primary_prefix_wins_over_fallback() {
    let c = LensConfig::from_env(
        &env(&[("RL_OTEL_EXPORTER", "console"), ("NEMO_LENS_EXPORTER", "otlp")]),
        "RL_OTEL",
        Some("NEMO_LENS"),
        &LENS_CATALOG,
    )
    .unwrap();
    assert_eq!(c.exporter, Some(ExporterKind::Console));
    assert_eq!(c.variable_for("exporter"), Some("RL_OTEL_EXPORTER"));
}

#[test]
fn fallback_is_used_when_primary_is_unset() {
    let c = megatron(&[("NEMO_LENS_ENABLED", "1"), ("NEMO_LENS_EXPORT_RANK", "0")]).unwrap();
    assert!(c.enabled);
    assert_eq!(c.export_rank, 0);
    assert_eq!(c.variable_for("enabled"), Some("NEMO_LENS_ENABLED"));
}

#[test]
fn without_a_fallback_prefix_nothing_else_is_read() {
    let c = LensConfig::from_env(&env(&[("NEMO_LENS_ENABLED", "1")]), "RL_OTEL", None, &LENS_CATALOG).unwrap();
    assert!(!c.enabled);
}

#[test]
fn run_id_falls_back_to_nemo_lens_run_id_for_any_prefix() {
    let c = LensConfig::from_env(&env(&[("NEMO_LENS_RUN_ID", "shared")]), "RL_OTEL", None, &LENS_CATALOG).unwrap();
    assert_eq!(c.run_id, "shared");
    let c = LensConfig::from_env(
        &env(&[("RL_OTEL_RUN_ID", "own"), ("NEMO_LENS_RUN_ID", "shared")]),
        "RL_OTEL",
        None,
        &LENS_CATALOG,
    )
    .unwrap();
    assert_eq!(c.run_id, "own");
}

// ----------------------------------------------------------- service name

#[test]
fn otel_service_name_is_read_bare_and_trimmed() {
    assert_eq!(lens(&[("OTEL_SERVICE_NAME", "  my-svc ")]).unwrap().service_name, "my-svc");
    assert_eq!(lens(&[("NEMO_LENS_SERVICE_NAME", "ignored")]).unwrap().service_name, "nemo");
}

#[test]
fn framework_default_service_name_applies_only_when_otel_service_name_is_unset() {
    let loader = ConfigLoader::new("MEGATRON_OTEL").fallback_prefix("NEMO_LENS").default_service_name("megatron-lm");
    assert_eq!(loader.load(&env(&[])).unwrap().service_name, "megatron-lm");
    assert_eq!(loader.load(&env(&[("OTEL_SERVICE_NAME", "svc")])).unwrap().service_name, "svc");
    assert_eq!(loader.load(&env(&[("OTEL_SERVICE_NAME", " ")])).unwrap().service_name, "megatron-lm");

    assert_eq!(megatron(&[]).unwrap().with_default_service_name("megatron-lm").service_name, "megatron-lm");
    let c = megatron(&[("OTEL_SERVICE_NAME", "svc")]).unwrap().with_default_service_name("megatron-lm");
    assert_eq!(c.service_name, "svc");
}

// ------------------------------------------------------------ span groups

#[test]
fn per_step_resolves_step() {
    let c = lens(&[("NEMO_LENS_SPAN_GROUPS", "per_step")]).unwrap();
    assert!(c.resolved_span_groups().unwrap().contains(SpanGroup::STEP));
}

const TEST_GROUP: SpanGroup = SpanGroup::new("microbatch", 8);
const TEST_GROUPS: &[SpanGroup] = &[
    LENS_GROUPS[0],
    LENS_GROUPS[1],
    LENS_GROUPS[2],
    LENS_GROUPS[3],
    LENS_GROUPS[4],
    LENS_GROUPS[5],
    LENS_GROUPS[6],
    LENS_GROUPS[7],
    TEST_GROUP,
];
static TEST_CATALOG: SpanGroupCatalog = SpanGroupCatalog::new(
    "test-framework",
    TEST_GROUPS,
    &[Preset::new("default", &[SpanGroup::JOB]), Preset::new("profiling", TEST_GROUPS)],
);

#[test]
fn the_catalog_is_passed_through_and_used_for_specs() {
    let c = LensConfig::from_env(&env(&[("X_SPAN_GROUPS", "profiling")]), "X", None, &TEST_CATALOG).unwrap();
    assert_eq!(c.catalog.name(), "test-framework");
    assert!(c.resolved_span_groups().unwrap().contains(TEST_GROUP));
    // The Lens catalog knows neither the group nor the preset.
    let text = LensConfig::from_env(&env(&[("X_SPAN_GROUPS", "microbatch")]), "X", None, &LENS_CATALOG)
        .unwrap_err()
        .to_string();
    assert!(text.contains("Unknown span group or preset: 'microbatch'"), "{text}");
}

#[test]
fn an_unknown_span_group_is_an_error_with_a_suggestion_naming_the_variable() {
    let text = message(&[("MEGATRON_OTEL_SPAN_GROUPS", "default, chekpoint")]);
    assert!(text.starts_with("Invalid span-group spec in MEGATRON_OTEL_SPAN_GROUPS ('default, chekpoint')"), "{text}");
    assert!(text.contains("Unknown span group or preset: 'chekpoint'"), "{text}");
    assert!(text.contains("did you mean 'checkpoint'?"), "{text}");
}

#[test]
fn tracing_groups_are_read_with_the_fallback_prefix_and_checked_against_the_catalog() {
    let c = megatron(&[("NEMO_LENS_TRACING_GROUPS", "tower_http=job, candle=step:per_entry")]).unwrap();
    assert_eq!(c.tracing_groups, "tower_http=job, candle=step:per_entry");
    assert_eq!(c.variable_for("tracing_groups"), Some("NEMO_LENS_TRACING_GROUPS"));
    assert!(c.tracing_rules().unwrap().decide("candle::nn").per_entry);

    let text = message(&[("MEGATRON_OTEL_TRACING_GROUPS", "tower_http=chekpoint")]);
    assert!(
        text.starts_with("Invalid tracing rules in MEGATRON_OTEL_TRACING_GROUPS ('tower_http=chekpoint')"),
        "{text}"
    );
    assert!(text.contains("did you mean 'checkpoint'?"), "{text}");
}

// ------------------------------------------------------------ sample rate

#[test]
fn sample_rate_bounds_via_environment() {
    for ok in ["0.0", "1.0", "0", "1"] {
        assert!(lens(&[("NEMO_LENS_EXPORT_SAMPLE_RATE", ok)]).is_ok(), "{ok}");
    }
    let text = lens(&[("NEMO_LENS_EXPORT_SAMPLE_RATE", "-0.1")]).unwrap_err().to_string();
    assert_eq!(
        text,
        "Invalid value for NEMO_LENS_EXPORT_SAMPLE_RATE: export_sample_rate must be in [0.0, 1.0], got -0.1"
    );
    let text = lens(&[("NEMO_LENS_EXPORT_SAMPLE_RATE", "1.5")]).unwrap_err().to_string();
    assert!(text.ends_with("export_sample_rate must be in [0.0, 1.0], got 1.5"), "{text}");
    let text = lens(&[("NEMO_LENS_EXPORT_SAMPLE_RATE", "nan")]).unwrap_err().to_string();
    assert!(text.ends_with("got nan"), "{text}");
}

#[test]
fn sample_rate_bounds_via_direct_construction() {
    for ok in [0.0, 1.0] {
        assert!(LensConfig { export_sample_rate: ok, ..LensConfig::default() }.validate().is_ok());
    }
    for bad in [-0.1, 1.5] {
        let err = LensConfig { export_sample_rate: bad, ..LensConfig::default() }.validate().unwrap_err();
        let expected = format!("export_sample_rate must be in [0.0, 1.0], got {bad}");
        assert!(err.to_string().contains(&expected), "{err}");
        assert!(err.mentions("LensConfig.export_sample_rate"), "a value set in code is named by its field: {err}");
    }
}

#[test]
fn a_value_changed_in_code_is_named_by_its_field_not_the_variable() {
    let mut c = megatron(&[("MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "0.5")]).unwrap();
    assert_eq!(c.variable_for("export_sample_rate"), Some("MEGATRON_OTEL_EXPORT_SAMPLE_RATE"));
    c.export_sample_rate = 2.0;
    assert_eq!(c.variable_for("export_sample_rate"), None);
    let text = c.validate().unwrap_err().to_string();
    assert_eq!(
        text,
        "Invalid value for LensConfig.export_sample_rate: export_sample_rate must be in [0.0, 1.0], got 2.0"
    );
}

// ------------------------------------------------ Lens v0.2.0 aliases

#[test]
fn export_strategy_is_an_alias_of_rank_strategy() {
    let c = megatron(&[("MEGATRON_OTEL_EXPORT_STRATEGY", "all_ranks")]).unwrap();
    assert_eq!(c.rank_strategy, "all_ranks");
    assert_eq!(c.variable_for("rank_strategy"), Some("MEGATRON_OTEL_EXPORT_STRATEGY"));
    let c =
        megatron(&[("MEGATRON_OTEL_RANK_STRATEGY", "sampled"), ("MEGATRON_OTEL_EXPORT_STRATEGY", "sampled")]).unwrap();
    assert_eq!(c.rank_strategy, "sampled", "agreeing names are fine");
}

#[test]
fn disagreeing_canonical_and_alias_is_an_error_naming_both() {
    let text = message(&[("MEGATRON_OTEL_RANK_STRATEGY", "sampled"), ("MEGATRON_OTEL_EXPORT_STRATEGY", "all_ranks")]);
    assert_eq!(
        text,
        "MEGATRON_OTEL_RANK_STRATEGY='sampled' and its alias MEGATRON_OTEL_EXPORT_STRATEGY='all_ranks' disagree. \
         Set only one of them (MEGATRON_OTEL_RANK_STRATEGY is the canonical name)."
    );
}

#[test]
fn an_alias_under_the_primary_prefix_beats_the_canonical_name_under_the_fallback() {
    let c =
        megatron(&[("MEGATRON_OTEL_EXPORT_STRATEGY", "all_ranks"), ("NEMO_LENS_RANK_STRATEGY", "sampled")]).unwrap();
    assert_eq!(c.rank_strategy, "all_ranks");
}

#[test]
fn sampler_enabled_one_means_rank_aware() {
    let c = megatron(&[("MEGATRON_OTEL_SAMPLER_ENABLED", "1")]).unwrap();
    assert_eq!(c.sampling_strategy, "rank_aware");
    assert_eq!(c.variable_for("sampling_strategy"), Some("MEGATRON_OTEL_SAMPLER_ENABLED"));
    let c = megatron(&[("MEGATRON_OTEL_SAMPLER_ENABLED", "yes"), ("MEGATRON_OTEL_SAMPLING_STRATEGY", "rank_aware")])
        .unwrap();
    assert_eq!(c.sampling_strategy, "rank_aware");
}

#[test]
fn sampler_enabled_zero_says_nothing() {
    assert_eq!(megatron(&[("MEGATRON_OTEL_SAMPLER_ENABLED", "0")]).unwrap().sampling_strategy, "");
    // As if unset: it neither conflicts with the canonical name nor hides the fallback prefix.
    let c =
        megatron(&[("MEGATRON_OTEL_SAMPLER_ENABLED", "0"), ("MEGATRON_OTEL_SAMPLING_STRATEGY", "rank_aware")]).unwrap();
    assert_eq!(c.sampling_strategy, "rank_aware");
    let c = megatron(&[("MEGATRON_OTEL_SAMPLER_ENABLED", "false"), ("NEMO_LENS_SAMPLER_ENABLED", "1")]).unwrap();
    assert_eq!(c.sampling_strategy, "rank_aware");
}

#[test]
fn sampler_enabled_conflicting_with_another_sampling_strategy_is_an_error() {
    // `bogus` is also unregistered, so two problems come back together.
    let problems = problems(&[("MEGATRON_OTEL_SAMPLING_STRATEGY", "bogus"), ("MEGATRON_OTEL_SAMPLER_ENABLED", "1")]);
    assert!(
        problems.iter().any(|p| matches!(p, ConfigProblem::AliasConflict { variable, alias, alias_value, .. }
            if variable == "MEGATRON_OTEL_SAMPLING_STRATEGY" && alias == "MEGATRON_OTEL_SAMPLER_ENABLED" && alias_value == "1")),
        "{problems:?}"
    );
}

#[test]
fn sampler_enabled_must_be_a_boolean() {
    assert_eq!(
        message(&[("NEMO_LENS_SAMPLER_ENABLED", "rank_aware")]),
        "Invalid boolean for NEMO_LENS_SAMPLER_ENABLED: 'rank_aware'. Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
    );
}

// ------------------------------------------------- strategies in the config

#[test]
fn an_unknown_rank_strategy_is_reported_with_the_registered_names_and_a_suggestion() {
    let text = message(&[("MEGATRON_OTEL_RANK_STRATEGY", "singel_rank")]);
    assert_eq!(
        text,
        "MEGATRON_OTEL_RANK_STRATEGY: Unknown rank strategy 'singel_rank'. Registered strategies: \
         ['all_ranks', 'first_rank_per_node', 'sampled', 'single_rank']. Did you mean 'single_rank'?"
    );
}

#[test]
fn an_unknown_sampling_strategy_is_reported_even_when_telemetry_is_disabled() {
    let text = message(&[("MEGATRON_OTEL_ENABLED", "0"), ("NEMO_LENS_SAMPLING_STRATEGY", "rank_awre")]);
    assert!(text.starts_with("NEMO_LENS_SAMPLING_STRATEGY: Unknown sampling strategy 'rank_awre'."), "{text}");
    assert!(text.contains("Did you mean 'rank_aware'?"), "{text}");
}

// ----------------------------------------------- every problem at once

#[test]
fn every_problem_is_reported_at_once_one_per_line() {
    let err = megatron(&[
        ("MEGATRON_OTEL_ENABLED", "maybe"),
        ("NEMO_LENS_EXPORT_RANK", "x"),
        ("MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "3"),
        ("MEGATRON_OTEL_SPAN_GROUPS", "nope"),
        ("MEGATRON_OTEL_EXPORTER", "consol"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
    ])
    .unwrap_err();
    let variables: Vec<&str> = err.problems().iter().map(|p| p.variable()).collect();
    assert_eq!(
        variables,
        [
            "MEGATRON_OTEL_ENABLED",
            "NEMO_LENS_EXPORT_RANK",
            "MEGATRON_OTEL_EXPORTER",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_METRIC_EXPORT_INTERVAL",
            "MEGATRON_OTEL_EXPORT_SAMPLE_RATE",
            "MEGATRON_OTEL_SPAN_GROUPS",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ],
        "parse problems first, then semantic ones; the shared endpoint once"
    );
    assert_eq!(err.to_string().lines().count(), err.problems().len());
}

#[test]
fn an_unknown_exporter_gets_the_accepted_names_and_a_suggestion() {
    assert_eq!(
        message(&[("MEGATRON_OTEL_EXPORTER", "consol")]),
        "Unknown exporter 'consol' in MEGATRON_OTEL_EXPORTER. Expected one of: ['otlp', 'console', 'file'] (did you mean 'console'?)"
    );
    // Prometheus is for metrics only.
    assert!(message(&[("MEGATRON_OTEL_EXPORTER", "prometheus")]).starts_with("Unknown exporter 'prometheus'"));
    assert!(message(&[("OTEL_TRACES_EXPORTER", "prometheus")]).contains("OTEL_TRACES_EXPORTER"));
    // A name that several start with means the first: `http` is protobuf.
    let text = message(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http")]);
    assert!(text.ends_with("(did you mean 'http/protobuf'?)"), "{text}");
}

// ---------------------------------------------- command-line overrides

#[test]
fn cli_flags_win_over_every_variable() {
    let mut c = megatron(&[
        ("MEGATRON_OTEL_SPAN_GROUPS", "per_step"),
        ("NEMO_LENS_SPAN_GROUPS", "all"),
        ("OTEL_SERVICE_NAME", "from-env"),
    ])
    .unwrap();
    c.apply_cli(&CliOverrides {
        otel_enabled: true,
        otel_service_name: Some("from-cli".into()),
        otel_span_groups: Some("job,step".into()),
    });
    assert!(c.enabled);
    assert_eq!(c.service_name, "from-cli");
    assert_eq!(c.span_groups, "job,step");
    assert_eq!(c.variable_for("service_name"), Some("--otel-service-name"));
    assert!(c.validate().is_ok());
}

#[test]
fn otel_enabled_flag_only_turns_telemetry_on() {
    let mut c = megatron(&[("MEGATRON_OTEL_ENABLED", "1")]).unwrap();
    c.apply_cli(&CliOverrides::default());
    assert!(c.enabled, "an absent flag does not disable an environment-enabled run");
    let mut c = megatron(&[]).unwrap();
    c.apply_cli(&CliOverrides { otel_span_groups: Some("  ".into()), ..CliOverrides::default() });
    assert!(!c.enabled);
    assert_eq!(c.span_groups, "default", "an empty flag value counts as unset");
}

#[test]
fn a_bad_span_group_flag_is_reported_under_the_flag() {
    let mut c = megatron(&[]).unwrap();
    c.apply_cli(&CliOverrides { otel_span_groups: Some("full".into()), ..CliOverrides::default() });
    let text = c.validate().unwrap_err().to_string();
    assert!(text.starts_with("Invalid span-group spec in --otel-span-groups ('full')"), "{text}");
}

#[test]
fn otel_sdk_disabled_wins_over_the_environment_and_the_flag() {
    let mut c = megatron(&[("MEGATRON_OTEL_ENABLED", "1"), ("OTEL_SDK_DISABLED", "true")]).unwrap();
    assert!(c.otel.sdk_disabled);
    assert!(!c.enabled && !c.telemetry_enabled());
    c.apply_cli(&CliOverrides { otel_enabled: true, ..CliOverrides::default() });
    assert!(!c.enabled && !c.telemetry_enabled());
    // Set in code afterwards: telemetry_enabled still says no.
    c.enabled = true;
    assert!(!c.telemetry_enabled());
    assert!(!megatron(&[("OTEL_SDK_DISABLED", "false"), ("MEGATRON_OTEL_ENABLED", "1")]).unwrap().otel.sdk_disabled);
    assert!(message(&[("OTEL_SDK_DISABLED", "disabled")]).starts_with("Invalid boolean for OTEL_SDK_DISABLED"));
}

#[cfg(feature = "clap")]
#[test]
fn clap_parses_the_flags() {
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        otel: CliOverrides,
    }
    let args =
        Args::try_parse_from(["x", "--otel-enabled", "--otel-service-name", "svc", "--otel-span-groups", "per_step"])
            .unwrap();
    assert_eq!(
        args.otel,
        CliOverrides {
            otel_enabled: true,
            otel_service_name: Some("svc".into()),
            otel_span_groups: Some("per_step".into())
        }
    );
    assert_eq!(Args::try_parse_from(["x"]).unwrap().otel, CliOverrides::default());
}

// ------------------------------------------------- exporters per signal

#[test]
fn prefix_exporter_sets_every_signal_and_otel_variables_override_one() {
    let c = megatron(&[
        ("MEGATRON_OTEL_EXPORTER", "file"),
        ("OTEL_METRICS_EXPORTER", "prometheus"),
        ("OTEL_LOGS_EXPORTER", "NONE"),
    ])
    .unwrap();
    assert_eq!(c.exporter_for(Signal::Traces), ExporterKind::File);
    assert_eq!(c.exporter_for(Signal::Metrics), ExporterKind::Prometheus);
    assert_eq!(c.exporter_for(Signal::Logs), ExporterKind::None);
    assert!(c.exporter_configured());
    let c = megatron(&[("OTEL_TRACES_EXPORTER", "console")]).unwrap();
    assert!(c.exporter_configured(), "one per-signal variable counts as configured");
    assert_eq!(c.exporter_for(Signal::Metrics), ExporterKind::Otlp);
}

// ----------------------------------------------------------- OTLP settings

#[test]
fn general_otlp_settings_apply_to_every_signal_and_per_signal_ones_override() {
    let c = megatron(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318/custom/path"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:4317"),
        ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "100"),
    ])
    .unwrap();
    let (t, m, l) = (c.otel.otlp(Signal::Traces), c.otel.otlp(Signal::Metrics), c.otel.otlp(Signal::Logs));
    assert_eq!(t.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(t.endpoint_url(Signal::Traces), "http://traces:4318/custom/path", "per-signal endpoints are used as-is");
    assert_eq!(m.protocol, OtlpProtocol::Grpc);
    assert_eq!(m.endpoint_url(Signal::Metrics), "http://metrics:4317");
    assert_eq!(l.protocol, OtlpProtocol::HttpJson);
    assert_eq!(l.endpoint_url(Signal::Logs), "http://collector:4318/v1/logs", "the general one gets /v1/<signal>");
    assert!(!l.endpoint.as_ref().unwrap().signal_specific);
    assert_eq!((t.timeout, l.timeout), (Duration::from_millis(2500), Duration::from_millis(100)));
    assert!([t, m, l].iter().all(|s| s.compression == Compression::Gzip));
    assert!([t, m, l].iter().all(|s| s.certificate.as_deref() == Some(std::path::Path::new("/etc/ca.pem"))));
    assert_eq!(c.variable_for("otel.otlp_traces.endpoint"), Some("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
    assert_eq!(c.variable_for("otel.otlp_logs.endpoint"), Some("OTEL_EXPORTER_OTLP_ENDPOINT"));
}

#[test]
fn grpc_uses_the_general_endpoint_as_is() {
    let c = megatron(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example.com:4317")]).unwrap();
    assert_eq!(c.otel.otlp(Signal::Traces).endpoint_url(Signal::Traces), "https://collector.example.com:4317");
    let c = megatron(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]).unwrap();
    assert_eq!(c.otel.otlp(Signal::Metrics).endpoint_url(Signal::Metrics), "http://localhost:4318/v1/metrics");
}

#[test]
fn unknown_protocol_and_compression_are_errors_with_accepted_values() {
    let text = message(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protbuf")]);
    assert_eq!(
        text,
        "Unknown OTLP protocol 'http/protbuf' in OTEL_EXPORTER_OTLP_TRACES_PROTOCOL. Expected one of: \
         ['grpc', 'http/protobuf', 'http/json'] (did you mean 'http/protobuf'?)"
    );
    let text = message(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")]);
    assert!(text.starts_with("Unknown OTLP compression 'zstd' in OTEL_EXPORTER_OTLP_COMPRESSION"), "{text}");
    assert!(text.contains("['gzip', 'none']"), "{text}");
}

#[test]
fn endpoint_syntax_is_checked() {
    for bad in ["localhost:4317", "grpc://collector:4317", "http://", "http://collector:43x7", "http://coll ector:4317"]
    {
        let problems = problems(&[("OTEL_EXPORTER_OTLP_ENDPOINT", bad)]);
        assert!(
            problems.iter().all(|p| matches!(p, ConfigProblem::InvalidEndpoint { variable, .. } if variable == "OTEL_EXPORTER_OTLP_ENDPOINT")),
            "{bad}: {problems:?}"
        );
    }
    let c = megatron(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1]:4317")]).unwrap();
    assert!(c.otel.otlp(Signal::Traces).endpoint.is_some());
}

#[test]
fn credentials_in_an_endpoint_are_rejected_and_not_shown() {
    let text = message(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://user:s3cr3t-t0ken@collector:4317")]);
    assert!(!text.contains("s3cr3t"), "{text}");
    assert!(text.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") && text.contains("[REDACTED]@collector"), "{text}");
}

/// A list of URLs, a space or a missing host once moved the credentials
/// out of where the redaction looked, and a list with a `/` before its comma
/// was even accepted: each is refused, and no output shows the password.
#[test]
fn a_malformed_endpoint_never_shows_its_credentials() {
    for (value, shown, reason) in [
        (
            "http://127.0.0.1:1,http://u:SECRET123@b",
            "http://[REDACTED]@b",
            "it holds more than one URL; give a single endpoint, not a list",
        ),
        (
            "http://127.0.0.1:1/,http://u:SECRET123@b:1",
            "http://[REDACTED]@b:1",
            "it holds more than one URL; give a single endpoint, not a list",
        ),
        ("http://127.0.0.1:1 http://u:SECRET123@x", "http://[REDACTED]@x", "it contains a space or control character"),
        (
            "http:///u:SECRET123@b:1",
            "http://[REDACTED]@b:1",
            "credentials in the URL are not accepted; put them in OTEL_EXPORTER_OTLP_HEADERS",
        ),
    ] {
        let err = megatron(&[("OTEL_EXPORTER_OTLP_ENDPOINT", value)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "Invalid endpoint URL in OTEL_EXPORTER_OTLP_ENDPOINT: '{shown}' ({reason}). Expected \
                 http://host[:port][/path] or https://host[:port][/path], e.g. 'http://localhost:4317'."
            ),
            "{value}"
        );
        assert!(!format!("{err:?}").contains("SECRET123"), "{value}");
        // Read but not validated (as a program may hold it): neither the
        // summary nor `Debug` shows the password.
        let mut c = megatron(&[]).unwrap();
        c.otel.otlp_mut(Signal::Traces).endpoint =
            Some(lens_core::config::OtlpEndpoint { url: value.into(), signal_specific: false });
        for text in [format!("{c:?}"), format!("{c}")] {
            assert!(!text.contains("SECRET123"), "{value}: {text}");
        }
    }
}

#[test]
fn an_endpoint_set_in_code_is_validated_and_named_by_its_field() {
    let mut c = LensConfig::default();
    c.otel.otlp_mut(Signal::Metrics).endpoint =
        Some(lens_core::config::OtlpEndpoint { url: "collector:4317".into(), signal_specific: true });
    let err = c.validate().unwrap_err();
    assert!(err.mentions("LensConfig.otel.otlp_metrics.endpoint"), "{err}");
}

#[test]
fn headers_are_percent_decoded_merged_per_key_and_never_shown() {
    let c = megatron(&[
        ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cr3t-t0ken,X-Tenant=a"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=b"),
    ])
    .unwrap();
    let traces = &c.otel.otlp(Signal::Traces).headers;
    assert_eq!(traces.get("authorization"), Some(SECRET));
    assert_eq!(traces.get("X-Tenant"), Some("b"), "the per-signal list wins per key");
    assert_eq!(c.otel.otlp(Signal::Metrics).headers.get("x-tenant"), Some("a"));
    for text in [format!("{c:?}"), format!("{c}"), format!("{traces:?}"), format!("{traces}")] {
        assert!(!text.contains("s3cr3t"), "{text}");
    }
    assert!(format!("{c}").contains("Authorization=[REDACTED]"));
}

#[test]
fn the_seed_pages_raw_space_header_is_accepted() {
    let c = megatron(&[("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer s3cr3t-t0ken")]).unwrap();
    assert_eq!(c.otel.otlp(Signal::Logs).headers.get("Authorization"), Some(SECRET));
}

#[test]
fn malformed_headers_are_reported_without_their_values() {
    for bad in [
        "Authorization",
        "a=1,Bearer s3cr3t-t0ken",
        "=s3cr3t-t0ken",
        "Authorization: Bearer s3cr3t-t0ken=x",
        "k=%zz s3cr3t-t0ken",
    ] {
        let text = message(&[("OTEL_EXPORTER_OTLP_HEADERS", bad)]);
        assert!(text.starts_with("Invalid header list in OTEL_EXPORTER_OTLP_HEADERS:"), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
    }
}

#[test]
fn a_config_errors_debug_is_its_message_and_shows_no_secret() {
    // What `fn main() -> Result<(), ConfigError>` prints after `Error: `
    // when `?` returns the error: the problems, one per line, not the struct.
    let err = megatron(&[
        ("MEGATRON_OTEL_ENABLED", "maybe"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,Bearer s3cr3t-t0ken"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://user:s3cr3t-t0ken@collector:4317"),
    ])
    .unwrap_err();
    let debug = format!("{err:?}");
    assert_eq!(debug, err.to_string());
    assert_eq!(debug.lines().count(), 3, "{debug}");
    assert!(
        debug.starts_with(
            "Invalid boolean for MEGATRON_OTEL_ENABLED: 'maybe'. Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
        ),
        "{debug}"
    );
    assert!(debug.contains("Invalid header list in OTEL_EXPORTER_OTLP_HEADERS:"), "{debug}");
    assert!(debug.contains("[REDACTED]@collector"), "{debug}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
    assert!(!debug.contains("problems") && !debug.contains('{'), "not the struct form: {debug}");
    assert_eq!(format!("{err:#?}"), debug, "the alternate form too");
}

#[test]
fn headers_built_in_code_reject_bad_names_and_control_characters() {
    let mut headers = Headers::new();
    assert!(headers.insert("Authorization", SECRET).is_ok());
    assert!(headers.insert("bad key", "x").is_err());
    let err = headers.insert("x-token", "s3cr3t\r\nInjected: 1").unwrap_err();
    assert!(!err.to_string().contains("s3cr3t"), "{err}");
}

// ------------------------------------------------- other standard variables

#[test]
fn traces_sampler_and_its_argument() {
    let sampler = |pairs: &[(&str, &str)]| megatron(pairs).unwrap().otel.traces_sampler;
    assert_eq!(sampler(&[("OTEL_TRACES_SAMPLER", "always_off")]), TracesSampler::AlwaysOff);
    assert_eq!(
        sampler(&[("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0.1")]),
        TracesSampler::ParentBasedTraceIdRatio(0.1)
    );
    assert_eq!(sampler(&[("OTEL_TRACES_SAMPLER", "TraceIdRatio")]), TracesSampler::TraceIdRatio(1.0));
    assert_eq!(sampler(&[("OTEL_TRACES_SAMPLER_ARG", "0.5")]), TracesSampler::ParentBasedAlwaysOn);
    let text = message(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "10")]);
    // Quoted as typed, not as parsed ('10.0').
    assert_eq!(text, "Invalid value for OTEL_TRACES_SAMPLER_ARG: '10'. Expected a number from 0.0 to 1.0.");
    let text = message(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "2")]);
    assert_eq!(text, "Invalid value for OTEL_TRACES_SAMPLER_ARG: '2'. Expected a number from 0.0 to 1.0.");
    let text = message(&[("OTEL_TRACES_SAMPLER", "jaeger_remote")]);
    assert!(text.starts_with("Unknown trace sampler 'jaeger_remote' in OTEL_TRACES_SAMPLER."), "{text}");
    assert!(
        message(&[("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "x")])
            .starts_with("Invalid float for OTEL_TRACES_SAMPLER_ARG: 'x'.")
    );
}

#[test]
fn a_sampler_ratio_set_in_code_is_validated() {
    let mut c = LensConfig::default();
    c.otel.traces_sampler = TracesSampler::TraceIdRatio(-1.0);
    assert!(c.validate().unwrap_err().mentions("LensConfig.otel.traces_sampler_arg"));
}

#[test]
fn metric_export_interval_prometheus_and_propagators() {
    let c = megatron(&[
        ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
        ("OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0"),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "9500"),
        ("OTEL_PROPAGATORS", "baggage"),
    ])
    .unwrap();
    assert_eq!(c.otel.metric_export_interval, Duration::from_secs(1));
    assert_eq!((c.otel.prometheus_host.as_str(), c.otel.prometheus_port), ("0.0.0.0", 9500));
    assert_eq!(c.otel.propagators, [Propagator::Baggage]);
    assert!(megatron(&[("OTEL_PROPAGATORS", "none")]).unwrap().otel.propagators.is_empty());
    let text = message(&[("OTEL_PROPAGATORS", "tracecontext,b3")]);
    assert!(text.starts_with("Unknown propagator 'b3' in OTEL_PROPAGATORS."), "{text}");
    let text = message(&[("OTEL_EXPORTER_PROMETHEUS_PORT", "70000")]);
    assert_eq!(
        text,
        "Invalid value for OTEL_EXPORTER_PROMETHEUS_PORT: '70000'. Expected a port number from 0 to 65535."
    );
    let text = message(&[("OTEL_METRIC_EXPORT_INTERVAL", "0")]);
    assert!(text.starts_with("Invalid value for OTEL_METRIC_EXPORT_INTERVAL: '0'."), "{text}");
    assert!(
        message(&[("OTEL_METRIC_EXPORT_INTERVAL", "10s")])
            .starts_with("Invalid integer for OTEL_METRIC_EXPORT_INTERVAL")
    );
}

#[test]
fn batch_processor_settings() {
    let c = megatron(&[
        ("OTEL_BSP_MAX_QUEUE_SIZE", "1024"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "256"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_BSP_MAX_CONCURRENT_EXPORTS", "4"),
    ])
    .unwrap();
    let b = c.otel.batch;
    assert_eq!((b.max_queue_size, b.max_export_batch_size, b.max_concurrent_exports), (1024, 256, 4));
    assert_eq!(b.schedule_delay, Duration::from_millis(50));
    assert_eq!(
        message(&[("OTEL_BSP_MAX_QUEUE_SIZE", "100")]),
        "Invalid value for OTEL_BSP_MAX_QUEUE_SIZE: '100'. Expected a queue size at least the export batch size \
         (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 4096)."
    );
    assert_eq!(
        message(&[("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100000")]),
        "Invalid value for OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '100000'. Expected a batch size no larger than the queue size (65536)."
    );
    assert!(
        message(&[("OTEL_BSP_MAX_QUEUE_SIZE", "0")]).starts_with("Invalid value for OTEL_BSP_MAX_QUEUE_SIZE: '0'.")
    );
}

#[test]
fn lens_duration_variables_reject_negative_and_non_integer_values() {
    assert!(message(&[("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "-5")]).starts_with(
        "Invalid value for MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS: '-5'. Expected a whole number of milliseconds"
    ));
    assert!(
        message(&[("NEMO_LENS_EXPORT_RETRY_WINDOW_MS", "30s")])
            .starts_with("Invalid integer for NEMO_LENS_EXPORT_RETRY_WINDOW_MS")
    );
    let c = megatron(&[("MEGATRON_OTEL_PROMETHEUS_RESOURCE_LABELS", "none")]).unwrap();
    assert!(c.prometheus_resource_labels.is_empty());
}

// ------------------------------------------------------------------ display

#[test]
fn display_summarises_the_resolved_configuration_with_sources() {
    let c = megatron(&[
        ("MEGATRON_OTEL_ENABLED", "1"),
        ("NEMO_LENS_SPAN_GROUPS", "default,step"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cr3t-t0ken"),
    ])
    .unwrap();
    let text = c.to_string();
    assert!(text.contains("enabled                    true  [MEGATRON_OTEL_ENABLED]"), "{text}");
    assert!(text.contains("default,step = {job, checkpoint, evaluate, step}  [NEMO_LENS_SPAN_GROUPS]"), "{text}");
    assert!(text.contains("grpc http://collector:4317, headers: Authorization=[REDACTED]"), "{text}");
    assert!(text.contains("traces exporter            otlp (default)"), "{text}");
    assert!(!text.contains("s3cr3t"), "{text}");
}

#[test]
fn the_peak_tflops_is_a_number_in_its_range_named_in_its_error() {
    let c = megatron(&[("NEMO_LENS_PEAK_TFLOPS", "989.4")]).unwrap();
    assert_eq!(c.peak_tflops, Some(989.4));
    assert_eq!(megatron(&[]).unwrap().peak_tflops, None);
    // A subnormal peak (1e-320) once passed, finite and positive, and made
    // MFU infinite.
    for bad in ["0", "-5", "inf", "nan", "1e-320", "0.0000009", "1000001"] {
        let err = megatron(&[("MEGATRON_OTEL_PEAK_TFLOPS", bad)]).unwrap_err();
        assert!(err.mentions("MEGATRON_OTEL_PEAK_TFLOPS"), "{bad}: {err}");
        assert!(
            err.to_string().ends_with("Expected a number of TFLOP/s from 0.000001 to 1000000, e.g. 989.4."),
            "{bad}: {err}"
        );
    }
    // Quoted as typed, not as parsed ('0.0', or 1e-320 in 300 digits).
    for (typed, variable) in [("1e-320", "MEGATRON_OTEL_PEAK_TFLOPS"), ("0", "NEMO_LENS_PEAK_TFLOPS")] {
        assert_eq!(
            megatron(&[(variable, typed)]).unwrap_err().to_string(),
            format!(
                "Invalid value for {variable}: '{typed}'. Expected a number of TFLOP/s from 0.000001 to 1000000, e.g. \
                 989.4."
            )
        );
    }
    // Set in code: the value it holds.
    let in_code = LensConfig { peak_tflops: Some(0.0), ..LensConfig::default() };
    assert_eq!(
        in_code.validate().unwrap_err().to_string(),
        "Invalid value for LensConfig.peak_tflops: '0.0'. Expected a number of TFLOP/s from 0.000001 to 1000000, e.g. \
         989.4."
    );
    for good in ["0.000001", "0.001", "1000000"] {
        assert!(megatron(&[("MEGATRON_OTEL_PEAK_TFLOPS", good)]).is_ok(), "{good}");
    }
    let err = megatron(&[("MEGATRON_OTEL_PEAK_TFLOPS", "fast")]).unwrap_err();
    assert!(err.to_string().contains("Invalid float for MEGATRON_OTEL_PEAK_TFLOPS: 'fast'"), "{err}");
}

#[test]
fn the_hang_timeout_is_auto_off_or_seconds_and_a_bad_one_says_what_is_accepted() {
    use lens_core::config::HangTimeout;
    assert_eq!(megatron(&[]).unwrap().hang_timeout, HangTimeout::Auto);
    assert_eq!(megatron(&[("MEGATRON_OTEL_HANG_TIMEOUT_S", "0")]).unwrap().hang_timeout, HangTimeout::Off);
    assert_eq!(megatron(&[("MEGATRON_OTEL_HANG_TIMEOUT_S", "AUTO")]).unwrap().hang_timeout, HangTimeout::Auto);
    assert_eq!(
        megatron(&[("NEMO_LENS_HANG_TIMEOUT_S", "2.5")]).unwrap().hang_timeout,
        HangTimeout::After(std::time::Duration::from_millis(2500)),
        "the NEMO_LENS fallback is read"
    );
    for bad in ["-1", "soon", "inf", "1e99", "0.009", "1e-9"] {
        let err = megatron(&[("MEGATRON_OTEL_HANG_TIMEOUT_S", bad)]).unwrap_err();
        assert!(err.mentions("MEGATRON_OTEL_HANG_TIMEOUT_S"), "{bad}: {err}");
        assert!(err.to_string().contains("auto, 0 (off) or a number of seconds from 0.01"), "{bad}: {err}");
    }
}

// --- control file (issue 23) ---
#[test]
fn the_control_file_and_its_poll_are_read_and_a_bad_poll_says_what_is_accepted() {
    let config = megatron(&[]).unwrap();
    assert_eq!(config.control_file, None);
    assert_eq!(config.control_poll, std::time::Duration::from_secs(2), "default 2 s");
    let config =
        megatron(&[("NEMO_LENS_CONTROL_FILE", "/tmp/job/control.json"), ("MEGATRON_OTEL_CONTROL_POLL_S", "0.25")])
            .unwrap();
    assert_eq!(config.control_file.as_deref(), Some(std::path::Path::new("/tmp/job/control.json")));
    assert_eq!(config.control_poll, std::time::Duration::from_millis(250), "fractions allowed");
    assert_eq!(config.variable_for("control_file"), Some("NEMO_LENS_CONTROL_FILE"));
    for bad in ["0", "-1", "soon", "inf", "7200"] {
        let err = megatron(&[("MEGATRON_OTEL_CONTROL_POLL_S", bad)]).unwrap_err();
        assert!(err.mentions("MEGATRON_OTEL_CONTROL_POLL_S"), "{bad}: {err}");
        assert!(err.to_string().contains("a number of seconds from 0.01 to 3600"), "{bad}: {err}");
        assert!(err.to_string().contains(bad), "the value is named: {err}");
    }
}
// --- end control file ---

// ---------------------------------------------------------------- proptests

/// Every variable the model reads, for the property tests.
const VARIABLES: &[&str] = &[
    "MEGATRON_OTEL_ENABLED",
    "NEMO_LENS_ENABLED",
    "MEGATRON_OTEL_RANK_STRATEGY",
    "MEGATRON_OTEL_EXPORT_STRATEGY",
    "NEMO_LENS_RANK_STRATEGY",
    "MEGATRON_OTEL_EXPORT_RANK",
    "MEGATRON_OTEL_EXPORT_SAMPLE_RATE",
    "MEGATRON_OTEL_SAMPLING_STRATEGY",
    "MEGATRON_OTEL_SAMPLER_ENABLED",
    "NEMO_LENS_SAMPLER_ENABLED",
    "MEGATRON_OTEL_TRACES_ENABLED",
    "MEGATRON_OTEL_METRICS_ENABLED",
    "MEGATRON_OTEL_RANK_METRICS",
    "MEGATRON_OTEL_LOGS_ENABLED",
    "MEGATRON_OTEL_SPAN_GROUPS",
    "MEGATRON_OTEL_TRACING_GROUPS",
    "MEGATRON_OTEL_EXPORTER",
    "MEGATRON_OTEL_RUN_ID",
    "MEGATRON_OTEL_LAUNCH_ID",
    "MEGATRON_OTEL_USER_ID",
    "MEGATRON_OTEL_FILE_DIR",
    "MEGATRON_OTEL_FILE_MAX_BYTES",
    "MEGATRON_OTEL_EXPORT_RETRY_WINDOW_MS",
    "MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS",
    "MEGATRON_OTEL_PROMETHEUS_LINGER_MS",
    "MEGATRON_OTEL_PROMETHEUS_RESOURCE_LABELS",
    "MEGATRON_OTEL_PEAK_TFLOPS",
    "MEGATRON_OTEL_HANG_TIMEOUT_S",
    "MEGATRON_OTEL_SPOOL",
    "MEGATRON_OTEL_CONTEXT_PER_SPAN",
    "MEGATRON_OTEL_SPOOL_DIR",
    "MEGATRON_OTEL_SPOOL_SIZE_KIB",
    // --- control file (issue 23) ---
    "MEGATRON_OTEL_CONTROL_FILE",
    "MEGATRON_OTEL_CONTROL_POLL_S",
    // --- end control file ---
    "OTEL_SERVICE_NAME",
    "WANDB_ENTITY",
    "WANDB_PROJECT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_EXPORTER_PROMETHEUS_HOST",
    "OTEL_EXPORTER_PROMETHEUS_PORT",
    "OTEL_PROPAGATORS",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_CONCURRENT_EXPORTS",
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ \\t]*",
        "-?[0-9_]{0,6}(\\.[0-9]{0,3})?",
        prop::sample::select(vec![
            "1",
            "0",
            "true",
            "off",
            "otlp",
            "console",
            "file",
            "prometheus",
            "none",
            "grpc",
            "http/json",
            "gzip",
            "all_ranks",
            "rank_aware",
            "per_step",
            "http://localhost:4317",
            "a=b,c=%20d",
            "nan",
            "-1",
            "1e309",
        ])
        .prop_map(str::to_string),
    ]
}

proptest! {
    #[test]
    fn from_env_never_panics_on_arbitrary_values(
        pairs in prop::collection::vec((prop::sample::select(VARIABLES), value()), 0..12)
    ) {
        let env: HashMap<String, String> = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        match LensConfig::from_env(&env, "MEGATRON_OTEL", Some("NEMO_LENS"), &LENS_CATALOG) {
            Ok(config) => {
                prop_assert!(config.validate().is_ok());
                let _ = (config.to_string(), format!("{config:?}"));
            }
            Err(err) => {
                prop_assert!(!err.problems().is_empty());
                prop_assert_eq!(err.to_string().lines().count(), err.problems().len());
            }
        }
    }

    #[test]
    fn blank_values_count_as_unset(
        variables in prop::collection::vec(prop::sample::select(VARIABLES), 0..20),
        blank in "[ \\t]{0,3}",
    ) {
        let env: HashMap<String, String> = variables.iter().map(|k| (k.to_string(), blank.clone())).collect();
        let config = LensConfig::from_env(&env, "MEGATRON_OTEL", Some("NEMO_LENS"), &LENS_CATALOG).unwrap();
        prop_assert_eq!(format!("{config:?}"), format!("{:?}", LensConfig::default()));
    }

    #[test]
    fn header_values_never_appear_in_debug_display_or_errors(
        variable in prop::sample::select(vec![
            "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
        ]),
        shape in 0usize..6,
        other in prop::sample::select(vec!["", "MEGATRON_OTEL_ENABLED", "OTEL_EXPORTER_OTLP_ENDPOINT"]),
    ) {
        let list = match shape {
            0 => format!("Authorization={SECRET}"),
            1 => "Authorization=Bearer%20s3cr3t-t0ken,x=1".to_string(),
            2 => SECRET.to_string(),
            3 => format!("a=1,,{SECRET}"),
            4 => "Authorization: Bearer s3cr3t-t0ken=1".to_string(),
            _ => "k=%zzBearer s3cr3t-t0ken".to_string(),
        };
        let mut pairs = vec![(variable, list.as_str())];
        if !other.is_empty() {
            pairs.push((other, "bad value"));
        }
        let texts = match megatron(&pairs) {
            Ok(config) => vec![format!("{config:?}"), config.to_string(), format!("{:?}", config.otel)],
            Err(err) => vec![err.to_string(), format!("{err:?}")],
        };
        for text in texts {
            prop_assert!(!text.contains("s3cr3t"), "{}", text);
        }
    }
}

// ------------------------------------------------------- docs and code agree

/// The variable names in backticks in the first column of the tables of
/// docs/configuration.md.
fn documented_variables() -> Vec<String> {
    let page = include_str!("../../docs/configuration.md");
    let mut names = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("| `")) {
        let first_cell = line[1..].split(" |").next().unwrap_or("");
        for token in first_cell.split('`').skip(1).step_by(2) {
            if token.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && token.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                names.push(token.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_documented_variable_is_read() {
    let documented = documented_variables();
    assert!(documented.len() > 40, "{documented:?}");
    for variable in &documented {
        // A junk value is either rejected under the variable's name or
        // recorded as the origin of some field.
        match megatron(&[(variable.as_str(), "zz-9")]) {
            Ok(config) => {
                assert!(format!("{:?}", config.origins).contains(&format!("\"{variable}\"")), "{variable} not read")
            }
            Err(err) => assert!(err.mentions(variable), "{variable}: {err}"),
        }
    }
}

#[test]
fn every_variable_read_is_documented() {
    let documented = documented_variables();
    for variable in VARIABLES.iter().filter(|v| !v.starts_with("NEMO_LENS_")) {
        let canonical =
            variable.replace("_EXPORT_STRATEGY", "_RANK_STRATEGY").replace("_SAMPLER_ENABLED", "_SAMPLING_STRATEGY");
        assert!(documented.contains(&canonical), "{variable} is read but not in docs/configuration.md");
    }
}

// ------------------------------------------ the current span's home (issue 24)

#[test]
fn context_per_span_is_off_by_default_and_checked_like_every_boolean() {
    assert!(!megatron(&[]).unwrap().context_per_span, "lens's own stack by default");
    assert!(megatron(&[("MEGATRON_OTEL_CONTEXT_PER_SPAN", "true")]).unwrap().context_per_span);
    assert!(megatron(&[("NEMO_LENS_CONTEXT_PER_SPAN", "1")]).unwrap().context_per_span, "the fallback prefix");
    let error = megatron(&[("MEGATRON_OTEL_CONTEXT_PER_SPAN", "sometimes")]).unwrap_err().to_string();
    assert!(error.contains("MEGATRON_OTEL_CONTEXT_PER_SPAN") && error.contains("sometimes"), "{error}");
}

// ------------------------------------------------------- the spool (issue 22)

#[test]
fn spool_variables_are_read_and_checked() {
    let config = megatron(&[]).unwrap();
    assert!(config.spool, "the spool is on by default");
    assert_eq!(config.spool_dir, None);
    assert_eq!(config.spool_size_kib, 4096);
    let config = megatron(&[
        ("MEGATRON_OTEL_SPOOL", "0"),
        ("NEMO_LENS_SPOOL_DIR", "/local/spool"),
        ("MEGATRON_OTEL_SPOOL_SIZE_KIB", "128"),
    ])
    .unwrap();
    assert!(!config.spool);
    assert_eq!(config.spool_dir.as_deref(), Some(std::path::Path::new("/local/spool")));
    assert_eq!(config.spool_size_kib, 128);
    for bad in ["63", "1048577", "-1"] {
        let error = megatron(&[("MEGATRON_OTEL_SPOOL_SIZE_KIB", bad)]).unwrap_err().to_string();
        assert!(
            error.contains("MEGATRON_OTEL_SPOOL_SIZE_KIB") && error.contains(bad) && error.contains("64 to 1048576"),
            "{error}"
        );
    }
    // Not a number: the integer message every integer variable gives (SPEC 1.2).
    let error = megatron(&[("MEGATRON_OTEL_SPOOL_SIZE_KIB", "4MiB")]).unwrap_err().to_string();
    assert_eq!(
        error,
        "Invalid integer for MEGATRON_OTEL_SPOOL_SIZE_KIB: '4MiB'. Expected a whole number of KiB from 64 to 1048576 (default 4096)."
    );
    let error = megatron(&[("MEGATRON_OTEL_SPOOL", "maybe")]).unwrap_err().to_string();
    assert!(error.contains("MEGATRON_OTEL_SPOOL") && error.contains("maybe"), "{error}");
}
