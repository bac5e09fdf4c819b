//! The optimiser step shared by SFT and GRPO: backward, global grad-norm
//! clipping, AdamW (decoupled weight decay) with a warmup + cosine learning
//! rate schedule. The moments are kept by parameter name so they can be
//! checkpointed and a run resumed exactly.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{read_tensors, write_tensors};
use crate::{Policy, PolicyError, Result};

/// Optimiser settings. Defaults follow common VLA fine-tuning practice
/// (OpenVLA: AdamW, lr 2e-4 for small models is typical; betas 0.9/0.95 as in
/// LLM training; grad-norm clip 1.0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Peak learning rate.
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Decoupled weight decay (applied to matrices only, not norms/biases).
    pub weight_decay: f64,
    /// Linear warmup steps.
    pub warmup_steps: usize,
    /// Total steps of the cosine schedule; 0 keeps `lr` constant after warmup.
    pub total_steps: usize,
    /// Final lr as a fraction of `lr`.
    pub min_lr_ratio: f64,
    /// Clip the global gradient norm to this; 0 disables.
    pub max_grad_norm: f64,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 3e-4,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.01,
            warmup_steps: 50,
            total_steps: 0,
            min_lr_ratio: 0.1,
            max_grad_norm: 1.0,
        }
    }
}

impl OptimConfig {
    /// Learning rate at (0-based) step `step`.
    pub fn lr_at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        if self.total_steps == 0 || self.total_steps <= self.warmup_steps {
            return self.lr;
        }
        let prog = ((step - self.warmup_steps) as f64
            / (self.total_steps - self.warmup_steps) as f64)
            .min(1.0);
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * prog).cos());
        self.lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cos)
    }
}

/// What one optimiser step did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    pub lr: f64,
}

struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
    decay: bool,
}

/// AdamW over all of a policy's parameters.
pub struct PolicyOptimizer {
    cfg: OptimConfig,
    slots: Vec<Slot>,
    step: usize,
}

impl std::fmt::Debug for PolicyOptimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyOptimizer")
            .field("step", &self.step)
            .finish()
    }
}

impl PolicyOptimizer {
    pub fn new(policy: &Policy, cfg: OptimConfig) -> Result<Self> {
        Self::new_subset(policy, cfg, &[])
    }

