//! A run's configuration: one TOML file, every key known. Unknown keys and
//! invalid values fail before any work starts, naming the key.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wmrl_core::{Arm, CoreConfig};
use wmrl_policy::{GrpoConfig, OptimConfig};
use wmrl_sim::SimConfig;
use wmrl_worldmodel::{ScoreMode, WorldModelConfig};

use crate::{Result, TrainError};

/// Where rollouts run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvConfig {
    /// `sim` (in-process embedded simulator) or `bridge` (workers over
    /// ZeroMQ at `endpoints`).
    pub backend: String,
    /// Parallel environment slots.
    pub num_envs: usize,
    pub endpoints: Vec<String>,
    pub sim: SimConfig,
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            backend: "sim".into(),
            num_envs: 16,
            endpoints: Vec::new(),
            sim: SimConfig::default(),
        }
    }
}

/// How a step's rollouts are drawn (METHOD.md: 8 groups of 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    pub n_groups: usize,
    pub group_size: usize,
    pub temperature: f32,
    /// Task indices to train on; empty is all.
    pub tasks: Vec<usize>,
    /// Training initial states, inclusive range (paper split: 0-15).
    pub train_init_states: [usize; 2],
    /// Stop an episode after this many steps (0: the environment's limit).
    pub max_steps: usize,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            n_groups: 8,
            group_size: 8,
            temperature: 1.0,
            tasks: Vec::new(),
            train_init_states: [0, 15],
            max_steps: 0,
        }
    }
}

/// The policy update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpdateConfig {
    /// Passes over a step's samples with frozen old log-probs.
    pub inner_epochs: usize,
    /// Samples (policy calls) per gradient step.
    pub minibatch: usize,
    pub loss: GrpoConfig,
    pub optim: OptimConfig,
}

