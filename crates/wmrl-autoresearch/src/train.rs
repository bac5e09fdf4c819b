//! GRPO training of the solution policy with wmrl-core's correction loop.
//! Arms: `real` (every group executed in the sandbox: core `Sparse`), `wm`
//! (the outcome predictor only: `DenseRaw`), `wmrl` (anchor groups executed,
//! the rest predicted, isotonic calibration and anchor weight: `Wmrl`),
//! the track's names for these core arms ([`crate::arm`]).
//! Training uses the suite's training competitions; evaluation executes
//! policy samples on the held-out competitions and is charged to the
//! ledger's `Eval` stage, never to training cost.
//!
//! Beyond the paper, `core.refit` (`wmrl.refit`, [`wmrl_core::refit`]):
//! every K steps the `wmrl` arm fits a candidate outcome predictor on the
//! predictor's data plus its anchor executions except the newest anchor
//! groups, and the shared gate installs it only if it ranks those held-out
//! groups at least as well (the track's `refit_candidate`/`refit_done`).
//! A candidate never sees a held-out group's rows, and is only ever
//! trained on real outcomes the correction loop already paid for.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use wmrl_core::{
    AnchorGroup, Arm, CoreConfig, CorrectionLoop, Ledger, RefitDecision, Run, Schedule,
    ScorerError, Scorers, Stage, StepOutcome, Track,
};

use crate::arm::{ar_name, check_ar_arm, serde_ar_arm};
use crate::competition::{Competition, Split, Suite};
use crate::error::{Error, Result, io_err};
use crate::execute::{Executor, Outcome};
use crate::nn::seeded;
use crate::onnx_predictor::OnnxPredictor;
use crate::policy::{Policy, PolicyConfig, Sample, Transition, UpdateStats};
use crate::predictor::{Example, Predictor, PredictorConfig, PredictorWeights, input};
use wmrl_run::clock::Stopwatch;
use wmrl_run::{DeviceChoice, Opened, Resume, RunDir, Saved};

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

/// Training settings (configs/autoresearch_train.toml holds the defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub steps: usize,
    pub groups_per_step: usize,
    pub group_size: usize,
    /// Evaluate every this many steps (and at the start and the end).
    pub eval_every: usize,
    /// Samples per competition at each evaluation.
    pub eval_samples: usize,
    /// Which competitions the learning curve is drawn on (the evaluations
    /// between the start and the end): `train`, the training competitions,
    /// so that settings are chosen without reading the held-out ones,
    /// which are read only at the start and the end (the final figures).
    /// `heldout` draws it on the held-out competitions at every evaluation.
    pub curve_on: CurveOn,
    pub policy: PolicyConfig,
    /// The correction loop's settings, with the predictor refit
    /// (`core.refit`, off by default) among them.
    pub core: CoreConfig,
    /// Where the solution policy trains (`wmrl autoresearch train
    /// --device`): `cpu` (the default, left out of run.toml), `cuda` or
    /// `auto` (candle's CUDA backend in a build with the `cuda` feature;
    /// the CPU otherwise, with one log line). Where, not what: a run may
    /// resume on another device. The outcome predictor is scored through
    /// ONNX Runtime on the CPU.
    #[serde(skip_serializing_if = "DeviceChoice::is_cpu")]
    pub device: DeviceChoice,
    /// What the run's costs count ([`Accounting`]): `total`, every CPU
    /// second of training; `sandbox` is read back from older records
    /// ([`TrainConfig`]'s migration), never run.
    pub accounting: Accounting,
    /// CPU seconds of the outcome predictor's up-front cost (its training
    /// data's executions and its fit) charged to the ledger of a run whose
    /// arm reads the predictor (`wm`, `wmrl`), at its start
    /// ([`wmrl_core::Ledger::predictor_cpu_seconds`]). The bench sets it to
    /// that cost over its declared `predictor_runs`; `wmrl autoresearch
    /// train` reads it from the cost file `fit-predictor` writes beside the
    /// ONNX file.
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub predictor_charge_cpu_secs: f64,
    /// The bench arm this run belongs to when it is a variant of its arm
    /// (the bench's `[[variants]]`, e.g. `wmrl` given `real`'s CPU as more
    /// steps); absent for the plain arms. Recorded, so that a variant's run
    /// is never resumed as another's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

/// What a run's CPU figures count ([`TrainConfig::accounting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accounting {
    /// Every CPU second of training: sandbox executions and the trainer's
    /// own process CPU (sampling, updates, predictor inference and refits),
    /// with the predictor's up-front share ([`Ledger::train_cpu_seconds`]).
    Total,
    /// The sandbox's CPU of training executions alone (older records; read
    /// back, never run).
    Sandbox,
}

impl Accounting {
    /// The CPU a run spent on training, as this accounting counts it.
    pub fn train_cpu(self, ledger: &Ledger) -> f64 {
        match self {
            Accounting::Total => ledger.train_cpu_seconds(),
            Accounting::Sandbox => ledger.real_cpu_seconds,
        }
    }

    /// How reports name the figure.
    pub fn label(self) -> &'static str {
        match self {
            Accounting::Total => "training CPU-s, every cost charged",
            Accounting::Sandbox => "training sandbox CPU-s",
        }
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 16,
            groups_per_step: 8,
            group_size: 4,
            eval_every: 4,
            eval_samples: 4,
            curve_on: CurveOn::Train,
            policy: PolicyConfig::default(),
            core: small_scale_core(),
            device: DeviceChoice::Cpu,
            accounting: Accounting::Total,
            predictor_charge_cpu_secs: 0.0,
            variant: None,
        }
    }
}

