//! GRPO training of the solution policy with wmrl-core's correction loop.
//! Arms: `real` (every group executed in the sandbox: core `Sparse`), `wm`
//! (the outcome predictor only: `DenseRaw`), `wmrl` (anchor groups executed,
//! the rest predicted, isotonic calibration and anchor weight: `Wmrl`).
//! Training uses the suite's training competitions; evaluation executes
//! policy samples on the held-out competitions and is charged to the
//! ledger's `Eval` stage, never to training cost.

use std::time::Instant;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use wmrl_core::rundir::{cut_back, len_of};
use wmrl_core::{
    Arm, CoreConfig, CorrectionLoop, Ledger, Run, Schedule, ScorerError, Scorers, Stage,
    StepOutcome, Track,
};

use crate::competition::{Competition, Split, Suite};
use crate::error::{Error, Result, io_err};
use crate::execute::{Executor, Outcome};
use crate::nn::seeded;
use crate::onnx_predictor::OnnxPredictor;
use crate::policy::{Policy, PolicyConfig, Sample, Transition, UpdateStats};
use crate::predictor::input;
use crate::rundir::{RunDir, append_jsonl, create_jsonl, settings_difference, write_json};

/// The three arms of the AutoResearch benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArArm {
    Real,
    Wm,
    Wmrl,
}

impl ArArm {
    pub const ALL: [ArArm; 3] = [ArArm::Real, ArArm::Wm, ArArm::Wmrl];
    pub fn core(self) -> Arm {
        match self {
            ArArm::Real => Arm::Sparse,
            ArArm::Wm => Arm::DenseRaw,
            ArArm::Wmrl => Arm::Wmrl,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ArArm::Real => "real",
            ArArm::Wm => "wm",
            ArArm::Wmrl => "wmrl",
        }
    }
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// The core settings for this track's scale: the paper's calibration and
/// weight warm-ups assume thousands of groups; a run here has about a
/// hundred, so the thresholds shrink (all other values are the paper's).
pub fn small_scale_core() -> CoreConfig {
    let mut c = CoreConfig::default();
    c.calibration.min_pairs = 24;
    c.calibration.refit_every = 8;
    c.weight.warmup_groups = 4;
    c.weight.half_life_groups = 16.0;
    c
}

/// Training settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainConfig {
    pub steps: usize,
    pub groups_per_step: usize,
    pub group_size: usize,
    /// Evaluate every this many steps (and at the start and the end).
    pub eval_every: usize,
    /// Samples per held-out competition at each evaluation.
    pub eval_samples: usize,
    /// Beyond the paper (off at 0): every this many steps, the `wm` and
    /// `wmrl` arms refit the outcome predictor on its own training data plus
    /// every anchor execution of the run so far, re-export it to ONNX and
    /// score with it from then on. Needs [`train_with_refit`]'s data.
    pub refit_predictor_every: usize,
    pub policy: PolicyConfig,
    pub core: CoreConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 16,
            groups_per_step: 8,
            group_size: 4,
            eval_every: 4,
            eval_samples: 4,
            refit_predictor_every: 0,
            policy: PolicyConfig::default(),
            core: small_scale_core(),
        }
    }
}

/// One evaluation on the held-out competitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    pub step: usize,
    /// Training sandbox CPU seconds spent so far.
    pub train_cpu_secs: f64,
    /// Mean position score (0 for an invalid solution).
    pub heldout_position: f64,
    pub heldout_reward: f64,
    pub valid_fraction: f64,
}

/// Per-step metrics (also written as JSONL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    pub step: usize,
    pub mean_reward_seen: Option<f64>,
    pub anchors: usize,
    pub executions: u64,
    pub weight: f64,
    pub disagreement: Option<f64>,
    pub kl: f64,
    pub entropy: f64,
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    pub arm: ArArm,
    pub seed: u64,
    pub evals: Vec<EvalPoint>,
    pub steps: Vec<StepLog>,
    pub ledger: Ledger,
}

impl TrainReport {
    pub fn final_position(&self) -> f64 {
        self.evals.last().map_or(0.0, |e| e.heldout_position)
    }
}

