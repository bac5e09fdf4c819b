//! The one episode runner, shared by training rollouts (wmrl-train) and
//! evaluation ([`crate::evaluate`]): episodes run on the environment's slots,
//! the policy is called once per chunk for every running slot, the chunk's
//! actions are executed step by step, and an episode whose worker died (the
//! bridge's restarts) starts over from its reset with what it had voided.
//!
//! What each caller keeps of an episode (chunk records and masks for GRPO,
//! frames for the world model, GIFs, recorded episodes, results) it keeps
//! through an [`EpisodeObserver`]; the runner owns the schedule, the seeds
//! and the restarts, so both callers get them the same way.
//!
//! The policy's sampling seed for a call is `seed * φ64 + ((wave << 32) |
//! call)`, where `call` counts the policy calls of the current wave. With
//! [`Dispatch::Waves`] (training) a wave is one slot-sized batch of
//! episodes, reset together and run until all have ended; with
//! [`Dispatch::Refill`] (evaluation) a slot is refilled as soon as its
//! episode ends and the whole run is one wave. Row `r` of a call draws
//! from stream `r` of the call's seed ([`ActionPolicy::sample_streams`]).
//!
//! A refill run can continue one that stopped early
//! ([`run_episodes_after`]): the episodes that had ended are not run again
//! but hold their slots for the policy calls they held ([`Placement`]), so
//! the episodes still to run get the same slots, call seeds and rows, and
//! the same samples, as in a run that never stopped.

use wmrl_run::clock::Stopwatch;

use serde::{Deserialize, Serialize};
use wmrl_env::{Observation, ResetRequest, StepResult, VecEnv};

use crate::{ACTION_DIM, ActionPolicy, PolicyError, PolicyInput, Result, Sample};

/// When free slots get the next episodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Reset a full batch of slots together and run it until every episode
    /// in it has ended (each wave restarts the call counter of the seeds).
    Waves,
    /// Give a slot the next episode as soon as its episode ends.
    Refill,
}

/// How to run the episodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunOptions {
    /// Sampling temperature (`<= 0`: greedy).
    pub temperature: f32,
    /// Base of every policy call's sampling seed.
    pub seed: u64,
    pub dispatch: Dispatch,
    /// Actions executed per policy call (0 or more than the chunk: the
    /// whole chunk).
    pub execute_steps: usize,
    /// Steps after which an episode ends (0: only the environment's own
    /// limit ends it).
    pub max_steps: usize,
    /// Render at the step that reaches `max_steps` (where the last frame is
    /// looked at, e.g. by the world model).
    pub observe_at_cap: bool,
    /// Render at every step (GIFs, recorded episodes).
    pub observe_every_step: bool,
    /// Call [`ActionPolicy::sample_with_features`] and hand each sample's action
    /// head inputs to the observer (samples are the same either way).
    pub keep_features: bool,
}

impl RunOptions {
    /// Options for `temperature` and `seed`: refill schedule, whole chunks,
    /// no cap of its own, frames only where the policy looks.
    pub fn new(temperature: f32, seed: u64) -> Self {
        Self {
            temperature,
            seed,
            dispatch: Dispatch::Refill,
            execute_steps: 0,
            max_steps: 0,
            observe_at_cap: false,
            observe_every_step: false,
            keep_features: false,
        }
    }
}

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunStats {
    /// Policy calls (one batched forward pass each).
    pub policy_batches: u64,
    /// Policy rows (one per running slot and call).
    pub policy_rows: u64,
    pub env_steps: u64,
    /// Episodes restarted after their worker died.
    pub restarts: u64,
    pub policy_seconds: f64,
    pub env_seconds: f64,
    /// Process CPU seconds of the same phases ([`wmrl_run::clock`]).
    pub policy_cpu_seconds: f64,
    pub env_cpu_seconds: f64,
}

/// Where an episode ran in the schedule: what a continued run needs to let
/// it hold its slot without running it ([`run_episodes_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub slot: usize,
    /// The run's policy-call count when the episode started (its first
    /// call's number).
    pub first_call: u64,
    /// Policy calls the episode was in, those voided by a restart included.
    pub calls: u64,
    /// Environment steps of the episode, restarts' voided ones included.
    pub env_steps: u64,
    /// Times its worker died and it started over.
    pub restarts: u64,
}

