//! The robot track's world-model refit (`wmrl.refit`, beyond the paper:
//! [`wmrl_core::refit`] decides, this module fits). It keeps every anchor
//! group's rollouts as the frames the progress model reads (the model's T
//! frames, spread uniformly as it sub-samples them, so a candidate scores
//! exactly what the incumbent scored), the instruction and the real
//! outcome; each is written once to `refit_anchors/` in the run directory
//! and read back on resume, so a resumed run refits exactly as an
//! uninterrupted one. A refit fine-tunes a copy of the model in use on the
//! kept rollouts except the held-out groups', saves and exports it to
//! `wm/refit_<steps>/`, loads the ONNX file through ONNX Runtime like the
//! incumbent and scores the held-out groups with it; the verdict goes to
//! `refits.jsonl`.
//!
//! It never labels a rollout with anything but its real outcome (already
//! charged to the ledger by the correction loop): no oracle progress, which
//! a real robot does not have.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use wmrl_core::rng::SplitMix64;
use wmrl_core::{AnchorGroup, Ledger, RefitDecision, Stage};
use wmrl_env::{CameraSpec, Episode, EpisodeStep, Frame};
use wmrl_run::clock::Stopwatch;
use wmrl_worldmodel::train::{self, SplitRecord};
use wmrl_worldmodel::{
    FineTuneConfig, RolloutFrames, ScoreMode, WorldModel, WorldModelConfig, export_onnx, fine_tune,
    uniform_indices,
};

use crate::metrics::RefitRecord;
use crate::rollout::Rollout;
use crate::{Result, TrainError};

/// Where the kept anchor rollouts go, inside the run directory.
pub const ANCHORS_DIR: &str = "refit_anchors";
/// Where each refit's candidate model goes (`wm/refit_<steps>/`).
pub const MODELS_DIR: &str = "wm";

const SOURCE_TAG: &str = "wmrl-refit-anchor";

/// One kept anchor rollout.
#[derive(Debug, Clone)]
pub struct AnchorRollout {
    /// 0-based step, group index in the step, member index in the group.
    pub step: u64,
    pub group: usize,
    pub member: usize,
    pub instruction: String,
    /// The frames the model reads, oldest first.
    pub frames: Vec<Frame>,
    pub success: bool,
    path: PathBuf,
}

impl AnchorRollout {
    fn key(&self) -> (u64, usize) {
        (self.step, self.group)
    }

    fn to_episode(&self) -> Episode {
        let (w, h) = self.frames.first().map_or((0, 0), |f| (f.width, f.height));
        Episode {
            suite: "refit".into(),
            task: 0,
            init_state: 0,
            seed: 0,
            instruction: self.instruction.clone(),
            cameras: vec![CameraSpec {
                name: "agentview".into(),
                width: w,
                height: h,
            }],
            success: self.success,
            final_progress: None,
            source: format!(
                "{SOURCE_TAG} step={} group={} member={}",
                self.step, self.group, self.member
            ),
            steps: self
                .frames
                .iter()
                .map(|f| EpisodeStep {
                    frames: vec![f.clone()],
                    proprio: Vec::new(),
                    action: Vec::new(),
                    progress: None,
                })
                .collect(),
        }
    }

    fn from_episode(ep: Episode, path: PathBuf) -> Option<Self> {
        let rest = ep.source.strip_prefix(SOURCE_TAG)?;
        let mut it = rest.split_whitespace().map(|kv| kv.split_once('='));
        let mut field = |name: &str| -> Option<u64> {
            match it.next()?? {
                (k, v) if k == name => v.parse().ok(),
                _ => None,
            }
        };
        let (step, group, member) = (field("step")?, field("group")?, field("member")?);
        Some(Self {
            step,
            group: usize::try_from(group).ok()?,
            member: usize::try_from(member).ok()?,
            instruction: ep.instruction,
            frames: ep
                .steps
                .into_iter()
                .filter_map(|s| s.frames.into_iter().next())
                .collect(),
            success: ep.success,
            path,
        })
    }
}

/// A fitted candidate, kept until the verdict.
struct Candidate {
    dir: PathBuf,
    model: WorldModel,
    training_rollouts: usize,
    training_groups: usize,
    held_out_rollouts: usize,
    fit_seconds: f64,
    fit_cpu_seconds: f64,
}

