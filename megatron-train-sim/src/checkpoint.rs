//! Checkpoints: one file per rank, written synchronously or by a worker
//! thread, and read back to resume.
//!
//! Layout (Megatron's directory names): `SAVE/iter_0000020/rank_00003.ckpt`
//! for each rank, and `SAVE/latest_checkpointed_iteration.txt`, written by
//! rank 0 only once every rank has finished writing, so a crash mid-save
//! never points the tracker at a partial checkpoint.
//!
//! A rank file is the line `MTSIM-CKPT 2`, one line of JSON (iteration,
//! layout, model shape: layers, width, sequence length, layer pattern and
//! vocabulary; optimizer steps, value counts), then the rank's parameters
//! (its embedding columns on the first pipeline stage, its layers', its
//! output-projection columns on the last stage, in that order) and
//! optimizer moments as little-endian `f32`. Format 1 (the regression
//! model before the byte-level language model) is refused as written by
//! another version.
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

use crate::config::Layout;

const MAGIC: &str = "MTSIM-CKPT 2";
/// What every format's magic line starts with.
const MAGIC_FAMILY: &str = "MTSIM-CKPT ";
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
    /// `--seq-length` (the context length an inference model uses).
    pub(crate) seq_length: u64,
    /// `--hybrid-override-pattern` (`None`: all transformer layers).
    pub(crate) hybrid_override_pattern: Option<String>,
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

/// A rank file's bytes.
fn encode(state: &RankState) -> Vec<u8> {
    let header = serde_json::json!({
        "iteration": state.iteration,
        "rank": state.rank,
        "tensor_model_parallel_size": state.layout.tp,
        "pipeline_model_parallel_size": state.layout.pp,
        "data_parallel_size": state.layout.dp,
        "num_layers": state.num_layers,
        "hidden_size": state.hidden_size,
        "seq_length": state.seq_length,
        "hybrid_override_pattern": state.hybrid_override_pattern,
        "vocab_size": crate::model::VOCAB,
        "optimizer_steps": state.optimizer_steps,
        "skipped_iterations": state.skipped_iterations,
        "params": state.params.len(),
        "moments": state.m.len(),
    });
    let mut bytes = format!("{MAGIC}\n{header}\n").into_bytes();
    floats(&mut bytes, &state.params);
    floats(&mut bytes, &state.m);
    floats(&mut bytes, &state.v);
    bytes
}

/// Writes this rank's file (to a temporary name, then renamed).
pub(crate) fn write_rank(root: &Path, state: &RankState) -> io::Result<PathBuf> {
    fs::create_dir_all(iteration_dir(root, state.iteration))?;
    let bytes = encode(state);
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

/// A checkpoint that `--load` cannot use: the file, and what is wrong with
/// it. Bad input: the simulator exits with status 2 (docs/simulator.md).
#[derive(Debug, thiserror::Error)]
#[error("--load: {}: {problem}", path.display())]
pub(crate) struct LoadError {
    /// The file (the tracker or a rank file).
    pub(crate) path: PathBuf,
    /// What is wrong with it.
    pub(crate) problem: String,
}

impl LoadError {
    fn new(path: &Path, problem: impl Into<String>) -> LoadError {
        LoadError { path: path.to_path_buf(), problem: problem.into() }
    }
}

/// The iteration the tracker under `root` points at.
pub(crate) fn read_tracker(root: &Path) -> Result<u64, LoadError> {
    let path = root.join(TRACKER);
    let text = fs::read_to_string(&path).map_err(|error| LoadError::new(&path, error.to_string()))?;
    text.trim().parse().map_err(|_| LoadError::new(&path, format!("not an iteration number: {:?}", text.trim())))
}

/// What a rank file must match: the directory it was found in and this
/// run's layout and model shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expected {
    /// The iteration the tracker points at.
    pub(crate) iteration: u64,
    /// This rank.
    pub(crate) rank: u32,
    /// This run's layout.
    pub(crate) layout: Layout,
    /// `--num-layers`.
    pub(crate) num_layers: u32,
    /// `--hidden-size`.
    pub(crate) hidden_size: u64,
}

/// The longest header line read (a real one is about 300 bytes).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The longest sequence length (tokens per sample) a run may train with and
/// a checkpoint may carry: 2^20 = 1,048,576 tokens, the longest context of
/// today's long-context training and `serve --max-model-len`'s own bound.
/// An inference model reads its window from the checkpoint, so a header
/// whose `seq_length` is 0 or above this is refused at load (exit 2, naming
/// the file and the value) rather than becoming the decode window.
pub(crate) const MAX_SEQ_LENGTH: u64 = 1 << 20;

