//! The resource of one rank: who is emitting (service, run, rank), where it
//! runs (host, SLURM, Kubernetes) and what the caller adds.
//!
//! [`build_resource`] assembles a [`ResourceAttributes`] from a
//! [`ResourceInputs`] (values the configuration resolved, plus the caller's
//! attributes), the environment and a [`SystemProbe`] (the host name, the
//! pid and the Kubernetes service-account directory, injectable so tests
//! need no real host). The runtime turns the result into an OpenTelemetry
//! `Resource`, adding only the SDK's `telemetry.sdk.*` keys.
//!
//! # Which value wins on a key collision
//!
//! From the highest precedence to the lowest:
//!
//! 1. **Identity**, from the configuration: `service.name`, `nemo.run.id`,
//!    `service.instance.id`, `dl.rank`, `dl.world_size`. They name the
//!    stream of data; a caller or the environment that could change them
//!    would split or merge runs by accident.
//! 2. **Caller attributes** ([`ResourceInputs::caller_attributes`]; among
//!    them, a later duplicate wins). The caller knows better than a guess
//!    from the environment. (The original let the detectors overwrite
//!    caller values; we do not.)
//! 3. **Lens's own attributes**: `service.version` (the application's,
//!    [`ResourceInputs::service_version`]; unset unless it gives one),
//!    `nemo.user.id`, `wandb.entity`, `wandb.project`,
//!    `deployment.environment` (`DEPLOYMENT_ENV`, else `ENVIRONMENT`),
//!    `lens.config.prefix` and `lens.span_groups` (the program's prefix
//!    and resolved span groups, so that `lens analyze` names its variables).
//! 4. **`OTEL_RESOURCE_ATTRIBUTES`** (`key=value` pairs, comma-separated,
//!    values percent-decoded), written by an operator.
//! 5. **Detected** attributes: [`detect_host`], [`detect_slurm`],
//!    [`detect_kubernetes`] (their keys do not overlap).
//!
//! Empty strings are never emitted.
//!
//! ```
//! use lens_core::attr::{AttrValue, KeyValue};
//! use lens_core::identity::{build_resource, FixedProbe, RankContext, ResourceInputs};
//!
//! let ctx = RankContext { rank: 1, world_size: 2, local_rank: 1, node_rank: Some(0) };
//! let mut inputs = ResourceInputs::new("megatron-lm", "4242", ctx);
//! inputs.caller_attributes = vec![KeyValue::new("host.name", "login-node"), KeyValue::new("dl.rank", 7_i64)];
//! let env = [("SLURM_JOB_ID", "4242"), ("CUDA_VISIBLE_DEVICES", "0,1")];
//! let probe = FixedProbe { hostname: Some("gpu-17".into()), process_id: 99, kubernetes_service_account: false };
//!
//! let resource = build_resource(&inputs, &env, &probe);
//! assert_eq!(resource.get("service.instance.id"), Some(&AttrValue::from("4242-rank1")));
//! assert_eq!(resource.get("dl.rank"), Some(&AttrValue::I64(1))); // identity wins over the caller
//! assert_eq!(resource.get("host.name"), Some(&AttrValue::from("login-node"))); // the caller wins over detection
//! assert_eq!(resource.get("host.gpu.count"), Some(&AttrValue::I64(2)));
//! assert_eq!(resource.get("slurm.job.id"), Some(&AttrValue::from("4242")));
//! ```

use std::borrow::Cow;
use std::path::Path;

use super::rank::RankContext;
use super::run_id::service_instance_id;
use crate::attr::{AttrValue, KeyValue};
use crate::env::EnvSource;
use crate::semconv;

