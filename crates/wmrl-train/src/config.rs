//! A run's configuration: one TOML file, every key known. Unknown keys and
//! invalid values fail before any work starts, naming the key.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wmrl_core::{Arm, CoreConfig};
use wmrl_grpo::OptimConfig;
use wmrl_policy::GrpoConfig;
use wmrl_run::DeviceChoice;
use wmrl_sim::SimConfig;
use wmrl_worldmodel::{FineTuneConfig, ScoreMode, WorldModelConfig};

use crate::{Result, TrainError};

/// What steps the environments (`env.backend`, `wmrl eval --backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The embedded rapier3d simulator, in process.
    #[default]
    Sim,
    /// Workers over ZeroMQ at `env.endpoints`, started by the user.
    Bridge,
    /// Real LIBERO server workers that wmrl starts and supervises
    /// (`[env.libero]`).
    Libero,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sim => "sim",
            Self::Bridge => "bridge",
            Self::Libero => "libero",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [Self::Sim, Self::Bridge, Self::Libero]
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("`{s}`: expected `sim`, `bridge` or `libero`"))
    }
}

/// Where rollouts run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvConfig {
    /// `sim` (in-process embedded simulator), `bridge` (workers over ZeroMQ
    /// at `endpoints`, started by the user) or `libero` (real LIBERO server
    /// workers that wmrl starts and supervises itself: `[env.libero]`).
    pub backend: Backend,
    /// Parallel environment slots (`sim`; for `libero`, capped at what the
    /// workers hold together; `bridge` uses every slot of its workers).
    pub num_envs: usize,
    pub endpoints: Vec<String>,
    pub sim: SimConfig,
    pub libero: LiberoEnvConfig,
    /// Client pool settings for `bridge` and `libero` (timeouts, reconnect;
    /// `num_envs` here is ignored: see `env.num_envs`).
    pub pool: wmrl_bridge::PoolConfig,
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            backend: Backend::Sim,
            num_envs: 16,
            endpoints: Vec::new(),
            sim: SimConfig::default(),
            libero: LiberoEnvConfig::default(),
            pool: wmrl_bridge::PoolConfig::default(),
        }
    }
}

/// The real LIBERO simulator as worker processes (`env.backend = "libero"`):
/// `workers` processes of `python server` (envs/libero/server.py in the venv
/// scripts/setup builds), each with `envs_per_worker` environments, started
/// on loopback endpoints, restarted if they die, killed at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LiberoEnvConfig {
    /// Interpreter of the LIBERO venv (relative paths: from the working
    /// directory, normally the repository root).
    pub python: PathBuf,
    pub server: PathBuf,
    pub workers: usize,
    pub envs_per_worker: usize,
    /// LIBERO suite (`libero_10` is LIBERO-Long).
    pub suite: String,
    /// Camera frames are `image_size` x `image_size`.
    pub image_size: u32,
    /// `MUJOCO_GL` for the workers (`egl` or `osmesa`), unless already set.
    pub mujoco_gl: String,
    /// How long a worker may take to start (imports, building environments).
    pub ready_timeout_secs: f64,
}

impl Default for LiberoEnvConfig {
    fn default() -> Self {
        Self {
            python: "envs/libero/.venv/bin/python".into(),
            server: "envs/libero/server.py".into(),
            workers: 2,
            envs_per_worker: 1,
            suite: "libero_10".into(),
            image_size: 128,
            mujoco_gl: "egl".into(),
            ready_timeout_secs: 180.0,
        }
    }
}

/// How a step's rollouts are drawn (METHOD.md: 8 groups of 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    pub n_groups: usize,
    pub group_size: usize,
    /// Sampling temperature of training rollouts. The one temperature: the
    /// update batch carries it, and the loss scores tokens under the
    /// distribution they were sampled from.
    pub temperature: f32,
    /// Task indices to train on; empty is all.
    pub tasks: Vec<usize>,
    /// Training initial states, inclusive range (paper split: 0-15).
    pub train_init_states: [usize; 2],
    /// Stop an episode after this many steps (0: the environment's limit).
    pub max_steps: usize,
    /// Dynamic sampling (DAPO): groups whose graded outcomes are all equal
    /// (no advantage) are dropped and as many fresh groups drawn in their
    /// place, up to this many rounds per step; a group still flat at the
    /// cap stays (and `update.skip_flat_groups` leaves it out). The dropped
    /// groups' simulator steps, policy calls and labels are charged like
    /// any others; the ledger counts them (`redrawn_groups`). Only for the
    /// arms that label every group (`sparse`, `sparse_shuffled`). 0 (the
    /// default): every group drawn is kept, and the key is not written (a
    /// run directory recorded before it existed compares equal).
    #[serde(skip_serializing_if = "is_zero")]
    pub redraw_rounds: usize,
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
            redraw_rounds: 0,
        }
    }
}

