//! One `wmrl train` run: the robot track of the shared training loop
//! (`wmrl_core::Run`): rollouts in the simulator -> world-model scores ->
//! the correction loop -> a clipped GRPO update, step after step, with
//! metrics, periodic evaluation on held-out initial states, resumable
//! checkpoints, and the world-model refits of `wmrl.refit`
//! ([`crate::wm_refit`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use wmrl_env::clock::Stopwatch;

use serde::{Deserialize, Serialize};
use wmrl_core::rng::SplitMix64;
use wmrl_core::{
    CorrectionLoop, DiagnosticsSummary, Ledger, Run, Schedule, ScorerError, Scorers, Stage, Step,
    StepOutcome, Track,
};
use wmrl_env::VecEnv;
use wmrl_policy::{
    EvalConfig, GrpoBatch, Policy, PolicyOptimizer, RateSummary, evaluate, grpo_loss,
};
use wmrl_worldmodel::{RolloutFrames, WorldModel};

use crate::config::{CreditSource, LabelSource, LossNorm, TrainConfig};
use crate::error::io_err;
use crate::labels::queue::HumanLabels;
use crate::metrics::{self, CalibrationSnapshot, EvalRecord, RunFiles, StepMetrics};
use crate::rollout::{EpisodeSpec, Keep, Rollout, collect};
use crate::wm_refit::{self, RefitSetup, WmRefit};
use crate::{Result, TrainError};

/// What a finished run reports (summary.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub arm: String,
    pub seed: u64,
    pub steps: usize,
    pub label_regime: String,
    pub anchor_fraction: f64,
    /// Greedy success on every held-out (task, state) of the final policy:
    /// the run's figure (decided before any result: the last checkpoint,
    /// not the best or a mean over checkpoints).
    pub heldout: RateSummary,
    pub in_domain: Option<RateSummary>,
    /// The paper's measure: sampled episodes at the rollout temperature,
    /// `eval.sampled_per_state` per held-out (task, state).
    #[serde(default)]
    pub heldout_sampled: Option<RateSummary>,
    pub heldout_per_task: Vec<f64>,
    /// The initial states `heldout` and `heldout_sampled` were measured on
    /// (absent in runs before 2026-12-03: `eval.init_states`).
    #[serde(default)]
    pub final_states: Option<[usize; 2]>,
    /// Whether those are test states (`eval.test_states`), read once at the
    /// end, rather than the validation states settings were chosen on.
    #[serde(default)]
    pub test_states: bool,
    pub ledger: Ledger,
    pub diagnostics: DiagnosticsSummary,
}

/// Resumable state beside the policy and optimiser files.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TrainState {
    step: usize,
    core: CorrectionLoop,
    ledger: Ledger,
    metrics_len: u64,
    eval_len: u64,
    calibration_len: u64,
    /// The refitted world model in use (`wmrl.refit`), relative to the run
    /// directory; `None`: `world_model.path`.
    #[serde(default)]
    world_model: Option<PathBuf>,
    #[serde(default)]
    refits_len: u64,
}

/// The robot track: the policy and its optimiser, the simulator, the world
/// model, and the run directory its results go to.
pub struct RobotTrack {
    cfg: TrainConfig,
    files: RunFiles,
    policy: Policy,
    reference: Policy,
    optimizer: PolicyOptimizer,
    env: Box<dyn VecEnv>,
    world_model: Option<WorldModel>,
    /// The world-model refit (`wmrl.refit.every > 0` and an arm that reads
    /// the world model).
    refit: Option<WmRefit>,
    /// The refitted model in use, relative to the run directory.
    refitted: Option<PathBuf>,
    /// When the current step began.
    step_started: Instant,
    /// The step being run (0-based), for the label queue's ids.
    step: usize,
    /// Labels from people (`labels.source = "human"`).
    human: Option<HumanLabels>,
}

/// What one robot GRPO update did.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateReport {
    pub flat_groups: usize,
    pub credit_groups: usize,
    pub grad_half_cosine: Option<f64>,
    pub grad_half_cosine_parts: BTreeMap<String, f64>,
    pub grad_cross_group_cosine: Option<f64>,
    pub samples_updated: usize,
    pub loss: f64,
    pub kl_ref: f64,
    pub clip_frac: f64,
    pub entropy: f64,
    pub grad_norm: f64,
}

/// A `wmrl train` run: the shared loop over the robot track.
pub struct Trainer {
    run: Run<RobotTrack>,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("arm", &self.run.track.cfg.arm)
            .field("step", &self.run.step)
            .field("dir", &self.run.track.files.dir)
            .finish()
    }
}

fn make_env(cfg: &TrainConfig) -> Result<Box<dyn VecEnv>> {
    crate::config::make_env(&cfg.env)
}

fn load_policy(path: &Path) -> Result<Policy> {
    if !path.join(wmrl_policy::CONFIG_FILE).exists() {
        return Err(TrainError::Missing {
            what: "SFT policy checkpoint",
            path: path.display().to_string(),
            hint: "train one with `wmrl sft` (or run `wmrl quickstart`) and set `policy` in the config",
        });
    }
    Ok(crate::device::load_policy(path)?)
}

