//! One rank's training run: startup, the training loop with its optional
//! phases (evaluation, sniff tests, manual gc, checkpoints), and the result
//! that the summary reports.
//!
//! # Schedule
//!
//! Each iteration runs the pipeline schedule "all forward, then all
//! backward" (GPipe): every microbatch goes forward through the stages, then
//! every microbatch comes back. It is simpler than Megatron's 1F1B and
//! computes the same gradients. Activations travel to the next stage and
//! gradients to the previous one in point-to-point messages that carry the
//! sender's span context. Then the data-parallel ranks all-reduce their
//! gradients, and one small all-reduce over the whole world combines the
//! loss, the squared gradient norm, the "stop" requests of graceful signal
//! handling and the "async save done" flags, so that every rank takes the
//! same decisions (skip the step, stop, finalize a save) without further
//! communication. A step whose loss or gradient norm is not finite is
//! skipped: no update (the learning-rate schedule does not advance either),
//! counted in `skipped_iterations`.
//!
//! Point-to-point receives happen before a microbatch's forward (or
//! backward) step and sends after it, inside the forward-backward schedule,
//! as Megatron's schedules do; with `--fine-grained-activation-offloading`
//! each microbatch's saved activations move to a side buffer between its
//! forward and backward steps.
//!
//! # Optional phases
//!
//! Each of these runs only with its flag, and does real work:
//! `--check-weight-hash-across-dp-replicas-interval` (hash this rank's
//! weights, all-gather the hashes over the data-parallel group, fail on a
//! mismatch: at startup and every N iterations), `--enable-cuda-graph` (a
//! one-time capture at the end of the warm-up; nothing is captured, on the
//! CPU or on the GPU: docs/simulator.md says so), `--manual-gc` and `--fp8-format` (give freed heap memory back to
//! the operating system, `malloc_trim`, where Megatron calls `gc.collect()`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use megatron_telemetry::attributes;
use megatron_telemetry::metrics::{LM_LOSS_KEY, select_loss};
use megatron_telemetry::pipeline::{self, Direction};
use megatron_telemetry::taxonomy as tx;
use megatron_telemetry::workers;

use crate::checkpoint::{self, PendingSave, RankState};
use crate::cli::Args;
use crate::comm::{Comm, CommError, tag};
use crate::config::{Coords, Layout, OptimizerKind};
use crate::corpus::Corpus;
use crate::device::{self, Device};
use crate::insight::{InsightSetup, RankInsight};
use crate::model::{self, LayerKind, Offloaded, Optimizer, Saved, Split, Stage, cross_entropy, learning_rate};
use crate::outcome::{ExitReason, Outcome};
use crate::output;
use crate::signals::StopFlag;
use crate::telemetry::{MetricValues, Telemetry};
use lens_training::PendingCheckpoint;
use lens_training::phases::Phase;

/// Why a rank stopped with an error.
#[derive(Debug)]
pub(crate) struct RankError {
    message: String,
    /// The error is in the input (a `--load` checkpoint), not the run: exit status 2.
    pub(crate) bad_input: bool,
}

impl RankError {
    /// A failure during the run (exit status 1).
    pub(crate) fn new(message: impl Into<String>) -> RankError {
        RankError { message: message.into(), bad_input: false }
    }
}

impl std::fmt::Display for RankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<CommError> for RankError {
    fn from(error: CommError) -> RankError {
        RankError::new(error.to_string())
    }
}

impl From<checkpoint::LoadError> for RankError {
    fn from(error: checkpoint::LoadError) -> RankError {
        RankError { message: error.to_string(), bad_input: true }
    }
}

struct Groups {
    world: Vec<u32>,
    tensor: Vec<u32>,
    data: Vec<u32>,
    previous: Option<u32>,
    next: Option<u32>,
}

/// The control values all-reduced once per iteration.
const CONTROL_GRAD_SUMSQ: usize = 0;
const CONTROL_LOSS: usize = 1;
const CONTROL_STOP: usize = 2;
const CONTROL_SAVE_DONE: usize = 3;

/// One rank's training run.
pub(crate) struct Trainer {
    args: Args,
    layout: Layout,
    coords: Coords,
    comm: Comm,
    device: Box<dyn Device>,
    telemetry: Telemetry,
    stop_requested: StopFlag,
    groups: Groups,
    kinds: Vec<LayerKind>,
    stage: Stage,
    optimizer: Optimizer,
    data: Corpus,
    microbatches: u64,
    normaliser: f64,
    iteration: u64,
    skipped: u64,
    pending_save: Option<PendingSave>,
    save_ready: bool,
    call_index: u64,
    saves_done: u64,
    last_saved: Option<u64>,
    outcome_checkpoints: Vec<(u64, PathBuf)>,
    heartbeat: checkpoint::Heartbeat,
    /// The asynchronous save in flight, as goodput knows it (finalized with
    /// `pending_save`).
    pending_checkpoint: Option<PendingCheckpoint>,
    insight: RankInsight,
}

impl Trainer {
    /// A trainer for this rank; nothing runs until [`Trainer::run`].
    pub(crate) fn new(
        args: Args,
        layout: Layout,
        comm: Comm,
        device: Box<dyn Device>,
        telemetry: Telemetry,
        stop_requested: StopFlag,
        peak_tflops: Option<f64>,
    ) -> Trainer {
        let mut comm = comm;
        let rank = comm.rank();
        let coords = layout.coords(rank);
        let tokens = args.global_batch_size * args.seq_length;
        let insight = RankInsight::new(
            &telemetry,
            InsightSetup {
                stragglers: &args.inject_straggler,
                hangs: &args.inject_hang,
                kills: &args.inject_kill,
                rank,
                local_rank: telemetry.local_rank(),
                coords,
                world: layout.world(),
                flops_per_iteration: model::training_flops_per_token(args.num_layers, args.hidden_size) as f64
                    * tokens as f64,
                save: args.save.as_deref(),
                peak_tflops,
                control_delay: args.inject_control_delay.iter().find(|(r, _)| *r == rank).map(|(_, i)| *i),
            },
        );
        comm.set_phases(insight.phases().clone());
        let at = |c: Coords| layout.rank(c);
        let groups = Groups {
            world: (0..layout.world()).collect(),
            tensor: (0..layout.tp).map(|tp| at(Coords { tp, ..coords })).collect(),
            data: (0..layout.dp).map(|dp| at(Coords { dp, ..coords })).collect(),
            previous: (coords.pp > 0).then(|| at(Coords { pp: coords.pp - 1, ..coords })),
            next: (coords.pp + 1 < layout.pp).then(|| at(Coords { pp: coords.pp + 1, ..coords })),
        };
        let (hidden, seq) = (args.hidden_size as usize, args.seq_length as usize);
        let kinds = LayerKind::from_pattern(args.hybrid_override_pattern.as_deref(), args.num_layers);
        // Empty until startup builds them (in `megatron.startup.model_init`
        // and `megatron.startup.dataloader`).
        let stage = Stage::new(args.seed, &[], hidden, seq, 1, 0, 1, 0);
        let optimizer = Optimizer::new(false, 0);
        let data = Corpus::default();
        let microbatches = args.num_microbatches(layout);
        let normaliser = (args.global_batch_size * args.seq_length) as f64;
        let heartbeat = checkpoint::Heartbeat::new(args.save.as_deref(), &telemetry.run_id(), rank);
        Trainer {
            args,
            layout,
            coords,
            comm,
            device,
            telemetry,
            stop_requested,
            groups,
            kinds,
            stage,
            optimizer,
            data,
            microbatches,
            normaliser,
            iteration: 0,
            skipped: 0,
            pending_save: None,
            save_ready: false,
            call_index: 0,
            saves_done: 0,
            last_saved: None,
            outcome_checkpoints: Vec::new(),
            heartbeat,
            pending_checkpoint: None,
            insight,
        }
    }

