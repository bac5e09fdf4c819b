//! MiniVLA as a policy the trainer post-trains
//! ([`wmrl_policy::Learner`]): LoRA adapters on the language model (zero at
//! the start, so the start policy is exactly the checkpoint), AdamW over
//! them alone, GRPO on the 7 action tokens of every step at the rollout
//! temperature, each step's prefix (prompt and frozen vision features)
//! read back from what the rollout kept, the update in micro-batches
//! ([`MiniVla::grpo_update`]). A checkpoint holds the adapters and the
//! optimiser; [`MiniVla::export_merged`] writes the adapted model in the
//! converted layout.

use std::path::Path;

use candle_core::Tensor;
use wmrl_grpo::{AdamW, Objective, OptimConfig};
use wmrl_policy::{
    ActionPolicy, Learner, PolicyError, UpdateBatch, UpdateSettings, UpdateStats, minibatch_orders,
};

use crate::policy::model_error;
use crate::rl::{ActionSample, ActionStep, LoraConfig, Prefix};
use crate::{ACTION_DIM, MiniVlaError, MiniVlaPolicy, Result};

/// Where a checkpoint keeps the adapters and their optimiser.
pub const ADAPTERS_FILE: &str = "adapters.safetensors";
pub const ADAPTER_OPTIMIZER_FILE: &str = "adapter_optimizer.safetensors";

/// MiniVLA with LoRA adapters and their AdamW.
pub struct MiniVlaLearner {
    policy: MiniVlaPolicy,
    opt: AdamW,
    micro_batch: usize,
}

impl std::fmt::Debug for MiniVlaLearner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniVlaLearner")
            .field("policy", &self.policy)
            .field("adapters", &self.policy.model().adapters().len())
            .field("micro_batch", &self.micro_batch)
            .finish()
    }
}

impl MiniVlaLearner {
    /// `policy` with adapters `lora` attached (zero, so it still acts as
    /// the checkpoint) and AdamW `optim` over them; updates run in
    /// micro-batches of `micro_batch` steps.
    pub fn new(
        mut policy: MiniVlaPolicy,
        lora: &LoraConfig,
        optim: OptimConfig,
        micro_batch: usize,
    ) -> Result<Self> {
        if micro_batch == 0 {
            return Err(MiniVlaError::Config(
                "micro_batch must be at least 1".into(),
            ));
        }
        policy.model_mut().attach_lora(lora)?;
        let opt = AdamW::new(policy.model().adapters(), optim, &[])
            .map_err(|e| MiniVlaError::Config(format!("optimiser: {e}")))?;
        Ok(Self {
            policy,
            opt,
            micro_batch,
        })
    }

    pub fn minivla(&self) -> &MiniVlaPolicy {
        &self.policy
    }

    /// The update's steps: each sample's prefix (from its recorded
    /// features, else recomputed from its observation) and tokens.
    fn steps(&self, batch: &UpdateBatch<'_>) -> Result<Vec<ActionStep>> {
        batch
            .samples
            .iter()
            .map(|s| {
                let tokens: [u32; ACTION_DIM] = s.tokens.try_into().map_err(|_| {
                    MiniVlaError::Config(format!("{} tokens in a MiniVLA step", s.tokens.len()))
                })?;
                let logprobs: [f32; ACTION_DIM] = s.logprobs.try_into().map_err(|_| {
                    MiniVlaError::Config(format!(
                        "{} log-probs in a MiniVLA step",
                        s.logprobs.len()
                    ))
                })?;
                let prefix = match s.features {
                    Some(f) => Prefix::from_features(self.policy.model(), f)?,
                    None => self.policy.prefix_of(s.input)?,
                };
                Ok(ActionStep {
                    prefix,
                    sample: ActionSample { tokens, logprobs },
                    advantage: s.advantage,
                })
            })
            .collect()
    }
}

impl Learner for MiniVlaLearner {
    fn policy(&self) -> &dyn ActionPolicy {
        &self.policy
    }

    fn keeps_features(&self) -> bool {
        true
    }

    fn update(
        &mut self,
        batch: &UpdateBatch<'_>,
        settings: &UpdateSettings,
    ) -> wmrl_policy::Result<UpdateStats> {
        let mut stats = UpdateStats::default();
        let n = batch.samples.len();
        if n == 0 || batch.samples.iter().all(|s| s.advantage == 0.0) {
            return Ok(stats);
        }
        if settings.loss.kl_beta > 0.0 {
            // Refused up front by the trainer's config check too.
            return Err(PolicyError::Model(
                "minivla: no KL-to-reference term (the adapters start from the checkpoint); set update.loss.kl_beta = 0".into(),
            ));
        }
        let steps = self.steps(batch).map_err(model_error)?;
        let objective = Objective {
            kl_beta: 0.0,
            ..settings.loss
        };
        let mb = match settings.minibatch {
            0 => n,
            m => m,
        };
        for order in minibatch_orders(n, settings.inner_epochs, settings.shuffle_seed) {
            for part in order.chunks(mb) {
                let sub: Vec<ActionStep> = part.iter().map(|&i| steps[i].clone()).collect();
                let (st, s) = self
                    .policy
                    .model()
                    .grpo_update(
                        &mut self.opt,
                        &sub,
                        batch.temperature,
                        &objective,
                        self.micro_batch,
                        Some(settings.step),
                    )
                    .map_err(model_error)?;
                stats.add(&s, st.grad_norm);
            }
        }
        Ok(stats.mean())
    }

    fn save(&self, dir: &Path) -> wmrl_policy::Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| PolicyError::Io {
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
        self.policy
            .model()
            .save_adapters(&dir.join(ADAPTERS_FILE))
            .map_err(model_error)?;
        let state = self
            .opt
            .state()
            .map_err(|e| PolicyError::Model(e.to_string()))?;
        let path = dir.join(ADAPTER_OPTIMIZER_FILE);
        candle_core::safetensors::save(&state, &path).map_err(|e| PolicyError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The checkpoint `start` with the adapters merged into its weights
    /// ([`crate::MiniVla::export_merged`]), its action statistics copied.
    fn export(&self, start: &Path, dst: &Path) -> wmrl_policy::Result<()> {
        self.policy
            .model()
            .export_merged(start, dst)
            .map_err(model_error)?;
        let stats = start.join(crate::STATS_FILE);
        if stats.exists() {
            std::fs::copy(&stats, dst.join(crate::STATS_FILE)).map_err(|e| PolicyError::Io {
                path: stats.display().to_string(),
                message: e.to_string(),
            })?;
        }
        Ok(())
    }

    fn restore(&mut self, dir: &Path) -> wmrl_policy::Result<()> {
        let path = dir.join(ADAPTER_OPTIMIZER_FILE);
        let state: std::collections::HashMap<String, Tensor> =
            candle_core::safetensors::load(&path, &self.opt.device()).map_err(|e| {
                PolicyError::Io {
                    path: path.display().to_string(),
                    message: e.to_string(),
                }
            })?;
        // A resume that fails here stops the run: nothing goes on with a
        // half-restored learner.
        self.policy
            .model()
            .load_adapters(&dir.join(ADAPTERS_FILE))
            .map_err(model_error)?;
        self.opt.restore(state).map_err(|e| match e {
            wmrl_grpo::GrpoError::State { tensor, message } => PolicyError::Checkpoint {
                path: path.display().to_string(),
                tensor,
                message,
            },
            e => PolicyError::Model(format!("minivla optimiser: {e}")),
        })
    }
}
