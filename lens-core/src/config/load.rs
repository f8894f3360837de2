//! Loading: [`ConfigLoader`] and [`LensConfig::from_env`] read every
//! variable with the prefix and fallback prefix, and
//! [`LensConfig::apply_cli`] applies the command-line overrides.

use std::path::PathBuf;
use std::time::Duration;

use super::error::{ConfigError, ConfigProblem};
use super::headers::Headers;
use super::keys::{header_keys, otlp_fields, propagator_names};
use super::model::{
    CONTROL_POLL_EXPECTED, CliOverrides, DEFAULT_SERVICE_NAME, HangTimeout, LensConfig, parse_control_poll,
};
use super::pyrepr::py_float;
use super::read::{Alias, Found, Reader, only_commas, unknown_name};
use super::standard::{
    Compression, ExporterKind, OtelSettings, OtlpEndpoint, OtlpProtocol, Propagator, Signal, TracesSampler,
};
use crate::env::EnvSource;
use crate::groups::{LENS_CATALOG, SpanGroupCatalog};

/// Reads a [`LensConfig`] from an environment, with a framework's prefixes,
/// catalog and default service name.
#[derive(Clone, Copy, Debug)]
pub struct ConfigLoader<'a> {
    prefix: &'a str,
    fallback_prefix: Option<&'a str>,
    catalog: &'static SpanGroupCatalog,
    default_service_name: &'a str,
}