/// A run continues when started again with more steps, or on another
/// device.
impl wmrl_run::RunSettings for TrainConfig {
    const MAY_CHANGE: &'static [&'static str] = &["steps", "device"];
}

/// The layouts of a run's recorded settings (run.toml; config.json,
/// [`wmrl_run::Versioned::LEGACY_FILE`], before every kind of run recorded
/// its settings in run.toml; and `train` in a bench's settings):
/// - 0, before the key: the curve's competitions and the accounting were
///   left out where they were the old defaults (`heldout`, `sandbox`), and
///   the predictor refit was `refit_predictor_every = N` (ungated, refitted
///   from scratch). It reads as `curve_on = "heldout"`, `accounting =
///   "sandbox"` and `core.refit = { every = N, gate = false }`; a record
///   that counted sandbox CPU alone is read and reported, never resumed.
/// - 1: every key written.
impl wmrl_run::Versioned for TrainConfig {
    const FORMAT: u32 = 1;
    const LEGACY_FILE: Option<&'static str> = Some("config.json");
    fn migrate(from: u32, doc: &mut JsonMap) -> std::result::Result<(), String> {
        if from == 0 {
            migrate_train_from_0(doc)?;
        }
        Ok(())
    }
}

/// A JSON object, as records are migrated.
pub(crate) type JsonMap = serde_json::Map<String, serde_json::Value>;

/// [`TrainConfig`]'s layout 0 to 1 (see its [`wmrl_run::Versioned`]).
pub(crate) fn migrate_train_from_0(doc: &mut JsonMap) -> std::result::Result<(), String> {
    use serde_json::Value;
    doc.entry("curve_on").or_insert(Value::from("heldout"));
    doc.entry("accounting").or_insert(Value::from("sandbox"));
    let every = match doc.remove("refit_predictor_every") {
        None => return Ok(()),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("refit_predictor_every = {v}: expected a whole number"))?,
    };
    if every == 0 {
        return Ok(());
    }
    let core = doc
        .entry("core")
        .or_insert_with(|| Value::Object(JsonMap::new()))
        .as_object_mut()
        .ok_or("`core` is not a table")?;
    let refit = core
        .entry("refit")
        .or_insert_with(|| Value::Object(JsonMap::new()))
        .as_object_mut()
        .ok_or("`core.refit` is not a table")?;
    match refit.get("every").and_then(Value::as_u64) {
        Some(n) if n > 0 && n != every => {
            return Err(format!(
                "refit_predictor_every = {every} and core.refit.every = {n}: a record sets one"
            ));
        }
        _ => {}
    }
    refit.insert("every".into(), Value::from(every));
    refit.insert("gate".into(), Value::from(false));
    Ok(())
}

impl TrainConfig {
    /// Read a config: TOML through the loader every command shares
    /// (`extends`, `sets` as `section.key=value`, unknown keys refused),
    /// laid over these defaults key by key (a table given in part keeps the
    /// track's small-scale `[core]`, the curve on the training
    /// competitions); or a run's recorded settings (its run.toml, in their
    /// recorded layout; or an older wmrl's `config.json`, read as
    /// strictly); no file: the defaults with `sets` applied.
    pub fn load(path: Option<&std::path::Path>, sets: &[String]) -> Result<Self> {
        wmrl_run::load_over_defaults(path, sets).map_err(|e| Error::Config(e.to_string()))
    }

    /// The settings a run uses: validated, the costs charged whole.
    pub fn resolved(&self) -> Result<Self> {
        let c = self.clone();
        if c.accounting != Accounting::Total {
            return Err(Error::Config(
                "accounting = \"sandbox\" is how older runs were recorded (sandbox CPU \
                 alone); a new run charges every cost: leave the key out"
                    .into(),
            ));
        }
        let charge = c.predictor_charge_cpu_secs;
        if !(charge.is_finite() && charge >= 0.0) {
            return Err(Error::Config(format!(
                "predictor_charge_cpu_secs = {charge}: expected a finite number >= 0"
            )));
        }
        c.core.validate()?;
        Ok(c)
    }

    /// Whether `arm` refits its predictor: only an arm that executes anchors
    /// has new outcomes to refit on.
    pub fn refits(&self, arm: Arm) -> bool {
        self.core.refit.every > 0 && arm == Arm::Wmrl
    }
}

/// Where the learning curve is drawn ([`TrainConfig::curve_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CurveOn {
    /// The training competitions (fresh samples, not the rollouts).
    Train,
    /// The held-out competitions at every evaluation.
    Heldout,
}

impl std::str::FromStr for CurveOn {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "train" => Ok(CurveOn::Train),
            "heldout" => Ok(CurveOn::Heldout),
            _ => Err(format!("`{s}`: expected `train` or `heldout`")),
        }
    }
}

/// Mean scores of one evaluation over a set of competitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// Mean position score (0 for an invalid solution).
    pub position: f64,
    pub reward: f64,
    pub valid_fraction: f64,
}

/// One evaluation: on the held-out competitions at the start and the end
/// (at every evaluation with `curve_on = "heldout"`), on the training
/// competitions at every evaluation with `curve_on = "train"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    pub step: usize,
    /// Training sandbox CPU seconds spent so far.
    pub train_cpu_secs: f64,
    /// Mean position score on the held-out competitions (0 for an invalid
    /// solution); absent where they were not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heldout_position: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heldout_reward: Option<f64>,
    /// Valid fraction on the held-out competitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_fraction: Option<f64>,
    /// The same on the training competitions (the curve), where read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_competitions: Option<Scores>,
}

