//! The solution policy: a small candle network from competition
//! meta-features to one categorical distribution per solution slot
//! (factorised given the competition). Sampling returns log-probabilities;
//! the GRPO update is the clipped surrogate with frozen old log-probs, an
//! optional k3 KL to the initial (reference) policy and an optional entropy
//! bonus (shared/METHOD.md step 7).

use candle_core::{D, Device, Tensor, Var};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use wmrl_grpo::{AdamW, ObjectiveInputs, OptimConfig};

use crate::competition::N_META;
use crate::error::Result;
use crate::nn::{Dense, matrix, seeded};
use crate::solution::{N_OPTIONS, N_SLOTS, SLOTS, Solution};

/// Policy and update settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    pub hidden: usize,
    /// AdamW learning rate.
    pub lr: f64,
    /// METHOD.md: clip 0.2, asymmetric upper clip allowed.
    pub clip_eps: f64,
    pub clip_eps_high: f64,
    /// METHOD.md: optional KL to the reference policy, 0.04.
    pub kl_beta: f64,
    pub entropy_coef: f64,
    /// Inner epochs over a step's batch with frozen old log-probs.
    pub inner_epochs: usize,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            hidden: 64,
            lr: 0.02,
            clip_eps: 0.2,
            clip_eps_high: 0.28,
            kl_beta: 0.04,
            entropy_coef: 0.0,
            inner_epochs: 4,
        }
    }
}

/// One sampled solution and its log-probability under the sampling policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub solution: Solution,
    pub logp: f32,
}

/// One rollout for the update.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub meta: Vec<f32>,
    pub solution: Solution,
    pub old_logp: f32,
    pub advantage: f32,
}

/// What an update did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UpdateStats {
    pub loss: f64,
    pub kl: f64,
    pub entropy: f64,
    pub clip_frac: f64,
}

/// What resuming a policy mid-run needs: its parameters and its optimiser's
/// moments (the reference is the seeded initial policy, rebuilt exactly).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyState {
    /// `torso.w`, `torso.b`, `head.w`, `head.b`, flattened.
    pub params: Vec<Vec<f32>>,
    /// The optimiser's tensors by name: (name, shape, values); `step` is
    /// its step count.
    pub optimizer: Vec<(String, Vec<usize>, Vec<f32>)>,
}

/// The policy network, its optimiser and a frozen copy of its initial
/// parameters (the reference for the KL term).
pub struct Policy {
    cfg: PolicyConfig,
    torso: Dense,
    head: Dense,
    reference: Vec<Tensor>,
    opt: AdamW,
    dev: Device,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy").field("cfg", &self.cfg).finish()
    }
}

impl Policy {
    /// A fresh policy on the CPU.
    pub fn new(cfg: PolicyConfig, seed: u64) -> Result<Self> {
        Self::new_on(cfg, seed, &Device::Cpu)
    }

    /// A fresh policy on `dev` (the weights are drawn on the host from
    /// `seed`, so they are the same on every device).
    pub fn new_on(cfg: PolicyConfig, seed: u64, dev: &Device) -> Result<Self> {
        let dev = dev.clone();
        let mut rng = seeded(seed);
        let torso = Dense::new(N_META, cfg.hidden, 1.0, &mut rng, &dev)?;
        let head = Dense::new(cfg.hidden, N_OPTIONS, 0.1, &mut rng, &dev)?;
        let vars: Vec<Var> = torso.vars().into_iter().chain(head.vars()).collect();
        let reference = vars
            .iter()
            .map(|v| v.as_tensor().detach().copy())
            .collect::<candle_core::Result<Vec<_>>>()?;
        let named: Vec<(String, Var)> = ["torso.w", "torso.b", "head.w", "head.b"]
            .into_iter()
            .map(String::from)
            .zip(vars)
            .collect();
        // The shared AdamW with candle-nn's AdamW defaults (betas 0.9 /
        // 0.999, eps 1e-8), no weight decay, a constant rate and no
        // clipping: the update this policy was benchmarked with.
        let opt = AdamW::new(
            &named,
            OptimConfig {
                lr: cfg.lr,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
                warmup_steps: 0,
                total_steps: 0,
                min_lr_ratio: 1.0,
                max_grad_norm: 0.0,
            },
            &[],
        )?;
        Ok(Self {
            cfg,
            torso,
            head,
            reference,
            opt,
            dev,
        })
    }

