//! Rank detection, run identity, resource detection and the deterministic
//! UUIDs, as a user of lens sees them. Every test reads an injected
//! environment; none touches the process environment.

use std::collections::HashMap;

use lens_core::attr::{AttrValue, KeyValue};
use lens_core::identity::{
    FixedProbe, RankContext, RankContextError, ResourceInputs, RunIdSource, build_resource, detect_host,
    detect_kubernetes, detect_resource, detect_slurm, lens_job_name, lens_job_uuid, lens_run_name, lens_run_uuid,
    lens_uuid_attributes, resolve_run_id, restart_attempt, service_instance_id,
};
use proptest::prelude::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn s(value: &str) -> AttrValue {
    AttrValue::from(value.to_string())
}

fn probe() -> FixedProbe {
    FixedProbe { hostname: Some("gpu-node-17".into()), process_id: 4321, kubernetes_service_account: false }
}

fn keys(attrs: &lens_core::identity::ResourceAttributes) -> Vec<&str> {
    attrs.iter().map(|kv| kv.key.as_ref()).collect()
}

// ---------------------------------------------------------------- rank context

#[test]
fn nothing_set_is_rank_0_of_1() {
    assert_eq!(RankContext::detect(&env(&[])).unwrap(), RankContext::SINGLE);
    // Empty values count as unset.
    let blank = env(&[("RANK", ""), ("WORLD_SIZE", " "), ("SLURM_PROCID", ""), ("LOCAL_RANK", "")]);
    assert_eq!(RankContext::detect(&blank).unwrap(), RankContext::SINGLE);
}

#[test]
fn torchrun_variables_are_read() {
    let e = env(&[("RANK", "5"), ("WORLD_SIZE", "16"), ("LOCAL_RANK", "1"), ("GROUP_RANK", "2")]);
    assert_eq!(
        RankContext::detect(&e).unwrap(),
        RankContext { rank: 5, world_size: 16, local_rank: 1, node_rank: Some(2) }
    );
}

#[test]
fn slurm_variables_are_read_when_torchrun_is_absent() {
    let e = env(&[("SLURM_PROCID", "9"), ("SLURM_NTASKS", "32"), ("SLURM_LOCALID", "1"), ("SLURM_NODEID", "4")]);
    assert_eq!(
        RankContext::detect(&e).unwrap(),
        RankContext { rank: 9, world_size: 32, local_rank: 1, node_rank: Some(4) }
    );
}

#[test]
fn torchrun_variables_win_over_slurm() {
    // torchrun started inside one srun task per node: SLURM describes the
    // node-level task, torchrun the process.
    let e = env(&[
        ("RANK", "13"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "5"),
        ("GROUP_RANK", "1"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "1"),
    ]);
    assert_eq!(
        RankContext::detect(&e).unwrap(),
        RankContext { rank: 13, world_size: 16, local_rank: 5, node_rank: Some(1) }
    );
}

#[test]
fn rank_and_world_size_come_from_one_launcher() {
    // WORLD_SIZE alone does not borrow SLURM_PROCID as its rank.
    let e = env(&[("WORLD_SIZE", "4"), ("SLURM_PROCID", "2"), ("SLURM_NTASKS", "4")]);
    let err = RankContext::detect(&e).unwrap_err();
    assert_eq!(err, RankContextError::Incomplete { present: "WORLD_SIZE", value: 4, missing: "RANK" });
    assert_eq!(
        err.to_string(),
        "WORLD_SIZE=4 is set but RANK is not; set both (or neither, for a single process of rank 0 of 1)"
    );
}

#[test]
fn half_a_pair_is_completed_only_when_unambiguous() {
    // sbatch's batch step has SLURM_PROCID=0 but, without -n, no SLURM_NTASKS.
    assert_eq!(RankContext::detect(&env(&[("SLURM_PROCID", "0")])).unwrap(), RankContext::SINGLE);
    assert_eq!(RankContext::detect(&env(&[("WORLD_SIZE", "1")])).unwrap(), RankContext::SINGLE);
    let err = RankContext::detect(&env(&[("RANK", "3")])).unwrap_err();
    assert!(err.to_string().starts_with("RANK=3 is set but WORLD_SIZE is not"), "{err}");
}

