//! `megatron-train-sim serve`: an OpenAI-compatible text-generation server
//! for a checkpoint that training wrote (docs/serving.md).
//!
//! - [`api`]: request parsing and checks (errors name their field), the
//!   chat template, the JSON of responses, stream chunks and errors;
//! - [`engine`]: the engine thread, which owns the model and runs
//!   continuous batching;
//! - [`http`]: the axum routes, admission (drain, body limit, queue bound),
//!   the spans of each request and the server-sent-event stream.
//!
//! Telemetry is set up exactly as for a training rank (the lifecycle, the
//! `file` exporter when nothing is configured); spans and metrics are
//! megatron-telemetry's `inference` module, except the HTTP SERVER span,
//! which is tower-http's `tracing` span through the lens-tracing bridge.
//!
//! Connections: a request's headers must arrive within
//! `--header-read-timeout` (an idle kept-alive connection is closed after
//! as long), its body within `--body-read-timeout` (else 408), and at most
//! `--max-connections` are open at once (one more is answered 503).
//!
//! Shutdown: SIGTERM or SIGINT starts a drain. The listener stays open and
//! answers every new request 503 with `Retry-After`; the requests in flight
//! finish, for at most `--drain-timeout` seconds (the ones still running
//! then end with an error event; a second SIGTERM or SIGINT, a second or
//! more after the first, ends them at once); telemetry is flushed; the exit
//! status is 0.

mod api;
mod engine;
mod http;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use lens_fallbacks::config::CliOverrides;
use lens_fallbacks::env::ProcessEnv;
use lens_fallbacks::identity::RankContext;

use crate::lm::InferenceModel;
use crate::telemetry::{RankSetup, ResourceArgs, StartupTimestamps, Telemetry};
use crate::{SimEnv, output, signals, telemetry};

/// `serve`: the flags.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The checkpoint directory a training run saved to (its `--save`); any TP/PP layout, merged on load.
    #[arg(long, value_name = "DIR")]
    pub(crate) load: PathBuf,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// The port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8000)]
    pub(crate) port: u16,
    /// The model name clients send as `model` (and `GET /v1/models` lists).
    #[arg(long, default_value = "megatron-sim", value_parser = model_name)]
    pub(crate) served_model_name: String,
    /// Requests (choices) in the running decode batch at most.
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) max_batch_size: u32,
    /// The largest `max_tokens` a request may ask for (without one, a request gets 16).
    #[arg(long, default_value_t = 1024, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_tokens: u64,
    /// Tokens per request, prompt plus output. The model reads the last
    /// window of its training sequence length, so a request may be longer.
    #[arg(long, default_value_t = 2048, value_name = "N", value_parser = clap::value_parser!(u64).range(2..=1 << 20))]
    pub(crate) max_model_len: u64,
    /// Requests waiting for a place in the batch at most; beyond it new requests get 429.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub(crate) max_queue: u32,
    /// The largest request body accepted; larger ones get 413 (decided from Content-Length before reading).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=(1 << 30)))]
    pub(crate) max_body_bytes: u64,
    /// Seconds the drain (after SIGTERM/SIGINT) waits for the requests in flight.
    /// (At most a day: a deadline much further ahead overflows the clock.)
    #[arg(long, default_value_t = 30, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub(crate) drain_timeout: u64,
    /// Seconds a connection may take to send a request's headers, and may stay idle between requests; then it is closed.
    #[arg(long, default_value_t = 10, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) header_read_timeout: u64,
    /// Seconds a request's body may take to arrive after its headers; then the request gets 408.
    #[arg(long, default_value_t = 30, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) body_read_timeout: u64,
    /// Connections open at once at most; one more is answered 503 and closed.
    #[arg(long, default_value_t = 512, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub(crate) max_connections: u32,
    /// Pause this long in every decode step (test and benchmark aid).
    #[arg(long, default_value_t = 0, value_name = "MS", hide = true)]
    pub(crate) decode_step_delay_ms: u64,
    /// Telemetry overrides (they win over every environment variable).
    #[command(flatten)]
    pub(crate) otel: CliOverrides,
}

