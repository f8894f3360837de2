//! `gen_ai.server.request.duration` and `gen_ai.client.token.usage`.

use std::collections::BTreeMap;

use lens_instruments::{InferenceMetrics, InferenceValues, InstrumentKind, buckets, record_inference_metrics};

use crate::common::{Harness, Number, bucket_of, names};

const DURATION: &str = "gen_ai.server.request.duration";
const TOKENS: &str = "gen_ai.client.token.usage";

fn full() -> InferenceValues<'static> {
    InferenceValues {
        request_duration_s: Some(0.42),
        model: Some("llama-3-8b"),
        input_tokens: Some(128),
        output_tokens: Some(256),
        ..Default::default()
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
}

#[test]
fn both_histograms_have_the_semconv_names_kinds_units_and_descriptions() {
    let harness = Harness::new();
    record_inference_metrics(&InferenceMetrics::new(&harness.meter()), &full());

    let exported = harness.collect();
    assert_eq!(names(&exported), [TOKENS, DURATION]);
    let duration = &exported[1];
    assert_eq!((duration.kind, duration.number, duration.unit.as_str()), (InstrumentKind::Histogram, Number::F64, "s"));
    assert_eq!(
        duration.description,
        "Generative AI server request duration such as time-to-last byte or last output token."
    );
    let tokens = &exported[0];
    assert_eq!((tokens.kind, tokens.number, tokens.unit.as_str()), (InstrumentKind::Histogram, Number::U64, "{token}"));
    assert_eq!(tokens.description, "Number of input and output tokens used.");
}

#[test]
fn recorded_values_equal_the_arguments() {
    let harness = Harness::new();
    InferenceMetrics::new(&harness.meter()).record(&full());

    let duration = harness.metric(DURATION);
    assert_eq!((duration.point().count, duration.point().sum), (1, 0.42));
    let tokens = harness.metric(TOKENS);
    assert_eq!(tokens.points.len(), 2, "one point per token type");
    let input = tokens.point_with("gen_ai.token.type", "input");
    let output = tokens.point_with("gen_ai.token.type", "output");
    assert_eq!((input.count, input.sum), (1, 128.0));
    assert_eq!((output.count, output.sum), (1, 256.0));
}

#[test]
fn defaults_are_text_completion_and_nemo_and_token_type_labels_each_point() {
    let harness = Harness::new();
    InferenceMetrics::new(&harness.meter()).record(&InferenceValues {
        request_duration_s: Some(1.0),
        input_tokens: Some(3),
        output_tokens: Some(4),
        ..Default::default()
    });

    let base = [("gen_ai.operation.name", "text_completion"), ("gen_ai.provider.name", "nemo")];
    assert_eq!(harness.metric(DURATION).point().attributes, map(&base));
    let tokens = harness.metric(TOKENS);
    let mut attribute_sets: Vec<_> = tokens.points.iter().map(|point| point.attributes.clone()).collect();
    attribute_sets.sort();
    assert_eq!(
        attribute_sets,
        [
            map(&[base[0], base[1], ("gen_ai.token.type", "input")]),
            map(&[base[0], base[1], ("gen_ai.token.type", "output")])
        ]
    );
}

#[test]
fn operation_and_provider_overrides_replace_the_defaults_on_every_point() {
    let harness = Harness::new();
    InferenceMetrics::new(&harness.meter()).record(&InferenceValues {
        operation_name: Some("chat"),
        provider_name: Some("vllm"),
        ..full()
    });

    let expected = map(&[
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "vllm"),
        ("gen_ai.request.model", "llama-3-8b"),
    ]);
    assert_eq!(harness.metric(DURATION).point().attributes, expected);
    for point in &harness.metric(TOKENS).points {
        let mut without_type = point.attributes.clone();
        assert!(without_type.remove("gen_ai.token.type").is_some());
        assert_eq!(without_type, expected);
    }
}

#[test]
fn empty_overrides_fall_back_to_the_defaults() {
    let harness = Harness::new();
    InferenceMetrics::new(&harness.meter()).record(&InferenceValues {
        request_duration_s: Some(0.5),
        operation_name: Some(""),
        provider_name: Some(""),
        ..Default::default()
    });
    assert_eq!(
        harness.metric(DURATION).point().attributes,
        map(&[("gen_ai.operation.name", "text_completion"), ("gen_ai.provider.name", "nemo")])
    );
}

#[test]
fn model_attribute_is_present_only_when_a_model_is_given() {
    for (model, expected) in [(Some("llama-3-8b"), Some("llama-3-8b")), (None, None), (Some(""), None)] {
        let harness = Harness::new();
        InferenceMetrics::new(&harness.meter()).record(&InferenceValues {
            request_duration_s: Some(0.1),
            input_tokens: Some(1),
            model,
            ..Default::default()
        });
        for metric in [harness.metric(DURATION), harness.metric(TOKENS)] {
            let got = metric.point().attributes.get("gen_ai.request.model").map(String::as_str);
            assert_eq!(got, expected, "{} with model {model:?}", metric.name);
        }
    }
}

#[test]
fn nothing_is_exported_when_no_value_is_present() {
    let harness = Harness::new();
    let metrics = InferenceMetrics::new(&harness.meter());
    // Names alone are not values.
    metrics.record(&InferenceValues {
        model: Some("m"),
        provider_name: Some("p"),
        operation_name: Some("chat"),
        ..Default::default()
    });
    metrics.record(&InferenceValues::default());
    assert_eq!(harness.collect(), []);
}

#[test]
fn each_value_alone_records_only_its_data_point() {
    let cases: [(InferenceValues<'static>, &str, Option<&str>); 3] = [
        (InferenceValues { request_duration_s: Some(2.0), ..Default::default() }, DURATION, None),
        (InferenceValues { input_tokens: Some(7), ..Default::default() }, TOKENS, Some("input")),
        (InferenceValues { output_tokens: Some(9), ..Default::default() }, TOKENS, Some("output")),
    ];
    for (values, name, token_type) in cases {
        let harness = Harness::new();
        InferenceMetrics::new(&harness.meter()).record(&values);
        let exported = harness.collect();
        assert_eq!(names(&exported), [name], "{values:?}");
        let point = exported[0].point();
        assert_eq!(point.attributes.get("gen_ai.token.type").map(String::as_str), token_type);
        let expected = values.request_duration_s.or(values.input_tokens.or(values.output_tokens).map(|n| n as f64));
        assert_eq!(Some(point.sum), expected);
    }
}

#[test]
fn histograms_use_the_genai_recommended_bucket_boundaries() {
    let harness = Harness::new();
    InferenceMetrics::new(&harness.meter()).record(&full());

    let duration = harness.metric(DURATION);
    let point = duration.point();
    assert_eq!(point.bounds, [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]);
    assert_eq!(point.bounds, buckets::GEN_AI_REQUEST_DURATION_S);
    // 0.42 s lies in (0.32, 0.64]: the SDK's default buckets would put it in [0, 5].
    assert_eq!(bucket_of(&point.bounds, 0.42), 6);
    assert_eq!(point.bucket_counts[6], 1);
    assert_eq!(point.bucket_counts.iter().sum::<u64>(), 1);

    let tokens = harness.metric(TOKENS);
    let input = tokens.point_with("gen_ai.token.type", "input");
    assert_eq!(
        input.bounds,
        [
            1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
            67108864.0
        ]
    );
    assert_eq!(input.bucket_counts[bucket_of(&input.bounds, 128.0)], 1);
}