impl EvalPoint {
    /// The held-out scores, where they were read.
    pub fn heldout(&self) -> Option<Scores> {
        Some(Scores {
            position: self.heldout_position?,
            reward: self.heldout_reward?,
            valid_fraction: self.valid_fraction?,
        })
    }

    /// The learning curve's score at this point: the training
    /// competitions' where read, else the held-out ones'.
    pub fn curve_position(&self) -> Option<f64> {
        self.train_competitions
            .map(|s| s.position)
            .or(self.heldout_position)
    }
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
    /// Written and read as `real`, `wm` or `wmrl` ([`crate::arm`]).
    #[serde(with = "serde_ar_arm")]
    pub arm: Arm,
    pub seed: u64,
    pub evals: Vec<EvalPoint>,
    pub steps: Vec<StepLog>,
    pub ledger: Ledger,
    /// The predictor refits, in order (`core.refit`; absent without).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refits: Vec<RefitRecord>,
    /// What the run's CPU figures count (its settings' `accounting`).
    pub accounting: Accounting,
    /// The bench arm's name when the run is a variant of `arm`
    /// ([`TrainConfig::variant`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// The layouts of a run's summary.json: 0, before the key, left the
/// accounting out where it counted sandbox CPU alone (it reads as
/// `accounting = "sandbox"`); 1 writes it.
impl wmrl_run::Versioned for TrainReport {
    const FORMAT: u32 = 1;
    fn migrate(from: u32, doc: &mut JsonMap) -> std::result::Result<(), String> {
        if from == 0 {
            doc.entry("accounting")
                .or_insert(serde_json::Value::from("sandbox"));
        }
        Ok(())
    }
}

impl TrainReport {
    /// The bench arm the run belongs to: its variant's name, else its arm's.
    pub fn name(&self) -> &str {
        self.variant.as_deref().unwrap_or(ar_name(self.arm))
    }

    /// The CPU the run spent on training, as its accounting counts it.
    pub fn train_cpu(&self) -> f64 {
        self.accounting.train_cpu(&self.ledger)
    }

    /// The last evaluation's held-out position (0 when none was read).
    pub fn final_position(&self) -> f64 {
        self.evals
            .iter()
            .rev()
            .find_map(|e| e.heldout_position)
            .unwrap_or(0.0)
    }

    /// The start's held-out position (0 when none was read).
    pub fn start_position(&self) -> f64 {
        self.evals
            .first()
            .and_then(|e| e.heldout_position)
            .unwrap_or(0.0)
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
    started: Stopwatch,
    outs: Vec<Option<Outcome>>,
    sizes: &[usize],
) -> Vec<Vec<Option<f64>>> {
    let (wall, cpu) = started.elapsed();
    ledger.record(Stage::RealExecution, outs.len() as u64, wall);
    // The sandbox's CPU, and this process's own in launching and grading.
    let sandbox = outs.iter().flatten().map(|o| o.cpu_secs).sum::<f64>();
    ledger.record_cpu(Stage::RealExecution, sandbox + cpu);
    regroup(outs.into_iter().map(|o| o.map(|o| o.grade.reward)), sizes)
}

/// The world-model half: charge `flat` predictions to the ledger and split
/// them into groups of `sizes[i]`.
pub(crate) fn charge_world_model(
    ledger: &mut Ledger,
    started: Stopwatch,
    flat: Vec<f64>,
    sizes: &[usize],
) -> Vec<Vec<f64>> {
    let (wall, cpu) = started.elapsed();
    ledger.record(Stage::WorldModel, flat.len() as u64, wall);
    ledger.record_cpu(Stage::WorldModel, cpu);
    regroup(flat, sizes)
}

impl Scorers for StepScorers<'_> {
    fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError> {
        let p = self.predictor.ok_or("this arm has no world model")?;
        let t = Stopwatch::start();
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
        let t = Stopwatch::start();
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

/// Execute policy samples on every competition of `split`.
pub fn evaluate(
    policy: &Policy,
    suite: &Suite,
    executor: &Executor,
    split: Split,
    samples: usize,
    seed: u64,
    ledger: &mut Ledger,
) -> Result<Scores> {
    let mut rng = seeded(seed ^ 0xE7A1);
    let mut jobs = Vec::new();
    for c in suite.indices(split) {
        for s in policy.sample(&suite.competitions[c].meta.meta_features, samples, &mut rng)? {
            jobs.push((c, s.solution));
        }
    }
    if jobs.is_empty() {
        return Err(Error::Config(format!(
            "suite has no {} competitions",
            match split {
                Split::Train => "training",
                Split::Heldout => "held-out",
            }
        )));
    }
    let t = Stopwatch::start();
    let outs = execute_all(executor, suite, &jobs);
    let (wall, cpu) = t.elapsed();
    ledger.record(Stage::Eval, jobs.len() as u64, wall);
    let sandbox = outs.iter().flatten().map(|o| o.cpu_secs).sum::<f64>();
    ledger.record_cpu(Stage::Eval, sandbox + cpu);
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
    Ok(Scores {
        position: pos,
        reward: rew,
        valid_fraction: valid,
    })
}

/// What refitting the predictor during a run needs (`core.refit.every >
/// 0`): the predictor the run starts with as candle weights (the run
/// scores their ONNX export, passed to [`train_with_refit`]), the data it
/// was fitted on, its settings, and where the predictor in use after an
/// accepted refit is exported (each candidate is exported beside it
/// first, [`candidate_path`]).
pub struct PredictorRefit<'a> {
    pub predictor: &'a Predictor,
    pub data: &'a [Example],
    pub config: &'a PredictorConfig,
    pub onnx_path: PathBuf,
}

/// Where a refit's candidate is exported before the verdict.
pub fn candidate_path(onnx_path: &Path) -> PathBuf {
    onnx_path.with_extension("candidate.onnx")
}

/// One predictor refit: the shared gate's verdict and what the candidate
/// was fitted on (a line of the run's `refits.jsonl`, [`RunDir::refits`], and of
/// [`TrainReport::refits`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefitRecord {
    #[serde(flatten)]
    pub decision: RefitDecision,
    /// Rows the candidate was fitted on: the predictor's data, then
    /// `anchor_rows` graded members of the `trained_on` anchor groups.
    pub training_rows: usize,
    pub anchor_rows: usize,
    /// Anchor groups as (0-based step, group index in the step): those
    /// fitted on, and those held out to judge the candidate (never among
    /// the former).
    pub trained_on: Vec<(u64, usize)>,
    pub held_out: Vec<(u64, usize)>,
    pub held_out_rows: usize,
    /// The fit's final training MSE.
    pub fit_mse: f64,
    /// Spearman correlation of the candidate's and the incumbent's raw
    /// scores of the held-out rows: how far the refit re-draws the
    /// ranking (issue 29).
    pub spearman_vs_incumbent: Option<f64>,
    /// Wall and process CPU seconds of the fit, export and held-out scoring
    /// (charged to the ledger's world-model stage).
    pub fit_seconds: f64,
    pub fit_cpu_seconds: f64,
}

/// The graded members of one anchor group, as the predictor's rows, in
/// member order (what [`AnchorGroup::real`] lists).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct KeptGroup {
    step: u64,
    group: usize,
    rows: Vec<Example>,
}

