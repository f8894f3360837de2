//! `megatron-train-sim`: a Megatron-style training run that is small enough
//! for a laptop and real enough to exercise the whole telemetry stack.
//!
//! One binary, two roles:
//!
//! - with `--nproc-per-node N` (and not started by itself) it is a launcher
//!   ([`launcher`]) that starts N ranks;
//! - otherwise it is one rank, reading `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//!   `MASTER_ADDR` and `MASTER_PORT` like any torchrun or srun program (none
//!   set: a single-rank job).
//!
//! Module map: [`cli`] (flags, subcommands, consistency checks), [`config`]
//! (the layout and the other configuration types it parses into),
//! [`launcher`],
//! [`comm`] (rendezvous, TCP mesh, collectives), [`device`] (matrix
//! products), [`model`] (the byte-level language model, optimizer, schedule), [`corpus`]
//! (the synthetic text it learns), [`cpu`] (the process's CPU time for the summary), [`lm`] (the trained model for inference), [`train`] (the
//! loop, returning an [`outcome`]), [`checkpoint`], [`signals`], [`output`] (progress, summary, JSON)
//! and [`telemetry`], the adapter over megatron-telemetry's lifecycle (the
//! loop also calls megatron-telemetry's `pipeline`, `workers` and
//! `attributes` directly, as a Megatron port would), besides [`serve`] (the
//! `serve` subcommand: an OpenAI-compatible server over [`lm`], whose spans
//! are megatron-telemetry's `inference` module).
//!
//! Startup is measured as Megatron measures it ([`StartupTimestamps`]): the
//! first line of `main`, each startup phase's end, and, from the launcher,
//! its start and the moment before it started the ranks; telemetry turns
//! them into the backdated children of `megatron.startup`.
//!
//! Exit status: 0 on success, 2 for bad arguments or configuration (before
//! anything starts) or a `--load` checkpoint that cannot be used (missing,
//! damaged, truncated, foreign, another layout), 1 for a failure during the run, `128 + signal` when a
//! signal ended it without `--exit-signal-handler`.

mod checkpoint;
mod cli;
mod comm;
mod config;
mod corpus;
mod cpu;
mod device;
mod faults;
mod insight;
mod launcher;
mod lm;
mod model;
mod outcome;
mod output;
mod serve;
mod signals;
mod telemetry;
mod train;

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Parser as _;
use lens_fallbacks::env::{EnvSource, ProcessEnv};
use lens_fallbacks::identity::RankContext;

use crate::cli::Args;
use crate::comm::{Comm, Rendezvous};
use crate::telemetry::{RankSetup, SimEnv, StartupTimestamps, Telemetry};
use crate::train::Trainer;

fn usage_error(message: &dyn std::fmt::Display) -> ExitCode {
    output::error(None, message);
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let program_start = SystemTime::now();
    let is_rank = ProcessEnv.non_empty(launcher::ROLE_VARIABLE).is_some();
    let main_entry = SystemTime::now();
    let args = Args::parse();
    match &args.tool {
        // Aliases of `lens trace-view` and `lens analyze` (the same code).
        Some(cli::Tool::TraceView(view)) => return lens_command::trace_view::run(view),
        Some(cli::Tool::Analyze(analyze)) => return lens_command::analyze::run(analyze),
        // Without the job's status, a spec is checked against the
        // simulator's own catalog (Megatron's), unless --catalog says.
        Some(cli::Tool::Control(control)) => {
            let mut control = control.clone();
            control.catalog.get_or_insert(lens_command::control::CatalogChoice::Megatron);
            return lens_command::control::run(&control);
        }
        Some(cli::Tool::Serve(serve)) => return serve::run(serve, program_start),
        None => {}
    }
    match (args.nproc_per_node, is_rank) {
        (Some(nproc), false) => run_launcher(&args, nproc, program_start),
        _ => {
            let stamps = StartupTimestamps {
                program_start: Some(program_start),
                main_entry: Some(main_entry),
                ..StartupTimestamps::default()
            };
            run_rank(args, stamps)
        }
    }
}

