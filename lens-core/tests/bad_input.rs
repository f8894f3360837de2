//! Bad values found by the sweep of every documented variable with a bad
//! value of each kind (not a number, negative, out of range, huge, a path
//! that leaves its directory, only separators): each is refused with the
//! variable, the value and what the variable accepts, never taken silently.
//!
//! Every environment here is a map: no test touches the process environment.

use std::collections::HashMap;

use lens_core::config::{ConfigError, LensConfig};
use lens_core::groups::LENS_CATALOG;

fn megatron(pairs: &[(&str, &str)]) -> Result<LensConfig, ConfigError> {
    let env: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    LensConfig::from_env(&env, "MEGATRON_OTEL", Some("NEMO_LENS"), &LENS_CATALOG)
}

fn message(pairs: &[(&str, &str)]) -> String {
    megatron(pairs).expect_err("expected a configuration error").to_string()
}

/// Each bad value, alone, and the whole message it gets.
fn assert_messages(cases: &[(&str, &str, &str)]) {
    for (variable, value, expected) in cases {
        assert_eq!(message(&[(variable, value)]), *expected, "{variable}={value:?}");
    }
}

#[test]
fn a_value_that_is_not_a_number_says_what_the_variable_accepts() {
    assert_messages(&[
        (
            "MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS",
            "5s",
            "Invalid integer for MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS: '5s'. Expected a whole number of milliseconds from 0 to 18446744073709551615.",
        ),
        (
            "OTEL_BSP_MAX_QUEUE_SIZE",
            "lots",
            "Invalid integer for OTEL_BSP_MAX_QUEUE_SIZE: 'lots'. Expected a whole number from 1 to 4294967295.",
        ),
        (
            "OTEL_EXPORTER_PROMETHEUS_PORT",
            "http",
            "Invalid integer for OTEL_EXPORTER_PROMETHEUS_PORT: 'http'. Expected a port number from 0 to 65535.",
        ),
        (
            "MEGATRON_OTEL_PEAK_TFLOPS",
            "fast",
            "Invalid float for MEGATRON_OTEL_PEAK_TFLOPS: 'fast'. Expected a number of TFLOP/s from 0.000001 to 1000000, e.g. 989.4.",
        ),
        (
            "OTEL_TRACES_SAMPLER_ARG",
            "ten percent",
            "Invalid float for OTEL_TRACES_SAMPLER_ARG: 'ten percent'. Expected a number from 0.0 to 1.0.",
        ),
    ]);
}

#[test]
fn a_number_past_the_largest_accepted_names_the_largest() {
    // 10^22 is a whole number of bytes, 1 or more: the message must say why it is refused.
    assert_messages(&[
        (
            "MEGATRON_OTEL_FILE_MAX_BYTES",
            "10000000000000000000000",
            "Invalid value for MEGATRON_OTEL_FILE_MAX_BYTES: '10000000000000000000000'. Expected a whole number of bytes from 1 to 18446744073709551615.",
        ),
        (
            "OTEL_METRIC_EXPORT_INTERVAL",
            "18446744073709551616",
            "Invalid value for OTEL_METRIC_EXPORT_INTERVAL: '18446744073709551616'. Expected a whole number of milliseconds from 1 to 18446744073709551615.",
        ),
        (
            "MEGATRON_OTEL_HANG_TIMEOUT_S",
            "1e300",
            "Invalid value for MEGATRON_OTEL_HANG_TIMEOUT_S: '1e300'. Expected auto, 0 (off) or a number of seconds from 0.01 to 31536000 (a year), e.g. 120.",
        ),
        // Below the watchdog's shortest tick (1e-10 s would round to no
        // time at all, which is off): refused, not silently off.
        (
            "MEGATRON_OTEL_HANG_TIMEOUT_S",
            "1e-10",
            "Invalid value for MEGATRON_OTEL_HANG_TIMEOUT_S: '1e-10'. Expected auto, 0 (off) or a number of seconds from 0.01 to 31536000 (a year), e.g. 120.",
        ),
        // Too small for a float: it reads as 0.0, but only a written zero
        // means off.
        (
            "MEGATRON_OTEL_HANG_TIMEOUT_S",
            "1e-400",
            "Invalid value for MEGATRON_OTEL_HANG_TIMEOUT_S: '1e-400'. Expected auto, 0 (off) or a number of seconds from 0.01 to 31536000 (a year), e.g. 120.",
        ),
    ]);
    for zero in ["0", "0.0", "-0", "0e9", "0_0.0"] {
        assert_eq!(
            megatron(&[("MEGATRON_OTEL_HANG_TIMEOUT_S", zero)]).unwrap().hang_timeout,
            lens_core::config::HangTimeout::Off,
            "{zero}"
        );
    }
    assert!(megatron(&[("MEGATRON_OTEL_HANG_TIMEOUT_S", "31536000")]).is_ok());
    assert_eq!(
        megatron(&[("MEGATRON_OTEL_HANG_TIMEOUT_S", "0.01")]).unwrap().hang_timeout,
        lens_core::config::HangTimeout::After(std::time::Duration::from_millis(10))
    );
}

