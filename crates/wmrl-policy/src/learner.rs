//! What the trainer needs of a policy beyond acting: one GRPO update over
//! the policy calls of graded rollouts, and the trainable state a
//! checkpoint keeps. [`Learner`] is that interface; [`TinyLearner`] is this
//! crate's `tiny` policy with its frozen reference and AdamW, and
//! `wmrl_minivla::MiniVlaLearner` is MiniVLA with LoRA adapters. The robot
//! trainer (`wmrl-train`) assembles an [`UpdateBatch`] and calls
//! [`Learner::update`], whatever the policy.

use std::collections::BTreeMap;
use std::path::Path;
use wmrl_grpo::OptimConfig;

use wmrl_core::rng::SplitMix64;

use crate::{
    ActionPolicy, GrpoBatch, GrpoConfig, Policy, PolicyInput, PolicyOptimizer, Result, grpo_loss,
};

/// One policy call of a graded rollout, as the update sees it.
#[derive(Debug, Clone, Copy)]
pub struct UpdateSample<'a> {
    /// The observation of the call.
    pub input: &'a PolicyInput,
    /// The action head's inputs recorded at sampling
    /// ([`ActionPolicy::sample_with_features`]), when the rollouts kept them.
    pub features: Option<&'a [f32]>,
    /// The sampled tokens and their log-probabilities at sampling.
    pub tokens: &'a [u32],
    pub logprobs: &'a [f32],
    /// 1 for tokens of executed actions, 0 after the episode ended.
    pub mask: &'a [f32],
    /// The advantage of the call (its rollout's, plus any per-chunk credit,
    /// scaled by the loss normalisation).
    pub advantage: f32,
    /// (ordinal of its group among the updated groups, index of its rollout
    /// in the group), for the gradient-noise diagnostic.
    pub group: (usize, usize),
}

/// The samples of one update and the temperature they were drawn at: the
/// loss recomputes log-probabilities at this temperature, so it cannot
/// disagree with the rollouts.
#[derive(Debug, Clone)]
pub struct UpdateBatch<'a> {
    pub samples: Vec<UpdateSample<'a>>,
    pub temperature: f32,
}

/// How an update runs (from the run's `[update]` settings).
#[derive(Debug, Clone)]
pub struct UpdateSettings {
    /// Clip, KL and entropy weights. The temperature is the batch's
    /// ([`UpdateBatch::temperature`]), never a setting of its own.
    pub loss: wmrl_grpo::Objective,
    /// Samples per optimiser step (0: the whole batch).
    pub minibatch: usize,
    /// Passes over the batch.
    pub inner_epochs: usize,
    /// Seed of the minibatch order.
    pub shuffle_seed: u64,
    /// The training step (the learning-rate schedule's position).
    pub step: usize,
    /// Measure the cosine between the gradients of half-groups and of
    /// alternate groups before the update.
    pub measure_grad_snr: bool,
    /// Rollouts per group (the half-group split of the diagnostic).
    pub group_size: usize,
}

/// What an update did: means over its optimiser steps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateStats {
    /// Optimiser steps taken (0 when nothing carried a signal).
    pub minibatches: usize,
    pub loss: f64,
    pub kl_ref: f64,
    pub clip_frac: f64,
    pub entropy: f64,
    pub grad_norm: f64,
    pub grad_half_cosine: Option<f64>,
    pub grad_half_cosine_parts: BTreeMap<String, f64>,
    pub grad_cross_group_cosine: Option<f64>,
}

impl UpdateStats {
    /// Count one optimiser step's objective statistics and gradient norm.
    pub fn add(&mut self, s: &wmrl_grpo::GrpoStats, grad_norm: f64) {
        self.loss += s.loss;
        self.kl_ref += s.kl_ref;
        self.clip_frac += s.clip_frac;
        self.entropy += s.entropy;
        self.grad_norm += grad_norm;
        self.minibatches += 1;
    }

