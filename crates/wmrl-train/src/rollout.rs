//! Rollout collection through the shared episode runner
//! ([`wmrl_policy::episodes`], also evaluation's): the policy acts in chunks
//! of K actions, slots run in waves of `num_envs`, and every policy call is
//! kept (input, tokens, log-probs, mask) for the GRPO update, with the
//! agent-view frames the world model will score.

use wmrl_env::{Frame, Observation, ResetRequest, StepResult, VecEnv};
use wmrl_policy::episodes::{Dispatch, EpisodeObserver, RunOptions, run_episodes};
use wmrl_policy::{ACTION_DIM, ActionPolicy, PolicyInput, Sample};

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
    /// [`ActionPolicy::sample_with_features`]), kept only when the collection was
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
    /// The wrist camera's frames at the same observations, kept only when
    /// the collection was asked to ([`Keep::wrist`]: the label page shows
    /// them); empty otherwise or without a wrist camera.
    pub wrist: Vec<Frame>,
    /// The environment's oracle progress at the same observations as
    /// `frames` (`None` where the environment has no oracle, e.g. the real
    /// LIBERO simulator).
    pub progress: Vec<Option<f32>>,
    pub success: bool,
    pub steps: usize,
    /// Times the environment restarted this episode (dead worker).
    pub restarts: usize,
}

/// What a collection keeps beyond what the update and the world model need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// Each chunk's head inputs ([`ChunkRecord::features`]).
    pub features: bool,
    /// The wrist camera's frames ([`Rollout::wrist`]).
    pub wrist: bool,
}

/// Counters of one collection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CollectStats {
    pub env_steps: u64,
    pub policy_calls: u64,
    pub policy_seconds: f64,
    pub env_seconds: f64,
    /// Process CPU seconds of sampling and of the environment (in-process
    /// simulator; a bridge's workers are other processes).
    pub policy_cpu_seconds: f64,
    pub env_cpu_seconds: f64,
}

/// Run every episode in `specs` with `policy` sampling at `temperature`, in
/// waves of `num_envs` slots ([`Dispatch::Waves`] of the shared runner,
/// [`wmrl_policy::episodes`]). Deterministic for a given `seed` and
/// environment. `keep` says what else is recorded ([`Keep`]); the samples
/// are the same either way.
pub fn collect(
    policy: &dyn ActionPolicy,
    env: &mut dyn VecEnv,
    specs: &[EpisodeSpec],
    temperature: f32,
    max_steps: usize,
    seed: u64,
    keep: Keep,
) -> Result<(Vec<Rollout>, CollectStats)> {
    let tasks = env.spec().tasks.clone();
    let env_limit = tasks.iter().map(|t| t.max_steps).max().unwrap_or(0);
    let limit = if max_steps == 0 { env_limit } else { max_steps };
    let mut keeper = Keeper {
        wrist: keep.wrist,
        rollouts: specs
            .iter()
            .map(|&spec| Rollout {
                spec,
                instruction: tasks
                    .get(spec.task)
                    .map(|t| t.instruction.clone())
                    .unwrap_or_default(),
                chunks: Vec::new(),
                frames: Vec::new(),
                wrist: Vec::new(),
                progress: Vec::new(),
                success: false,
                steps: 0,
                restarts: 0,
            })
            .collect(),
    };
    let requests: Vec<ResetRequest> = specs
        .iter()
        .map(|s| ResetRequest {
            task: s.task,
            init_state: s.init_state,
            seed: s.seed,
        })
        .collect();
    let opts = RunOptions {
        dispatch: Dispatch::Waves,
        max_steps: limit.max(1),
        // The world model scores the last frame of an episode the cap ends.
        observe_at_cap: true,
        keep_features: keep.features,
        ..RunOptions::new(temperature, seed)
    };
    let stats = run_episodes(policy, env, &requests, &opts, &mut keeper)?;
    Ok((
        keeper.rollouts,
        CollectStats {
            env_steps: stats.env_steps,
            policy_calls: stats.policy_rows,
            policy_seconds: stats.policy_seconds,
            env_seconds: stats.env_seconds,
            policy_cpu_seconds: stats.policy_cpu_seconds,
            env_cpu_seconds: stats.env_cpu_seconds,
        },
    ))
}

/// The rollouts' [`EpisodeObserver`]: chunk records with their masks, and
/// the frames and oracle progress at every policy call and the last step.
struct Keeper {
    rollouts: Vec<Rollout>,
    wrist: bool,
}

impl EpisodeObserver for Keeper {
    fn called(
        &mut self,
        ep: usize,
        obs: &Observation,
        input: PolicyInput,
        sample: &Sample,
        features: Option<Vec<f32>>,
    ) {
        let r = &mut self.rollouts[ep];
        if let Some(f) = input.frames.first() {
            r.frames.push(f.clone());
            r.progress.push(obs.progress);
            if self.wrist
                && let Some(w) = obs.frames.get(1)
            {
                r.wrist.push(w.clone());
            }
        }
        r.chunks.push(ChunkRecord {
            input,
            tokens: sample.tokens.clone(),
            logprobs: sample.logprobs.clone(),
            mask: vec![0.0; sample.tokens.len()],
            features,
        });
    }
    fn stepped(
        &mut self,
        ep: usize,
        _before: &Observation,
        _action: &[f32; ACTION_DIM],
        result: &StepResult,
        step: usize,
    ) {
        let r = &mut self.rollouts[ep];
        r.steps = step;
        r.success |= result.success;
    }
    fn chunk_done(&mut self, ep: usize, executed: usize, ended: bool, obs: &Observation) {
        let r = &mut self.rollouts[ep];
        if let Some(c) = r.chunks.last_mut() {
            let n_tok = (executed * ACTION_DIM).min(c.mask.len());
            c.mask[..n_tok].iter_mut().for_each(|m| *m = 1.0);
        }
        if ended && let Some(f) = obs.frames.first() {
            r.frames.push(f.clone());
            r.progress.push(obs.progress);
            if self.wrist
                && let Some(w) = obs.frames.get(1)
            {
                r.wrist.push(w.clone());
            }
        }
    }
    fn restarted(&mut self, ep: usize, _obs: &Observation) {
        // The worker died: the episode starts over from its reset; what was
        // collected of it is void.
        let r = &mut self.rollouts[ep];
        r.chunks.clear();
        r.frames.clear();
        r.wrist.clear();
        r.progress.clear();
        r.steps = 0;
        r.success = false;
        r.restarts += 1;
    }
    fn ended(&mut self, _ep: usize, _last: &StepResult, _steps: usize) -> wmrl_policy::Result<()> {
        Ok(())
    }
}
