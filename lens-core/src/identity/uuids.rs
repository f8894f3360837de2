//! Deterministic job and run UUIDs (`nemo.lens.job_uuid`,
//! `nemo.lens.run_uuid`), computed from the environment alone, so that
//! every rank and the asynchronous checkpoint worker agree without any
//! communication, and so that a mixed Python/Rust job agrees too.
//!
//! The recipe is Megatron's `build_telemetry_resource_attrs`, byte for byte:
//!
//! - `cluster` = `SLURM_CLUSTER_NAME`, or `nocluster` when unset or empty;
//! - an *array* job is one where `SLURM_ARRAY_TASK_ID` is present (even
//!   empty); `job_key` = `SLURM_ARRAY_JOB_ID` for an array job, else
//!   `SLURM_JOB_ID`, or `nojob` when that is unset or empty;
//! - `nemo.lens.job_uuid` = uuid5(NAMESPACE_URL, `nemo.lens.job/{cluster}/{job_key}`):
//!   stable across requeues and restarts;
//! - `nemo.lens.run_uuid` = uuid5(NAMESPACE_URL, `nemo.lens.run/` + the parts
//!   joined by `/`), the parts being `cluster`, `job_key`, then (not for an
//!   array job) `sr` + (`SLURM_RESTART_COUNT`, or `0` when unset or empty),
//!   then (when `TORCHELASTIC_RESTART_COUNT` is present) `te` + its value:
//!   one incarnation of the job.
//!
//! Values are used as they are, untrimmed, as the original does. As in the
//! original, every task of one array job shares both UUIDs, and every run
//! outside SLURM shares the job UUID of `nocluster/nojob`.
//!
//! ```
//! use lens_core::identity::{lens_job_uuid, lens_run_uuid};
//!
//! let env = [("SLURM_JOB_ID", "123456"), ("SLURM_CLUSTER_NAME", "eos"), ("SLURM_RESTART_COUNT", "2")];
//! assert_eq!(lens_job_uuid(&env), "81d99a4d-2548-543a-ac93-1564e9c91f17");
//! assert_eq!(lens_run_uuid(&env), "bd050d40-f3b1-59e5-878c-79707bb75d55");
//! ```

use uuid::Uuid;

use super::resource::ResourceAttributes;
use crate::env::EnvSource;
use crate::semconv;

/// The value of `key`, or `default` when unset or empty (Python's
/// `os.environ.get(key) or default`).
fn or_default(env: &(impl EnvSource + ?Sized), key: &str, default: &str) -> String {
    env.var(key).filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

/// `(cluster, job_key, is_array)`.
fn job_parts(env: &(impl EnvSource + ?Sized)) -> (String, String, bool) {
    let cluster = or_default(env, "SLURM_CLUSTER_NAME", "nocluster");
    let is_array = env.var("SLURM_ARRAY_TASK_ID").is_some();
    let job_key = or_default(env, if is_array { "SLURM_ARRAY_JOB_ID" } else { "SLURM_JOB_ID" }, "nojob");
    (cluster, job_key, is_array)
}

fn uuid5_url(name: &str) -> String {
    Uuid::new_v5(&Uuid::NAMESPACE_URL, name.as_bytes()).hyphenated().to_string()
}

/// The name hashed into `nemo.lens.job_uuid`: `nemo.lens.job/{cluster}/{job_key}`.
pub fn lens_job_name(env: &(impl EnvSource + ?Sized)) -> String {
    let (cluster, job_key, _) = job_parts(env);
    format!("nemo.lens.job/{cluster}/{job_key}")
}

/// The name hashed into `nemo.lens.run_uuid`, such as
/// `nemo.lens.run/eos/123456/sr2/te1`.
pub fn lens_run_name(env: &(impl EnvSource + ?Sized)) -> String {
    let (cluster, job_key, is_array) = job_parts(env);
    let mut name = format!("nemo.lens.run/{cluster}/{job_key}");
    if !is_array {
        name.push_str("/sr");
        name.push_str(&or_default(env, "SLURM_RESTART_COUNT", "0"));
    }
    if let Some(count) = env.var("TORCHELASTIC_RESTART_COUNT") {
        name.push_str("/te");
        name.push_str(&count);
    }
    name
}

/// `nemo.lens.job_uuid`, hyphenated lower case (Python's `str(uuid)`).
pub fn lens_job_uuid(env: &(impl EnvSource + ?Sized)) -> String {
    uuid5_url(&lens_job_name(env))
}

/// `nemo.lens.run_uuid`, hyphenated lower case (Python's `str(uuid)`).
pub fn lens_run_uuid(env: &(impl EnvSource + ?Sized)) -> String {
    uuid5_url(&lens_run_name(env))
}

/// The attributes the Megatron layer adds: `nemo.lens.job_uuid`,
/// `nemo.lens.run_uuid`, and `slurm.torchelastic.restart_count` when
/// `TORCHELASTIC_RESTART_COUNT` is non-empty.
///
/// ```
/// use lens_core::attr::AttrValue;
/// use lens_core::identity::lens_uuid_attributes;
///
/// let attrs = lens_uuid_attributes(&[("TORCHELASTIC_RESTART_COUNT", "0")]);
/// assert_eq!(attrs.get("nemo.lens.job_uuid"), Some(&AttrValue::from("d2badfc7-0e4c-537b-b4ea-8785f79f8679")));
/// assert_eq!(attrs.get("slurm.torchelastic.restart_count"), Some(&AttrValue::from("0")));
/// ```
pub fn lens_uuid_attributes(env: &(impl EnvSource + ?Sized)) -> ResourceAttributes {
    let mut attrs = ResourceAttributes::new();
    attrs.insert(semconv::NEMO_LENS_JOB_UUID, lens_job_uuid(env));
    attrs.insert(semconv::NEMO_LENS_RUN_UUID, lens_run_uuid(env));
    if let Some(count) = env.var("TORCHELASTIC_RESTART_COUNT").filter(|v| !v.is_empty()) {
        attrs.insert(semconv::SLURM_TORCHELASTIC_RESTART_COUNT, count);
    }
    attrs
}
