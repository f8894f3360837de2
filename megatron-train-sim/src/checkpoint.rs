//! Checkpoints: one file per rank, written synchronously or by a worker
//! thread, and read back to resume.
//!
//! Layout (Megatron's directory names): `SAVE/iter_0000020/rank_00003.ckpt`
//! for each rank, and `SAVE/latest_checkpointed_iteration.txt`, written by
//! rank 0 only once every rank has finished writing, so a crash mid-save
//! never points the tracker at a partial checkpoint.
//!
//! A rank file is the line `MTSIM-CKPT 1`, one line of JSON (iteration,
//! layout, model shape, optimizer steps, value counts), then the rank's
//! parameters and optimizer moments as little-endian `f32`.
//!
//! With `--async-save`, the save hands a snapshot to a worker thread with a
//! call index (counting from 0 per process, as NVRx's `call_idx`); the
//! training loop learns at each iteration, through its per-iteration
//! all-reduce, when every rank's worker is done, and only then finalizes
//! (writes the tracker). The index ties the dispatch and finalize spans
//! together.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use crate::cli::Layout;

const MAGIC: &str = "MTSIM-CKPT 1";
/// Megatron's tracker file name.
pub(crate) const TRACKER: &str = "latest_checkpointed_iteration.txt";

/// What one rank saves.
#[derive(Clone, Debug)]
pub(crate) struct RankState {
    /// The iterations completed.
    pub(crate) iteration: u64,
    /// The layout it was saved with.
    pub(crate) layout: Layout,
    /// The rank.
    pub(crate) rank: u32,
    /// `--num-layers`.
    pub(crate) num_layers: u32,
    /// `--hidden-size`.
    pub(crate) hidden_size: u64,
    /// Optimizer updates applied.
    pub(crate) optimizer_steps: u64,
    /// Iterations skipped so far.
    pub(crate) skipped_iterations: u64,
    /// Parameters.
    pub(crate) params: Vec<f32>,
    /// Adam first moments (empty for SGD).
    pub(crate) m: Vec<f32>,
    /// Adam second moments (empty for SGD).
    pub(crate) v: Vec<f32>,
}

/// The directory of iteration `iteration` under `root`.
pub(crate) fn iteration_dir(root: &Path, iteration: u64) -> PathBuf {
    root.join(format!("iter_{iteration:07}"))
}

fn rank_file(root: &Path, iteration: u64, rank: u32) -> PathBuf {
    iteration_dir(root, iteration).join(format!("rank_{rank:05}.ckpt"))
}

fn floats(bytes: &mut Vec<u8>, values: &[f32]) {
    bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
}

/// Writes this rank's file (to a temporary name, then renamed).
pub(crate) fn write_rank(root: &Path, state: &RankState) -> io::Result<PathBuf> {
    let dir = iteration_dir(root, state.iteration);
    fs::create_dir_all(&dir)?;
    let header = serde_json::json!({
        "iteration": state.iteration,
        "rank": state.rank,
        "tensor_model_parallel_size": state.layout.tp,
        "pipeline_model_parallel_size": state.layout.pp,
        "data_parallel_size": state.layout.dp,
        "num_layers": state.num_layers,
        "hidden_size": state.hidden_size,
        "optimizer_steps": state.optimizer_steps,
        "skipped_iterations": state.skipped_iterations,
        "params": state.params.len(),
        "moments": state.m.len(),
    });
    let mut bytes = format!("{MAGIC}\n{header}\n").into_bytes();
    floats(&mut bytes, &state.params);
    floats(&mut bytes, &state.m);
    floats(&mut bytes, &state.v);
    let path = rank_file(root, state.iteration, state.rank);
    let temporary = path.with_extension("ckpt.tmp");
    let mut file = fs::File::create(&temporary)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    fs::rename(&temporary, &path)?;
    Ok(path)
}

/// Points the tracker at `iteration` (rank 0, after every rank wrote).
pub(crate) fn write_tracker(root: &Path, iteration: u64) -> io::Result<()> {
    let temporary = root.join(format!("{TRACKER}.tmp"));
    fs::write(&temporary, format!("{iteration}\n"))?;
    fs::rename(temporary, root.join(TRACKER))
}

/// The iteration the tracker under `root` points at.
pub(crate) fn read_tracker(root: &Path) -> Result<u64, String> {
    let path = root.join(TRACKER);
    let text = fs::read_to_string(&path).map_err(|error| format!("--load {}: {}: {error}", root.display(), TRACKER))?;
    text.trim().parse().map_err(|_| format!("{}: not an iteration number: {:?}", path.display(), text.trim()))
}

