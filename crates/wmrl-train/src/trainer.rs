//! One `wmrl train` run: the robot track of the shared training loop
//! (`wmrl_core::Run`): rollouts in the simulator -> world-model scores ->
//! the correction loop -> a clipped GRPO update, step after step, with
//! metrics, periodic evaluation on held-out initial states, resumable
//! checkpoints, and the world-model refits of `wmrl.refit`
//! ([`crate::wm_refit`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use wmrl_run::clock::Stopwatch;

use serde::{Deserialize, Serialize};
use wmrl_core::rng::SplitMix64;
use wmrl_core::{
    CorrectionLoop, DiagnosticsSummary, Journal, Ledger, Run, Schedule, ScorerError, Scorers,
    Stage, Step, StepOutcome, Track,
};
use wmrl_env::VecEnv;
use wmrl_policy::{
    ActionPolicy, EvalConfig, Learner, RateSummary, UpdateBatch, UpdateSample, UpdateSettings,
    evaluate,
};
use wmrl_worldmodel::{RolloutFrames, WorldModel};

use crate::config::{CreditSource, LabelSource, LossNorm, TrainConfig};
use crate::device::Placement;
use crate::error::io_err;
use crate::labels::queue::HumanLabels;
use crate::metrics::{CalibrationSnapshot, EvalRecord, StepMetrics};
use crate::policy_kind::PolicyKinds;
use crate::rollout::{EpisodeSpec, Keep, Rollout, collect};
use crate::wm_refit::{RefitSetup, WmRefit};
use crate::{Result, TrainError};
use wmrl_run::{RunDir, RunJournal, Saved};

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

/// The robot track's part of a checkpoint (`track` in state.json, beside
/// the policy and optimiser files).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobotState {
    /// The refitted world model in use (`wmrl.refit`), relative to the run
    /// directory; `None`: `world_model.path`.
    #[serde(default)]
    world_model: Option<PathBuf>,
}

