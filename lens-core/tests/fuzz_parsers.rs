//! Property tests over the parsers that read untrusted input, adding what
//! `config.rs`, `groups.rs` and `otel_propagation.rs` do not already check
//! (there: no panics, one line per problem, resolution is a union, header
//! values never shown):
//!
//! every problem `LensConfig::from_env` reports names a variable that was
//! actually set (a user can find what to fix), for arbitrary values of the
//! known variables, including the fallback prefix and aliases. (The
//! propagation decoders' properties are the facade's, `tests/fuzz_context.rs`.)

use std::collections::HashMap;

use lens_core::config::LensConfig;
use lens_core::groups::LENS_CATALOG;
use proptest::prelude::*;

/// Known variable names, both prefixes, aliases and the standard ones.
const VARIABLES: &[&str] = &[
    "MEGATRON_OTEL_ENABLED",
    "NEMO_LENS_ENABLED",
    "MEGATRON_OTEL_RANK_STRATEGY",
    "MEGATRON_OTEL_EXPORT_STRATEGY",
    "NEMO_LENS_RANK_STRATEGY",
    "NEMO_LENS_EXPORT_STRATEGY",
    "MEGATRON_OTEL_EXPORT_RANK",
    "MEGATRON_OTEL_EXPORT_SAMPLE_RATE",
    "NEMO_LENS_EXPORT_SAMPLE_RATE",
    "MEGATRON_OTEL_SAMPLING_STRATEGY",
    "MEGATRON_OTEL_SAMPLER_ENABLED",
    "NEMO_LENS_SAMPLER_ENABLED",
    "MEGATRON_OTEL_TRACES_ENABLED",
    "MEGATRON_OTEL_METRICS_ENABLED",
    "MEGATRON_OTEL_LOGS_ENABLED",
    "MEGATRON_OTEL_SPAN_GROUPS",
    "NEMO_LENS_SPAN_GROUPS",
    "MEGATRON_OTEL_EXPORTER",
    "MEGATRON_OTEL_EXPORT_RETRY_WINDOW_MS",
    "MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS",
    "MEGATRON_OTEL_PROMETHEUS_LINGER_MS",
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
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_EXPORTER_PROMETHEUS_PORT",
    "OTEL_PROPAGATORS",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_CONCURRENT_EXPORTS",
];

/// Values: arbitrary text, numbers of every shape, and near-valid names.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "-?[0-9_]{0,7}(\\.[0-9]{0,3})?(e-?[0-9])?",
        prop::sample::select(vec![
            "1",
            "0",
            "yes",
            "maybe",
            "otlp",
            "consol",
            "file",
            "prometheus",
            "none",
            "grpc",
            "http",
            "gzip",
            "zstd",
            "all_ranks",
            "singel_rank",
            "rank_aware",
            "per_step",
            "chekpoint",
            "http://localhost:4317",
            "ftp://x",
            "a=b",
            "=b",
            "nan",
            "inf",
            "-1",
            "1.5",
            "65536",
            "4097",
            "1",
        ])
        .prop_map(str::to_string),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_problem_names_a_variable_that_was_set(
        pairs in prop::collection::vec((prop::sample::select(VARIABLES), value()), 1..10)
    ) {
        let env: HashMap<String, String> = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        if let Err(error) = LensConfig::from_env(&env, "MEGATRON_OTEL", Some("NEMO_LENS"), &LENS_CATALOG) {
            for problem in error.problems() {
                prop_assert!(
                    env.contains_key(problem.variable()),
                    "{problem} names {:?}, which is not set; set: {:?}",
                    problem.variable(),
                    env.keys().collect::<Vec<_>>()
                );
                prop_assert!(problem.to_string().contains(problem.variable()), "{problem}");
            }
        }
    }
}