/// Resource attributes in insertion order, one value per key.
///
/// [`insert`](ResourceAttributes::insert) of a key that is already present
/// replaces its value in place; [`insert_if_absent`](ResourceAttributes::insert_if_absent)
/// keeps the present one.
///
/// ```
/// use lens_core::attr::AttrValue;
/// use lens_core::identity::ResourceAttributes;
///
/// let mut attrs = ResourceAttributes::new();
/// attrs.insert("a", 1_i64);
/// attrs.insert("b", "x");
/// attrs.insert("a", 2_i64);
/// assert!(!attrs.insert_if_absent("b", "y"));
/// let keys: Vec<&str> = attrs.iter().map(|kv| kv.key.as_ref()).collect();
/// assert_eq!(keys, ["a", "b"]);
/// assert_eq!(attrs.get("a"), Some(&AttrValue::I64(2)));
/// assert_eq!(attrs.get("b"), Some(&AttrValue::from("x")));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceAttributes {
    entries: Vec<KeyValue>,
}

impl ResourceAttributes {
    /// An empty collection.
    pub const fn new() -> ResourceAttributes {
        ResourceAttributes { entries: Vec::new() }
    }

    /// Sets `key` to `value`, replacing (in place) any value it had.
    pub fn insert(&mut self, key: impl Into<Cow<'static, str>>, value: impl Into<AttrValue>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|kv| kv.key == key) {
            Some(kv) => kv.value = value,
            None => self.entries.push(KeyValue { key, value }),
        }
    }

    /// Sets `key` to `value` only if `key` is absent; returns whether it did.
    pub fn insert_if_absent(&mut self, key: impl Into<Cow<'static, str>>, value: impl Into<AttrValue>) -> bool {
        let key = key.into();
        if self.contains_key(&key) {
            return false;
        }
        self.entries.push(KeyValue { key, value: value.into() });
        true
    }

    /// Adds every attribute of `other` whose key is absent here (the present
    /// values win).
    pub fn merge_missing(&mut self, other: ResourceAttributes) {
        for kv in other.entries {
            self.insert_if_absent(kv.key, kv.value);
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&AttrValue> {
        self.entries.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.iter().any(|kv| kv.key == key)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<AttrValue> {
        let index = self.entries.iter().position(|kv| kv.key == key)?;
        Some(self.entries.remove(index).value)
    }

    /// The number of attributes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The attributes in insertion order.
    pub fn iter(&self) -> std::slice::Iter<'_, KeyValue> {
        self.entries.iter()
    }

    /// The attributes in insertion order.
    pub fn into_vec(self) -> Vec<KeyValue> {
        self.entries
    }

    /// Inserts a string value unless it is empty.
    fn insert_str(&mut self, key: &'static str, value: Option<String>) {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            self.insert(key, value);
        }
    }
}

impl Extend<KeyValue> for ResourceAttributes {
    /// Inserts each attribute in turn: a later duplicate replaces an earlier one.
    fn extend<I: IntoIterator<Item = KeyValue>>(&mut self, iter: I) {
        for kv in iter {
            self.insert(kv.key, kv.value);
        }
    }
}

impl FromIterator<KeyValue> for ResourceAttributes {
    fn from_iter<I: IntoIterator<Item = KeyValue>>(iter: I) -> ResourceAttributes {
        let mut attrs = ResourceAttributes::new();
        attrs.extend(iter);
        attrs
    }
}