/// See [`UpdateConfig::loss_norm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LossNorm {
    #[default]
    Token,
    Rollout,
}

/// Where per-chunk credit comes from (see [`CreditConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CreditSource {
    /// No per-chunk credit: every chunk of a rollout has its advantage.
    #[default]
    None,
    /// The environment's privileged progress oracle (the embedded
    /// simulator's goal sub-steps, docs/sim.md). A diagnostic: it tells
    /// whether per-decision credit gives the update a signal, with a
    /// progress signal that is never wrong.
    Oracle,
}

/// Per-chunk credit: each chunk's advantage gets `weight` times its
/// group-normalised progress return `c_k = sum_{j >= k} lambda^(j-k)
/// (p_{j+1} - p_j)`, where `p_j` is the progress at policy call `j` (and
/// `p_K` at the end). A chunk that made (or led to) progress is credited,
/// not the whole rollout alike: the progress signal used as a value
/// function, as in GAE with the progress as critic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CreditConfig {
    pub source: CreditSource,
    /// Weight of the normalised chunk credit beside the rollout's advantage.
    pub weight: f64,
    /// Decay of future progress in the chunk's return (0: the chunk's own
    /// progress only; 1: everything after it).
    pub lambda: f64,
}

impl Default for CreditConfig {
    fn default() -> Self {
        Self {
            source: CreditSource::None,
            weight: 1.0,
            lambda: 0.8,
        }
    }
}

/// The policy update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpdateConfig {
    /// Passes over a step's samples with frozen old log-probs.
    pub inner_epochs: usize,
    /// Samples (policy calls) per gradient step; 0 takes the whole step's
    /// batch in one gradient step per epoch (memory grows with the batch:
    /// one pass over half of a 256-rollout step of `tiny` exceeded 24 GB).
    pub minibatch: usize,
    /// Leave groups whose advantages are all zero (e.g. eight failures
    /// under a sparse reward) out of the update, as DAPO's dynamic sampling
    /// does: they carry no policy-gradient signal but would dilute the
    /// token-mean loss and still pull through the KL term.
    pub skip_flat_groups: bool,
    /// Diagnostic (costs two extra forward and backward passes over the
    /// step's batch): the policy
    /// gradient before the update of two halves of every group's rollouts,
    /// and their cosine `c` (`grad_half_cosine`): near 0 means the gradient
    /// is noise; the signal's share of the full-batch gradient power is
    /// about `2c / (1 + c)`. Also the cosine between two halves of the
    /// groups (`grad_cross_group_cosine`: do different tasks' updates agree).
    pub measure_grad_snr: bool,
    /// How the loss weighs rollouts: `token` (every executed action token
    /// counts once, so a long rollout weighs more: failures that run to the
    /// time limit outweigh successes that end early) or `rollout` (each
    /// rollout's tokens share one unit of weight, as in the original GRPO's
    /// per-sequence mean).
    pub loss_norm: LossNorm,
    /// Parameter-name prefixes the update trains (e.g. `["lm.head"]`, or
    /// `["lm.blocks.2", "lm.final_norm", "lm.head"]`); the rest stay at the
    /// start's values. Empty (the default) trains every parameter. Names are
    /// those of model.safetensors (`vision.*`, `projector.*`, `lm.*`).
    pub trainable: Vec<String>,
    /// Per-chunk credit from a progress signal (off by default).
    pub credit: CreditConfig,
    pub loss: LossSection,
    pub optim: OptimConfig,
}

/// `[update.loss]`: the clipped objective's weights. The temperature is not
/// here: the loss scores tokens at `rollout.temperature`, which the update
/// batch carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossSection {
    /// Ratios below `1 - clip_low` stop pushing (PPO/GRPO: 0.2).
    pub clip_low: f64,
    /// Ratios above `1 + clip_high` stop pushing (DAPO's clip-higher: 0.28).
    pub clip_high: f64,
    /// KL-to-reference weight (GRPO paper / METHOD.md: 0.04); 0 disables.
    pub kl_beta: f64,
    /// Entropy bonus weight; 0 disables.
    pub entropy_coef: f64,
}