/// What a caller keeps of its episodes. `ep` is the episode's index in the
/// request list. Every method but [`Self::ended`] defaults to nothing.
pub trait EpisodeObserver {
    /// Episode `ep` was reset and starts at `obs`.
    fn started(&mut self, ep: usize, obs: &Observation) {
        let _ = (ep, obs);
    }
    /// The policy was called at `obs`: `input` is what it saw, `sample`
    /// what it drew, `features` its action head inputs when asked for.
    fn called(
        &mut self,
        ep: usize,
        obs: &Observation,
        input: PolicyInput,
        sample: &Sample,
        features: Option<Vec<f32>>,
    ) {
        let _ = (ep, obs, input, sample, features);
    }
    /// One action was executed from `before`, giving `result`; `step` is
    /// the episode's step count after it.
    fn stepped(
        &mut self,
        ep: usize,
        before: &Observation,
        action: &[f32; ACTION_DIM],
        result: &StepResult,
        step: usize,
    ) {
        let _ = (ep, before, action, result, step);
    }
    /// The current chunk of `ep` is over after `executed` of its actions;
    /// `obs` is the latest observation. Not called for a chunk voided by a
    /// restart.
    fn chunk_done(&mut self, ep: usize, executed: usize, ended: bool, obs: &Observation) {
        let _ = (ep, executed, ended, obs);
    }
    /// The worker of `ep` died: the episode starts over from its reset at
    /// `obs`, and everything kept of it so far is void.
    fn restarted(&mut self, ep: usize, obs: &Observation) {
        let _ = (ep, obs);
    }
    /// Where episode `ep` ran; told just before [`Self::ended`].
    fn placed(&mut self, ep: usize, placement: &Placement) {
        let _ = (ep, placement);
    }
    /// Episode `ep` ended with `last` (success, limit or cap) after `steps`.
    fn ended(&mut self, ep: usize, last: &StepResult, steps: usize) -> Result<()>;
}

struct Slot {
    ep: usize,
    obs: Observation,
    prev_frame: Option<wmrl_env::Frame>,
    steps: usize,
    first_call: u64,
    calls: u64,
    env_steps: u64,
    restarts: u64,
    /// An episode of the earlier run: the policy calls it still holds.
    replay_calls_left: Option<u64>,
}

impl Slot {
    fn placement(&self, slot: usize) -> Placement {
        Placement {
            slot,
            first_call: self.first_call,
            calls: self.calls,
            env_steps: self.env_steps,
            restarts: self.restarts,
        }
    }
}

/// Run the episodes of `requests` (one reset each, in order) with `policy`
/// on `env`, telling `observer` what happens. Deterministic for given
/// options and environment: the schedule fixes which slots run together.
pub fn run_episodes(
    policy: &dyn ActionPolicy,
    env: &mut dyn VecEnv,
    requests: &[ResetRequest],
    opts: &RunOptions,
    observer: &mut dyn EpisodeObserver,
) -> Result<RunStats> {
    run_episodes_after(policy, env, requests, &[], opts, observer)
}

/// [`run_episodes`] continuing a run that stopped early: `ended[ep]` is
/// where episode `ep` ran in it, if it ended there. Those episodes are not
/// run again and the observer hears nothing of them; each holds its
/// recorded slot for its recorded policy calls, and their calls, rows,
/// steps and restarts count in the stats as they did then. Needs
/// [`Dispatch::Refill`] and the environment's slot count of the earlier
/// run: an episode the schedule would place elsewhere is an error.
pub fn run_episodes_after(
    policy: &dyn ActionPolicy,
    env: &mut dyn VecEnv,
    requests: &[ResetRequest],
    ended: &[Option<Placement>],
    opts: &RunOptions,
    observer: &mut dyn EpisodeObserver,
) -> Result<RunStats> {
    let replaying = ended.iter().any(Option::is_some);
    if replaying && (opts.dispatch != Dispatch::Refill || opts.keep_features) {
        return Err(PolicyError::Input(
            "only a refill run without features can continue an earlier one".into(),
        ));
    }
    let mut run = Runner::new(policy, env, requests, ended, opts, observer);
    loop {
        run.fill_free_slots()?;
        let occupied: Vec<usize> = (0..run.slots.len())
            .filter(|&i| run.slots[i].is_some())
            .collect();
        if occupied.is_empty() {
            break;
        }
        let batch = run.call_policy(&occupied)?;
        run.count_call(&occupied);
        let (active, samples) = run.tell_called(batch);
        run.execute_chunk(&active, &samples)?;
    }
    Ok(run.stats)
}

