//! Evaluation through the one environment interface (`&mut dyn VecEnv`, so
//! in-process or over the bridge alike): every (task, initial state) pair
//! runs as one episode, all slots stepped in lock-step, the policy called
//! once per chunk for all running slots. Reports per-task success with 95%
//! Wilson intervals and the overall rate, and writes a few agent-view GIFs.
//! With [`EvalConfig::record`] each finished episode is recorded as it ends
//! and an interrupted evaluation can be resumed to the same report
//! ([`crate::eval_record`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use wmrl_env::{Episode, EpisodeStep, Frame, Observation, ResetRequest, VecEnv};

use crate::checkpoint::write_json;
use crate::episodes::{EpisodeObserver, Placement, RunOptions, run_episodes_after};
use crate::error::io_err;
use crate::eval_record::{Record, RecordSettings, RecordedEpisode};
use crate::{PolicyError, Result};

/// Evaluation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// Task indices; empty means all tasks of the environment.
    pub tasks: Vec<usize>,
    /// Initial states; LIBERO-style held-out states for wmrl are 16..=49.
    pub init_states: Vec<usize>,
    /// Sampling temperature; 0 is greedy (the usual VLA evaluation).
    pub temperature: f32,
    pub seed: u64,
    /// Episodes per (task, initial state); above 1 only makes sense when
    /// sampling (the paper's measure: mean success over 8 sampled rollouts
    /// per initial state). Each repeat draws its own random stream.
    pub repeats: usize,
    /// Actions executed per policy call; 0 executes the whole chunk.
    pub execute_steps: usize,
    /// Stop an episode after this many steps even if the environment has
    /// not (0: rely on the environment's own limit).
    pub max_steps: usize,
    /// Where to write rollout GIFs; none when unset.
    pub gif_dir: Option<PathBuf>,
    /// How many episodes get a GIF (the first init state of the first tasks).
    pub n_gifs: usize,
    /// Keep every n-th frame in a GIF.
    pub gif_stride: usize,
    /// Write every episode (each step's frames, proprio, the action taken
    /// and the oracle progress) in the episode format (docs/episodes.md)
    /// to this directory, as `ep_NNNNNN.msgpack` numbered by the episode's
    /// position in the evaluation (task-major, then initial state, then
    /// repeat); none when unset. `wmrl sft` reads such a directory like
    /// demonstrations (successful episodes only, by default).
    pub episode_dir: Option<PathBuf>,
    /// With `episode_dir`: write only the successful episodes.
    pub episode_successes_only: bool,
    /// Record every finished episode in this JSON-lines file as it ends
    /// ([`crate::eval_record`]); none when unset. A record that already
    /// holds episodes is an error unless `resume` is set.
    pub record: Option<PathBuf>,
    /// With `record`: continue the evaluation it records (the same
    /// settings, policy and slot count, else an error); its episodes are
    /// not run again and the report equals an uninterrupted evaluation's
    /// (all but `wall_secs`). A missing record starts afresh.
    pub resume: bool,
    /// Names the policy in the record (e.g. a digest of its weights): a
    /// record of another policy is not resumed.
    pub policy_id: String,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            tasks: Vec::new(),
            init_states: (16..50).collect(),
            temperature: 0.0,
            seed: 0,
            repeats: 1,
            execute_steps: 0,
            max_steps: 0,
            gif_dir: None,
            n_gifs: 3,
            gif_stride: 2,
            episode_dir: None,
            episode_successes_only: false,
            record: None,
            resume: false,
            policy_id: String::new(),
        }
    }
}

/// Success of one group of episodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateSummary {
    pub episodes: usize,
    pub successes: usize,
    pub rate: f64,
    /// 95% Wilson score interval.
    pub ci_low: f64,
    pub ci_high: f64,
}