impl IntoIterator for ResourceAttributes {
    type Item = KeyValue;
    type IntoIter = std::vec::IntoIter<KeyValue>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a ResourceAttributes {
    type Item = &'a KeyValue;
    type IntoIter = std::slice::Iter<'a, KeyValue>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

/// What the detectors need from the system besides environment variables.
pub trait SystemProbe {
    /// The kernel's host name, if it can be read.
    fn hostname(&self) -> Option<String>;
    /// This process's id.
    fn process_id(&self) -> u32;
    /// Whether the Kubernetes service-account directory
    /// (`/var/run/secrets/kubernetes.io`) exists.
    fn kubernetes_service_account(&self) -> bool;
}

/// The real system: `/proc/sys/kernel/hostname`, [`std::process::id`] and
/// the real filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsProbe;

impl SystemProbe for OsProbe {
    fn hostname(&self) -> Option<String> {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    fn process_id(&self) -> u32 {
        std::process::id()
    }

    fn kubernetes_service_account(&self) -> bool {
        Path::new("/var/run/secrets/kubernetes.io").exists()
    }
}

/// Fixed answers, for tests and for callers that already know them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixedProbe {
    /// What [`SystemProbe::hostname`] returns.
    pub hostname: Option<String>,
    /// What [`SystemProbe::process_id`] returns.
    pub process_id: u32,
    /// What [`SystemProbe::kubernetes_service_account`] returns.
    pub kubernetes_service_account: bool,
}

impl SystemProbe for FixedProbe {
    fn hostname(&self) -> Option<String> {
        self.hostname.clone()
    }

    fn process_id(&self) -> u32 {
        self.process_id
    }

    fn kubernetes_service_account(&self) -> bool {
        self.kubernetes_service_account
    }
}

/// The number of GPUs `CUDA_VISIBLE_DEVICES` makes visible: `None` when it
/// is unset, 0 when it is blank, else the number of non-empty
/// comma-separated entries. (Counting GPUs without the variable needs NVML,
/// which lives in megatron-telemetry.)
///
/// ```
/// use lens_core::identity::visible_gpu_count;
///
/// assert_eq!(visible_gpu_count(&[("CUDA_VISIBLE_DEVICES", "0,1,2,3")]), Some(4));
/// assert_eq!(visible_gpu_count(&[("CUDA_VISIBLE_DEVICES", "")]), Some(0));
/// assert_eq!(visible_gpu_count(&[("RANK", "0")]), None);
/// ```
pub fn visible_gpu_count(env: &(impl EnvSource + ?Sized)) -> Option<u32> {
    let value = env.var("CUDA_VISIBLE_DEVICES")?;
    let count = value.split(',').filter(|entry| !entry.trim().is_empty()).count();
    Some(u32::try_from(count).unwrap_or(u32::MAX))
}

/// `host.name` (the kernel's host name, else `HOSTNAME`), `process.pid` and
/// `host.gpu.count` (from [`visible_gpu_count`], omitted when unknown).
pub fn detect_host(env: &(impl EnvSource + ?Sized), probe: &(impl SystemProbe + ?Sized)) -> ResourceAttributes {
    let mut attrs = ResourceAttributes::new();
    attrs.insert_str(semconv::HOST_NAME, probe.hostname().or_else(|| env.non_empty("HOSTNAME")));
    attrs.insert(semconv::PROCESS_PID, i64::from(probe.process_id()));
    if let Some(count) = visible_gpu_count(env) {
        attrs.insert(semconv::HOST_GPU_COUNT, i64::from(count));
    }
    attrs
}

/// The SLURM variables and the keys they become (the original's
/// `detect_slurm`; only non-empty values).
const SLURM_VARIABLES: [(&str, &str); 7] = [
    ("SLURM_JOB_ID", semconv::SLURM_JOB_ID),
    ("SLURM_JOB_NAME", semconv::SLURM_JOB_NAME),
    ("SLURM_NODELIST", semconv::SLURM_NODELIST),
    ("SLURM_NNODES", semconv::SLURM_NNODES),
    ("SLURM_NTASKS", semconv::SLURM_NTASKS),
    ("SLURM_PARTITION", semconv::SLURM_PARTITION),
    ("SLURM_CLUSTER_NAME", semconv::SLURM_CLUSTER_NAME),
];

/// Inside a SLURM job (`SLURM_JOB_ID` set): `slurm.job.id`,
/// `slurm.job.name`, `slurm.nodelist`, `slurm.nnodes`, `slurm.ntasks`,
/// `slurm.partition`, `slurm.cluster.name`, as strings, each only when its
/// variable is non-empty. Outside one: nothing.
pub fn detect_slurm(env: &(impl EnvSource + ?Sized)) -> ResourceAttributes {
    let mut attrs = ResourceAttributes::new();
    if env.non_empty("SLURM_JOB_ID").is_none() {
        return attrs;
    }
    for (variable, key) in SLURM_VARIABLES {
        attrs.insert_str(key, env.non_empty(variable));
    }
    attrs
}

/// The Kubernetes variables and the keys they become (the original's
/// `detect_kubernetes`).
const KUBERNETES_VARIABLES: [(&str, &str); 5] = [
    ("K8S_NAMESPACE", semconv::K8S_NAMESPACE_NAME),
    ("K8S_POD_UID", semconv::K8S_POD_UID),
    ("K8S_NODE_NAME", semconv::K8S_NODE_NAME),
    ("K8S_CONTAINER_NAME", semconv::K8S_CONTAINER_NAME),
    ("K8S_JOB_NAME", semconv::K8S_JOB_NAME),
];

/// Inside a Kubernetes pod (`KUBERNETES_SERVICE_HOST` set, or the
/// service-account directory present): `k8s.namespace.name` ←
/// `K8S_NAMESPACE`, `k8s.pod.name` ← `K8S_POD_NAME` (else `HOSTNAME`),
/// `k8s.pod.uid` ← `K8S_POD_UID`, `k8s.node.name` ← `K8S_NODE_NAME`,
/// `k8s.container.name` ← `K8S_CONTAINER_NAME`, `k8s.job.name` ←
/// `K8S_JOB_NAME`, each only when non-empty (the variables are usually set
/// through the downward API). Outside one: nothing.
pub fn detect_kubernetes(env: &(impl EnvSource + ?Sized), probe: &(impl SystemProbe + ?Sized)) -> ResourceAttributes {
    let mut attrs = ResourceAttributes::new();
    if env.non_empty("KUBERNETES_SERVICE_HOST").is_none() && !probe.kubernetes_service_account() {
        return attrs;
    }
    let (namespace, rest) = KUBERNETES_VARIABLES.split_at(1);
    for &(variable, key) in namespace {
        attrs.insert_str(key, env.non_empty(variable));
    }
    attrs.insert_str(semconv::K8S_POD_NAME, env.non_empty("K8S_POD_NAME").or_else(|| env.non_empty("HOSTNAME")));
    for &(variable, key) in rest {
        attrs.insert_str(key, env.non_empty(variable));
    }
    attrs
}

/// Every detector: [`detect_host`], [`detect_slurm`] and
/// [`detect_kubernetes`], in that order.
pub fn detect_resource(env: &(impl EnvSource + ?Sized), probe: &(impl SystemProbe + ?Sized)) -> ResourceAttributes {
    let mut attrs = detect_host(env, probe);
    attrs.extend(detect_slurm(env));
    attrs.extend(detect_kubernetes(env, probe));
    attrs
}

/// The attributes of `OTEL_RESOURCE_ATTRIBUTES`: comma-separated
/// `key=value` pairs, keys and values trimmed, values percent-decoded, all
/// strings. An entry without `=` or with an empty key is skipped; a later
/// duplicate wins.
///
/// ```
/// use lens_core::attr::AttrValue;
/// use lens_core::identity::otel_resource_attributes;
///
/// let attrs = otel_resource_attributes(&[("OTEL_RESOURCE_ATTRIBUTES", "team=llm, note=a%2Cb,broken")]);
/// assert_eq!(attrs.get("team"), Some(&AttrValue::from("llm")));
/// assert_eq!(attrs.get("note"), Some(&AttrValue::from("a,b")));
/// assert_eq!(attrs.len(), 2);
/// ```
pub fn otel_resource_attributes(env: &(impl EnvSource + ?Sized)) -> ResourceAttributes {
    let Some(value) = env.non_empty("OTEL_RESOURCE_ATTRIBUTES") else {
        return ResourceAttributes::new();
    };
    value
        .split(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(key, value)| (key.trim(), value.trim()))
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| KeyValue::new(key.to_string(), percent_decode(value)))
        .collect()
}

/// Decodes `%XX` escapes; a malformed escape stays as written, and bytes
/// that do not form UTF-8 are replaced.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the configuration and the caller contribute to a rank's resource.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceInputs {
    /// `service.name` (the configuration's `service_name`).
    pub service_name: String,
    /// The resolved run id (see [`resolve_run_id`](super::resolve_run_id)):
    /// `nemo.run.id`, and `{run_id}-rank{rank}` as `service.instance.id`.
    /// Empty leaves both out.
    pub run_id: String,
    /// `dl.rank` and `dl.world_size`.
    pub rank: RankContext,
    /// `nemo.user.id` (the configuration's `user`, from `<PREFIX>_USER_ID`).
    pub user_id: String,
    /// `wandb.entity` (the configuration's, from the bare `WANDB_ENTITY`).
    pub wandb_entity: String,
    /// `wandb.project` (the configuration's, from the bare `WANDB_PROJECT`).
    pub wandb_project: String,
    /// `service.version`: the application's version, when it gives one
    /// (lens's own version is the instrumentation scope's, not the service's).
    pub service_version: Option<String>,
    /// The caller's own attributes; they win over everything except the
    /// identity keys (see the [module documentation](self)).
    pub caller_attributes: Vec<KeyValue>,
    /// `lens.config.prefix`: the prefix the configuration was read with
    /// (`MEGATRON_OTEL`, `MYJOB_OTEL`); `None` (a configuration built in
    /// code) leaves it out.
    pub config_prefix: Option<String>,
    /// `lens.span_groups`: the resolved span groups' names, joined with
    /// commas (an empty list leaves it out).
    pub span_groups: Vec<String>,
}

