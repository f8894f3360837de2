//! The resource attributes derived from training arguments and the
//! environment (the table of the configuration page, as Megatron's
//! `build_telemetry_resource_attrs` builds it), and their docs page.

use std::collections::HashMap;

use lens_fallbacks::attr::{AttrValue, KeyValue};
use lens_fallbacks::identity::{lens_job_uuid, lens_run_uuid};
use megatron_telemetry::resource::{
    ENVIRONMENT_ATTRIBUTES, Precision, TRAINING_ATTRIBUTES, TrainingArgs, training_resource_attributes,
};

fn full_args() -> TrainingArgs {
    TrainingArgs {
        local_rank: Some(3),
        tensor_model_parallel_size: Some(4),
        pipeline_model_parallel_size: Some(2),
        data_parallel_size: Some(16),
        global_batch_size: Some(1024),
        seq_length: Some(4096),
        num_layers: Some(32),
        hidden_size: Some(4096),
        num_attention_heads: Some(32),
        train_iters: Some(500_000),
        micro_batch_size: Some(1),
        ckpt_format: Some("torch_dist".to_string()),
        fp16: false,
        bf16: true,
    }
}

fn as_map(attrs: &[KeyValue]) -> HashMap<String, AttrValue> {
    attrs.iter().map(|kv| (kv.key.to_string(), kv.value.clone())).collect()
}

const NO_ENV: [(&str, &str); 0] = [];

#[test]
fn full_arguments_yield_every_seed_table_key_with_its_value() {
    let attrs = as_map(&training_resource_attributes(&full_args(), &NO_ENV));
    let expected: [(&str, AttrValue); 13] = [
        ("dl.local_rank", AttrValue::I64(3)),
        ("dl.tensor_parallel.size", AttrValue::I64(4)),
        ("dl.pipeline_parallel.size", AttrValue::I64(2)),
        ("dl.data_parallel.size", AttrValue::I64(16)),
        ("dl.batch_size", AttrValue::I64(1024)),
        ("dl.sequence_length", AttrValue::I64(4096)),
        ("megatron.num_layers", AttrValue::I64(32)),
        ("megatron.hidden_size", AttrValue::I64(4096)),
        ("megatron.num_attention_heads", AttrValue::I64(32)),
        ("megatron.train_iters", AttrValue::I64(500_000)),
        ("megatron.micro_batch_size", AttrValue::I64(1)),
        ("megatron.ckpt_format", AttrValue::from("torch_dist")),
        ("megatron.precision", AttrValue::from("bf16")),
    ];
    for (key, value) in &expected {
        assert_eq!(attrs.get(*key), Some(value), "{key}");
    }
    // The seed table and the code's table name the same keys, in the same order.
    let table: Vec<&str> = TRAINING_ATTRIBUTES.iter().map(|row| row.key).collect();
    let seed: Vec<&str> = expected.iter().map(|(key, _)| *key).collect();
    assert_eq!(table, seed);
}

#[test]
fn absent_arguments_are_omitted_but_precision_is_always_there() {
    let attrs = training_resource_attributes(&TrainingArgs::default(), &NO_ENV);
    let keys: Vec<&str> = attrs.iter().map(|kv| kv.key.as_ref()).collect();
    assert_eq!(keys, ["megatron.precision", "nemo.lens.job_uuid", "nemo.lens.run_uuid"]);

    let some = TrainingArgs { num_layers: Some(2), ckpt_format: Some(String::new()), ..TrainingArgs::default() };
    let attrs = as_map(&training_resource_attributes(&some, &NO_ENV));
    assert_eq!(attrs.get("megatron.num_layers"), Some(&AttrValue::I64(2)));
    assert!(!attrs.contains_key("megatron.ckpt_format"), "an empty checkpoint format is not emitted");
    assert!(!attrs.contains_key("megatron.hidden_size"));
    assert!(!attrs.contains_key("dl.local_rank"));
}

#[test]
fn zero_is_a_present_value() {
    let args = TrainingArgs { local_rank: Some(0), train_iters: Some(0), ..TrainingArgs::default() };
    let attrs = as_map(&training_resource_attributes(&args, &NO_ENV));
    assert_eq!(attrs.get("dl.local_rank"), Some(&AttrValue::I64(0)));
    assert_eq!(attrs.get("megatron.train_iters"), Some(&AttrValue::I64(0)));
}

#[test]
fn precision_is_fp16_over_bf16_over_fp32() {
    let precision = |fp16, bf16| {
        let attrs =
            as_map(&training_resource_attributes(&TrainingArgs { fp16, bf16, ..TrainingArgs::default() }, &NO_ENV));
        attrs.get("megatron.precision").cloned()
    };
    assert_eq!(precision(true, false), Some(AttrValue::from("fp16")));
    assert_eq!(precision(false, true), Some(AttrValue::from("bf16")));
    assert_eq!(precision(true, true), Some(AttrValue::from("fp16")));
    assert_eq!(precision(false, false), Some(AttrValue::from("fp32")));
    assert_eq!(full_args().precision(), Precision::Bf16);
}

