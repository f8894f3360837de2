//! Turns the diagnosis on exactly when the application's facade records
//! telemetry: lens-fallbacks' build script says whether its `otel` feature is
//! on (`DEP_LENS_FALLBACKS_OTEL`), and this one sets the `lens_otel` cfg that
//! the crate's recording code is compiled under (lens-tracing's pattern).
//! lens-training has no `otel` feature of its own.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(lens_otel)");
    println!("cargo:rerun-if-env-changed=DEP_LENS_FALLBACKS_OTEL");
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("DEP_LENS_FALLBACKS_OTEL").is_ok_and(|value| value == "1") {
        println!("cargo:rustc-cfg=lens_otel");
    }
}