    /// The run's goodput totals now (`None` with telemetry off), and the latest MFU.
    pub(crate) fn goodput(&self) -> (Option<lens_training::goodput::GoodputTotals>, Option<f64>) {
        let training = self.insight.training();
        (training.totals(), training.mfu())
    }

    fn rank(&self) -> u32 {
        self.comm.rank()
    }

    fn is_last_stage(&self) -> bool {
        self.groups.next.is_none()
    }

    /// Startup (model init, checkpoint load, data loader, sniff test), then
    /// the training loop. Telemetry is shut down by the caller.
    pub(crate) fn run(&mut self) -> Result<Outcome, RankError> {
        self.startup()?;
        self.telemetry.begin_training_loop(self.args.save_interval);
        self.insight.training().loop_started();
        let outcome = self.train_loop();
        self.insight.training().stop_watchdog();
        self.telemetry.end_training_loop();
        outcome
    }

    fn startup(&mut self) -> Result<(), RankError> {
        {
            let _model_init = self.telemetry.span(&tx::STARTUP_MODEL_INIT, []);
            let (layout, coords) = (self.layout, self.coords);
            let hidden = self.args.hidden_size as usize;
            let seq = self.args.seq_length as usize;
            self.stage =
                Stage::new(self.args.seed, &self.kinds, hidden, seq, layout.pp, coords.pp, layout.tp, coords.tp);
            self.optimizer = Optimizer::new(self.args.optimizer == OptimizerKind::Adam, self.stage.params.len());
            if let Some(root) = self.args.load.clone() {
                let training = self.insight.training();
                let load = training.checkpoint_load();
                let iteration = checkpoint::read_tracker(&root)?;
                let state = {
                    let _read = self.telemetry.span(&tx::CHECKPOINT_LOAD_IO_READ, []);
                    let expected = checkpoint::Expected {
                        iteration,
                        rank: self.rank(),
                        layout: self.layout,
                        num_layers: self.args.num_layers,
                        hidden_size: self.args.hidden_size,
                    };
                    checkpoint::read_rank(&root, expected)?
                };
                // The mixers have no parameters, so the weights would load
                // into layers of other kinds: another model, refused as one.
                // (The sequence length may change: no parameter depends on it.)
                let pattern =
                    |p: Option<&str>| p.map_or_else(|| "none (every layer a transformer)".into(), |p| format!("{p:?}"));
                let saved_kinds =
                    LayerKind::from_pattern(state.hybrid_override_pattern.as_deref(), self.args.num_layers);
                if saved_kinds != self.kinds {
                    return Err(RankError::from(checkpoint::LoadError {
                        path: root.clone(),
                        problem: format!(
                            "saved with --hybrid-override-pattern {}, this run has {} (the layers' kinds must match)",
                            pattern(state.hybrid_override_pattern.as_deref()),
                            pattern(self.args.hybrid_override_pattern.as_deref())
                        ),
                    }));
                }
                if state.params.len() != self.stage.params.len() || state.m.len() != self.optimizer.m.len() {
                    return Err(RankError::from(checkpoint::LoadError {
                        path: root.clone(),
                        problem: format!(
                            "the checkpoint of rank {} has {} parameters and {} moments, this run needs {} and {} \
                             (was it saved with another --optimizer?)",
                            self.rank(),
                            state.params.len(),
                            state.m.len(),
                            self.stage.params.len(),
                            self.optimizer.m.len()
                        ),
                    }));
                }
                self.stage.params = state.params;
                self.optimizer.m = state.m;
                self.optimizer.v = state.v;
                self.optimizer.steps = state.optimizer_steps;
                self.iteration = state.iteration;
                self.skipped = state.skipped_iterations;
                load.resumed(&root, state.iteration);
            }
        }
        {
            // The loader's work is generating the corpus the samples are cut from.
            let _dataloader = self.telemetry.span(&tx::STARTUP_DATALOADER, []);
            self.data = Corpus::new(self.args.seed, self.args.seq_length as usize);
            if self.rank() == 0 {
                output::note(&format!(
                    "corpus: {} bytes of synthetic text from seed {}, single-byte entropy {:.4} nats \
                     (the lm loss is cross-entropy in nats)",
                    self.data.train_text().len(),
                    self.args.seed,
                    self.data.unigram_entropy_nats()
                ));
            }
        }
        if self.args.gpu_sniff_test_interval.is_some() {
            let span = self.telemetry.span(&tx::STARTUP_SNIFF_TEST, []);
            attributes::set_sniff_test_tag(&span, None);
            device::sniff_test(self.device.as_ref()).map_err(|e| RankError::new(format!("sniff test failed: {e}")))?;
        }
        if self.args.check_weight_hash_across_dp_replicas_interval.is_some() {
            let _check = self.telemetry.span(&tx::STARTUP_WEIGHT_HASH_CHECK, []);
            self.check_weight_hash()?;
        }
        Ok(())
    }

    /// Checks that every data-parallel replica of this rank's shard holds
    /// bit-identical weights: a 64-bit FNV-1a hash of the parameters,
    /// all-gathered over the data-parallel group (four exact 16-bit pieces
    /// per rank), compared.
    fn check_weight_hash(&mut self) -> Result<(), RankError> {
        let mut hash = 0xcbf2_9ce4_8422_2325_u64;
        for byte in self.stage.params.iter().flat_map(|p| p.to_le_bytes()) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let pieces: Vec<f32> = (0..4).map(|i| ((hash >> (16 * i)) & 0xffff) as f32).collect();
        let group = self.groups.data.clone();
        let all = self.comm.all_gather(&group, &pieces)?;
        for (replica, theirs) in all.chunks_exact(4).enumerate() {
            if theirs != pieces.as_slice() {
                let theirs = theirs.iter().enumerate().fold(0_u64, |h, (i, p)| h | ((*p as u64) << (16 * i)));
                return Err(RankError::new(format!(
                    "weight hash check at iteration {}: rank {} holds weights with hash {hash:016x}, its \
                     data-parallel replica {replica} (rank {}) {theirs:016x}",
                    self.iteration,
                    self.rank(),
                    group[replica]
                )));
            }
        }
        Ok(())
    }