fn load_world_model(cfg: &TrainConfig, p: &Path) -> Result<Option<WorldModel>> {
    if !cfg.arm.uses_world_model() {
        return Ok(None);
    }
    if !p.exists() {
        return Err(TrainError::Missing {
            what: "world model",
            path: p.display().to_string(),
            hint: "export one with `wmrl wm export` and set `world_model.path`",
        });
    }
    Ok(Some(WorldModel::load_with(p, wm_runtime(cfg))?))
}

/// The ONNX Runtime settings the run's world models load with.
fn wm_runtime(cfg: &TrainConfig) -> wmrl_worldmodel::WorldModelConfig {
    let mut runtime = cfg.world_model.runtime.clone();
    if crate::device::placement().world_model == wmrl_worldmodel::ExecutionProvider::Cuda {
        runtime.execution_provider = wmrl_worldmodel::ExecutionProvider::Cuda;
    }
    runtime
}

fn mix(a: u64, b: u64) -> u64 {
    SplitMix64::new(a ^ b.wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64()
}

impl Trainer {
    /// Start a fresh run in `dir` (which must not hold a checkpoint).
    pub fn create(cfg: TrainConfig, dir: &Path) -> Result<Self> {
        cfg.validate()?;
        let files = RunFiles {
            dir: dir.to_path_buf(),
        };
        if files.checkpoint().exists() {
            return Err(TrainError::RunDir {
                path: dir.display().to_string(),
                message: "already holds a run; continue it with --resume or pick another --out"
                    .into(),
            });
        }
        let core = CorrectionLoop::new(cfg.wmrl.clone(), cfg.arm, cfg.seed)?;
        let toml = cfg.to_toml()?;
        // People's labels left by a run that stopped before its first
        // checkpoint belong to these rollouts only if the settings are the
        // same (same ids, same rollouts); otherwise they would be misread.
        if dir.join(crate::labels::DIR).exists()
            && std::fs::read_to_string(files.config_toml()).ok().as_deref() != Some(&toml)
        {
            return Err(TrainError::RunDir {
                path: dir.display().to_string(),
                message: "holds people's labels (labels/) of a run with other settings; pick another --out, or move labels/ away".into(),
            });
        }
        let policy = load_policy(&cfg.policy)?;
        // Everything is loaded before the run directory is touched.
        let track = RobotTrack::open(cfg, files, policy, None, 0)?;
        let files = &track.files;
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        for f in [
            files.metrics(),
            files.eval(),
            files.calibration(),
            dir.join(wm_refit::REFITS_FILE),
        ] {
            metrics::truncate(&f, 0)?;
        }
        std::fs::write(files.config_toml(), toml).map_err(io_err(&files.config_toml()))?;
        Ok(Self {
            run: Run::new(track, core),
        })
    }

    /// Continue the run in `dir` from its last checkpoint.
    pub fn resume(dir: &Path) -> Result<Self> {
        let files = RunFiles {
            dir: dir.to_path_buf(),
        };
        let cfg = TrainConfig::load(&files.config_toml())?;
        let ck = files.checkpoint();
        let state_path = ck.join("state.json");
        let text = std::fs::read_to_string(&state_path).map_err(|e| TrainError::RunDir {
            path: dir.display().to_string(),
            message: format!("no checkpoint to resume ({}: {e})", state_path.display()),
        })?;
        let state: TrainState = serde_json::from_str(&text).map_err(|e| TrainError::RunDir {
            path: state_path.display().to_string(),
            message: format!("corrupt checkpoint state: {e}"),
        })?;
        // config.toml is the one source of truth: a checkpoint whose method
        // state was made under other settings (an edited file) is refused
        // rather than continued with a mix of both.
        let changed = if state.core.arm() != cfg.arm {
            Some(format!(
                "arm: {} in the checkpoint against {}",
                state.core.arm().name(),
                cfg.arm.name()
            ))
        } else {
            crate::config::first_difference(state.core.config(), &cfg.wmrl, "wmrl")
        };
        if let Some(d) = changed {
            return Err(TrainError::RunDir {
                path: files.config_toml().display().to_string(),
                message: format!(
                    "differs from the settings the checkpoint was made with (checkpoint against config.toml: {d}); restore it or start a new run"
                ),
            });
        }
        let policy = crate::device::load_policy(&ck.join("policy"))?;
        let mut track =
            RobotTrack::open(cfg, files, policy, state.world_model.clone(), state.step)?;
        track.optimizer.load(&ck.join("optimizer.safetensors"))?;
        let files = &track.files;
        metrics::truncate(&files.metrics(), state.metrics_len)?;
        metrics::truncate(&files.eval(), state.eval_len)?;
        metrics::truncate(&files.calibration(), state.calibration_len)?;
        metrics::truncate(&files.dir.join(wm_refit::REFITS_FILE), state.refits_len)?;
        Ok(Self {
            run: Run::resumed(track, state.core, state.ledger, state.step),
        })
    }

    pub fn config(&self) -> &TrainConfig {
        &self.run.track.cfg
    }
    pub fn steps_done(&self) -> usize {
        self.run.step
    }
    pub fn policy(&self) -> &Policy {
        &self.run.track.policy
    }
    pub fn ledger(&self) -> &Ledger {
        &self.run.ledger
    }
    pub fn dir(&self) -> &Path {
        &self.run.track.files.dir
    }
    pub fn files(&self) -> &RunFiles {
        &self.run.track.files
    }

    /// Write a checkpoint atomically (temporary directory, then rename).
    pub fn checkpoint(&self) -> Result<()> {
        RobotTrack::checkpoint(&self.run)
    }

    /// Run one training step.
    pub fn train_step(&mut self) -> Result<StepMetrics> {
        let s = self.run.train_step()?;
        record_step(&self.run, &s)
    }

    /// Evaluate the current policy on a split, record it, and return it.
    /// Splits: `heldout` (every held-out state, greedy), `curve` (the
    /// periodic subset), `in_domain` (the training states), `heldout_sampled`
    /// (the paper's measure: sampled at the rollout temperature,
    /// `eval.sampled_per_state` episodes per state).
    pub fn evaluate_split(&mut self, split: EvalSplit) -> Result<(RateSummary, Vec<f64>)> {
        evaluate_split(&mut self.run, split)
    }

    /// Train to `cfg.steps` (from wherever the run is), evaluating and
    /// checkpointing on schedule, then the final evaluation and summary.
    /// `on_step` sees each step's metrics (for progress bars).
    pub fn run(&mut self, mut on_step: impl FnMut(&StepMetrics)) -> Result<RunSummary> {
        let cfg = &self.run.track.cfg;
        let every = cfg.eval.every;
        let schedule = Schedule {
            steps: cfg.steps,
            eval_every: every,
            // A run resumed from its step-0 checkpoint has the start's record.
            eval_at_start: every > 0
                && cfg.eval.at_start
                && metrics::len_of(&self.run.track.files.eval()) == 0,
            // At the last step the final evaluation covers the curve states
            // unless the curve has its own subset.
            eval_at_end: every > 0
                && cfg.steps.is_multiple_of(every)
                && cfg.eval.curve_init_states.is_some(),
            checkpoint_every: cfg.checkpoint_every,
        };
        self.run.run(&schedule, |run, s| {
            on_step(&record_step(run, &s)?);
            Ok(())
        })?;
        self.finish()
    }

    /// Final evaluation, diagnostics and summary.json.
    pub fn finish(&mut self) -> Result<RunSummary> {
        let (heldout, per_task) = evaluate_split(&mut self.run, EvalSplit::Heldout)?;
        let in_domain = if self.run.track.cfg.eval.in_domain {
            Some(evaluate_split(&mut self.run, EvalSplit::InDomain)?.0)
        } else {
            None
        };
        let heldout_sampled = if self.run.track.cfg.eval.sampled_per_state > 0 {
            Some(evaluate_split(&mut self.run, EvalSplit::HeldoutSampled)?.0)
        } else {
            None
        };
        let diagnostics = self
            .run
            .core
            .diagnostics()
            .summary(&self.run.track.cfg.wmrl.calibration);
        let dp = self.run.track.files.diagnostics();
        let text = serde_json::to_string_pretty(self.run.core.diagnostics())
            .map_err(|e| TrainError::Report(e.to_string()))?;
        std::fs::write(&dp, text).map_err(io_err(&dp))?;
        let summary = RunSummary {
            arm: self.run.track.cfg.arm.name().into(),
            seed: self.run.track.cfg.seed,
            steps: self.run.step,
            label_regime: self.run.track.cfg.label_regime().into(),
            anchor_fraction: self.run.track.cfg.wmrl.anchors.fraction.get(),
            heldout,
            in_domain,
            heldout_sampled,
            heldout_per_task: per_task,
            final_states: Some(self.run.track.cfg.eval.final_states()),
            test_states: self.run.track.cfg.eval.test_states.is_some(),
            ledger: self.run.ledger.clone(),
            diagnostics,
        };
        // Written last and through a rename: a bench takes the file's
        // presence for a finished run, so it must never be half there.
        let sp = self.run.track.files.summary();
        let text = serde_json::to_string_pretty(&summary)
            .map_err(|e| TrainError::Report(e.to_string()))?;
        let tmp = sp.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &sp).map_err(io_err(&sp))?;
        Ok(summary)
    }
}