    /// Sums to means over the optimiser steps.
    pub fn mean(mut self) -> Self {
        let n = self.minibatches.max(1) as f64;
        for v in [
            &mut self.loss,
            &mut self.kl_ref,
            &mut self.clip_frac,
            &mut self.entropy,
            &mut self.grad_norm,
        ] {
            *v /= n;
        }
        self
    }
}

/// A policy the trainer can post-train: it acts ([`Learner::policy`]),
/// takes GRPO updates and keeps its trainable state in a checkpoint.
pub trait Learner: Send {
    /// The policy as it acts now.
    fn policy(&self) -> &dyn ActionPolicy;
    /// Whether rollouts should keep the action head's inputs
    /// ([`UpdateSample::features`]) because the update reuses them.
    fn keeps_features(&self) -> bool {
        false
    }
    /// One GRPO update over `batch` (an empty batch, or one whose
    /// advantages are all zero, changes nothing and reports no step).
    fn update(&mut self, batch: &UpdateBatch<'_>, settings: &UpdateSettings)
    -> Result<UpdateStats>;
    /// Write the trainable state (weights or adapters, optimiser) into the
    /// checkpoint directory `dir`.
    fn save(&self, dir: &Path) -> Result<()>;
    /// Read back what [`Learner::save`] wrote into a learner built from
    /// the run's start.
    fn restore(&mut self, dir: &Path) -> Result<()>;
    /// Write the trained policy to `dst` as a checkpoint directory of its
    /// kind, which `wmrl eval --policy` and a further run read (`start`:
    /// the directory the run started from).
    fn export(&self, start: &Path, dst: &Path) -> Result<()>;
}

/// The minibatch orders of an update: one shuffle of `0..n` per epoch.
pub fn minibatch_orders(n: usize, epochs: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = SplitMix64::new(seed);
    (0..epochs)
        .map(|_| {
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i + 1));
            }
            order
        })
        .collect()
}

/// The `tiny` policy as a [`Learner`]: AdamW over the parameters under
/// `trainable` (all when empty), a KL pull towards the frozen `reference`
/// (the SFT start), and a head-only fast path that reuses the head inputs
/// the rollouts recorded.
#[derive(Debug)]
pub struct TinyLearner {
    policy: Policy,
    reference: Policy,
    optimizer: PolicyOptimizer,
    optim: OptimConfig,
    trainable: Vec<String>,
}

/// Where a checkpoint keeps the `tiny` policy and its optimiser.
pub const TINY_POLICY_DIR: &str = "policy";
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";

impl TinyLearner {
    pub fn new(
        policy: Policy,
        reference: Policy,
        optim: OptimConfig,
        trainable: &[String],
    ) -> Result<Self> {
        let optimizer = PolicyOptimizer::new_subset(&policy, optim.clone(), trainable)?;
        Ok(Self {
            policy,
            reference,
            optimizer,
            optim,
            trainable: trainable.to_vec(),
        })
    }

    /// The policy being trained.
    pub fn tiny(&self) -> &Policy {
        &self.policy
    }

    /// Whether the update trains `lm.head` alone (every trainable parameter
    /// is under it).
    pub fn head_only(&self) -> bool {
        let layout = self.optimizer.layout();
        !layout.is_empty() && layout.iter().all(|(name, _)| name.starts_with("lm.head."))
    }

