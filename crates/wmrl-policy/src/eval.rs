//! Evaluation through the one environment interface (`&mut dyn VecEnv`, so
//! in-process or over the bridge alike): every (task, initial state) pair
//! runs as one episode, all slots stepped in lock-step, the policy called
//! once per chunk for all running slots. Reports per-task success with 95%
//! Wilson intervals and the overall rate, and writes a few agent-view GIFs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use wmrl_env::{Episode, EpisodeStep, Frame, Observation, ResetRequest, VecEnv};

use crate::checkpoint::write_json;
use crate::error::io_err;
use crate::{Policy, PolicyError, PolicyInput, Result};

/// Evaluation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
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
        let (ci_low, ci_high) = wilson_interval(successes, episodes, 1.959_963_984_540_054);
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

/// Wilson score interval for `successes` out of `n` at normal quantile `z`.
pub fn wilson_interval(successes: usize, n: usize, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let nf = n as f64;
    let p = successes as f64 / nf;
    let z2 = z * z;
    let denom = 1.0 + z2 / nf;
    let centre = (p + z2 / (2.0 * nf)) / denom;
    let half = z * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

struct Running {
    ep: usize,
    obs: Observation,
    prev_frame: Option<Frame>,
    steps: usize,
    gif: Option<Vec<Frame>>,
    /// The steps so far, when episodes are written.
    record: Option<Vec<EpisodeStep>>,
    /// The reset's seed (written with the episode).
    seed: u64,
}

/// Run every (task, init state) episode of `cfg` and report success.
pub fn evaluate(policy: &Policy, env: &mut dyn VecEnv, cfg: &EvalConfig) -> Result<EvalReport> {
    evaluate_with_progress(policy, env, cfg, None)
}

/// [`evaluate`], counting finished episodes on `progress`.
pub fn evaluate_with_progress(
    policy: &Policy,
    env: &mut dyn VecEnv,
    cfg: &EvalConfig,
    progress: Option<&crate::Progress>,
) -> Result<EvalReport> {
    let t0 = Instant::now();
    let spec = env.spec().clone();
    let tasks: Vec<usize> = if cfg.tasks.is_empty() {
        (0..spec.tasks.len()).collect()
    } else {
        cfg.tasks.clone()
    };
    let mut queue: Vec<(usize, usize)> = Vec::new();
    for &t in &tasks {
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
    let chunk = policy.config().chunk;
    let exec = if cfg.execute_steps == 0 {
        chunk
    } else {
        cfg.execute_steps.min(chunk)
    };
    let n_slots = env.num_envs().max(1);
    let mut slots: Vec<Option<Running>> = (0..n_slots).map(|_| None).collect();
    let mut results: Vec<Option<EpisodeResult>> = vec![None; queue.len()];
    let mut next = 0usize;
    let (mut calls, mut env_steps, mut restarts) = (0usize, 0usize, 0usize);
    let mut gifs = Vec::new();
    loop {
        // Refill free slots.
        let mut reqs = Vec::new();
        for (slot, s) in slots.iter().enumerate() {
            if s.is_none() && next < queue.len() {
                let (task, init_state) = queue[next];
                reqs.push((
                    slot,
                    next,
                    ResetRequest {
                        task,
                        init_state,
                        seed: cfg.seed.wrapping_add(next as u64),
                    },
                ));
                next += 1;
            }
        }
        if !reqs.is_empty() {
            let pairs: Vec<(usize, ResetRequest)> = reqs.iter().map(|(s, _, r)| (*s, *r)).collect();
            let obs = env.reset(&pairs)?;
            // Restarts reported during a reset are already behind its
            // fresh observations.
            env.take_restarts();
            for ((slot, ep, req), o) in reqs.into_iter().zip(obs) {
                let gif = gif_eps
                    .contains(&ep)
                    .then(|| o.frames.first().cloned().into_iter().collect());
                slots[slot] = Some(Running {
                    ep,
                    obs: o,
                    prev_frame: None,
                    steps: 0,
                    gif,
                    record: cfg.episode_dir.as_ref().map(|_| Vec::new()),
                    seed: req.seed,
                });
            }
        }
        let active: Vec<usize> = (0..n_slots).filter(|&i| slots[i].is_some()).collect();
        if active.is_empty() {
            break;
        }
        let inputs: Vec<PolicyInput> = active
            .iter()
            .filter_map(|&i| slots[i].as_ref())
            .map(|r| {
                let (task, _) = queue[r.ep];
                PolicyInput::from_observation(
                    &spec.tasks[task].instruction,
                    &r.obs,
                    r.prev_frame.clone(),
                )
            })
            .collect();
        let seed = cfg
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(calls as u64);
        let samples = policy.sample(&inputs, cfg.temperature, seed)?;
        calls += 1;
        for (&slot, input) in active.iter().zip(&inputs) {
            if let Some(r) = slots[slot].as_mut() {
                r.prev_frame = input.frames.first().cloned();
            }
        }
        let mut live: Vec<(usize, usize)> = active
            .iter()
            .copied()
            .enumerate()
            .map(|(k, s)| (s, k))
            .collect();
        for j in 0..exec {
            if live.is_empty() {
                break;
            }
            let acts: Vec<(usize, Vec<f32>)> = live
                .iter()
                .map(|&(s, k)| (s, samples[k].actions[j].to_vec()))
                .collect();
            // Frames only where something looks at them: the policy's next
            // call (the chunk's last step), GIFs and recorded episodes. An
            // episode ended by the step cap needs none: its result is the
            // success flag and the oracle progress, which come either way.
            let observe = j + 1 == exec || cfg.gif_dir.is_some() || cfg.episode_dir.is_some();
            let out = env.step_observing(&acts, observe)?;
            env_steps += out.len();
            // A slot whose worker died restarted its episode from the same
            // reset: what this episode had is void, its result is this
            // observation, and the episode runs again from its first step.
            let restarted: Vec<usize> = env.take_restarts().iter().map(|r| r.slot).collect();
            let mut still = Vec::new();
            for ((s, k), res) in live.into_iter().zip(out) {
                let Some(r) = slots[s].as_mut() else { continue };
                if restarted.contains(&s) {
                    restarts += 1;
                    r.steps = 0;
                    r.prev_frame = None;
                    r.obs = res.obs;
                    if let Some(g) = r.gif.as_mut() {
                        g.clear();
                        g.extend(r.obs.frames.first().cloned());
                    }
                    if let Some(rec) = r.record.as_mut() {
                        rec.clear();
                    }
                    continue;
                }
                r.steps += 1;
                if let Some(rec) = r.record.as_mut() {
                    rec.push(EpisodeStep {
                        frames: r.obs.frames.clone(),
                        proprio: r.obs.proprio.clone(),
                        action: samples[k].actions[j].to_vec(),
                        progress: r.obs.progress,
                    });
                }
                if let (Some(g), Some(f)) = (r.gif.as_mut(), res.obs.frames.first())
                    && r.steps % cfg.gif_stride.max(1) == 0
                {
                    g.push(f.clone());
                }
                let capped = cfg.max_steps > 0 && r.steps >= cfg.max_steps;
                let ended = res.done || res.truncated || capped;
                let final_progress = res.obs.progress;
                r.obs = res.obs;
                if ended {
                    let (task, init_state) = queue[r.ep];
                    results[r.ep] = Some(EpisodeResult {
                        task,
                        init_state,
                        success: res.success,
                        steps: r.steps,
                        final_progress,
                    });
                    if let (Some(steps), Some(dir)) = (r.record.take(), &cfg.episode_dir)
                        && (res.success || !cfg.episode_successes_only)
                    {
                        let episode = Episode {
                            suite: spec.suite.clone(),
                            task,
                            init_state,
                            seed: r.seed,
                            instruction: spec.tasks[task].instruction.clone(),
                            cameras: spec.cameras.clone(),
                            success: res.success,
                            final_progress,
                            source: format!("policy T={}", cfg.temperature),
                            steps,
                        };
                        wmrl_env::write_episode(dir, r.ep, &episode)?;
                    }
                    if let (Some(frames), Some(dir)) = (r.gif.take(), &cfg.gif_dir) {
                        let tag = if res.success { "success" } else { "fail" };
                        let path = dir.join(format!("task{task:02}_init{init_state:03}_{tag}.gif"));
                        write_gif(&path, &frames)?;
                        gifs.push(path);
                    }
                    slots[s] = None;
                    if let Some(p) = progress {
                        p.inc(1);
                    }
                } else {
                    still.push((s, k));
                }
            }
            live = still;
        }
    }
    let episodes: Vec<EpisodeResult> = results.into_iter().flatten().collect();
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
    Ok(EvalReport {
        per_task,
        overall,
        episodes,
        policy_calls: calls,
        env_steps,
        restarts,
        wall_secs: t0.elapsed().as_secs_f64(),
        gifs,
    })
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