impl<'a> ConfigLoader<'a> {
    /// A loader for variables `<prefix>_*`, with no fallback prefix, the Lens
    /// catalog and the service name `nemo`.
    pub fn new(prefix: &'a str) -> ConfigLoader<'a> {
        ConfigLoader {
            prefix,
            fallback_prefix: None,
            catalog: &LENS_CATALOG,
            default_service_name: DEFAULT_SERVICE_NAME,
        }
    }

    /// Reads `<fallback>_*` where `<prefix>_*` is unset (Megatron: `NEMO_LENS`).
    #[must_use]
    pub fn fallback_prefix(mut self, fallback: &'a str) -> ConfigLoader<'a> {
        self.fallback_prefix = Some(fallback);
        self
    }

    /// The catalog that span-group specs are resolved against.
    #[must_use]
    pub fn catalog(mut self, catalog: &'static SpanGroupCatalog) -> ConfigLoader<'a> {
        self.catalog = catalog;
        self
    }

    /// The service name used when `OTEL_SERVICE_NAME` is unset (Megatron:
    /// `megatron-lm`).
    #[must_use]
    pub fn default_service_name(mut self, name: &'a str) -> ConfigLoader<'a> {
        self.default_service_name = name;
        self
    }

    /// `env` as this loader reads it under the command line `cli`: without
    /// the variables a given flag replaces (`--otel-span-groups` replaces
    /// `<prefix>_SPAN_GROUPS` and the fallback prefix's), so that a bad
    /// value the flag overrides stops nothing: the original replaced the
    /// spec before resolving it. Load from this, then
    /// [`apply_cli`](LensConfig::apply_cli).
    ///
    /// ```
    /// use lens_core::config::{CliOverrides, ConfigLoader};
    ///
    /// let loader = ConfigLoader::new("MYJOB_OTEL");
    /// let env = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_SPAN_GROUPS", "bogus")];
    /// assert!(loader.load(&env).is_err());
    /// let cli = CliOverrides { otel_span_groups: Some("per_step".into()), ..CliOverrides::default() };
    /// let mut config = loader.load(&loader.under_flags(&env, &cli)).unwrap();
    /// config.apply_cli(&cli);
    /// assert_eq!(config.span_groups, "per_step");
    /// ```
    pub fn under_flags<'e, E: EnvSource + ?Sized>(&self, env: &'e E, cli: &CliOverrides) -> impl EnvSource + 'e {
        let mut replaced = Vec::new();
        if cli.otel_span_groups.as_deref().is_some_and(|spec| !spec.trim().is_empty()) {
            replaced.extend([self.prefix].into_iter().chain(self.fallback_prefix).map(|p| format!("{p}_SPAN_GROUPS")));
        }
        crate::env::FnEnv(move |key: &str| if replaced.iter().any(|r| r == key) { None } else { env.var(key) })
    }

    /// Reads and validates the configuration, reporting every problem.
    pub fn load(&self, env: &(impl EnvSource + ?Sized)) -> Result<LensConfig, ConfigError> {
        let mut r = Reader::new(env, self.prefix, self.fallback_prefix);
        let mut c = LensConfig { catalog: self.catalog, ..LensConfig::default() };
        c.service_name = self.default_service_name.to_string();
        read_lens(&mut r, &mut c);
        read_otel(&mut r, &mut c.otel);
        let Reader { mut problems, origins, not_utf8, .. } = r;
        problems.splice(0..0, not_utf8.into_inner());
        c.origins = origins;
        if c.otel.sdk_disabled && c.enabled {
            let variable = c.origins.variable("enabled").unwrap_or("the enable variable").to_string();
            // Once per process, however often the configuration is read.
            crate::diag::warn_once(format_args!(
                "OTEL_SDK_DISABLED=true turns telemetry off although {variable} enables it"
            ));
            c.enabled = false;
        }
        if let Err(err) = c.validate() {
            problems.extend(err.into_problems());
        }
        if problems.is_empty() { Ok(c) } else { Err(ConfigError::new(problems)) }
    }
}

fn read_lens<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, c: &mut LensConfig) {
    if let Some(v) = r.string("service_name", r.bare("OTEL_SERVICE_NAME")) {
        c.service_name = v;
    }
    if let Some(v) = r.bool("enabled", r.prefixed("ENABLED")) {
        c.enabled = v;
    }
    let found = r.prefixed_with_alias("RANK_STRATEGY", &Alias::Same("EXPORT_STRATEGY"));
    if let Some(v) = r.string("rank_strategy", found) {
        c.rank_strategy = v;
    }
    let found = r.prefixed("EXPORT_RANK");
    if let Some(v) = r.int_in("export_rank", found, -1, i128::from(i64::MAX), EXPORT_RANK_EXPECTED) {
        c.export_rank = v as i64;
    }
    if let Some(v) = r.float("export_sample_rate", r.prefixed("EXPORT_SAMPLE_RATE"), RATIO_EXPECTED) {
        c.export_sample_rate = v;
    }
    let found = r.prefixed_with_alias("SAMPLING_STRATEGY", &Alias::FlagMeaning("SAMPLER_ENABLED", "rank_aware"));
    if let Some(v) = r.string("sampling_strategy", found) {
        c.sampling_strategy = v;
    }
    if let Some(v) = r.bool("traces_enabled", r.prefixed("TRACES_ENABLED")) {
        c.traces_enabled = v;
    }
    if let Some(v) = r.bool("metrics_enabled", r.prefixed("METRICS_ENABLED")) {
        c.metrics_enabled = v;
    }
    if let Some(v) = r.bool("rank_metrics", r.prefixed("RANK_METRICS")) {
        c.rank_metrics = v;
    }
    if let Some(v) = r.bool("logs_enabled", r.prefixed("LOGS_ENABLED")) {
        c.logs_enabled = v;
    }
    if let Some(v) = r.string("span_groups", r.prefixed("SPAN_GROUPS")) {
        c.span_groups = v;
    }
    if let Some(v) = r.string("tracing_groups", r.prefixed("TRACING_GROUPS")) {
        c.tracing_groups = v;
    }
    let found = r.prefixed("EXPORTER");
    if let Some(v) = r.name("exporter", found, "exporter", ExporterKind::ALL_SIGNALS_NAMES, ExporterKind::from_name) {
        c.exporter = Some(v);
    }
    // The run id: `<PREFIX>_RUN_ID` > `NEMO_LENS_RUN_ID`, whatever the fallback prefix, so a
    // launcher that sets Lens's variable pins the run of every framework.
    let found = r.prefixed("RUN_ID").or_else(|| r.bare("NEMO_LENS_RUN_ID"));
    if let Some(v) = r.string("run_id", found) {
        c.run_id = v;
    }
    if let Some(v) = r.string("launch_id", r.prefixed("LAUNCH_ID")) {
        c.launch_id = v;
    }
    if let Some(v) = r.string("user", r.prefixed("USER_ID")) {
        c.user = v;
    }
    if let Some(v) = r.string("wandb_entity", r.bare("WANDB_ENTITY")) {
        c.wandb_entity = v;
    }
    if let Some(v) = r.string("wandb_project", r.bare("WANDB_PROJECT")) {
        c.wandb_project = v;
    }
    if let Some(v) = r.string("file_dir", r.prefixed("FILE_DIR")) {
        c.file_dir = Some(PathBuf::from(v));
    }
    let found = r.prefixed("FILE_MAX_BYTES");
    if let Some(v) = r.int_in("file_max_bytes", found, 1, i128::from(u64::MAX), FILE_MAX_BYTES_EXPECTED) {
        c.file_max_bytes = v as u64;
    }
    if let Some(v) = millis(r, "export_retry_window", r.prefixed("EXPORT_RETRY_WINDOW_MS"), 0) {
        c.export_retry_window = v;
    }
    if let Some(v) = millis(r, "shutdown_timeout", r.prefixed("SHUTDOWN_TIMEOUT_MS"), 0) {
        c.shutdown_timeout = v;
    }
    if let Some(v) = millis(r, "prometheus_linger", r.prefixed("PROMETHEUS_LINGER_MS"), 0) {
        c.prometheus_linger = v;
    }
    if let Some(found) = r.prefixed("PROMETHEUS_RESOURCE_LABELS") {
        if only_commas(&found.value) {
            r.push(ConfigProblem::InvalidValue {
                variable: found.variable.clone(),
                value: found.value.clone(),
                expected: "comma-separated resource attribute keys such as 'nemo.run.id,host.name', or 'none'".into(),
            });
        }
        let labels: Vec<String> = if found.value.eq_ignore_ascii_case("none") {
            Vec::new()
        } else {
            found.value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
        };
        r.record("prometheus_resource_labels", &found, labels.join(","));
        c.prometheus_resource_labels = labels;
    }
    if let Some(v) = r.float("peak_tflops", r.prefixed("PEAK_TFLOPS"), PEAK_TFLOPS_EXPECTED) {
        c.peak_tflops = Some(v);
    }
    // --- spool (issue 22) ---
    if let Some(v) = r.bool("spool", r.prefixed("SPOOL")) {
        c.spool = v;
    }
    if let Some(v) = r.string("spool_dir", r.prefixed("SPOOL_DIR")) {
        c.spool_dir = Some(PathBuf::from(v));
    }
    let found = r.prefixed("SPOOL_SIZE_KIB");
    if let Some(v) = r.int_in(
        "spool_size_kib",
        found,
        i128::from(super::model::MIN_SPOOL_SIZE_KIB),
        i128::from(super::model::MAX_SPOOL_SIZE_KIB),
        SPOOL_SIZE_EXPECTED,
    ) {
        c.spool_size_kib = v as u64;
    }
    // --- end spool ---
    if let Some(v) = r.bool("context_per_span", r.prefixed("CONTEXT_PER_SPAN")) {
        c.context_per_span = v;
    }
    if let Some(found) = r.prefixed("HANG_TIMEOUT_S") {
        match HangTimeout::parse(&found.value) {
            Some(v) => {
                r.record("hang_timeout", &found, v.to_string());
                c.hang_timeout = v;
            }
            None => r.push(ConfigProblem::InvalidValue {
                variable: found.variable,
                value: found.value,
                expected: HangTimeout::EXPECTED.into(),
            }),
        }
    }
    // --- control file (issue 23) ---
    if let Some(found) = r.prefixed("CONTROL_FILE") {
        r.record("control_file", &found, found.value.clone());
        c.control_file = Some(PathBuf::from(found.value));
    }
    if let Some(found) = r.prefixed("CONTROL_POLL_S") {
        match parse_control_poll(&found.value) {
            Some(v) => {
                r.record("control_poll", &found, py_float(v.as_secs_f64()));
                c.control_poll = v;
            }
            None => r.push(ConfigProblem::InvalidValue {
                variable: found.variable,
                value: found.value,
                expected: CONTROL_POLL_EXPECTED.into(),
            }),
        }
    }
    // --- end control file ---
}

/// What `<PREFIX>_SPOOL_SIZE_KIB` accepts.
pub(crate) const SPOOL_SIZE_EXPECTED: &str = "a whole number of KiB from 64 to 1048576 (default 4096)";

/// What `<PREFIX>_EXPORT_RANK` accepts (a rank at or past the world size is
/// refused at setup, where the world size is known).
pub(crate) const EXPORT_RANK_EXPECTED: &str = "a rank, 0 or more (below the world size), or -1 for the last rank";

/// What `<PREFIX>_EXPORT_SAMPLE_RATE` and `OTEL_TRACES_SAMPLER_ARG` accept.
pub(crate) const RATIO_EXPECTED: &str = "a number from 0.0 to 1.0";

/// What `<PREFIX>_PEAK_TFLOPS` accepts.
pub(crate) const PEAK_TFLOPS_EXPECTED: &str = "a number of TFLOP/s from 0.000001 to 1000000, e.g. 989.4";

/// The smallest peak `<PREFIX>_PEAK_TFLOPS` accepts, in TFLOP/s: one
/// MFLOP/s, below any processor a program trains on (a CPU test run sets
/// 0.001). A smaller positive number (a subnormal such as `1e-320`) would
/// make MFU infinite.
pub(crate) const MIN_PEAK_TFLOPS: f64 = 1e-6;

/// The largest peak `<PREFIX>_PEAK_TFLOPS` accepts, in TFLOP/s: an
/// EFLOP/s per device, a hundred times today's largest accelerators.
pub(crate) const MAX_PEAK_TFLOPS: f64 = 1e6;

/// What `<PREFIX>_FILE_MAX_BYTES` accepts.
pub(crate) const FILE_MAX_BYTES_EXPECTED: &str = "a whole number of bytes from 1 to 18446744073709551615";

/// What a count of the batch span processor (`OTEL_BSP_*` sizes) accepts.
pub(crate) const COUNT_EXPECTED: &str = "a whole number from 1 to 4294967295";

/// What a duration in milliseconds accepts, at least `min` (0 or 1).
pub(crate) fn millis_expected(min: i128) -> &'static str {
    if min == 0 {
        "a whole number of milliseconds from 0 to 18446744073709551615"
    } else {
        "a whole number of milliseconds from 1 to 18446744073709551615"
    }
}