impl RobotTrack {
    /// The track around `policy` (the SFT start or a checkpoint's): the
    /// frozen reference (the SFT policy), a fresh optimiser over the
    /// trainable parameters, the world model the arm reads (`refitted`, a
    /// path in the run directory, when a refit replaced `world_model.path`),
    /// the refit's kept anchor rollouts of the `steps_done` steps, the
    /// simulator.
    fn open(
        cfg: TrainConfig,
        files: RunFiles,
        policy: Policy,
        refitted: Option<PathBuf>,
        steps_done: usize,
    ) -> Result<Self> {
        let reference = load_policy(&cfg.policy)?;
        let optimizer =
            PolicyOptimizer::new_subset(&policy, cfg.update.optim.clone(), &cfg.update.trainable)?;
        let model_path = refitted
            .as_ref()
            .map_or_else(|| cfg.world_model.path.clone(), |p| files.dir.join(p));
        let refit = if cfg.wmrl.refit.every > 0 && cfg.arm.uses_world_model() {
            let setup = RefitSetup {
                fit: cfg.world_model.refit.clone(),
                runtime: wm_runtime(&cfg),
                mode: cfg.world_model.mode,
                seed: cfg.seed,
                n_groups: cfg.rollout.n_groups,
                group_size: cfg.rollout.group_size,
                holdout_groups: cfg.wmrl.refit.holdout_groups,
            };
            // Refused here, before the run directory is touched, when the
            // candle weights are not beside the ONNX file.
            Some(WmRefit::open(setup, &files.dir, &model_path, steps_done)?)
        } else {
            None
        };
        let world_model = load_world_model(&cfg, &model_path)?;
        let env = make_env(&cfg)?;
        let human = (cfg.labels.source == LabelSource::Human).then(|| {
            HumanLabels::new(
                &files.dir,
                cfg.labels.wait,
                std::time::Duration::from_millis(cfg.labels.poll_ms),
            )
        });
        Ok(Self {
            cfg,
            files,
            policy,
            reference,
            optimizer,
            env,
            world_model,
            refit,
            refitted,
            step_started: Instant::now(),
            step: steps_done,
            human,
        })
    }

