//! Fine-tuning a trained progress model on rollouts labelled by their real
//! outcome: the online refit of a run's world model (`[world_model.refit]`
//! of `wmrl train`, docs/worldmodel.md). Warm start from a model
//! directory's candle weights ([`crate::train::load`]), a few hundred AdamW
//! steps at a small learning rate, the result in memory: saving and export
//! are the caller's.
//!
//! The labels come from the outcome alone ([`from_outcome`]), as on a real
//! robot, which has no progress oracle: this module never reads the
//! simulator's oracle progress, and never writes a file.

use std::path::{Path, PathBuf};

use candle_core::Device;
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use wmrl_env::Frame;

use crate::collapse::{ScoreMode, collapse, push_frame_chw, uniform_indices};
use crate::train::{self, EpisodeData, TrainRecord, Trained};
use crate::{ProgressNet, Result, RolloutFrames, WmError};

/// `[world_model.refit]`: how a refit fine-tunes the model in use. wmrl's
/// own settings (the paper keeps its world model frozen); the learning rate
/// is a tenth of the one progress-tiny was trained with, so a refit moves
/// the model towards the policy's rollouts without forgetting the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FineTuneConfig {
    /// AdamW steps per refit.
    pub steps: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub weight_decay: f64,
    /// Probability a sample is a random prefix rather than the whole
    /// rollout (as in [`crate::train::TrainConfig::prefix_prob`]).
    pub prefix_prob: f64,
    /// Weight of the success loss next to the progress loss.
    pub success_weight: f64,
    /// Learn from the newest this many rollouts only (a run keeps no more
    /// in memory: a 128x128 rollout's 8 frames take 0.4 MB).
    pub max_rollouts: usize,
}

impl Default for FineTuneConfig {
    fn default() -> Self {
        Self {
            steps: 200,
            batch_size: 16,
            lr: 2e-4,
            weight_decay: 1e-4,
            prefix_prob: 0.5,
            success_weight: 1.0,
            max_rollouts: 256,
        }
    }
}