impl RateSummary {
    pub fn new(successes: usize, episodes: usize) -> Self {
        let (ci_low, ci_high) = wilson_interval(successes, episodes, wmrl_core::stats::Z_95);
        Self {
            episodes,
            successes,
            rate: if episodes > 0 {
                successes as f64 / episodes as f64
            } else {
                0.0
            },
            ci_low,
            ci_high,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub task: usize,
    pub name: String,
    /// Mean final oracle progress, where the environment reports it.
    pub mean_progress: Option<f64>,
    #[serde(flatten)]
    pub summary: RateSummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeResult {
    pub task: usize,
    pub init_state: usize,
    pub success: bool,
    pub steps: usize,
    /// The environment's oracle progress at the end, where it has one.
    pub final_progress: Option<f32>,
}

/// Everything an evaluation measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub per_task: Vec<TaskResult>,
    pub overall: RateSummary,
    pub episodes: Vec<EpisodeResult>,
    pub policy_calls: usize,
    pub env_steps: usize,
    /// Episodes the environment restarted (a dead worker) and that ran
    /// again from their reset; none of them counts twice.
    #[serde(default)]
    pub restarts: usize,
    pub wall_secs: f64,
    pub gifs: Vec<PathBuf>,
}

impl EvalReport {
    /// A plain-text table: one row per task, then the overall rate.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<4} {:<48} {:>5} {:>8} {:>16}\n",
            "task", "name", "n", "success", "95% Wilson"
        );
        let row = |id: &str, name: &str, r: &RateSummary| {
            format!(
                "{id:<4} {name:<48} {:>5} {:>7.1}% [{:>5.1}%, {:>5.1}%]\n",
                r.episodes,
                100.0 * r.rate,
                100.0 * r.ci_low,
                100.0 * r.ci_high
            )
        };
        for t in &self.per_task {
            let name: String = t.name.chars().take(48).collect();
            s.push_str(&row(&t.task.to_string(), &name, &t.summary));
        }
        s.push_str(&row("all", "", &self.overall));
        s
    }

    pub fn write_json(&self, path: &Path) -> Result<()> {
        write_json(path, self)
    }
}

use wmrl_core::stats::wilson_interval;

/// What evaluation keeps of a running episode.
#[derive(Clone)]
struct Running {
    gif: Option<Vec<Frame>>,
    /// The steps so far, when episodes are written.
    record: Option<Vec<EpisodeStep>>,
}

/// Evaluation's [`EpisodeObserver`]: results, GIFs and recorded episodes.
struct Keeper<'a> {
    cfg: &'a EvalConfig,
    spec: &'a wmrl_env::EnvSpec,
    requests: &'a [ResetRequest],
    progress: Option<&'a wmrl_run::Progress>,
    gif_eps: Vec<usize>,
    running: Vec<Option<Running>>,
    results: Vec<Option<EpisodeResult>>,
    gifs: Vec<PathBuf>,
    record: Option<Record>,
    placements: Vec<Option<Placement>>,
}

impl Keeper<'_> {
    fn fresh(&self, ep: usize, obs: &Observation) -> Running {
        Running {
            gif: self
                .gif_eps
                .contains(&ep)
                .then(|| obs.frames.first().cloned().into_iter().collect()),
            record: self.cfg.episode_dir.as_ref().map(|_| Vec::new()),
        }
    }
}

impl EpisodeObserver for Keeper<'_> {
    fn started(&mut self, ep: usize, obs: &Observation) {
        self.running[ep] = Some(self.fresh(ep, obs));
    }
    fn restarted(&mut self, ep: usize, obs: &Observation) {
        self.running[ep] = Some(self.fresh(ep, obs));
    }
    fn placed(&mut self, ep: usize, placement: &Placement) {
        self.placements[ep] = Some(*placement);
    }
    fn stepped(
        &mut self,
        ep: usize,
        before: &Observation,
        action: &[f32; crate::ACTION_DIM],
        result: &wmrl_env::StepResult,
        step: usize,
    ) {
        let Some(r) = self.running[ep].as_mut() else {
            return;
        };
        if let Some(rec) = r.record.as_mut() {
            rec.push(EpisodeStep {
                frames: before.frames.clone(),
                proprio: before.proprio.clone(),
                action: action.to_vec(),
                progress: before.progress,
            });
        }
        if let (Some(g), Some(f)) = (r.gif.as_mut(), result.obs.frames.first())
            && step.is_multiple_of(self.cfg.gif_stride.max(1))
        {
            g.push(f.clone());
        }
    }
    fn ended(&mut self, ep: usize, last: &wmrl_env::StepResult, steps: usize) -> Result<()> {
        let ResetRequest {
            task,
            init_state,
            seed,
        } = self.requests[ep];
        let final_progress = last.obs.progress;
        let result = EpisodeResult {
            task,
            init_state,
            success: last.success,
            steps,
            final_progress,
        };
        self.results[ep] = Some(result.clone());
        let gif = self.running[ep]
            .take()
            .map(|r| self.keep(ep, r, last))
            .transpose()?
            .flatten();
        if let Some(p) = self.progress {
            p.inc(1);
        }
        let (Some(record), Some(placement)) = (self.record.as_mut(), self.placements[ep]) else {
            return Ok(());
        };
        record.append(&RecordedEpisode {
            index: ep,
            seed,
            result,
            placement,
            gif,
        })
    }
}

