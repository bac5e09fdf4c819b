//! GRPO on MiniVLA's action tokens: LoRA adapters on the language model
//! (rank, scale and target projections in [`LoraConfig`]), the 7 action
//! tokens sampled at a temperature with their log-probabilities, the same
//! log-probabilities recomputed with gradient for the update (the vision
//! backbones and projector frozen, their output kept from rollout time in a
//! [`Prefix`]), the GRPO objective of wmrl-grpo over them, and the export
//! of the adapted model, adapters merged, in the converted layout that
//! [`MiniVla::load`] and scripts/convert_minivla.py's key map read.
//!
//! Sampling is restricted to the action tokens (the `n_bins - 1` ids whose
//! bins [`MiniVla::action_of_token`] decodes without clipping), as
//! SimpleVLA-RL does for OpenVLA; a log-probability is taken at the
//! sampling temperature, so the update's ratio at the old parameters is
//! exactly 1. Temperature 0 is greedy over the same range, its
//! log-probabilities taken at temperature 1.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{D, DType, Device, Tensor, Var};
use serde::{Deserialize, Serialize};
use wmrl_grpo::{GrpoStats, Objective, ObjectiveInputs};

use crate::llm::Lora;
use crate::model::{CONFIG_FILE, LLM, MiniVla, TOKENIZER_FILE, WEIGHTS_FILE};
use crate::{ACTION_DIM, MiniVlaError, Result};

/// The projections an adapter may sit on, in each decoder layer.
pub const LORA_TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// LoRA on the language model (PEFT's convention: `scale = alpha / rank`,
/// `A` drawn uniform in `±1/sqrt(in)`, `B` zero).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    /// Names from [`LORA_TARGETS`], in every layer.
    pub targets: Vec<String>,
    /// Seed of `A`'s draw.
    pub seed: u64,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            targets: LORA_TARGETS.iter().map(|s| s.to_string()).collect(),
            seed: 0,
        }
    }
}

impl LoraConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(MiniVlaError::Config(format!("lora: {m}")));
        if self.rank == 0 {
            return bad("rank must be at least 1".into());
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return bad(format!("alpha must be finite and > 0, not {}", self.alpha));
        }
        if self.targets.is_empty() {
            return bad("targets is empty".into());
        }
        for t in &self.targets {
            if !LORA_TARGETS.contains(&t.as_str()) {
                return bad(format!(
                    "unknown target `{t}` (expected some of {})",
                    LORA_TARGETS.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// What the language model reads before the action tokens: prompt and
/// projected patches, `[1, L, hidden]`, with no gradient (the vision side
/// is frozen, so rollout time computes it once for the update too).
#[derive(Debug, Clone)]
pub struct Prefix {
    pub(crate) embeds: Tensor,
}

impl Prefix {
    /// The prefix as f32, row-major `[L, hidden]` (a rollout keeps it for
    /// the update).
    pub fn to_features(&self) -> Result<Vec<f32>> {
        Ok(self
            .embeds
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?)
    }

    /// A prefix of `model` from [`Prefix::to_features`]'s floats.
    pub fn from_features(model: &MiniVla, features: &[f32]) -> Result<Self> {
        let hidden = model.config().llm.hidden_size;
        if features.is_empty() || !features.len().is_multiple_of(hidden) {
            return Err(MiniVlaError::Config(format!(
                "a prefix of {} floats is not rows of the model's width {hidden}",
                features.len()
            )));
        }
        let t = Tensor::from_slice(
            features,
            (1, features.len() / hidden, hidden),
            &model.device,
        )?
        .to_dtype(model.dtype)?;
        Ok(Self { embeds: t })
    }

    pub fn len(&self) -> usize {
        self.embeds.dim(1).unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The 7 action tokens of one step and their log-probabilities.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActionSample {
    pub tokens: [u32; ACTION_DIM],
    pub logprobs: [f32; ACTION_DIM],
}

/// One step of a rollout as the update needs it.
#[derive(Debug, Clone)]
pub struct ActionStep {
    pub prefix: Prefix,
    pub sample: ActionSample,
    /// The group-relative advantage of the rollout the step belongs to.
    pub advantage: f32,
}

fn check_temperature(t: f32) -> Result<()> {
    if t.is_finite() && t >= 0.0 {
        Ok(())
    } else {
        Err(MiniVlaError::Config(format!(
            "temperature must be finite and >= 0, not {t}"
        )))
    }
}

/// splitmix64 in `[-bound, bound]`.
/// Inverse-CDF draw from log-probabilities with `u in [0, 1)` (the last
/// index when rounding leaves `u` beyond the sum).
fn draw(lp: &[f32], u: f64) -> usize {
    let mut acc = 0.0f64;
    for (i, l) in lp.iter().enumerate() {
        acc += (*l as f64).exp();
        if u < acc {
            return i;
        }
    }
    lp.len() - 1
}

/// The first index of the largest value.
fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv { (i, x) } else { (bi, bv) }
        })
        .0
}

fn uniform(seed: u64, n: usize, bound: f32) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let u = ((z ^ (z >> 31)) >> 11) as f32 / (1u64 << 53) as f32;
            (2.0 * u - 1.0) * bound
        })
        .collect()
}