impl FineTuneConfig {
    /// The first setting that cannot work, as `(key, reason)`.
    pub fn check(&self) -> std::result::Result<(), (&'static str, &'static str)> {
        if self.steps == 0 {
            return Err(("steps", "must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(("batch_size", "must be at least 1"));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(("lr", "must be positive and finite"));
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            return Err(("weight_decay", "must be finite and >= 0"));
        }
        if !(0.0..=1.0).contains(&self.prefix_prob) {
            return Err(("prefix_prob", "must lie in [0, 1]"));
        }
        if !(self.success_weight >= 0.0 && self.success_weight.is_finite()) {
            return Err(("success_weight", "must be finite and >= 0"));
        }
        if self.max_rollouts == 0 {
            return Err(("max_rollouts", "must be at least 1"));
        }
        Ok(())
    }
}

/// A rollout's frames (spread uniformly over it, oldest first) labelled by
/// its outcome only: progress a linear ramp 0 -> 1 over a success's frames
/// (the k-th of K frames at k / (K - 1): the ramp over the whole rollout up
/// to the rounding of the kept frames' positions) and 0 over a failure's;
/// the success head 1 on a success's last frame and 0 elsewhere. `None`
/// without frames.
pub fn from_outcome(instruction: &str, frames: Vec<Frame>, success: bool) -> Option<EpisodeData> {
    let n = frames.len();
    if n == 0 {
        return None;
    }
    let progress: Vec<f32> = (0..n)
        .map(|k| match (success, n) {
            (false, _) => 0.0,
            (true, 1) => 1.0,
            (true, _) => k as f32 / (n - 1) as f32,
        })
        .collect();
    let success_labels = (0..n)
        .map(|k| f32::from(u8::from(success && k == n - 1)))
        .collect();
    Some(EpisodeData {
        path: PathBuf::new(),
        instruction: instruction.to_string(),
        frames,
        progress,
        success_labels,
        success,
        source: "outcome".into(),
    })
}

/// Fine-tune a copy of the model saved in `dir` ([`crate::train::save`]:
/// `model.safetensors` + `run.toml`) on the newest
/// `cfg.max_rollouts` of `eps` (oldest first), seeded. The copy is
/// returned; `dir` is only read.
pub fn fine_tune(
    dir: &Path,
    eps: &[EpisodeData],
    cfg: &FineTuneConfig,
    seed: u64,
) -> Result<Trained> {
    cfg.check()
        .map_err(|(k, why)| WmError::Config(format!("fine-tune {k}: {why}")))?;
    if eps.iter().all(|e| e.frames.is_empty()) {
        return Err(WmError::Config(
            "fine-tune: no rollouts to learn from".into(),
        ));
    }
    let eps: Vec<&EpisodeData> = eps.iter().filter(|e| !e.frames.is_empty()).collect();
    let eps = &eps[eps.len().saturating_sub(cfg.max_rollouts)..];
    let (net, varmap, config) = train::load(dir)?;
    let device = Device::Cpu;
    let mut opt = AdamW::new(
        varmap.all_vars(),
        ParamsAdamW {
            lr: cfg.lr,
            weight_decay: cfg.weight_decay,
            ..Default::default()
        },
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut running = 0.0f32;
    for step in 1..=cfg.steps {
        let choices: Vec<(usize, usize)> = (0..cfg.batch_size)
            .map(|_| {
                let e = rng.random_range(0..eps.len());
                let n = eps[e].frames.len();
                let end = if rng.random_bool(cfg.prefix_prob) {
                    rng.random_range(1..=n)
                } else {
                    n
                };
                (e, end)
            })
            .collect();
        let batch = train::make_batch_of(eps, &choices, &net.config, &device)?;
        let l = train::loss(&net, &batch, cfg.success_weight)?;
        opt.backward_step(&l)?;
        let lv = l.to_scalar::<f32>()?;
        if !lv.is_finite() {
            return Err(WmError::Config(format!(
                "fine-tune diverged at step {step} (loss {lv}); lower the learning rate"
            )));
        }
        running = if step == 1 {
            lv
        } else {
            0.95 * running + 0.05 * lv
        };
    }
    Ok(Trained {
        net,
        varmap,
        config,
        history: vec![TrainRecord {
            step: cfg.steps,
            train_loss: running,
            val_loss: None,
            val_progress_mae: None,
        }],
    })
}

/// The candle model's scores of rollouts, sub-sampled and collapsed as
/// [`crate::WorldModel::score`] does: what the exported ONNX file must
/// reproduce through ONNX Runtime.
pub fn candle_scores(
    net: &ProgressNet,
    rollouts: &[RolloutFrames<'_>],
    mode: ScoreMode,
    potential_k: usize,
) -> Result<Vec<f32>> {
    let c = &net.config;
    let (t, l) = (c.num_frames, c.instruction_len);
    let mut out = Vec::with_capacity(rollouts.len());
    for r in rollouts {
        if r.frames.is_empty() {
            return Err(WmError::BadRollout {
                index: out.len(),
                message: "has no frames".into(),
            });
        }
        let mut frames = Vec::with_capacity(t * 3 * c.height * c.width);
        for i in uniform_indices(r.frames.len(), t) {
            push_frame_chw(r.frames[i], &mut frames);
        }
        let tokens = wmrl_env::text::byte_tokens(r.instruction, l);
        let dev = Device::Cpu;
        let f = candle_core::Tensor::from_vec(frames, (1, t, 3, c.height, c.width), &dev)?;
        let tk = candle_core::Tensor::from_vec(tokens, (1, l), &dev)?;
        let (p, s) = net.predict(&f, &tk)?;
        let p: Vec<f32> = p.flatten_all()?.to_vec1()?;
        let s: Vec<f32> = s.flatten_all()?.to_vec1()?;
        out.push(collapse(&p, &s, mode, potential_k));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn outcome_labels_ramp_on_success_and_stay_zero_on_failure() {
        let f = || Frame {
            width: 2,
            height: 2,
            rgb: vec![0; 12],
        };
        let s = from_outcome("x", vec![f(), f(), f(), f(), f()], true).unwrap();
        assert_eq!(s.progress, [0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(s.success_labels, [0.0, 0.0, 0.0, 0.0, 1.0]);
        let e = from_outcome("x", vec![f(), f(), f()], false).unwrap();
        assert!(
            e.progress
                .iter()
                .chain(&e.success_labels)
                .all(|&v| v == 0.0)
        );
        assert!(from_outcome("x", Vec::new(), true).is_none());
        assert!(
            FineTuneConfig {
                lr: 0.0,
                ..FineTuneConfig::default()
            }
            .check()
            .is_err()
        );
    }
}