impl Keeper<'_> {
    /// Write what is kept of a finished episode: its recording and its GIF
    /// (returned).
    fn keep(
        &mut self,
        ep: usize,
        r: Running,
        last: &wmrl_env::StepResult,
    ) -> Result<Option<PathBuf>> {
        let ResetRequest {
            task,
            init_state,
            seed,
        } = self.requests[ep];
        let final_progress = last.obs.progress;
        if let (Some(steps), Some(dir)) = (r.record, &self.cfg.episode_dir)
            && (last.success || !self.cfg.episode_successes_only)
        {
            let episode = Episode {
                suite: self.spec.suite.clone(),
                task,
                init_state,
                seed,
                instruction: self.spec.tasks[task].instruction.clone(),
                cameras: self.spec.cameras.clone(),
                success: last.success,
                final_progress,
                source: format!("policy T={}", self.cfg.temperature),
                steps,
            };
            wmrl_env::write_episode(dir, ep, &episode)?;
        }
        if let (Some(frames), Some(dir)) = (r.gif, &self.cfg.gif_dir) {
            let tag = if last.success { "success" } else { "fail" };
            let path = dir.join(format!("task{task:02}_init{init_state:03}_{tag}.gif"));
            write_gif(&path, &frames)?;
            self.gifs.push(path.clone());
            return Ok(Some(path));
        }
        Ok(None)
    }
}

/// Run every (task, init state) episode of `cfg` and report success.
pub fn evaluate(
    policy: &dyn crate::ActionPolicy,
    env: &mut dyn VecEnv,
    cfg: &EvalConfig,
) -> Result<EvalReport> {
    evaluate_with_progress(policy, env, cfg, None)
}

/// [`evaluate`], counting finished episodes on `progress`.
pub fn evaluate_with_progress(
    policy: &dyn crate::ActionPolicy,
    env: &mut dyn VecEnv,
    cfg: &EvalConfig,
    progress: Option<&wmrl_run::Progress>,
) -> Result<EvalReport> {
    let t0 = Instant::now();
    let spec = env.spec().clone();
    let tasks: Vec<usize> = if cfg.tasks.is_empty() {
        (0..spec.tasks.len()).collect()
    } else {
        cfg.tasks.clone()
    };
    let queue = episode_queue(&spec, &tasks, cfg)?;
    let gif_eps: Vec<usize> = match (&cfg.gif_dir, cfg.init_states.first()) {
        (Some(_), Some(&s0)) => queue
            .iter()
            .enumerate()
            .filter(|(_, q)| q.1 == s0)
            .map(|(i, _)| i)
            .take(cfg.n_gifs)
            .collect(),
        _ => Vec::new(),
    };
    let requests: Vec<ResetRequest> = queue
        .iter()
        .enumerate()
        .map(|(i, &(task, init_state))| ResetRequest {
            task,
            init_state,
            seed: cfg.seed.wrapping_add(i as u64),
        })
        .collect();
    let (record, recorded) = match &cfg.record {
        Some(path) => {
            let settings = RecordSettings {
                policy: cfg.policy_id.clone(),
                suite: spec.suite.clone(),
                num_envs: env.num_envs(),
                tasks: tasks.clone(),
                init_states: cfg.init_states.clone(),
                repeats: cfg.repeats.max(1),
                seed: cfg.seed,
                temperature: cfg.temperature,
                execute_steps: cfg.execute_steps,
                max_steps: cfg.max_steps,
            };
            let (r, done) = Record::open(path, &settings, &requests, cfg.resume)?;
            (Some(r), done)
        }
        None => (None, Vec::new()),
    };
    let mut results: Vec<Option<EpisodeResult>> = vec![None; requests.len()];
    let mut ended: Vec<Option<Placement>> = vec![None; requests.len()];
    for r in &recorded {
        results[r.index] = Some(r.result.clone());
        ended[r.index] = Some(r.placement);
    }
    let mut keep = Keeper {
        cfg,
        spec: &spec,
        requests: &requests,
        progress,
        gif_eps,
        running: vec![None; queue.len()],
        results,
        // In the order they were written, as an uninterrupted run lists them.
        gifs: recorded.iter().filter_map(|r| r.gif.clone()).collect(),
        record,
        placements: vec![None; queue.len()],
    };
    let opts = RunOptions {
        execute_steps: cfg.execute_steps,
        max_steps: cfg.max_steps,
        // An episode ended by the cap needs no frame: its result is the
        // success flag and the oracle progress, which come either way.
        observe_at_cap: false,
        observe_every_step: cfg.gif_dir.is_some() || cfg.episode_dir.is_some(),
        ..RunOptions::new(cfg.temperature, cfg.seed)
    };
    if let Some(p) = progress {
        p.inc(recorded.len() as u64);
    }
    let stats = match run_episodes_after(policy, env, &requests, &ended, &opts, &mut keep) {
        Ok(s) => s,
        Err(cause) => {
            let done: Vec<&EpisodeResult> = keep.results.iter().flatten().collect();
            return Err(PolicyError::EvalStopped {
                finished: done.len(),
                total: requests.len(),
                successes: done.iter().filter(|e| e.success).count(),
                kept: cfg.record.as_ref().map_or_else(
                    || "not recorded".into(),
                    |p| format!("recorded in {}", p.display()),
                ),
                cause: Box::new(cause),
            });
        }
    };
    let (results, gifs) = (keep.results, keep.gifs);
    let episodes: Vec<EpisodeResult> = results.into_iter().flatten().collect();
    let (per_task, overall) = summarise(&spec, &tasks, &episodes);
    Ok(EvalReport {
        per_task,
        overall,
        episodes,
        policy_calls: stats.policy_batches as usize,
        env_steps: stats.env_steps as usize,
        restarts: stats.restarts as usize,
        wall_secs: t0.elapsed().as_secs_f64(),
        gifs,
    })
}