struct StepScorers<'a> {
    suite: &'a Suite,
    executor: &'a Executor,
    predictor: Option<&'a OnnxPredictor>,
    groups: &'a [(usize, Vec<Sample>)],
    ledger: &'a mut Ledger,
}

pub(crate) fn execute_all(
    executor: &Executor,
    suite: &Suite,
    jobs: &[(usize, crate::solution::Solution)],
) -> Vec<Option<Outcome>> {
    let codes: Vec<(&Competition, String)> = jobs
        .iter()
        .map(|(c, s)| {
            let comp = &suite.competitions[*c];
            (comp, s.render(&comp.meta))
        })
        .collect();
    execute_codes(executor, &codes)
}

/// Execute (competition, code) jobs on every core; `None` where the
/// sandbox itself failed (logged).
pub(crate) fn execute_codes(
    executor: &Executor,
    jobs: &[(&Competition, String)],
) -> Vec<Option<Outcome>> {
    jobs.par_iter()
        .map(|(comp, code)| match executor.execute(comp, code) {
            Ok(o) => Some(o),
            Err(e) => {
                tracing::warn!("execution failed on {}: {e}", comp.name());
                None
            }
        })
        .collect()
}

/// Consecutive runs of `sizes[i]` items: a flat batch back into its groups.
pub(crate) fn regroup<T>(items: impl IntoIterator<Item = T>, sizes: &[usize]) -> Vec<Vec<T>> {
    let mut it = items.into_iter();
    sizes
        .iter()
        .map(|&n| it.by_ref().take(n).collect())
        .collect()
}

/// The real-execution half of a [`Scorers`]: charge a batch started at
/// `started` to the ledger (count, time, sandbox CPU-seconds) and give each
/// group (`sizes[i]` members) its ladder rewards in order.
pub(crate) fn charge_real(
    ledger: &mut Ledger,
    started: Instant,
    outs: Vec<Option<Outcome>>,
    sizes: &[usize],
) -> Vec<Vec<Option<f64>>> {
    ledger.record(
        Stage::RealExecution,
        outs.len() as u64,
        started.elapsed().as_secs_f64(),
    );
    ledger.real_cpu_seconds += outs.iter().flatten().map(|o| o.cpu_secs).sum::<f64>();
    regroup(outs.into_iter().map(|o| o.map(|o| o.grade.reward)), sizes)
}

/// The world-model half: charge `flat` predictions to the ledger and split
/// them into groups of `sizes[i]`.
pub(crate) fn charge_world_model(
    ledger: &mut Ledger,
    started: Instant,
    flat: Vec<f64>,
    sizes: &[usize],
) -> Vec<Vec<f64>> {
    ledger.record(
        Stage::WorldModel,
        flat.len() as u64,
        started.elapsed().as_secs_f64(),
    );
    regroup(flat, sizes)
}

impl Scorers for StepScorers<'_> {
    fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError> {
        let p = self.predictor.ok_or("this arm has no world model")?;
        let t = Instant::now();
        let inputs: Vec<Vec<f32>> = groups
            .iter()
            .flat_map(|&g| {
                let (c, samples) = &self.groups[g];
                let meta = &self.suite.competitions[*c].meta.meta_features;
                samples.iter().map(move |s| input(meta, &s.solution))
            })
            .collect();
        let flat = p.predict(&inputs)?;
        Ok(charge_world_model(
            self.ledger,
            t,
            flat,
            &self.sizes(groups),
        ))
    }

    fn real(&mut self, groups: &[usize]) -> Result<Vec<Vec<Option<f64>>>, ScorerError> {
        let t = Instant::now();
        let all = self.groups;
        let jobs: Vec<(usize, crate::solution::Solution)> = groups
            .iter()
            .flat_map(|&g| all[g].1.iter().map(move |s| (all[g].0, s.solution)))
            .collect();
        let outs = execute_all(self.executor, self.suite, &jobs);
        Ok(charge_real(self.ledger, t, outs, &self.sizes(groups)))
    }
}

impl StepScorers<'_> {
    fn sizes(&self, groups: &[usize]) -> Vec<usize> {
        groups.iter().map(|&g| self.groups[g].1.len()).collect()
    }
}