/// Runs the server until a signal's drain ends. Exit status: 0 after a
/// drain, 2 for bad flags, a checkpoint that cannot be loaded or an address
/// that cannot be bound, 1 when the runtime cannot start.
pub(crate) fn run(args: &ServeArgs, program_start: SystemTime) -> ExitCode {
    let rank = match RankContext::detect(&ProcessEnv) {
        Ok(rank) => rank,
        Err(error) => return usage_error(&error),
    };
    let model = match InferenceModel::load(&args.load) {
        Ok(model) => model,
        Err(error) => return usage_error(&format!("--load {}: {error}", args.load.display())),
    };
    // The model attends to the last `max_context()` bytes of a longer
    // context (a sliding window), so the limit is the server's choice.
    let max_model_len = usize::try_from(args.max_model_len).unwrap_or(usize::MAX);
    let address = format!("{}:{}", args.host, args.port);
    let listener = match std::net::TcpListener::bind(&address) {
        Ok(listener) => listener,
        Err(error) => {
            return usage_error(&format!("--host {} --port {}: cannot listen: {error}", args.host, args.port));
        }
    };
    let local: SocketAddr = match listener.local_addr() {
        Ok(local) => local,
        Err(error) => return usage_error(&format!("cannot read the listening address: {error}")),
    };
    // The signal count before telemetry, so that the lifecycle's handler
    // flushes and passes each signal on (as with --exit-signal-handler).
    let signals = match signals::install_signal_count() {
        Ok(signals) => signals,
        Err(error) => {
            output::error(None, &format!("could not install the signal handlers: {error}"));
            return ExitCode::from(1);
        }
    };
    let env = SimEnv { default_file_exporter: telemetry::exporter_unconfigured(&ProcessEnv, &args.otel) };
    http::install_tracing(&args.otel);
    let stamps = StartupTimestamps { program_start: Some(program_start), ..StartupTimestamps::default() };
    // A server saves no checkpoints: its spool (if any) goes where the
    // configuration says (docs/crashes.md).
    let setup = RankSetup {
        rank: &rank,
        args: ResourceArgs::default(),
        env,
        stamps,
        graceful_signals: true,
        checkpoint_dir: None,
    };
    let mut telemetry = match Telemetry::setup(&args.otel, setup) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            output::error(None, &format!("telemetry setup failed: {error}"));
            return ExitCode::from(2);
        }
    };
    let metrics = telemetry.serve_ready();
    let code = serve(args, model, max_model_len, listener, local, &signals, metrics);
    // A server trains nothing: no goodput.
    let summary = output::TelemetrySummary::at_shutdown(&mut telemetry);
    output::print_telemetry(rank.rank, &summary, true);
    code
}

/// How long after the drain's start a signal counts as a second one.
const SECOND_SIGNAL_AFTER: Duration = Duration::from_secs(1);

fn usage_error(message: &dyn std::fmt::Display) -> ExitCode {
    output::error(None, message);
    ExitCode::from(2)
}