impl KeptGroup {
    fn key(&self) -> (u64, usize) {
        (self.step, self.group)
    }
}

/// The candidate's training rows: the predictor's `data`, then the rows of
/// every kept anchor group not in `held_out`; and those groups' keys.
fn training_rows(
    data: &[Example],
    kept: &[KeptGroup],
    held_out: &BTreeSet<(u64, usize)>,
) -> (Vec<Example>, Vec<(u64, usize)>) {
    let used: Vec<&KeptGroup> = kept
        .iter()
        .filter(|g| !held_out.contains(&g.key()))
        .collect();
    let rows = data
        .iter()
        .chain(used.iter().flat_map(|g| &g.rows))
        .cloned()
        .collect();
    (rows, used.iter().map(|g| g.key()).collect())
}

/// The predictor in use after an accepted refit.
struct Installed {
    predictor: Predictor,
    onnx: OnnxPredictor,
}

/// A fitted candidate, kept until the gate's verdict.
struct Candidate {
    predictor: Predictor,
    record: RefitRecord,
}

/// The AutoResearch track of the shared loop: groups of solutions sampled
/// for training competitions, executed in the sandbox (real) or predicted
/// (world model), and the solution policy's GRPO update.
struct ArTrack<'a> {
    cfg: &'a TrainConfig,
    arm: Arm,
    seed: u64,
    suite: &'a Suite,
    executor: &'a Executor,
    predictor: Option<&'a OnnxPredictor>,
    refit: Option<&'a PredictorRefit<'a>>,
    /// The predictor an accepted refit installed, once one has.
    installed: Option<Installed>,
    candidate: Option<Candidate>,
    /// Every anchor group's graded members so far (refitting arms only),
    /// oldest first.
    kept: Vec<KeptGroup>,
    refits: Vec<RefitRecord>,
    policy: Policy,
    /// One sampling stream for the whole run.
    rng: ChaCha8Rng,
    train_comps: Vec<usize>,
    evals: Vec<EvalPoint>,
    step_logs: Vec<StepLog>,
    /// The run directory, when there is one (step records go through the
    /// run's journal; evaluations and refits are appended here).
    files: Option<&'a RunDir>,
}

