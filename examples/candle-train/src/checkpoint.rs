//! The checkpoint: one safetensors file holding the model's weights and the
//! iteration they belong to, written to a temporary name and renamed, so a
//! stop in the middle of a save leaves the previous checkpoint whole (the
//! rename is the moment it becomes durable).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use candle_nn::VarMap;

/// The file name inside the checkpoint directory.
pub(crate) const FILE_NAME: &str = "checkpoint.safetensors";
/// The tensor that records the iteration (not a weight).
const ITERATION_KEY: &str = "__iteration";

/// Where the checkpoint of `dir` lives.
pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Saves `vars` as the weights after `iteration`.
pub(crate) fn save(dir: &Path, vars: &VarMap, iteration: u64) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .map_err(|error| anyhow::anyhow!("could not create the checkpoint directory {}: {error}", dir.display()))?;
    let mut tensors: HashMap<String, Tensor> = vars
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("the model's variables are poisoned"))?
        .iter()
        .map(|(name, var)| (name.clone(), var.as_tensor().clone()))
        .collect();
    tensors.insert(ITERATION_KEY.to_string(), Tensor::new(&[iteration as i64], &Device::Cpu)?);
    let target = path(dir);
    let partial = dir.join(format!("{FILE_NAME}.partial"));
    candle_core::safetensors::save(&tensors, &partial)?;
    std::fs::rename(&partial, &target)
        .map_err(|error| anyhow::anyhow!("could not move the checkpoint to {}: {error}", target.display()))?;
    Ok(target)
}

/// Loads the checkpoint of `dir` into `vars` and returns its iteration;
/// `None` when there is none (a fresh run).
pub(crate) fn load(dir: &Path, vars: &mut VarMap, device: &Device) -> anyhow::Result<Option<u64>> {
    let file = path(dir);
    if !file.exists() {
        return Ok(None);
    }
    let mut tensors = candle_core::safetensors::load(&file, device)
        .map_err(|error| anyhow::anyhow!("could not read the checkpoint {}: {error}", file.display()))?;
    let iteration = tensors
        .remove(ITERATION_KEY)
        .ok_or_else(|| anyhow::anyhow!("{} holds no `{ITERATION_KEY}` tensor", file.display()))?
        .to_vec1::<i64>()?;
    let iteration = match iteration.as_slice() {
        [iteration] if *iteration >= 0 => *iteration as u64,
        _ => anyhow::bail!("{}: `{ITERATION_KEY}` is not one iteration number", file.display()),
    };
    let names: Vec<String> = vars.data().lock().map_err(|_| anyhow::anyhow!("poisoned"))?.keys().cloned().collect();
    for name in names {
        let tensor =
            tensors.remove(&name).ok_or_else(|| anyhow::anyhow!("{} holds no weight `{name}`", file.display()))?;
        vars.set_one(&name, &tensor)?;
    }
    Ok(Some(iteration))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;

    #[test]
    fn a_saved_checkpoint_loads_back_with_its_iteration_and_weights() {
        let dir = std::env::temp_dir().join(format!("lens-candle-checkpoint-{}", std::process::id()));
        let device = Device::Cpu;
        let vars = VarMap::new();
        let _model = Model::new(&vars, &device).unwrap();
        save(&dir, &vars, 8).unwrap();
        let mut loaded = VarMap::new();
        let _other = Model::new(&loaded, &device).unwrap();
        assert_eq!(load(&dir, &mut loaded, &device).unwrap(), Some(8));
        let weight = |vars: &VarMap| {
            vars.data().lock().unwrap()["hidden1.weight"].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        assert_eq!(weight(&vars), weight(&loaded));
        assert!(!dir.join(format!("{FILE_NAME}.partial")).exists());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(load(&dir, &mut loaded, &device).unwrap(), None);
    }
}