/// The (task, initial state) of every episode, each repeated
/// `cfg.repeats` times; an unknown task or state is an error.
fn episode_queue(
    spec: &wmrl_env::EnvSpec,
    tasks: &[usize],
    cfg: &EvalConfig,
) -> Result<Vec<(usize, usize)>> {
    let mut queue: Vec<(usize, usize)> = Vec::new();
    for &t in tasks {
        let task = spec
            .tasks
            .get(t)
            .ok_or_else(|| PolicyError::Input(format!("unknown task {t}")))?;
        for &s in &cfg.init_states {
            if s >= task.n_init_states {
                return Err(PolicyError::Input(format!(
                    "task {t} has {} init states, asked for {s}",
                    task.n_init_states
                )));
            }
            for _ in 0..cfg.repeats.max(1) {
                queue.push((t, s));
            }
        }
    }
    Ok(queue)
}

/// Success per task (with mean final progress) and over all episodes.
fn summarise(
    spec: &wmrl_env::EnvSpec,
    tasks: &[usize],
    episodes: &[EpisodeResult],
) -> (Vec<TaskResult>, RateSummary) {
    let per_task = tasks
        .iter()
        .map(|&t| {
            let eps: Vec<&EpisodeResult> = episodes.iter().filter(|e| e.task == t).collect();
            let prog: Vec<f64> = eps
                .iter()
                .filter_map(|e| e.final_progress)
                .map(f64::from)
                .collect();
            TaskResult {
                task: t,
                name: spec.tasks[t].name.clone(),
                mean_progress: (!prog.is_empty())
                    .then(|| prog.iter().sum::<f64>() / prog.len() as f64),
                summary: RateSummary::new(eps.iter().filter(|e| e.success).count(), eps.len()),
            }
        })
        .collect();
    let overall = RateSummary::new(
        episodes.iter().filter(|e| e.success).count(),
        episodes.len(),
    );
    (per_task, overall)
}

/// Write RGB frames as a looping GIF (100 ms a frame).
pub fn write_gif(path: &Path, frames: &[Frame]) -> Result<()> {
    use image::codecs::gif::{GifEncoder, Repeat};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    }
    let file = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    let mut enc = GifEncoder::new_with_speed(std::io::BufWriter::new(file), 10);
    enc.set_repeat(Repeat::Infinite)
        .map_err(|e| io_err(path, e))?;
    for f in frames {
        let rgba: Vec<u8> = f
            .rgb
            .chunks(3)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect();
        let img = image::RgbaImage::from_raw(f.width, f.height, rgba)
            .ok_or_else(|| PolicyError::Input("frame size mismatch".into()))?;
        let frame = image::Frame::from_parts(img, 0, 0, image::Delay::from_numer_denom_ms(100, 1));
        enc.encode_frame(frame).map_err(|e| io_err(path, e))?;
    }
    Ok(())
}