/// The AutoResearch track's part of a checkpoint (`track` in
/// `checkpoint/state.json`, written after every step).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArState {
    config: TrainConfig,
    #[serde(with = "serde_ar_arm")]
    arm: Arm,
    seed: u64,
    rng: ChaCha8Rng,
    policy: crate::policy::PolicyState,
    evals: Vec<EvalPoint>,
    steps: Vec<StepLog>,
    #[serde(default)]
    kept: Vec<KeptGroup>,
    /// The weights of the predictor an accepted refit installed: restored
    /// as they were, never refitted again on resume (a file that a later,
    /// unfinished step may have overwritten is not read either).
    #[serde(default)]
    installed: Option<PredictorWeights>,
    #[serde(default)]
    refits: Vec<RefitRecord>,
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
    type Record = StepLog;
    type State = ArState;
    type Config = TrainConfig;

    fn config(&self) -> &TrainConfig {
        self.cfg
    }

    fn rollouts(&mut self, _step: usize, ledger: &mut Ledger) -> Result<Groups> {
        let t = Stopwatch::start();
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
        let (wall, cpu) = t.elapsed();
        ledger.record(
            Stage::PolicySample,
            (cfg.groups_per_step * cfg.group_size) as u64,
            wall,
        );
        ledger.record_cpu(Stage::PolicySample, cpu);
        Ok(groups)
    }

    fn group_sizes(&self, batch: &Groups) -> Vec<usize> {
        batch.iter().map(|(_, s)| s.len()).collect()
    }

    fn scorers<'s>(&'s mut self, batch: &'s Groups, ledger: &'s mut Ledger) -> StepScorers<'s> {
        StepScorers {
            suite: self.suite,
            executor: self.executor,
            predictor: self.installed.as_ref().map(|i| &i.onnx).or(self.predictor),
            groups: batch,
            ledger,
        }
    }

    /// With `core.refit`, keep the graded members of the step's anchor
    /// groups (keyed by step and group, as the correction loop records
    /// them) for later refits.
    fn scored(
        &mut self,
        step: usize,
        groups: &Groups,
        outcome: &StepOutcome,
        _ledger: &mut Ledger,
    ) -> Result<()> {
        if !self.cfg.refits(self.arm) {
            return Ok(());
        }
        for (&g, real) in outcome.anchors.iter().zip(&outcome.real) {
            let (c, samples) = &groups[g];
            let comp = &self.suite.competitions[*c];
            let rows: Vec<Example> = samples
                .iter()
                .zip(real)
                .filter_map(|(s, y)| {
                    y.map(|y| Example {
                        competition: comp.name().to_string(),
                        meta: comp.meta.meta_features.clone(),
                        solution: s.solution,
                        reward: y,
                        cpu_secs: 0.0,
                    })
                })
                .collect();
            // The correction loop records no group without a graded member.
            if !rows.is_empty() {
                self.kept.push(KeptGroup {
                    step: step as u64,
                    group: g,
                    rows,
                });
            }
        }
        Ok(())
    }

    /// Fine-tune the predictor in use ([`Predictor::fine_tuned`]) on its
    /// data plus every kept anchor group except `held_out`, export it to
    /// ONNX, load it through ONNX Runtime and score the held-out groups'
    /// graded members with it. Skipped (`None`) when no step is left to
    /// score with a new predictor, or when no anchor group is left to
    /// learn from (a candidate fitted on the old data alone only re-draws
    /// the ranking, which is what issue 29 found).
    fn refit_candidate(
        &mut self,
        done: usize,
        held_out: &[AnchorGroup],
        ledger: &mut Ledger,
    ) -> Result<Option<Vec<Vec<f64>>>> {
        self.candidate = None;
        let Some(r) = self.refit.filter(|_| self.cfg.refits(self.arm)) else {
            return Ok(None);
        };
        let held = AnchorGroup::keys(held_out);
        let (rows, trained_on) = training_rows(r.data, &self.kept, &held);
        if done >= self.cfg.steps || held_out.is_empty() || trained_on.is_empty() {
            tracing::info!(
                seed = self.seed,
                done,
                held_out = held_out.len(),
                "predictor refit skipped: no step left to score with it, or no anchor group to judge or to learn from"
            );
            return Ok(None);
        }
        let mut held_rows: Vec<Vec<f32>> = Vec::new();
        for g in held_out {
            let kept = self.kept.iter().find(|k| k.key() == g.key());
            let matches = kept.is_some_and(|k| {
                k.rows.len() == g.real.len()
                    && k.rows.iter().zip(&g.real).all(|(e, y)| e.reward == *y)
            });
            match kept {
                Some(k) if matches => held_rows.extend(k.rows.iter().map(Example::input)),
                _ => {
                    return Err(Error::Config(format!(
                        "refit after {done} steps: the kept rows of anchor group (step {}, group {}) do not match its {} graded outcomes",
                        g.step,
                        g.group,
                        g.real.len()
                    )));
                }
            }
        }
        let watch = Stopwatch::start();
        let base = self
            .installed
            .as_ref()
            .map_or(r.predictor, |i| &i.predictor);
        let (predictor, fit_mse) = base.fine_tuned(r.config, &rows)?;
        let onnx = OnnxPredictor::export_and_load(&predictor, &candidate_path(&r.onnx_path))?;
        let flat = onnx.predict(&held_rows)?;
        let (fit_seconds, fit_cpu_seconds) = watch.elapsed();
        ledger.record(Stage::WorldModel, flat.len() as u64, fit_seconds);
        ledger.record_cpu(Stage::WorldModel, fit_cpu_seconds);
        let incumbent: Vec<f64> = held_out.iter().flat_map(|g| g.wm.clone()).collect();
        let sizes: Vec<usize> = held_out.iter().map(|g| g.real.len()).collect();
        let anchor_rows = rows.len() - r.data.len();
        self.candidate = Some(Candidate {
            predictor,
            record: RefitRecord {
                decision: RefitDecision {
                    step: done,
                    accepted: false,
                    reason: String::new(),
                    held_out_groups: held_out.len(),
                    pairs: 0,
                    incumbent: None,
                    candidate: None,
                    auroc_before: None,
                    auroc_after: None,
                },
                training_rows: rows.len(),
                anchor_rows,
                trained_on,
                held_out: held.into_iter().collect(),
                held_out_rows: flat.len(),
                fit_mse,
                spearman_vs_incumbent: crate::predictor::spearman(&flat, &incumbent),
                fit_seconds,
                fit_cpu_seconds,
            },
        });
        Ok(Some(regroup(flat, &sizes)))
    }

    /// Record the verdict (refits.jsonl) and install an accepted candidate:
    /// its ONNX file becomes `onnx_path` and scores from the next step on.
    fn refit_done(&mut self, decision: &RefitDecision, ledger: &mut Ledger) -> Result<()> {
        let (Some(c), Some(r)) = (self.candidate.take(), self.refit) else {
            return Ok(());
        };
        let record = RefitRecord {
            decision: decision.clone(),
            ..c.record
        };
        tracing::info!(
            arm = ar_name(self.arm),
            seed = self.seed,
            step = decision.step,
            accepted = decision.accepted,
            reason = %decision.reason,
            anchor_rows = record.anchor_rows,
            "predictor refit"
        );
        if let Some(d) = self.files {
            wmrl_run::append(&d.refits(), &record)?;
        }
        self.refits.push(record);
        if decision.accepted {
            let watch = Stopwatch::start();
            let from = candidate_path(&r.onnx_path);
            std::fs::rename(&from, &r.onnx_path).map_err(io_err(&r.onnx_path))?;
            self.installed = Some(Installed {
                onnx: OnnxPredictor::load(&r.onnx_path)?,
                predictor: c.predictor,
            });
            let (wall, cpu) = watch.elapsed();
            ledger.wm_seconds += wall;
            ledger.record_cpu(Stage::WorldModel, cpu);
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
        let t = Stopwatch::start();
        let up = self.policy.grpo_update(&batch)?;
        let (wall, cpu) = t.elapsed();
        ledger.record(Stage::Update, 1, wall);
        ledger.record_cpu(Stage::Update, cpu);
        Ok(up)
    }

    fn evaluate(run: &mut Run<Self>) -> Result<()> {
        let t = &mut run.track;
        // The held-out competitions are read at the start and the end
        // only, unless the run draws its curve there (runs recorded
        // before `curve_on`). Both draws use the step's seed, so the
        // held-out figures do not depend on whether a curve was drawn.
        let seed = t.seed.wrapping_add(run.step as u64);
        let ends = run.step == 0 || run.step == t.cfg.steps;
        let (samples, ex, suite) = (t.cfg.eval_samples, t.executor, t.suite);
        let mut read =
            |split| evaluate(&t.policy, suite, ex, split, samples, seed, &mut run.ledger);
        let heldout = (ends || t.cfg.curve_on == CurveOn::Heldout)
            .then(|| read(Split::Heldout))
            .transpose()?;
        let train_competitions = (t.cfg.curve_on == CurveOn::Train)
            .then(|| read(Split::Train))
            .transpose()?;
        let point = EvalPoint {
            step: run.step,
            train_cpu_secs: t.cfg.accounting.train_cpu(&run.ledger),
            heldout_position: heldout.map(|h| h.position),
            heldout_reward: heldout.map(|h| h.reward),
            valid_fraction: heldout.map(|h| h.valid_fraction),
            train_competitions,
        };
        if let Some(d) = t.files {
            wmrl_run::append(&d.eval(), &point)?;
        }
        t.evals.push(point);
        Ok(())
    }

    fn record(_: &Run<Self>, s: &wmrl_core::Step<Self>) -> Result<StepLog> {
        Ok(step_log(s))
    }

    fn state(&self) -> Result<ArState> {
        Ok(ArState {
            config: self.cfg.clone(),
            arm: self.arm,
            seed: self.seed,
            rng: self.rng.clone(),
            policy: self.policy.state()?,
            evals: self.evals.clone(),
            steps: self.step_logs.clone(),
            kept: self.kept.clone(),
            installed: self
                .installed
                .as_ref()
                .map(|i| i.predictor.weights())
                .transpose()?,
            refits: self.refits.clone(),
        })
    }
}