#[test]
fn an_export_rank_below_minus_one_is_refused_rather_than_read_as_the_last_rank() {
    assert_eq!(
        message(&[("MEGATRON_OTEL_EXPORT_RANK", "-2")]),
        "Invalid value for MEGATRON_OTEL_EXPORT_RANK: '-2'. Expected a rank, 0 or more (below the world size), or -1 for the last rank."
    );
    assert_eq!(megatron(&[("MEGATRON_OTEL_EXPORT_RANK", "-1")]).unwrap().export_rank, -1);
    assert_eq!(megatron(&[("NEMO_LENS_EXPORT_RANK", "3")]).unwrap().export_rank, 3);
    // Set in code: the field is named.
    let in_code = LensConfig { export_rank: -7, ..LensConfig::default() };
    assert_eq!(
        in_code.validate().unwrap_err().to_string(),
        "Invalid value for LensConfig.export_rank: '-7'. Expected a rank, 0 or more (below the world size), or -1 for the last rank."
    );
}

#[test]
fn a_run_id_that_is_not_one_directory_name_is_refused() {
    let expected = "Expected a run id of 1 to 200 bytes without '/', '\\' or control characters, other than '.' and \
                    '..', since it names the directory telemetry/<run_id>";
    assert_eq!(
        message(&[("MEGATRON_OTEL_RUN_ID", "../../escape")]),
        format!("Invalid value for MEGATRON_OTEL_RUN_ID: '../../escape'. {expected} (it would leave that directory).")
    );
    assert_eq!(
        message(&[("NEMO_LENS_RUN_ID", "line\nbreak")]),
        format!("Invalid value for NEMO_LENS_RUN_ID: 'line\\nbreak'. {expected} (it holds a control character).")
    );
    let long = "x".repeat(201);
    assert_eq!(
        message(&[("MEGATRON_OTEL_RUN_ID", &long)]),
        format!("Invalid value for MEGATRON_OTEL_RUN_ID: '{long}'. {expected} (it is longer than 200 bytes).")
    );
    for fine in ["gpt-175b-r3", "12345_7", "has space", &"x".repeat(200)] {
        assert_eq!(megatron(&[("MEGATRON_OTEL_RUN_ID", fine)]).unwrap().run_id, fine);
    }
}

#[test]
fn propagators_of_only_commas_are_refused() {
    assert_eq!(
        message(&[("OTEL_PROPAGATORS", " , ")]),
        "Invalid value for OTEL_PROPAGATORS: ','. Expected comma-separated propagators from ['tracecontext', 'baggage'], or 'none'."
    );
    assert!(megatron(&[("OTEL_PROPAGATORS", "none")]).unwrap().otel.propagators.is_empty());
}