/// The refit state of a robot run.
pub struct WmRefit {
    run_dir: PathBuf,
    fit: FineTuneConfig,
    runtime: WorldModelConfig,
    mode: ScoreMode,
    seed: u64,
    /// Rollouts per step (file numbering).
    per_step: usize,
    group_size: usize,
    /// The model's T: frames kept per rollout.
    num_frames: usize,
    /// Kept rollouts, oldest first; at most `cap`.
    buffer: VecDeque<AnchorRollout>,
    cap: usize,
    /// The directory holding the candle weights of the model in use.
    incumbent: PathBuf,
    candidate: Option<Candidate>,
}

impl std::fmt::Debug for WmRefit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WmRefit")
            .field("incumbent", &self.incumbent)
            .field("kept", &self.buffer.len())
            .finish()
    }
}

/// The directory of the candle weights (`model.safetensors` and the
/// training settings, as `wmrl wm train` writes them) beside an ONNX
/// model, or the error that says what is missing.
pub fn weights_dir(onnx: &Path) -> Result<PathBuf> {
    let dir = onnx
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let settings = wmrl_run::RunDir::new(&dir)
        .recorded_settings::<train::TrainConfig>()
        .is_some();
    let missing: Vec<&str> = [
        (!dir.join(train::WEIGHTS_FILE).is_file()).then_some(train::WEIGHTS_FILE),
        (!settings).then_some(wmrl_run::SETTINGS_FILE),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        return Ok(dir);
    }
    Err(TrainError::Config {
        path: "world_model.path".into(),
        message: format!(
            "wmrl.refit.every > 0 fine-tunes the world model's candle weights, but {} has no {} beside {} (use a model trained by `wmrl wm train`, e.g. models/progress-tiny/model.onnx, or set wmrl.refit.every = 0)",
            dir.display(),
            missing.join(" or "),
            onnx.display()
        ),
    })
}

/// What [`WmRefit::open`] needs from the run's settings.
#[derive(Debug, Clone)]
pub struct RefitSetup {
    pub fit: FineTuneConfig,
    pub runtime: WorldModelConfig,
    pub mode: ScoreMode,
    pub seed: u64,
    pub n_groups: usize,
    pub group_size: usize,
    /// `wmrl.refit.holdout_groups`: the buffer keeps these groups on top
    /// of `fit.max_rollouts`.
    pub holdout_groups: usize,
}

impl WmRefit {
    /// The refit state of the run in `run_dir` whose model in use is the
    /// ONNX file `model` (its candle weights beside it), with the kept
    /// anchor rollouts of the `steps_done` steps before read back.
    pub fn open(
        setup: RefitSetup,
        run_dir: &Path,
        model: &Path,
        steps_done: usize,
    ) -> Result<Self> {
        let incumbent = weights_dir(model)?;
        let (tc, _): (train::TrainConfig, _) = wmrl_run::RunDir::new(&incumbent).read_settings()?;
        let cap = setup.fit.max_rollouts + setup.holdout_groups * setup.group_size;
        let mut me = Self {
            run_dir: run_dir.to_path_buf(),
            fit: setup.fit,
            runtime: setup.runtime,
            mode: setup.mode,
            seed: setup.seed,
            per_step: setup.n_groups * setup.group_size,
            group_size: setup.group_size,
            num_frames: tc.net.num_frames,
            buffer: VecDeque::new(),
            cap,
            incumbent,
            candidate: None,
        };
        me.read_back(steps_done as u64)?;
        Ok(me)
    }

    /// Kept rollouts, oldest first.
    pub fn kept(&self) -> impl Iterator<Item = &AnchorRollout> {
        self.buffer.iter()
    }

    /// The directory of the candle weights of the model in use.
    pub fn incumbent(&self) -> &Path {
        &self.incumbent
    }

    fn anchors_dir(&self) -> PathBuf {
        self.run_dir.join(ANCHORS_DIR)
    }

    fn read_back(&mut self, before_step: u64) -> Result<()> {
        let dir = self.anchors_dir();
        if !dir.is_dir() {
            return Ok(());
        }
        let mut all = Vec::new();
        for p in wmrl_env::list_episodes(&dir)? {
            let ep = wmrl_env::read_episode(&p)?;
            match AnchorRollout::from_episode(ep, p.clone()) {
                Some(a) if a.step < before_step => all.push(a),
                Some(_) => {}
                None => tracing::warn!(path = %p.display(), "not a kept anchor rollout; ignored"),
            }
        }
        all.sort_by_key(|a| (a.step, a.group, a.member));
        let skip = all.len().saturating_sub(self.cap);
        self.buffer = all.into_iter().skip(skip).collect();
        Ok(())
    }