impl ResourceInputs {
    /// Inputs with a service name, a run id and a rank context, and nothing else.
    pub fn new(service_name: impl Into<String>, run_id: impl Into<String>, rank: RankContext) -> ResourceInputs {
        ResourceInputs {
            service_name: service_name.into(),
            run_id: run_id.into(),
            rank,
            user_id: String::new(),
            wandb_entity: String::new(),
            wandb_project: String::new(),
            service_version: None,
            caller_attributes: Vec::new(),
            config_prefix: None,
            span_groups: Vec::new(),
        }
    }
}

/// The full resource of one rank, by the precedence of the
/// [module documentation](self). Reads `DEPLOYMENT_ENV`, `ENVIRONMENT`,
/// `OTEL_RESOURCE_ATTRIBUTES` and the detectors' variables from `env`.
/// Never fails.
pub fn build_resource(
    inputs: &ResourceInputs,
    env: &(impl EnvSource + ?Sized),
    probe: &(impl SystemProbe + ?Sized),
) -> ResourceAttributes {
    let mut attrs = ResourceAttributes::new();

    // 1. Identity.
    attrs.insert_str(semconv::SERVICE_NAME, Some(inputs.service_name.clone()));
    if !inputs.run_id.is_empty() {
        attrs.insert(semconv::NEMO_RUN_ID, inputs.run_id.clone());
        attrs.insert(semconv::SERVICE_INSTANCE_ID, service_instance_id(&inputs.run_id, inputs.rank.rank));
    }
    attrs.insert(semconv::DL_RANK, i64::from(inputs.rank.rank));
    attrs.insert(semconv::DL_WORLD_SIZE, i64::from(inputs.rank.world_size));

    // 2. The caller's attributes.
    attrs.merge_missing(inputs.caller_attributes.iter().cloned().collect());

    // 3. Lens's own.
    let mut own = ResourceAttributes::new();
    own.insert_str(semconv::SERVICE_VERSION, inputs.service_version.clone());
    own.insert_str(semconv::NEMO_USER_ID, Some(inputs.user_id.clone()));
    own.insert_str(semconv::WANDB_ENTITY, Some(inputs.wandb_entity.clone()));
    own.insert_str(semconv::WANDB_PROJECT, Some(inputs.wandb_project.clone()));
    own.insert_str(
        semconv::DEPLOYMENT_ENVIRONMENT,
        env.non_empty("DEPLOYMENT_ENV").or_else(|| env.non_empty("ENVIRONMENT")),
    );
    own.insert_str(semconv::LENS_CONFIG_PREFIX, inputs.config_prefix.clone());
    own.insert_str(semconv::LENS_SPAN_GROUPS, Some(inputs.span_groups.join(",")));
    attrs.merge_missing(own);

    // 4. The operator's OTEL_RESOURCE_ATTRIBUTES.
    attrs.merge_missing(otel_resource_attributes(env));

    // 5. Detected.
    attrs.merge_missing(detect_resource(env, probe));
    attrs
}