/// The robot track: the policy and its optimiser, the simulator, the world
/// model, and the run directory its results go to.
pub struct RobotTrack {
    cfg: TrainConfig,
    files: RunDir,
    /// The policy being trained, its optimiser (and the `tiny` policy's
    /// frozen reference).
    learner: Box<dyn Learner>,
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

fn load_world_model(
    cfg: &TrainConfig,
    p: &Path,
    placement: &Placement,
) -> Result<Option<WorldModel>> {
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
    Ok(Some(WorldModel::load_with(p, wm_runtime(cfg, placement))?))
}

/// The ONNX Runtime settings the run's world models load with.
fn wm_runtime(cfg: &TrainConfig, placement: &Placement) -> wmrl_worldmodel::WorldModelConfig {
    let mut runtime = cfg.world_model.runtime.clone();
    if placement.world_model == wmrl_worldmodel::ExecutionProvider::Cuda {
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
        Self::create_with(cfg, dir, &PolicyKinds::builtin())
    }

    /// [`Trainer::create`] with the policy kinds of `kinds` (a program's
    /// own kinds beside the built-in ones).
    pub fn create_with(cfg: TrainConfig, dir: &Path, kinds: &PolicyKinds) -> Result<Self> {
        cfg.validate()?;
        let files = RunDir::new(dir);
        let opened = files.open::<RobotState>(wmrl_run::Resume::Never, |_| None)?;
        let core = CorrectionLoop::new(cfg.wmrl.clone(), cfg.arm, cfg.seed)?;
        let recorded = files.recorded(&cfg)?;
        // People's labels left by a run that stopped before its first
        // checkpoint belong to these rollouts only if the settings are the
        // same (same ids, same rollouts); otherwise they would be misread.
        if dir.join(crate::labels::DIR).exists()
            && TrainConfig::recorded_in(&files)
                .map_or(true, |(had, _)| had.first_difference(&cfg).is_some())
        {
            return Err(TrainError::RunDir {
                path: dir.display().to_string(),
                message: "holds people's labels (labels/) of a run with other settings; pick another --out, or move labels/ away".into(),
            });
        }
        let placement = Placement::select(cfg.device);
        let learner = kinds.learner(&cfg, &placement)?;
        // Everything is loaded before the run directory is touched.
        let track = RobotTrack::open(cfg, files, &placement, learner, None, 0)?;
        let files = &track.files;
        files.prepare(&opened, Some(&recorded), &[])?;
        Ok(Self {
            run: Run::new(track, core),
        })
    }

    /// Continue the run in `dir` from its last checkpoint, on the device
    /// its run.toml records.
    pub fn resume(dir: &Path) -> Result<Self> {
        Self::resume_on(dir, None)
    }

    /// [`Trainer::resume`] on `device` instead of the recorded one (where
    /// the models run, not what the run computes: run.toml keeps its
    /// record).
    pub fn resume_on(dir: &Path, device: Option<wmrl_run::DeviceChoice>) -> Result<Self> {
        Self::resume_with(dir, device, &PolicyKinds::builtin())
    }

    /// [`Trainer::resume_on`] with the policy kinds of `kinds`.
    pub fn resume_with(
        dir: &Path,
        device: Option<wmrl_run::DeviceChoice>,
        kinds: &PolicyKinds,
    ) -> Result<Self> {
        let files = RunDir::new(dir);
        let (mut cfg, recorded_at) = TrainConfig::recorded_in(&files)?;
        if let Some(d) = device {
            cfg.device = d;
        }
        // run.toml is the one source of truth: a checkpoint whose method
        // state was made under other settings (an edited file) is refused
        // rather than continued with a mix of both.
        let state = files.resume::<RobotState>(|state| {
            let d = if state.core.arm() != cfg.arm {
                Some(format!(
                    "arm: {} in the checkpoint against {}",
                    state.core.arm().name(),
                    cfg.arm.name()
                ))
            } else {
                wmrl_run::first_difference(state.core.config(), &cfg.wmrl, "wmrl")
            };
            d.map(|d| format!(
                "differs from the settings the checkpoint was made with (checkpoint against {}: {d}); restore it or start a new run",
                recorded_at.display()
            ))
        })?;
        let placement = Placement::select(cfg.device);
        let mut learner = kinds.learner(&cfg, &placement)?;
        learner.restore(&files.checkpoint())?;
        let world_model = state.track.world_model.clone();
        let track = RobotTrack::open(cfg, files, &placement, learner, world_model, state.step)?;
        track.files.cut_back_to(&state.records)?;
        Ok(Self {
            run: Run::resumed(track, state.core, state.ledger, state.step),
        })
    }

    pub fn config(&self) -> &TrainConfig {
        self.run.track.config()
    }
    pub fn steps_done(&self) -> usize {
        self.run.step
    }
    pub fn policy(&self) -> &dyn ActionPolicy {
        self.run.track.learner.policy()
    }
    pub fn ledger(&self) -> &Ledger {
        &self.run.ledger
    }
    pub fn dir(&self) -> &Path {
        &self.run.track.files.dir
    }
    pub fn files(&self) -> &RunDir {
        &self.run.track.files
    }

    /// The run directory as the loop's journal.
    fn journal(&self) -> RunJournal<'_> {
        RunJournal {
            dir: &self.run.track.files,
        }
    }

    /// Write a checkpoint atomically (temporary directory, then rename).
    pub fn checkpoint(&self) -> Result<()> {
        Journal::<RobotTrack>::checkpoint(&mut self.journal(), &self.run)
    }