impl MiniVla {
    /// Put adapters on the language model (replacing any there). Only the
    /// adapters are trainable: the checkpoint's tensors are constants.
    pub fn attach_lora(&mut self, cfg: &LoraConfig) -> Result<()> {
        cfg.validate()?;
        let (device, dtype) = (self.device.clone(), self.dtype);
        let scale = cfg.alpha / cfg.rank as f64;
        let mut adapters = Vec::new();
        for (k, (name, short, proj)) in self.llm.projections_mut().into_iter().enumerate() {
            if !cfg.targets.iter().any(|t| t == short) {
                proj.lora = None;
                continue;
            }
            let bound = 1.0 / (proj.in_dim as f32).sqrt();
            let a = Tensor::from_vec(
                uniform(
                    cfg.seed ^ (k as u64).wrapping_mul(0x2545_F491_4F6C_DD1D),
                    cfg.rank * proj.in_dim,
                    bound,
                ),
                (cfg.rank, proj.in_dim),
                &device,
            )?
            .to_dtype(dtype)?;
            let a = Var::from_tensor(&a)?;
            let b = Var::from_tensor(&Tensor::zeros((proj.out_dim, cfg.rank), dtype, &device)?)?;
            adapters.push((format!("{LLM}.{name}.lora_a"), a.clone()));
            adapters.push((format!("{LLM}.{name}.lora_b"), b.clone()));
            proj.lora = Some(Lora { a, b, scale });
        }
        self.adapters = adapters;
        self.lora = Some(cfg.clone());
        Ok(())
    }

    /// The trainable adapters, `language_model.<projection>.lora_{a,b}`.
    pub fn adapters(&self) -> &[(String, Var)] {
        &self.adapters
    }

    pub fn lora_config(&self) -> Option<&LoraConfig> {
        self.lora.as_ref()
    }