    /// The batch on the policy's device: head inputs when training the head
    /// alone (those recorded at sampling, or computed once), observations
    /// otherwise; reference log-probabilities when the KL term is on.
    fn batch(&self, b: &UpdateBatch<'_>, loss: &GrpoConfig) -> Result<GrpoBatch> {
        let head_only = self.head_only();
        let tokens: Vec<Vec<u32>> = b.samples.iter().map(|s| s.tokens.to_vec()).collect();
        let old: Vec<Vec<f32>> = b.samples.iter().map(|s| s.logprobs.to_vec()).collect();
        let adv: Vec<f32> = b.samples.iter().map(|s| s.advantage).collect();
        let mask: Vec<Vec<f32>> = b.samples.iter().map(|s| s.mask.to_vec()).collect();
        let recorded: Option<Vec<Vec<f32>>> = b
            .samples
            .iter()
            .map(|s| s.features.map(<[f32]>::to_vec))
            .collect();
        let batch = match recorded {
            // Head-only with every call's head inputs recorded: the frozen
            // network before the head is not run again.
            Some(f) if head_only => {
                GrpoBatch::from_features(&self.policy, &f, &tokens, &old, &adv, Some(&mask))?
            }
            _ => {
                let inputs: Vec<PolicyInput> = b.samples.iter().map(|s| s.input.clone()).collect();
                let prepared = self.policy.prepare(&inputs)?;
                let g = GrpoBatch::new(&self.policy, prepared, &tokens, &old, &adv, Some(&mask))?;
                if head_only {
                    g.with_head_features(&self.policy)?
                } else {
                    g
                }
            }
        };
        if loss.kl_beta > 0.0 {
            batch.with_reference(&self.reference, loss.temperature)
        } else {
            Ok(batch)
        }
    }

    /// Cosine between the policy gradients (before the update) of the
    /// samples with `side[i]` true and those with it false, whole and per
    /// part of the network; `None` when a side is empty or its gradient is
    /// zero.
    fn grad_cosine(
        &self,
        batch: &GrpoBatch,
        side: &[bool],
        settings: &UpdateSettings,
        temperature: f32,
    ) -> Result<Option<(f64, BTreeMap<String, f64>)>> {
        // Each side's gradient is accumulated over minibatches (weighted by
        // their token counts, so it is the side's token-mean gradient up to
        // a scale the cosine ignores): one pass over a large step would not
        // fit in memory.
        let mb = match settings.minibatch {
            0 => 128,
            m => m,
        };
        // The policy-gradient term only: the KL pull towards the reference
        // (and the entropy bonus) would be shared by both sides.
        let loss_cfg = GrpoConfig {
            clip_low: settings.loss.clip_low,
            clip_high: settings.loss.clip_high,
            kl_beta: 0.0,
            entropy_coef: 0.0,
            temperature,
        };
        let mut grads: Vec<Vec<f64>> = Vec::new();
        for want in [true, false] {
            let idx: Vec<usize> = (0..side.len()).filter(|&i| side[i] == want).collect();
            if idx.is_empty() {
                return Ok(None);
            }
            let mut acc: Vec<f64> = Vec::new();
            for part in idx.chunks(mb) {
                let sub = batch.select(part)?;
                let (l, st) = grpo_loss(&self.policy, None, &sub, &loss_cfg)?;
                let g = self.optimizer.gradient(&l)?;
                if acc.is_empty() {
                    acc = vec![0.0; g.len()];
                }
                for (a, x) in acc.iter_mut().zip(&g) {
                    *a += st.n_tokens * f64::from(*x);
                }
            }
            grads.push(acc);
        }
        Ok(cosines(&grads[0], &grads[1], &self.optimizer.layout()))
    }
}

/// The cosine of gradients `a` and `b` (laid out as `layout`), whole and
/// per part of the network: does any part carry a signal the whole
/// gradient's noise hides?
fn cosines(
    a: &[f64],
    b: &[f64],
    layout: &[(String, usize)],
) -> Option<(f64, BTreeMap<String, f64>)> {
    // Each part's (a.b, a.a, b.b); the whole network's are their sums.
    let mut parts: BTreeMap<String, [f64; 3]> = BTreeMap::new();
    let mut off = 0;
    for (name, n) in layout {
        let e = parts.entry(network_part(name).to_string()).or_default();
        for (x, y) in a[off..off + n].iter().zip(&b[off..off + n]) {
            e[0] += x * y;
            e[1] += x * x;
            e[2] += y * y;
        }
        off += n;
    }
    let cosine = |[ab, aa, bb]: [f64; 3]| (aa > 0.0 && bb > 0.0).then(|| ab / (aa * bb).sqrt());
    let whole = parts
        .values()
        .fold([0.0; 3], |s, p| [s[0] + p[0], s[1] + p[1], s[2] + p[2]]);
    let by_part = parts
        .into_iter()
        .filter_map(|(k, p)| cosine(p).map(|c| (k, c)))
        .collect();
    cosine(whole).map(|c| (c, by_part))
}