    /// Keep the rollouts of step `step`'s anchor groups (written once to
    /// the run directory) with the real outcomes the correction loop read
    /// (`real`, in the order of `anchors`: the simulator's flag or a
    /// person's label; an ungraded rollout is not kept), dropping the
    /// oldest beyond the cap. The time goes to the ledger's world-model
    /// stage (no call counted).
    pub fn keep(
        &mut self,
        step: usize,
        rollouts: &[Rollout],
        anchors: &[usize],
        real: &[Vec<Option<f64>>],
        ledger: &mut Ledger,
    ) -> Result<()> {
        let t = Stopwatch::start();
        let mut groups: Vec<(usize, &Vec<Option<f64>>)> =
            anchors.iter().copied().zip(real).collect();
        groups.sort_unstable_by_key(|&(g, _)| g);
        let dir = self.anchors_dir();
        for (g, outcomes) in groups {
            let members = rollouts
                .get(g * self.group_size..(g + 1) * self.group_size)
                .ok_or_else(|| {
                    TrainError::Report(format!("anchor group {g} is not in the step"))
                })?;
            for (i, r) in members.iter().enumerate() {
                let Some(y) = outcomes.get(i).copied().flatten() else {
                    continue;
                };
                let frames = uniform_indices(r.frames.len(), self.num_frames)
                    .into_iter()
                    .map(|k| r.frames[k].clone())
                    .collect();
                let mut a = AnchorRollout {
                    step: step as u64,
                    group: g,
                    member: i,
                    instruction: r.instruction.clone(),
                    frames,
                    success: y > 0.5,
                    path: PathBuf::new(),
                };
                let index = step * self.per_step + g * self.group_size + i;
                a.path = wmrl_env::write_episode(&dir, index, &a.to_episode())?;
                self.buffer.push_back(a);
            }
        }
        while self.buffer.len() > self.cap {
            self.buffer.pop_front();
        }
        let (wall, cpu) = t.elapsed();
        ledger.wm_seconds += wall;
        ledger.wm_cpu_seconds += cpu;
        Ok(())
    }

    /// Delete the kept-rollout files the buffer no longer holds. Only after
    /// a checkpoint is committed: a resume from it needs nothing older.
    pub fn prune(&self) -> Result<()> {
        let dir = self.anchors_dir();
        if !dir.is_dir() {
            return Ok(());
        }
        let live: BTreeSet<&Path> = self.buffer.iter().map(|a| a.path.as_path()).collect();
        for p in wmrl_env::list_episodes(&dir)? {
            if !live.contains(p.as_path()) {
                std::fs::remove_file(&p).map_err(crate::error::io_err(&p))?;
            }
        }
        Ok(())
    }

