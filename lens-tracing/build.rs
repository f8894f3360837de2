//! Turns the bridge on exactly when the application's facade records
//! telemetry: lens-fallbacks' build script says whether its `otel` feature is
//! on (`DEP_LENS_FALLBACKS_OTEL`), and this one sets the `lens_otel` cfg that
//! the bridge's code is compiled under. lens-tracing has no `otel` feature
//! of its own, so no dependency line of the application's can turn
//! OpenTelemetry on (or off) behind its facade's back.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(lens_otel)");
    println!("cargo:rerun-if-env-changed=DEP_LENS_FALLBACKS_OTEL");
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("DEP_LENS_FALLBACKS_OTEL").is_ok_and(|value| value == "1") {
        println!("cargo:rustc-cfg=lens_otel");
    }
}
