//! Supervised fine-tuning (behaviour cloning) on demonstration episodes:
//! every step of every episode becomes one sample (observation at `t` ->
//! the action chunk `t .. t + chunk`, masked past the episode's end).
//! AdamW with warmup + cosine, a progress bar, periodic checkpoints into the
//! run directory, and exact resume (optimizer moments, step, and per-step
//! seeded batches). The loop ([`train_sft`]) takes any [`SftModel`]: the
//! `tiny` policy on an [`SftDataset`] ([`PolicySft`]), or a whole MiniVLA
//! (wmrl-minivla's `MiniVlaSft`).

use std::path::Path;
use std::time::Instant;
use wmrl_grpo::OptimConfig;

use candle_core::{Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use wmrl_env::Episode;

use wmrl_run::DeviceChoice;

use crate::checkpoint::{read_json, write_json};
use crate::error::io_err;
use crate::input::{observation_images, prepare_rows};
use crate::{
    ACTION_DIM, ActionTokenizer, Policy, PolicyConfig, PolicyError, PolicyInput, PolicyOptimizer,
    PreparedInputs, Result, nll_loss,
};

/// SFT settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SftConfig {
    pub steps: usize,
    pub batch_size: usize,
    pub optim: OptimConfig,
    /// Write the run directory's checkpoint every this many steps (and at the end).
    pub checkpoint_every: usize,
    pub log_every: usize,
    /// Seeds batch sampling.
    pub seed: u64,
    /// Train on failed demonstrations too.
    pub include_failures: bool,
    /// Where the model trains (`wmrl sft --device`): `cpu` (the default,
    /// left out of run.toml), `cuda` or `auto`. Where, not what: a run may
    /// resume on another device.
    #[serde(skip_serializing_if = "DeviceChoice::is_cpu")]
    pub device: DeviceChoice,
}

/// A resumed SFT run may be given more steps (`--steps` sets the schedule's
/// length with them) and another device.
impl wmrl_run::RunSettings for SftConfig {
    const MAY_CHANGE: &'static [&'static str] = &["steps", "optim.total_steps", "device"];
}

/// The layouts of an SFT run's recorded settings: one so far (run.toml;
/// sft.json, [`wmrl_run::Versioned::LEGACY_FILE`], before every kind of
/// run recorded its settings in run.toml).
impl wmrl_run::Versioned for SftConfig {
    const FORMAT: u32 = 0;
    const LEGACY_FILE: Option<&'static str> = Some("sft.json");
}

impl Default for SftConfig {
    fn default() -> Self {
        Self {
            steps: 1500,
            batch_size: 32,
            optim: OptimConfig {
                lr: 1e-3,
                warmup_steps: 100,
                total_steps: 1500,
                ..OptimConfig::default()
            },
            checkpoint_every: 250,
            log_every: 50,
            seed: 0,
            include_failures: false,
            device: DeviceChoice::Cpu,
        }
    }
}

/// Demonstration samples, frames already resized to the policy's input size.
#[derive(Debug, Default)]
pub struct SftDataset {
    images: Vec<Vec<Vec<u8>>>,
    instruction: Vec<usize>,
    instructions: Vec<String>,
    proprio: Vec<Vec<f32>>,
    tokens: Vec<Vec<u32>>,
    mask: Vec<Vec<f32>>,
    pub n_episodes: usize,
}

impl SftDataset {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Add one episode's steps as samples.
    pub fn push_episode(&mut self, cfg: &PolicyConfig, ep: &Episode) -> Result<()> {
        let tok = ActionTokenizer::new(cfg.n_bins);
        let ins = match self.instructions.iter().position(|s| s == &ep.instruction) {
            Some(i) => i,
            None => {
                self.instructions.push(ep.instruction.clone());
                self.instructions.len() - 1
            }
        };
        let n = ep.steps.len();
        for t in 0..n {
            let step = &ep.steps[t];
            let prev = ep.steps[t.saturating_sub(cfg.chunk)]
                .frames
                .first()
                .cloned();
            let input = PolicyInput {
                instruction: String::new(),
                frames: step.frames.clone(),
                prev_frame: prev,
                proprio: step.proprio.clone(),
            };
            self.images.push(observation_images(cfg, &input)?);
            self.instruction.push(ins);
            self.proprio.push(step.proprio.clone());
            let mut toks = Vec::with_capacity(cfg.tokens_per_call());
            let mut mask = Vec::with_capacity(cfg.tokens_per_call());
            for k in 0..cfg.chunk {
                let (a, m) = match ep.steps.get(t + k) {
                    Some(s) => (s.action.as_slice(), 1.0),
                    None => (ep.steps[n - 1].action.as_slice(), 0.0),
                };
                if a.len() != ACTION_DIM {
                    return Err(PolicyError::Input(format!(
                        "demo action has {} dims, need {ACTION_DIM}",
                        a.len()
                    )));
                }
                toks.extend(tok.encode_all(a));
                mask.extend([m; ACTION_DIM]);
            }
            self.tokens.push(toks);
            self.mask.push(mask);
        }
        self.n_episodes += 1;
        Ok(())
    }

