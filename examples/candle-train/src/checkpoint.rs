//! The checkpoint: the model's weights as one safetensors file per saved
//! iteration (`iter_0000008.safetensors`) and a tracker file naming the
//! newest (`latest_checkpointed_iteration.txt`, as Megatron-LM does). Each
//! file is written to a temporary name and renamed, and the tracker last, so
//! a stop in the middle of a save leaves the previous checkpoint whole: the
//! tracker's rename is the moment the new one becomes durable.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use candle_nn::VarMap;

/// The file naming the newest durable checkpoint's iteration.
pub(crate) const TRACKER_FILE: &str = "latest_checkpointed_iteration.txt";

/// The weights file of `iteration` in `dir`.
pub(crate) fn weights_path(dir: &Path, iteration: u64) -> PathBuf {
    dir.join(format!("iter_{iteration:07}.safetensors"))
}

/// The iteration of the newest durable checkpoint in `dir`; `None` when
/// there is none (a fresh run).
pub(crate) fn latest(dir: &Path) -> anyhow::Result<Option<u64>> {
    let tracker = dir.join(TRACKER_FILE);
    let text = match std::fs::read_to_string(&tracker) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("could not read {}", tracker.display())),
    };
    match text.trim().parse::<u64>() {
        Ok(iteration) if iteration >= 1 => Ok(Some(iteration)),
        _ => bail!("{}: `{}` is not an iteration number (a whole number, 1 or more)", tracker.display(), text.trim()),
    }
}

/// Writes `contents` to `target` through a temporary file and a rename.
fn replace(target: &Path, write: impl FnOnce(&Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let mut partial = target.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    write(&partial)?;
    std::fs::rename(&partial, target).with_context(|| format!("could not move {} into place", target.display()))
}

/// Saves `vars` as the checkpoint of `iteration` and makes it the newest.
pub(crate) fn save(dir: &Path, vars: &VarMap, iteration: u64) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("could not create the checkpoint directory {}", dir.display()))?;
    let weights = weights_path(dir, iteration);
    replace(&weights, |partial| vars.save(partial).with_context(|| format!("could not write {}", partial.display())))?;
    replace(&dir.join(TRACKER_FILE), |partial| {
        std::fs::write(partial, format!("{iteration}\n"))
            .with_context(|| format!("could not write {}", partial.display()))
    })?;
    Ok(weights)
}

/// Loads the weights of the checkpoint of `iteration` in `dir` into `vars`.
pub(crate) fn load(dir: &Path, iteration: u64, vars: &mut VarMap) -> anyhow::Result<()> {
    let weights = weights_path(dir, iteration);
    vars.load(&weights).with_context(|| format!("could not load the checkpoint {}", weights.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;
    use candle_core::Device;

    #[test]
    fn a_saved_checkpoint_is_the_latest_and_loads_back_with_its_weights() {
        let _serial = crate::model::MODEL_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = std::env::temp_dir().join(format!("lens-candle-checkpoint-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(latest(&dir).unwrap(), None);
        let device = Device::Cpu;
        let vars = VarMap::new();
        let _model = Model::new(&vars, &device).unwrap();
        Model::init(&vars, 1).unwrap();
        save(&dir, &vars, 4).unwrap();
        save(&dir, &vars, 8).unwrap();
        assert_eq!(latest(&dir).unwrap(), Some(8));
        let mut loaded = VarMap::new();
        let _other = Model::new(&loaded, &device).unwrap();
        Model::init(&loaded, 2).unwrap();
        load(&dir, 8, &mut loaded).unwrap();
        let weight = |vars: &VarMap| {
            vars.data().lock().unwrap()["hidden1.weight"].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        assert_eq!(weight(&vars), weight(&loaded));
        assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().path().to_string_lossy().ends_with(".partial")));
        std::fs::write(dir.join(TRACKER_FILE), "eight\n").unwrap();
        let error = latest(&dir).unwrap_err().to_string();
        assert!(error.ends_with("`eight` is not an iteration number (a whole number, 1 or more)"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