#[test]
fn slurm_and_nvrx_variables_become_string_attributes_when_set() {
    let env = [
        ("SLURM_JOB_ID", "4242"),
        ("LENS_SLURM_SLUID", "sluid-abc"),
        ("SLURM_CLUSTER_NAME", "eos"),
        ("SLURM_ARRAY_JOB_ID", "4200"),
        ("SLURM_ARRAY_TASK_ID", "7"),
        ("LENS_SLURM_ARRAY_SLUID", "sluid-arr"),
        ("SLURM_RESTART_COUNT", "2"),
        ("NVRX_CYCLE", "3"),
        ("NVRX_INFRA_RANK", "11"),
        ("NVRX_MEMBERSHIP", "node-a,node-b"),
    ];
    let attrs = as_map(&training_resource_attributes(&TrainingArgs::default(), &env));
    let expected = [
        ("slurm.job.id", "4242"),
        ("slurm.sluid", "sluid-abc"),
        ("slurm.cluster", "eos"),
        ("slurm.array.job_id", "4200"),
        ("slurm.array.task_id", "7"),
        ("slurm.array.sluid", "sluid-arr"),
        ("slurm.restart_count", "2"),
        ("nvrx.cycle", "3"),
        ("nvrx.infra_rank", "11"),
        ("nvrx.membership", "node-a,node-b"),
    ];
    for (key, value) in expected {
        assert_eq!(attrs.get(key), Some(&AttrValue::from(value)), "{key}");
    }
    // Megatron's key for the cluster, not lens's detector key.
    assert!(!attrs.contains_key("slurm.cluster.name"));
    assert_eq!(ENVIRONMENT_ATTRIBUTES.len(), expected.len());
}

#[test]
fn unset_or_blank_slurm_and_nvrx_variables_add_nothing() {
    let env = [("SLURM_JOB_ID", ""), ("NVRX_CYCLE", "  "), ("LENS_SLURM_SLUID", ""), ("RANK", "0")];
    let attrs = training_resource_attributes(&TrainingArgs::default(), &env);
    for row in ENVIRONMENT_ATTRIBUTES {
        assert!(attrs.iter().all(|kv| kv.key != row.key), "{} should be absent", row.key);
    }
}

#[test]
fn job_and_run_uuids_follow_lens_core_recipe() {
    let env = [
        ("SLURM_JOB_ID", "123456"),
        ("SLURM_CLUSTER_NAME", "eos"),
        ("SLURM_RESTART_COUNT", "2"),
        ("TORCHELASTIC_RESTART_COUNT", "1"),
    ];
    let attrs = as_map(&training_resource_attributes(&full_args(), &env));
    assert_eq!(attrs.get("nemo.lens.job_uuid"), Some(&AttrValue::from(lens_job_uuid(&env))));
    assert_eq!(attrs.get("nemo.lens.run_uuid"), Some(&AttrValue::from(lens_run_uuid(&env))));
    assert_eq!(attrs.get("nemo.lens.job_uuid"), Some(&AttrValue::from("81d99a4d-2548-543a-ac93-1564e9c91f17")));
    assert_eq!(attrs.get("slurm.torchelastic.restart_count"), Some(&AttrValue::from("1")));

    // A restart keeps the job and changes the run.
    let restarted = [("SLURM_JOB_ID", "123456"), ("SLURM_CLUSTER_NAME", "eos"), ("SLURM_RESTART_COUNT", "3")];
    let again = as_map(&training_resource_attributes(&full_args(), &restarted));
    assert_eq!(again.get("nemo.lens.job_uuid"), attrs.get("nemo.lens.job_uuid"));
    assert_ne!(again.get("nemo.lens.run_uuid"), attrs.get("nemo.lens.run_uuid"));
    assert!(!again.contains_key("slurm.torchelastic.restart_count"));
}

#[test]
fn every_key_appears_once_and_no_gpu_attribute_is_read_here() {
    let env = [("SLURM_JOB_ID", "1"), ("CUDA_VISIBLE_DEVICES", "0")];
    let attrs = training_resource_attributes(&full_args(), &env);
    let mut keys: Vec<&str> = attrs.iter().map(|kv| kv.key.as_ref()).collect();
    let count = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), count, "a key appears twice");
    assert!(keys.iter().all(|key| !key.starts_with("dl.gpu.")), "GPU identity belongs to the lazy NVML attributes");
}

#[test]
fn the_docs_page_lists_every_attribute_and_its_source() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/resource-attributes.md"))
        .expect("docs/resource-attributes.md exists");
    for row in TRAINING_ATTRIBUTES.iter().chain(ENVIRONMENT_ATTRIBUTES.iter()) {
        let line = format!("| `{}` | {} |", row.key, row.source);
        let line_code = format!("| `{}` | `{}` |", row.key, row.source);
        assert!(
            page.lines().any(|l| l.trim() == line || l.trim() == line_code),
            "docs/resource-attributes.md lacks the row {line_code}"
        );
    }
    for key in ["dl.gpu.index", "dl.gpu.name", "dl.gpu.uuid", "dl.gpu.serial", "dl.gpu.pci_bus_id"] {
        assert!(page.contains(&format!("`{key}`")), "docs/resource-attributes.md lacks {key}");
    }
}