#[test]
fn node_rank_prefers_group_rank_then_node_rank_then_slurm() {
    let base = [("RANK", "0"), ("WORLD_SIZE", "2")];
    let with = |extra: &[(&str, &str)]| {
        let mut pairs = base.to_vec();
        pairs.extend_from_slice(extra);
        RankContext::detect(&env(&pairs)).unwrap().node_rank
    };
    assert_eq!(with(&[]), None);
    assert_eq!(with(&[("SLURM_NODEID", "3")]), Some(3));
    assert_eq!(with(&[("SLURM_NODEID", "3"), ("NODE_RANK", "2")]), Some(2));
    assert_eq!(with(&[("SLURM_NODEID", "3"), ("NODE_RANK", "2"), ("GROUP_RANK", "1")]), Some(1));
}

#[test]
fn malformed_values_name_the_variable_the_value_and_what_is_accepted() {
    let cases = [
        (
            env(&[("RANK", "abc"), ("WORLD_SIZE", "4")]),
            "invalid value for RANK: \"abc\"; expected a non-negative integer (0 to 4294967295)",
        ),
        (
            env(&[("RANK", "0"), ("WORLD_SIZE", "-2")]),
            "invalid value for WORLD_SIZE: \"-2\"; expected a non-negative integer (0 to 4294967295)",
        ),
        (
            env(&[("SLURM_PROCID", "1.5"), ("SLURM_NTASKS", "4")]),
            "invalid value for SLURM_PROCID: \"1.5\"; expected a non-negative integer (0 to 4294967295)",
        ),
        (
            env(&[("LOCAL_RANK", "+1")]),
            "invalid value for LOCAL_RANK: \"+1\"; expected a non-negative integer (0 to 4294967295)",
        ),
        (
            env(&[("SLURM_NODEID", "99999999999")]),
            "invalid value for SLURM_NODEID: \"99999999999\"; expected a non-negative integer (0 to 4294967295)",
        ),
        (
            env(&[("RANK", "0"), ("WORLD_SIZE", "0")]),
            "invalid value for WORLD_SIZE: \"0\"; the world size must be at least 1",
        ),
        (env(&[("SLURM_NTASKS", "0")]), "invalid value for SLURM_NTASKS: \"0\"; the world size must be at least 1"),
        (
            env(&[("RANK", "4"), ("WORLD_SIZE", "4")]),
            "RANK=4 is not below WORLD_SIZE=4; a rank must be between 0 and the world size minus 1",
        ),
        (
            env(&[("SLURM_PROCID", "8"), ("SLURM_NTASKS", "2")]),
            "SLURM_PROCID=8 is not below SLURM_NTASKS=2; a rank must be between 0 and the world size minus 1",
        ),
        (
            env(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "2")]),
            "LOCAL_RANK=2 is not below the world size 2; a local rank must be below it",
        ),
    ];
    for (e, expected) in cases {
        assert_eq!(RankContext::detect(&e).unwrap_err().to_string(), expected, "{e:?}");
    }
}

#[test]
fn surrounding_whitespace_is_tolerated() {
    let e = env(&[("RANK", " 1 "), ("WORLD_SIZE", "2\n")]);
    assert_eq!(RankContext::detect(&e).unwrap().rank, 1);
}

