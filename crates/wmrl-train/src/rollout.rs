//! Rollout collection through the one environment interface: the policy acts
//! in chunks of K actions, slots run in waves of `num_envs`, and every policy
//! call is kept (input, tokens, log-probs, mask) for the GRPO update, with the
//! agent-view frames the world model will score.

use wmrl_env::{Frame, ResetRequest, VecEnv};
use wmrl_policy::{ACTION_DIM, Policy, PolicyInput};

use crate::Result;

/// One episode to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeSpec {
    pub group: usize,
    pub task: usize,
    pub init_state: usize,
    pub seed: u64,
}

/// One policy call of a rollout.
#[derive(Debug, Clone)]
pub struct ChunkRecord {
    pub input: PolicyInput,
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
    /// 1 for tokens of actions that were executed, 0 after the episode ended.
    pub mask: Vec<f32>,
    /// The action head's inputs at sampling time (`n * d_model` floats,
    /// [`Policy::sample_with_features`]), kept only when the collection was
    /// asked to: a head-only update reuses them.
    pub features: Option<Vec<f32>>,
}

/// A finished rollout.
#[derive(Debug, Clone)]
pub struct Rollout {
    pub spec: EpisodeSpec,
    pub instruction: String,
    pub chunks: Vec<ChunkRecord>,
    /// Agent-view frames at every policy call and the last one.
    pub frames: Vec<Frame>,
    /// The environment's oracle progress at the same observations as
    /// `frames` (`None` where the environment has no oracle, e.g. the real
    /// LIBERO simulator).
    pub progress: Vec<Option<f32>>,
    pub success: bool,
    pub steps: usize,
    /// Times the environment restarted this episode (dead worker).
    pub restarts: usize,
}

struct Live {
    spec: EpisodeSpec,
    rollout: Rollout,
    obs: Option<wmrl_env::Observation>,
    prev_frame: Option<Frame>,
    done: bool,
}

/// Counters of one collection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CollectStats {
    pub env_steps: u64,
    pub policy_calls: u64,
    pub policy_seconds: f64,
    pub env_seconds: f64,
}