/// A whole number of milliseconds, at least `min`.
fn millis<E: EnvSource + ?Sized>(
    r: &mut Reader<'_, E>,
    field: &'static str,
    found: Option<Found>,
    min: i128,
) -> Option<Duration> {
    r.int_in(field, found, min, i128::from(u64::MAX), millis_expected(min)).map(|ms| Duration::from_millis(ms as u64))
}

fn count<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, field: &'static str, variable: &str) -> Option<usize> {
    let found = r.bare(variable);
    r.int_in(field, found, 1, i128::from(u32::MAX), COUNT_EXPECTED).map(|n| n as usize)
}

/// The OTLP variables under one base name (`OTEL_EXPORTER_OTLP` or
/// `OTEL_EXPORTER_OTLP_TRACES`), parsed, each with the variable it came from.
#[derive(Default)]
struct OtlpBlock {
    endpoint: Option<(String, String)>,
    protocol: Option<(String, OtlpProtocol)>,
    headers: Option<(String, Headers)>,
    timeout: Option<(String, Duration)>,
    compression: Option<(String, Compression)>,
    certificate: Option<(String, PathBuf)>,
}

fn read_otlp_block<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, base: &str) -> OtlpBlock {
    let mut block = OtlpBlock {
        endpoint: r.bare(&format!("{base}_ENDPOINT")).map(|f| (f.variable, f.value)),
        ..OtlpBlock::default()
    };
    let found = r.bare(&format!("{base}_PROTOCOL"));
    let variable = found.as_ref().map(|f| f.variable.clone());
    block.protocol = r
        .name("", found, "OTLP protocol", OtlpProtocol::NAMES, OtlpProtocol::from_name)
        .zip(variable)
        .map(|(p, v)| (v, p));
    if let Some(found) = r.bare(&format!("{base}_HEADERS")) {
        match Headers::parse(&found.value) {
            Ok(headers) => block.headers = Some((found.variable, headers)),
            Err(err) => r.push(ConfigProblem::InvalidHeaders { variable: found.variable, detail: err.to_string() }),
        }
    }
    let found = r.bare(&format!("{base}_TIMEOUT"));
    let variable = found.as_ref().map(|f| f.variable.clone());
    block.timeout = millis(r, "", found, 1).zip(variable).map(|(t, v)| (v, t));
    let found = r.bare(&format!("{base}_COMPRESSION"));
    let variable = found.as_ref().map(|f| f.variable.clone());
    block.compression = r
        .name("", found, "OTLP compression", Compression::NAMES, Compression::from_name)
        .zip(variable)
        .map(|(c, v)| (v, c));
    block.certificate = r.bare(&format!("{base}_CERTIFICATE")).map(|f| (f.variable, PathBuf::from(f.value)));
    block
}

