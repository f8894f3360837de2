//! Our semantic-convention constants against opentelemetry-semantic-conventions
//! 0.33.1, so the two cannot drift. Stable keys are compared strictly; the
//! keys that crate has only as experimental or deprecated are compared too
//! (the `otel` feature enables its experimental set), with the reason we
//! keep our own copy beside each.

use lens_core::semconv::{self, Stability};
use opentelemetry_semantic_conventions::{attribute, resource};

/// Keys that opentelemetry-semantic-conventions 0.33.1 has as stable: they
/// are in its `resource` module without the `semconv_experimental` feature.
const STABLE: &[(&str, &str)] = &[
    (semconv::SERVICE_NAME, resource::SERVICE_NAME),
    (semconv::SERVICE_VERSION, resource::SERVICE_VERSION),
    (semconv::SERVICE_INSTANCE_ID, resource::SERVICE_INSTANCE_ID),
    (semconv::K8S_NAMESPACE_NAME, resource::K8S_NAMESPACE_NAME),
    (semconv::K8S_POD_NAME, resource::K8S_POD_NAME),
    (semconv::K8S_POD_UID, resource::K8S_POD_UID),
    (semconv::K8S_NODE_NAME, resource::K8S_NODE_NAME),
    (semconv::K8S_CONTAINER_NAME, resource::K8S_CONTAINER_NAME),
    (semconv::K8S_JOB_NAME, resource::K8S_JOB_NAME),
    // Stable span attributes (the inference server's HTTP server span).
    (semconv::HTTP_REQUEST_METHOD, attribute::HTTP_REQUEST_METHOD),
    (semconv::HTTP_RESPONSE_STATUS_CODE, attribute::HTTP_RESPONSE_STATUS_CODE),
    (semconv::HTTP_ROUTE, attribute::HTTP_ROUTE),
    (semconv::URL_PATH, attribute::URL_PATH),
    (semconv::URL_SCHEME, attribute::URL_SCHEME),
    (semconv::SERVER_ADDRESS, attribute::SERVER_ADDRESS),
    (semconv::SERVER_PORT, attribute::SERVER_PORT),
    (semconv::ERROR_TYPE, attribute::ERROR_TYPE),
];

#[test]
fn stable_keys_match_opentelemetry() {
    for &(ours, theirs) in STABLE {
        assert_eq!(ours, theirs);
        let key = semconv::ALL.iter().find(|k| k.key == ours).expect("listed in semconv::ALL");
        assert_eq!(key.stability, Stability::Stable, "{ours} is stable upstream");
    }
}

#[test]
fn every_key_we_mark_stable_is_compared() {
    for key in semconv::ALL.iter().filter(|k| k.stability == Stability::Stable) {
        assert!(STABLE.iter().any(|&(ours, _)| ours == key.key), "{} is marked stable but not compared", key.key);
    }
}

#[test]
fn experimental_keys_match_opentelemetry() {
    // Experimental upstream (behind `semconv_experimental`): ours need no feature.
    assert_eq!(semconv::HOST_NAME, attribute::HOST_NAME);
    assert_eq!(semconv::PROCESS_PID, attribute::PROCESS_PID);
}

#[test]
#[expect(deprecated, reason = "these keys are deprecated upstream; the original emits them, so we keep them")]
fn deprecated_keys_match_opentelemetry() {
    // Renamed to `deployment.environment.name` upstream.
    assert_eq!(semconv::DEPLOYMENT_ENVIRONMENT, attribute::DEPLOYMENT_ENVIRONMENT);
    // Moved to the separate GenAI conventions repository.
    assert_eq!(semconv::GENAI_OPERATION_NAME, attribute::GEN_AI_OPERATION_NAME);
    assert_eq!(semconv::GENAI_PROVIDER_NAME, attribute::GEN_AI_PROVIDER_NAME);
    assert_eq!(semconv::GENAI_REQUEST_MODEL, attribute::GEN_AI_REQUEST_MODEL);
    assert_eq!(semconv::GENAI_TOKEN_TYPE, attribute::GEN_AI_TOKEN_TYPE);
    assert_eq!(semconv::GENAI_REQUEST_MAX_TOKENS, attribute::GEN_AI_REQUEST_MAX_TOKENS);
    assert_eq!(semconv::GENAI_REQUEST_TEMPERATURE, attribute::GEN_AI_REQUEST_TEMPERATURE);
    assert_eq!(semconv::GENAI_REQUEST_TOP_P, attribute::GEN_AI_REQUEST_TOP_P);
    assert_eq!(semconv::GENAI_REQUEST_SEED, attribute::GEN_AI_REQUEST_SEED);
    assert_eq!(semconv::GENAI_RESPONSE_ID, attribute::GEN_AI_RESPONSE_ID);
    assert_eq!(semconv::GENAI_RESPONSE_MODEL, attribute::GEN_AI_RESPONSE_MODEL);
    assert_eq!(semconv::GENAI_RESPONSE_FINISH_REASONS, attribute::GEN_AI_RESPONSE_FINISH_REASONS);
    assert_eq!(semconv::GENAI_USAGE_INPUT_TOKENS, attribute::GEN_AI_USAGE_INPUT_TOKENS);
    assert_eq!(semconv::GENAI_USAGE_OUTPUT_TOKENS, attribute::GEN_AI_USAGE_OUTPUT_TOKENS);
}