/// The part of the network a parameter belongs to, for the per-part
/// gradient diagnostics: `vision`, `projector`, `lm.blocks.N`, `lm.head`
/// (with the final norm), or `lm.embed` (text, proprio, action queries,
/// positions).
fn network_part(name: &str) -> &str {
    if let Some(rest) = name.strip_prefix("lm.blocks.") {
        let n = rest.find('.').unwrap_or(rest.len());
        return &name[..("lm.blocks.".len() + n)];
    }
    if name.starts_with("lm.head") || name.starts_with("lm.final_norm") {
        return "lm.head";
    }
    if name.starts_with("vision.") {
        return "vision";
    }
    if name.starts_with("projector.") {
        return "projector";
    }
    "lm.embed"
}

impl Learner for TinyLearner {
    fn policy(&self) -> &dyn ActionPolicy {
        &self.policy
    }

    fn keeps_features(&self) -> bool {
        self.head_only()
    }

    fn update(&mut self, b: &UpdateBatch<'_>, settings: &UpdateSettings) -> Result<UpdateStats> {
        let mut stats = UpdateStats::default();
        let n = b.samples.len();
        if n == 0 || b.samples.iter().all(|s| s.advantage == 0.0) {
            return Ok(stats);
        }
        let o = &settings.loss;
        let loss = GrpoConfig {
            clip_low: o.clip_low,
            clip_high: o.clip_high,
            kl_beta: o.kl_beta,
            entropy_coef: o.entropy_coef,
            temperature: b.temperature,
        };
        let batch = self.batch(b, &loss)?;
        if settings.measure_grad_snr {
            let g = settings.group_size;
            // Same prompts, independent rollouts: signal-to-noise.
            let within: Vec<bool> = b.samples.iter().map(|s| s.group.1 < g / 2).collect();
            if let Some((c, parts)) = self.grad_cosine(&batch, &within, settings, b.temperature)? {
                stats.grad_half_cosine = Some(c);
                stats.grad_half_cosine_parts = parts;
            }
            // Different groups (mostly different tasks): interference.
            let across: Vec<bool> = b.samples.iter().map(|s| s.group.0 % 2 == 0).collect();
            stats.grad_cross_group_cosine = self
                .grad_cosine(&batch, &across, settings, b.temperature)?
                .map(|(c, _)| c);
        }
        let mb = match settings.minibatch {
            0 => n,
            m => m,
        };
        for order in minibatch_orders(n, settings.inner_epochs, settings.shuffle_seed) {
            for part in order.chunks(mb) {
                let sub = batch.select(part)?;
                let (l, s) = grpo_loss(&self.policy, None, &sub, &loss)?;
                let st = self.optimizer.step_scheduled(&l, settings.step)?;
                stats.add(&s, st.grad_norm);
            }
        }
        Ok(stats.mean())
    }

    fn save(&self, dir: &Path) -> Result<()> {
        self.policy.save(&dir.join(TINY_POLICY_DIR))?;
        self.optimizer.save(&dir.join(OPTIMIZER_FILE))
    }

    fn export(&self, _start: &Path, dst: &Path) -> Result<()> {
        self.policy.save(dst)
    }

    fn restore(&mut self, dir: &Path) -> Result<()> {
        let policy = Policy::load_on(
            &dir.join(TINY_POLICY_DIR),
            self.policy.device(),
            self.policy.dtype(),
        )?;
        let mut optimizer =
            PolicyOptimizer::new_subset(&policy, self.optim.clone(), &self.trainable)?;
        optimizer.load(&dir.join(OPTIMIZER_FILE))?;
        self.policy = policy;
        self.optimizer = optimizer;
        Ok(())
    }
}