/// Run every episode in `specs` with `policy` sampling at `temperature`.
/// Deterministic for a given `seed` and environment. `keep_features`
/// records each chunk's head inputs ([`ChunkRecord::features`]); the
/// samples are the same either way.
pub fn collect(
    policy: &Policy,
    env: &mut dyn VecEnv,
    specs: &[EpisodeSpec],
    temperature: f32,
    max_steps: usize,
    seed: u64,
    keep_features: bool,
) -> Result<(Vec<Rollout>, CollectStats)> {
    let n_slots = env.num_envs();
    let tasks = env.spec().tasks.clone();
    let env_limit = tasks.iter().map(|t| t.max_steps).max().unwrap_or(0);
    let limit = if max_steps == 0 { env_limit } else { max_steps };
    let chunk = policy.config().chunk;
    let mut out = Vec::with_capacity(specs.len());
    let mut stats = CollectStats::default();
    for (wave_idx, wave) in specs.chunks(n_slots).enumerate() {
        let mut live: Vec<Live> = wave
            .iter()
            .map(|&spec| Live {
                spec,
                rollout: Rollout {
                    spec,
                    instruction: tasks
                        .get(spec.task)
                        .map(|t| t.instruction.clone())
                        .unwrap_or_default(),
                    chunks: Vec::new(),
                    frames: Vec::new(),
                    progress: Vec::new(),
                    success: false,
                    steps: 0,
                    restarts: 0,
                },
                obs: None,
                prev_frame: None,
                done: false,
            })
            .collect();
        let resets: Vec<(usize, ResetRequest)> = live
            .iter()
            .enumerate()
            .map(|(slot, l)| {
                (
                    slot,
                    ResetRequest {
                        task: l.spec.task,
                        init_state: l.spec.init_state,
                        seed: l.spec.seed,
                    },
                )
            })
            .collect();
        let t = std::time::Instant::now();
        let obs = env.reset(&resets)?;
        stats.env_seconds += t.elapsed().as_secs_f64();
        // Restarts reported during a reset are already behind its fresh
        // observations (and stale ones must not void this wave's chunks).
        env.take_restarts();
        for (l, o) in live.iter_mut().zip(obs) {
            l.obs = Some(o);
        }
        let mut call = 0u64;
        while live.iter().any(|l| !l.done) {
            // One policy call for every running slot.
            let active: Vec<usize> = (0..live.len()).filter(|&i| !live[i].done).collect();
            let inputs: Vec<PolicyInput> = active
                .iter()
                .map(|&i| {
                    let l = &live[i];
                    let obs = l.obs.as_ref().expect("reset slots have an observation");
                    PolicyInput::from_observation(&l.rollout.instruction, obs, l.prev_frame.clone())
                })
                .collect();
            let t = std::time::Instant::now();
            let call_seed = seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(((wave_idx as u64) << 32) | call);
            let (samples, mut features) = if keep_features {
                policy.sample_with_features(&inputs, temperature, call_seed)?
            } else {
                (policy.sample(&inputs, temperature, call_seed)?, Vec::new())
            };
            stats.policy_seconds += t.elapsed().as_secs_f64();
            stats.policy_calls += active.len() as u64;
            call += 1;
            let mut executed = vec![0usize; active.len()];
            for (k, (&i, input)) in active.iter().zip(inputs).enumerate() {
                let l = &mut live[i];
                if let Some(f) = input.frames.first() {
                    l.rollout.frames.push(f.clone());
                    l.rollout
                        .progress
                        .push(l.obs.as_ref().and_then(|o| o.progress));
                    l.prev_frame = Some(f.clone());
                }
                l.rollout.chunks.push(ChunkRecord {
                    input,
                    tokens: samples[k].tokens.clone(),
                    logprobs: samples[k].logprobs.clone(),
                    mask: vec![0.0; samples[k].tokens.len()],
                    features: features.get_mut(k).map(std::mem::take),
                });
            }
            // Execute the chunk's actions, stepping only running slots.
            for j in 0..chunk {
                let acts: Vec<(usize, Vec<f32>)> = active
                    .iter()
                    .enumerate()
                    .filter(|(k, i)| !live[**i].done && executed[*k] != usize::MAX)
                    .map(|(k, &i)| (i, samples[k].actions[j].to_vec()))
                    .collect();
                if acts.is_empty() {
                    break;
                }
                // Frames are needed only where the next policy call (or the
                // world model) looks: the chunk's last step, a slot's last
                // step by the step limit (the environment renders at its own
                // episode ends).
                let observe = j + 1 == chunk
                    || acts
                        .iter()
                        .any(|(slot, _)| live[*slot].rollout.steps + 1 >= limit.max(1));
                let t = std::time::Instant::now();
                let results = env.step_observing(&acts, observe)?;
                stats.env_seconds += t.elapsed().as_secs_f64();
                stats.env_steps += acts.len() as u64;
                let restarted: Vec<usize> = env.take_restarts().iter().map(|r| r.slot).collect();
                for ((slot, _), r) in acts.iter().zip(results) {
                    let l = &mut live[*slot];
                    // `active` is ascending, so the slot's index is a binary search.
                    let k = active.binary_search(slot).unwrap_or(0);
                    if restarted.contains(slot) {
                        // The worker died: the episode starts over from its
                        // reset; what was collected of it is void.
                        l.rollout.chunks.clear();
                        l.rollout.frames.clear();
                        l.rollout.progress.clear();
                        l.rollout.steps = 0;
                        l.rollout.success = false;
                        l.rollout.restarts += 1;
                        l.prev_frame = None;
                        l.obs = Some(r.obs);
                        executed[k] = usize::MAX;
                        continue;
                    }
                    if executed[k] == usize::MAX {
                        continue;
                    }
                    executed[k] += 1;
                    l.rollout.steps += 1;
                    l.rollout.success |= r.success;
                    let over = r.done || r.truncated || l.rollout.steps >= limit.max(1);
                    l.obs = Some(r.obs);
                    if over {
                        l.done = true;
                    }
                }
            }
            for (k, &i) in active.iter().enumerate() {
                let l = &mut live[i];
                if executed[k] == usize::MAX {
                    continue;
                }
                if let Some(c) = l.rollout.chunks.last_mut() {
                    let n_tok = (executed[k] * ACTION_DIM).min(c.mask.len());
                    c.mask[..n_tok].iter_mut().for_each(|m| *m = 1.0);
                }
                if l.done
                    && let Some(o) = l.obs.as_ref()
                    && let Some(f) = o.frames.first()
                {
                    l.rollout.frames.push(f.clone());
                    l.rollout.progress.push(o.progress);
                }
            }
        }
        out.extend(live.into_iter().map(|l| l.rollout));
    }
    Ok((out, stats))
}