    /// AdamW over the parameters whose names start with one of `prefixes`
    /// (every parameter when `prefixes` is empty); the others stay frozen.
    /// Fails when a prefix matches no parameter.
    pub fn new_subset(policy: &Policy, cfg: OptimConfig, prefixes: &[String]) -> Result<Self> {
        let vars = policy.vars();
        for p in prefixes {
            if !vars.iter().any(|(name, _)| name.starts_with(p.as_str())) {
                return Err(PolicyError::Config(format!(
                    "trainable prefix {p:?} matches no parameter (names look like \"lm.head.weight\", \"vision.blocks.0.attn.q.weight\")"
                )));
            }
        }
        let slots = vars
            .iter()
            .filter(|(name, _)| {
                prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_str()))
            })
            .map(|(name, var)| {
                Ok(Slot {
                    name: name.clone(),
                    var: var.clone(),
                    m: var.as_tensor().zeros_like()?,
                    v: var.as_tensor().zeros_like()?,
                    decay: var.rank() >= 2,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            cfg,
            slots,
            step: 0,
        })
    }

    pub fn config(&self) -> &OptimConfig {
        &self.cfg
    }

    /// Steps taken so far.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// Backward through `loss`, clip, update. Fails on a non-finite loss or
    /// gradient without touching the parameters.
    pub fn step(&mut self, loss: &Tensor) -> Result<StepStats> {
        let lr = self.cfg.lr_at(self.step);
        self.step_with_lr(loss, lr)
    }

    /// [`Self::step`] with the learning rate of schedule position
    /// `schedule_step` instead of the optimiser's own step count (GRPO
    /// schedules by training step, however many minibatches a step takes).
    pub fn step_scheduled(&mut self, loss: &Tensor, schedule_step: usize) -> Result<StepStats> {
        let lr = self.cfg.lr_at(schedule_step);
        self.step_with_lr(loss, lr)
    }

    fn step_with_lr(&mut self, loss: &Tensor, lr: f64) -> Result<StepStats> {
        let lv = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        if !lv.is_finite() {
            return Err(PolicyError::NonFinite(format!("loss is {lv}")));
        }
        let grads = loss.backward()?;
        let mut sq = 0f64;
        let mut gs: Vec<Option<Tensor>> = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            let g = grads.get(s.var.as_tensor()).cloned();
            if let Some(g) = &g {
                sq += g
                    .to_dtype(DType::F64)?
                    .sqr()?
                    .sum_all()?
                    .to_scalar::<f64>()?;
            }
            gs.push(g);
        }
        let grad_norm = sq.sqrt();
        if !grad_norm.is_finite() {
            return Err(PolicyError::NonFinite(format!(
                "gradient norm is {grad_norm}"
            )));
        }
        let scale = if self.cfg.max_grad_norm > 0.0 && grad_norm > self.cfg.max_grad_norm {
            self.cfg.max_grad_norm / (grad_norm + 1e-12)
        } else {
            1.0
        };
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let c1 = 1.0 / (1.0 - b1.powi(t));
        let c2 = 1.0 / (1.0 - b2.powi(t));
        for (s, g) in self.slots.iter_mut().zip(gs) {
            let Some(g) = g else { continue };
            let g = (g * scale)?;
            s.m = ((&s.m * b1)? + (&g * (1.0 - b1))?)?;
            s.v = ((&s.v * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let upd = ((&s.m * c1)? / ((&s.v * c2)?.sqrt()? + self.cfg.eps)?)?;
            let mut theta = s.var.as_tensor().clone();
            if s.decay && self.cfg.weight_decay > 0.0 {
                theta = (theta * (1.0 - lr * self.cfg.weight_decay))?;
            }
            s.var.set(&(theta - (upd * lr)?)?)?;
        }
        Ok(StepStats { grad_norm, lr })
    }

    /// Names and element counts of the trained parameters, in the order of
    /// [`Self::gradient`].
    pub fn layout(&self) -> Vec<(String, usize)> {
        self.slots
            .iter()
            .map(|s| (s.name.clone(), s.var.elem_count()))
            .collect()
    }

    /// The gradient of `loss` with respect to every trained parameter,
    /// flattened in a fixed order (for diagnostics: nothing is updated).
    pub fn gradient(&self, loss: &Tensor) -> Result<Vec<f32>> {
        let grads = loss.backward()?;
        let mut out = Vec::new();
        for s in &self.slots {
            match grads.get(s.var.as_tensor()) {
                Some(g) => out.extend(g.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?),
                None => out.extend(std::iter::repeat_n(0.0, s.var.elem_count())),
            }
        }
        Ok(out)
    }

    /// Save the moments and the step counter.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut map = HashMap::new();
        for s in &self.slots {
            map.insert(format!("m.{}", s.name), s.m.clone());
            map.insert(format!("v.{}", s.name), s.v.clone());
        }
        map.insert(
            "step".to_string(),
            Tensor::new(&[self.step as u32], &candle_core::Device::Cpu)?,
        );
        write_tensors(path, &map)
    }

    /// Restore the moments and the step counter saved by [`Self::save`].
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let dev = self
            .slots
            .first()
            .map(|s| s.m.device().clone())
            .unwrap_or(candle_core::Device::Cpu);
        let mut map = read_tensors(path, &dev)?;
        let miss = |name: &str| PolicyError::Checkpoint {
            path: path.display().to_string(),
            tensor: name.to_string(),
            message: "missing or wrong shape in the optimizer state".into(),
        };
        for s in &mut self.slots {
            for (key, dst) in [
                (format!("m.{}", s.name), &mut s.m),
                (format!("v.{}", s.name), &mut s.v),
            ] {
                let t = map.remove(&key).ok_or_else(|| miss(&key))?;
                if t.dims() != dst.dims() {
                    return Err(miss(&key));
                }
                *dst = t.to_dtype(dst.dtype())?;
            }
        }
        let step = map.remove("step").ok_or_else(|| miss("step"))?;
        self.step = step
            .flatten_all()?
            .to_vec1::<u32>()?
            .first()
            .copied()
            .unwrap_or(0) as usize;
        Ok(())
    }
}