    /// Fit a candidate after `done` steps on every kept rollout except the
    /// `held_out` groups', export and load it through ONNX Runtime, and
    /// return its scores of the held-out groups' members (in order).
    /// `None` when no kept rollout is left to learn from.
    pub fn candidate(
        &mut self,
        done: usize,
        held_out: &[AnchorGroup],
        ledger: &mut Ledger,
    ) -> Result<Option<Vec<Vec<f64>>>> {
        self.candidate = None;
        let held = AnchorGroup::keys(held_out);
        let (train_set, _): (Vec<&AnchorRollout>, Vec<_>) =
            self.buffer.iter().partition(|a| !held.contains(&a.key()));
        let skip = train_set.len().saturating_sub(self.fit.max_rollouts);
        let train_set = &train_set[skip..];
        if train_set.is_empty() {
            tracing::info!(
                done,
                "world-model refit skipped: every kept anchor rollout is held out"
            );
            return Ok(None);
        }
        let mut held_members: Vec<Vec<&AnchorRollout>> = Vec::with_capacity(held_out.len());
        for g in held_out {
            let mut m: Vec<&AnchorRollout> =
                self.buffer.iter().filter(|a| a.key() == g.key()).collect();
            m.sort_by_key(|a| a.member);
            if m.len() != g.real.len()
                || m.iter()
                    .zip(&g.real)
                    .any(|(a, &y)| (y - f64::from(u8::from(a.success))).abs() > 1e-9)
            {
                return Err(TrainError::Report(format!(
                    "refit after {done} steps: the kept rollouts of anchor group (step {}, group {}) do not match its {} graded outcomes",
                    g.step,
                    g.group,
                    g.real.len()
                )));
            }
            held_members.push(m);
        }

        let t = Stopwatch::start();
        let eps: Vec<_> = train_set
            .iter()
            .filter_map(|a| {
                wmrl_worldmodel::finetune::from_outcome(&a.instruction, a.frames.clone(), a.success)
            })
            .collect();
        let seed = SplitMix64::new(self.seed ^ 0x5EF1_7000 ^ (done as u64).wrapping_mul(0x9E37))
            .next_u64();
        let trained = fine_tune(&self.incumbent, &eps, &self.fit, seed)?;
        let rel = PathBuf::from(MODELS_DIR).join(format!("refit_{done:05}"));
        let dir = self.run_dir.join(&rel);
        let name = |a: &AnchorRollout| format!("s{}g{}m{}", a.step, a.group, a.member);
        let split = SplitRecord {
            train: train_set.iter().map(|a| name(a)).collect(),
            validation: held_members.iter().flatten().map(|a| name(a)).collect(),
            history: trained.history.clone(),
        };
        train::save(&dir, &trained, &split)?;
        let onnx = dir.join(train::ONNX_FILE);
        export_onnx(
            &trained.config.net,
            &trained.varmap,
            &onnx,
            &[("wmrl.refit_steps".into(), done.to_string())],
        )?;
        let (fit_seconds, fit_cpu_seconds) = t.elapsed();
        ledger.record(Stage::WorldModel, 0, fit_seconds);
        ledger.record_cpu(Stage::WorldModel, fit_cpu_seconds);

        let mut model = WorldModel::load_with(&onnx, self.runtime.clone())?;
        let t = Stopwatch::start();
        let frames: Vec<RolloutFrames<'_>> = held_members
            .iter()
            .flatten()
            .map(|a| RolloutFrames {
                instruction: &a.instruction,
                frames: a.frames.iter().collect(),
            })
            .collect();
        let scores = model.score(&frames, self.mode)?;
        let (wall, cpu) = t.elapsed();
        ledger.record(Stage::WorldModel, scores.len() as u64, wall);
        ledger.record_cpu(Stage::WorldModel, cpu);
        let mut it = scores.iter().map(|s| f64::from(s.score));
        let out: Vec<Vec<f64>> = held_members
            .iter()
            .map(|m| it.by_ref().take(m.len()).collect())
            .collect();
        self.candidate = Some(Candidate {
            dir,
            model,
            training_rollouts: train_set.len(),
            training_groups: train_set
                .iter()
                .map(|a| a.key())
                .collect::<BTreeSet<_>>()
                .len(),
            held_out_rollouts: frames.len(),
            fit_seconds,
            fit_cpu_seconds,
        });
        Ok(Some(out))
    }

    /// The verdict on the last candidate: recorded in refits.jsonl; when
    /// accepted its ONNX model is returned for the track to score with and
    /// its weights become the next refit's start.
    pub fn done(&mut self, decision: &RefitDecision) -> Result<Option<WorldModel>> {
        let Some(c) = self.candidate.take() else {
            return Ok(None);
        };
        let model = c
            .dir
            .join(train::ONNX_FILE)
            .strip_prefix(&self.run_dir)
            .map_or_else(|_| c.dir.join(train::ONNX_FILE), Path::to_path_buf);
        wmrl_run::append(
            &wmrl_run::RunDir::new(&self.run_dir).refits(),
            &RefitRecord {
                decision: decision.clone(),
                model: model.display().to_string(),
                training_rollouts: c.training_rollouts,
                training_groups: c.training_groups,
                held_out_rollouts: c.held_out_rollouts,
                fit_seconds: c.fit_seconds,
                fit_cpu_seconds: c.fit_cpu_seconds,
            },
        )?;
        if !decision.accepted {
            return Ok(None);
        }
        self.incumbent = c.dir;
        Ok(Some(c.model))
    }
}