impl Default for LossSection {
    fn default() -> Self {
        let g = GrpoConfig::default();
        Self {
            clip_low: g.clip_low,
            clip_high: g.clip_high,
            kl_beta: g.kl_beta,
            entropy_coef: g.entropy_coef,
        }
    }
}

impl LossSection {
    /// The objective's weights (the temperature is the batch's, not the
    /// loss's: [`wmrl_policy::UpdateBatch::temperature`]).
    pub fn objective(&self) -> wmrl_grpo::Objective {
        wmrl_grpo::Objective {
            clip_low: self.clip_low,
            clip_high: self.clip_high,
            kl_beta: self.kl_beta,
            entropy_coef: self.entropy_coef,
        }
    }
}

impl Default for UpdateConfig {
    fn default() -> Self {
        Self {
            inner_epochs: 2,
            minibatch: 256,
            skip_flat_groups: true,
            measure_grad_snr: false,
            loss_norm: LossNorm::Token,
            trainable: Vec::new(),
            credit: CreditConfig::default(),
            loss: LossSection::default(),
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
    /// How a refit fine-tunes the model (used when `wmrl.refit.every > 0`;
    /// the model's candle weights must then sit beside `path`, as `wmrl wm
    /// train` writes them: docs/worldmodel.md, "Refits").
    pub refit: FineTuneConfig,
}

impl Default for WorldModelSection {
    fn default() -> Self {
        Self {
            path: PathBuf::from("models/progress-tiny/model.onnx"),
            mode: ScoreMode::Potential,
            runtime: WorldModelConfig::default(),
            refit: FineTuneConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSection {
    /// Evaluate every this many steps (0: only at the end) on
    /// `curve_init_states`: the learning curve.
    pub every: usize,
    /// Held-out initial states of the periodic curve evaluations, inclusive
    /// range (a fixed subset keeps them cheap); `None` uses `init_states`.
    pub curve_init_states: Option<[usize; 2]>,
    /// Evaluate the starting policy at step 0 (a bench evaluates the shared
    /// start once instead and turns this off).
    pub at_start: bool,
    /// The paper's measure at the end: this many sampled episodes per
    /// held-out (task, state) at the rollout temperature (0: skip; paper 8).
    pub sampled_per_state: usize,
    /// Held-out initial states, inclusive range (paper split: 16-49). With
    /// `test_states` set these are the validation states (the curve, every
    /// choice of settings); without, the final evaluation runs on them too.
    pub init_states: [usize; 2],
    /// Test states, inclusive range (shared/BENCHMARKS.md: 50-74 on the
    /// embedded simulator): the final evaluation (greedy and sampled) runs
    /// on these, once, at the end of the run; nothing else reads them.
    /// Must not overlap the training or validation states. `None`: the
    /// final evaluation runs on `init_states` (figures on validation
    /// states, as every figure before 2026-12-03 was).
    pub test_states: Option<[usize; 2]>,
    /// States already read while choosing settings, inclusive ranges:
    /// other configs' validation states, and the test states of earlier
    /// benches once their figures were looked at (shared/BENCHMARKS.md:
    /// a test state is read once). `test_states` must not overlap any of
    /// them. Empty (the default) is not written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub seen_states: Vec<[usize; 2]>,
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
            curve_init_states: None,
            at_start: true,
            sampled_per_state: 0,
            init_states: [16, 49],
            test_states: None,
            seen_states: Vec::new(),
            tasks: Vec::new(),
            temperature: 0.0,
            in_domain: true,
        }
    }
}

impl EvalSection {
    /// The states of the final evaluation: `test_states` when set, else
    /// `init_states`.
    pub fn final_states(&self) -> [usize; 2] {
        self.test_states.unwrap_or(self.init_states)
    }
}

/// Where the real outcomes of anchor rollouts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LabelSource {
    /// The simulator's success flag (every run before labels from people).
    #[default]
    Sim,
    /// People, through the label page (`wmrl label serve --run DIR`,
    /// docs/labels.md): the simulator's flag is never shown to them.
    Human,
}

/// The label source of a robot run (`[labels]`; absent from run.toml
/// while it is the default, so runs made before it read and compare as
/// they did).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LabelsSection {
    pub source: LabelSource,
    /// With `human`: a step waits until every anchor rollout of it is
    /// labelled (true), or goes on at once with the labels already given
    /// (false: an anchor group without all its labels counts as ungraded
    /// and its rollouts keep the world model's scores).
    pub wait: bool,
    /// How often a waiting trainer looks for new labels.
    pub poll_ms: u64,
}

impl Default for LabelsSection {
    fn default() -> Self {
        Self {
            source: LabelSource::Sim,
            wait: true,
            poll_ms: 500,
        }
    }
}

impl LabelsSection {
    fn is_default(&self) -> bool {
        *self == Self::default()
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
    /// The policy's kind (`tiny`, `minivla`, or one a program registers:
    /// [`crate::PolicyKinds`]); absent, the kind whose checkpoint `policy`
    /// holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_type: Option<String>,
    /// Save a resumable checkpoint every this many steps.
    pub checkpoint_every: usize,
    pub env: EnvConfig,
    pub rollout: RolloutConfig,
    pub update: UpdateConfig,
    pub world_model: WorldModelSection,
    /// The method: anchors, calibration, weight, advantages.
    pub wmrl: CoreConfig,
    pub eval: EvalSection,
    /// Where anchor rollouts' real outcomes come from (default: the
    /// simulator).
    #[serde(skip_serializing_if = "LabelsSection::is_default")]
    pub labels: LabelsSection,
    /// How a MiniVLA `policy` is post-trained (ignored by the `tiny`
    /// policy; absent: the defaults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minivla: Option<MiniVlaSection>,
    /// Where the models run (`--device`): `cpu` (written only when not),
    /// `cuda` or `auto`. Where, not what: a bench resumes a run under
    /// another device.
    #[serde(skip_serializing_if = "DeviceChoice::is_cpu")]
    pub device: DeviceChoice,
}

/// `[minivla]`: LoRA adapters on MiniVLA's language model and the update's
/// micro-batch (docs/policy.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MiniVlaSection {
    /// Rank, scale and target projections of the adapters.
    pub lora: wmrl_minivla::LoraConfig,
    /// Steps per forward and backward pass of the update: peak memory
    /// grows with it, the gradient does not change.
    pub micro_batch: usize,
    /// The dataset in `dataset_statistics.json` whose statistics
    /// un-normalise the actions (when the file holds several).
    pub stats_key: Option<String>,
}

impl Default for MiniVlaSection {
    fn default() -> Self {
        Self {
            lora: wmrl_minivla::LoraConfig::default(),
            micro_batch: 4,
            stats_key: None,
        }
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            arm: Arm::Wmrl,
            seed: 0,
            steps: 20,
            policy: PathBuf::from("runs/quickstart/sft"),
            policy_type: None,
            checkpoint_every: 1,
            env: EnvConfig::default(),
            rollout: RolloutConfig::default(),
            update: UpdateConfig::default(),
            world_model: WorldModelSection::default(),
            wmrl: CoreConfig::default(),
            eval: EvalSection::default(),
            labels: LabelsSection::default(),
            minivla: None,
            device: DeviceChoice::Cpu,
        }
    }
}

