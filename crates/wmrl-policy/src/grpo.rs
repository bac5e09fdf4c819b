//! The GRPO loss the robot trainer optimises: the policy's per-token
//! log-probs and entropies over a [`GrpoBatch`] of action chunks, handed to
//! the objective both tracks share ([`wmrl_grpo::objective`]: clipped
//! surrogate against frozen old log-probs, asymmetric upper clip allowed,
//! k3 KL to a frozen reference, entropy bonus, token means over the
//! unmasked tokens). Advantages come from `wmrl-core`; this module never
//! computes them.

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::{Policy, PolicyError, PreparedInputs, Result, TokenStats};

/// Loss settings. Defaults are METHOD.md's (clip 0.2, `kl_beta = 0.04`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpoConfig {
    /// Lower clip: ratios below `1 - clip_low` stop pushing (PPO/GRPO: 0.2).
    pub clip_low: f64,
    /// Upper clip: `1 + clip_high` (0.2 symmetric; DAPO's clip-higher uses 0.28).
    pub clip_high: f64,
    /// KL-to-reference weight (GRPO paper / METHOD.md: 0.04); 0 disables.
    pub kl_beta: f64,
    /// Entropy bonus weight; 0 disables.
    pub entropy_coef: f64,
    /// Temperature the rollouts were sampled at; log-probs are recomputed
    /// under the same distribution.
    pub temperature: f32,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        Self {
            clip_low: 0.2,
            clip_high: 0.2,
            kl_beta: 0.04,
            entropy_coef: 0.0,
            temperature: 1.0,
        }
    }
}

use wmrl_grpo::GrpoStats;

/// Rows per forward pass of [`GrpoBatch::with_reference`].
pub const REFERENCE_CHUNK: usize = 256;

/// Rollout data for the loss, already on the policy's device.
#[derive(Debug, Clone)]
pub struct GrpoBatch {
    /// The prepared observations; `None` for a batch built from head
    /// features alone ([`GrpoBatch::from_features`]).
    pub inputs: Option<PreparedInputs>,
    /// `[B, T]` u32 sampled tokens.
    pub tokens: Tensor,
    /// `[B, T]` log-probs at sampling time (frozen).
    pub old_logprobs: Tensor,
    /// `[B, 1]` advantage of each sample's rollout.
    pub advantages: Tensor,
    /// `[B, T]` 1 for tokens that count, 0 for ignored ones (e.g. actions
    /// after the episode ended inside a chunk).
    pub mask: Tensor,
    /// `[B, T]` reference log-probs, if already computed (see
    /// [`GrpoBatch::with_reference`]).
    pub ref_logprobs: Option<Tensor>,
    /// `[B, n, d_model]` head inputs, if computed (see
    /// [`GrpoBatch::with_head_features`]): the loss then trains `lm.head`
    /// only and skips the network before it.
    pub features: Option<Tensor>,
}

impl GrpoBatch {
    /// Build a batch; `mask = None` counts every token.
    pub fn new(
        policy: &Policy,
        inputs: PreparedInputs,
        tokens: &[Vec<u32>],
        old_logprobs: &[Vec<f32>],
        advantages: &[f32],
        mask: Option<&[Vec<f32>]>,
    ) -> Result<Self> {
        Self::build(
            policy,
            Some(inputs),
            None,
            tokens,
            old_logprobs,
            advantages,
            mask,
        )
    }

    /// A batch for a head-only update from head inputs recorded when the
    /// rollouts were sampled ([`Policy::sample_with_features`]: `n *
    /// d_model` floats per row), so the frozen network before `lm.head` is
    /// not run again. Valid while every parameter before the head is what it
    /// was at sampling time, which a head-only update guarantees.
    pub fn from_features(
        policy: &Policy,
        features: &[Vec<f32>],
        tokens: &[Vec<u32>],
        old_logprobs: &[Vec<f32>],
        advantages: &[f32],
        mask: Option<&[Vec<f32>]>,
    ) -> Result<Self> {
        let cfg = policy.config();
        let n = match cfg.decoding {
            crate::Decoding::Parallel => cfg.chunk,
            crate::Decoding::Autoregressive => cfg.tokens_per_call(),
        };
        let width = n * cfg.d_model;
        let b = features.len();
        if features.iter().any(|r| r.len() != width) {
            return Err(PolicyError::Input(format!(
                "head features must have {n} x {} = {width} entries per row",
                cfg.d_model
            )));
        }
        let flat: Vec<f32> = features.iter().flatten().copied().collect();
        let f = Tensor::from_vec(flat, (b, n, cfg.d_model), policy.device())?
            .to_dtype(policy.dtype())?;
        Self::build(
            policy,
            None,
            Some(f),
            tokens,
            old_logprobs,
            advantages,
            mask,
        )
    }