    /// The groups of step `step`: (task, initial state) drawn from the
    /// training split with a seed derived from (run seed, step).
    fn draw_specs(&self, step: usize) -> Vec<EpisodeSpec> {
        let r = &self.cfg.rollout;
        let tasks: Vec<usize> = if r.tasks.is_empty() {
            (0..self.env.spec().tasks.len()).collect()
        } else {
            r.tasks.clone()
        };
        let [lo, hi] = r.train_init_states;
        let mut rng = SplitMix64::new(mix(self.cfg.seed, step as u64 + 1));
        let mut specs = Vec::with_capacity(r.n_groups * r.group_size);
        for g in 0..r.n_groups {
            let task = tasks[rng.below(tasks.len())];
            let init_state = lo + rng.below(hi - lo + 1);
            for i in 0..r.group_size {
                specs.push(EpisodeSpec {
                    group: g,
                    task,
                    init_state,
                    seed: mix(rng.next_u64(), i as u64),
                });
            }
        }
        specs
    }

    /// Per-chunk credit of each of a group's rollouts (same order),
    /// normalised over the graded ones; empty for an ungraded rollout, and
    /// for all of them when `update.credit` is off or a graded rollout
    /// lacks its progress signal.
    fn chunk_credit(&self, members: &[Rollout], advantages: &[Option<f64>]) -> Vec<Vec<f64>> {
        let c = &self.cfg.update.credit;
        let none = || vec![Vec::new(); members.len()];
        if c.source == CreditSource::None || c.weight == 0.0 {
            return none();
        }
        let returns: Option<Vec<Vec<f64>>> = members
            .iter()
            .zip(advantages)
            .map(|(r, a)| match a {
                Some(_) => crate::credit::progress_returns(&r.progress, r.chunks.len(), c.lambda),
                None => Some(Vec::new()),
            })
            .collect();
        let mut returns = returns.unwrap_or_else(none);
        // Empty rows add nothing to the group's mean and spread.
        crate::credit::normalise_group(&mut returns);
        returns
    }

    /// Whether the update trains `lm.head` alone (every trainable parameter
    /// is under it), so the rollouts record its inputs and the update
    /// reuses them.
    fn head_only(&self) -> bool {
        let layout = self.optimizer.layout();
        !layout.is_empty() && layout.iter().all(|(name, _)| name.starts_with("lm.head."))
    }

    /// Cosine between the policy gradients (before the update) of the
    /// samples with `side[i]` true and those with it false; `None` when a
    /// side is empty or its gradient is zero.
    fn grad_cosine(
        &self,
        batch: &GrpoBatch,
        side: &[bool],
    ) -> Result<Option<(f64, BTreeMap<String, f64>)>> {
        // Each side's gradient is accumulated over minibatches (weighted by
        // their token counts, so it is the side's token-mean gradient up to
        // a scale the cosine ignores): one pass over a large step would not
        // fit in memory.
        let mb = match self.cfg.update.minibatch {
            0 => 128,
            m => m,
        };
        // The policy-gradient term only: the KL pull towards the reference
        // (and the entropy bonus) would be shared by both sides.
        let loss_cfg = wmrl_policy::GrpoConfig {
            kl_beta: 0.0,
            entropy_coef: 0.0,
            ..self.cfg.update.loss.clone()
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
        let (a, b) = (&grads[0], &grads[1]);
        // Per part of the network: does any part carry a signal the whole
        // gradient's noise hides? Each part's (a.b, a.a, b.b); the whole
        // network's are their sums.
        let mut parts: BTreeMap<String, [f64; 3]> = BTreeMap::new();
        let mut off = 0;
        for (name, n) in self.optimizer.layout() {
            let e = parts.entry(network_part(&name).to_string()).or_default();
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
        Ok(cosine(whole).map(|c| (c, by_part)))
    }
}

impl Track for RobotTrack {
    type Batch = Vec<Rollout>;
    type Scorers<'a> = RolloutScorers<'a>;
    type Update = UpdateReport;
    type Error = TrainError;

    fn rollouts(&mut self, step: usize, ledger: &mut Ledger) -> Result<Vec<Rollout>> {
        self.step_started = Instant::now();
        self.step = step;
        let specs = self.draw_specs(step);
        let head_only = self.head_only();
        let (rollouts, cstats) = collect(
            &self.policy,
            self.env.as_mut(),
            &specs,
            self.cfg.rollout.temperature,
            self.cfg.rollout.max_steps,
            mix(self.cfg.seed, 0xC0_11EC7 + step as u64),
            Keep {
                features: head_only,
                // The label page shows both cameras.
                wrist: self.human.is_some(),
            },
        )?;
        ledger.record(
            Stage::PolicySample,
            cstats.policy_calls,
            cstats.policy_seconds,
        );
        ledger.record(
            Stage::RealExecution,
            rollouts.len() as u64,
            cstats.env_seconds,
        );
        ledger.record_cpu(Stage::PolicySample, cstats.policy_cpu_seconds);
        ledger.record_cpu(Stage::RealExecution, cstats.env_cpu_seconds);
        ledger.sim_steps += cstats.env_steps;
        Ok(rollouts)
    }

    fn late_labels(&mut self, step: usize) -> Result<Vec<wmrl_core::AnchorGroup>> {
        match &self.human {
            Some(h) => Ok(h.late(step, self.cfg.rollout.group_size)?),
            None => Ok(Vec::new()),
        }
    }

    fn group_sizes(&self, _: &Vec<Rollout>) -> Vec<usize> {
        vec![self.cfg.rollout.group_size; self.cfg.rollout.n_groups]
    }

    fn scorers<'a>(
        &'a mut self,
        batch: &'a Vec<Rollout>,
        ledger: &'a mut Ledger,
    ) -> RolloutScorers<'a> {
        RolloutScorers {
            rollouts: batch,
            step: self.step,
            human: self.human.as_ref(),
            group_size: self.cfg.rollout.group_size,
            wm: self.world_model.as_mut(),
            mode: self.cfg.world_model.mode,
            ledger,
            wm_scores: None,
        }
    }

