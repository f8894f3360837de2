//! Prints what one rank resolves from its environment and flags: the
//! configuration, the rank context, the run id, whether this rank exports and
//! records spans, the enabled span groups and the resource it would carry.
//!
//! ```sh
//! MEGATRON_OTEL_EXPORT_STRATEGY=all_ranks RANK=1 WORLD_SIZE=4 \
//!   cargo run -p lens-core --features clap --example show-config -- --otel-enabled
//! ```
//!
//! Bad input exits with status 2 and every problem, each naming the variable
//! or flag, the value and what is accepted.

use std::process::ExitCode;

use clap::Parser;
use lens_core::config::{CliOverrides, ConfigLoader};
use lens_core::env::ProcessEnv;
use lens_core::groups::LENS_CATALOG;
use lens_core::identity::{OsProbe, RankContext, ResourceInputs, build_resource, resolve_run_id};
use lens_core::strategies;

/// Show the telemetry configuration this rank resolves.
#[derive(Parser)]
#[command(name = "show-config")]
struct Args {
    #[command(flatten)]
    otel: CliOverrides,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match show(&args) {
        Ok(report) => {
            print(&report);
            ExitCode::SUCCESS
        }
        Err(message) => {
            #[expect(clippy::print_stderr, reason = "an example program reports errors on standard error")]
            {
                eprintln!("error: {message}");
            }
            ExitCode::from(2)
        }
    }
}

fn show(args: &Args) -> Result<String, String> {
    let env = ProcessEnv;
    let loader = ConfigLoader::new("MEGATRON_OTEL").fallback_prefix("NEMO_LENS").catalog(&LENS_CATALOG);
    let loaded = loader.load(&loader.under_flags(&env, &args.otel));
    let mut config = loaded.map_err(|e| e.to_string())?;
    config.apply_cli(&args.otel);
    config.validate().map_err(|e| e.to_string())?;
    config.check_files().map_err(|e| e.to_string())?;
    let rank = RankContext::detect(&env).map_err(|e| e.to_string())?;
    let run_id = resolve_run_id(&config.run_id, &env);
    let exports = config.telemetry_enabled() && strategies::should_export(&config, &rank).map_err(|e| e.to_string())?;
    let records_spans = exports && strategies::records_spans(&config, &rank).map_err(|e| e.to_string())?;
    let groups =
        if records_spans { config.resolved_span_groups().map_err(|e| e.to_string())? } else { Default::default() };

    let mut out = format!("{config}\n");
    out += &format!("rank:            {} of {} (local rank {})\n", rank.rank, rank.world_size, rank.local_rank);
    out += &format!("run id:          {} (from {})\n", run_id.value, run_id.source);
    out += &format!("exports:         {exports}\n");
    out += &format!("records spans:   {records_spans}\n");
    out += &format!("enabled groups:  [{}]\n", config.catalog.names(groups).join(", "));
    if exports {
        let inputs = ResourceInputs::new(config.service_name.clone(), run_id.value.clone(), rank);
        out += "resource:\n";
        for kv in build_resource(&inputs, &env, &OsProbe).iter() {
            out += &format!("  {} = {}\n", kv.key, kv.value);
        }
    }
    Ok(out)
}

fn print(report: &str) {
    #[expect(clippy::print_stdout, reason = "the example's output is its report")]
    {
        print!("{report}");
    }
}
