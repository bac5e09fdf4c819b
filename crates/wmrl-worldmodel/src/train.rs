//! Training wmrl's own progress model in candle on episodes written by
//! `wmrl demos` (experts and noisy/failed rollouts), labelled by the
//! simulator's oracle progress, with held-out episodes for validation.
//!
//! A training sample is a rollout prefix (or the whole rollout) sub-sampled
//! uniformly to T frames, exactly as [`WorldModel::score`](crate::WorldModel)
//! sub-samples at inference. Everything is seeded.

use std::path::{Path, PathBuf};
use wmrl_run::DeviceChoice;

use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use wmrl_env::{Episode, Frame};

use crate::collapse::{push_frame_chw, uniform_indices};
use crate::net::{NetConfig, ProgressNet, bce_with_logits};
use crate::{Result, WmError, error::io_err};

/// Training settings; defaults are what `models/progress-tiny` used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Network shape; height/width are taken from the episodes.
    pub net: NetConfig,
    /// Which camera of the episodes to use (0 = agent view).
    pub camera: usize,
    pub steps: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub weight_decay: f64,
    /// Share of episodes held out for validation (split by seed).
    pub val_fraction: f64,
    /// Frames kept per episode when loading (uniformly), to bound memory.
    pub max_frames_per_episode: usize,
    /// Probability a sample is a random prefix rather than the whole rollout.
    pub prefix_prob: f64,
    /// Oracle progress at or above which a frame is labelled a success.
    pub success_progress: f32,
    /// Weight of the success loss next to the progress loss.
    pub success_weight: f64,
    pub eval_every: usize,
    pub seed: u64,
    /// Where the network trains (`wmrl wm train --device`): `cpu` (the
    /// default, left out of run.toml), `cuda` or `auto`.
    #[serde(skip_serializing_if = "DeviceChoice::is_cpu")]
    pub device: DeviceChoice,
}

/// The layouts of a model directory's recorded training settings: one so
/// far (run.toml; train_config.json, [`wmrl_run::Versioned::LEGACY_FILE`],
/// before every kind of run recorded its settings in run.toml).
impl wmrl_run::Versioned for TrainConfig {
    const FORMAT: u32 = 0;
    const LEGACY_FILE: Option<&'static str> = Some("train_config.json");
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            net: NetConfig::default(),
            camera: 0,
            steps: 1500,
            batch_size: 16,
            lr: 2e-3,
            weight_decay: 1e-4,
            val_fraction: 0.2,
            max_frames_per_episode: 64,
            prefix_prob: 0.5,
            success_progress: 0.999,
            success_weight: 1.0,
            eval_every: 250,
            seed: 0,
            device: DeviceChoice::Cpu,
        }
    }
}

/// One episode reduced to what the world model trains on.
#[derive(Debug, Clone)]
pub struct EpisodeData {
    /// File it came from (empty for in-memory episodes).
    pub path: PathBuf,
    pub instruction: String,
    pub frames: Vec<Frame>,
    pub progress: Vec<f32>,
    /// Per-frame success labels (0/1).
    pub success_labels: Vec<f32>,
    pub success: bool,
    pub source: String,
}

impl EpisodeData {
    /// Keep `max_frames` frames of `camera` uniformly; `None` when the
    /// episode has no oracle progress or no frames.
    pub fn from_episode(
        ep: &Episode,
        camera: usize,
        max_frames: usize,
        success_progress: f32,
    ) -> Option<Self> {
        let n = ep.steps.len();
        if n == 0
            || ep
                .steps
                .iter()
                .any(|s| s.progress.is_none() || s.frames.len() <= camera)
        {
            return None;
        }
        let mut idx = uniform_indices(n, max_frames.min(n).max(1));
        idx.dedup();
        let last = *idx.last()?;
        let frames = idx
            .iter()
            .map(|&i| ep.steps[i].frames[camera].clone())
            .collect();
        let progress: Vec<f32> = idx
            .iter()
            .map(|&i| ep.steps[i].progress.unwrap_or(0.0))
            .collect();
        let success_labels = idx
            .iter()
            .zip(&progress)
            .map(|(&i, &p)| f32::from(u8::from(p >= success_progress || (i == last && ep.success))))
            .collect();
        Some(Self {
            path: PathBuf::new(),
            instruction: ep.instruction.clone(),
            frames,
            progress,
            success_labels,
            success: ep.success,
            source: ep.source.clone(),
        })
    }
}

/// Read every episode in `dir` (skipping those without oracle progress).
pub fn load_dir(dir: &Path, cfg: &TrainConfig) -> Result<Vec<EpisodeData>> {
    let paths = wmrl_env::list_episodes(dir)?;
    let mut out = Vec::new();
    for p in paths {
        let ep = wmrl_env::read_episode(&p)?;
        match EpisodeData::from_episode(
            &ep,
            cfg.camera,
            cfg.max_frames_per_episode,
            cfg.success_progress,
        ) {
            Some(mut d) => {
                d.path = p;
                out.push(d);
            }
            None => {
                tracing::warn!(path = %p.display(), "skipped: no oracle progress or no such camera")
            }
        }
    }
    if out.is_empty() {
        return Err(WmError::Config(format!(
            "no usable episodes in {} (need oracle progress and camera {})",
            dir.display(),
            cfg.camera
        )));
    }
    Ok(out)
}