    fn scored(
        &mut self,
        step: usize,
        batch: &Vec<Rollout>,
        outcome: &StepOutcome,
        ledger: &mut Ledger,
    ) -> Result<()> {
        match &mut self.refit {
            Some(r) => r.keep(step, batch, &outcome.anchors, &outcome.real, ledger),
            None => Ok(()),
        }
    }

    fn refit_candidate(
        &mut self,
        step: usize,
        held_out: &[wmrl_core::AnchorGroup],
        ledger: &mut Ledger,
    ) -> Result<Option<Vec<Vec<f64>>>> {
        match &mut self.refit {
            Some(r) => r.candidate(step, held_out, ledger),
            None => Ok(None),
        }
    }

    fn refit_done(&mut self, decision: &wmrl_core::RefitDecision, _: &mut Ledger) -> Result<()> {
        let Some(r) = &mut self.refit else {
            return Ok(());
        };
        if let Some(model) = r.done(decision)? {
            self.refitted = Some(
                model
                    .path()
                    .strip_prefix(&self.files.dir)
                    .map_or_else(|_| model.path().to_path_buf(), Path::to_path_buf),
            );
            self.world_model = Some(model);
        }
        Ok(())
    }

    fn update(
        &mut self,
        step: usize,
        rollouts: &Vec<Rollout>,
        outcome: &StepOutcome,
        ledger: &mut Ledger,
    ) -> Result<UpdateReport> {
        let g = self.cfg.rollout.group_size;
        let head_only = self.head_only();
        // GRPO update over every policy call of every graded rollout (of the
        // groups that carry a signal, with `skip_flat_groups`).
        let t_up = Stopwatch::start();
        let mut inputs = Vec::new();
        let (mut tokens, mut old, mut adv, mut mask) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut flat_groups = 0usize;
        let mut credit_groups = 0usize;
        // The rollouts that enter the update: (group, index in group,
        // rollout, advantage, per-chunk credit).
        let mut included: Vec<(usize, usize, &Rollout, f64, Vec<f64>)> = Vec::new();
        for (gi, group) in outcome.advantages.iter().enumerate() {
            let members = &rollouts[gi * g..(gi + 1) * g];
            let mut credit = self.chunk_credit(members, group);
            let credit_live = credit.iter().flatten().any(|c| c.abs() > 1e-9);
            credit_groups += usize::from(credit_live);
            // Rewards equal up to rounding give advantages of about 1e-17.
            let flat = group.iter().flatten().all(|a| a.abs() < 1e-9);
            if flat && group.iter().any(Option::is_some) {
                flat_groups += 1;
            }
            if flat && !credit_live && self.cfg.update.skip_flat_groups {
                continue;
            }
            for (ri, (r, a)) in members.iter().zip(group).enumerate() {
                if let Some(a) = a {
                    included.push((gi, ri, r, *a, std::mem::take(&mut credit[ri])));
                }
            }
        }
        // Head-only with every chunk's head inputs recorded: the update
        // reuses them instead of running the frozen network again.
        let use_features = head_only
            && included
                .iter()
                .all(|x| x.2.chunks.iter().all(|c| c.features.is_some()));
        let mut features = Vec::new();
        let mean_chunks = included
            .iter()
            .map(|x| x.2.chunks.len() as f64)
            .sum::<f64>()
            / included.len().max(1) as f64;
        // (ordinal of its group among the updated ones, rollout-in-group) of
        // every sample, for the gradient-noise diagnostic.
        let mut sample_group = Vec::new();
        let mut ordinal = 0usize;
        let w_credit = self.cfg.update.credit.weight;
        for (k, &(gi, ri, r, a, ref credit)) in included.iter().enumerate() {
            if k > 0 && included[k - 1].0 != gi {
                ordinal += 1;
            }
            // Per-rollout normalisation: a rollout of n chunks weighs each
            // chunk (mean length of the included rollouts) / n.
            let scale = match self.cfg.update.loss_norm {
                LossNorm::Token => 1.0,
                LossNorm::Rollout => mean_chunks / r.chunks.len().max(1) as f64,
            };
            for (ci, c) in r.chunks.iter().enumerate() {
                let a = a + w_credit * credit.get(ci).copied().unwrap_or(0.0);
                match (&c.features, use_features) {
                    (Some(f), true) => features.push(f.clone()),
                    _ => inputs.push(c.input.clone()),
                }
                tokens.push(c.tokens.clone());
                old.push(c.logprobs.clone());
                adv.push((a * scale) as f32);
                mask.push(c.mask.clone());
                sample_group.push((ordinal, ri));
            }
        }
        let (mut grad_half_cosine, mut grad_cross_group_cosine) = (None, None);
        let mut grad_half_cosine_parts = BTreeMap::new();
        let (mut loss, mut kl, mut clip, mut ent, mut gn, mut n_mb) =
            (0.0, 0.0, 0.0, 0.0, 0.0, 0usize);
        let n_samples = tokens.len();
        if n_samples > 0 && adv.iter().any(|a| *a != 0.0) {
            // Training the head alone: the head's inputs are the ones the
            // rollouts recorded (the network before the head is frozen, so
            // they are what it computes now), shared by the reference (same
            // frozen backbone); a rollout without them has its chunks'
            // observations run through the network once.
            let batch = if use_features {
                GrpoBatch::from_features(&self.policy, &features, &tokens, &old, &adv, Some(&mask))?
            } else {
                let prepared = self.policy.prepare(&inputs)?;
                let b = GrpoBatch::new(&self.policy, prepared, &tokens, &old, &adv, Some(&mask))?;
                if head_only {
                    b.with_head_features(&self.policy)?
                } else {
                    b
                }
            };
            let batch = if self.cfg.update.loss.kl_beta > 0.0 {
                batch.with_reference(&self.reference, self.cfg.update.loss.temperature)?
            } else {
                batch
            };
            if self.cfg.update.measure_grad_snr {
                // Same prompts, independent rollouts: signal-to-noise.
                let within: Vec<bool> = sample_group.iter().map(|&(_, ri)| ri < g / 2).collect();
                if let Some((c, parts)) = self.grad_cosine(&batch, &within)? {
                    grad_half_cosine = Some(c);
                    grad_half_cosine_parts = parts;
                }
                // Different groups (mostly different tasks): interference.
                let across: Vec<bool> = sample_group.iter().map(|&(o, _)| o % 2 == 0).collect();
                grad_cross_group_cosine = self.grad_cosine(&batch, &across)?.map(|(c, _)| c);
            }
            let mb_size = match self.cfg.update.minibatch {
                0 => n_samples,
                m => m,
            };
            let mut rng = SplitMix64::new(mix(self.cfg.seed, 0x5EED_0000 + step as u64));
            for _ in 0..self.cfg.update.inner_epochs {
                let mut order: Vec<usize> = (0..n_samples).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.below(i + 1));
                }
                for mb in order.chunks(mb_size) {
                    let sub = batch.select(mb)?;
                    let (l, s) = grpo_loss(&self.policy, None, &sub, &self.cfg.update.loss)?;
                    let st = self.optimizer.step_scheduled(&l, step)?;
                    loss += s.loss;
                    kl += s.kl_ref;
                    clip += s.clip_frac;
                    ent += s.entropy;
                    gn += st.grad_norm;
                    n_mb += 1;
                }
            }
        }
        let (wall, cpu) = t_up.elapsed();
        ledger.record(Stage::Update, n_mb as u64, wall);
        ledger.record_cpu(Stage::Update, cpu);
        let mb = n_mb.max(1) as f64;
        Ok(UpdateReport {
            flat_groups,
            credit_groups,
            grad_half_cosine,
            grad_half_cosine_parts,
            grad_cross_group_cosine,
            samples_updated: n_samples,
            loss: loss / mb,
            kl_ref: kl / mb,
            clip_frac: clip / mb,
            entropy: ent / mb,
            grad_norm: gn / mb,
        })
    }

    fn evaluate(run: &mut Run<Self>) -> Result<()> {
        evaluate_split(run, EvalSplit::Curve).map(|_| ())
    }

    fn checkpoint(run: &Run<Self>) -> Result<()> {
        let (t, files) = (&run.track, &run.track.files);
        let ck = files.checkpoint();
        let tmp = files.dir.join("checkpoint.partial");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
        }
        std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        t.policy.save(&tmp.join("policy"))?;
        t.optimizer.save(&tmp.join("optimizer.safetensors"))?;
        let state = TrainState {
            step: run.step,
            core: run.core.clone(),
            ledger: run.ledger.clone(),
            metrics_len: metrics::len_of(&files.metrics()),
            eval_len: metrics::len_of(&files.eval()),
            calibration_len: metrics::len_of(&files.calibration()),
            world_model: t.refitted.clone(),
            refits_len: metrics::len_of(&files.dir.join(wm_refit::REFITS_FILE)),
        };
        let text = serde_json::to_string(&state).map_err(|e| TrainError::Report(e.to_string()))?;
        let sp = tmp.join("state.json");
        std::fs::write(&sp, text).map_err(io_err(&sp))?;
        if ck.exists() {
            let old = files.dir.join("checkpoint.old");
            if old.exists() {
                std::fs::remove_dir_all(&old).map_err(io_err(&old))?;
            }
            std::fs::rename(&ck, &old).map_err(io_err(&ck))?;
            std::fs::rename(&tmp, &ck).map_err(io_err(&ck))?;
            std::fs::remove_dir_all(&old).map_err(io_err(&old))?;
        } else {
            std::fs::rename(&tmp, &ck).map_err(io_err(&ck))?;
        }
        // Committed: kept rollouts no resume can need any more may go.
        if let Some(r) = &t.refit {
            r.prune()?;
        }
        Ok(())
    }
}

