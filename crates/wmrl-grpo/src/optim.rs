//! AdamW shared by every policy update: backward, global grad-norm
//! clipping, AdamW (decoupled weight decay on matrices) with a warmup +
//! cosine learning-rate schedule. The moments are kept by parameter name so
//! they can be checkpointed and a run resumed exactly.

use std::collections::HashMap;

use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};

use crate::{GrpoError, Result};

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

/// Gradients summed over the micro-batches of one update
/// ([`AdamW::accumulate`], [`AdamW::step_accumulated`]).
#[derive(Debug, Default)]
pub struct Gradients {
    grads: Vec<Option<Tensor>>,
    losses: usize,
}

fn finite_loss(loss: &Tensor) -> Result<()> {
    let lv = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
    if lv.is_finite() {
        Ok(())
    } else {
        Err(GrpoError::NonFinite(format!("loss is {lv}")))
    }
}

struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
    decay: bool,
}

/// AdamW over named parameters.
pub struct AdamW {
    cfg: OptimConfig,
    slots: Vec<Slot>,
    step: usize,
}

impl std::fmt::Debug for AdamW {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdamW").field("step", &self.step).finish()
    }
}

impl AdamW {
    /// AdamW over the parameters whose names start with one of `prefixes`
    /// (every parameter when `prefixes` is empty); the others stay frozen.
    /// Fails when a prefix matches no parameter.
    pub fn new(vars: &[(String, Var)], cfg: OptimConfig, prefixes: &[String]) -> Result<Self> {
        for p in prefixes {
            if !vars.iter().any(|(name, _)| name.starts_with(p.as_str())) {
                let some: Vec<&str> = vars.iter().take(3).map(|(n, _)| n.as_str()).collect();
                return Err(GrpoError::Config(format!(
                    "trainable prefix {p:?} matches no parameter (names look like {some:?})"
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
        finite_loss(loss)?;
        let grads = loss.backward()?;
        let gs: Vec<Option<Tensor>> = self
            .slots
            .iter()
            .map(|s| grads.get(s.var.as_tensor()).cloned())
            .collect();
        self.apply(gs, lr)
    }

    /// Add the gradient of `loss` (one micro-batch of an update) to `acc`,
    /// leaving the parameters alone: an update over more rollouts than fit
    /// in memory at once sums its micro-batches' gradients (each loss
    /// weighted by its share of the update's units) and then takes one
    /// [`Self::step_accumulated`]. The loss's graph is freed on return.
    pub fn accumulate(&self, loss: &Tensor, acc: &mut Gradients) -> Result<()> {
        finite_loss(loss)?;
        let grads = loss.backward()?;
        if acc.grads.is_empty() {
            acc.grads = vec![None; self.slots.len()];
        }
        if acc.grads.len() != self.slots.len() {
            return Err(GrpoError::Config(format!(
                "gradients of {} parameters for an optimiser of {}",
                acc.grads.len(),
                self.slots.len()
            )));
        }
        for (s, a) in self.slots.iter().zip(acc.grads.iter_mut()) {
            if let Some(g) = grads.get(s.var.as_tensor()) {
                *a = Some(match a.take() {
                    Some(prev) => (prev + g)?,
                    None => g.clone(),
                });
            }
        }
        acc.losses += 1;
        Ok(())
    }

    /// One step on the summed gradients of [`Self::accumulate`] (clipped by
    /// their global norm, as [`Self::step`] clips one loss's). Fails on an
    /// empty accumulator or a non-finite gradient without touching the
    /// parameters.
    pub fn step_accumulated(&mut self, acc: Gradients) -> Result<StepStats> {
        let lr_step = self.step;
        self.step_accumulated_scheduled(acc, lr_step)
    }

    /// [`Self::step_accumulated`] at the learning rate of schedule position
    /// `schedule_step` (as [`Self::step_scheduled`]).
    pub fn step_accumulated_scheduled(
        &mut self,
        acc: Gradients,
        schedule_step: usize,
    ) -> Result<StepStats> {
        if acc.losses == 0 {
            return Err(GrpoError::Config("no gradient accumulated".into()));
        }
        let lr = self.cfg.lr_at(schedule_step);
        self.apply(acc.grads, lr)
    }

    /// Clip `gs` (one per slot) by their global norm and take the AdamW
    /// step at `lr`.
    fn apply(&mut self, gs: Vec<Option<Tensor>>, lr: f64) -> Result<StepStats> {
        let mut sq = 0f64;
        for g in gs.iter().flatten() {
            sq += g
                .to_dtype(DType::F64)?
                .sqr()?
                .sum_all()?
                .to_scalar::<f64>()?;
        }
        let grad_norm = sq.sqrt();
        if !grad_norm.is_finite() {
            return Err(GrpoError::NonFinite(format!(
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

    /// The moments (`m.<name>`, `v.<name>`) and the step counter (`step`),
    /// for a checkpoint.
    pub fn state(&self) -> Result<HashMap<String, Tensor>> {
        let mut map = HashMap::new();
        for s in &self.slots {
            map.insert(format!("m.{}", s.name), s.m.clone());
            map.insert(format!("v.{}", s.name), s.v.clone());
        }
        map.insert(
            "step".to_string(),
            Tensor::new(&[self.step as u32], &candle_core::Device::Cpu)?,
        );
        Ok(map)
    }

    /// The device the moments live on (where [`Self::restore`]'s tensors
    /// should be read to).
    pub fn device(&self) -> candle_core::Device {
        self.slots
            .first()
            .map(|s| s.m.device().clone())
            .unwrap_or(candle_core::Device::Cpu)
    }

    /// Restore what [`Self::state`] saved; a missing tensor or a wrong
    /// shape is an error naming it, and nothing is half restored.
    pub fn restore(&mut self, mut map: HashMap<String, Tensor>) -> Result<()> {
        let miss = |name: &str| GrpoError::State {
            tensor: name.to_string(),
            message: "missing or wrong shape in the optimizer state".into(),
        };
        let mut restored = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            let mut pair = Vec::with_capacity(2);
            for (key, dst) in [
                (format!("m.{}", s.name), &s.m),
                (format!("v.{}", s.name), &s.v),
            ] {
                let t = map.remove(&key).ok_or_else(|| miss(&key))?;
                if t.dims() != dst.dims() {
                    return Err(miss(&key));
                }
                pair.push(t.to_dtype(dst.dtype())?);
            }
            restored.push(pair);
        }
        let step = map.remove("step").ok_or_else(|| miss("step"))?;
        let step = step
            .flatten_all()?
            .to_vec1::<u32>()?
            .first()
            .copied()
            .unwrap_or(0) as usize;
        for (s, mut pair) in self.slots.iter_mut().zip(restored) {
            s.v = pair.pop().ok_or_else(|| miss("v"))?;
            s.m = pair.pop().ok_or_else(|| miss("m"))?;
        }
        self.step = step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn var(v: &[f32], shape: (usize, usize)) -> Var {
        Var::from_tensor(
            &Tensor::new(v, &Device::Cpu)
                .expect("ok")
                .reshape(shape)
                .expect("ok"),
        )
        .expect("ok")
    }

    #[test]
    fn adamw_descends_clips_and_restores_its_state() {
        let w = var(&[1.0, -2.0], (1, 2));
        let vars = vec![("w".to_string(), w.clone())];
        let cfg = OptimConfig {
            lr: 0.1,
            warmup_steps: 0,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            ..OptimConfig::default()
        };
        let mut opt = AdamW::new(&vars, cfg.clone(), &[]).expect("ok");
        // Loss 10 * sum(w^2): gradient norm far above the clip.
        let loss = (w.as_tensor().sqr().expect("ok").sum_all().expect("ok") * 10.0).expect("ok");
        let st = opt.step(&loss).expect("ok");
        assert!(st.grad_norm > 40.0, "{st:?}");
        let after: Vec<f32> = w
            .as_tensor()
            .flatten_all()
            .expect("ok")
            .to_vec1()
            .expect("ok");
        // Adam's first step moves each weight by lr against its gradient.
        assert!(
            (after[0] - 0.9).abs() < 1e-5 && (after[1] + 1.9).abs() < 1e-5,
            "{after:?}"
        );
        let saved = opt.state().expect("ok");
        let mut again = AdamW::new(&vars, cfg.clone(), &[]).expect("ok");
        again.restore(saved.clone()).expect("ok");
        assert_eq!(again.step_count(), 1);
        let mut short = saved;
        short.remove("v.w");
        let err = again.restore(short).expect_err("must fail").to_string();
        assert!(err.contains("v.w"), "{err}");
        assert!(AdamW::new(&vars, cfg, &["x.".into()]).is_err());
        // A non-finite loss is refused without touching the parameters.
        let nan = (w.as_tensor().sum_all().expect("ok") * f64::NAN).expect("ok");
        assert!(matches!(opt.step(&nan), Err(GrpoError::NonFinite(_))));
        let same: Vec<f32> = w
            .as_tensor()
            .flatten_all()
            .expect("ok")
            .to_vec1()
            .expect("ok");
        assert_eq!(same, after);
    }
}