/// Train one arm with one seed: `arm` one of [`crate::arm::AR_ARMS`] (any
/// other core arm is refused). `predictor` (the exported ONNX file, scored
/// through ONNX Runtime) is required for `wm` and `wmrl`. With `run`, the
/// run's files go there ([`RunDir`]: config, step metrics and evaluations
/// as they happen, then diagnostics and, last, the summary).
pub fn train(
    cfg: &TrainConfig,
    arm: Arm,
    seed: u64,
    suite: &Suite,
    executor: &Executor,
    predictor: Option<&OnnxPredictor>,
    run: Option<&RunDir>,
) -> Result<TrainReport> {
    train_with_refit(cfg, arm, seed, suite, executor, predictor, run, None)
}

/// [`train`], refitting the predictor on `core.refit`'s schedule from
/// `refit`'s predictor and data plus the run's anchor executions (an error
/// when the arm refits and `refit` is missing, or its candle predictor is
/// not the ONNX `predictor` the run scores with).
#[allow(clippy::too_many_arguments)]
pub fn train_with_refit(
    cfg: &TrainConfig,
    arm: Arm,
    seed: u64,
    suite: &Suite,
    executor: &Executor,
    predictor: Option<&OnnxPredictor>,
    run_dir: Option<&RunDir>,
    refit: Option<&PredictorRefit<'_>>,
) -> Result<TrainReport> {
    let cfg = &cfg.resolved()?;
    let refits = cfg.refits(arm);
    let train_comps = check_inputs(cfg, arm, seed, suite, predictor, refit, refits)?;
    let opened = open_run(run_dir, cfg, arm, seed)?;
    let mut track = ArTrack {
        cfg,
        arm,
        seed,
        suite,
        executor,
        predictor,
        refit,
        installed: None,
        candidate: None,
        kept: Vec::new(),
        refits: Vec::new(),
        policy: Policy::new_on(
            cfg.policy.clone(),
            seed,
            &wmrl_device::candle_device(cfg.device, "the AutoResearch policy"),
        )?,
        rng: seeded(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 1),
        train_comps,
        evals: Vec::new(),
        step_logs: Vec::new(),
        files: run_dir,
    };
    let core = CorrectionLoop::new(cfg.core.clone(), arm, seed)?;
    // Everything is built before the run directory is touched.
    if let Some(d) = run_dir {
        // The record files: emptied for a fresh run (refits.jsonl created
        // when the arm refits), cut back to the checkpoint's on resume.
        let settings = d.recorded(cfg)?;
        let empty = [d.metrics(), d.eval()]
            .into_iter()
            .chain(refits.then(|| d.refits()))
            .collect::<Vec<_>>();
        d.prepare(&opened, Some(&settings), &empty)?;
    }
    let resumed = opened.is_resumed();
    let mut run = match opened {
        Opened::Resumed(ck) => {
            let mut ck = *ck;
            restore_track(&mut track, &mut ck.track)?;
            tracing::info!(
                arm = ar_name(arm),
                seed,
                step = ck.step,
                "resumed from the checkpoint"
            );
            Run::resumed(track, ck.core, ck.ledger, ck.step)
        }
        Opened::Fresh => {
            let mut run = Run::new(track, core);
            // The predictor's up-front share, paid before the first step.
            if arm != Arm::Sparse {
                run.ledger.predictor_cpu_seconds = cfg.predictor_charge_cpu_secs;
            }
            run
        }
    };
    let schedule = Schedule {
        steps: cfg.steps,
        eval_every: cfg.eval_every,
        eval_at_start: !resumed,
        eval_at_end: true,
        checkpoint_every: usize::from(run_dir.is_some()),
    };
    let mut journal: Box<dyn wmrl_core::Journal<ArTrack<'_>>> = match run_dir {
        Some(dir) => Box::new(wmrl_run::RunJournal { dir }),
        None => Box::new(wmrl_core::NoJournal),
    };
    run.run(&schedule, journal.as_mut(), |run, _, log| {
        tracing::info!(arm = ar_name(arm), seed, step = log.step, reward = ?log.mean_reward_seen, cpu = run.ledger.real_cpu_seconds, "step");
        run.track.step_logs.push(log);
        Ok(())
    })?;
    let report = TrainReport {
        arm,
        seed,
        evals: std::mem::take(&mut run.track.evals),
        steps: std::mem::take(&mut run.track.step_logs),
        ledger: run.ledger,
        refits: std::mem::take(&mut run.track.refits),
        accounting: cfg.accounting,
        variant: cfg.variant.clone(),
    };
    if let Some(d) = run_dir {
        let summary = crate::rundir::record_value(&d.summary(), &report)?;
        d.finish(run.core.diagnostics(), &summary)?;
    }
    Ok(report)
}