/// Split into (train, validation) by a seeded shuffle; both non-empty when
/// there are at least two episodes.
pub fn split(
    mut eps: Vec<EpisodeData>,
    val_fraction: f64,
    seed: u64,
) -> (Vec<EpisodeData>, Vec<EpisodeData>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    eps.shuffle(&mut rng);
    let n_val = ((eps.len() as f64 * val_fraction).round() as usize)
        .clamp(usize::from(eps.len() > 1), eps.len().saturating_sub(1));
    let val = eps.split_off(eps.len() - n_val);
    (eps, val)
}

/// A batch: frames `[B,T,3,H,W]`, tokens `[B,L]`, progress and success `[B,T]`.
pub struct Batch {
    pub frames: Tensor,
    pub tokens: Tensor,
    pub progress: Tensor,
    pub success: Tensor,
}

/// Build a batch from (episode, prefix length) choices.
pub fn make_batch(
    eps: &[EpisodeData],
    choices: &[(usize, usize)],
    net: &NetConfig,
    device: &Device,
) -> Result<Batch> {
    let refs: Vec<&EpisodeData> = eps.iter().collect();
    make_batch_of(&refs, choices, net, device)
}

/// [`make_batch`] over borrowed episodes.
pub(crate) fn make_batch_of(
    eps: &[&EpisodeData],
    choices: &[(usize, usize)],
    net: &NetConfig,
    device: &Device,
) -> Result<Batch> {
    let (t, l) = (net.num_frames, net.instruction_len);
    let b = choices.len();
    let mut frames = Vec::with_capacity(b * t * 3 * net.height * net.width);
    let (mut tokens, mut prog, mut succ) = (Vec::new(), Vec::new(), Vec::new());
    for &(e, end) in choices {
        let ep = eps[e];
        for i in uniform_indices(end, t) {
            let f = &ep.frames[i];
            if f.height as usize != net.height || f.width as usize != net.width {
                return Err(WmError::Config(format!(
                    "episode {} has {}x{} frames, the model takes {}x{}",
                    ep.path.display(),
                    f.width,
                    f.height,
                    net.width,
                    net.height
                )));
            }
            push_frame_chw(f, &mut frames);
            prog.push(ep.progress[i]);
            succ.push(ep.success_labels[i]);
        }
        tokens.extend(wmrl_env::text::byte_tokens(&ep.instruction, l));
    }
    Ok(Batch {
        frames: Tensor::from_vec(frames, (b, t, 3, net.height, net.width), device)?,
        tokens: Tensor::from_vec(tokens, (b, l), device)?,
        progress: Tensor::from_vec(prog, (b, t), device)?,
        success: Tensor::from_vec(succ, (b, t), device)?,
    })
}

/// One validation/training record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainRecord {
    pub step: usize,
    pub train_loss: f32,
    pub val_loss: Option<f32>,
    /// Mean absolute error of per-frame progress on whole held-out rollouts.
    pub val_progress_mae: Option<f32>,
}

/// A trained model and its history.
pub struct Trained {
    pub net: ProgressNet,
    pub varmap: VarMap,
    pub config: TrainConfig,
    pub history: Vec<TrainRecord>,
}

pub(crate) fn loss(net: &ProgressNet, batch: &Batch, success_weight: f64) -> Result<Tensor> {
    let logits = net.logits(&batch.frames, &batch.tokens)?;
    let lp = logits.narrow(2, 0, 1)?.squeeze(2)?;
    let ls = logits.narrow(2, 1, 1)?.squeeze(2)?;
    let l1 = bce_with_logits(&lp, &batch.progress)?;
    let l2 = bce_with_logits(&ls, &batch.success)?;
    Ok((l1 + (l2 * success_weight)?)?)
}

/// Loss and progress MAE over whole validation rollouts.
pub fn evaluate(
    net: &ProgressNet,
    val: &[EpisodeData],
    success_weight: f64,
    device: &Device,
) -> Result<(f32, f32)> {
    let (mut tot, mut mae, mut n) = (0.0f32, 0.0f32, 0usize);
    let choices: Vec<(usize, usize)> = val
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.frames.len()))
        .collect();
    for chunk in choices.chunks(32) {
        let b = make_batch(val, chunk, &net.config, device)?;
        tot += loss(net, &b, success_weight)?.to_scalar::<f32>()? * chunk.len() as f32;
        let (p, _) = net.predict(&b.frames, &b.tokens)?;
        mae += (p - &b.progress)?
            .abs()?
            .mean(1)?
            .sum_all()?
            .to_scalar::<f32>()?;
        n += chunk.len();
    }
    Ok((tot / n.max(1) as f32, mae / n.max(1) as f32))
}