impl Default for UpdateConfig {
    fn default() -> Self {
        Self {
            inner_epochs: 2,
            minibatch: 256,
            loss: GrpoConfig::default(),
            optim: OptimConfig {
                lr: 5e-5,
                warmup_steps: 0,
                weight_decay: 0.0,
                ..OptimConfig::default()
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorldModelSection {
    /// The ONNX progress model.
    pub path: PathBuf,
    /// How per-frame progress collapses to one score (default `potential`).
    pub mode: ScoreMode,
    pub runtime: WorldModelConfig,
}

impl Default for WorldModelSection {
    fn default() -> Self {
        Self {
            path: PathBuf::from("models/progress-tiny/model.onnx"),
            mode: ScoreMode::Potential,
            runtime: WorldModelConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSection {
    /// Evaluate every this many steps (0: only at the end).
    pub every: usize,
    /// Held-out initial states, inclusive range (paper split: 16-49).
    pub init_states: [usize; 2],
    /// Task indices; empty is all.
    pub tasks: Vec<usize>,
    /// 0 is greedy, the usual VLA evaluation.
    pub temperature: f32,
    /// Also evaluate on the training states (in-domain) at the end.
    pub in_domain: bool,
}

impl Default for EvalSection {
    fn default() -> Self {
        Self {
            every: 0,
            init_states: [16, 49],
            tasks: Vec::new(),
            temperature: 0.0,
            in_domain: true,
        }
    }
}

/// Everything one `wmrl train` run needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    pub arm: Arm,
    pub seed: u64,
    /// Training steps.
    pub steps: usize,
    /// The SFT checkpoint every arm starts from (and the KL reference).
    pub policy: PathBuf,
    /// Save a resumable checkpoint every this many steps.
    pub checkpoint_every: usize,
    pub env: EnvConfig,
    pub rollout: RolloutConfig,
    pub update: UpdateConfig,
    pub world_model: WorldModelSection,
    /// The method: anchors, calibration, weight, advantages.
    pub wmrl: CoreConfig,
    pub eval: EvalSection,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            arm: Arm::Wmrl,
            seed: 0,
            steps: 20,
            policy: PathBuf::from("runs/quickstart/sft"),
            checkpoint_every: 1,
            env: EnvConfig::default(),
            rollout: RolloutConfig::default(),
            update: UpdateConfig::default(),
            world_model: WorldModelSection::default(),
            wmrl: CoreConfig::default(),
            eval: EvalSection::default(),
        }
    }
}

fn bad(key: &str, message: impl Into<String>) -> TrainError {
    TrainError::Config {
        path: key.to_string(),
        message: message.into(),
    }
}

impl TrainConfig {
    /// Parse TOML text; `origin` names the file in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let cfg: Self = toml::from_str(text).map_err(|e| TrainError::Config {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::Config {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# unserialisable config: {e}\n"))
    }

    /// Every check that does not need the disk.
    pub fn validate(&self) -> Result<()> {
        self.wmrl.validate()?;
        let r = &self.rollout;
        if r.n_groups == 0 {
            return Err(bad("rollout.n_groups", "must be at least 1"));
        }
        if r.group_size < 2 {
            return Err(bad(
                "rollout.group_size",
                "must be at least 2 (GRPO compares within a group)",
            ));
        }
        if !(r.temperature > 0.0 && r.temperature.is_finite()) {
            return Err(bad(
                "rollout.temperature",
                "must be positive for exploration",
            ));
        }
        if r.train_init_states[0] > r.train_init_states[1] {
            return Err(bad(
                "rollout.train_init_states",
                "must be [lo, hi] with lo <= hi",
            ));
        }
        let e = &self.eval;
        if e.init_states[0] > e.init_states[1] {
            return Err(bad("eval.init_states", "must be [lo, hi] with lo <= hi"));
        }
        let (a, b) = (r.train_init_states, e.init_states);
        if a[0] <= b[1] && b[0] <= a[1] {
            return Err(bad(
                "eval.init_states",
                format!(
                    "{b:?} overlaps the training states {a:?}: held-out evaluation must not see them"
                ),
            ));
        }
        if self.env.num_envs == 0 {
            return Err(bad("env.num_envs", "must be at least 1"));
        }
        match self.env.backend.as_str() {
            "sim" => {}
            "bridge" if !self.env.endpoints.is_empty() => {}
            "bridge" => {
                return Err(bad(
                    "env.endpoints",
                    "the bridge backend needs at least one endpoint",
                ));
            }
            other => {
                return Err(bad(
                    "env.backend",
                    format!("`{other}`: expected `sim` or `bridge`"),
                ));
            }
        }
        let u = &self.update;
        if u.inner_epochs == 0 || u.minibatch == 0 {
            return Err(bad(
                "update.inner_epochs / update.minibatch",
                "must be at least 1",
            ));
        }
        if !(u.optim.lr > 0.0 && u.optim.lr.is_finite()) {
            return Err(bad("update.optim.lr", "must be positive"));
        }
        if self.checkpoint_every == 0 {
            return Err(bad("checkpoint_every", "must be at least 1"));
        }
        Ok(())
    }

    /// The anchor fraction the arm actually runs with.
    pub fn label_regime(&self) -> &'static str {
        if self.arm == Arm::Sparse || self.wmrl.anchors.fraction >= 1.0 {
            "free"
        } else {
            "scarce"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let err = TrainConfig::from_toml("stepz = 3\n", "t.toml").expect_err("unknown");
        assert!(err.to_string().contains("stepz"), "{err}");
        let err = TrainConfig::from_toml("[rollout]\ngroup_size = 1\n", "t.toml").expect_err("bad");
        assert!(err.to_string().contains("rollout.group_size"), "{err}");
        let err = TrainConfig::from_toml("[eval]\ninit_states = [10, 20]\n", "t.toml")
            .expect_err("overlap");
        assert!(err.to_string().contains("eval.init_states"), "{err}");
        let err = TrainConfig::from_toml("[wmrl.weight]\nw_max = 0.5\n", "t.toml").expect_err("w");
        assert!(err.to_string().contains("weight.w_max"), "{err}");
        let err =
            TrainConfig::from_toml("[env.sim]\nimage_sise = 64\n", "t.toml").expect_err("nested");
        assert!(err.to_string().contains("image_sise"), "{err}");
        let err =
            TrainConfig::from_toml("[update.optim]\nlr_max = 1.0\n", "t.toml").expect_err("nested");
        assert!(err.to_string().contains("lr_max"), "{err}");
        let ok = TrainConfig::from_toml("arm = \"sparse\"\nsteps = 3\n", "t.toml").expect("ok");
        assert_eq!(ok.arm, Arm::Sparse);
        let round = TrainConfig::from_toml(&ok.to_toml(), "round").expect("round trip");
        assert_eq!(round, ok);
    }
}