/// The run's inputs agree: a predictor for the arms that read one, refit
/// data (and the very predictor scored) when the arm refits, training
/// competitions and group sizes GRPO can use. Returns the training
/// competitions.
#[allow(clippy::too_many_arguments)]
fn check_inputs(
    cfg: &TrainConfig,
    arm: Arm,
    seed: u64,
    suite: &Suite,
    predictor: Option<&OnnxPredictor>,
    refit: Option<&PredictorRefit<'_>>,
    refits: bool,
) -> Result<Vec<usize>> {
    check_ar_arm(arm).map_err(Error::Config)?;
    if arm != Arm::Sparse && predictor.is_none() {
        return Err(Error::Config(format!(
            "arm {} needs an outcome predictor",
            ar_name(arm)
        )));
    }
    match (refits, refit, predictor) {
        (true, None, _) => {
            return Err(Error::Config(
                "core.refit.every is set but the run was given no predictor data to refit on"
                    .into(),
            ));
        }
        (true, Some(r), Some(p)) => {
            // A warm start from other weights than those scored would
            // judge one model and install another.
            let diff = crate::onnx_predictor::max_abs_diff(r.predictor, p, 64, seed)?;
            if diff > 1e-4 {
                return Err(Error::Config(format!(
                    "the refit's candle predictor is not the ONNX predictor {} (max |diff| {diff:.2e})",
                    p.path().display()
                )));
            }
        }
        _ => {}
    }
    let train_comps = suite.indices(Split::Train);
    if train_comps.is_empty() || cfg.group_size < 2 || cfg.groups_per_step == 0 {
        return Err(Error::Config(
            "need training competitions, group_size >= 2, groups_per_step >= 1".into(),
        ));
    }
    Ok(train_comps)
}

/// The run directory opened ([`wmrl_run::RunDir::open`]): an interrupted
/// run (a checkpoint and no summary) continues from its checkpoint (the
/// same settings bar `steps` and `device`, or it is refused naming the first
/// difference); anything else starts fresh. Nothing is written.
fn open_run(
    run_dir: Option<&RunDir>,
    cfg: &TrainConfig,
    arm: Arm,
    seed: u64,
) -> Result<Opened<ArState>> {
    let Some(d) = run_dir else {
        return Ok(Opened::Fresh);
    };
    Ok(d.open(Resume::IfInterrupted, |ck: &Saved<ArState>| {
        let differs = if (ck.track.arm, ck.track.seed) != (arm, seed) {
            Some(format!(
                "arm {} seed {} against arm {} seed {seed}",
                ar_name(ck.track.arm),
                ck.track.seed,
                ar_name(arm)
            ))
        } else {
            wmrl_run::differs(&ck.track.config, cfg)
        };
        differs.map(|d| {
            format!(
                "an interrupted run of other settings (recorded against now: {d}); use another \
                 directory or delete it to start over"
            )
        })
    })?)
}

