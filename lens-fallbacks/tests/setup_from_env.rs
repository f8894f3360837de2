//! The one-line setup as a program uses it: `Telemetry::from_env(prefix)`
//! and its builder, in both builds (the tests that read exported data need
//! the `testing` feature and say so).
//!
//! Setup owns process-global state (the active lifetime, the gate), so this
//! file is its own test binary and every test takes [`serial`] first.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lens_fallbacks::config::{ConfigError, LensConfig, Transports};
use lens_fallbacks::groups::LENS_CATALOG;
use lens_fallbacks::identity::{RankContext, RankContextError};
use lens_fallbacks::setup::{COMPILED_IN, ExporterError, SetupError, Telemetry};
use lens_fallbacks::strategies::StrategyError;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An environment that sends nothing anywhere when telemetry is enabled.
const NO_EXPORTERS: [(&str, &str); 3] =
    [("OTEL_TRACES_EXPORTER", "none"), ("OTEL_METRICS_EXPORTER", "none"), ("OTEL_LOGS_EXPORTER", "none")];

fn env(pairs: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    NO_EXPORTERS.iter().copied().chain(pairs.iter().copied()).collect()
}

fn setup(pairs: &[(&'static str, &'static str)]) -> Result<Telemetry, SetupError> {
    let env: std::collections::HashMap<String, String> =
        env(pairs).into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Telemetry::builder("MYJOB_OTEL").env(env).setup()
}