const RANK_VARIABLES: [&str; 9] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "GROUP_RANK",
    "NODE_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any values at all: detection returns, and a success is consistent.
    #[test]
    fn rank_detection_never_panics(values in proptest::collection::vec(
        proptest::option::of(prop_oneof!["[0-9]{1,11}", "\\PC{0,12}", Just(String::new())]), 9)
    ) {
        let e: HashMap<String, String> = RANK_VARIABLES
            .iter()
            .zip(values)
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect();
        if let Ok(ctx) = RankContext::detect(&e) {
            prop_assert!(ctx.world_size >= 1);
            prop_assert!(ctx.rank < ctx.world_size);
            prop_assert!(ctx.local_rank < ctx.world_size);
        }
    }

    /// Every detector and the resource builder accept any environment.
    #[test]
    fn resource_detection_never_panics(
        values in proptest::collection::vec(proptest::option::of("\\PC{0,16}"), 12),
        in_pod in any::<bool>(),
    ) {
        let names = [
            "CUDA_VISIBLE_DEVICES", "HOSTNAME", "SLURM_JOB_ID", "SLURM_NNODES", "KUBERNETES_SERVICE_HOST",
            "K8S_POD_NAME", "OTEL_RESOURCE_ATTRIBUTES", "DEPLOYMENT_ENV", "SLURM_ARRAY_TASK_ID",
            "SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID",
        ];
        let e: HashMap<String, String> = names
            .iter()
            .zip(values)
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect();
        let probe = FixedProbe { hostname: None, process_id: 1, kubernetes_service_account: in_pod };
        let inputs = ResourceInputs::new("svc", resolve_run_id("", &e).value, RankContext::SINGLE);
        let resource = build_resource(&inputs, &e, &probe);
        prop_assert_eq!(resource.get("service.name"), Some(&s("svc")));
        let _ = (restart_attempt(&e), lens_uuid_attributes(&e));
    }
}

// ---------------------------------------------------------------- run id