/// Execute policy samples on every held-out competition.
pub fn evaluate(
    policy: &Policy,
    suite: &Suite,
    executor: &Executor,
    samples: usize,
    seed: u64,
    ledger: &mut Ledger,
) -> Result<(f64, f64, f64)> {
    let mut rng = seeded(seed ^ 0xE7A1);
    let mut jobs = Vec::new();
    for c in suite.indices(Split::Heldout) {
        for s in policy.sample(&suite.competitions[c].meta.meta_features, samples, &mut rng)? {
            jobs.push((c, s.solution));
        }
    }
    if jobs.is_empty() {
        return Err(Error::Config("suite has no held-out competitions".into()));
    }
    let t = Instant::now();
    let outs = execute_all(executor, suite, &jobs);
    ledger.record(Stage::Eval, jobs.len() as u64, t.elapsed().as_secs_f64());
    let n = outs.len() as f64;
    let pos = outs
        .iter()
        .map(|o| {
            o.as_ref()
                .and_then(|o| o.grade.position_score)
                .unwrap_or(0.0)
        })
        .sum::<f64>()
        / n;
    let rew = outs
        .iter()
        .map(|o| o.as_ref().map_or(0.0, |o| o.grade.reward))
        .sum::<f64>()
        / n;
    let valid = outs
        .iter()
        .filter(|o| o.as_ref().is_some_and(|o| o.grade.position_score.is_some()))
        .count() as f64
        / n;
    Ok((pos, rew, valid))
}

/// What refitting the predictor during a run needs
/// ([`TrainConfig::refit_predictor_every`]): the data it was first fitted on,
/// its settings, and where each refit's ONNX file goes.
pub struct PredictorRefit<'a> {
    pub data: &'a [crate::predictor::Example],
    pub config: &'a crate::predictor::PredictorConfig,
    pub onnx_path: std::path::PathBuf,
}

/// The AutoResearch track of the shared loop: groups of solutions sampled
/// for training competitions, executed in the sandbox (real) or predicted
/// (world model), and the solution policy's GRPO update.
struct ArTrack<'a> {
    cfg: &'a TrainConfig,
    arm: ArArm,
    seed: u64,
    suite: &'a Suite,
    executor: &'a Executor,
    predictor: Option<&'a OnnxPredictor>,
    refit: Option<&'a PredictorRefit<'a>>,
    /// The predictor refitted during the run, once it has been.
    refitted: Option<OnnxPredictor>,
    /// How many of `anchor_data` the last refit used.
    refit_anchors: Option<usize>,
    /// Every anchor execution so far (for the refits).
    anchor_data: Vec<crate::predictor::Example>,
    policy: Policy,
    /// One sampling stream for the whole run.
    rng: ChaCha8Rng,
    train_comps: Vec<usize>,
    evals: Vec<EvalPoint>,
    step_logs: Vec<StepLog>,
    /// The run directory, when there is one, with its open metrics.jsonl
    /// and eval.jsonl.
    files: Option<RunFiles<'a>>,
}

/// An open run directory.
struct RunFiles<'a> {
    dir: &'a RunDir,
    metrics: std::fs::File,
    eval: std::fs::File,
}

/// What resuming an AutoResearch run needs (`checkpoint/state.json`,
/// written after every step).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    config: TrainConfig,
    arm: ArArm,
    seed: u64,
    step: usize,
    core: CorrectionLoop,
    ledger: Ledger,
    rng: ChaCha8Rng,
    policy: crate::policy::PolicyState,
    evals: Vec<EvalPoint>,
    steps: Vec<StepLog>,
    anchor_data: Vec<crate::predictor::Example>,
    /// The anchors the last refit was fitted on (`anchor_data[..n]`): the
    /// refit is redone on resume rather than read from a file that a later,
    /// unfinished step may have overwritten.
    refit_anchors: Option<usize>,
    metrics_len: u64,
    eval_len: u64,
}

/// A step's groups: (training competition, its sampled solutions).
type Groups = Vec<(usize, Vec<Sample>)>;