fn read_otel<E: EnvSource + ?Sized>(r: &mut Reader<'_, E>, o: &mut OtelSettings) {
    if let Some(v) = r.bool("otel.sdk_disabled", r.bare("OTEL_SDK_DISABLED")) {
        o.sdk_disabled = v;
    }
    let found = r.bare("OTEL_TRACES_EXPORTER");
    o.traces_exporter = r.name(
        "otel.traces_exporter",
        found,
        "traces exporter",
        ExporterKind::TRACES_LOGS_NAMES,
        ExporterKind::from_name,
    );
    let found = r.bare("OTEL_METRICS_EXPORTER");
    o.metrics_exporter = r.name(
        "otel.metrics_exporter",
        found,
        "metrics exporter",
        ExporterKind::METRICS_NAMES,
        ExporterKind::from_name,
    );
    let found = r.bare("OTEL_LOGS_EXPORTER");
    o.logs_exporter =
        r.name("otel.logs_exporter", found, "logs exporter", ExporterKind::TRACES_LOGS_NAMES, ExporterKind::from_name);

    let found = r.bare("OTEL_TRACES_SAMPLER_ARG");
    // The value as typed (`2`), not as parsed (`2.0`), for the message.
    let arg = found.as_ref().map(|f| (f.variable.clone(), f.value.clone()));
    let mut ratio = r.float("otel.traces_sampler_arg", found, RATIO_EXPECTED);
    if let (Some(x), Some((variable, value))) = (ratio, arg)
        && !(0.0..=1.0).contains(&x)
    {
        r.push(ConfigProblem::InvalidValue { variable, value, expected: RATIO_EXPECTED.into() });
        ratio = None;
    }
    let found = r.bare("OTEL_TRACES_SAMPLER");
    if let Some(sampler) = r.name("otel.traces_sampler", found, "trace sampler", TracesSampler::NAMES, |name| {
        TracesSampler::from_name(name, ratio.unwrap_or(1.0))
    }) {
        o.traces_sampler = sampler;
    }
    // Only the ratio samplers take the argument: a good one given to any
    // other sampler is ignored, as the SDKs ignore it, but not silently (a
    // job that sets only the argument likely meant a ratio). A bad one is
    // refused above, whatever the sampler.
    if let Some(x) = ratio
        && o.traces_sampler.ratio().is_none()
        && r.problems.is_empty()
    {
        crate::diag::warn_once(format_args!(
            "OTEL_TRACES_SAMPLER_ARG={} is ignored: the trace sampler {} takes no argument (a share of the traces \
             needs OTEL_TRACES_SAMPLER=parentbased_traceidratio)",
            py_float(x),
            o.traces_sampler.as_str()
        ));
    }

    let general = read_otlp_block(r, "OTEL_EXPORTER_OTLP");
    for signal in Signal::ALL {
        let specific = read_otlp_block(r, &format!("OTEL_EXPORTER_OTLP_{}", signal.env_name()));
        let fields = otlp_fields(signal);
        let s = o.otlp_mut(signal);
        let endpoint = specific.endpoint.map(|e| (e, true)).or(general.endpoint.clone().map(|e| (e, false)));
        if let Some(((variable, url), signal_specific)) = endpoint {
            r.record(fields.endpoint, &Found { variable, value: String::new() }, url.clone());
            s.endpoint = Some(OtlpEndpoint { url, signal_specific });
        }
        if let Some((variable, protocol)) = specific.protocol.or(general.protocol.clone()) {
            r.record(fields.protocol, &Found { variable, value: String::new() }, protocol.as_str().into());
            s.protocol = protocol;
        }
        let headers = match (&general.headers, specific.headers) {
            (Some((_, g)), Some((variable, h))) => Some((variable, g.merged_with(&h))),
            (None, Some(h)) => Some(h),
            (Some(g), None) => Some(g.clone()),
            (None, None) => None,
        };
        if let Some((variable, headers)) = headers {
            r.record(fields.headers, &Found { variable, value: String::new() }, header_keys(&headers));
            s.headers = headers;
        }
        if let Some((variable, timeout)) = specific.timeout.or(general.timeout.clone()) {
            r.record(fields.timeout, &Found { variable, value: String::new() }, timeout.as_millis().to_string());
            s.timeout = timeout;
        }
        if let Some((variable, compression)) = specific.compression.or(general.compression.clone()) {
            r.record(fields.compression, &Found { variable, value: String::new() }, compression.as_str().into());
            s.compression = compression;
        }
        if let Some((variable, path)) = specific.certificate.or(general.certificate.clone()) {
            r.record(fields.certificate, &Found { variable, value: String::new() }, path.display().to_string());
            s.certificate = Some(path);
        }
    }

    if let Some(v) = millis(r, "otel.metric_export_interval", r.bare("OTEL_METRIC_EXPORT_INTERVAL"), 1) {
        o.metric_export_interval = v;
    }
    if let Some(v) = r.string("otel.prometheus_host", r.bare("OTEL_EXPORTER_PROMETHEUS_HOST")) {
        o.prometheus_host = v;
    }
    let found = r.bare("OTEL_EXPORTER_PROMETHEUS_PORT");
    if let Some(v) = r.int_in("otel.prometheus_port", found, 0, 65535, "a port number from 0 to 65535") {
        o.prometheus_port = v as u16;
    }
    if let Some(found) = r.bare("OTEL_PROPAGATORS") {
        let mut propagators = Vec::new();
        let mut none = false;
        let mut ok = true;
        for item in found.value.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()) {
            match item.as_str() {
                "tracecontext" => propagators.push(Propagator::TraceContext),
                "baggage" => propagators.push(Propagator::Baggage),
                "none" => none = true,
                _ => {
                    r.push(unknown_name(found.variable.clone(), "propagator", item, Propagator::NAMES));
                    ok = false;
                }
            }
        }
        if only_commas(&found.value) {
            r.push(ConfigProblem::InvalidValue {
                variable: found.variable.clone(),
                value: found.value.clone(),
                expected: "comma-separated propagators from ['tracecontext', 'baggage'], or 'none'".into(),
            });
            ok = false;
        }
        if ok {
            if none {
                propagators.clear();
            }
            propagators.dedup();
            r.record("otel.propagators", &found, propagator_names(&propagators));
            o.propagators = propagators;
        }
    }
    if let Some(v) = count(r, "otel.batch.max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE") {
        o.batch.max_queue_size = v;
    }
    if let Some(v) = count(r, "otel.batch.max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE") {
        o.batch.max_export_batch_size = v;
    }
    if let Some(v) = millis(r, "otel.batch.schedule_delay", r.bare("OTEL_BSP_SCHEDULE_DELAY"), 1) {
        o.batch.schedule_delay = v;
    }
    if let Some(v) = count(r, "otel.batch.max_concurrent_exports", "OTEL_BSP_MAX_CONCURRENT_EXPORTS") {
        o.batch.max_concurrent_exports = v;
    }
}