#[test]
fn from_env_reads_the_prefix_then_nemo_lens() {
    let _serial = serial();
    // Enabled through the fallback prefix; the rank from the same environment.
    let telemetry = setup(&[("NEMO_LENS_ENABLED", "1"), ("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap();
    // Built without `otel` nothing is recorded, and the handle says so.
    assert_eq!(telemetry.is_enabled(), COMPILED_IN);
    assert_eq!((telemetry.rank().rank, telemetry.rank().world_size), (1, 2));
    telemetry.shutdown(Duration::from_secs(1));

    // The fallback's value is the one read when the prefix's is unset ...
    let error = problem(setup(&[("MYJOB_OTEL_ENABLED", "1"), ("NEMO_LENS_EXPORT_SAMPLE_RATE", "2")]));
    assert!(error.contains("NEMO_LENS_EXPORT_SAMPLE_RATE"), "{error}");
    // ... and the prefix's wins over it.
    let error = problem(setup(&[
        ("MYJOB_OTEL_ENABLED", "1"),
        ("MYJOB_OTEL_EXPORT_SAMPLE_RATE", "3"),
        ("NEMO_LENS_EXPORT_SAMPLE_RATE", "2"),
    ]));
    assert!(error.contains("MYJOB_OTEL_EXPORT_SAMPLE_RATE"), "{error}");
    assert!(!error.contains("NEMO_LENS_EXPORT_SAMPLE_RATE"), "{error}");

    // Telemetry off: an inert handle.
    let telemetry = setup(&[]).unwrap();
    assert!(!telemetry.is_enabled());
    assert!(telemetry.warnings().is_empty(), "{:?}", telemetry.warnings());
}

#[test]
fn a_typo_with_telemetry_off_is_one_warning_and_a_disabled_handle() {
    let _serial = serial();
    let telemetry = setup(&[("MYJOB_OTEL_SPAN_GROUPS", "stpe"), ("RANK", "two")]).unwrap();
    assert!(!telemetry.is_enabled());
    assert!(!telemetry.is_exporting());
    assert!(telemetry.enabled_groups().is_empty());
    let warnings = telemetry.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("MYJOB_OTEL_SPAN_GROUPS") && warnings[0].contains("'stpe'"), "{warnings:?}");
    assert!(warnings[0].contains("MYJOB_OTEL_ENABLED or NEMO_LENS_ENABLED not set to 1"), "{warnings:?}");
    assert!(warnings[1].contains("RANK") && warnings[1].contains("\"two\""), "{warnings:?}");

    // Explicitly off is off too.
    let telemetry = setup(&[("MYJOB_OTEL_ENABLED", "0"), ("MYJOB_OTEL_SPAN_GROUPS", "stpe")]).unwrap();
    assert!(!telemetry.is_enabled());
    assert_eq!(telemetry.warnings().len(), 1);
}

/// With `otel`, the error setup returns; built without it (SPEC A22), no
/// telemetry value stops the program: setup succeeds with telemetry off and
/// the problem is its warning. Either way, the message.
fn problem(setup: Result<Telemetry, SetupError>) -> String {
    match setup {
        Err(error) if COMPILED_IN => error.to_string(),
        Ok(telemetry) if !COMPILED_IN => {
            assert!(!telemetry.is_enabled());
            let warning = telemetry.warnings().iter().find(|w| w.contains("built without the `otel` feature"));
            warning.unwrap_or_else(|| panic!("no compiled-out warning: {:?}", telemetry.warnings())).clone()
        }
        Err(error) => panic!("built without `otel`, setup stopped: {error}"),
        Ok(telemetry) => panic!("a bad value was accepted: {telemetry:?}"),
    }
}

#[test]
fn a_typo_with_telemetry_on_is_an_error_that_says_what_to_fix_or_a_warning_when_compiled_out() {
    let _serial = serial();
    let message = problem(setup(&[("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_SPAN_GROUPS", "stpe")]));
    assert!(message.contains("MYJOB_OTEL_SPAN_GROUPS"), "{message}");
    assert!(message.contains("'stpe'"), "{message}");
    assert!(message.contains("Valid options") && message.contains("'step'"), "{message}");
    // A bad enable switch is never ignored.
    let message = problem(setup(&[("MYJOB_OTEL_ENABLED", "maybe"), ("MYJOB_OTEL_SPAN_GROUPS", "stpe")]));
    assert!(message.contains("MYJOB_OTEL_ENABLED: 'maybe'"), "{message}");
    // A bad rank context with telemetry on is an error too.
    let message = problem(setup(&[("MYJOB_OTEL_ENABLED", "1"), ("RANK", "two")]));
    assert!(message.contains("RANK") && message.contains("two"), "{message}");
    if !COMPILED_IN {
        return;
    }
    let error = setup(&[("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_SPAN_GROUPS", "stpe")]).unwrap_err();
    // `fn main() -> Result<(), SetupError>` prints the Debug form.
    assert_eq!(format!("{error:?}"), error.to_string());
    let error = setup(&[("MYJOB_OTEL_ENABLED", "1"), ("RANK", "two")]).unwrap_err();
    assert!(matches!(error, SetupError::Rank(_)), "{error}");
}

#[test]
fn a_program_can_train_on_without_telemetry_instead() {
    let _serial = serial();
    if !COMPILED_IN {
        // Nothing to choose: built without `otel`, setup never stops.
        return;
    }
    let telemetry = setup(&[("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_SPAN_GROUPS", "stpe")])
        .unwrap_or_else(Telemetry::off_with_warning);
    assert!(!telemetry.is_enabled());
    assert_eq!(telemetry.warnings().len(), 1);
    assert!(telemetry.warnings()[0].starts_with("telemetry is off for this run: "), "{:?}", telemetry.warnings());
    assert!(telemetry.warnings()[0].contains("MYJOB_OTEL_SPAN_GROUPS"), "{:?}", telemetry.warnings());
}

/// Each error setup can return goes through `?` into `SetupError`, with its
/// message intact (and only those: a span-group, `tracing`-rule or bootstrap
/// error is not a setup error).
#[test]
fn question_mark_converts_every_error_into_setup_error() {
    fn config() -> Result<(), SetupError> {
        LensConfig::from_env(&[("NEMO_LENS_ENABLED", "maybe")], "NEMO_LENS", None, &LENS_CATALOG)?;
        Ok(())
    }
    fn rank() -> Result<(), SetupError> {
        RankContext::detect(&[("RANK", "x")])?;
        Ok(())
    }
    fn strategy() -> Result<(), SetupError> {
        lens_fallbacks::strategies::rank_strategy("no_such_strategy")?;
        Ok(())
    }
    fn missing_transport() -> Result<(), SetupError> {
        let config = LensConfig::from_env(&[("X_EXPORTER", "otlp")], "X", None, &LENS_CATALOG)?;
        Err(config.missing_transport(Transports::FILES_ONLY).expect("otlp needs grpc"))?
    }
    fn exporter() -> Result<(), SetupError> {
        Err(ExporterError::Runtime { reason: "no threads".into() })?
    }
    let config_error: ConfigError =
        LensConfig::from_env(&[("NEMO_LENS_ENABLED", "maybe")], "NEMO_LENS", None, &LENS_CATALOG).unwrap_err();
    let rank_error: RankContextError = RankContext::detect(&[("RANK", "x")]).unwrap_err();
    let strategy_error: StrategyError = lens_fallbacks::strategies::rank_strategy("no_such_strategy").err().unwrap();
    for (converted, original) in [
        (config().unwrap_err(), config_error.to_string()),
        (rank().unwrap_err(), rank_error.to_string()),
        (strategy().unwrap_err(), strategy_error.to_string()),
        (missing_transport().unwrap_err(), "X_EXPORTER=otlp selects OTLP over gRPC".to_string()),
        (exporter().unwrap_err(), "no threads".to_string()),
    ] {
        assert!(converted.to_string().contains(&original), "{converted} lacks {original}");
        assert_eq!(format!("{converted:?}"), converted.to_string());
    }
}

/// `service.version` is the application's; lens's own version is the
/// instrumentation scope's.
#[cfg(feature = "testing")]
#[test]
fn service_version_is_the_applications_and_the_scope_carries_lens_version() {
    use lens_fallbacks::setup::SetupOptions;
    use opentelemetry::Key;
    use opentelemetry_sdk::metrics::InMemoryMetricExporter;

    let _serial = serial();
    let exported = |version: Option<&str>| {
        let metrics = InMemoryMetricExporter::default();
        let mut builder = Telemetry::builder("MYJOB_OTEL")
            .env([("MYJOB_OTEL_ENABLED", "1"), ("OTEL_TRACES_EXPORTER", "none"), ("OTEL_LOGS_EXPORTER", "none")])
            .options(SetupOptions::new().with_metric_exporter(metrics.clone()));
        if let Some(version) = version {
            builder = builder.service_version(version);
        }
        let telemetry = builder.setup().unwrap();
        telemetry.meter().u64_counter("myjob.samples").build().add(1, &[]);
        telemetry.shutdown(Duration::from_secs(5));
        let finished = metrics.get_finished_metrics().unwrap();
        let last = finished.last().expect("one export");
        let service_version = last.resource().get(&Key::from_static_str("service.version"));
        let scope = last.scope_metrics().next().expect("one scope").scope().clone();
        (service_version.map(|v| v.to_string()), scope.version().map(str::to_string))
    };
    assert_eq!(exported(Some("1.4.2")), (Some("1.4.2".to_string()), Some(env!("CARGO_PKG_VERSION").to_string())));
    assert_eq!(exported(None), (None, Some(env!("CARGO_PKG_VERSION").to_string())));
}

/// A program that gives its own span exporter still has its metrics
/// exported as the configuration says: their CA file is checked at setup,
/// on every rank, and the traces' is not (their exporter is the program's).
#[cfg(feature = "testing")]
#[test]
fn the_program_s_own_span_exporter_leaves_the_metrics_ca_file_checked() {
    use lens_fallbacks::otel::exporters::testing::InMemorySpanExporter;
    use lens_fallbacks::setup::SetupOptions;

    let _serial = serial();
    let setup = |variable: &'static str| {
        Telemetry::builder("MYJOB_OTEL")
            .env([
                ("MYJOB_OTEL_ENABLED", "1"),
                ("OTEL_LOGS_EXPORTER", "none"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:9"),
                (variable, "/no/such/ca.pem"),
            ])
            .rank(RankContext { rank: 1, world_size: 2, local_rank: 1, node_rank: None })
            .options(SetupOptions::new().with_span_exporter(InMemorySpanExporter::default()))
            .setup()
    };
    let error = setup("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE").unwrap_err().to_string();
    assert!(
        error.starts_with(
            "Invalid value for OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE: '/no/such/ca.pem'. Expected a readable PEM file"
        ),
        "{error}"
    );
    let telemetry = setup("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE").expect("the traces' CA file is not this setup's");
    telemetry.shutdown(Duration::from_secs(1));
}

/// An unwritable file directory is a setup error naming the variable this
/// program reads, under its own prefix (or the fallback's, when that set
/// it), never another framework's: one under a file, found by the
/// configuration's check on every rank, and one the exporter cannot make
/// (a name longer than the file system allows), found when it is built.
#[cfg(feature = "otel")]
#[test]
fn an_unwritable_file_dir_names_the_programs_own_variable() {
    let _serial = serial();
    let root = std::env::temp_dir().join(format!("lens-file-dir-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    // A directory under a regular file cannot be created.
    let blocker = root.join("a-file");
    std::fs::write(&blocker, b"x").unwrap();
    let under_a_file = blocker.join("telemetry").display().to_string();
    // Nor can one whose name is too long (for root too).
    let too_long = root.join("x".repeat(300)).display().to_string();
    let error_for = |prefix: &str, variable: &str, dir: &str| {
        let env: std::collections::HashMap<String, String> = [
            (format!("{prefix}_ENABLED"), "1".to_string()),
            (format!("{prefix}_EXPORTER"), "file".to_string()),
            (variable.to_string(), dir.to_string()),
        ]
        .into_iter()
        .collect();
        Telemetry::builder(prefix).env(env).setup().unwrap_err().to_string()
    };

    let error = error_for("MYJOB_OTEL", "MYJOB_OTEL_FILE_DIR", &under_a_file);
    assert_eq!(
        error,
        format!(
            "Invalid value for MYJOB_OTEL_FILE_DIR: '{under_a_file}'. Expected a directory (made if missing), not a \
             file: {} is a file.",
            blocker.display()
        )
    );
    let error = error_for("MYJOB_OTEL", "MYJOB_OTEL_FILE_DIR", &too_long);
    assert!(error.contains("MYJOB_OTEL_FILE_DIR: cannot open"), "{error}");
    assert!(error.contains("choose a writable directory with MYJOB_OTEL_FILE_DIR"), "{error}");
    assert!(error.contains("traces-rank0.jsonl") && !error.contains("MEGATRON"), "{error}");

    // Set through the fallback prefix: that is the variable named.
    for dir in [&under_a_file, &too_long] {
        let error = error_for("MYJOB_OTEL", "NEMO_LENS_FILE_DIR", dir);
        assert!(error.contains("NEMO_LENS_FILE_DIR"), "{error}");
        assert!(!error.contains("MYJOB_OTEL_FILE_DIR") && !error.contains("MEGATRON"), "{error}");
    }

    // Megatron's prefix reads as it always did.
    let error = error_for("MEGATRON_OTEL", "MEGATRON_OTEL_FILE_DIR", &too_long);
    assert!(error.contains("MEGATRON_OTEL_FILE_DIR: cannot open"), "{error}");
    assert!(error.contains("choose a writable directory with MEGATRON_OTEL_FILE_DIR"), "{error}");
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn the_handle_carries_the_diagnosis_settings_it_read_so_a_program_reads_its_configuration_once() {
    let _serial = serial();
    let telemetry = setup(&[
        ("MYJOB_OTEL_HANG_TIMEOUT_S", "7"),
        ("MYJOB_OTEL_PEAK_TFLOPS", "312"),
        ("MYJOB_OTEL_SHUTDOWN_TIMEOUT_MS", "1500"),
    ])
    .unwrap();
    assert_eq!(telemetry.hang_timeout(), lens_fallbacks::config::HangTimeout::After(Duration::from_secs(7)));
    assert_eq!(telemetry.peak_tflops(), Some(312.0));
    assert_eq!(telemetry.shutdown_timeout(), Duration::from_millis(1500));
    // Nothing set: the defaults (`auto`, no peak, 5 s).
    let defaults = setup(&[]).unwrap();
    assert_eq!(defaults.hang_timeout(), lens_fallbacks::config::HangTimeout::Auto);
    assert_eq!(defaults.peak_tflops(), None);
    assert_eq!(defaults.shutdown_timeout(), Duration::from_secs(5));
}

/// A FIFO where a rank's file goes once hung setup forever: it is a setup
/// error naming the file directory's variable, at once (bounded here, so
/// that a hang fails the test).
#[cfg(feature = "otel")]
#[test]
fn a_fifo_where_the_file_goes_is_a_setup_error_naming_the_file_dir() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("lens-file-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("traces-rank0.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let env: std::collections::HashMap<String, String> = [
        ("MEGATRON_OTEL_ENABLED", "1"),
        ("MEGATRON_OTEL_EXPORTER", "file"),
        ("MEGATRON_OTEL_FILE_DIR", dir.to_str().unwrap()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        sender.send(Telemetry::builder("MEGATRON_OTEL").env(env).setup().err().map(|e| e.to_string()))
    });
    let error = receiver.recv_timeout(Duration::from_secs(20)).expect("setup returned").expect("refused");
    assert_eq!(
        error,
        format!(
            "MEGATRON_OTEL_FILE_DIR: cannot open {} for appending: it is a FIFO (named pipe), not a regular file; \
             choose a writable directory with MEGATRON_OTEL_FILE_DIR",
            fifo.display()
        )
    );
    std::fs::remove_dir_all(&dir).ok();
}