/// Reads this rank's file of `expected.iteration`, checking that it was
/// saved with the same layout and model shape.
pub(crate) fn read_rank(root: &Path, expected: Expected) -> Result<RankState, LoadError> {
    let path = rank_file(root, expected.iteration, expected.rank);
    let bytes = fs::read(&path).map_err(|error| LoadError::new(&path, error.to_string()))?;
    parse_rank(&bytes, expected).map_err(|problem| LoadError::new(&path, problem))
}

/// Reads rank `rank`'s file of `iteration` under `root` whatever layout and
/// model shape it was saved with (an inference model learns them from it),
/// with every other check of [`read_rank`].
pub(crate) fn read_rank_as_saved(root: &Path, iteration: u64, rank: u32) -> Result<RankState, LoadError> {
    let path = rank_file(root, iteration, rank);
    let bytes = fs::read(&path).map_err(|error| LoadError::new(&path, error.to_string()))?;
    let expected = saved_shape(&bytes, iteration, rank).map_err(|problem| LoadError::new(&path, problem))?;
    parse_rank(&bytes, expected).map_err(|problem| LoadError::new(&path, problem))
}

/// The layout and model shape a rank file's header announces, as the
/// [`Expected`] of a reader that accepts them (checked further by
/// [`parse_rank`]).
fn saved_shape(bytes: &[u8], iteration: u64, rank: u32) -> Result<Expected, String> {
    let probe = Expected { iteration, rank, layout: Layout { tp: 1, pp: 1, dp: 1 }, num_layers: 0, hidden_size: 0 };
    let header_start = MAGIC.len() + 1;
    if !bytes.starts_with(MAGIC.as_bytes()) {
        return parse_rank(bytes, probe).map(|_| probe); // the magic line's error
    }
    let rest = &bytes[header_start.min(bytes.len())..];
    let line = rest.iter().take(MAX_HEADER_BYTES).position(|&b| b == b'\n').map_or(rest, |end| &rest[..end]);
    let header: serde_json::Value = serde_json::from_slice(line).map_err(|error| format!("damaged header: {error}"))?;
    let number = |key: &str| {
        let value = header.get(key).and_then(serde_json::Value::as_u64);
        let value = value.and_then(|v| u32::try_from(v).ok()).filter(|&v| v > 0);
        value.ok_or_else(|| format!("damaged header: no positive number {key:?}"))
    };
    let layout = Layout {
        tp: number("tensor_model_parallel_size")?,
        pp: number("pipeline_model_parallel_size")?,
        dp: number("data_parallel_size")?,
    };
    let hidden_size = u64::from(number("hidden_size")?);
    Ok(Expected { iteration, rank, layout, num_layers: number("num_layers")?, hidden_size })
}