#[test]
fn span_groups_or_prometheus_labels_of_only_commas_are_refused() {
    assert_messages(&[
        (
            "MEGATRON_OTEL_SPAN_GROUPS",
            ",",
            "Invalid value for MEGATRON_OTEL_SPAN_GROUPS: ','. Expected comma-separated span-group names and presets, \
             e.g. 'default' or 'per_step,trace_region' (to record no spans, set MEGATRON_OTEL_TRACES_ENABLED=0).",
        ),
        (
            "MEGATRON_OTEL_PROMETHEUS_RESOURCE_LABELS",
            ",,",
            "Invalid value for MEGATRON_OTEL_PROMETHEUS_RESOURCE_LABELS: ',,'. Expected comma-separated resource \
             attribute keys such as 'nemo.run.id,host.name', or 'none'.",
        ),
        (
            "MEGATRON_OTEL_PROMETHEUS_RESOURCE_LABELS",
            "host name",
            "Invalid value for MEGATRON_OTEL_PROMETHEUS_RESOURCE_LABELS: 'host name'. Expected resource attribute keys \
             such as 'nemo.run.id', none of them empty or with a space.",
        ),
    ]);
    // The flag is named when the spec came from it.
    let mut config = megatron(&[]).unwrap();
    config.apply_cli(&lens_core::config::CliOverrides {
        otel_span_groups: Some(" , ".into()),
        ..lens_core::config::CliOverrides::default()
    });
    let error = config.validate().unwrap_err().to_string();
    assert!(error.starts_with("Invalid value for --otel-span-groups: ','."), "{error}");
    assert!(megatron(&[("MEGATRON_OTEL_SPAN_GROUPS", "default,,")]).is_ok(), "an empty item among names is skipped");
}

/// Makes a FIFO at `path` (`mkfifo`).
fn mkfifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt as _;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// The configuration's check of the private CA file `path`, with an https
/// endpoint and telemetry on; bounded, so that a hang fails the test.
fn certificate_check(path: &str) -> String {
    let config = megatron(&[
        ("MEGATRON_OTEL_ENABLED", "1"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", path),
    ])
    .unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(config.check_files()));
    let checked = receiver.recv_timeout(std::time::Duration::from_secs(10)).expect("the check returned");
    checked.expect_err("the certificate is refused").to_string()
}

/// A certificate path naming a device once filled the job's memory
/// (`/dev/zero`), a FIFO hung it at setup, and a huge file was read whole:
/// only a regular file of at most 4 MiB is read.
#[test]
fn a_certificate_that_is_not_a_small_regular_file_is_refused_at_once() {
    let dir = std::env::temp_dir().join(format!("lens-core-certificate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("ca.pem");
    mkfifo(&fifo);
    let huge = dir.join("huge.pem");
    std::fs::File::create(&huge).unwrap().set_len(5 * 1024 * 1024).unwrap();
    let expected = |path: &std::path::Path, reason: &str| {
        format!(
            "Invalid value for OTEL_EXPORTER_OTLP_CERTIFICATE: '{}'. Expected a readable PEM file of CA certificates \
             ({reason}).",
            path.display()
        )
    };
    assert_eq!(
        certificate_check("/dev/zero"),
        expected("/dev/zero".as_ref(), "it is a character device, not a regular file")
    );
    assert_eq!(
        certificate_check(fifo.to_str().unwrap()),
        expected(&fifo, "it is a FIFO (named pipe), not a regular file")
    );
    assert_eq!(
        certificate_check(huge.to_str().unwrap()),
        expected(&huge, "it is 5242880 bytes long, more than the 4194304 bytes (4 MiB) a CA file may hold")
    );
    assert_eq!(certificate_check(dir.to_str().unwrap()), expected(&dir, "it is a directory, not a regular file"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A value that is not UTF-8 once reached the configuration with each bad
/// byte replaced by U+FFFD, silently another directory or credential: it
/// is refused, naming the variable and never showing the value.
#[test]
fn a_value_that_is_not_utf8_is_refused_without_being_shown() {
    let expected = |variable: &str| {
        format!(
            "Invalid value for {variable}: '(not UTF-8, not shown)'. Expected UTF-8 text; the value holds bytes that \
             are not UTF-8 (or U+FFFD, what such bytes become), so lens would read a different value than the one \
             set."
        )
    };
    for (variable, value) in [
        ("MEGATRON_OTEL_FILE_DIR", "out\u{FFFD}dir"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer tok\u{FFFD}en"),
        ("NEMO_LENS_SPAN_GROUPS", "per_step\u{FFFD}"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h\u{FFFD}:4317"),
    ] {
        let error = message(&[(variable, value)]);
        assert_eq!(error, expected(variable), "{variable}");
        assert!(!error.contains("tok"), "{error}");
    }
}
