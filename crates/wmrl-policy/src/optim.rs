//! The policy's optimiser: the AdamW both tracks share (`wmrl-grpo`) over
//! a [`Policy`]'s named parameters, with its state saved beside the
//! policy's checkpoint. Defaults follow common VLA fine-tuning practice
//! (OpenVLA: AdamW, lr 2e-4 for small models is typical; betas 0.9/0.95 as
//! in LLM training; grad-norm clip 1.0).

use std::path::Path;

use candle_core::Var;
use wmrl_grpo::AdamW;
use wmrl_grpo::OptimConfig;

use crate::checkpoint::{read_tensors, write_tensors};
use crate::{Policy, PolicyError, Result};

/// AdamW over a policy's parameters ([`AdamW`]'s methods through `Deref`).
#[derive(Debug)]
pub struct PolicyOptimizer(AdamW);

impl std::ops::Deref for PolicyOptimizer {
    type Target = AdamW;
    fn deref(&self) -> &AdamW {
        &self.0
    }
}

impl std::ops::DerefMut for PolicyOptimizer {
    fn deref_mut(&mut self) -> &mut AdamW {
        &mut self.0
    }
}

impl PolicyOptimizer {
    pub fn new(policy: &Policy, cfg: OptimConfig) -> Result<Self> {
        Self::new_subset(policy, cfg, &[])
    }

    /// AdamW over the parameters whose names start with one of `prefixes`
    /// (every parameter when `prefixes` is empty); the others stay frozen.
    /// Fails when a prefix matches no parameter (names look like
    /// "lm.head.weight", "vision.blocks.0.attn.q.weight").
    pub fn new_subset(policy: &Policy, cfg: OptimConfig, prefixes: &[String]) -> Result<Self> {
        let vars: Vec<_> = policy
            .vars()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self::over(&vars, cfg, prefixes)
    }

    /// AdamW over any named parameters (another policy's, e.g. a whole
    /// MiniVLA in [`crate::train_sft`]), with the same state file.
    pub fn over(vars: &[(String, Var)], cfg: OptimConfig, prefixes: &[String]) -> Result<Self> {
        Ok(Self(AdamW::new(vars, cfg, prefixes)?))
    }

    /// Save the moments and the step counter.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_tensors(path, &self.0.state()?)
    }

    /// Restore the moments and the step counter saved by [`Self::save`].
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let map = read_tensors(path, &self.0.device())?;
        self.0.restore(map).map_err(|e| match e {
            wmrl_grpo::GrpoError::State { tensor, message } => PolicyError::Checkpoint {
                path: path.display().to_string(),
                tensor,
                message,
            },
            e => e.into(),
        })
    }
}