/// `count` little-endian `f32` values from `bytes` at `*at`, which moves
/// past them; every length is checked against the file.
fn read_floats(bytes: &[u8], count: u64, at: &mut usize, what: &str) -> Result<Vec<f32>, String> {
    let truncated = || {
        format!(
            "truncated: the header announces {count} {what} values ({count} x 4 bytes from byte {at}), the file has {} bytes",
            bytes.len()
        )
    };
    let length = usize::try_from(count).ok().and_then(|count| count.checked_mul(4)).ok_or_else(truncated)?;
    let end = at.checked_add(length).ok_or_else(truncated)?;
    let slice = bytes.get(*at..end).ok_or_else(truncated)?;
    *at = end;
    Ok(slice.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// A rank file's contents, checked: its magic line, its header (every
/// field present, a number, and matching `expected`), and exactly the
/// values the header announces. The error says what is wrong.
fn parse_rank(bytes: &[u8], expected: Expected) -> Result<RankState, String> {
    let Expected { iteration, rank, layout, num_layers, hidden_size } = expected;
    let magic = MAGIC.as_bytes();
    if !bytes.starts_with(magic) || bytes.get(magic.len()) != Some(&b'\n') {
        let shown: String = String::from_utf8_lossy(&bytes[..bytes.len().min(16)]).escape_debug().collect();
        if bytes.starts_with(MAGIC_FAMILY.as_bytes()) {
            return Err(format!(
                "a megatron-train-sim checkpoint of another format (it starts with \"{shown}\", this version reads \
                 {MAGIC:?}, the byte-level language model's): train again, or resume with the version that wrote it"
            ));
        }
        return Err(format!(
            "not a megatron-train-sim checkpoint (it should start with {MAGIC:?}, it starts with \"{shown}\")"
        ));
    }
    let header_start = magic.len() + 1;
    let rest = &bytes[header_start..];
    let header_len = rest.iter().take(MAX_HEADER_BYTES).position(|&b| b == b'\n').ok_or_else(|| {
        format!("damaged header: no end of line in the {} bytes after the magic line", rest.len().min(MAX_HEADER_BYTES))
    })?;
    let header: serde_json::Value =
        serde_json::from_slice(&rest[..header_len]).map_err(|error| format!("damaged header: {error}"))?;
    let number = |key: &str| {
        header.get(key).and_then(serde_json::Value::as_u64).ok_or_else(|| format!("damaged header: no number {key:?}"))
    };
    let saved =
        (number("tensor_model_parallel_size")?, number("pipeline_model_parallel_size")?, number("data_parallel_size")?);
    if saved != (u64::from(layout.tp), u64::from(layout.pp), u64::from(layout.dp)) {
        return Err(format!(
            "saved with TP={} PP={} DP={}, this run is TP={} PP={} DP={} (resharding is not supported)",
            saved.0, saved.1, saved.2, layout.tp, layout.pp, layout.dp
        ));
    }
    let shape = (number("num_layers")?, number("hidden_size")?);
    if shape != (u64::from(num_layers), hidden_size) {
        return Err(format!(
            "saved with --num-layers {} --hidden-size {}, this run has {num_layers} and {hidden_size}",
            shape.0, shape.1
        ));
    }
    if number("vocab_size")? != crate::model::VOCAB as u64 {
        return Err(format!(
            "saved with a vocabulary of {}, this model's is {}",
            number("vocab_size")?,
            crate::model::VOCAB
        ));
    }
    let seq_length = number("seq_length")?;
    if seq_length == 0 || seq_length > MAX_SEQ_LENGTH {
        return Err(format!(
            "damaged header: \"seq_length\" is {seq_length}; a sequence length is 1 to {MAX_SEQ_LENGTH} tokens \
             (--seq-length)"
        ));
    }
    let hybrid_override_pattern = match header.get("hybrid_override_pattern") {
        Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(pattern))
            if pattern.chars().count() == num_layers as usize && pattern.chars().all(|c| c == 'M' || c == '*') =>
        {
            Some(pattern.clone())
        }
        _ => {
            return Err(format!(
                "damaged header: \"hybrid_override_pattern\" is not null or {num_layers} characters of M and *"
            ));
        }
    };
    if (number("iteration")?, number("rank")?) != (iteration, u64::from(rank)) {
        return Err(format!(
            "the header says iteration {} rank {}, the file is iteration {iteration} rank {rank}'s",
            number("iteration")?,
            number("rank")?
        ));
    }
    let mut at = header_start + header_len + 1;
    let params = read_floats(bytes, number("params")?, &mut at, "parameter")?;
    let moments = number("moments")?;
    let m = read_floats(bytes, moments, &mut at, "first-moment")?;
    let v = read_floats(bytes, moments, &mut at, "second-moment")?;
    if at != bytes.len() {
        return Err(format!("damaged: {} bytes after the values the header announces", bytes.len() - at));
    }
    Ok(RankState {
        iteration,
        layout,
        rank,
        num_layers,
        hidden_size,
        seq_length,
        hybrid_override_pattern,
        optimizer_steps: number("optimizer_steps")?,
        skipped_iterations: number("skipped_iterations")?,
        params,
        m,
        v,
    })
}

/// The fault-tolerance heartbeat: what `megatron.checkpoint.ft_heartbeat`
/// holds. Every loop pass, each rank rewrites one small JSON record (its
/// rank, the iterations completed, the beats so far and the wall-clock time
/// in ms since the epoch, padded to [`HEARTBEAT_RECORD_BYTES`]) in place,
/// for a rank monitor to read: `SAVE/ft_heartbeat/rank_XXXXX.json` with
/// `--save`, else `TMPDIR/megatron-train-sim-heartbeat-RUNID/rank_XXXXX.json`,
/// removed when the run ends well. A file that cannot be written is
/// reported once; training goes on without it.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    path: PathBuf,
    rank: u32,
    file: Option<fs::File>,
    beats: u64,
    failed: bool,
    temporary: bool,
}