    /// Load up to `max_episodes` episodes from a `wmrl demos` directory
    /// (successful ones only unless `include_failures`), in file order.
    pub fn from_dir(
        cfg: &PolicyConfig,
        dir: &Path,
        max_episodes: Option<usize>,
        include_failures: bool,
    ) -> Result<Self> {
        let mut ds = Self::default();
        for path in wmrl_env::list_episodes(dir)? {
            if max_episodes.is_some_and(|m| ds.n_episodes >= m) {
                break;
            }
            let ep = wmrl_env::read_episode(&path)?;
            if ep.success || include_failures {
                ds.push_episode(cfg, &ep)?;
            }
        }
        if ds.is_empty() {
            return Err(PolicyError::NoData(format!(
                "no usable episodes in {}",
                dir.display()
            )));
        }
        Ok(ds)
    }

    /// Per-feature mean and std of the proprio of all samples.
    pub fn proprio_stats(&self, dim: usize) -> (Vec<f32>, Vec<f32>) {
        let n = self.proprio.len().max(1) as f64;
        let mut mean = vec![0f64; dim];
        let mut sq = vec![0f64; dim];
        for p in &self.proprio {
            for i in 0..dim {
                let v = f64::from(p.get(i).copied().unwrap_or(0.0));
                mean[i] += v / n;
                sq[i] += v * v / n;
            }
        }
        let std = mean
            .iter()
            .zip(&sq)
            .map(|(m, s)| ((s - m * m).max(0.0).sqrt().max(PROPRIO_STD_FLOOR)) as f32)
            .collect();
        (mean.into_iter().map(|m| m as f32).collect(), std)
    }

    /// One batch: model inputs, `[B, T]` tokens and mask.
    pub fn batch(
        &self,
        policy: &Policy,
        idx: &[usize],
    ) -> Result<(PreparedInputs, Tensor, Tensor)> {
        let imgs: Vec<&[Vec<u8>]> = idx.iter().map(|&i| self.images[i].as_slice()).collect();
        let ins: Vec<&str> = idx
            .iter()
            .map(|&i| self.instructions[self.instruction[i]].as_str())
            .collect();
        let pro: Vec<&[f32]> = idx.iter().map(|&i| self.proprio[i].as_slice()).collect();
        let inputs = prepare_rows(
            policy.config(),
            &imgs,
            &ins,
            &pro,
            policy.device(),
            policy.dtype(),
        )?;
        let toks: Vec<Vec<u32>> = idx.iter().map(|&i| self.tokens[i].clone()).collect();
        let t = policy.config().tokens_per_call();
        let mask: Vec<f32> = idx
            .iter()
            .flat_map(|&i| self.mask[i].iter().copied())
            .collect();
        let mask =
            Tensor::from_vec(mask, (idx.len(), t), policy.device())?.to_dtype(policy.dtype())?;
        Ok((inputs, policy.tokens_tensor(&toks)?, mask))
    }
}

/// What behaviour cloning trains: named parameters, the loss on a batch of
/// samples, and the run directory's copy of the parameters.
pub trait SftModel {
    /// Every trained parameter, by name.
    fn vars(&self) -> Vec<(String, Var)>;
    /// Samples to draw batches from, and the episodes they came from.
    fn n_samples(&self) -> usize;
    fn n_episodes(&self) -> usize;
    /// Mean loss (differentiable) and token accuracy of samples `idx`.
    fn loss(&self, idx: &[usize]) -> Result<(Tensor, f64)>;
    /// Write the parameters (and whatever loading them needs) into `out`.
    fn save(&self, out: &Path) -> Result<()>;
    /// Set the parameters to those [`SftModel::save`] wrote into `out`.
    fn restore(&self, out: &Path) -> Result<()>;
}