impl Track for ArTrack<'_> {
    type Batch = Groups;
    type Scorers<'s>
        = StepScorers<'s>
    where
        Self: 's;
    type Update = UpdateStats;
    type Error = Error;

    fn rollouts(&mut self, _step: usize, ledger: &mut Ledger) -> Result<Groups> {
        let t = Instant::now();
        let (cfg, comps) = (self.cfg, &self.train_comps);
        let groups: Groups = (0..cfg.groups_per_step)
            .map(|_| {
                let c = comps[self.rng.random_range(0..comps.len())];
                self.policy
                    .sample(
                        &self.suite.competitions[c].meta.meta_features,
                        cfg.group_size,
                        &mut self.rng,
                    )
                    .map(|s| (c, s))
            })
            .collect::<Result<_>>()?;
        ledger.record(
            Stage::PolicySample,
            (cfg.groups_per_step * cfg.group_size) as u64,
            t.elapsed().as_secs_f64(),
        );
        Ok(groups)
    }

    fn group_sizes(&self, batch: &Groups) -> Vec<usize> {
        batch.iter().map(|(_, s)| s.len()).collect()
    }

    fn scorers<'s>(&'s mut self, batch: &'s Groups, ledger: &'s mut Ledger) -> StepScorers<'s> {
        StepScorers {
            suite: self.suite,
            executor: self.executor,
            predictor: self.refitted.as_ref().or(self.predictor),
            groups: batch,
            ledger,
        }
    }

    /// With `refit_predictor_every`, keep the step's anchor executions and
    /// refit the predictor on schedule.
    fn scored(
        &mut self,
        step: usize,
        groups: &Groups,
        outcome: &StepOutcome,
        ledger: &mut Ledger,
    ) -> Result<()> {
        let Some(r) = self.refit.filter(|_| self.refits()) else {
            return Ok(());
        };
        let step = step + 1;
        for (&g, real) in outcome.anchors.iter().zip(&outcome.real) {
            let (c, samples) = &groups[g];
            let comp = &self.suite.competitions[*c];
            for (s, y) in samples.iter().zip(real) {
                if let Some(y) = y {
                    self.anchor_data.push(crate::predictor::Example {
                        competition: comp.name().to_string(),
                        meta: comp.meta.meta_features.clone(),
                        solution: s.solution,
                        reward: *y,
                        cpu_secs: 0.0,
                    });
                }
            }
        }
        if step.is_multiple_of(self.cfg.refit_predictor_every) && !self.anchor_data.is_empty() {
            let t = Instant::now();
            let mse = self.refit_on(r, self.anchor_data.len())?;
            ledger.record(Stage::Update, 0, t.elapsed().as_secs_f64());
            tracing::info!(
                arm = self.arm.name(),
                seed = self.seed,
                step,
                anchors = self.anchor_data.len(),
                mse,
                "predictor refitted"
            );
        }
        Ok(())
    }

    fn update(
        &mut self,
        _step: usize,
        groups: &Groups,
        outcome: &StepOutcome,
        ledger: &mut Ledger,
    ) -> Result<UpdateStats> {
        let mut batch = Vec::new();
        for (g, (c, samples)) in groups.iter().enumerate() {
            for (k, s) in samples.iter().enumerate() {
                if let Some(a) = outcome.advantages[g][k] {
                    batch.push(Transition {
                        meta: self.suite.competitions[*c].meta.meta_features.clone(),
                        solution: s.solution,
                        old_logp: s.logp,
                        advantage: a as f32,
                    });
                }
            }
        }
        let t = Instant::now();
        let up = self.policy.grpo_update(&batch)?;
        ledger.record(Stage::Update, 1, t.elapsed().as_secs_f64());
        Ok(up)
    }

    fn evaluate(run: &mut Run<Self>) -> Result<()> {
        let t = &mut run.track;
        let (p, r, v) = evaluate(
            &t.policy,
            t.suite,
            t.executor,
            t.cfg.eval_samples,
            t.seed.wrapping_add(run.step as u64),
            &mut run.ledger,
        )?;
        let point = EvalPoint {
            step: run.step,
            train_cpu_secs: run.ledger.real_cpu_seconds,
            heldout_position: p,
            heldout_reward: r,
            valid_fraction: v,
        };
        if let Some(f) = t.files.as_mut() {
            append_jsonl(&mut f.eval, &f.dir.eval(), &point)?;
        }
        t.evals.push(point);
        Ok(())
    }

    /// After every step (and the start's evaluation), when the run has a
    /// directory: `checkpoint/state.json`, through a rename.
    fn checkpoint(run: &Run<Self>) -> Result<()> {
        let t = &run.track;
        let Some(f) = &t.files else {
            return Ok(());
        };
        let ck = f.dir.checkpoint();
        std::fs::create_dir_all(&ck).map_err(io_err(&ck))?;
        let state = Checkpoint {
            config: t.cfg.clone(),
            arm: t.arm,
            seed: t.seed,
            step: run.step,
            core: run.core.clone(),
            ledger: run.ledger.clone(),
            rng: t.rng.clone(),
            policy: t.policy.state()?,
            evals: t.evals.clone(),
            steps: t.step_logs.clone(),
            anchor_data: t.anchor_data.clone(),
            refit_anchors: t.refit_anchors,
            metrics_len: len_of(&f.dir.metrics()),
            eval_len: len_of(&f.dir.eval()),
        };
        write_json(&ck.join("state.json"), &state)
    }
}