/// The size of a heartbeat record, newline included.
pub(crate) const HEARTBEAT_RECORD_BYTES: usize = 128;

impl Heartbeat {
    /// The heartbeat of `rank`: beside the checkpoints under `save`, else
    /// in the temporary directory of run `run_id`.
    pub(crate) fn new(save: Option<&Path>, run_id: &str, rank: u32) -> Heartbeat {
        let name = format!("rank_{rank:05}.json");
        let (path, temporary) = match save {
            Some(root) => (root.join("ft_heartbeat").join(name), false),
            None => {
                // One directory name whatever the run id holds (one from
                // TORCHELASTIC_RUN_ID is not checked as lens's variable is):
                // never a path that leaves the temporary directory.
                let run: String = if run_id.is_empty() {
                    std::process::id().to_string()
                } else {
                    run_id
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
                        .collect()
                };
                (std::env::temp_dir().join(format!("megatron-train-sim-heartbeat-{run}")).join(name), true)
            }
        };
        Heartbeat { path, rank, file: None, beats: 0, failed: false, temporary }
    }

    /// Writes the record for `iteration` (iterations completed).
    pub(crate) fn beat(&mut self, iteration: u64) {
        if self.failed {
            return;
        }
        self.beats += 1;
        if let Err(error) = self.write(iteration) {
            self.failed = true;
            crate::output::note(&format!(
                "the fault-tolerance heartbeat {} cannot be written ({error}); continuing without it",
                self.path.display()
            ));
        }
    }