/// Put a checkpoint's policy, sampler, records and refitted predictor back
/// into a freshly built track.
fn restore_track(track: &mut ArTrack<'_>, ck: &mut ArState) -> Result<()> {
    track.policy.restore(&ck.policy)?;
    track.rng = ck.rng.clone();
    track.evals = std::mem::take(&mut ck.evals);
    track.step_logs = std::mem::take(&mut ck.steps);
    track.kept = std::mem::take(&mut ck.kept);
    track.refits = std::mem::take(&mut ck.refits);
    if let Some(w) = &ck.installed {
        let Some(r) = track.refit else {
            return Err(Error::Config(
                "the checkpoint holds a refitted predictor, but the run was given no refit settings".into(),
            ));
        };
        // The same weights exported again score exactly as before.
        let predictor = Predictor::from_weights(w)?;
        track.installed = Some(Installed {
            onnx: OnnxPredictor::export_and_load(&predictor, &r.onnx_path)?,
            predictor,
        });
    }
    Ok(())
}

/// A step's line of metrics.jsonl.
fn step_log(s: &wmrl_core::Step<ArTrack<'_>>) -> StepLog {
    let seen: Vec<f64> = s
        .outcome
        .rewards
        .iter()
        .flatten()
        .flatten()
        .copied()
        .collect();
    StepLog {
        step: s.index + 1,
        mean_reward_seen: (!seen.is_empty()).then(|| seen.iter().sum::<f64>() / seen.len() as f64),
        anchors: s.outcome.anchors.len(),
        // Every solution of every anchor group went to the sandbox.
        executions: s
            .outcome
            .anchors
            .iter()
            .map(|&g| s.batch[g].1.len() as u64)
            .sum(),
        weight: s.outcome.stats.weight,
        disagreement: s.outcome.stats.disagreement,
        kl: s.update.kl,
        entropy: s.update.entropy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_is_recorded_when_not_the_cpu() {
        let cpu = serde_json::to_value(TrainConfig::default()).expect("json");
        assert!(
            cpu.get("device").is_none(),
            "the default stays out of run.toml"
        );
        let c = TrainConfig::load(None, &["device=\"cuda\"".into()]).expect("cuda");
        assert_eq!(c.device, DeviceChoice::Cuda);
        assert_eq!(serde_json::to_value(&c).expect("json")["device"], "cuda");
    }

    #[test]
    fn the_shipped_config_is_the_defaults_and_unknown_keys_are_refused() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let shipped = root.join("configs/autoresearch_train.toml");
        assert_eq!(
            TrainConfig::load(Some(&shipped), &[]).expect("shipped"),
            TrainConfig::default()
        );
        let c = TrainConfig::load(None, &["steps=3".into(), "policy.lr=0.01".into()])
            .expect("sets over the defaults");
        assert_eq!((c.steps, c.policy.lr), (3, 0.01));
        assert_eq!(c.core, TrainConfig::default().core);
        // Keys left out take the track's defaults, not each table type's:
        // the curve on the training competitions (the field's own default
        // reads old recorded runs as held-out), the small-scale [core].
        assert_eq!(c.curve_on, CurveOn::Train);
        let tmp = tempfile::tempdir().expect("tmp");
        let part = tmp.path().join("part.toml");
        std::fs::write(&part, "steps = 2\n[core.anchors]\nfraction = 0.5\n").expect("write");
        let p = TrainConfig::load(Some(&part), &[]).expect("partial");
        assert_eq!(p.curve_on, CurveOn::Train);
        assert_eq!(p.core.anchors.fraction.get(), 0.5);
        assert_eq!(p.core.calibration, small_scale_core().calibration);
        assert_eq!(p.core.weight, small_scale_core().weight);
        let err = TrainConfig::load(Some(&shipped), &["policy.lrr=1".into()]).expect_err("unknown");
        assert!(err.to_string().contains("lrr"), "{err}");
        // An older wmrl's recorded config.json reads back as strictly.
        let tmp = tempfile::tempdir().expect("tmp");
        let j = tmp.path().join("config.json");
        std::fs::write(&j, serde_json::to_string(&c).expect("json")).expect("write");
        assert_eq!(TrainConfig::load(Some(&j), &[]).expect("json"), c);
        std::fs::write(&j, r#"{"stepz": 1}"#).expect("write");
        assert!(TrainConfig::load(Some(&j), &[]).is_err());
    }
    use crate::solution::Solution;

    fn row(reward: f64) -> Example {
        Example {
            competition: "c".into(),
            meta: vec![0.0; crate::N_META],
            solution: Solution::new([0; 6]).unwrap(),
            reward,
            cpu_secs: 0.0,
        }
    }

    #[test]
    fn training_rows_leave_out_exactly_the_held_out_groups() {
        let data = vec![row(0.1); 5];
        let kept: Vec<KeptGroup> = [(0, 1, 3), (1, 0, 2), (1, 4, 4), (2, 2, 1)]
            .into_iter()
            .map(|(step, group, n)| KeptGroup {
                step,
                group,
                rows: vec![row(step as f64); n],
            })
            .collect();
        let held: BTreeSet<(u64, usize)> = [(1, 4), (2, 2)].into_iter().collect();
        let (rows, used) = training_rows(&data, &kept, &held);
        assert_eq!(used, [(0, 1), (1, 0)]);
        assert_eq!(rows.len(), 5 + 3 + 2);
        // Step 2's group is held out: none of its rows (reward 2.0) is in.
        assert_eq!(rows.iter().filter(|e| e.reward == 2.0).count(), 0);
        // Holding nothing out fits on everything.
        let (all, used) = training_rows(&data, &kept, &BTreeSet::new());
        assert_eq!((all.len(), used.len()), (5 + 10, 4));
    }
}