#[test]
fn run_id_priority_each_level() {
    let all = [("NEMO_LENS_RUN_ID", "lens-run"), ("SLURM_JOB_ID", "4242"), ("TORCHELASTIC_RUN_ID", "elastic-7")];
    let id = resolve_run_id("configured", &env(&all));
    assert_eq!((id.value.as_str(), id.source), ("configured", RunIdSource::Configured));

    let id = resolve_run_id("", &env(&all));
    assert_eq!((id.value.as_str(), id.source), ("lens-run", RunIdSource::NemoLensRunId));

    let id = resolve_run_id("", &env(&all[1..]));
    assert_eq!((id.value.as_str(), id.source), ("4242", RunIdSource::SlurmJobId));

    let id = resolve_run_id("", &env(&all[2..]));
    assert_eq!((id.value.as_str(), id.source), ("elastic-7", RunIdSource::TorchElasticRunId));

    let id = resolve_run_id("", &env(&[]));
    assert_eq!(id.source, RunIdSource::Random);
    assert_eq!(id.value.len(), 12);
    assert!(id.value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{}", id.value);
}

#[test]
fn torchrun_default_run_id_none_is_not_an_id() {
    for none in ["none", "NONE", " none "] {
        let id = resolve_run_id("", &env(&[("TORCHELASTIC_RUN_ID", none)]));
        assert_eq!(id.source, RunIdSource::Random, "{none:?}");
    }
}

#[test]
fn empty_values_fall_through_to_the_next_source() {
    let e = env(&[("NEMO_LENS_RUN_ID", " "), ("SLURM_JOB_ID", ""), ("TORCHELASTIC_RUN_ID", "abc")]);
    let id = resolve_run_id("  ", &e);
    assert_eq!((id.value.as_str(), id.source), ("abc", RunIdSource::TorchElasticRunId));
}

#[test]
fn random_run_ids_differ_between_draws() {
    // Two ranks that draw their own ids (the case setup warns about) get
    // different ones: 48 bits of OS entropy.
    let a = resolve_run_id("", &env(&[])).value;
    let b = resolve_run_id("", &env(&[])).value;
    assert_ne!(a, b);
}

#[test]
fn only_a_random_run_id_is_not_shared_between_ranks() {
    assert!(!RunIdSource::Random.is_shared());
    for source in
        [RunIdSource::Configured, RunIdSource::NemoLensRunId, RunIdSource::SlurmJobId, RunIdSource::TorchElasticRunId]
    {
        assert!(source.is_shared(), "{source:?}");
    }
    assert_eq!(RunIdSource::SlurmJobId.to_string(), "SLURM_JOB_ID");
}

#[test]
fn restart_attempt_distinguishes_slurm_and_torchelastic_restarts() {
    assert_eq!(restart_attempt(&env(&[])), 0);
    let sr1 = restart_attempt(&env(&[("SLURM_RESTART_COUNT", "1")]));
    let te1 = restart_attempt(&env(&[("TORCHELASTIC_RESTART_COUNT", "1")]));
    let both = restart_attempt(&env(&[("SLURM_RESTART_COUNT", "1"), ("TORCHELASTIC_RESTART_COUNT", "1")]));
    assert_ne!(sr1, 0);
    assert_ne!(te1, 0);
    assert_ne!(sr1, te1);
    assert!(both != sr1 && both != te1);
    assert_eq!(restart_attempt(&env(&[("SLURM_RESTART_COUNT", "junk")])), 0);
}

#[test]
fn service_instance_id_is_run_id_dash_rank() {
    assert_eq!(service_instance_id("4242", 0), "4242-rank0");
    assert_eq!(service_instance_id("a1b2c3d4e5f6", 1023), "a1b2c3d4e5f6-rank1023");
}

// ---------------------------------------------------------------- detectors

#[test]
fn host_gpu_count_from_cuda_visible_devices() {
    let count = |cvd: Option<&str>| {
        let e = cvd.map_or_else(|| env(&[]), |v| env(&[("CUDA_VISIBLE_DEVICES", v)]));
        detect_host(&e, &probe()).get("host.gpu.count").cloned()
    };
    assert_eq!(count(Some("0,1,2,3")), Some(AttrValue::I64(4)));
    assert_eq!(count(Some("")), Some(AttrValue::I64(0)));
    assert_eq!(count(Some("GPU-8f1c,GPU-77aa")), Some(AttrValue::I64(2)));
    assert_eq!(count(None), None, "unset: omitted (NVML counting lives in megatron-telemetry)");
}

#[test]
fn host_name_and_pid() {
    let attrs = detect_host(&env(&[("HOSTNAME", "from-env")]), &probe());
    assert_eq!(attrs.get("host.name"), Some(&s("gpu-node-17")));
    assert_eq!(attrs.get("process.pid"), Some(&AttrValue::I64(4321)));
    // Without the kernel's name, HOSTNAME.
    let no_kernel = FixedProbe { hostname: None, ..probe() };
    assert_eq!(detect_host(&env(&[("HOSTNAME", "from-env")]), &no_kernel).get("host.name"), Some(&s("from-env")));
    assert_eq!(detect_host(&env(&[]), &no_kernel).get("host.name"), None);
}

#[test]
fn slurm_detector_reads_every_variable() {
    let e = env(&[
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_JOB_NAME", "gpt-8b"),
        ("SLURM_NODELIST", "node[01-04]"),
        ("SLURM_NNODES", "4"),
        ("SLURM_NTASKS", "32"),
        ("SLURM_PARTITION", "batch"),
        ("SLURM_CLUSTER_NAME", "eos"),
    ]);
    let attrs = detect_slurm(&e);
    assert_eq!(
        keys(&attrs),
        [
            "slurm.job.id",
            "slurm.job.name",
            "slurm.nodelist",
            "slurm.nnodes",
            "slurm.ntasks",
            "slurm.partition",
            "slurm.cluster.name"
        ]
    );
    assert_eq!(attrs.get("slurm.nnodes"), Some(&s("4")), "values stay strings");
    assert_eq!(attrs.get("slurm.nodelist"), Some(&s("node[01-04]")));
}

#[test]
fn slurm_detector_with_partial_variables() {
    let attrs = detect_slurm(&env(&[("SLURM_JOB_ID", "77"), ("SLURM_PARTITION", ""), ("SLURM_NNODES", "2")]));
    assert_eq!(keys(&attrs), ["slurm.job.id", "slurm.nnodes"]);
    // Without a job id, nothing: a stray SLURM_* variable is not a job.
    assert!(detect_slurm(&env(&[("SLURM_NNODES", "2"), ("SLURM_JOB_ID", "")])).is_empty());
}

#[test]
fn kubernetes_detected_from_service_host() {
    let e = env(&[
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("K8S_NAMESPACE", "training"),
        ("K8S_POD_NAME", "trainer-0"),
        ("K8S_POD_UID", "uid-1"),
        ("K8S_NODE_NAME", "node-a"),
        ("K8S_CONTAINER_NAME", "main"),
        ("K8S_JOB_NAME", "gpt"),
        ("HOSTNAME", "ignored"),
    ]);
    let attrs = detect_kubernetes(&e, &probe());
    assert_eq!(
        keys(&attrs),
        ["k8s.namespace.name", "k8s.pod.name", "k8s.pod.uid", "k8s.node.name", "k8s.container.name", "k8s.job.name"]
    );
    assert_eq!(attrs.get("k8s.pod.name"), Some(&s("trainer-0")));
}

#[test]
fn kubernetes_detected_from_service_account_directory_with_hostname_as_pod_name() {
    let in_pod = FixedProbe { kubernetes_service_account: true, ..probe() };
    let attrs = detect_kubernetes(&env(&[("HOSTNAME", "trainer-3")]), &in_pod);
    assert_eq!(attrs.get("k8s.pod.name"), Some(&s("trainer-3")));
    assert_eq!(attrs.len(), 1);
}

#[test]
fn no_kubernetes_outside_a_pod() {
    let e = env(&[("K8S_NAMESPACE", "training"), ("HOSTNAME", "laptop"), ("KUBERNETES_SERVICE_HOST", "")]);
    assert!(detect_kubernetes(&e, &probe()).is_empty());
}

#[test]
fn detect_resource_combines_all_detectors() {
    let e = env(&[("SLURM_JOB_ID", "1"), ("KUBERNETES_SERVICE_HOST", "h"), ("K8S_NAMESPACE", "ns")]);
    let attrs = detect_resource(&e, &probe());
    for key in ["host.name", "process.pid", "slurm.job.id", "k8s.namespace.name"] {
        assert!(attrs.contains_key(key), "{key} missing from {attrs:?}");
    }
}

// ---------------------------------------------------------------- the resource

fn inputs() -> ResourceInputs {
    let ctx = RankContext { rank: 3, world_size: 8, local_rank: 3, node_rank: Some(0) };
    ResourceInputs::new("megatron-lm", "4242", ctx)
}

#[test]
fn base_attributes() {
    let mut i = inputs();
    i.user_id = "alice".into();
    i.wandb_entity = "nvidia".into();
    i.wandb_project = "gpt".into();
    let attrs = build_resource(&i, &env(&[("DEPLOYMENT_ENV", "prod"), ("ENVIRONMENT", "dev")]), &probe());
    assert_eq!(attrs.get("service.name"), Some(&s("megatron-lm")));
    // The application gave no version: lens's own is the scope's, not the service's.
    assert_eq!(attrs.get("service.version"), None);
    assert_eq!(attrs.get("dl.rank"), Some(&AttrValue::I64(3)));
    assert_eq!(attrs.get("dl.world_size"), Some(&AttrValue::I64(8)));
    assert_eq!(attrs.get("nemo.run.id"), Some(&s("4242")));
    assert_eq!(attrs.get("service.instance.id"), Some(&s("4242-rank3")));
    assert_eq!(attrs.get("nemo.user.id"), Some(&s("alice")));
    assert_eq!(attrs.get("wandb.entity"), Some(&s("nvidia")));
    assert_eq!(attrs.get("wandb.project"), Some(&s("gpt")));
    assert_eq!(attrs.get("deployment.environment"), Some(&s("prod")));
    assert_eq!(attrs.get("host.name"), Some(&s("gpu-node-17")));
}

#[test]
fn optional_base_attributes_are_left_out_when_empty() {
    let mut i = inputs();
    i.run_id = String::new();
    let attrs = build_resource(&i, &env(&[("ENVIRONMENT", "staging"), ("DEPLOYMENT_ENV", "")]), &probe());
    for key in ["nemo.run.id", "service.instance.id", "nemo.user.id", "wandb.entity", "wandb.project"] {
        assert!(!attrs.contains_key(key), "{key} should be absent");
    }
    assert_eq!(attrs.get("deployment.environment"), Some(&s("staging")), "ENVIRONMENT is the fallback");
    assert!(!build_resource(&inputs(), &env(&[]), &probe()).contains_key("deployment.environment"));
}

#[test]
fn caller_attributes_win_over_detected_and_lens_attributes() {
    let mut i = inputs();
    i.wandb_project = "from-config".into();
    i.caller_attributes = vec![
        KeyValue::new("host.name", "caller-host"),
        KeyValue::new("slurm.job.id", "caller-job"),
        KeyValue::new("wandb.project", "caller-project"),
        KeyValue::new("dl.tensor_parallel.size", 2_i64),
        KeyValue::new("dl.tensor_parallel.size", 4_i64),
    ];
    let e = env(&[("SLURM_JOB_ID", "4242"), ("SLURM_NNODES", "2")]);
    let attrs = build_resource(&i, &e, &probe());
    assert_eq!(attrs.get("host.name"), Some(&s("caller-host")));
    assert_eq!(attrs.get("slurm.job.id"), Some(&s("caller-job")));
    assert_eq!(attrs.get("wandb.project"), Some(&s("caller-project")));
    assert_eq!(attrs.get("dl.tensor_parallel.size"), Some(&AttrValue::I64(4)), "a later duplicate wins");
    assert_eq!(attrs.get("slurm.nnodes"), Some(&s("2")), "detected keys the caller did not give stay");
}

#[test]
fn identity_keys_win_over_the_caller_and_the_environment() {
    let mut i = inputs();
    i.caller_attributes = vec![
        KeyValue::new("service.name", "caller"),
        KeyValue::new("nemo.run.id", "caller-run"),
        KeyValue::new("service.instance.id", "caller-instance"),
        KeyValue::new("dl.rank", 0_i64),
        KeyValue::new("dl.world_size", 1_i64),
    ];
    let e = env(&[("OTEL_RESOURCE_ATTRIBUTES", "service.name=env,dl.rank=9,nemo.run.id=env-run")]);
    let attrs = build_resource(&i, &e, &probe());
    assert_eq!(attrs.get("service.name"), Some(&s("megatron-lm")));
    assert_eq!(attrs.get("nemo.run.id"), Some(&s("4242")));
    assert_eq!(attrs.get("service.instance.id"), Some(&s("4242-rank3")));
    assert_eq!(attrs.get("dl.rank"), Some(&AttrValue::I64(3)));
    assert_eq!(attrs.get("dl.world_size"), Some(&AttrValue::I64(8)));
}

#[test]
fn otel_resource_attributes_rank_below_caller_and_lens_above_detection() {
    let mut i = inputs();
    i.caller_attributes = vec![KeyValue::new("team", "caller-team")];
    let e = env(&[
        ("DEPLOYMENT_ENV", "prod"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "team=env-team, deployment.environment=env, host.name=env-host, cost%20center=a%20b",
        ),
    ]);
    let attrs = build_resource(&i, &e, &probe());
    assert_eq!(attrs.get("team"), Some(&s("caller-team")));
    assert_eq!(attrs.get("deployment.environment"), Some(&s("prod")));
    assert_eq!(attrs.get("host.name"), Some(&s("env-host")));
    assert_eq!(attrs.get("cost%20center"), Some(&s("a b")), "values are percent-decoded, keys are not");
}

#[test]
fn resource_keys_are_unique_and_identity_comes_first() {
    let mut i = inputs();
    i.caller_attributes = vec![KeyValue::new("host.name", "x"), KeyValue::new("dl.rank", 1_i64)];
    let attrs = build_resource(&i, &env(&[("SLURM_JOB_ID", "1"), ("CUDA_VISIBLE_DEVICES", "0")]), &probe());
    let k = keys(&attrs);
    let mut unique = k.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), k.len(), "{k:?}");
    assert_eq!(&k[..5], ["service.name", "nemo.run.id", "service.instance.id", "dl.rank", "dl.world_size"]);
}