fn read_floats(bytes: &[u8], count: usize, at: &mut usize, path: &Path) -> Result<Vec<f32>, String> {
    let end = *at + count * 4;
    let slice = bytes.get(*at..end).ok_or_else(|| format!("{}: truncated", path.display()))?;
    *at = end;
    Ok(slice.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Reads this rank's file of `iteration`, checking that it was saved with
/// the same layout and model shape.
pub(crate) fn read_rank(
    root: &Path,
    iteration: u64,
    rank: u32,
    layout: Layout,
    num_layers: u32,
    hidden_size: u64,
) -> Result<RankState, String> {
    let path = rank_file(root, iteration, rank);
    let bytes = fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))?;
    let bad = |what: &str| format!("{}: {what}", path.display());
    let first = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| bad("not a checkpoint"))?;
    if &bytes[..first] != MAGIC.as_bytes() {
        return Err(bad("not a megatron-train-sim checkpoint"));
    }
    let second = first + 1 + bytes[first + 1..].iter().position(|&b| b == b'\n').ok_or_else(|| bad("no header"))?;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[first + 1..second]).map_err(|error| bad(&format!("bad header: {error}")))?;
    let number =
        |key: &str| header.get(key).and_then(serde_json::Value::as_u64).ok_or_else(|| bad(&format!("no {key}")));
    let saved =
        (number("tensor_model_parallel_size")?, number("pipeline_model_parallel_size")?, number("data_parallel_size")?);
    if saved != (u64::from(layout.tp), u64::from(layout.pp), u64::from(layout.dp)) {
        return Err(format!(
            "{}: saved with TP={} PP={} DP={}, this run is TP={} PP={} DP={} (resharding is not supported)",
            path.display(),
            saved.0,
            saved.1,
            saved.2,
            layout.tp,
            layout.pp,
            layout.dp
        ));
    }
    if (number("num_layers")?, number("hidden_size")?) != (u64::from(num_layers), hidden_size) {
        return Err(format!(
            "{}: saved with --num-layers {} --hidden-size {}, this run has {num_layers} and {hidden_size}",
            path.display(),
            number("num_layers")?,
            number("hidden_size")?
        ));
    }
    let params = number("params")? as usize;
    let moments = number("moments")? as usize;
    let mut at = second + 1;
    Ok(RankState {
        iteration: number("iteration")?,
        layout,
        rank,
        num_layers,
        hidden_size,
        optimizer_steps: number("optimizer_steps")?,
        skipped_iterations: number("skipped_iterations")?,
        params: read_floats(&bytes, params, &mut at, &path)?,
        m: read_floats(&bytes, moments, &mut at, &path)?,
        v: read_floats(&bytes, moments, &mut at, &path)?,
    })
}

/// An asynchronous save in flight.
#[derive(Debug)]
pub(crate) struct PendingSave {
    /// Its call index.
    pub(crate) call_index: u64,
    /// The iteration it saves.
    pub(crate) iteration: u64,
    worker: JoinHandle<io::Result<PathBuf>>,
}

impl PendingSave {
    /// Hands `state` to a new worker thread; `work` runs there (the caller
    /// wraps the write in its telemetry context).
    pub(crate) fn dispatch(
        call_index: u64,
        iteration: u64,
        work: impl FnOnce() -> io::Result<PathBuf> + Send + 'static,
    ) -> io::Result<PendingSave> {
        let worker = std::thread::Builder::new().name(format!("async-save-{call_index}")).spawn(work)?;
        Ok(PendingSave { call_index, iteration, worker })
    }

    /// Whether the worker has finished (without waiting).
    pub(crate) fn is_done(&self) -> bool {
        self.worker.is_finished()
    }

    /// Waits for the worker; its result.
    pub(crate) fn wait(self) -> Result<PathBuf, String> {
        match self.worker.join() {
            Ok(result) => result.map_err(|error| format!("async save of iteration {}: {error}", self.iteration)),
            Err(_) => Err(format!("async save of iteration {}: the worker panicked", self.iteration)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_file_round_trips_and_refuses_another_layout() {
        let root = std::env::temp_dir().join(format!("mtsim-ckpt-unit-{}", std::process::id()));
        let layout = Layout { tp: 1, pp: 2, dp: 1 };
        let state = RankState {
            iteration: 20,
            layout,
            rank: 1,
            num_layers: 4,
            hidden_size: 8,
            optimizer_steps: 19,
            skipped_iterations: 1,
            params: vec![1.0, -2.5],
            m: vec![0.1, 0.2],
            v: vec![0.3, 0.4],
        };
        write_rank(&root, &state).unwrap();
        write_tracker(&root, 20).unwrap();
        assert_eq!(read_tracker(&root).unwrap(), 20);
        let back = read_rank(&root, 20, 1, layout, 4, 8).unwrap();
        assert_eq!((back.params, back.m, back.v, back.optimizer_steps), (state.params, state.m, state.v, 19));
        let error = read_rank(&root, 20, 1, Layout { tp: 2, pp: 1, dp: 1 }, 4, 8).unwrap_err();
        assert!(error.contains("saved with TP=1 PP=2 DP=1"), "{error}");
        let _ = fs::remove_dir_all(root);
    }
}