    /// Write the adapters (safetensors, f32).
    pub fn save_adapters(&self, path: &Path) -> Result<()> {
        let map = self
            .adapters
            .iter()
            .map(|(n, v)| Ok((n.clone(), v.as_tensor().to_dtype(DType::F32)?)))
            .collect::<Result<HashMap<String, Tensor>>>()?;
        let tmp = path.with_extension("tmp");
        candle_core::safetensors::save(&map, &tmp).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| io(path, e))
    }

    /// Read adapters written by [`MiniVla::save_adapters`] into the
    /// attached ones: every name and shape must match.
    pub fn load_adapters(&self, path: &Path) -> Result<()> {
        let map = candle_core::safetensors::load(path, &self.device).map_err(|e| io(path, e))?;
        let tensor_err = |key: &str, message: String| MiniVlaError::Tensor {
            path: path.display().to_string(),
            key: key.into(),
            message,
        };
        if let Some(extra) = map
            .keys()
            .find(|k| !self.adapters.iter().any(|(n, _)| n == *k))
        {
            return Err(tensor_err(extra, "not an attached adapter".into()));
        }
        for (name, var) in &self.adapters {
            let t = map
                .get(name)
                .ok_or_else(|| tensor_err(name, "missing".into()))?;
            if t.dims() != var.dims() {
                return Err(tensor_err(
                    name,
                    format!("shape {:?}, expected {:?}", t.dims(), var.dims()),
                ));
            }
            var.set(&t.to_dtype(self.dtype)?)?;
        }
        Ok(())
    }

    /// First action token id and how many there are (`n_bins - 1`).
    pub fn action_range(&self) -> (u32, usize) {
        let n = self.cfg.n_bins - 1;
        ((self.cfg.tokenizer_len - n) as u32, n)
    }

    /// The language model's input before the action tokens, for `images`
    /// and the prompt's token ids.
    pub fn prefix(&self, images: &[image::RgbImage], prompt_ids: &[u32]) -> Result<Prefix> {
        Ok(Prefix {
            embeds: self.prefix_embeds(images, prompt_ids)?.detach(),
        })
    }

    /// Draw the 7 action tokens one after another (KV cache), each from the
    /// action tokens' softmax at `temperature` with `uniform() in [0, 1)`;
    /// temperature 0 takes the argmax.
    pub fn sample_action_tokens(
        &self,
        prefix: &Prefix,
        temperature: f32,
        uniform: &mut dyn FnMut() -> f64,
    ) -> Result<ActionSample> {
        let mut rows =
            self.sample_action_tokens_batch(&prefix.embeds, temperature, &mut [uniform])?;
        rows.pop()
            .ok_or_else(|| MiniVlaError::Config("no sample drawn".into()))
    }

    /// As [`MiniVla::sample_action_tokens`] for `b` prefixes of one length
    /// at once (`embeds` `[b, L, hidden]`, one forward per token for the
    /// whole batch), row `i` drawing from `uniforms[i]` in token order.
    pub fn sample_action_tokens_batch(
        &self,
        embeds: &Tensor,
        temperature: f32,
        uniforms: &mut [&mut dyn FnMut() -> f64],
    ) -> Result<Vec<ActionSample>> {
        check_temperature(temperature)?;
        let b = embeds.dim(0)?;
        if b != uniforms.len() {
            return Err(MiniVlaError::Config(format!(
                "{b} prefixes for {} random streams",
                uniforms.len()
            )));
        }
        let (lo, n) = self.action_range();
        let t = if temperature > 0.0 { temperature } else { 1.0 };
        let mut cache = crate::llm::KvCache::new(self.llm.n_layers());
        let mut input = embeds.clone();
        let mut out = vec![
            ActionSample {
                tokens: [0; ACTION_DIM],
                logprobs: [0.0; ACTION_DIM],
            };
            b
        ];
        for k in 0..ACTION_DIM {
            let logits = self.llm.last_logits_cached(&input, &mut cache)?;
            let lp = candle_nn::ops::log_softmax(
                &(logits.narrow(D::Minus1, lo as usize, n)? / t as f64)?,
                D::Minus1,
            )?
            .to_vec2::<f32>()?;
            let mut next = Vec::with_capacity(b);
            for ((row, lp), uniform) in out.iter_mut().zip(&lp).zip(uniforms.iter_mut()) {
                let j = if temperature > 0.0 {
                    draw(lp, uniform())
                } else {
                    argmax(lp)
                };
                row.tokens[k] = lo + j as u32;
                row.logprobs[k] = lp[j];
                next.push(row.tokens[k]);
            }
            let ids = Tensor::from_vec(next, (b, 1), &self.device)?;
            input = self.llm.embed(&ids)?;
        }
        Ok(out)
    }

    /// Log-probabilities `[7]` of `tokens` after `prefix` at `temperature`
    /// (1 where it is 0) over the action tokens, and the entropies `[7]` of
    /// those distributions, in one teacher-forced forward with gradient to
    /// the adapters.
    pub fn action_logprobs(
        &self,
        prefix: &Prefix,
        tokens: &[u32; ACTION_DIM],
        temperature: f32,
    ) -> Result<(Tensor, Tensor)> {
        let (lp, ent) = self.action_logprobs_batch(&prefix.embeds, &[*tokens], temperature)?;
        Ok((lp.squeeze(0)?, ent.squeeze(0)?))
    }

    /// As [`MiniVla::action_logprobs`] for `b` prefixes of one length
    /// (`embeds` `[b, L, hidden]`) and their tokens at once: `[b, 7]` each.
    pub fn action_logprobs_batch(
        &self,
        embeds: &Tensor,
        tokens: &[[u32; ACTION_DIM]],
        temperature: f32,
    ) -> Result<(Tensor, Tensor)> {
        check_temperature(temperature)?;
        let (lo, n) = self.action_range();
        if let Some(bad) = tokens
            .iter()
            .flatten()
            .find(|&&t| t < lo || t as usize >= lo as usize + n)
        {
            return Err(MiniVlaError::Config(format!(
                "token {bad} is not an action token ({lo}..{})",
                lo as usize + n
            )));
        }
        let b = tokens.len();
        let t = if temperature > 0.0 { temperature } else { 1.0 };
        let fed: Vec<u32> = tokens
            .iter()
            .flat_map(|r| r[..ACTION_DIM - 1].iter().copied())
            .collect();
        let fed = Tensor::from_vec(fed, (b, ACTION_DIM - 1), &self.device)?;
        let x = Tensor::cat(&[embeds, &self.llm.embed(&fed)?], 1)?;
        let logits = self.llm.last_k_logits(&x, ACTION_DIM)?;
        let lp = candle_nn::ops::log_softmax(
            &(logits.narrow(D::Minus1, lo as usize, n)? / t as f64)?,
            D::Minus1,
        )?;
        let idx: Vec<u32> = tokens.iter().flatten().map(|&k| k - lo).collect();
        let idx = Tensor::from_vec(idx, (b, ACTION_DIM, 1), &self.device)?;
        let chosen = lp.gather(&idx, D::Minus1)?.squeeze(D::Minus1)?;
        let entropy = (lp.exp()? * &lp)?.sum(D::Minus1)?.neg()?;
        Ok((chosen, entropy))
    }

    /// The GRPO objective over `steps` (every action token a unit, each
    /// step's advantage on its 7 tokens), at the temperature the steps were
    /// sampled at. No KL term: the reference is the checkpoint, which the
    /// adapters start from. Steps whose prefixes have one length go
    /// through the model together.
    pub fn grpo_objective(
        &self,
        steps: &[ActionStep],
        temperature: f32,
        objective: &Objective,
    ) -> Result<(Tensor, GrpoStats)> {
        if steps.is_empty() {
            return Err(MiniVlaError::Config("grpo_objective: no steps".into()));
        }
        let mut by_len: std::collections::BTreeMap<usize, Vec<&ActionStep>> =
            std::collections::BTreeMap::new();
        for s in steps {
            by_len.entry(s.prefix.len()).or_default().push(s);
        }
        let mut lps = Vec::with_capacity(by_len.len());
        let mut ents = Vec::with_capacity(by_len.len());
        let mut old = Vec::with_capacity(steps.len() * ACTION_DIM);
        let mut adv = Vec::with_capacity(steps.len());
        for group in by_len.values() {
            let embeds: Vec<&Tensor> = group.iter().map(|s| &s.prefix.embeds).collect();
            let tokens: Vec<[u32; ACTION_DIM]> = group.iter().map(|s| s.sample.tokens).collect();
            let (lp, ent) =
                self.action_logprobs_batch(&Tensor::cat(&embeds, 0)?, &tokens, temperature)?;
            lps.push(lp);
            ents.push(ent);
            for s in group {
                old.extend_from_slice(&s.sample.logprobs);
                adv.push(s.advantage);
            }
        }
        let logprobs = Tensor::cat(&lps, 0)?;
        let entropy = Tensor::cat(&ents, 0)?;
        let old = Tensor::from_vec(old, (steps.len(), ACTION_DIM), &self.device)?;
        let adv = Tensor::from_vec(adv, (steps.len(), 1), &self.device)?;
        let inputs = ObjectiveInputs {
            logprobs: &logprobs,
            old_logprobs: &old,
            advantages: &adv,
            reference: None,
            entropy: &entropy,
            mask: None,
        };
        wmrl_grpo::objective(&inputs, objective)
            .map_err(|e| MiniVlaError::Config(format!("grpo objective: {e}")))
    }

    /// One GRPO update of the adapters over `steps` in micro-batches of at
    /// most `micro_batch` steps: each micro-batch's objective (weighted by
    /// its share of the tokens, so that the sum is the whole batch's
    /// token-mean objective) is differentiated and freed before the next,
    /// the gradients are summed, and `opt` takes one step. Peak memory
    /// grows with `micro_batch`, not with the group: a group of 8 rollouts
    /// of the full model needs about 2 GB of activations per step in the
    /// micro-batch (docs/policy.md). Returns the optimiser's step and the
    /// objective's statistics over all steps. `lr_step`: the schedule
    /// position of the learning rate (the training step; `None`: the
    /// optimiser's own step count).
    pub fn grpo_update(
        &self,
        opt: &mut wmrl_grpo::AdamW,
        steps: &[ActionStep],
        temperature: f32,
        objective: &Objective,
        micro_batch: usize,
        lr_step: Option<usize>,
    ) -> Result<(wmrl_grpo::StepStats, GrpoStats)> {
        if steps.is_empty() {
            return Err(MiniVlaError::Config("grpo_update: no steps".into()));
        }
        let grpo = |e: wmrl_grpo::GrpoError| MiniVlaError::Config(format!("grpo update: {e}"));
        let total = steps.len() as f64;
        let mut acc = wmrl_grpo::Gradients::default();
        let mut stats = GrpoStats::default();
        for chunk in steps.chunks(micro_batch.max(1)) {
            let share = chunk.len() as f64 / total;
            let (loss, st) = self.grpo_objective(chunk, temperature, objective)?;
            opt.accumulate(&(loss * share)?, &mut acc).map_err(grpo)?;
            stats.loss += share * st.loss;
            stats.policy_loss += share * st.policy_loss;
            stats.kl_ref += share * st.kl_ref;
            stats.entropy += share * st.entropy;
            stats.clip_frac += share * st.clip_frac;
            stats.approx_kl_old += share * st.approx_kl_old;
            stats.ratio_mean += share * st.ratio_mean;
            stats.n_tokens += st.n_tokens;
        }
        let step = match lr_step {
            Some(k) => opt.step_accumulated_scheduled(acc, k),
            None => opt.step_accumulated(acc),
        }
        .map_err(grpo)?;
        Ok((step, stats))
    }

    /// Write the adapted model to `dst` in the converted layout: the
    /// checkpoint `src` (the directory this model was loaded from) with
    /// each adapted projection's weight replaced by `W + scale * B A`
    /// (computed in f32, stored in the checkpoint's dtype), its
    /// config.json and tokenizer.json copied. `dst` must not be `src`.
    pub fn export_merged(&self, src: &Path, dst: &Path) -> Result<()> {
        if src.canonicalize().ok() == dst.canonicalize().ok() && dst.exists() {
            return Err(MiniVlaError::Config(format!(
                "export: {} is the source checkpoint",
                dst.display()
            )));
        }
        let w_path = src.join(WEIGHTS_FILE);
        let mut tensors =
            candle_core::safetensors::load(&w_path, &Device::Cpu).map_err(|e| io(&w_path, e))?;
        let scale = self.lora.as_ref().map_or(0.0, |c| c.alpha / c.rank as f64);
        for pair in self.adapters.chunks(2) {
            let [(a_name, a), (_, b)] = pair else {
                continue;
            };
            let key = format!(
                "{}.weight",
                a_name.strip_suffix(".lora_a").unwrap_or(a_name)
            );
            let w = tensors.get(&key).ok_or_else(|| MiniVlaError::Tensor {
                path: w_path.display().to_string(),
                key: key.clone(),
                message: "missing in the source checkpoint".into(),
            })?;
            let delta = b
                .as_tensor()
                .to_device(&Device::Cpu)?
                .to_dtype(DType::F32)?
                .matmul(
                    &a.as_tensor()
                        .to_device(&Device::Cpu)?
                        .to_dtype(DType::F32)?,
                )?;
            let merged = (w.to_dtype(DType::F32)? + (delta * scale)?)?.to_dtype(w.dtype())?;
            tensors.insert(key, merged);
        }
        std::fs::create_dir_all(dst).map_err(|e| io(dst, e))?;
        let tmp = dst.join(format!("{WEIGHTS_FILE}.tmp"));
        candle_core::safetensors::save(&tensors, &tmp).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, dst.join(WEIGHTS_FILE)).map_err(|e| io(dst, e))?;
        for f in [CONFIG_FILE, TOKENIZER_FILE] {
            let from = src.join(f);
            if from.exists() {
                std::fs::copy(&from, dst.join(f)).map_err(|e| io(&from, e))?;
            }
        }
        Ok(())
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> MiniVlaError {
    MiniVlaError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}