/// The `tiny` policy's behaviour cloning: [`nll_loss`] of its action chunks.
#[derive(Debug, Clone, Copy)]
pub struct PolicySft<'a> {
    pub policy: &'a Policy,
    pub data: &'a SftDataset,
}

impl SftModel for PolicySft<'_> {
    fn vars(&self) -> Vec<(String, Var)> {
        self.policy
            .vars()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
    fn n_samples(&self) -> usize {
        self.data.len()
    }
    fn n_episodes(&self) -> usize {
        self.data.n_episodes
    }
    fn loss(&self, idx: &[usize]) -> Result<(Tensor, f64)> {
        let (inputs, tokens, mask) = self.data.batch(self.policy, idx)?;
        nll_loss(self.policy, &inputs, &tokens, &mask)
    }
    fn save(&self, out: &Path) -> Result<()> {
        self.policy.save(out)
    }
    fn restore(&self, out: &Path) -> Result<()> {
        let saved = Policy::load_on(out, self.policy.device(), self.policy.dtype())?;
        self.policy.copy_from(&saved)
    }
}

/// What an SFT run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftReport {
    pub steps: usize,
    pub start_step: usize,
    pub final_loss: f64,
    pub final_token_acc: f64,
    pub wall_secs: f64,
    pub samples_per_sec: f64,
    pub n_samples: usize,
    pub n_episodes: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct TrainState {
    step: usize,
    /// How far metrics.jsonl reached at the checkpoint: a resumed run cuts
    /// it back there, so the steps after it are logged once (`None` in a
    /// state from before it was kept: the file is left as it is).
    #[serde(default)]
    metrics_len: Option<u64>,
}

/// Lower bound of a proprio feature's std. A feature that never moves in the
/// demos (e.g. roll and pitch under a yaw-only expert) would otherwise turn
/// the policy's own small drifts into huge normalised inputs: measured on
/// the embedded simulator, a floor of 1e-3 made closed-loop rollouts leave
/// the training distribution within 10 steps.
pub const PROPRIO_STD_FLOOR: f64 = 0.02;

const STATE_FILE: &str = "train_state.json";
const OPTIM_FILE: &str = "optimizer.safetensors";

/// True when `out` holds a resumable SFT run: a whole checkpoint in
/// `out/checkpoint/` (or one of the older layout, [`migrate_layout`]).
pub fn can_resume(out: &Path) -> bool {
    let whole = |d: &Path| d.join(STATE_FILE).exists() && d.join(OPTIM_FILE).exists();
    whole(&wmrl_run::RunDir::new(out).checkpoint()) || whole(out)
}

/// An SFT directory of the older layout kept its resume state beside the
/// policy (`train_state.json` and `optimizer.safetensors` in `out`, with the
/// model's files), written one file after another. It becomes today's: the
/// three go into one whole checkpoint, `out/checkpoint/`, and the loose
/// state files go. Nothing to do for a directory without them.
fn migrate_layout(model: &dyn SftModel, out: &Path) -> Result<()> {
    let files = wmrl_run::RunDir::new(out);
    if files.checkpoint().join(STATE_FILE).exists() || !out.join(STATE_FILE).exists() {
        return Ok(());
    }
    model.restore(out)?;
    files.write_checkpoint(|ck| -> Result<()> {
        model.save(ck)?;
        for f in [OPTIM_FILE, STATE_FILE] {
            std::fs::copy(out.join(f), ck.join(f)).map_err(|e| io_err(&out.join(f), e))?;
        }
        Ok(())
    })?;
    for f in [OPTIM_FILE, STATE_FILE] {
        std::fs::remove_file(out.join(f)).map_err(|e| io_err(&out.join(f), e))?;
    }
    Ok(())
}

fn batch_indices(seed: u64, step: usize, n: usize, b: usize) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(step as u64);
    (0..b).map(|_| rng.random_range(0..n)).collect()
}