impl LensConfig {
    /// Reads the configuration from `env`: `<prefix>_*`, then
    /// `<fallback_prefix>_*`, then the defaults, with span-group specs
    /// resolved against `catalog`; then validates it. Every problem (parse
    /// and semantic) is reported at once.
    ///
    /// Megatron calls `from_env(env, "MEGATRON_OTEL", Some("NEMO_LENS"),
    /// &MEGATRON_CATALOG)`. Custom rank and sampling strategies must be
    /// registered before: their names are checked against the registries. For a framework default service name use
    /// [`ConfigLoader`] or [`LensConfig::with_default_service_name`].
    pub fn from_env(
        env: &(impl EnvSource + ?Sized),
        prefix: &str,
        fallback_prefix: Option<&str>,
        catalog: &'static SpanGroupCatalog,
    ) -> Result<LensConfig, ConfigError> {
        let mut loader = ConfigLoader::new(prefix).catalog(catalog);
        loader.fallback_prefix = fallback_prefix;
        loader.load(env)
    }

    /// `self` with `service_name` set to `name` unless `OTEL_SERVICE_NAME`
    /// (or `--otel-service-name`) set it.
    #[must_use]
    pub fn with_default_service_name(mut self, name: &str) -> LensConfig {
        if self.origins.variable("service_name").is_none() {
            self.service_name = name.to_string();
        }
        self
    }

    /// Applies command-line overrides (they win over every variable).
    ///
    /// `--otel-enabled` only turns telemetry on; `OTEL_SDK_DISABLED=true`
    /// still wins, with a one-line warning. Empty values count as unset.
    /// Call [`LensConfig::validate`] afterwards: a bad `--otel-span-groups`
    /// is reported there under the flag's name.
    pub fn apply_cli(&mut self, cli: &CliOverrides) {
        if cli.otel_enabled {
            if self.otel.sdk_disabled {
                crate::diag::warn_once("OTEL_SDK_DISABLED=true turns telemetry off although --otel-enabled was given");
            } else {
                self.enabled = true;
                self.origins.set("enabled", "--otel-enabled", "true".into());
            }
        }
        if let Some(name) = cli.otel_service_name.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            self.service_name = name.to_string();
            self.origins.set("service_name", "--otel-service-name", name.to_string());
        }
        if let Some(spec) = cli.otel_span_groups.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            self.span_groups = spec.to_string();
            self.origins.set("span_groups", "--otel-span-groups", spec.to_string());
        }
    }
}