    fn vars(&self) -> [&Var; 4] {
        [&self.torso.w, &self.torso.b, &self.head.w, &self.head.b]
    }

    /// The state a resumed run continues from.
    pub fn state(&self) -> Result<PolicyState> {
        let params = self
            .vars()
            .iter()
            .map(|v| v.as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect::<candle_core::Result<_>>()?;
        let mut optimizer = Vec::new();
        for (name, t) in self.opt.state()? {
            let t = t.to_dtype(candle_core::DType::F32)?;
            optimizer.push((name, t.dims().to_vec(), t.flatten_all()?.to_vec1::<f32>()?));
        }
        optimizer.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(PolicyState { params, optimizer })
    }

    /// Continue from `st` (made by [`Self::state`] of a policy with the same
    /// settings); a shape that does not fit is an error and changes nothing.
    pub fn restore(&mut self, st: &PolicyState) -> Result<()> {
        let vars = self.vars();
        if st.params.len() != vars.len()
            || st
                .params
                .iter()
                .zip(vars)
                .any(|(p, v)| p.len() != v.elem_count())
        {
            return Err(crate::Error::Config(
                "policy state does not fit this policy's settings".into(),
            ));
        }
        let mut map = std::collections::HashMap::new();
        for (name, dims, vals) in &st.optimizer {
            let t = if name == "step" {
                let n = vals.first().copied().unwrap_or(0.0) as u32;
                Tensor::new(&[n], &self.dev)?
            } else {
                Tensor::from_vec(vals.clone(), dims.as_slice(), &self.dev)?
            };
            map.insert(name.clone(), t);
        }
        self.opt.restore(map)?;
        for (p, v) in st.params.iter().zip(self.vars()) {
            v.set(&Tensor::from_vec(p.clone(), v.shape(), &self.dev)?)?;
        }
        Ok(())
    }

    fn log_probs_all(&self, metas: &Tensor, frozen: bool) -> Result<Tensor> {
        let logits = if frozen {
            let r = &self.reference;
            let h = Dense::forward_with(&r[0], &r[1], metas)?.tanh()?;
            Dense::forward_with(&r[2], &r[3], &h)?
        } else {
            self.head.forward(&self.torso.forward(metas)?.tanh()?)?
        };
        let mut parts = Vec::with_capacity(N_SLOTS);
        let mut off = 0;
        for (_, opts) in SLOTS {
            parts.push(candle_nn::ops::log_softmax(
                &logits.narrow(1, off, opts.len())?,
                D::Minus1,
            )?);
            off += opts.len();
        }
        Ok(Tensor::cat(&parts, 1)?)
    }

    /// Per-slot probabilities for one competition.
    pub fn probs(&self, meta: &[f32]) -> Result<Vec<Vec<f32>>> {
        let m = matrix(&[meta.to_vec()], &self.dev)?;
        let lp: Vec<f32> = self.log_probs_all(&m, false)?.squeeze(0)?.to_vec1()?;
        let mut out = Vec::new();
        let mut off = 0;
        for (_, opts) in SLOTS {
            out.push(lp[off..off + opts.len()].iter().map(|l| l.exp()).collect());
            off += opts.len();
        }
        Ok(out)
    }

    /// Draw `n` solutions for one competition.
    pub fn sample(&self, meta: &[f32], n: usize, rng: &mut ChaCha8Rng) -> Result<Vec<Sample>> {
        let probs = self.probs(meta)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let mut choice = [0usize; N_SLOTS];
            let mut logp = 0.0f32;
            for (s, p) in probs.iter().enumerate() {
                let u: f32 = rng.random();
                let mut acc = 0.0;
                let mut k = p.len() - 1;
                for (i, &pi) in p.iter().enumerate() {
                    acc += pi;
                    if u < acc {
                        k = i;
                        break;
                    }
                }
                choice[s] = k;
                logp += p[k].max(1e-30).ln();
            }
            out.push(Sample {
                solution: Solution { choice },
                logp,
            });
        }
        Ok(out)
    }