/// For `skip_serializing_if`: a count that is 0 is not written.
pub(crate) fn is_zero(x: &usize) -> bool {
    *x == 0
}

/// A resumed run may move to another device (where the models run is not
/// what the run computes); its steps, arm and seed are its own.
impl wmrl_run::RunSettings for TrainConfig {
    const MAY_CHANGE: &'static [&'static str] = &["device"];
}

/// The layouts of a run's recorded settings (run.toml; config.toml,
/// [`wmrl_run::Versioned::LEGACY_FILE`], before every kind of run recorded
/// its settings in run.toml):
/// - 0, before the key: `[update.loss]` could carry `temperature`, which
///   had to equal `rollout.temperature` (the loss scores tokens at the
///   temperature they were sampled at). It is dropped where it does, and
///   refused where it does not.
/// - 1: `format = 1` first, every key written.
impl wmrl_run::Versioned for TrainConfig {
    const FORMAT: u32 = 1;
    const LEGACY_FILE: Option<&'static str> = Some("config.toml");
    fn migrate(
        from: u32,
        doc: &mut serde_json::Map<String, serde_json::Value>,
    ) -> std::result::Result<(), String> {
        if from > 0 {
            return Ok(());
        }
        let Some(t) = doc
            .get_mut("update")
            .and_then(|u| u.get_mut("loss"))
            .and_then(|l| l.as_object_mut())
            .and_then(|l| l.remove("temperature"))
        else {
            return Ok(());
        };
        let t = t
            .as_f64()
            .ok_or_else(|| format!("update.loss.temperature = {t}: expected a number"))?;
        let rollout = doc
            .get("rollout")
            .and_then(|r| r.get("temperature"))
            .and_then(|v| v.as_f64())
            .unwrap_or(f64::from(RolloutConfig::default().temperature));
        if (t - rollout).abs() > 1e-6 {
            return Err(format!(
                "update.loss.temperature = {t} differs from rollout.temperature {rollout}: the loss scores tokens at the temperature they were sampled at, so the key is gone (remove it)"
            ));
        }
        Ok(())
    }
}