    fn build(
        policy: &Policy,
        inputs: Option<PreparedInputs>,
        features: Option<Tensor>,
        tokens: &[Vec<u32>],
        old_logprobs: &[Vec<f32>],
        advantages: &[f32],
        mask: Option<&[Vec<f32>]>,
    ) -> Result<Self> {
        let b = tokens.len();
        let t = policy.config().tokens_per_call();
        if inputs.as_ref().is_some_and(|i| i.batch_size() != b)
            || features.as_ref().is_some_and(|f| f.dim(0).ok() != Some(b))
            || old_logprobs.len() != b
            || advantages.len() != b
            || mask.is_some_and(|m| m.len() != b)
        {
            return Err(PolicyError::Input(
                "GRPO batch fields disagree in length".into(),
            ));
        }
        let dev = policy.device();
        let dt = policy.dtype();
        let rows = |v: &[Vec<f32>], what: &str| -> Result<Tensor> {
            if v.iter().any(|r| r.len() != t) {
                return Err(PolicyError::Input(format!(
                    "{what} rows must have {t} entries"
                )));
            }
            let flat: Vec<f32> = v.iter().flatten().copied().collect();
            Ok(Tensor::from_vec(flat, (b, t), dev)?.to_dtype(dt)?)
        };
        let old = rows(old_logprobs, "old_logprobs")?;
        let mask = match mask {
            Some(m) => rows(m, "mask")?,
            None => Tensor::ones((b, t), dt, dev)?,
        };
        Ok(Self {
            inputs,
            tokens: policy.tokens_tensor(tokens)?,
            old_logprobs: old,
            advantages: Tensor::from_vec(advantages.to_vec(), (b, 1), dev)?.to_dtype(dt)?,
            mask,
            ref_logprobs: None,
            features,
        })
    }

    /// Compute the head inputs of every row once (forward passes in chunks
    /// of [`REFERENCE_CHUNK`] rows, no gradient): from then on the loss
    /// (and [`GrpoBatch::with_reference`]) runs only `lm.head`. Valid for an
    /// update that trains `lm.head` alone, while every parameter before it
    /// stays what `policy` (and the reference) have: the frozen-backbone
    /// update, whose cost per sample drops from a forward and backward
    /// through the whole network to one matrix product.
    pub fn with_head_features(mut self, policy: &Policy) -> Result<Self> {
        if self.features.is_none() {
            self.features =
                Some(self.by_chunks(|sub| policy.head_features(sub.prepared()?, &sub.tokens))?);
        }
        Ok(self)
    }

    fn prepared(&self) -> Result<&PreparedInputs> {
        self.inputs.as_ref().ok_or_else(|| {
            PolicyError::Input("this GRPO batch holds head features, not observations".into())
        })
    }

    /// Compute and store the reference policy's log-probs once, so inner
    /// epochs do not recompute them.
    /// The forward passes run in chunks of [`REFERENCE_CHUNK`] rows: one
    /// pass over a whole step's batch would hold every activation at once.
    pub fn with_reference(mut self, reference: &Policy, temperature: f32) -> Result<Self> {
        let lp = self.by_chunks(|sub| Ok(sub.stats(reference, temperature)?.logprobs.detach()))?;
        self.ref_logprobs = Some(lp);
        Ok(self)
    }

