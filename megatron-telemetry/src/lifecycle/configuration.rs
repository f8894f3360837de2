//! Megatron's configuration: its variable prefixes, its default service
//! name, and [`load_config`] (the loader with Megatron's catalog, then the
//! command line, validated).

use lens_fallbacks::SetupError;
use lens_fallbacks::config::{CliOverrides, ConfigLoader, LensConfig, parse_bool};
use lens_fallbacks::env::EnvSource;
use lens_fallbacks::setup::{load_or_disabled, or_off_when_compiled_out};

use crate::groups::MEGATRON_CATALOG;

/// The prefix of Megatron's variables (`MEGATRON_OTEL_*`).
pub const ENV_PREFIX: &str = "MEGATRON_OTEL";
/// The prefix read where `MEGATRON_OTEL_*` is unset (`NEMO_LENS_*`).
pub const FALLBACK_ENV_PREFIX: &str = "NEMO_LENS";
/// The service name when neither `OTEL_SERVICE_NAME` nor
/// `--otel-service-name` sets one.
pub const DEFAULT_SERVICE_NAME: &str = "megatron-lm";

/// Megatron's configuration, as Megatron sets it up: the loader with Megatron's
/// prefixes, catalog and service name, then the command line, validated.
///
/// ```
/// use lens_fallbacks::config::CliOverrides;
/// use megatron_telemetry::lifecycle::load_config;
///
/// let env = [("NEMO_LENS_SPAN_GROUPS", "per_step")];
/// let cli = CliOverrides { otel_enabled: true, ..CliOverrides::default() };
/// let config = load_config(&cli, &env).unwrap();
/// assert!(config.enabled);
/// assert_eq!(config.service_name, "megatron-lm");
/// assert_eq!(config.span_groups, "per_step");
/// ```
///
/// With telemetry not enabled (neither `--otel-enabled` nor
/// `MEGATRON_OTEL_ENABLED`/`NEMO_LENS_ENABLED`), a bad value in another
/// telemetry variable or flag (`--otel-span-groups`) is one warning and the
/// configuration is the disabled one: a typo never stops a job that does
/// not use telemetry. With telemetry enabled it is the error, before
/// anything is exported.
///
/// ```
/// use lens_fallbacks::config::CliOverrides;
/// use megatron_telemetry::lifecycle::load_config;
///
/// let env = [("MEGATRON_OTEL_SPAN_GROUPS", "per_stpe")];
/// let config = load_config(&CliOverrides::default(), &env).unwrap();
/// assert!(!config.enabled);
/// let flag = CliOverrides { otel_span_groups: Some("per_stpe".into()), ..CliOverrides::default() };
/// assert!(!load_config(&flag, &[]).unwrap().enabled);
/// let enabled = CliOverrides { otel_enabled: true, ..CliOverrides::default() };
/// if lens_fallbacks::setup::COMPILED_IN {
///     let error = load_config(&enabled, &env).unwrap_err().to_string();
///     assert!(error.contains("MEGATRON_OTEL_SPAN_GROUPS"), "{error}");
/// }
/// ```
///
/// A flag replaces its variable before the variable is read: a bad
/// `MEGATRON_OTEL_SPAN_GROUPS` stops nothing under `--otel-span-groups`.
///
/// ```
/// use lens_fallbacks::config::CliOverrides;
/// use megatron_telemetry::lifecycle::load_config;
///
/// let env = [("MEGATRON_OTEL_ENABLED", "1"), ("MEGATRON_OTEL_SPAN_GROUPS", "bogus")];
/// let flag = CliOverrides { otel_span_groups: Some("per_step".into()), ..CliOverrides::default() };
/// assert_eq!(load_config(&flag, &env).unwrap().span_groups, "per_step");
/// ```
///
/// `OTEL_SDK_DISABLED=true` wins over everything, `--otel-enabled` and a
/// malformed variable included: the job runs without telemetry.
///
/// ```
/// use lens_fallbacks::config::CliOverrides;
/// use megatron_telemetry::lifecycle::load_config;
///
/// let env = [("OTEL_SDK_DISABLED", "true"), ("MEGATRON_OTEL_ENABLED", "maybe"), ("MEGATRON_OTEL_EXPORTER", "consol")];
/// let flag = CliOverrides { otel_enabled: true, ..CliOverrides::default() };
/// assert!(!load_config(&flag, &env).unwrap().telemetry_enabled());
/// let flags = CliOverrides { otel_span_groups: Some("bogus".into()), ..flag };
/// assert!(!load_config(&flags, &[("OTEL_SDK_DISABLED", "1")]).unwrap().telemetry_enabled());
/// ```
///
/// In a build without `otel` no telemetry value stops the program (SPEC
/// A22): every problem, of a variable or of a flag, is one warning and the
/// configuration is the disabled one.
pub fn load_config(cli: &CliOverrides, env: &(impl EnvSource + ?Sized)) -> Result<LensConfig, SetupError> {
    let loader = ConfigLoader::new(ENV_PREFIX)
        .fallback_prefix(FALLBACK_ENV_PREFIX)
        .catalog(&MEGATRON_CATALOG)
        .default_service_name(DEFAULT_SERVICE_NAME);
    // A variable a flag replaces is not read: its bad value stops nothing.
    let env = &loader.under_flags(env, cli);
    let loaded = (|| -> Result<LensConfig, SetupError> {
        // `OTEL_SDK_DISABLED=true` wins over `--otel-enabled` too: a problem
        // is then one warning.
        let sdk_value = env.var("OTEL_SDK_DISABLED");
        let sdk_disabled = sdk_value.as_deref().and_then(parse_bool) == Some(true);
        let mut config = if cli.otel_enabled && !sdk_disabled {
            loader.load(env)?
        } else {
            load_or_disabled(&loader, env, &[Some(ENV_PREFIX), Some(FALLBACK_ENV_PREFIX)], &mut Vec::new())?
        };
        let loaded = config.clone();
        config.apply_cli(cli);
        match config.validate() {
            Ok(()) => Ok(config),
            // A bad telemetry flag in a job that does not record telemetry
            // is one warning, as a bad variable is: the job runs without it.
            Err(error) if !config.telemetry_enabled() => {
                let why = if config.otel.sdk_disabled {
                    format!("telemetry is disabled (OTEL_SDK_DISABLED={})", sdk_value.as_deref().unwrap_or("").trim())
                } else {
                    format!(
                        "telemetry is not enabled (--otel-enabled not given, {ENV_PREFIX}_ENABLED or \
                         {FALLBACK_ENV_PREFIX}_ENABLED not set to 1)"
                    )
                };
                lens_fallbacks::diag::warn_once(format_args!(
                    "{why}, so this problem in its configuration is ignored; fix it before enabling telemetry: {error}"
                ));
                Ok(loaded)
            }
            Err(error) => Err(error.into()),
        }
    })();
    or_off_when_compiled_out(loaded, &mut Vec::new())
}

/// The resolved span groups as a comma-separated list of names (the spec
/// itself if it resolves to nothing).
pub(super) fn resolved_spec(config: &LensConfig) -> String {
    let names = config.resolved_span_groups().map(|groups| MEGATRON_CATALOG.names(groups)).unwrap_or_default();
    if names.is_empty() { config.span_groups.clone() } else { names.join(",") }
}
