//! The engine: one thread owns the model and runs continuous batching.
//!
//! Requests arrive as [`Job`]s on a channel and wait in a queue (bounded by
//! `--max-queue`, which the HTTP side enforces before it sends). At every
//! step the engine admits waiting jobs up to `--max-batch-size`, runs
//! `next_logits` once for the whole running batch, samples one byte per job
//! with the job's own seeded generator and sends it back on the job's
//! channel; finished jobs (their `max_tokens`, a stop sequence, the context
//! limit, or a client that went away) leave the batch at once, so that jobs
//! join and leave at every step.
//!
//! Bytes that may begin a stop sequence are held back until they cannot, so
//! that a stop sequence never reaches the client; the returned tokens are
//! the ones counted in `usage` and in the token-usage metric.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use lens_fallbacks::semconv;
use lens_fallbacks::{KeyValue, RemoteContext};
use megatron_telemetry::inference::{self as telemetry, RequestValues, ServerMetrics};
use megatron_telemetry::taxonomy;
use tokio::sync::mpsc::UnboundedSender;

use crate::lm::{InferenceModel, sample_printable};

/// What the engine sends back for one choice.
#[derive(Debug)]
pub(crate) enum Event {
    /// Generated text (one or more bytes).
    Text { index: usize, text: Vec<u8> },
    /// The choice is finished.
    Done { index: usize, finish_reason: &'static str, prompt_tokens: u64, completion_tokens: u64 },
    /// The choice failed (the server is shutting down).
    Failed { message: String },
}

/// One choice of one request.
pub(crate) struct Job {
    pub(crate) index: usize,
    pub(crate) prompt: Vec<u8>,
    pub(crate) max_tokens: u64,
    pub(crate) temperature: f32,
    pub(crate) top_p: f32,
    pub(crate) seed: u64,
    pub(crate) stop: Vec<Vec<u8>>,
    pub(crate) events: UnboundedSender<Event>,
    /// The request's GenAI span: the parent of the phase spans and the
    /// target of the step spans' links (the HTTP side ends it).
    pub(crate) span_context: RemoteContext,
    pub(crate) operation: &'static str,
    pub(crate) arrived: Instant,
    pub(crate) accepted_at: SystemTime,
    /// Its place in the queue bound, given back when the job is dropped.
    #[expect(dead_code, reason = "held for its drop, which gives the place back")]
    pub(crate) slot: QueueSlot,
}

/// A job's place in the server's queue bound (`--max-batch-size` plus
/// `--max-queue`): a count taken at admission and given back when the job
/// is dropped, by the engine once it is done with the job (finished, failed,
/// or left by its client while it waited) or by the HTTP side when the
/// engine could not take it. So a client that leaves frees its place only
/// once the engine has dropped its job, prompt and stop sequences included.
pub(crate) struct QueueSlot(Arc<AtomicUsize>);

impl QueueSlot {
    /// A place counted in `count` (already incremented for it).
    pub(crate) fn taken(count: &Arc<AtomicUsize>) -> QueueSlot {
        QueueSlot(Arc::clone(count))
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The engine's settings.
pub(crate) struct EngineConfig {
    pub(crate) max_batch_size: usize,
    pub(crate) max_model_len: usize,
    pub(crate) model_name: String,
    /// Test aid: a pause in every step (`--decode-step-delay-ms`).
    pub(crate) step_delay: Duration,
}

struct Running {
    job: Job,
    generated: Vec<u8>,
    sent: usize,
    rng: u64,
    admitted_at: SystemTime,
    first_token: Option<(Instant, SystemTime)>,
}

fn xorshift(state: &mut u64) -> f32 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 40) as f32 / (1u64 << 24) as f32
}

/// Bytes at the end of `generated` that are a proper prefix of a stop
/// sequence (held back until they are not).
fn held_back(generated: &[u8], stop: &[Vec<u8>]) -> usize {
    stop.iter()
        .map(|sequence| {
            (1..sequence.len().min(generated.len() + 1))
                .rev()
                .find(|&k| generated.ends_with(&sequence[..k]))
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// Runs the engine until `jobs` is closed and every job has finished, or
/// until `abort` is set (then the jobs left fail).
pub(crate) fn run(
    model: &InferenceModel,
    config: &EngineConfig,
    jobs: &Receiver<Job>,
    metrics: &ServerMetrics,
    abort: &Arc<AtomicBool>,
) {
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut running: Vec<Running> = Vec::new();
    let mut closed = false;
    loop {
        if abort.load(Ordering::Acquire) {
            let now = SystemTime::now();
            // Jobs still in the channel were waiting too.
            waiting.extend(std::iter::from_fn(|| jobs.try_recv().ok()));
            for job in waiting.drain(..) {
                metrics.waiting_add(-1);
                queue_span(&job, now);
                fail(job, config, metrics, "the server is shutting down");
            }
            for entry in running.drain(..) {
                metrics.running_add(-1);
                phase_spans(&entry, now);
                fail(entry.job, config, metrics, "the server is shutting down");
            }
            return;
        }
        // Collect new jobs; block only when there is nothing to do.
        if running.is_empty() && waiting.is_empty() {
            if closed {
                return;
            }
            match jobs.recv_timeout(Duration::from_millis(50)) {
                Ok(job) => waiting.push_back(job),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    continue;
                }
            }
        }
        loop {
            match jobs.try_recv() {
                Ok(job) => waiting.push_back(job),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        // Jobs whose client left while they waited: dropped now (their
        // place in the queue with them), not when a place in the batch
        // frees, which a batch of long requests can put off for minutes.
        if waiting.iter().any(|job| job.events.is_closed()) {
            let now = SystemTime::now();
            let (left, kept): (VecDeque<Job>, VecDeque<Job>) =
                waiting.drain(..).partition(|job| job.events.is_closed());
            waiting = kept;
            for job in left {
                metrics.waiting_add(-1);
                queue_span(&job, now);
                retire_cancelled(job, config, metrics);
            }
        }
        // Admit.
        while running.len() < config.max_batch_size {
            let Some(job) = waiting.pop_front() else { break };
            metrics.waiting_add(-1);
            let now = SystemTime::now();
            queue_span(&job, now);
            if job.events.is_closed() {
                retire_cancelled(job, config, metrics);
                continue;
            }
            metrics.running_add(1);
            let rng = job.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            running.push(Running { job, generated: Vec::new(), sent: 0, rng, admitted_at: now, first_token: None });
        }
        if running.is_empty() {
            continue;
        }
        // One step for the whole batch.
        let step = telemetry::step_span(running.iter().map(|r| &r.job.span_context), running.len());
        let contexts: Vec<Vec<u8>> =
            running.iter().map(|r| [r.job.prompt.as_slice(), r.generated.as_slice()].concat()).collect();
        let views: Vec<&[u8]> = contexts.iter().map(Vec::as_slice).collect();
        let logits = model.next_logits(&views);
        if !config.step_delay.is_zero() {
            std::thread::sleep(config.step_delay);
        }
        drop(step);
        let mut finished = Vec::new();
        for (i, (entry, logits)) in running.iter_mut().zip(&logits).enumerate() {
            let mut rng = || xorshift(&mut entry.rng);
            let byte = sample_printable(logits, entry.job.temperature, entry.job.top_p, &mut rng);
            entry.generated.push(byte);
            if entry.first_token.is_none() {
                entry.first_token = Some((Instant::now(), SystemTime::now()));
            }
            let stop_hit = entry.job.stop.iter().find(|s| entry.generated.ends_with(s)).map(Vec::len);
            let length_hit = entry.generated.len() as u64 >= entry.job.max_tokens
                || entry.job.prompt.len() + entry.generated.len() >= config.max_model_len;
            let keep = match stop_hit {
                Some(stop_len) => entry.generated.len() - stop_len,
                None if length_hit => entry.generated.len(),
                None => entry.generated.len() - held_back(&entry.generated, &entry.job.stop),
            };
            if keep > entry.sent {
                let text = entry.generated[entry.sent..keep].to_vec();
                entry.sent = keep;
                if entry.job.events.send(Event::Text { index: entry.job.index, text }).is_err() {
                    finished.push((i, None));
                    continue;
                }
            }
            if stop_hit.is_some() {
                finished.push((i, Some("stop")));
            } else if length_hit {
                finished.push((i, Some("length")));
            }
        }
        for (i, reason) in finished.into_iter().rev() {
            let entry = running.swap_remove(i);
            metrics.running_add(-1);
            match reason {
                // A client that left while its last bytes were held back
                // (a stop sequence then matched, with nothing more to
                // send) is a request that ended early, as one that left
                // mid-stream: its duration with error.type, nothing else.
                Some(reason) if !entry.job.events.is_closed() => retire(entry, reason, config, metrics),
                _ => {
                    phase_spans(&entry, SystemTime::now());
                    retire_cancelled(entry.job, config, metrics);
                }
            }
        }
    }
}

/// The request's wait in the queue, from its acceptance to `until` (its
/// admission, or the end of a request that was never admitted).
fn queue_span(job: &Job, until: SystemTime) {
    telemetry::phase_span(&taxonomy::INFERENCE_QUEUE, &job.span_context, job.accepted_at, until, []);
}

/// The request's prefill (admission to first token) and decode (first
/// token to `end`) spans, whatever ended it (its end, the client leaving,
/// the server's shutdown), once it has a first token; the decode span's
/// output tokens are those sent to the client.
fn phase_spans(entry: &Running, end: SystemTime) {
    let Some((_, first_at)) = entry.first_token else { return };
    telemetry::phase_span(
        &taxonomy::INFERENCE_PREFILL,
        &entry.job.span_context,
        entry.admitted_at,
        first_at,
        [KeyValue::new(semconv::GENAI_USAGE_INPUT_TOKENS, entry.job.prompt.len() as i64)],
    );
    telemetry::phase_span(
        &taxonomy::INFERENCE_DECODE,
        &entry.job.span_context,
        first_at,
        end,
        [KeyValue::new(semconv::GENAI_USAGE_OUTPUT_TOKENS, entry.sent as i64)],
    );
}

fn retire(entry: Running, reason: &'static str, config: &EngineConfig, metrics: &ServerMetrics) {
    let (end_instant, end) = (Instant::now(), SystemTime::now());
    phase_spans(&entry, end);
    let Running { job, sent, first_token, generated, .. } = entry;
    let output_tokens = sent as u64;
    let input_tokens = job.prompt.len() as u64;
    let tokens = Tokens { returned: output_tokens, generated: generated.len() as u64 };
    let (ttft, tpot) = latencies(job.arrived, first_token.map(|(at, _)| at), end_instant, tokens);
    metrics.record_request(&RequestValues {
        operation: job.operation,
        model: &config.model_name,
        duration_s: end_instant.duration_since(job.arrived).as_secs_f64(),
        time_to_first_token_s: ttft,
        time_per_output_token_s: tpot,
        input_tokens,
        output_tokens,
    });
    let _ = job.events.send(Event::Done {
        index: job.index,
        finish_reason: reason,
        prompt_tokens: input_tokens,
        completion_tokens: output_tokens,
    });
}

/// A finished request's tokens: those it returned, and those generated
/// (more when a stop sequence matched: its tokens were generated, then cut).
#[derive(Clone, Copy)]
struct Tokens {
    returned: u64,
    generated: u64,
}

/// A finished request's time to its first output token and time per output
/// token after the first, in seconds, from its arrival, its first generated
/// token and its end: no time to first token when it returned no token (a
/// stop sequence at the start, whose first token was generated but held
/// back), and no time per output token when it returned fewer than two.
/// The time per token divides the decoding time by the tokens generated in
/// it, the cut stop sequence's included.
fn latencies(
    arrived: Instant,
    first_token: Option<Instant>,
    end: Instant,
    tokens: Tokens,
) -> (Option<f64>, Option<f64>) {
    let ttft = first_token.filter(|_| tokens.returned > 0).map(|at| at.duration_since(arrived).as_secs_f64());
    let tpot = match first_token {
        Some(at) if tokens.returned > 1 => {
            Some(end.duration_since(at).as_secs_f64() / (tokens.generated.max(tokens.returned) - 1) as f64)
        }
        _ => None,
    };
    (ttft, tpot)
}

/// The client went away: the job leaves the queue or the batch (the HTTP
/// side, whose receiver is gone, has ended the request's spans as
/// cancelled), and its duration is recorded with `error.type`.
fn retire_cancelled(job: Job, config: &EngineConfig, metrics: &ServerMetrics) {
    let duration = job.arrived.elapsed().as_secs_f64();
    metrics.record_ended_early(job.operation, &config.model_name, duration, "client_disconnected");
}

/// The server gave up on the job (shutdown's drain timed out); a job whose
/// client had left already ended for that reason.
fn fail(job: Job, config: &EngineConfig, metrics: &ServerMetrics, message: &str) {
    let duration = job.arrived.elapsed().as_secs_f64();
    let why = if job.events.is_closed() { "client_disconnected" } else { "shutting_down" };
    metrics.record_ended_early(job.operation, &config.model_name, duration, why);
    let _ = job.events.send(Event::Failed { message: message.to_string() });
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Tokens, held_back, latencies};

    /// A request that returned no token (a stop sequence matched its first
    /// token) records no time to first token and no time per output token;
    /// one token gives the first only; more give both, the time per token
    /// over the tokens generated after the first.
    #[test]
    fn time_to_first_token_needs_a_returned_token() {
        let arrived = Instant::now();
        let first = arrived + Duration::from_millis(30);
        let end = first + Duration::from_millis(40);
        let tokens = |returned, generated| Tokens { returned, generated };
        assert_eq!(latencies(arrived, Some(first), end, tokens(0, 3)), (None, None));
        assert_eq!(latencies(arrived, None, end, tokens(0, 0)), (None, None));
        let (ttft, tpot) = latencies(arrived, Some(first), end, tokens(1, 1));
        assert!((ttft.unwrap() - 0.030).abs() < 1e-9, "{ttft:?}");
        assert_eq!(tpot, None);
        let (ttft, tpot) = latencies(arrived, Some(first), end, tokens(5, 5));
        assert!((ttft.unwrap() - 0.030).abs() < 1e-9, "{ttft:?}");
        assert!((tpot.unwrap() - 0.010).abs() < 1e-9, "40 ms over 4 tokens after the first: {tpot:?}");
        // A stop sequence of three tokens cut from eight generated: the
        // 40 ms decoded seven tokens after the first, not four.
        let (_, tpot) = latencies(arrived, Some(first), end, tokens(5, 8));
        assert!((tpot.unwrap() - 0.040 / 7.0).abs() < 1e-9, "40 ms over 7 generated tokens: {tpot:?}");
    }

    #[test]
    fn a_partial_stop_sequence_is_held_back_until_it_cannot_match() {
        let stop = vec![b"END".to_vec()];
        assert_eq!(held_back(b"abcE", &stop), 1);
        assert_eq!(held_back(b"abcEN", &stop), 2);
        assert_eq!(held_back(b"abcEX", &stop), 0);
        assert_eq!(held_back(b"abc", &[]), 0);
    }
}