    /// `f` on consecutive chunks of [`REFERENCE_CHUNK`] rows, its results
    /// concatenated along the rows.
    fn by_chunks(&self, f: impl Fn(&Self) -> Result<Tensor>) -> Result<Tensor> {
        let b = self.batch_size();
        let parts = (0..b)
            .step_by(REFERENCE_CHUNK)
            .map(|start| {
                let idx: Vec<usize> = (start..(start + REFERENCE_CHUNK).min(b)).collect();
                f(&self.select(&idx)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// Token statistics of `policy` on this batch: through the head alone
    /// when the head features are set.
    fn stats(&self, policy: &Policy, temperature: f32) -> Result<TokenStats> {
        match &self.features {
            Some(f) => policy.token_stats_from_features(f, &self.tokens, temperature),
            None => policy.token_stats(self.prepared()?, &self.tokens, temperature),
        }
    }

    pub fn batch_size(&self) -> usize {
        self.tokens.dims().first().copied().unwrap_or(0)
    }

    /// The rows named by `idx` (minibatches).
    pub fn select(&self, idx: &[usize]) -> Result<Self> {
        let dev = self.tokens.device();
        let ids = Tensor::from_vec(
            idx.iter().map(|&i| i as u32).collect::<Vec<_>>(),
            idx.len(),
            dev,
        )?;
        let rows = |t: &Option<Tensor>| t.as_ref().map(|t| t.index_select(&ids, 0)).transpose();
        Ok(Self {
            inputs: self.inputs.as_ref().map(|i| i.select(idx)).transpose()?,
            tokens: self.tokens.index_select(&ids, 0)?,
            old_logprobs: self.old_logprobs.index_select(&ids, 0)?,
            advantages: self.advantages.index_select(&ids, 0)?,
            mask: self.mask.index_select(&ids, 0)?,
            ref_logprobs: rows(&self.ref_logprobs)?,
            features: rows(&self.features)?,
        })
    }
}

fn scalar(t: &Tensor) -> Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// The GRPO loss (to minimise) and its statistics. The reference log-probs
/// come from `batch.ref_logprobs` if set, else from `reference` (detached);
/// with neither, or `kl_beta = 0`, there is no KL term.
pub fn grpo_loss(
    policy: &Policy,
    reference: Option<&Policy>,
    batch: &GrpoBatch,
    cfg: &GrpoConfig,
) -> Result<(Tensor, GrpoStats)> {
    let stats = batch.stats(policy, cfg.temperature)?;
    let ref_lp = match (&batch.ref_logprobs, reference) {
        _ if cfg.kl_beta == 0.0 => None,
        (Some(r), _) => Some(r.clone()),
        (None, Some(p)) => Some(batch.stats(p, cfg.temperature)?.logprobs.detach()),
        (None, None) => None,
    };
    let inputs = wmrl_grpo::ObjectiveInputs {
        logprobs: &stats.logprobs,
        old_logprobs: &batch.old_logprobs,
        advantages: &batch.advantages,
        reference: ref_lp.as_ref(),
        entropy: &stats.entropy,
        mask: Some(&batch.mask),
    };
    Ok(wmrl_grpo::objective(&inputs, &cfg.objective())?)
}

impl GrpoConfig {
    /// The shared objective's weights.
    pub fn objective(&self) -> wmrl_grpo::Objective {
        wmrl_grpo::Objective {
            clip_low: self.clip_low,
            clip_high: self.clip_high,
            kl_beta: self.kl_beta,
            entropy_coef: self.entropy_coef,
        }
    }
}

/// Behaviour-cloning loss: mean negative log-likelihood of `tokens` over the
/// mask, plus token accuracy of the argmax.
pub fn nll_loss(
    policy: &Policy,
    inputs: &PreparedInputs,
    tokens: &Tensor,
    mask: &Tensor,
) -> Result<(Tensor, f64)> {
    let logits = policy.chunk_logits(inputs, tokens)?;
    let logp = candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1)?;
    let lp = logp
        .gather(&tokens.unsqueeze(2)?.contiguous()?, 2)?
        .squeeze(2)?;
    let n = scalar(&mask.sum_all()?)?.max(1.0);
    let loss = ((lp * mask)?.sum_all()? / n)?.neg()?;
    let hit = logits
        .argmax(candle_core::D::Minus1)?
        .eq(tokens)?
        .to_dtype(mask.dtype())?;
    let acc = scalar(&(hit * mask)?.sum_all()?)? / n;
    Ok((loss, acc))
}