/// A step's metrics (metrics.jsonl), appended to the run's file.
fn record_step(run: &Run<RobotTrack>, s: &Step<RobotTrack>) -> Result<StepMetrics> {
    let (track, outcome, rollouts, u) = (&run.track, &s.outcome, &s.batch, &s.update);
    let successes = rollouts.iter().filter(|r| r.success).count();
    let wm_mean = outcome.wm_raw.as_ref().map(|w| {
        let all: Vec<f64> = w.iter().flatten().copied().collect();
        all.iter().sum::<f64>() / all.len().max(1) as f64
    });
    let anchor_pairs: Vec<(f64, f64)> = outcome.wm_raw.as_ref().map_or_else(Vec::new, |wm| {
        outcome
            .anchors
            .iter()
            .zip(&outcome.real)
            .flat_map(|(&g, real)| {
                real.iter()
                    .zip(wm.get(g).into_iter().flatten())
                    .filter_map(|(y, &x)| y.map(|y| (y, x)))
            })
            .collect()
    });
    let m = StepMetrics {
        wm_anchor_auroc: wmrl_core::rank::concordance(&anchor_pairs).0,
        step: s.index,
        arm: track.cfg.arm.name().into(),
        batch_success: successes as f64 / rollouts.len().max(1) as f64,
        mean_episode_steps: rollouts.iter().map(|r| r.steps as f64).sum::<f64>()
            / rollouts.len().max(1) as f64,
        anchor_groups: outcome.stats.anchor_groups,
        realised_anchor_fraction: run.core.scheduler().realised_fraction(),
        labels_used: outcome.stats.labels_used,
        labels_cumulative: run.ledger.labels,
        calibrated: outcome.stats.calibrated,
        refit: outcome.stats.refit,
        bias_reduction: outcome.stats.bias_reduction,
        disagreement: outcome.stats.disagreement,
        disagreement_raw: outcome.stats.disagreement_raw,
        anchor_weight: outcome.stats.weight,
        fallback_groups: outcome.stats.fallback_groups,
        groups_skipped: outcome.stats.groups_skipped,
        flat_groups: u.flat_groups,
        credit_groups: u.credit_groups,
        grad_half_cosine: u.grad_half_cosine,
        grad_half_cosine_parts: u.grad_half_cosine_parts.clone(),
        grad_cross_group_cosine: u.grad_cross_group_cosine,
        adv_abs_mean: outcome.stats.adv_abs_mean,
        adv_abs_max: outcome.stats.adv_abs_max,
        wm_score_mean: wm_mean,
        samples_updated: u.samples_updated,
        loss: u.loss,
        kl_ref: u.kl_ref,
        clip_frac: u.clip_frac,
        entropy: u.entropy,
        grad_norm: u.grad_norm,
        restarts: rollouts.iter().map(|r| r.restarts).sum(),
        ledger: run.ledger.clone(),
        wall_seconds: track.step_started.elapsed().as_secs_f64(),
    };
    metrics::append(&run.track.files.metrics(), &m)?;
    Ok(m)
}