    /// The forward pre-hook's check: this rank's parameters are all finite.
    fn check_parameters_ready(&self) -> Result<(), RankError> {
        match self.stage.params.iter().position(|p| !p.is_finite()) {
            None => Ok(()),
            Some(index) => Err(RankError::new(format!(
                "rank {}: parameter {index} is {} after iteration {}: the forward pre-hook refuses to run the next forward",
                self.rank(),
                self.stage.params[index],
                self.iteration
            ))),
        }
    }

    fn train_loop(&mut self) -> Result<Outcome, RankError> {
        let start_iteration = self.iteration;
        let mut iterations = Vec::new();
        let mut log_losses = Vec::new();
        let mut eval_losses = Vec::new();
        let mut interval_losses: Vec<f64> = Vec::new();
        let mut interval_step_ms: Vec<f64> = Vec::new();
        let mut interval_skipped = 0_u64;
        let mut exit_reason = ExitReason::Completed;
        let mut loop_counter = 0_u64;
        let tokens = self.args.global_batch_size * self.args.seq_length;
        let flops = model::training_flops_per_token(self.args.num_layers, self.args.hidden_size) as f64 * tokens as f64;
        let mut progress = output::Progress::new(self.rank() + 1 == self.layout.world(), self.args.train_iters);
        // Whole iterations: the wall time from one iteration boundary to the
        // next (heartbeat, step, report, log, metric records, goodput, the
        // optional phases and saves), beside the step time alone.
        let mut iteration_times_ms = Vec::new();
        let loop_started_cpu = crate::cpu::process_cpu();

        while self.iteration < self.args.train_iters {
            // A SIGTERM being handled ends the rank: no iteration starts.
            crate::comm::wait_while_terminating();
            let boundary = Instant::now();
            let save_interval = self.args.save_interval.unwrap_or(0);
            self.telemetry.loop_pass(self.iteration);
            self.insight.begin_iteration(self.iteration);
            let training = self.insight.training();
            {
                let _heartbeat = self.telemetry.ft_heartbeat(self.iteration);
                self.heartbeat.beat(self.iteration);
            }
            {
                let span = self.telemetry.save_finalize(self.iteration);
                if self.save_ready {
                    let finalized = self.finalize_async_save()?;
                    attributes::set_call_indices(&span, &finalized);
                }
            }
            if self.args.enable_cuda_graph && loop_counter == self.args.cuda_graph_warmup_steps {
                let _capture = self.telemetry.cuda_graph_capture(self.iteration);
                self.device.capture_step();
            }

            let step = {
                // One call announces the iteration: its spans, the phases'
                // iteration boundary, goodput and the per-rank counters
                // when the guard drops.
                let iteration = training.iteration(self.iteration);
                let step = match self.train_step() {
                    Ok(step) => step,
                    Err(error) => {
                        iteration.abandon();
                        return Err(error);
                    }
                };
                iteration.span().set_attribute(tx::attr::SKIPPED, step.skipped);
                // The step time the diagnosis counts (MFU, the watchdog) is
                // the one the loop reports.
                (step, iteration.complete())
            };
            let (step, step_time) = step;
            let step_ms = step_time.as_secs_f64() * 1e3;
            if loop_counter == 0 {
                // Megatron re-enables the parameter-gather hook here; the
                // simulator has no overlapped gather, so the hook's work is
                // its readiness check: every parameter of this rank finite
                // before the next forward.
                let _hook = self.telemetry.span(&tx::TRAIN_FORWARD_PRE_HOOK, []);
                self.check_parameters_ready()?;
            }
            self.iteration += 1;
            let iteration = self.iteration;
            let loss = (!step.skipped).then_some(step.loss);

            // Reporting (every iteration, as Megatron's training_log).
            {
                let _report = self.telemetry.span(&tx::TRAIN_ITERATION_REPORT, []);
                let log_now = iteration.is_multiple_of(self.args.log_interval) || iteration == self.args.train_iters;
                let params_norm = if self.args.log_params_norm && log_now {
                    let _norm = self.telemetry.span(&tx::TRAIN_PARAMS_NORM, []);
                    Some(self.params_norm()?)
                } else {
                    None
                };
                let _log = self.telemetry.span(&tx::TRAIN_LOG, []);
                // Megatron's `training_log`: every iteration, the loss and
                // skip accounting; at log intervals, the report.
                iterations.push((iteration, step_ms, loss));
                interval_step_ms.push(step_ms);
                match loss {
                    Some(loss) => interval_losses.push(loss),
                    None => {
                        self.skipped += 1;
                        interval_skipped += 1;
                    }
                }
                // Megatron records its metrics at each log interval and at
                // the first iteration of the process (a snapshot of the
                // interval so far, which goes on accumulating; its skipped
                // iterations are counted once, at the interval's end); the
                // report itself is printed at log intervals only.
                let first_of_process = iteration == start_iteration + 1;
                if log_now || first_of_process {
                    let mean_loss = (!interval_losses.is_empty())
                        .then(|| interval_losses.iter().sum::<f64>() / interval_losses.len() as f64);
                    let mean_ms = interval_step_ms.iter().sum::<f64>() / interval_step_ms.len().max(1) as f64;
                    let tokens_per_sec = tokens as f64 / (mean_ms / 1e3);
                    let tflops = flops / (mean_ms / 1e3) / 1e12 / f64::from(self.layout.world());
                    self.telemetry.record(&MetricValues {
                        step_duration_ms: Some(mean_ms),
                        // Megatron's loss dict has one key, `lm loss`.
                        loss: mean_loss.and_then(|l| select_loss(&[(LM_LOSS_KEY, l)]).value()),
                        throughput_tflops: Some(tflops),
                        grad_norm: step.grad_norm.is_finite().then_some(step.grad_norm),
                        skipped_iters: log_now.then_some(interval_skipped),
                        learning_rate: Some(step.learning_rate),
                        tokens_per_sec: Some(tokens_per_sec),
                        memory_allocated_gb: self
                            .device
                            .peak_memory_bytes()
                            .map(|b| b as f64 / (1024.0 * 1024.0 * 1024.0)),
                    });
                    if log_now {
                        log_losses.push((iteration, mean_loss));
                        progress.log(&output::LogLine {
                            iteration,
                            loss: mean_loss,
                            step_ms: mean_ms,
                            tokens_per_sec,
                            learning_rate: step.learning_rate,
                            grad_norm: step.grad_norm,
                            skipped: interval_skipped,
                            params_norm,
                        });
                        interval_losses.clear();
                        interval_step_ms.clear();
                        interval_skipped = 0;
                        training.log_interval();
                    }
                }
            }

            // Nor does the iteration's evaluation or save.
            crate::comm::wait_while_terminating();
            if self.args.inject_crash_at == Some(iteration) {
                // Like a node failure: no save, no final record; the caller
                // flushes telemetry (open spans truncated) and exits 1.
                return Err(RankError::new(format!("injected crash after iteration {iteration} (--inject-crash-at)")));
            }
            if let Some(every) = self.args.eval_interval
                && iteration.is_multiple_of(every)
            {
                let loss = self.evaluate()?;
                eval_losses.push((iteration, loss));
                progress.eval(iteration, loss);
            }
            if let Some(every) = self.args.gpu_sniff_test_interval
                && iteration.is_multiple_of(every)
            {
                let span = self.telemetry.span(&tx::TRAIN_SNIFF_TEST, []);
                attributes::set_sniff_test_tag(&span, Some(iteration));
                device::sniff_test(self.device.as_ref())
                    .map_err(|e| RankError::new(format!("sniff test failed: {e}")))?;
            }
            if self.args.manual_gc
                && self.args.manual_gc_interval > 0
                && iteration.is_multiple_of(self.args.manual_gc_interval)
            {
                let _gc = self.telemetry.span(&tx::TRAIN_GC_COLLECT, []);
                trim_heap();
            }
            if let Some(every) = self.args.check_weight_hash_across_dp_replicas_interval
                && iteration.is_multiple_of(every)
            {
                // Megatron's periodic check has no span of its own.
                self.check_weight_hash()?;
            }
            if save_interval > 0 && iteration.is_multiple_of(save_interval) {
                self.save(iteration)?;
            }
            iteration_times_ms.push(boundary.elapsed().as_secs_f64() * 1e3);
            if step.stop {
                exit_reason = ExitReason::Signal;
                break;
            }
            loop_counter += 1;
        }

        if self.args.save.is_some() && self.iteration > 0 && self.last_saved != Some(self.iteration) {
            self.save(self.iteration)?;
        }
        {
            let span = self.telemetry.span(&tx::CHECKPOINT_EXIT_FINALIZE, []);
            if self.pending_save.is_some() {
                let finalized = self.finalize_async_save()?;
                attributes::set_call_indices(&span, &finalized);
            }
        }
        self.insight.training().finish();
        // Nobody leaves while another rank may still need it.
        self.comm.barrier(&self.groups.world.clone())?;
        self.heartbeat.finish();

        Ok(Outcome {
            start_iteration,
            final_iteration: self.iteration,
            iterations,
            iteration_times_ms,
            loop_started_cpu,
            log_losses,
            eval_losses,
            skipped_iterations: self.skipped,
            checkpoints: std::mem::take(&mut self.outcome_checkpoints),
            exit_reason,
            flops_per_iteration: flops,
            tokens_per_iteration: tokens,
            corpus_entropy_nats: self.data.unigram_entropy_nats(),
            peak_memory_bytes: self.device.peak_memory_bytes(),
            device: self.device.name(),
            messages_sent: self.comm.messages_sent(),
        })
    }