    fn write(&mut self, iteration: u64) -> io::Result<()> {
        use std::io::{Seek, SeekFrom};
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                if let Some(dir) = self.path.parent() {
                    fs::create_dir_all(dir)?;
                }
                self.file.insert(fs::OpenOptions::new().write(true).create(true).truncate(true).open(&self.path)?)
            }
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        let record = format!(
            "{{\"rank\":{},\"iteration\":{iteration},\"beats\":{},\"unix_time_ms\":{now}}}",
            self.rank, self.beats
        );
        let mut line = format!("{record:<width$}\n", width = HEARTBEAT_RECORD_BYTES - 1).into_bytes();
        line.truncate(HEARTBEAT_RECORD_BYTES);
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&line)
    }

    /// The run ended well: a temporary heartbeat file is removed (and its
    /// directory, once every rank's is gone); one beside checkpoints stays.
    pub(crate) fn finish(&mut self) {
        self.file = None;
        if self.temporary && self.beats > 0 {
            let _ = fs::remove_file(&self.path);
            if let Some(dir) = self.path.parent() {
                let _ = fs::remove_dir(dir);
            }
        }
    }
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
    fn a_temporary_heartbeat_stays_in_the_temporary_directory_whatever_the_run_id() {
        let heartbeat = Heartbeat::new(None, "../../escape", 3);
        assert_eq!(
            heartbeat.path,
            std::env::temp_dir().join("megatron-train-sim-heartbeat-______escape").join("rank_00003.json")
        );
        let heartbeat = Heartbeat::new(None, "job-42_a", 0);
        assert_eq!(heartbeat.path, std::env::temp_dir().join("megatron-train-sim-heartbeat-job-42_a/rank_00000.json"));
    }

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
            seq_length: 16,
            hybrid_override_pattern: Some("M*M*".to_string()),
            optimizer_steps: 19,
            skipped_iterations: 1,
            params: vec![1.0, -2.5],
            m: vec![0.1, 0.2],
            v: vec![0.3, 0.4],
        };
        write_rank(&root, &state).unwrap();
        write_tracker(&root, 20).unwrap();
        assert_eq!(read_tracker(&root).unwrap(), 20);
        let expected = Expected { iteration: 20, rank: 1, layout, num_layers: 4, hidden_size: 8 };
        let back = read_rank(&root, expected).unwrap();
        assert_eq!((back.params, back.m, back.v, back.optimizer_steps), (state.params, state.m, state.v, 19));
        assert_eq!((back.seq_length, back.hybrid_override_pattern.as_deref()), (16, Some("M*M*")));
        let as_saved = read_rank_as_saved(&root, 20, 1).unwrap();
        assert_eq!((as_saved.layout, as_saved.num_layers, as_saved.hidden_size), (layout, 4, 8));
        let error = read_rank(&root, Expected { layout: Layout { tp: 2, pp: 1, dp: 1 }, ..expected }).unwrap_err();
        assert!(error.to_string().contains("saved with TP=1 PP=2 DP=1"), "{error}");
        let _ = fs::remove_dir_all(root);
    }

    fn sample() -> (Vec<u8>, Expected, RankState) {
        let layout = Layout { tp: 1, pp: 2, dp: 1 };
        let state = RankState {
            iteration: 4,
            layout,
            rank: 0,
            num_layers: 2,
            hidden_size: 4,
            seq_length: 8,
            hybrid_override_pattern: None,
            optimizer_steps: 4,
            skipped_iterations: 0,
            params: (0..6).map(|i| i as f32 * 0.5).collect(),
            m: vec![0.25; 6],
            v: vec![0.125; 6],
        };
        (encode(&state), Expected { iteration: 4, rank: 0, layout, num_layers: 2, hidden_size: 4 }, state)
    }

    #[test]
    fn a_damaged_truncated_or_foreign_file_says_what_is_wrong() {
        let (bytes, expected, _) = sample();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let header_end = text.find("}\n").unwrap() + 2;
        let huge = text[..header_end].replace("\"params\":6", "\"params\":18446744073709551615");
        let cases: [(Vec<u8>, &str); 7] = [
            (b"PK\x03\x04 a zip file".to_vec(), "not a megatron-train-sim checkpoint"),
            (b"MTSIM-CKPT 1\n{}\n".to_vec(), "a megatron-train-sim checkpoint of another format"),
            (b"MTSIM-CKPT 3\n{}\n".to_vec(), "this version reads \"MTSIM-CKPT 2\""),
            (bytes[..bytes.len() - 3].to_vec(), "truncated"),
            (bytes[..20].to_vec(), "damaged header"),
            ([huge.as_bytes(), &bytes[header_end..]].concat(), "truncated: the header announces 18446744073709551615"),
            ([&bytes[..], b"tail"].concat(), "4 bytes after the values"),
        ];
        for (damaged, problem) in cases {
            let error = parse_rank(&damaged, expected).unwrap_err();
            assert!(error.contains(problem), "expected {problem:?}, got {error:?}");
        }
        let error = LoadError::new(Path::new("/ckpt/iter_0000004/rank_00000.ckpt"), "truncated");
        assert_eq!(error.to_string(), "--load: /ckpt/iter_0000004/rank_00000.ckpt: truncated");
    }

    #[test]
    fn a_sequence_length_of_0_or_beyond_the_bound_is_refused_naming_the_value() {
        let (bytes, expected, _) = sample();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let header_end = text.find("}\n").unwrap() + 2;
        let with_seq = |seq: u64| {
            let header = text[..header_end].replace("\"seq_length\":8", &format!("\"seq_length\":{seq}"));
            [header.as_bytes(), &bytes[header_end..]].concat()
        };
        for seq in [0, MAX_SEQ_LENGTH + 1, u64::MAX] {
            let error = parse_rank(&with_seq(seq), expected).unwrap_err();
            assert_eq!(
                error,
                format!(
                    "damaged header: \"seq_length\" is {seq}; a sequence length is 1 to 1048576 tokens (--seq-length)"
                )
            );
        }
        for seq in [1, MAX_SEQ_LENGTH] {
            assert_eq!(parse_rank(&with_seq(seq), expected).unwrap().seq_length, seq, "{seq} is accepted");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any damage (bytes overwritten, then the file cut short) is either
        /// refused with a message or, when it hit only values or the header's
        /// counters, loaded with the same shape; never a panic.
        #[test]
        fn a_mutated_checkpoint_never_panics(
            edits in proptest::collection::vec((0..usize::MAX, proptest::num::u8::ANY), 0..4),
            cut in proptest::option::of(0..usize::MAX),
        ) {
            let (mut bytes, expected, state) = sample();
            for (at, value) in edits {
                let at = at % bytes.len();
                bytes[at] = value;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut % (bytes.len() + 1));
            }
            match parse_rank(&bytes, expected) {
                Ok(back) => {
                    proptest::prop_assert_eq!(back.m.len(), back.v.len());
                    proptest::prop_assert_eq!(
                        back.params.len() + 2 * back.m.len(),
                        state.params.len() + 2 * state.m.len()
                    );
                }
                Err(problem) => proptest::prop_assert!(!problem.is_empty()),
            }
        }
    }
}