    /// Run one training step and record it.
    pub fn train_step(&mut self) -> Result<StepMetrics> {
        let s = self.run.train_step()?;
        let m = RobotTrack::record(&self.run, &s)?;
        Journal::<RobotTrack>::record(&mut self.journal(), &m)?;
        Ok(m)
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
                && wmrl_run::len_of(&self.run.track.files.eval()) == 0,
            // At the last step the final evaluation covers the curve states
            // unless the curve has its own subset.
            eval_at_end: every > 0
                && cfg.steps.is_multiple_of(every)
                && cfg.eval.curve_init_states.is_some(),
            checkpoint_every: cfg.checkpoint_every,
        };
        let files = self.run.track.files.clone();
        self.run
            .run(&schedule, &mut RunJournal { dir: &files }, |_, _, m| {
                on_step(&m);
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
        // summary.json last and through a rename: a bench takes the file's
        // presence for a finished run, so it must never be half there.
        self.run
            .track
            .files
            .finish(self.run.core.diagnostics(), &summary)?;
        Ok(summary)
    }
}

impl RobotTrack {
    /// The track around `learner` (the SFT start or a checkpoint's), the
    /// world model the arm reads (`refitted`, a
    /// path in the run directory, when a refit replaced `world_model.path`),
    /// the refit's kept anchor rollouts of the `steps_done` steps, the
    /// simulator.
    fn open(
        cfg: TrainConfig,
        files: RunDir,
        placement: &Placement,
        learner: Box<dyn Learner>,
        refitted: Option<PathBuf>,
        steps_done: usize,
    ) -> Result<Self> {
        let model_path = refitted
            .as_ref()
            .map_or_else(|| cfg.world_model.path.clone(), |p| files.dir.join(p));
        let refit = if cfg.wmrl.refit.every > 0 && cfg.arm.uses_world_model() {
            let setup = RefitSetup {
                fit: cfg.world_model.refit.clone(),
                runtime: wm_runtime(&cfg, placement),
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
        let world_model = load_world_model(&cfg, &model_path, placement)?;
        let env = crate::env::make_env(&cfg.env, placement.renderer.as_ref())?;
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
            learner,
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
        self.draw_groups(
            self.cfg.rollout.n_groups,
            mix(self.cfg.seed, step as u64 + 1),
        )
    }

    /// `n` groups of (task, initial state) from the training split, drawn
    /// with `seed`.
    fn draw_groups(&self, n: usize, seed: u64) -> Vec<EpisodeSpec> {
        let r = &self.cfg.rollout;
        let tasks: Vec<usize> = if r.tasks.is_empty() {
            (0..self.env.spec().tasks.len()).collect()
        } else {
            r.tasks.clone()
        };
        let [lo, hi] = r.train_init_states;
        let mut rng = SplitMix64::new(seed);
        let mut specs = Vec::with_capacity(n * r.group_size);
        for g in 0..n {
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

    /// Roll out `specs` with the sampling stream `seed`, charging the
    /// policy's and the simulator's cost to `ledger`.
    fn roll_out(
        &mut self,
        specs: &[EpisodeSpec],
        seed: u64,
        ledger: &mut Ledger,
    ) -> Result<Vec<Rollout>> {
        let keep_features = self.learner.keeps_features();
        let (rollouts, cstats) = collect(
            self.learner.policy(),
            self.env.as_mut(),
            specs,
            self.cfg.rollout.temperature,
            self.cfg.rollout.max_steps,
            seed,
            Keep {
                features: keep_features,
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

    /// The rollouts that enter the update (of the groups that carry a
    /// signal, with `skip_flat_groups`), in order: (group, index in group,
    /// rollout, advantage, per-chunk credit); and how many groups were flat
    /// and how many carried a live credit signal.
    fn included<'r>(
        &self,
        rollouts: &'r [Rollout],
        outcome: &StepOutcome,
    ) -> (Vec<Included<'r>>, usize, usize) {
        let g = self.cfg.rollout.group_size;
        let mut flat_groups = 0usize;
        let mut credit_groups = 0usize;
        let mut included = Vec::new();
        for (gi, group) in outcome.advantages.iter().enumerate() {
            let members = &rollouts[gi * g..(gi + 1) * g];
            let mut credit = self.chunk_credit(members, group);
            let credit_live = credit.iter().flatten().any(|c| c.abs() > 1e-9);
            credit_groups += usize::from(credit_live);
            // A group with no graded rollout adds nothing below anyway.
            let flat = wmrl_core::is_flat_group(group);
            flat_groups += usize::from(flat);
            if flat && !credit_live && self.cfg.update.skip_flat_groups {
                continue;
            }
            for (ri, (r, a)) in members.iter().zip(group).enumerate() {
                if let Some(a) = a {
                    included.push(Included {
                        group: gi,
                        index: ri,
                        rollout: r,
                        advantage: *a,
                        credit: std::mem::take(&mut credit[ri]),
                    });
                }
            }
        }
        (included, flat_groups, credit_groups)
    }

    /// Every policy call of the included rollouts as an update sample: the
    /// rollout's advantage plus the call's credit, scaled by the loss
    /// normalisation (`update.loss_norm = "rollout"`: a rollout of n calls
    /// weighs each (mean calls of the included rollouts) / n).
    fn samples<'r>(&self, included: &'r [Included<'r>]) -> Vec<UpdateSample<'r>> {
        let mean_chunks = included
            .iter()
            .map(|x| x.rollout.chunks.len() as f64)
            .sum::<f64>()
            / included.len().max(1) as f64;
        let w_credit = self.cfg.update.credit.weight;
        let mut out = Vec::new();
        let mut ordinal = 0usize;
        for (k, x) in included.iter().enumerate() {
            if k > 0 && included[k - 1].group != x.group {
                ordinal += 1;
            }
            let scale = match self.cfg.update.loss_norm {
                LossNorm::Token => 1.0,
                LossNorm::Rollout => mean_chunks / x.rollout.chunks.len().max(1) as f64,
            };
            for (ci, c) in x.rollout.chunks.iter().enumerate() {
                let a = x.advantage + w_credit * x.credit.get(ci).copied().unwrap_or(0.0);
                out.push(UpdateSample {
                    input: &c.input,
                    features: c.features.as_deref(),
                    tokens: &c.tokens,
                    logprobs: &c.logprobs,
                    mask: &c.mask,
                    advantage: (a * scale) as f32,
                    group: (ordinal, x.index),
                });
            }
        }
        out
    }
}

/// A rollout that enters the update ([`RobotTrack::included`]).
struct Included<'r> {
    group: usize,
    index: usize,
    rollout: &'r Rollout,
    advantage: f64,
    credit: Vec<f64>,
}

impl Track for RobotTrack {
    type Batch = Vec<Rollout>;
    type Scorers<'a> = RolloutScorers<'a>;
    type Update = UpdateReport;
    type Error = TrainError;
    type Record = StepMetrics;
    type State = RobotState;
    type Config = TrainConfig;

    fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    fn rollouts(&mut self, step: usize, ledger: &mut Ledger) -> Result<Vec<Rollout>> {
        self.step_started = Instant::now();
        self.step = step;
        let specs = self.draw_specs(step);
        self.roll_out(&specs, mix(self.cfg.seed, 0xC0_11EC7 + step as u64), ledger)
    }

    fn redraw_rounds(&self) -> usize {
        self.cfg.rollout.redraw_rounds
    }

    fn redraw(
        &mut self,
        step: usize,
        round: usize,
        n: usize,
        ledger: &mut Ledger,
    ) -> Result<Vec<Rollout>> {
        // Streams of their own: a run that redraws draws the same first
        // batch as one that does not.
        let salt = ((round as u64) << 40) ^ step as u64;
        let specs = self.draw_groups(n, mix(self.cfg.seed, 0x0D7A_3000_0000 ^ salt));
        self.roll_out(&specs, mix(self.cfg.seed, 0x0D7A_5000_0000 ^ salt), ledger)
    }

    fn replace_groups(
        &mut self,
        batch: &mut Vec<Rollout>,
        slots: &[usize],
        more: Vec<Rollout>,
    ) -> Result<()> {
        let g = self.cfg.rollout.group_size;
        if more.len() != slots.len() * g {
            return Err(TrainError::Report(format!(
                "{} redrawn rollouts for {} groups of {g}",
                more.len(),
                slots.len()
            )));
        }
        for (k, mut r) in more.into_iter().enumerate() {
            let slot = slots[k / g];
            r.spec.group = slot;
            batch[slot * g + k % g] = r;
        }
        Ok(())
    }

    fn late_labels(&mut self, step: usize) -> Result<Vec<wmrl_core::AnchorGroup>> {
        match &self.human {
            Some(h) => Ok(h.late(step, self.cfg.rollout.group_size)?),
            None => Ok(Vec::new()),
        }
    }

    fn group_sizes(&self, batch: &Vec<Rollout>) -> Vec<usize> {
        let g = self.cfg.rollout.group_size;
        vec![g; batch.len() / g]
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
        let t_up = Stopwatch::start();
        let (included, flat_groups, credit_groups) = self.included(rollouts, outcome);
        let samples = self.samples(&included);
        let samples_updated = samples.len();
        let batch = UpdateBatch {
            samples,
            temperature: self.cfg.rollout.temperature,
        };
        let u = &self.cfg.update;
        let settings = UpdateSettings {
            loss: u.loss.objective(),
            minibatch: u.minibatch,
            inner_epochs: u.inner_epochs,
            shuffle_seed: mix(self.cfg.seed, 0x5EED_0000 + step as u64),
            step,
            measure_grad_snr: u.measure_grad_snr,
            group_size: self.cfg.rollout.group_size,
        };
        let st = self.learner.update(&batch, &settings)?;
        let (wall, cpu) = t_up.elapsed();
        ledger.record(Stage::Update, st.minibatches as u64, wall);
        ledger.record_cpu(Stage::Update, cpu);
        Ok(UpdateReport {
            flat_groups,
            credit_groups,
            grad_half_cosine: st.grad_half_cosine,
            grad_half_cosine_parts: st.grad_half_cosine_parts,
            grad_cross_group_cosine: st.grad_cross_group_cosine,
            samples_updated,
            loss: st.loss,
            kl_ref: st.kl_ref,
            clip_frac: st.clip_frac,
            entropy: st.entropy,
            grad_norm: st.grad_norm,
        })
    }

    fn evaluate(run: &mut Run<Self>) -> Result<()> {
        evaluate_split(run, EvalSplit::Curve).map(|_| ())
    }

    fn record(run: &Run<Self>, s: &Step<Self>) -> Result<StepMetrics> {
        Ok(step_metrics(run, s))
    }

    fn state(&self) -> Result<RobotState> {
        Ok(RobotState {
            world_model: self.refitted.clone(),
        })
    }

    fn save(&self, dir: &Path) -> Result<()> {
        Ok(self.learner.save(dir)?)
    }

    fn checkpointed(&self) -> Result<()> {
        // Committed: kept rollouts no resume can need any more may go.
        if let Some(r) = &self.refit {
            r.prune()?;
        }
        Ok(())
    }
}

/// A step's metrics (its line of metrics.jsonl).
fn step_metrics(run: &Run<RobotTrack>, s: &Step<RobotTrack>) -> StepMetrics {
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
    StepMetrics {
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
        redrawn_groups: s.redrawn,
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
    }
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
    let report = evaluate(tr.learner.policy(), tr.env.as_mut(), &ecfg)?;
    let (seconds, cpu) = t.elapsed();
    run.ledger
        .record(Stage::Eval, report.episodes.len() as u64, seconds);
    run.ledger.record_cpu(Stage::Eval, cpu);
    let per_task: Vec<f64> = report.per_task.iter().map(|t| t.summary.rate).collect();
    wmrl_run::append(
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
        wmrl_run::append(
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

/// Write the policy of the run in `dir` at its last checkpoint to `out` as
/// a checkpoint directory of its kind (`tiny`: the policy; MiniVLA: the
/// start checkpoint with the adapters merged, in the converted layout that
/// `MiniVla::load` and scripts/convert_minivla.py's key map read). `out`
/// must not exist yet or be empty. Returns the policy's kind and the step.
pub fn export_policy(
    dir: &Path,
    out: &Path,
    device: wmrl_run::DeviceChoice,
) -> Result<(&'static str, usize)> {
    export_policy_with(dir, out, device, &PolicyKinds::builtin())
}

/// [`export_policy`] with the policy kinds of `kinds`.
pub fn export_policy_with(
    dir: &Path,
    out: &Path,
    device: wmrl_run::DeviceChoice,
    kinds: &PolicyKinds,
) -> Result<(&'static str, usize)> {
    let files = RunDir {
        dir: dir.to_path_buf(),
    };
    let (cfg, _) = TrainConfig::recorded_in(&files)?;
    let ck = files.checkpoint();
    let state: Saved<RobotState> = files.read_saved("export")?;
    if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        return Err(TrainError::RunDir {
            path: out.display().to_string(),
            message: "exists and is not empty; pick another --out".into(),
        });
    }
    let mut learner = kinds.learner(&cfg, &Placement::select(device))?;
    learner.restore(&ck)?;
    learner.export(&cfg.policy, out)?;
    Ok((learner.policy().kind(), state.step))
}

/// Read a finished run's summary.
pub fn read_summary(dir: &Path) -> Result<RunSummary> {
    let run = RunDir::new(dir);
    let p = run.summary();
    let text = std::fs::read_to_string(&p).map_err(io_err(&p))?;
    let mut summary: RunSummary = serde_json::from_str(&text).map_err(|e| TrainError::RunDir {
        path: p.display().to_string(),
        message: e.to_string(),
    })?;
    // Summaries written before the concordance existed: recompute it from
    // the run's anchor pairs when they can be read (it stays absent if not).
    if summary.diagnostics.concordance.is_none() {
        let d = std::fs::read_to_string(run.diagnostics())
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