impl ArTrack<'_> {
    /// Refit the predictor on its data plus the first `anchors` anchor
    /// executions, export it and score with it from now on; its mse.
    fn refit_on(&mut self, r: &PredictorRefit<'_>, anchors: usize) -> Result<f64> {
        let all: Vec<crate::predictor::Example> = r
            .data
            .iter()
            .chain(&self.anchor_data[..anchors])
            .cloned()
            .collect();
        let (p, mse) = crate::predictor::Predictor::train(r.config, &all)?;
        self.refitted = Some(OnnxPredictor::export_and_load(&p, &r.onnx_path)?);
        self.refit_anchors = Some(anchors);
        Ok(mse)
    }

    fn refits(&self) -> bool {
        self.cfg.refit_predictor_every > 0 && self.arm != ArArm::Real
    }
}

/// Train one arm with one seed. `predictor` (the exported ONNX file, scored
/// through ONNX Runtime) is required for `wm` and `wmrl`. With `run`, the
/// run's files go there ([`RunDir`]: config, step metrics and evaluations
/// as they happen, then diagnostics and, last, the summary).
pub fn train(
    cfg: &TrainConfig,
    arm: ArArm,
    seed: u64,
    suite: &Suite,
    executor: &Executor,
    predictor: Option<&OnnxPredictor>,
    run: Option<&RunDir>,
) -> Result<TrainReport> {
    train_with_refit(cfg, arm, seed, suite, executor, predictor, run, None)
}

