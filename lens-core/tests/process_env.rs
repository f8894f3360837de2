//! The real process environment with a value that is not UTF-8: its own
//! test binary, since it sets a variable of the process.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;

use lens_core::config::LensConfig;
use lens_core::env::ProcessEnv;
use lens_core::groups::LENS_CATALOG;

/// `MEGATRON_OTEL_FILE_DIR=$'out\xffdir'` once wrote to `out\u{FFFD}dir`,
/// another directory: the configuration refuses it, naming the variable.
#[test]
fn a_non_utf8_setting_in_the_process_environment_is_refused() {
    // SAFETY: the only test of this binary, so no other thread reads the
    // environment while it is set.
    unsafe {
        std::env::set_var("MEGATRON_OTEL_FILE_DIR", OsStr::from_bytes(b"out\xffdir"));
        std::env::set_var("SLURM_JOB_NAME", OsStr::from_bytes(b"job\xff"));
    }
    let error = LensConfig::from_env(&ProcessEnv, "MEGATRON_OTEL", Some("NEMO_LENS"), &LENS_CATALOG).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Invalid value for MEGATRON_OTEL_FILE_DIR: '(not UTF-8, not shown)'. Expected UTF-8 text; the value holds \
         bytes that are not UTF-8 (or U+FFFD, what such bytes become), so lens would read a different value than the \
         one set."
    );
    // A variable lens only records stays readable, its bad byte replaced.
    assert_eq!(lens_core::env::EnvSource::var(&ProcessEnv, "SLURM_JOB_NAME").as_deref(), Some("job\u{FFFD}"));
}
