//! Tells the crates built on the facade whether this build records
//! telemetry: with `links = "lens_fallbacks"`, the build script of a crate
//! that depends on the facade directly (lens-tracing) reads
//! `DEP_LENS_FALLBACKS_OTEL` (`1` with the `otel` feature, `0` without), so
//! that it follows the application's choice through cargo's feature
//! unification instead of having an `otel` feature of its own.

fn main() {
    let otel = std::env::var_os("CARGO_FEATURE_OTEL").is_some();
    println!("cargo:otel={}", u8::from(otel));
    println!("cargo:rerun-if-changed=build.rs");
}