/// One policy call's rows that were sampled: their slots, in slot order,
/// with what the policy saw and drew there.
struct Batch {
    /// Slots of the sampled rows (replayed episodes' slots left out).
    active: Vec<usize>,
    inputs: Vec<PolicyInput>,
    samples: Vec<Sample>,
    /// Action head inputs per row (empty unless asked for).
    features: Vec<Vec<f32>>,
}

/// The state of one [`run_episodes_after`] run: what it runs on and with,
/// the slots' episodes, the schedule's position and the stats so far.
struct Runner<'a> {
    policy: &'a dyn ActionPolicy,
    env: &'a mut dyn VecEnv,
    requests: &'a [ResetRequest],
    ended: &'a [Option<Placement>],
    opts: &'a RunOptions,
    observer: &'a mut dyn EpisodeObserver,
    /// The environment's spec as it was when the run started.
    spec: wmrl_env::EnvSpec,
    /// Actions executed per policy call.
    exec: usize,
    slots: Vec<Option<Slot>>,
    stats: RunStats,
    /// Index of the next request to start.
    next: usize,
    wave: u64,
    /// Policy calls of the current wave so far.
    call: u64,
}

impl<'a> Runner<'a> {
    /// A run with every slot free, at call 0 of wave 0, nothing counted.
    fn new(
        policy: &'a dyn ActionPolicy,
        env: &'a mut dyn VecEnv,
        requests: &'a [ResetRequest],
        ended: &'a [Option<Placement>],
        opts: &'a RunOptions,
        observer: &'a mut dyn EpisodeObserver,
    ) -> Self {
        let spec = env.spec().clone();
        let chunk = policy.chunk().max(1);
        let exec = if opts.execute_steps == 0 {
            chunk
        } else {
            opts.execute_steps.min(chunk)
        };
        let n_slots = env.num_envs().max(1);
        Self {
            policy,
            env,
            requests,
            ended,
            opts,
            observer,
            spec,
            exec,
            slots: (0..n_slots).map(|_| None).collect(),
            stats: RunStats::default(),
            next: 0,
            wave: 0,
            call: 0,
        }
    }

    /// Give free slots their next episodes when the schedule says so (a
    /// new wave first under [`Dispatch::Waves`]): an episode the earlier
    /// run ended holds its slot unsampled, the others are reset together.
    /// Errors when an ended episode's recorded place is not this run's.
    fn fill_free_slots(&mut self) -> Result<()> {
        let refill = match self.opts.dispatch {
            Dispatch::Refill => self.slots.iter().any(Option::is_none),
            Dispatch::Waves => self.slots.iter().all(Option::is_none),
        };
        // No reset call at all when no slot is free (as neither of the two
        // loops this runner replaced made one).
        if !refill || self.next >= self.requests.len() {
            return Ok(());
        }
        if self.opts.dispatch == Dispatch::Waves && self.next > 0 {
            self.wave += 1;
            self.call = 0;
        }
        let mut reqs = Vec::new();
        for slot in 0..self.slots.len() {
            if self.slots[slot].is_some() || self.next >= self.requests.len() {
                continue;
            }
            match self.ended.get(self.next).copied().flatten() {
                Some(p) => self.hold_replayed(slot, p)?,
                None => reqs.push((slot, self.next)),
            }
            self.next += 1;
        }
        if !reqs.is_empty() {
            self.reset_slots(reqs)?;
        }
        Ok(())
    }

    /// Let episode `self.next`, which ended in the earlier run at `p`,
    /// hold `slot` for its recorded policy calls, counting its steps and
    /// restarts; an error when `p` is not where this run would start it.
    fn hold_replayed(&mut self, slot: usize, p: Placement) -> Result<()> {
        let (next, call) = (self.next, self.call);
        if (p.slot, p.first_call) != (slot, call) {
            return Err(PolicyError::Input(format!(
                "episode {next} ran in slot {} from policy call {} in the earlier run, \
                 this run would start it in slot {slot} at call {call}: \
                 not the same schedule (another slot count?)",
                p.slot, p.first_call
            )));
        }
        self.stats.env_steps += p.env_steps;
        self.stats.restarts += p.restarts;
        self.slots[slot] = Some(Slot {
            ep: next,
            obs: Observation {
                frames: Vec::new(),
                proprio: Vec::new(),
                progress: None,
            },
            prev_frame: None,
            steps: 0,
            first_call: call,
            calls: 0,
            env_steps: 0,
            restarts: 0,
            replay_calls_left: Some(p.calls),
        });
        Ok(())
    }