    /// The first sample of microbatch `microbatch` of this data-parallel rank.
    fn first_sample(&self, step: u64, microbatch: u64) -> u64 {
        step * self.args.global_batch_size
            + u64::from(self.coords.dp) * self.microbatches * self.args.micro_batch_size
            + microbatch * self.args.micro_batch_size
    }

    fn send_pipeline(&mut self, forward: bool, microbatch: u64, values: &[f32]) -> Result<(), RankError> {
        let (def, peer, frame_tag) = if forward {
            (&tx::P2P_SEND_FORWARD, self.groups.next, tag::FORWARD)
        } else {
            (&tx::P2P_SEND_BACKWARD, self.groups.previous, tag::BACKWARD)
        };
        let Some(peer) = peer else { return Ok(()) };
        let _span = self.telemetry.span(def, []);
        let context = pipeline::outgoing_context();
        let mut payload = Vec::with_capacity(12 + context.len() + values.len() * 4);
        payload.extend_from_slice(&microbatch.to_le_bytes());
        payload.extend_from_slice(&(context.len() as u32).to_le_bytes());
        payload.extend_from_slice(&context);
        payload.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        self.comm.send(peer, frame_tag, &payload)?;
        Ok(())
    }

    fn recv_pipeline(&mut self, forward: bool, microbatch: u64) -> Result<Vec<f32>, RankError> {
        let (def, direction, peer, frame_tag, sender_stage) = if forward {
            (
                &tx::P2P_RECV_FORWARD,
                Direction::Forward,
                self.groups.previous,
                tag::FORWARD,
                self.coords.pp.wrapping_sub(1),
            )
        } else {
            (&tx::P2P_RECV_BACKWARD, Direction::Backward, self.groups.next, tag::BACKWARD, self.coords.pp + 1)
        };
        let peer = peer.ok_or_else(|| RankError::new("pipeline receive without a neighbour"))?;
        let _span = self.telemetry.span(def, []);
        // The linked span starts with the wait: the sender's context, its
        // link, only arrives inside the message.
        let waiting = SystemTime::now();
        let payload = {
            let _wait = self.insight.phases().enter_wait(Phase::PpWait);
            self.comm.recv(peer, frame_tag)?
        };
        let bad = || RankError::new(format!("rank {}: malformed pipeline message from rank {peer}", self.rank()));
        let got_microbatch = u64::from_le_bytes(payload.get(..8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let context_len =
            u32::from_le_bytes(payload.get(8..12).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
        let context = payload.get(12..12 + context_len).ok_or_else(bad)?;
        if got_microbatch != microbatch {
            return Err(RankError::new(format!(
                "rank {}: expected microbatch {microbatch} from rank {peer}, got {got_microbatch}",
                self.rank()
            )));
        }
        let _linked = pipeline::linked_receive(direction, context, waiting, sender_stage, microbatch);
        Ok(payload[12 + context_len..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Forward through this stage's layers; the saved activations. Each
    /// layer's sub-blocks have their spans: the self-attention-like mixer
    /// and the MLP of a transformer layer, the mixer of a Mamba layer (its
    /// projection included). The first stage embeds `tokens`, the others
    /// start from the received `activations`; the last stage ends with the
    /// output projection (the logits).
    fn stage_forward(
        &mut self,
        tokens: Option<&[u8]>,
        mut activations: Vec<f32>,
    ) -> Result<(Vec<f32>, Vec<Saved>), RankError> {
        let mut saved = Vec::with_capacity(self.stage.layers.len() + 2);
        let Trainer { stage, comm, device, telemetry, groups, insight, .. } = self;
        if let Some(tokens) = tokens {
            let (output, keep) =
                stage.embed_forward(device.as_ref(), tokens, |m| tp_all_gather(insight, comm, &groups.tensor, m))?;
            saved.push(keep);
            activations = output;
        }
        for index in 0..stage.layers.len() {
            let slot = stage.layers[index];
            let _layer = telemetry.layer_span(slot.number);
            let gather = |mine: &[f32]| tp_all_gather(insight, comm, &groups.tensor, mine);
            let (output, keep) = match slot.kind {
                LayerKind::Transformer => {
                    let mixed = {
                        let _attention = telemetry.span(&tx::LAYER_SELF_ATTENTION, []);
                        stage.mix_forward(index, activations)
                    };
                    let _mlp = telemetry.span(&tx::LAYER_MLP, []);
                    stage.dense_forward(device.as_ref(), index, mixed, gather)?
                }
                LayerKind::Mamba => {
                    let _mamba = telemetry.span(&tx::LAYER_MAMBA, []);
                    let mixed = stage.mix_forward(index, activations);
                    stage.dense_forward(device.as_ref(), index, mixed, gather)?
                }
            };
            saved.push(keep);
            activations = output;
        }
        if stage.head.is_some() {
            let (logits, keep) = stage
                .head_forward(device.as_ref(), activations, |m| tp_all_gather(insight, comm, &groups.tensor, m))?;
            saved.push(keep);
            activations = logits;
        }
        Ok((activations, saved))
    }

    /// The backward pass of [`Trainer::stage_forward`]: the gradient of the
    /// stage's input (empty on the first stage, whose input is bytes).
    fn stage_backward(&mut self, saved: &[Saved], mut grad: Vec<f32>) -> Result<Vec<f32>, RankError> {
        let Trainer { stage, comm, device, groups, insight, .. } = self;
        let first = usize::from(stage.embedding.is_some());
        if stage.head.is_some() {
            let keep = &saved[first + stage.layers.len()];
            grad = stage
                .head_backward(device.as_ref(), keep, grad, |g| tp_all_reduce(insight, comm, &groups.tensor, g))?;
        }
        for index in (0..stage.layers.len()).rev() {
            let keep = &saved[first + index];
            grad = stage.layer_backward(device.as_ref(), index, keep, grad, |g| {
                tp_all_reduce(insight, comm, &groups.tensor, g)
            })?;
        }
        if stage.embedding.is_some() {
            stage.embed_backward(device.as_ref(), &saved[0], grad);
            grad = Vec::new();
        }
        Ok(grad)
    }

    /// Forward of microbatch `microbatch` of `step` from `split`, as a
    /// pipeline schedule runs it: receive the input from the previous stage,
    /// the forward step (`megatron.microbatch.forward`), send the output to
    /// the next stage. Returns the saved activations and, on the last
    /// stage, the cross-entropy sum and the logits' gradient.
    fn forward_microbatch(
        &mut self,
        split: Split,
        step: u64,
        microbatch: u64,
    ) -> Result<(Vec<Saved>, Option<LossPart>), RankError> {
        let received = match self.groups.previous {
            Some(_) => Some(self.recv_pipeline(true, microbatch)?),
            None => None,
        };
        let (train, inject) = (split == Split::Train, split == Split::Train && microbatch == 0);
        let (output, saved, last) = {
            let _forward = self.telemetry.span(&tx::MICROBATCH_FORWARD, []);
            let first = self.first_sample(step, microbatch);
            let needs_bytes = received.is_none() || self.is_last_stage();
            if train {
                self.insight.enter_compute(Phase::Data, inject);
            }
            let (inputs, targets) = if needs_bytes {
                self.data.batch(split, first, self.args.micro_batch_size)
            } else {
                Default::default()
            };
            if train {
                self.insight.enter_compute(Phase::Forward, inject);
            }
            let (output, saved) = match received {
                Some(received) => self.stage_forward(None, received)?,
                None => self.stage_forward(Some(&inputs), Vec::new())?,
            };
            let last = if self.is_last_stage() {
                let (mut sum, mut grad) = cross_entropy(&output, &targets, self.normaliser);
                if split == Split::Train && self.args.inject_nan_at == Some(self.iteration + 1) && microbatch == 0 {
                    sum = f64::NAN;
                    grad.iter_mut().for_each(|g| *g = f32::NAN);
                }
                Some((sum, grad))
            } else {
                None
            };
            (output, saved, last)
        };
        if last.is_none() {
            self.send_pipeline(true, microbatch, &output)?;
        }
        Ok((saved, last))
    }

    fn train_step(&mut self) -> Result<StepResult, RankError> {
        // The gradient buffer, zeroed (re-allocated after a save freed it).
        self.stage.grads.clear();
        self.stage.grads.resize(self.stage.params.len(), 0.0);
        let step = self.iteration;
        let mut loss_sum = 0.0_f64;
        {
            let span = self.telemetry.span(&tx::TRAIN_ITERATION_FORWARD_BACKWARD, []);
            attributes::set_num_microbatches(&span, self.microbatches);
            let mut saved_all = Vec::with_capacity(self.microbatches as usize);
            let mut grads_all = Vec::with_capacity(self.microbatches as usize);
            for microbatch in 0..self.microbatches {
                let (saved, last) = self.forward_microbatch(Split::Train, step, microbatch)?;
                if let Some((sum, grad)) = last {
                    loss_sum += sum;
                    grads_all.push(grad);
                }
                saved_all.push(if self.args.fine_grained_activation_offloading {
                    let _offload = self.telemetry.span(&tx::ACTIVATION_OFFLOAD, []);
                    Activations::Offloaded(Offloaded::offload(saved))
                } else {
                    Activations::Resident(saved)
                });
            }
            for (microbatch, activations) in saved_all.into_iter().enumerate() {
                let grad = if self.is_last_stage() {
                    std::mem::take(&mut grads_all[microbatch])
                } else {
                    self.recv_pipeline(false, microbatch as u64)?
                };
                let saved = match activations {
                    Activations::Resident(saved) => saved,
                    Activations::Offloaded(offloaded) => {
                        let _reload = self.telemetry.span(&tx::ACTIVATION_RELOAD, []);
                        offloaded.reload()
                    }
                };
                let grad_input = {
                    let _backward = self.telemetry.span(&tx::MICROBATCH_BACKWARD, []);
                    self.insight.enter_compute(Phase::Backward, microbatch == 0);
                    self.stage_backward(&saved, grad)?
                };
                self.send_pipeline(false, microbatch as u64, &grad_input)?;
            }
            if self.args.step_sleep_ms > 0 {
                std::thread::sleep(Duration::from_millis(self.args.step_sleep_ms));
            }
            // The data-parallel all-reduce, launched then waited for:
            // `start` sends this rank's gradients to every replica (nothing
            // to send with DP=1), `finish` receives theirs and sums.
            let group = self.groups.data.clone();
            {
                let _start = self.telemetry.span(&tx::GRAD_SYNC_START, []);
                self.comm.all_reduce_start(&group, &self.stage.grads)?;
            }
            {
                let _finish = self.telemetry.span(&tx::GRAD_SYNC_FINISH, []);
                let _wait = self.insight.phases().enter(Phase::DpWait);
                self.comm.all_reduce_finish(&group, &mut self.stage.grads)?;
            }
        }

        let mut control = [0.0_f64; 4];
        if self.coords.dp == 0 {
            control[CONTROL_GRAD_SUMSQ] = self.stage.grads.iter().map(|g| f64::from(*g) * f64::from(*g)).sum();
        }
        if self.is_last_stage() && self.coords.tp == 0 {
            control[CONTROL_LOSS] = loss_sum;
        }
        control[CONTROL_STOP] = f64::from(u8::from(self.stop_requested.load(Ordering::Relaxed)));
        control[CONTROL_SAVE_DONE] = f64::from(u8::from(self.pending_save.as_ref().is_some_and(PendingSave::is_done)));
        let world = self.groups.world.clone();
        {
            // The per-iteration control reduction: a wait like the gradients'.
            let _wait = self.insight.phases().enter(Phase::DpWait);
            self.comm.all_reduce(&world, &mut control)?;
        }
        let loss = control[CONTROL_LOSS] / self.normaliser;
        let grad_norm = control[CONTROL_GRAD_SUMSQ].sqrt();
        let stop = control[CONTROL_STOP] > 0.0;
        self.save_ready = self.pending_save.is_some() && control[CONTROL_SAVE_DONE] >= f64::from(self.layout.world());

        // The scheduler counts optimizer steps, as Megatron's steps only
        // when the update succeeds: a skipped iteration does not advance it.
        let learning_rate = learning_rate(
            (step + 1).saturating_sub(self.skipped),
            self.args.lr,
            self.args.min_lr,
            self.args.lr_warmup_iters,
            self.args.lr_decay_iters.unwrap_or(self.args.train_iters),
            self.args.lr_decay_style,
        );
        let skipped = !(loss.is_finite() && grad_norm.is_finite());
        {
            let span = self.telemetry.span(&tx::TRAIN_ITERATION_OPTIMIZER, []);
            self.insight.enter_compute(Phase::Optimizer, true);
            if !skipped {
                let clip = self.args.clip_grad;
                let scale = if clip > 0.0 && grad_norm > clip { (clip / (grad_norm + 1e-6)) as f32 } else { 1.0 };
                self.optimizer.step(&mut self.stage.params, &self.stage.grads, learning_rate, scale);
            }
            attributes::set_update_successful(&span, !skipped);
            self.insight.phases().mark(Phase::Other);
        }
        Ok(StepResult { loss, grad_norm, learning_rate, skipped, stop })
    }

    fn params_norm(&mut self) -> Result<f64, RankError> {
        let mut sum = [0.0_f64];
        if self.coords.dp == 0 {
            sum[0] = self.stage.params.iter().map(|p| f64::from(*p) * f64::from(*p)).sum();
        }
        let world = self.groups.world.clone();
        self.comm.all_reduce(&world, &mut sum)?;
        Ok(sum[0].sqrt())
    }

    fn evaluate(&mut self) -> Result<f64, RankError> {
        // One call: `megatron.evaluate`, phase `eval`, goodput's evaluation.
        let training = self.insight.training();
        let evaluation = training.evaluation(self.iteration);
        let mut total = [0.0_f64];
        for step in 0..self.args.eval_iters {
            let _step_span = self.telemetry.evaluate_step(step);
            for microbatch in 0..self.microbatches {
                let (_, last) = self.forward_microbatch(Split::Eval, step, microbatch)?;
                if let Some((sum, _)) = last
                    && self.coords.tp == 0
                {
                    total[0] += sum;
                }
            }
        }
        let world = self.groups.world.clone();
        self.comm.all_reduce(&world, &mut total)?;
        attributes::set_eval_iters(evaluation.span(), self.args.eval_iters);
        Ok(total[0] / (self.normaliser * self.args.eval_iters.max(1) as f64))
    }

    fn rank_state(&self, iteration: u64) -> RankState {
        RankState {
            iteration,
            layout: self.layout,
            rank: self.rank(),
            num_layers: self.args.num_layers,
            hidden_size: self.args.hidden_size,
            seq_length: self.args.seq_length,
            hybrid_override_pattern: self.args.hybrid_override_pattern.clone(),
            optimizer_steps: self.optimizer.steps,
            skipped_iterations: self.skipped,
            params: self.stage.params.clone(),
            m: self.optimizer.m.clone(),
            v: self.optimizer.v.clone(),
        }
    }

    fn save(&mut self, iteration: u64) -> Result<(), RankError> {
        let root = self.args.save.clone().ok_or_else(|| RankError::new("save without --save"))?;
        std::fs::create_dir_all(&root).map_err(|e| RankError::new(format!("--save {}: {e}", root.display())))?;
        // One call announces the save: `megatron.checkpoint.exposed_save`,
        // phase `checkpoint`, goodput's save (covering what is pending now).
        let training = self.insight.training();
        let save = training.checkpoint_save(iteration);
        let saved = self.save_blocking(&root, iteration);
        match (&saved, self.args.async_save) {
            // Every rank's file and the tracker are written: the checkpoint
            // is durable.
            (Ok(()), false) => save.durable(),
            // Durable at its finalize.
            (Ok(()), true) => {
                self.pending_checkpoint = Some(save.in_flight());
                if self.args.inject_crash_during_save == Some(iteration) {
                    // Dispatched, not finalized: the checkpoint never becomes durable.
                    let why = format!("{} {iteration}", crate::faults::CRASH_DURING_SAVE_FLAG);
                    crate::faults::die(self.rank(), &format!("{why}: the asynchronous save is in flight"));
                }
            }
            // A failed save keeps nothing.
            (Err(_), _) => save.failed(),
        }
        saved
    }

    fn save_blocking(&mut self, root: &std::path::Path, iteration: u64) -> Result<(), RankError> {
        let root = root.to_path_buf();
        let started = Instant::now();
        {
            // The step's gradient buffer is not needed until the next step
            // (which re-allocates it): its memory goes back before saving.
            let _reclaim = self.telemetry.span(&tx::CHECKPOINT_RECLAIM_MEMORY, []);
            self.stage.grads = Vec::new();
            trim_heap();
        }
        if self.pending_save.is_some() {
            // One asynchronous save at a time: finish the previous one first.
            self.finalize_async_save()?;
        }
        {
            let save_span = self.telemetry.checkpoint_save(iteration);
            let state = {
                let _state_dict = self.telemetry.span(&tx::CHECKPOINT_SAVE_STATE_DICT, []);
                self.rank_state(iteration)
            };
            if self.args.async_save {
                let call_index = self.call_index;
                self.call_index += 1;
                let context = workers::worker_context();
                let worker_root = root.clone();
                let pending = PendingSave::dispatch(call_index, iteration, move || {
                    workers::in_worker_span(&context, &tx::CHECKPOINT_SAVE_IO_WRITE, call_index, || {
                        checkpoint::write_rank(&worker_root, &state)
                    })
                })
                .map_err(|e| RankError::new(format!("starting the async save worker: {e}")))?;
                attributes::set_call_index(&save_span, call_index);
                self.pending_save = Some(pending);
                self.save_ready = false;
            } else {
                let path = {
                    let _write = self.telemetry.span(&tx::CHECKPOINT_SAVE_IO_WRITE, []);
                    checkpoint::write_rank(&root, &state)
                        .map_err(|e| RankError::new(format!("writing the checkpoint of iteration {iteration}: {e}")))?
                };
                self.outcome_checkpoints.push((iteration, path));
            }
        }
        if self.saves_done < 3 {
            // The first few saves report the memory they leave behind, as
            // Megatron's `report_memory`: every rank reads its own, the
            // first data-parallel replica of each model shard prints it.
            let _memory = self.telemetry.span(&tx::CHECKPOINT_REPORT_MEMORY, []);
            let peak = self.device.peak_memory_bytes().map_or(0.0, |b| b as f64 / (1024.0 * 1024.0));
            if self.coords.dp == 0 {
                output::note(&format!(
                    "[Rank {}] after saving iteration {iteration}: peak memory {peak:.1} MiB",
                    self.rank()
                ));
            }
        }
        if self.args.fp8_format.is_some() {
            let _gc = self.telemetry.span(&tx::CHECKPOINT_GC_COLLECT, []);
            trim_heap();
        }
        self.saves_done += 1;
        self.last_saved = Some(iteration);
        {
            // Megatron's `timers.log(['save-checkpoint'])`: every rank's save
            // time, gathered over the world (the cross-rank wait), rank 0
            // reports the minimum and maximum; then the tracker (a
            // synchronous save: every rank's file is written by now).
            let _timers = self.telemetry.span(&tx::CHECKPOINT_TIMERS_LOG, []);
            let world = self.groups.world.clone();
            let times = self.comm.all_gather(&world, &[started.elapsed().as_secs_f32() * 1e3])?;
            if self.rank() == 0 {
                let (min, max) = times.iter().fold((f32::INFINITY, 0.0_f32), |(lo, hi), t| (lo.min(*t), hi.max(*t)));
                output::note(&format!(
                    "(min, max) time across ranks (ms): save-checkpoint of iteration {iteration}: ({min:.2}, {max:.2})"
                ));
            }
            if !self.args.async_save && self.rank() == 0 {
                checkpoint::write_tracker(&root, iteration)
                    .map_err(|e| RankError::new(format!("writing {}: {e}", checkpoint::TRACKER)))?;
            }
        }
        Ok(())
    }

    /// Waits for the pending asynchronous save, waits for every rank's, and
    /// points the tracker at it: the checkpoint is durable, and goodput keeps
    /// what its save covered (the loop is blocked meanwhile: save time).
    /// Returns the finalized call indices.
    fn finalize_async_save(&mut self) -> Result<Vec<u64>, RankError> {
        let Some(pending) = self.pending_save.take() else { return Ok(Vec::new()) };
        // One call: phase `checkpoint` and goodput's save time until the
        // checkpoint is durable (its span is the loop's finalize span).
        let training = self.insight.training();
        let finalize = self.pending_checkpoint.take().map(|checkpoint| training.checkpoint_finalize(checkpoint));
        let (call_index, iteration) = (pending.call_index, pending.iteration);
        let durable = self.wait_and_track(pending);
        self.outcome_checkpoints.push((iteration, durable?));
        if let Some(finalize) = finalize {
            finalize.durable();
        }
        self.save_ready = false;
        Ok(vec![call_index])
    }

    /// An asynchronous save's finalize: this rank's write, every rank's
    /// (a barrier), then the tracker (rank 0). The rank file's path.
    fn wait_and_track(&mut self, pending: PendingSave) -> Result<PathBuf, RankError> {
        let iteration = pending.iteration;
        let path = pending.wait().map_err(RankError::new)?;
        let world = self.groups.world.clone();
        self.comm.barrier(&world)?;
        if self.rank() == 0
            && let Some(root) = &self.args.save
        {
            checkpoint::write_tracker(root, iteration)
                .map_err(|e| RankError::new(format!("writing {}: {e}", checkpoint::TRACKER)))?;
        }
        Ok(path)
    }

    /// Closes the connections to the other ranks (after a successful run).
    pub(crate) fn finish_comm(self) {
        self.comm.finish();
    }

    /// Shuts telemetry down (ends open spans, flushes); the report.
    pub(crate) fn shutdown_telemetry(&mut self) -> lens_fallbacks::ShutdownReport {
        self.telemetry.shutdown()
    }

    /// Where this rank's telemetry went.
    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }
}

/// A microbatch's saved activations between its forward and backward steps.
enum Activations {
    /// In the working set.
    Resident(Vec<Saved>),
    /// In the side buffer (`--fine-grained-activation-offloading`).
    Offloaded(Offloaded),
}

/// A tensor-parallel all-gather of a dense block's columns (the embedding,
/// a layer, the output projection): its blocking wait is `tp_wait`.
fn tp_all_gather(insight: &RankInsight, comm: &mut Comm, group: &[u32], mine: &[f32]) -> Result<Vec<f32>, CommError> {
    let _wait = insight.phases().enter_wait(Phase::TpWait);
    comm.all_gather(group, mine)
}

/// A tensor-parallel all-reduce of an input gradient: its blocking wait is
/// `tp_wait`.
fn tp_all_reduce(insight: &RankInsight, comm: &mut Comm, group: &[u32], grad: &mut [f32]) -> Result<(), CommError> {
    let _wait = insight.phases().enter_wait(Phase::TpWait);
    comm.all_reduce(group, grad)
}

/// Gives freed heap memory back to the operating system (glibc's
/// `malloc_trim`): the simulator's `gc.collect()`. Nothing elsewhere.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The last stage's share of a microbatch's loss: the cross-entropy sum
/// and the logits' gradient.
type LossPart = (f64, Vec<f32>);

struct StepResult {
    loss: f64,
    grad_norm: f64,
    learning_rate: f64,
    skipped: bool,
    stop: bool,
}

/// The trained model read back for inference: these tests train with the
/// loop, so they live with it (the inference side, [`crate::lm`], does not
/// depend on the loop).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::Rendezvous;
    use crate::device::Cpu;
    use crate::lm::InferenceModel;
    use crate::telemetry::RankSetup;
    use clap::Parser as _;
    use lens_fallbacks::identity::RankContext;
    use std::collections::BTreeMap;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// Builds a trainer from `argv` on each of `world` ranks (threads of
    /// this process, connected as the launcher's processes are), rank `r`
    /// on `device(r)`, and runs `body` on it; the results, by rank.
    fn on_ranks<T: Send + 'static>(
        world: u32,
        argv: &[&str],
        device: fn(u32) -> Box<dyn Device>,
        body: fn(u32, &mut Trainer) -> T,
    ) -> Vec<T> {
        let rendezvous =
            Rendezvous { master_addr: "127.0.0.1".into(), master_port: free_port(), deadline: Duration::from_secs(20) };
        let ranks: Vec<_> = (0..world)
            .map(|rank| {
                let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
                let rendezvous = rendezvous.clone();
                std::thread::spawn(move || {
                    let args = Args::parse_from(argv);
                    let layout = args.validate(world, "the test").unwrap();
                    let comm = Comm::connect(rank, world, &rendezvous, Duration::from_secs(20)).unwrap();
                    let context = RankContext { rank, world_size: world, local_rank: rank, node_rank: None };
                    let setup = RankSetup {
                        rank: &context,
                        args: crate::telemetry::ResourceArgs::default(),
                        env: BTreeMap::<String, String>::new(),
                        stamps: Default::default(),
                        graceful_signals: false,
                        checkpoint_dir: None,
                    };
                    let telemetry = Telemetry::setup(&args.otel, setup).unwrap();
                    let stop = crate::signals::StopFlag::default();
                    let mut trainer = Trainer::new(args, layout, comm, device(rank), telemetry, stop, None);
                    let result = body(rank, &mut trainer);
                    trainer.finish_comm();
                    result
                })
            })
            .collect();
        ranks.into_iter().map(|rank| rank.join().unwrap()).collect()
    }

    /// Trains with `extra` flags on `world` ranks ([`on_ranks`]), saving
    /// under a fresh directory; the directory.
    fn train(name: &str, world: u32, extra: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mtsim-lm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let save = dir.to_str().unwrap().to_string();
        let mut argv = vec!["megatron-train-sim", "--hidden-size", "32", "--seq-length", "16", "--train-iters", "6"];
        argv.extend(["--log-interval", "6", "--seed", "11", "--save", &save]);
        argv.extend(extra);
        let finals = on_ranks(
            world,
            &argv,
            |_| Box::new(Cpu),
            |rank, trainer| trainer.run().unwrap_or_else(|e| panic!("rank {rank}: {e}")).final_iteration,
        );
        assert_eq!(finals, vec![6; world as usize]);
        dir
    }

    /// The CPU, [`LATE_OUTPUT_PROJECTION`] slower in the output
    /// projection's product: under TP2 the only one with half the
    /// vocabulary's columns.
    #[cfg(feature = "otel")]
    struct SlowOutputProjection;

    #[cfg(feature = "otel")]
    const LATE_OUTPUT_PROJECTION: Duration = Duration::from_millis(40);

    #[cfg(feature = "otel")]
    impl Device for SlowOutputProjection {
        fn name(&self) -> String {
            Cpu.name()
        }

        fn matmul(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
            if n == model::VOCAB / 2 {
                std::thread::sleep(LATE_OUTPUT_PROJECTION);
            }
            Cpu.matmul(a, b, m, k, n, out);
        }

        fn matmul_at_b_acc(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
            Cpu.matmul_at_b_acc(a, b, m, k, n, out);
        }

        fn matmul_a_bt(&self, a: &[f32], b: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]) {
            Cpu.matmul_a_bt(a, b, m, n, k, out);
        }

        fn peak_memory_bytes(&self) -> Option<u64> {
            None
        }
    }

    /// Issue 20 item 4: under TP2, rank 1 computes its share of the logits
    /// 40 ms late, so rank 0 waits 40 ms in the output projection's
    /// all-gather: that wait is `tp_wait` (it was `dp_wait`, the default of
    /// a receive no phase claims), and nothing of a forward pass is
    /// `dp_wait`.
    #[cfg(feature = "otel")]
    #[test]
    fn the_output_projection_all_gather_waits_in_tp_wait() {
        use lens_training::phases::Phases;
        let argv =
            ["megatron-train-sim", "--hidden-size", "32", "--seq-length", "16", "--tensor-model-parallel-size", "2"];
        let intervals = on_ranks(
            2,
            &argv,
            |rank| if rank == 1 { Box::new(SlowOutputProjection) } else { Box::new(Cpu) },
            |_, trainer| {
                // The model (as `startup` builds it) and a recording clock
                // (telemetry itself stays off in unit tests).
                let (args, layout, coords) = (&trainer.args, trainer.layout, trainer.coords);
                let (hidden, seq) = (args.hidden_size as usize, args.seq_length as usize);
                trainer.stage =
                    Stage::new(args.seed, &trainer.kinds, hidden, seq, layout.pp, coords.pp, layout.tp, coords.tp);
                let phases = Phases::new(true);
                trainer.insight.set_phases(phases.clone());
                trainer.comm.set_phases(phases.clone());
                let tokens = vec![b'a'; (trainer.args.micro_batch_size * trainer.args.seq_length) as usize];
                phases.mark(Phase::Forward);
                let (logits, _) = trainer.stage_forward(Some(&tokens), Vec::new()).unwrap();
                phases.mark(Phase::Other);
                assert_eq!(logits.len(), tokens.len() * model::VOCAB, "every rank holds every logit");
                phases.take_interval()
            },
        );
        let ms = |rank: usize, phase: Phase| intervals[rank].phase_ns[phase.index()] as f64 / 1e6;
        let late = LATE_OUTPUT_PROJECTION.as_secs_f64() * 1e3;
        assert!(ms(1, Phase::Forward) >= late, "rank 1 computes late: {:?}", intervals[1]);
        assert!(ms(0, Phase::TpWait) >= late * 0.9, "rank 0 waits for it in tp_wait: {:?}", intervals[0]);
        for (rank, interval) in intervals.iter().enumerate() {
            assert_eq!(interval.phase_ns[Phase::DpWait.index()], 0, "rank {rank}: no dp_wait in a forward pass");
        }
    }

    #[test]
    fn single_rank_tp2_and_pp2_checkpoints_load_as_the_same_model() {
        let contexts: [&[u8]; 3] = [b"Ba", b"Tomorrow, the sun. Stai", b"x"];
        let single_dir = train("single", 1, &[]);
        let single = InferenceModel::load(&single_dir).unwrap();
        let expected = single.next_logits(&contexts);
        assert_eq!(single.max_context(), 16);
        assert_eq!(single.forward_flops_per_token(), 2 * model::model_parameters(4, 32));
        let layouts: [(&str, u32, &[&str]); 2] =
            [("tp2", 2, &["--tensor-model-parallel-size", "2"]), ("pp2", 2, &["--pipeline-model-parallel-size", "2"])];
        for (name, world, flags) in layouts {
            let dir = train(name, world, flags);
            let model = InferenceModel::load(&dir).unwrap();
            let got = model.next_logits(&contexts);
            for (a, b) in expected.iter().flatten().zip(got.iter().flatten()) {
                assert!((a - b).abs() <= 1e-4 * a.abs().max(1.0), "{name}: {a} vs {b}");
            }
            let _ = std::fs::remove_dir_all(dir);
        }
        // A context's logits do not depend on the others in its batch, and
        // a longer context reads its last `max_context()` bytes.
        let alone = single.next_logits(&[b"Ba"]);
        assert_eq!(alone[0], expected[0]);
        let long = [b"Some very long preamble; ".as_slice(), b"Tomorrow, the sun. Stai"].concat();
        let window = &contexts[1][contexts[1].len() - 16..];
        assert_eq!(single.next_logits(&[&long])[0], single.next_logits(&[window])[0]);
        assert_ne!(expected[0], expected[2], "different contexts, same logits");
        let _ = std::fs::remove_dir_all(single_dir);
    }
}