fn serve(
    args: &ServeArgs,
    model: InferenceModel,
    max_model_len: usize,
    listener: std::net::TcpListener,
    local: SocketAddr,
    signals: &signals::SignalCount,
    metrics: megatron_telemetry::inference::ServerMetrics,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("serve-http")
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            output::error(None, &format!("cannot start the HTTP runtime: {error}"));
            return ExitCode::from(1);
        }
    };
    let capacity = args.max_batch_size as usize + args.max_queue as usize;
    let limits = api::Limits {
        model_name: args.served_model_name.clone(),
        max_tokens: args.max_tokens,
        max_model_len,
        max_choices: capacity,
    };
    let (jobs, receiver) = std::sync::mpsc::channel();
    let body = (args.max_body_bytes as usize, Duration::from_secs(args.body_read_timeout));
    let shared = Arc::new(http::Shared::new(limits, capacity, body, jobs, metrics.clone()));
    let connections = http::ConnectionLimits {
        header_read_timeout: Duration::from_secs(args.header_read_timeout),
        max_connections: args.max_connections as usize,
    };
    let abort = Arc::new(AtomicBool::new(false));
    let engine_config = engine::EngineConfig {
        max_batch_size: args.max_batch_size as usize,
        max_model_len,
        model_name: args.served_model_name.clone(),
        step_delay: Duration::from_millis(args.decode_step_delay_ms),
    };
    let engine_abort = Arc::clone(&abort);
    let flops_per_token = model.forward_flops_per_token();
    let engine = std::thread::Builder::new()
        .name("serve-engine".into())
        .spawn(move || engine::run(&model, &engine_config, &receiver, &metrics, &engine_abort));
    let engine = match engine {
        Ok(engine) => engine,
        Err(error) => {
            output::error(None, &format!("cannot start the engine thread: {error}"));
            return ExitCode::from(1);
        }
    };
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let router = http::router(Arc::clone(&shared));
    let server = runtime.spawn(async move {
        let _ = listener.set_nonblocking(true);
        match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => {
                http::serve(listener, router, connections, shutdown_rx).await;
            }
            Err(error) => output::error(None, &format!("cannot listen: {error}")),
        }
    });
    // The address on stdout (for scripts and tests; port 0 picks one).
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "serving {} on http://{local}", args.served_model_name);
        let _ = stdout.flush();
    }
    output::note(&format!(
        "model: context {max_model_len} tokens, batch {}, {flops_per_token} FLOPs per token",
        args.max_batch_size
    ));

    let received = || signals.load(Ordering::Acquire);
    while received() == 0 && !server.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Drain: new requests get 503, the ones in flight finish (bounded by
    // --drain-timeout, or cut short by a second signal).
    shared.draining.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(args.drain_timeout);
    let in_flight = || shared.in_flight.load(Ordering::Acquire);
    output::note(&format!(
        "draining: {} requests in flight, at most {} s (a second SIGTERM or SIGINT ends them now)",
        in_flight(),
        args.drain_timeout
    ));
    // A signal within a second of the drain's start is the first one again
    // (a launcher forwarding the terminal's SIGINT delivers it twice), not
    // a second: only a later one cuts the drain.
    let drain_started = Instant::now();
    let mut counted = received();
    let mut cut = false;
    while in_flight() > 0 && Instant::now() < deadline {
        if drain_started.elapsed() < SECOND_SIGNAL_AFTER {
            counted = received();
        } else if received() > counted {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = in_flight();
    abort.store(true, Ordering::Release);
    let _ = engine.join();
    // Let the streams of aborted requests write their error event.
    let grace = Instant::now() + Duration::from_secs(2);
    while in_flight() > 0 && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = shutdown_tx.send(());
    runtime.shutdown_timeout(Duration::from_secs(2));
    if cut {
        output::note(&format!("drain cut short by a second signal: {left} requests ended with an error"));
    } else if left > 0 {
        output::note(&format!("drain timed out: {left} requests ended with an error"));
    } else {
        output::note(&"drained: every request in flight finished");
    }
    ExitCode::SUCCESS
}

/// `--served-model-name`: any name with a character that is not a space.
/// A blank one (`' '`) is refused as an empty one is: no client could
/// tell it from a missing `model`, and `GET /v1/models` would list nothing
/// readable.
fn model_name(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        Err("expected a model name that is not empty or only spaces, e.g. 'megatron-sim'".to_string())
    } else {
        Ok(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    /// `serve`'s flags alone (the whole command line lives in `cli`, which
    /// imports this module).
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: super::ServeArgs,
    }

    fn parse_error(extra: &[&str]) -> String {
        let argv = [&["serve", "--load", "D"][..], extra].concat();
        match Serve::try_parse_from(argv) {
            Ok(_) => format!("{extra:?} was accepted"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn a_drain_timeout_past_a_day_or_an_empty_model_name_is_refused_with_the_flag() {
        let error = parse_error(&["--drain-timeout", "18446744073709551615"]);
        assert!(
            error.contains(
                "invalid value '18446744073709551615' for '--drain-timeout <SECONDS>': 18446744073709551615 is not in \
                 0..=86400"
            ),
            "{error}"
        );
        for blank in ["", " ", "\t "] {
            let error = parse_error(&["--served-model-name", blank]);
            assert!(
                error.contains(&format!(
                    "invalid value '{blank}' for '--served-model-name <SERVED_MODEL_NAME>': expected a model name that \
                     is not empty or only spaces, e.g. 'megatron-sim'"
                )),
                "{blank:?}: {error}"
            );
        }
        assert!(Serve::try_parse_from(["serve", "--load", "D", "--served-model-name", "gpt 7b"]).is_ok());
        assert!(Serve::try_parse_from(["serve", "--load", "D", "--drain-timeout", "86400"]).is_ok());
    }
}