    /// The most likely option of every slot.
    pub fn greedy(&self, meta: &[f32]) -> Result<Solution> {
        let probs = self.probs(meta)?;
        let mut choice = [0usize; N_SLOTS];
        for (s, p) in probs.iter().enumerate() {
            choice[s] = p
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(i, _)| i);
        }
        Ok(Solution { choice })
    }

    /// Clipped-surrogate GRPO over `batch` for `inner_epochs` epochs.
    pub fn grpo_update(&mut self, batch: &[Transition]) -> Result<UpdateStats> {
        let mut stats = UpdateStats {
            loss: 0.0,
            kl: 0.0,
            entropy: 0.0,
            clip_frac: 0.0,
        };
        if batch.is_empty() {
            return Ok(stats);
        }
        let dev = &self.dev;
        let metas = matrix(
            &batch.iter().map(|t| t.meta.clone()).collect::<Vec<_>>(),
            dev,
        )?;
        let mask = matrix(
            &batch
                .iter()
                .map(|t| t.solution.one_hot())
                .collect::<Vec<_>>(),
            dev,
        )?;
        let old = Tensor::from_vec(
            batch.iter().map(|t| t.old_logp).collect::<Vec<_>>(),
            batch.len(),
            dev,
        )?;
        let adv = Tensor::from_vec(
            batch.iter().map(|t| t.advantage).collect::<Vec<_>>(),
            batch.len(),
            dev,
        )?;
        let ref_lp = (self.log_probs_all(&metas, true)? * &mask)?.sum(1)?;
        let weights = wmrl_grpo::Objective {
            clip_low: self.cfg.clip_eps,
            clip_high: self.cfg.clip_eps_high,
            kl_beta: self.cfg.kl_beta,
            entropy_coef: self.cfg.entropy_coef,
        };
        for _ in 0..self.cfg.inner_epochs.max(1) {
            let all = self.log_probs_all(&metas, false)?;
            // A solution's log-prob is the sum over its slots' choices; its
            // entropy the sum of the slots' entropies.
            let lp = (&all * &mask)?.sum(1)?;
            let entropy = (all.exp()? * &all)?.sum(1)?.neg()?;
            let (loss, s) = wmrl_grpo::objective(
                &ObjectiveInputs {
                    logprobs: &lp,
                    old_logprobs: &old,
                    advantages: &adv,
                    reference: Some(&ref_lp),
                    entropy: &entropy,
                    mask: None,
                },
                &weights,
            )?;
            self.opt.step(&loss)?;
            stats = UpdateStats {
                loss: s.loss,
                kl: s.kl_ref,
                entropy: s.entropy,
                clip_frac: s.clip_frac,
            };
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_log_probs_match_and_grpo_moves_toward_advantaged_choice() {
        let mut p = Policy::new(
            PolicyConfig {
                kl_beta: 0.0,
                ..Default::default()
            },
            1,
        )
        .unwrap();
        let meta = vec![0.5f32; N_META];
        let mut rng = seeded(2);
        let samples = p.sample(&meta, 16, &mut rng).unwrap();
        let probs = p.probs(&meta).unwrap();
        for s in &samples {
            let want: f32 = (0..N_SLOTS)
                .map(|k| probs[k][s.solution.choice[k]].ln())
                .sum();
            assert!((want - s.logp).abs() < 1e-4);
        }
        // Reward model family "forest" (index 4): its probability must rise.
        let before = probs[2][4];
        for _ in 0..10 {
            let samples = p.sample(&meta, 16, &mut rng).unwrap();
            let r: Vec<f32> = samples
                .iter()
                .map(|s| if s.solution.choice[2] == 4 { 1.0 } else { 0.0 })
                .collect();
            let m = r.iter().sum::<f32>() / r.len() as f32;
            let batch: Vec<Transition> = samples
                .iter()
                .zip(&r)
                .map(|(s, &ri)| Transition {
                    meta: meta.clone(),
                    solution: s.solution,
                    old_logp: s.logp,
                    advantage: ri - m,
                })
                .collect();
            p.grpo_update(&batch).unwrap();
        }
        let after = p.probs(&meta).unwrap()[2][4];
        assert!(after > before + 0.2, "{before} -> {after}");
    }
}