/// [`train`], refitting the predictor every
/// [`TrainConfig::refit_predictor_every`] steps from `refit`'s data plus the
/// run's anchor executions (an error when that is set and `refit` is not).
#[allow(clippy::too_many_arguments)]
pub fn train_with_refit(
    cfg: &TrainConfig,
    arm: ArArm,
    seed: u64,
    suite: &Suite,
    executor: &Executor,
    predictor: Option<&OnnxPredictor>,
    run_dir: Option<&RunDir>,
    refit: Option<&PredictorRefit<'_>>,
) -> Result<TrainReport> {
    let refits = cfg.refit_predictor_every > 0 && arm != ArArm::Real;
    if refits && refit.is_none() {
        return Err(Error::Config(
            "refit_predictor_every is set but the run was given no predictor data to refit on"
                .into(),
        ));
    }
    if arm != ArArm::Real && predictor.is_none() {
        return Err(Error::Config(format!(
            "arm {} needs an outcome predictor",
            arm.name()
        )));
    }
    let train_comps = suite.indices(Split::Train);
    if train_comps.is_empty() || cfg.group_size < 2 || cfg.groups_per_step == 0 {
        return Err(Error::Config(
            "need training competitions, group_size >= 2, groups_per_step >= 1".into(),
        ));
    }
    // A run directory with a checkpoint and no summary is an interrupted
    // run: it continues from the checkpoint (the same settings, bar
    // `steps`, or it is refused naming the first difference).
    let resume: Option<Checkpoint> = match run_dir {
        Some(d) if d.checkpoint().join("state.json").exists() && !d.summary().exists() => {
            let path = d.checkpoint().join("state.json");
            let ck: Checkpoint = crate::rundir::read_json(&path)?;
            let differs = if (ck.arm, ck.seed) != (arm, seed) {
                Some(format!(
                    "arm {} seed {} then, arm {} seed {seed} now",
                    ck.arm.name(),
                    ck.seed,
                    arm.name()
                ))
            } else {
                settings_difference(&ck.config, cfg, "steps", &path)?
            };
            if let Some(d) = differs {
                return Err(Error::Config(format!(
                    "{}: an interrupted run of other settings ({d}); use another directory \
                     or delete it to start over",
                    path.display(),
                )));
            }
            Some(ck)
        }
        _ => None,
    };
    let files = match run_dir {
        Some(d) => {
            std::fs::create_dir_all(&d.dir).map_err(io_err(&d.dir))?;
            write_json(&d.config_json(), cfg)?;
            let open = |p: std::path::PathBuf, keep: Option<u64>| -> Result<std::fs::File> {
                let Some(len) = keep else {
                    return create_jsonl(&p);
                };
                // Continue after what the checkpoint had written.
                cut_back(&p, len).map_err(io_err(&p))?;
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&p)
                    .map_err(io_err(&p))
            };
            Some(RunFiles {
                dir: d,
                metrics: open(d.metrics(), resume.as_ref().map(|c| c.metrics_len))?,
                eval: open(d.eval(), resume.as_ref().map(|c| c.eval_len))?,
            })
        }
        None => None,
    };
    let mut track = ArTrack {
        cfg,
        arm,
        seed,
        suite,
        executor,
        predictor,
        refit,
        refitted: None,
        refit_anchors: None,
        anchor_data: Vec::new(),
        policy: Policy::new(cfg.policy.clone(), seed)?,
        rng: seeded(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 1),
        train_comps,
        evals: Vec::new(),
        step_logs: Vec::new(),
        files,
    };
    let core = CorrectionLoop::new(cfg.core.clone(), arm.core(), seed)?;
    let resumed = resume.is_some();
    let mut run = match resume {
        Some(ck) => {
            track.policy.restore(&ck.policy)?;
            track.rng = ck.rng;
            track.evals = ck.evals;
            track.step_logs = ck.steps;
            track.anchor_data = ck.anchor_data;
            if let (Some(n), Some(r)) = (ck.refit_anchors, track.refit) {
                track.refit_on(r, n.min(track.anchor_data.len()))?;
            }
            tracing::info!(
                arm = arm.name(),
                seed,
                step = ck.step,
                "resumed from the checkpoint"
            );
            Run::resumed(track, ck.core, ck.ledger, ck.step)
        }
        None => Run::new(track, core),
    };
    let schedule = Schedule {
        steps: cfg.steps,
        eval_every: cfg.eval_every,
        eval_at_start: !resumed,
        eval_at_end: true,
        checkpoint_every: usize::from(run_dir.is_some()),
    };
    run.run(&schedule, |run, s| {
        let seen: Vec<f64> = s
            .outcome
            .rewards
            .iter()
            .flatten()
            .flatten()
            .copied()
            .collect();
        let log = StepLog {
            step: s.index + 1,
            mean_reward_seen: (!seen.is_empty())
                .then(|| seen.iter().sum::<f64>() / seen.len() as f64),
            anchors: s.outcome.anchors.len(),
            // Every solution of every anchor group went to the sandbox.
            executions: s.outcome.anchors.iter().map(|&g| s.batch[g].1.len() as u64).sum(),
            weight: s.outcome.stats.weight,
            disagreement: s.outcome.stats.disagreement,
            kl: s.update.kl,
            entropy: s.update.entropy,
        };
        if let Some(f) = run.track.files.as_mut() {
            append_jsonl(&mut f.metrics, &f.dir.metrics(), &log)?;
        }
        tracing::info!(arm = arm.name(), seed, step = log.step, reward = ?log.mean_reward_seen, cpu = run.ledger.real_cpu_seconds, "step");
        run.track.step_logs.push(log);
        Ok(())
    })?;
    let report = TrainReport {
        arm,
        seed,
        evals: std::mem::take(&mut run.track.evals),
        steps: std::mem::take(&mut run.track.step_logs),
        ledger: run.ledger,
    };
    if let Some(d) = run_dir {
        write_json(&d.diagnostics(), run.core.diagnostics())?;
        write_json(&d.summary(), &report)?;
    }
    Ok(report)
}