fn run_launcher(args: &Args, nproc: u32, launch_start: SystemTime) -> ExitCode {
    if let Err(error) = args.validate(nproc, "--nproc-per-node") {
        return usage_error(&error);
    }
    if let Err(error) = args.check_output_paths() {
        return usage_error(&error);
    }
    if let Err(error) = device::check(args.device, nproc) {
        return usage_error(&error);
    }
    let env = SimEnv { default_file_exporter: telemetry::exporter_unconfigured(&ProcessEnv, &args.otel) };
    let config = match telemetry::load_config(&env, &args.otel) {
        Ok(config) => config,
        Err(error) => return usage_error(&error),
    };
    // What only the world size decides (an export rank the job does not
    // have), said once here rather than by every rank.
    let world =
        lens_fallbacks::identity::RankContext { world_size: nproc, ..lens_fallbacks::identity::RankContext::SINGLE };
    if telemetry::enabled(&config)
        && let Err(error) = lens_fallbacks::strategies::should_export(&config, &world)
    {
        return usage_error(&error);
    }
    // The files it names (a CA file, the file exporter's directory), which
    // every rank checks again: a bad one stops the launch here.
    if telemetry::enabled(&config)
        && let Err(error) = config.check_files()
    {
        return usage_error(&error);
    }
    // Strategies that pick no rank are the job's choice, but rarely meant.
    if telemetry::enabled(&config)
        && let Some(warning) = lens_fallbacks::strategies::picks_no_rank(&config, nproc)
    {
        lens_fallbacks::diag::warn(warning);
    }
    let mut extra = launcher::LaunchEnv::default();
    if telemetry::RUN_ID_VARIABLES.iter().all(|v| ProcessEnv.non_empty(v).is_none()) {
        extra.variables.push((telemetry::RUN_ID_VARIABLE.to_string(), telemetry::random_run_id()));
    }
    if env.default_file_exporter {
        extra.variables.push((telemetry::DEFAULT_EXPORTER_VARIABLE.to_string(), "file".to_string()));
    }
    if telemetry::enabled(&config) {
        let run_id = extra
            .variables
            .iter()
            .find(|(k, _)| k == telemetry::RUN_ID_VARIABLE)
            .map_or_else(|| telemetry::resolve_run_id(&config, &ProcessEnv), |(_, v)| v.clone());
        if env.default_file_exporter {
            output::note(&format!(
                "no exporter configured: telemetry goes to files under {}/",
                telemetry::file_dir(&config, &run_id).display()
            ));
        }
        output::note(&format!("launching {nproc} rank{}, run id {run_id}", if nproc == 1 { "" } else { "s" }));
    } else {
        output::note(&format!("launching {nproc} rank{}", if nproc == 1 { "" } else { "s" }));
    }
    extra.variables.extend(telemetry::launcher_stamps(&ProcessEnv, launch_start, SystemTime::now()));
    let code = launcher::launch(nproc, &extra, args.rank_pids_file.as_deref());
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn run_rank(args: Args, mut stamps: StartupTimestamps) -> ExitCode {
    // arg_parse: the flags were parsed in `main`; the rank and the layout.
    let rank = match RankContext::detect(&ProcessEnv) {
        Ok(rank) => rank,
        Err(error) => return usage_error(&error),
    };
    let world_source = if rank.world_size > 1 { "WORLD_SIZE" } else { "a single process (no WORLD_SIZE)" };
    let layout = match args.validate(rank.world_size, world_source) {
        Ok(layout) => layout,
        Err(error) => return usage_error(&error),
    };
    if let Err(error) = args.check_output_paths() {
        return usage_error(&error);
    }
    stamps.pretrain_entry = Some(SystemTime::now());

    // inprocess_setup: the device, and the drain flag of
    // --exit-signal-handler (installed before telemetry, so that the
    // lifecycle's graceful handler passes signals on to it).
    let device = match device::select(args.device, rank.local_rank) {
        Ok(device) => device,
        Err(error) => return usage_error(&error),
    };
    let stop = match signals::install_drain_flag(args.exit_signal_handler) {
        Ok(stop) => stop,
        Err(error) => {
            output::error(Some(rank.rank), &format!("could not install the signal handlers: {error}"));
            return ExitCode::from(1);
        }
    };
    stamps.after_inprocess = Some(SystemTime::now());

    // in_job_setup: telemetry (configuration, exporters, resource).
    let env = SimEnv { default_file_exporter: telemetry::exporter_unconfigured(&ProcessEnv, &args.otel) };
    let resource = telemetry::ResourceArgs {
        local_rank: Some(rank.local_rank),
        tensor_model_parallel_size: Some(layout.tp),
        pipeline_model_parallel_size: Some(layout.pp),
        data_parallel_size: Some(layout.dp),
        global_batch_size: Some(args.global_batch_size),
        seq_length: Some(args.seq_length),
        num_layers: Some(args.num_layers),
        hidden_size: Some(args.hidden_size),
        num_attention_heads: Some(args.num_attention_heads),
        train_iters: Some(args.train_iters),
        micro_batch_size: Some(args.micro_batch_size),
        ckpt_format: Some(args.ckpt_format.clone()),
        fp16: args.fp16,
        bf16: args.bf16,
    };
    let precision = resource.precision().as_str();
    let setup = RankSetup {
        rank: &rank,
        args: resource,
        env,
        stamps,
        graceful_signals: args.exit_signal_handler,
        checkpoint_dir: args.save.clone(),
    };
    let mut telemetry = match Telemetry::setup(&args.otel, setup) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            output::error(Some(rank.rank), &format!("telemetry setup failed: {error}"));
            return ExitCode::from(2);
        }
    };
    let run_id = telemetry.run_id();
    stamps.after_ft_setup = Some(SystemTime::now());
    telemetry.record_startup_phases(&stamps);

    // initialize_megatron: rendezvous and the connections to every rank.
    let rendezvous = Rendezvous {
        master_addr: ProcessEnv.non_empty("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".to_string()),
        master_port: match ProcessEnv.non_empty("MASTER_PORT").map(|p| p.parse::<u16>()) {
            None => 29500,
            Some(Ok(port)) => port,
            Some(Err(_)) => {
                return usage_error(&format!(
                    "MASTER_PORT={:?} is not a port number (0-65535)",
                    ProcessEnv.var("MASTER_PORT").unwrap_or_default()
                ));
            }
        },
        deadline: Duration::from_secs(args.comm_timeout.max(10)),
    };
    let comm = match Comm::connect(rank.rank, rank.world_size, &rendezvous, Duration::from_secs(args.comm_timeout)) {
        Ok(comm) => comm,
        Err(error) => return fail(rank.rank, &mut telemetry, &error),
    };
    stamps.after_initialize_megatron = Some(SystemTime::now());

    // jit_fusion_options: warm the device's kernels up.
    device::warm_up(device.as_ref());
    stamps.after_jit_fusion = Some(SystemTime::now());
    telemetry.record_startup_phases(&stamps);

    let summary_path = args.summary_json.clone();
    let peak = telemetry::MfuPeak::resolve(
        telemetry::load_config(&env, &args.otel).ok().as_ref(),
        device.gpu_name(),
        rank.local_rank,
        &ProcessEnv,
    );
    if telemetry.is_enabled() && rank.rank + 1 == rank.world_size {
        output::mfu_peak(&peak);
    }
    let mut trainer = Trainer::new(args, layout, comm, device, telemetry, stop, peak.tflops());
    let result = trainer.run();
    // The goodput is the job's, read before shutdown: the flush, and a
    // Prometheus endpoint's linger for its last scrape, are telemetry's time.
    let goodput = trainer.goodput();
    let summary = output::TelemetrySummary {
        enabled: trainer.telemetry().is_enabled(),
        exporting: trainer.telemetry().is_exporting(),
        destinations: trainer.telemetry().destinations(),
        report: trainer.shutdown_telemetry(),
        goodput,
    };
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => {
            output::error(Some(rank.rank), &error);
            // Where this rank's telemetry went, and what it dropped: a rank
            // that fails reports it as one that finishes does.
            output::print_telemetry(rank.rank, &summary, false);
            return ExitCode::from(if error.bad_input { 2 } else { 1 });
        }
    };
    trainer.finish_comm();
    let last = rank.rank + 1 == rank.world_size;
    if last {
        output::print_summary(&outcome, layout, &summary);
        if let Some(path) = summary_path {
            let value = output::summary_json(&outcome, layout, &run_id, precision, &summary);
            if let Err(error) = output::write_json(&path, &value) {
                output::error(Some(rank.rank), &format!("--summary-json {}: {error}", path.display()));
                return ExitCode::from(1);
            }
        }
    } else {
        output::print_telemetry(rank.rank, &summary, false);
    }
    ExitCode::SUCCESS
}

/// Reports a failure of this rank before training and exits 1. Telemetry is
/// shut down first: if a signal is being handled (a rank dying of SIGTERM
/// sees its peers go first), that waits for the lifecycle's handler, which
/// then ends the process with the signal's status.
fn fail(rank: u32, telemetry: &mut Telemetry, error: &dyn std::fmt::Display) -> ExitCode {
    let summary = output::TelemetrySummary::at_shutdown(telemetry);
    output::error(Some(rank), error);
    output::print_telemetry(rank, &summary, false);
    ExitCode::from(1)
}