/// Which evaluation of a run (its name in eval.jsonl in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalSplit {
    /// The periodic learning curve on `eval.curve_init_states` (or the
    /// validation states), greedy (`curve`).
    Curve,
    /// The final figure: every final state ([`crate::config::EvalSection::final_states`]:
    /// the test states when set), greedy (`heldout`).
    Heldout,
    /// The training states, greedy (`in_domain`).
    InDomain,
    /// The paper's measure on the final states: sampled at the rollout
    /// temperature, `eval.sampled_per_state` episodes per state
    /// (`heldout_sampled`).
    HeldoutSampled,
}

impl EvalSplit {
    /// The split's name in eval.jsonl.
    pub fn name(self) -> &'static str {
        match self {
            Self::Curve => "curve",
            Self::Heldout => "heldout",
            Self::InDomain => "in_domain",
            Self::HeldoutSampled => "heldout_sampled",
        }
    }
}

/// Evaluate the current policy on a split, record it, and return it.
fn evaluate_split(run: &mut Run<RobotTrack>, split: EvalSplit) -> Result<(RateSummary, Vec<f64>)> {
    let tr = &mut run.track;
    let e = &tr.cfg.eval;
    let ([lo, hi], temperature, repeats) = match split {
        EvalSplit::InDomain => (tr.cfg.rollout.train_init_states, e.temperature, 1),
        EvalSplit::Curve => (
            e.curve_init_states.unwrap_or(e.init_states),
            e.temperature,
            1,
        ),
        EvalSplit::HeldoutSampled => (
            e.final_states(),
            tr.cfg.rollout.temperature,
            e.sampled_per_state.max(1),
        ),
        EvalSplit::Heldout => (e.final_states(), e.temperature, 1),
    };
    // The same evaluation episodes (and sampling streams) for every arm
    // and seed, so results pair across runs.
    let ecfg = EvalConfig {
        tasks: e.tasks.clone(),
        init_states: (lo..=hi).collect(),
        temperature,
        repeats,
        seed: mix(0, 0xE7A1),
        max_steps: tr.cfg.rollout.max_steps,
        gif_dir: None,
        ..EvalConfig::default()
    };
    let t = Stopwatch::start();
    let report = evaluate(&tr.policy, tr.env.as_mut(), &ecfg)?;
    let (seconds, cpu) = t.elapsed();
    run.ledger
        .record(Stage::Eval, report.episodes.len() as u64, seconds);
    run.ledger.record_cpu(Stage::Eval, cpu);
    let per_task: Vec<f64> = report.per_task.iter().map(|t| t.summary.rate).collect();
    metrics::append(
        &tr.files.eval(),
        &EvalRecord {
            step: run.step,
            split: split.name().into(),
            states: Some([lo, hi]),
            success: report.overall.rate,
            ci_low: report.overall.ci_low,
            ci_high: report.overall.ci_high,
            episodes: report.overall.episodes,
            per_task: per_task.clone(),
            labels_cumulative: run.ledger.labels,
            temperature,
            seconds,
        },
    )?;
    if let Some(map) = run.core.calibrator().map() {
        let (xs, ys) = map.knots();
        metrics::append(
            &tr.files.calibration(),
            &CalibrationSnapshot {
                step: run.step,
                xs: xs.to_vec(),
                ys: ys.to_vec(),
            },
        )?;
    }
    Ok((report.overall, per_task))
}