/// Train from scratch on `device` (the one `cfg.device` resolves to; the
/// caller places it, as candle passes a `&Device`). `on_step` sees every
/// step's loss.
pub fn train(
    train_eps: &[EpisodeData],
    val_eps: &[EpisodeData],
    cfg: &TrainConfig,
    device: &Device,
    on_step: &mut dyn FnMut(usize, f32),
) -> Result<Trained> {
    let first = train_eps
        .first()
        .and_then(|e| e.frames.first())
        .ok_or_else(|| WmError::Config("no training episodes".into()))?;
    let mut cfg = cfg.clone();
    cfg.net = cfg
        .net
        .clone()
        .with_frame_size(first.height as usize, first.width as usize);
    let (net, varmap) = ProgressNet::init(cfg.net.clone(), device, cfg.seed)?;
    let mut opt = AdamW::new(
        varmap.all_vars(),
        ParamsAdamW {
            lr: cfg.lr,
            weight_decay: cfg.weight_decay,
            ..Default::default()
        },
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut history = Vec::new();
    let mut running = 0.0f32;
    for step in 1..=cfg.steps {
        let choices: Vec<(usize, usize)> = (0..cfg.batch_size)
            .map(|_| {
                let e = rng.random_range(0..train_eps.len());
                let n = train_eps[e].frames.len();
                let end = if rng.random_bool(cfg.prefix_prob) {
                    rng.random_range(1..=n)
                } else {
                    n
                };
                (e, end)
            })
            .collect();
        let batch = make_batch(train_eps, &choices, &cfg.net, device)?;
        let l = loss(&net, &batch, cfg.success_weight)?;
        opt.backward_step(&l)?;
        let lv = l.to_scalar::<f32>()?;
        running = if step == 1 {
            lv
        } else {
            0.95 * running + 0.05 * lv
        };
        on_step(step, running);
        if step % cfg.eval_every.max(1) == 0 || step == cfg.steps {
            let (val_loss, val_mae) = if val_eps.is_empty() {
                (None, None)
            } else {
                let (a, b) = evaluate(&net, val_eps, cfg.success_weight, device)?;
                (Some(a), Some(b))
            };
            tracing::info!(
                step,
                train_loss = running,
                ?val_loss,
                ?val_mae,
                "world model training"
            );
            history.push(TrainRecord {
                step,
                train_loss: running,
                val_loss,
                val_progress_mae: val_mae,
            });
        }
    }
    Ok(Trained {
        net,
        varmap,
        config: cfg,
        history,
    })
}

/// File names inside a model directory (its training settings are the
/// directory's run.toml, [`wmrl_run::RunDir::settings`]).
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const SPLIT_FILE: &str = "split.json";
pub const ONNX_FILE: &str = "model.onnx";

/// Which episodes trained and which were held out.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SplitRecord {
    pub train: Vec<String>,
    pub validation: Vec<String>,
    pub history: Vec<TrainRecord>,
}

/// Save weights, config (run.toml) and split into `dir`.
pub fn save(dir: &Path, trained: &Trained, split: &SplitRecord) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    trained.varmap.save(dir.join(WEIGHTS_FILE))?;
    let write_json = |name: &str, v: &dyn erased::Json| -> Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, v.json()?).map_err(|e| io_err(&p, e))
    };
    let run = wmrl_run::RunDir::new(dir);
    run.recorded(&trained.config)
        .and_then(|s| run.write_settings(&s))
        .map_err(|e| io_err(Path::new(&e.path), e.message))?;
    write_json(SPLIT_FILE, split)?;
    Ok(())
}

/// Load a saved model directory back into a candle network.
pub fn load(dir: &Path) -> Result<(ProgressNet, VarMap, TrainConfig)> {
    let (cfg, _): (TrainConfig, _) = wmrl_run::RunDir::new(dir)
        .read_settings()
        .map_err(|e| WmError::Config(e.to_string()))?;
    let mut varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let net = ProgressNet::new(cfg.net.clone(), vb)?;
    varmap.load(dir.join(WEIGHTS_FILE))?;
    Ok((net, varmap, cfg))
}

/// Read the split record of a model directory.
pub fn load_split(dir: &Path) -> Result<SplitRecord> {
    let p = dir.join(SPLIT_FILE);
    let text = std::fs::read_to_string(&p).map_err(|e| io_err(&p, e))?;
    serde_json::from_str(&text).map_err(|e| io_err(&p, e))
}

mod erased {
    use crate::{Result, WmError};
    pub trait Json {
        fn json(&self) -> Result<String>;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> Result<String> {
            serde_json::to_string_pretty(self).map_err(|e| WmError::Config(e.to_string()))
        }
    }
}