    /// Reset the `(slot, episode)` pairs of `reqs` in one call, timing it,
    /// and start their episodes there (telling the observer).
    fn reset_slots(&mut self, reqs: Vec<(usize, usize)>) -> Result<()> {
        let pairs: Vec<(usize, ResetRequest)> =
            reqs.iter().map(|&(s, ep)| (s, self.requests[ep])).collect();
        let t = Stopwatch::start();
        let obs = self.env.reset(&pairs)?;
        let (wall, cpu) = t.elapsed();
        self.stats.env_seconds += wall;
        self.stats.env_cpu_seconds += cpu;
        // Restarts reported during a reset are already behind its
        // fresh observations (and stale ones must not void this chunk).
        self.env.take_restarts();
        for ((slot, ep), o) in reqs.into_iter().zip(obs) {
            self.observer.started(ep, &o);
            self.slots[slot] = Some(Slot {
                ep,
                obs: o,
                prev_frame: None,
                steps: 0,
                first_call: self.call,
                calls: 0,
                env_steps: 0,
                restarts: 0,
                replay_calls_left: None,
            });
        }
        Ok(())
    }

    /// One policy call for the `occupied` slots (in slot order) at this
    /// call's seed: replayed episodes keep their row (its stream) but are
    /// not sampled, and no call is made when no row is sampled. Counts the
    /// call, its rows and its time, and advances the call counter.
    fn call_policy(&mut self, occupied: &[usize]) -> Result<Batch> {
        let slots = &self.slots;
        let (active, streams): (Vec<usize>, Vec<u64>) = occupied
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                slots[**s]
                    .as_ref()
                    .is_some_and(|r| r.replay_calls_left.is_none())
            })
            .map(|(row, &s)| (s, row as u64))
            .unzip();
        let inputs: Vec<PolicyInput> = active
            .iter()
            .filter_map(|&i| slots[i].as_ref())
            .map(|r| {
                let task = self.requests[r.ep].task;
                let instruction = self
                    .spec
                    .tasks
                    .get(task)
                    .map(|t| t.instruction.as_str())
                    .unwrap_or_default();
                PolicyInput::from_observation(instruction, &r.obs, r.prev_frame.clone())
            })
            .collect();
        let opts = self.opts;
        let call_seed = opts
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add((self.wave << 32) | self.call);
        let t = Stopwatch::start();
        let (samples, features) = if inputs.is_empty() {
            (Vec::new(), Vec::new())
        } else if opts.keep_features {
            self.policy
                .sample_with_features(&inputs, opts.temperature, call_seed)?
        } else {
            (
                self.policy
                    .sample_streams(&inputs, opts.temperature, call_seed, &streams)?,
                Vec::new(),
            )
        };
        let (wall, cpu) = t.elapsed();
        self.stats.policy_seconds += wall;
        self.stats.policy_cpu_seconds += cpu;
        self.stats.policy_batches += 1;
        self.stats.policy_rows += occupied.len() as u64;
        self.call += 1;
        Ok(Batch {
            active,
            inputs,
            samples,
            features,
        })
    }

    /// Count the call for every `occupied` slot's episode, and free the
    /// slots of replayed episodes whose held calls are used up.
    fn count_call(&mut self, occupied: &[usize]) {
        let mut replayed = Vec::new();
        for &s in occupied {
            if let Some(r) = self.slots[s].as_mut() {
                r.calls += 1;
                if let Some(left) = r.replay_calls_left.as_mut() {
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        replayed.push(s);
                    }
                }
            }
        }
        for s in replayed {
            self.slots[s] = None;
        }
    }

    /// Tell the observer what each sampled row saw and drew, keeping the
    /// row's first frame as its episode's previous frame. Returns the
    /// rows' slots and samples, the chunks to execute.
    fn tell_called(&mut self, batch: Batch) -> (Vec<usize>, Vec<Sample>) {
        let Batch {
            active,
            inputs,
            samples,
            mut features,
        } = batch;
        for (k, (&slot, input)) in active.iter().zip(inputs).enumerate() {
            if let Some(r) = self.slots[slot].as_mut() {
                r.prev_frame = input.frames.first().cloned();
                let f = features.get_mut(k).map(std::mem::take);
                self.observer.called(r.ep, &r.obs, input, &samples[k], f);
            }
        }
        (active, samples)
    }

    /// Execute the sampled chunks of the `active` slots (row `k` runs
    /// `samples[k]`) step by step until each has run `exec` actions or its
    /// episode ended, then tell the observer each chunk is over and free
    /// the slots whose episode ended.
    fn execute_chunk(&mut self, active: &[usize], samples: &[Sample]) -> Result<()> {
        // (slot, row in this call, actions executed of the chunk)
        let mut live: Vec<(usize, usize, usize)> =
            active.iter().enumerate().map(|(k, &s)| (s, k, 0)).collect();
        let mut finished: Vec<(usize, usize, bool)> = Vec::new();
        for j in 0..self.exec {
            if live.is_empty() {
                break;
            }
            live = self.step_live(j, live, samples, &mut finished)?;
        }
        for (s, done, ended) in live
            .into_iter()
            .map(|(s, _, d)| (s, d, false))
            .chain(finished)
        {
            if let Some(r) = self.slots[s].as_ref() {
                self.observer.chunk_done(r.ep, done, ended, &r.obs);
            }
            if ended {
                self.slots[s] = None;
            }
        }
        Ok(())
    }

    /// Execute action `j` of each `live` chunk `(slot, row, executed)` in
    /// one environment step, timing and counting it: a slot whose worker
    /// died starts its episode over, an episode that ended (success, limit
    /// or cap) is told to the observer and its chunk goes to `finished` as
    /// `(slot, executed, true)`. Returns the chunks still running.
    fn step_live(
        &mut self,
        j: usize,
        live: Vec<(usize, usize, usize)>,
        samples: &[Sample],
        finished: &mut Vec<(usize, usize, bool)>,
    ) -> Result<Vec<(usize, usize, usize)>> {
        let opts = self.opts;
        let acts: Vec<(usize, Vec<f32>)> = live
            .iter()
            .map(|&(s, k, _)| (s, samples[k].actions[j].to_vec()))
            .collect();
        // Frames only where something looks at them: the policy's next
        // call (the chunk's last step), the cap's step when asked, every
        // step when asked; the environment renders its own episode ends.
        let at_cap = opts.observe_at_cap
            && opts.max_steps > 0
            && live.iter().any(|&(s, _, _)| {
                self.slots[s]
                    .as_ref()
                    .is_some_and(|r| r.steps + 1 >= opts.max_steps)
            });
        let observe = j + 1 == self.exec || opts.observe_every_step || at_cap;
        let t = Stopwatch::start();
        let out = self.env.step_observing(&acts, observe)?;
        let (wall, cpu) = t.elapsed();
        self.stats.env_seconds += wall;
        self.stats.env_cpu_seconds += cpu;
        self.stats.env_steps += out.len() as u64;
        let restarted: Vec<usize> = self.env.take_restarts().iter().map(|r| r.slot).collect();
        let mut still = Vec::with_capacity(live.len());
        for ((s, k, done), res) in live.into_iter().zip(out) {
            let Some(r) = self.slots[s].as_mut() else {
                continue;
            };
            r.env_steps += 1;
            if restarted.contains(&s) {
                // The worker died: the episode starts over from its
                // reset; what was collected of it is void.
                self.stats.restarts += 1;
                r.restarts += 1;
                r.steps = 0;
                r.prev_frame = None;
                r.obs = res.obs;
                self.observer.restarted(r.ep, &r.obs);
                continue;
            }
            r.steps += 1;
            self.observer
                .stepped(r.ep, &r.obs, &samples[k].actions[j], &res, r.steps);
            let capped = opts.max_steps > 0 && r.steps >= opts.max_steps;
            let ended = res.done || res.truncated || capped;
            if ended {
                self.observer.placed(r.ep, &r.placement(s));
                self.observer.ended(r.ep, &res, r.steps)?;
            }
            r.obs = res.obs;
            if ended {
                finished.push((s, done + 1, true));
            } else {
                still.push((s, k, done + 1));
            }
        }
        Ok(still)
    }
}