/// Read a finished run's summary.
pub fn read_summary(dir: &Path) -> Result<RunSummary> {
    let p: PathBuf = dir.join("summary.json");
    let text = std::fs::read_to_string(&p).map_err(io_err(&p))?;
    let mut summary: RunSummary = serde_json::from_str(&text).map_err(|e| TrainError::RunDir {
        path: p.display().to_string(),
        message: e.to_string(),
    })?;
    // Summaries written before the concordance existed: recompute it from
    // the run's anchor pairs when they can be read (it stays absent if not).
    if summary.diagnostics.concordance.is_none() {
        let d = std::fs::read_to_string(dir.join("diagnostics.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<wmrl_core::Diagnostics>(&t).ok());
        if let Some(d) = d {
            summary.diagnostics.concordance = d.concordance();
        }
    }
    Ok(summary)
}

/// The two scorers of the correction loop over a step's rollouts.
pub struct RolloutScorers<'a> {
    rollouts: &'a [Rollout],
    step: usize,
    /// Labels from people; `None`: the simulator's flag.
    human: Option<&'a HumanLabels>,
    group_size: usize,
    wm: Option<&'a mut WorldModel>,
    mode: wmrl_worldmodel::ScoreMode,
    ledger: &'a mut Ledger,
    wm_scores: Option<Vec<f64>>,
}

impl Scorers for RolloutScorers<'_> {
    fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError> {
        let wm = self
            .wm
            .as_deref_mut()
            .ok_or("this arm has no world model")?;
        if self.wm_scores.is_none() {
            let t = Stopwatch::start();
            let frames: Vec<RolloutFrames<'_>> = self
                .rollouts
                .iter()
                .map(|r| RolloutFrames {
                    instruction: &r.instruction,
                    frames: r.frames.iter().collect(),
                })
                .collect();
            // Every rollout in one batched pass, charged once.
            let scores = wm.score(&frames, self.mode)?;
            let (wall, cpu) = t.elapsed();
            self.ledger
                .record(Stage::WorldModel, scores.len() as u64, wall);
            self.ledger.record_cpu(Stage::WorldModel, cpu);
            self.wm_scores = Some(scores.iter().map(|s| f64::from(s.score)).collect());
        }
        let all = self.wm_scores.as_ref().ok_or("no scores")?;
        Ok(groups
            .iter()
            .map(|&g| all[g * self.group_size..(g + 1) * self.group_size].to_vec())
            .collect())
    }

    fn real(&mut self, groups: &[usize]) -> Result<Vec<Vec<Option<f64>>>, ScorerError> {
        if let Some(h) = self.human {
            return Ok(h.real(
                self.step,
                groups,
                self.group_size,
                self.rollouts,
                self.wm_scores.as_deref(),
            )?);
        }
        Ok(groups
            .iter()
            .map(|&g| {
                self.rollouts[g * self.group_size..(g + 1) * self.group_size]
                    .iter()
                    .map(|r| Some(if r.success { 1.0 } else { 0.0 }))
                    .collect()
            })
            .collect())
    }
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