/// Train `model` in place, checkpointing into `out`: the trained policy's
/// files, `run.toml` (the [`SftConfig`]), `metrics.jsonl`, and `checkpoint/` (the parameters,
/// `optimizer.safetensors` and `train_state.json`, written whole: a fresh
/// directory renamed into place, so a run stopped at any moment keeps one
/// consistent checkpoint). With `resume` and a resumable `out`, the
/// parameters, the optimizer and the step are restored from it first.
pub fn train_sft(
    model: &dyn SftModel,
    cfg: &SftConfig,
    out: &Path,
    resume: bool,
    progress: bool,
) -> Result<SftReport> {
    std::fs::create_dir_all(out).map_err(|e| io_err(out, e))?;
    let n_samples = model.n_samples();
    if n_samples == 0 || cfg.batch_size == 0 {
        return Err(PolicyError::NoData("empty dataset or batch size 0".into()));
    }
    let mut opt = PolicyOptimizer::over(&model.vars(), cfg.optim.clone(), &[])?;
    let mut start = 0;
    let files = wmrl_run::RunDir::new(out);
    let metrics_path = files.metrics();
    if resume && can_resume(out) {
        // The same settings bar what may change between starts (the step
        // count, and with it the schedule's length, as `--steps` sets both;
        // the device), or the run is refused naming the first difference.
        let had = files
            .against_recorded(cfg)
            .map_err(|e| PolicyError::Config(e.to_string()))?
            .ok_or_else(|| {
                PolicyError::Config(format!(
                    "{}: an SFT checkpoint without recorded settings (run.toml)",
                    out.display()
                ))
            })?;
        if let Some(d) = had.differs {
            return Err(PolicyError::Config(format!(
                "{}: an SFT run of other settings (recorded against now: {d}); resume it with \
                 its own settings or pick another --out",
                out.display()
            )));
        }
        migrate_layout(model, out)?;
        let ck = wmrl_run::RunDir::new(out).checkpoint();
        model.restore(&ck)?;
        opt.load(&ck.join(OPTIM_FILE))?;
        let state = read_json::<TrainState>(&ck.join(STATE_FILE))?;
        start = state.step;
        if let Some(len) = state.metrics_len {
            wmrl_run::cut_back(&metrics_path, len).map_err(|e| io_err(&metrics_path, e))?;
        }
        tracing::info!(step = start, "resuming SFT");
    } else {
        wmrl_run::cut_back(&metrics_path, 0).map_err(|e| io_err(&metrics_path, e))?;
    }
    files.write_settings(&files.recorded(cfg)?)?;
    let bar = wmrl_run::Progress::new("sft", cfg.steps as u64, "steps", progress);
    bar.set_position(start as u64);
    let t0 = Instant::now();
    let (mut ema_loss, mut ema_acc) = (f64::NAN, f64::NAN);
    let save = |step: usize, opt: &PolicyOptimizer| -> Result<()> {
        let metrics_len = Some(wmrl_run::len_of(&metrics_path));
        files.write_checkpoint(|ck| -> Result<()> {
            model.save(ck)?;
            opt.save(&ck.join(OPTIM_FILE))?;
            write_json(&ck.join(STATE_FILE), &TrainState { step, metrics_len })
        })?;
        // The policy itself, where every command reads a policy directory.
        model.save(out)
    };
    for step in start..cfg.steps {
        let idx = batch_indices(cfg.seed, step, n_samples, cfg.batch_size);
        let (loss, acc) = model.loss(&idx)?;
        let lv = loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        let st = opt.step(&loss)?;
        let a = 0.05;
        ema_loss = if ema_loss.is_nan() {
            lv
        } else {
            (1.0 - a) * ema_loss + a * lv
        };
        ema_acc = if ema_acc.is_nan() {
            acc
        } else {
            (1.0 - a) * ema_acc + a * acc
        };
        bar.inc(1);
        bar.set_message(format!(
            "loss {ema_loss:.3} acc {ema_acc:.3} lr {:.1e}",
            st.lr
        ));
        if (step + 1) % cfg.log_every.max(1) == 0 || step + 1 == cfg.steps {
            let line = serde_json::json!({"step": step + 1, "loss": lv, "loss_ema": ema_loss, "token_acc": acc,
                "lr": st.lr, "grad_norm": st.grad_norm, "elapsed_secs": t0.elapsed().as_secs_f64()});
            wmrl_run::append(&metrics_path, &line).map_err(|e| io_err(&metrics_path, e))?;
        }
        if (step + 1) % cfg.checkpoint_every.max(1) == 0 && step + 1 < cfg.steps {
            save(step + 1, &opt)?;
        }
    }
    save(cfg.steps, &opt)?;
    bar.finish();
    let wall = t0.elapsed().as_secs_f64();
    let done = cfg.steps.saturating_sub(start);
    Ok(SftReport {
        steps: cfg.steps,
        start_step: start,
        final_loss: ema_loss,
        final_token_acc: ema_acc,
        wall_secs: wall,
        samples_per_sec: (done * cfg.batch_size) as f64 / wall.max(1e-9),
        n_samples,
        n_episodes: model.n_episodes(),
    })
}