fn bad(key: &str, message: impl Into<String>) -> TrainError {
    TrainError::Config {
        path: key.to_string(),
        message: message.into(),
    }
}

impl TrainConfig {
    /// Parse TOML text; `origin` names the file in errors. The text is a
    /// person's config, in today's layout unless it names its `format`.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let mut doc: toml::Table = wmrl_run::parse(text, origin)?;
        wmrl_run::format::upgrade_toml::<Self>(&mut doc, wmrl_run::Absent::Current)
            .map_err(|message| bad("format", message))?;
        let cfg: Self = doc
            .try_into()
            .map_err(|e: toml::de::Error| TrainError::Config {
                path: origin.into(),
                message: e.to_string(),
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parse `path` with its `section.key=value` overrides, not yet
    /// validated: for a command that applies its own flags and then
    /// validates once (`wmrl train` in [`crate::Trainer::create`], `wmrl
    /// bench` before planning its runs).
    pub fn parse_with(path: &Path, overrides: &[String]) -> Result<Self> {
        let (cfg, _) = wmrl_run::load_versioned(path, overrides, wmrl_run::Absent::Current)?;
        Ok(cfg)
    }

    /// A run directory's recorded settings (run.toml, or an older wmrl's
    /// config.toml), migrated from their layout (none: format 0, see
    /// [`TrainConfig`]'s [`wmrl_run::Versioned`]), validated; with the file
    /// they came from.
    pub fn recorded_in(run: &wmrl_run::RunDir) -> Result<(Self, std::path::PathBuf)> {
        let (cfg, path): (Self, _) = run.read_settings()?;
        cfg.validate()?;
        Ok((cfg, path))
    }

    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with(path, &[])
    }

    /// Load `path`, apply `section.key=value` overrides (the value is TOML:
    /// `0.5`, `true`, `[16, 25]`, `"text"`; a bare word is a string), then
    /// validate once.
    pub fn load_with(path: &Path, overrides: &[String]) -> Result<Self> {
        let cfg = Self::parse_with(path, overrides)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The first key (dotted, e.g. `wmrl.anchors.fraction`) whose value
    /// differs between two configs, with both values; `None` when equal.
    pub fn first_difference(&self, other: &TrainConfig) -> Option<String> {
        wmrl_run::first_difference(self, other, "")
    }

    /// The config as TOML (what a run directory's run.toml holds). It
    /// fails only on a value TOML cannot hold (e.g. a path that is not
    /// UTF-8), and then says so instead of writing a file that would read
    /// back as something else.
    pub fn to_toml(&self) -> Result<String> {
        wmrl_run::format::to_toml(self).map_err(|e| TrainError::Config {
            path: "config".into(),
            message: format!("cannot be written as TOML: {e}"),
        })
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
        if let Some(m) = &self.minivla {
            m.lora
                .validate()
                .map_err(|e| bad("minivla.lora", e.to_string()))?;
            if m.micro_batch == 0 {
                return Err(bad("minivla.micro_batch", "must be at least 1"));
            }
        }
        if self.labels.poll_ms == 0 {
            return Err(bad("labels.poll_ms", "must be at least 1"));
        }
        if self.rollout.redraw_rounds > 0 && !self.arm.all_real() {
            return Err(bad(
                "rollout.redraw_rounds",
                format!(
                    "works with the arms that label every group (sparse, sparse_shuffled), not {}",
                    self.arm.name()
                ),
            ));
        }
        if self.rollout.redraw_rounds > 0 && self.labels.source == LabelSource::Human {
            return Err(bad(
                "rollout.redraw_rounds",
                "needs labels that come back in the step (labels.source = \"human\" queues them for people)",
            ));
        }
        let c = &self.update.credit;
        if !(c.weight >= 0.0 && c.weight.is_finite()) {
            return Err(bad("update.credit.weight", "must be finite and >= 0"));
        }
        if !(0.0..=1.0).contains(&c.lambda) {
            return Err(bad("update.credit.lambda", "must lie in [0, 1]"));
        }
        if r.train_init_states[0] > r.train_init_states[1] {
            return Err(bad(
                "rollout.train_init_states",
                "must be [lo, hi] with lo <= hi",
            ));
        }
        self.validate_states()?;
        self.validate_env()?;
        let u = &self.update;
        if u.inner_epochs == 0 {
            return Err(bad("update.inner_epochs", "must be at least 1"));
        }
        if !(u.optim.lr > 0.0 && u.optim.lr.is_finite()) {
            return Err(bad("update.optim.lr", "must be positive"));
        }
        if self.checkpoint_every == 0 {
            return Err(bad("checkpoint_every", "must be at least 1"));
        }
        self.world_model
            .refit
            .check()
            .map_err(|(key, why)| bad(&format!("world_model.refit.{key}"), why))?;
        Ok(())
    }

    /// The split: training, validation (curve) and test states apart.
    fn validate_states(&self) -> Result<()> {
        let r = &self.rollout;
        let e = &self.eval;
        if e.init_states[0] > e.init_states[1] {
            return Err(bad("eval.init_states", "must be [lo, hi] with lo <= hi"));
        }
        for (key, b) in [
            ("eval.init_states", Some(e.init_states)),
            ("eval.curve_init_states", e.curve_init_states),
        ] {
            let (a, Some(b)) = (r.train_init_states, b) else {
                continue;
            };
            if b[0] > b[1] {
                return Err(bad(key, "must be [lo, hi] with lo <= hi"));
            }
            if a[0] <= b[1] && b[0] <= a[1] {
                return Err(bad(
                    key,
                    format!(
                        "{b:?} overlaps the training states {a:?}: held-out evaluation must not see them"
                    ),
                ));
            }
        }
        if let Some(b) = e.seen_states.iter().find(|b| b[0] > b[1]) {
            return Err(bad(
                "eval.seen_states",
                format!("{b:?} must be [lo, hi] with lo <= hi"),
            ));
        }
        if let Some(t) = e.test_states {
            if t[0] > t[1] {
                return Err(bad("eval.test_states", "must be [lo, hi] with lo <= hi"));
            }
            for (what, b) in [
                (
                    "training states (rollout.train_init_states)",
                    Some(r.train_init_states),
                ),
                ("validation states (eval.init_states)", Some(e.init_states)),
                ("curve states (eval.curve_init_states)", e.curve_init_states),
            ]
            .into_iter()
            .chain(e.seen_states.iter().map(|&b| {
                (
                    "states already used for choosing settings (eval.seen_states)",
                    Some(b),
                )
            })) {
                if let Some(b) = b
                    && t[0] <= b[1]
                    && b[0] <= t[1]
                {
                    return Err(bad(
                        "eval.test_states",
                        format!(
                            "{t:?} overlaps the {what} {b:?}: test states are read once, for the final figures, and never seen by training or the choice of settings"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The environment backend's own settings, and that every state the
    /// run reads exists.
    fn validate_env(&self) -> Result<()> {
        let (r, e) = (&self.rollout, &self.eval);
        if self.env.num_envs == 0 {
            return Err(bad("env.num_envs", "must be at least 1"));
        }
        match self.env.backend {
            Backend::Sim => {
                let n = self.env.sim.n_init_states;
                for (key, b) in [
                    ("rollout.train_init_states", Some(r.train_init_states)),
                    ("eval.init_states", Some(e.init_states)),
                    ("eval.test_states", e.test_states),
                ] {
                    if let Some([_, hi]) = b
                        && hi >= n
                    {
                        return Err(bad(
                            key,
                            format!(
                                "state {hi} does not exist: the simulator generates env.sim.n_init_states = {n} states per task (raise it; it can generate any number)"
                            ),
                        ));
                    }
                }
            }
            Backend::Libero => {
                let l = &self.env.libero;
                if l.workers == 0 || l.envs_per_worker == 0 {
                    return Err(bad(
                        "env.libero",
                        "workers and envs_per_worker must be at least 1",
                    ));
                }
                if l.workers > self.env.num_envs {
                    return Err(bad(
                        "env.libero.workers",
                        format!(
                            "{} workers for env.num_envs = {} slots would leave a worker idle: lower the workers or raise num_envs",
                            l.workers, self.env.num_envs
                        ),
                    ));
                }
                if !(l.ready_timeout_secs.is_finite() && l.ready_timeout_secs > 0.0) {
                    return Err(bad("env.libero.ready_timeout_secs", "must be positive"));
                }
            }
            Backend::Bridge if !self.env.endpoints.is_empty() => {}
            Backend::Bridge => {
                return Err(bad(
                    "env.endpoints",
                    "the bridge backend needs at least one endpoint",
                ));
            }
        }
        Ok(())
    }

    /// The anchor fraction the arm actually runs with.
    pub fn label_regime(&self) -> &'static str {
        if self.arm.all_real() || self.wmrl.anchors.fraction.is_all() {
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
        // One temperature: the loss's is the rollouts'. A person's config
        // has no `update.loss.temperature`; a run's config.toml recorded
        // before layouts (format 0) reads when it agrees, is refused when it
        // does not, and the key is never written back.
        let one = TrainConfig::from_toml("[rollout]\ntemperature = 0.5\n", "t.toml")
            .expect("rollout.temperature alone");
        let text = one.to_toml().expect("toml");
        assert!(text.starts_with("format = 1\n"), "{text}");
        assert!(!text.contains("[update.loss]\ntemperature"));
        assert_eq!(TrainConfig::from_toml(&text, "copy").expect("a copy"), one);
        let err = TrainConfig::from_toml(
            "[rollout]\ntemperature = 0.5\n[update.loss]\ntemperature = 0.5\n",
            "t.toml",
        )
        .expect_err("not a key of today's layout");
        assert!(err.to_string().contains("temperature"), "{err}");
        let dir = tempfile::tempdir().expect("tempdir");
        let run = wmrl_run::RunDir::new(dir.path());
        let recorded = dir.path().join("config.toml");
        let old = text
            .replacen("format = 1\n", "", 1)
            .replace("[update.loss]\n", "[update.loss]\ntemperature = 0.5\n");
        std::fs::write(&recorded, &old).expect("write");
        assert_eq!(
            TrainConfig::recorded_in(&run).expect("format 0"),
            (one.clone(), recorded.clone())
        );
        std::fs::write(
            &recorded,
            old.replace("temperature = 0.5\nclip", "temperature = 1.0\nclip"),
        )
        .expect("write");
        let err = TrainConfig::recorded_in(&run).expect_err("temperature mismatch");
        assert!(err.to_string().contains("update.loss.temperature"), "{err}");
        TrainConfig::from_toml("[update]\nminibatch = 0\n", "t.toml").expect("whole batch");
        let err = TrainConfig::from_toml("[update]\ninner_epochs = 0\n", "t.toml").expect_err("0");
        assert!(err.to_string().contains("update.inner_epochs"), "{err}");
        let err = TrainConfig::from_toml("[eval]\ncurve_init_states = [0, 20]\n", "t.toml")
            .expect_err("curve overlap");
        assert!(err.to_string().contains("eval.curve_init_states"), "{err}");
        for overlap in ["[0, 3]", "[40, 60]", "[10, 80]"] {
            let err =
                TrainConfig::from_toml(&format!("[eval]\ntest_states = {overlap}\n"), "t.toml")
                    .expect_err("test states overlapping training or validation states");
            assert!(err.to_string().contains("eval.test_states"), "{err}");
        }
        let err = TrainConfig::from_toml(
            "[eval]\ntest_states = [20, 30]\ninit_states = [40, 49]\ncurve_init_states = [16, 25]\n",
            "t.toml",
        )
        .expect_err("test states overlapping the curve");
        assert!(err.to_string().contains("curve states"), "{err}");
        for seen in ["[[50, 74]]", "[[16, 49], [60, 80]]"] {
            let err = TrainConfig::from_toml(
                &format!(
                    "[env.sim]\nn_init_states = 100\n[eval]\ntest_states = [75, 99]\nseen_states = {seen}\n"
                ),
                "t.toml",
            );
            let fresh = seen == "[[50, 74]]";
            assert_eq!(err.is_ok(), fresh, "{seen}: {err:?}");
            if let Err(err) = err {
                assert!(err.to_string().contains("eval.seen_states"), "{err}");
                assert!(err.to_string().contains("[60, 80]"), "{err}");
            }
        }
        let err = TrainConfig::from_toml(
            "[env.sim]\nn_init_states = 100\n[eval]\ntest_states = [50, 74]\nseen_states = [[50, 74]]\n",
            "t.toml",
        )
        .expect_err("test states already used for choosing");
        assert!(
            err.to_string().contains("already used for choosing"),
            "{err}"
        );
        let err = TrainConfig::from_toml("[eval]\ntest_states = [50, 74]\n", "t.toml")
            .expect_err("the simulator generates 50 states by default");
        assert!(err.to_string().contains("n_init_states"), "{err}");
        let err = TrainConfig::from_toml(
            "[env]\nbackend = \"libero\"\nnum_envs = 1\n[env.libero]\nworkers = 2\n",
            "t.toml",
        )
        .expect_err("more workers than slots");
        assert!(err.to_string().contains("env.libero.workers"), "{err}");
        let err = TrainConfig::from_toml("[env]\nbackend = \"mujoco\"\n", "t.toml")
            .expect_err("an unknown backend");
        assert!(
            err.to_string().contains("mujoco") && err.to_string().contains("libero"),
            "{err}"
        );
        let err = TrainConfig::from_toml("[env]\nbackend = \"bridge\"\n", "t.toml")
            .expect_err("a bridge without endpoints");
        assert!(err.to_string().contains("env.endpoints"), "{err}");
        let libero = TrainConfig::from_toml(
            "[env]\nbackend = \"libero\"\nnum_envs = 2\n[env.libero]\nworkers = 2\n",
            "t.toml",
        )
        .expect("libero");
        assert_eq!(libero.env.backend, Backend::Libero);
        assert!(
            libero
                .to_toml()
                .expect("toml")
                .contains("backend = \"libero\"")
        );
        assert_eq!("bridge".parse::<Backend>(), Ok(Backend::Bridge));
        assert!("Sim".parse::<Backend>().is_err());
        let split = TrainConfig::from_toml(
            "[env.sim]\nn_init_states = 75\n[eval]\ntest_states = [50, 74]\n",
            "t.toml",
        )
        .expect("disjoint train 0-15, validation 16-49, test 50-74");
        assert_eq!(split.eval.test_states, Some([50, 74]));
        let err = TrainConfig::from_toml("[wmrl.weight]\nw_max = 0.5\n", "t.toml").expect_err("w");
        assert!(err.to_string().contains("weight.w_max"), "{err}");
        let err =
            TrainConfig::from_toml("[env.sim]\nimage_sise = 64\n", "t.toml").expect_err("nested");
        assert!(err.to_string().contains("image_sise"), "{err}");
        let err =
            TrainConfig::from_toml("[update.optim]\nlr_max = 1.0\n", "t.toml").expect_err("nested");
        assert!(err.to_string().contains("lr_max"), "{err}");
        let ok = TrainConfig::from_toml("arm = \"sparse\"\nsteps = 3\n", "t.toml").expect("ok");
        let mut doc: toml::Table = toml::from_str(&ok.to_toml().expect("toml")).expect("doc");
        assert_eq!(doc.remove("format"), Some(toml::Value::Integer(1)));
        wmrl_run::apply_set(&mut doc, "rollout.temperature = 0.5").expect("set");
        wmrl_run::apply_set(&mut doc, "eval.curve_init_states=[16, 25]").expect("set");
        wmrl_run::apply_set(&mut doc, "arm=wmrl").expect("bare word");
        let set: TrainConfig = toml::from_str(&toml::to_string(&doc).expect("text")).expect("cfg");
        assert_eq!(set.rollout.temperature, 0.5);
        assert_eq!(set.eval.curve_init_states, Some([16, 25]));
        assert_eq!(set.arm, Arm::Wmrl);
        assert!(wmrl_run::apply_set(&mut doc, "steps").is_err());
        assert!(
            wmrl_run::apply_set(&mut doc, "steps.x=1").is_err(),
            "steps is not a section"
        );
        assert_eq!(ok.arm, Arm::Sparse);
        let round =
            TrainConfig::from_toml(&ok.to_toml().expect("toml"), "round").expect("round trip");
        assert_eq!(round, ok);
    }
}