// ---------------------------------------------------------------- job and run uuids

/// An environment as `(variable, value)` pairs.
type Pairs = &'static [(&'static str, &'static str)];

/// Test vectors computed once with Python's `uuid.uuid5`, following the
/// original's recipe (Megatron's `build_telemetry_resource_attrs`):
///
/// ```python
/// cluster = env.get("SLURM_CLUSTER_NAME") or "nocluster"
/// is_array = "SLURM_ARRAY_TASK_ID" in env
/// job_key = (env.get("SLURM_ARRAY_JOB_ID") if is_array else env.get("SLURM_JOB_ID")) or "nojob"
/// job = uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.job/" + f"{cluster}/{job_key}")
/// parts = [cluster, job_key]
/// if not is_array: parts.append("sr" + (env.get("SLURM_RESTART_COUNT") or "0"))
/// if "TORCHELASTIC_RESTART_COUNT" in env: parts.append("te" + env["TORCHELASTIC_RESTART_COUNT"])
/// run = uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.run/" + "/".join(parts))
/// ```
const UUID_VECTORS: &[(Pairs, &str, &str, &str, &str)] = &[
    (
        &[],
        "nemo.lens.job/nocluster/nojob",
        "d2badfc7-0e4c-537b-b4ea-8785f79f8679",
        "nemo.lens.run/nocluster/nojob/sr0",
        "b19cd435-659e-5816-b7eb-724bc636e47b",
    ),
    (
        &[("SLURM_JOB_ID", "123456")],
        "nemo.lens.job/nocluster/123456",
        "8c9c73e2-f83e-5639-99fe-ae6227353287",
        "nemo.lens.run/nocluster/123456/sr0",
        "f227ab83-acbb-5d09-9899-6b1aedb7ff32",
    ),
    (
        &[("SLURM_JOB_ID", "123456"), ("SLURM_CLUSTER_NAME", "eos")],
        "nemo.lens.job/eos/123456",
        "81d99a4d-2548-543a-ac93-1564e9c91f17",
        "nemo.lens.run/eos/123456/sr0",
        "5e7825a5-6b67-5a13-a332-c9dcdabddb81",
    ),
    (
        &[("SLURM_JOB_ID", "123456"), ("SLURM_CLUSTER_NAME", "eos"), ("SLURM_RESTART_COUNT", "2")],
        "nemo.lens.job/eos/123456",
        "81d99a4d-2548-543a-ac93-1564e9c91f17",
        "nemo.lens.run/eos/123456/sr2",
        "bd050d40-f3b1-59e5-878c-79707bb75d55",
    ),
    (
        &[
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_CLUSTER_NAME", "eos"),
            ("SLURM_RESTART_COUNT", "2"),
            ("TORCHELASTIC_RESTART_COUNT", "1"),
        ],
        "nemo.lens.job/eos/123456",
        "81d99a4d-2548-543a-ac93-1564e9c91f17",
        "nemo.lens.run/eos/123456/sr2/te1",
        "679cd4f0-08f3-5632-886b-8daab649adfb",
    ),
    (
        // An array task: keyed on the array job, no SLURM restart part.
        &[
            ("SLURM_JOB_ID", "123457"),
            ("SLURM_ARRAY_JOB_ID", "123450"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_CLUSTER_NAME", "eos"),
            ("SLURM_RESTART_COUNT", "3"),
        ],
        "nemo.lens.job/eos/123450",
        "32725eb9-7ad4-5047-baca-5ed503e4cc63",
        "nemo.lens.run/eos/123450",
        "34b20852-5df0-58ca-b5a8-5cb48aacc774",
    ),
    (
        &[
            ("SLURM_JOB_ID", "123457"),
            ("SLURM_ARRAY_JOB_ID", "123450"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_CLUSTER_NAME", "eos"),
            ("TORCHELASTIC_RESTART_COUNT", "0"),
        ],
        "nemo.lens.job/eos/123450",
        "32725eb9-7ad4-5047-baca-5ed503e4cc63",
        "nemo.lens.run/eos/123450/te0",
        "38d291d2-a89e-5296-ab71-4c7d316e9622",
    ),
    (
        &[("TORCHELASTIC_RESTART_COUNT", "0")],
        "nemo.lens.job/nocluster/nojob",
        "d2badfc7-0e4c-537b-b4ea-8785f79f8679",
        "nemo.lens.run/nocluster/nojob/sr0/te0",
        "a2bb83e9-2084-5e01-8437-3e4c6e44effa",
    ),
    (
        // Empty values fall back to the defaults.
        &[("SLURM_JOB_ID", ""), ("SLURM_CLUSTER_NAME", "")],
        "nemo.lens.job/nocluster/nojob",
        "d2badfc7-0e4c-537b-b4ea-8785f79f8679",
        "nemo.lens.run/nocluster/nojob/sr0",
        "b19cd435-659e-5816-b7eb-724bc636e47b",
    ),
    (
        // SLURM_ARRAY_TASK_ID present but empty still makes an array job.
        &[("SLURM_JOB_ID", "99"), ("SLURM_ARRAY_TASK_ID", "")],
        "nemo.lens.job/nocluster/nojob",
        "d2badfc7-0e4c-537b-b4ea-8785f79f8679",
        "nemo.lens.run/nocluster/nojob",
        "885ac77f-b06f-5766-8933-1fe7066915dc",
    ),
];

#[test]
fn job_and_run_uuids_match_python() {
    for &(pairs, job_name, job_uuid, run_name, run_uuid) in UUID_VECTORS {
        let e = env(pairs);
        assert_eq!(lens_job_name(&e), job_name, "{pairs:?}");
        assert_eq!(lens_job_uuid(&e), job_uuid, "{pairs:?}");
        assert_eq!(lens_run_name(&e), run_name, "{pairs:?}");
        assert_eq!(lens_run_uuid(&e), run_uuid, "{pairs:?}");
    }
}

#[test]
fn uuid_attributes_carry_the_torchelastic_restart_count() {
    let e = env(&[("SLURM_JOB_ID", "123456"), ("SLURM_CLUSTER_NAME", "eos"), ("SLURM_RESTART_COUNT", "2")]);
    let attrs = lens_uuid_attributes(&e);
    assert_eq!(keys(&attrs), ["nemo.lens.job_uuid", "nemo.lens.run_uuid"]);
    assert_eq!(attrs.get("nemo.lens.run_uuid"), Some(&s("bd050d40-f3b1-59e5-878c-79707bb75d55")));

    let mut pairs = e.clone();
    pairs.insert("TORCHELASTIC_RESTART_COUNT".into(), "1".into());
    let attrs = lens_uuid_attributes(&pairs);
    assert_eq!(attrs.get("nemo.lens.run_uuid"), Some(&s("679cd4f0-08f3-5632-886b-8daab649adfb")));
    assert_eq!(attrs.get("slurm.torchelastic.restart_count"), Some(&s("1")));
}

#[test]
fn the_programs_prefix_and_resolved_span_groups_are_on_the_resource() {
    let ctx = lens_core::identity::RankContext { rank: 0, world_size: 1, local_rank: 0, node_rank: None };
    let mut inputs = ResourceInputs::new("myjob", "run-1", ctx);
    inputs.config_prefix = Some("MYJOB_OTEL".to_string());
    inputs.span_groups = vec!["default".to_string(), "step".to_string()];
    let resource = build_resource(&inputs, &env(&[]), &probe());
    assert_eq!(resource.get(lens_core::semconv::LENS_CONFIG_PREFIX), Some(&s("MYJOB_OTEL")));
    assert_eq!(resource.get("lens.span_groups"), Some(&s("default,step")));
    // A configuration built in code records neither.
    let bare = build_resource(&ResourceInputs::new("myjob", "run-1", ctx), &env(&[]), &probe());
    assert!(!bare.contains_key("lens.config.prefix") && !bare.contains_key("lens.span_groups"), "{bare:?}");
}
