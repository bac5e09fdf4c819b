//! The client pool: one [`VecEnv`] over many workers, with recovery.
//!
//! Pool slots are placed on worker slots (round-robin at connect). A batched
//! call sends one request per worker and polls them together, so workers step
//! in parallel. When a worker times out, disconnects or answers garbage, it
//! is marked down; the running episodes placed on it move to free slots of
//! live workers and restart from their reset request, and the caller learns
//! which through [`VecEnv::take_restarts`]. Down workers are probed without
//! blocking and take slots again once they answer; a worker down longer than
//! `give_up_after_ms` is reported as gone and never retried.
//!
//! A call that lost episodes and finds no free slot waits (up to
//! `give_up_after_ms`) for a down worker to answer again. Workers the pool
//! started itself ([`crate::SupervisedPool`]) are started again while it
//! waits, so any layout recovers; workers started by someone else must be
//! restarted by them, or the pool needs spare slots (`num_envs` below what
//! the workers hold together).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wmrl_env::{
    Action, EnvError, EnvSpec, Observation, ResetRequest, SlotRestart, StepResult, VecEnv,
};

use crate::accounting::{EpisodeAccounting, PoolEvent, WorkerState, WorkerStatus};
use crate::error::{BridgeError, Result};
use crate::protocol::{Op, WireAction, decode_results, wire_reset};
use crate::supervise::Processes;
use crate::worker::{Health, Outcome, Worker, exchange, handshake_all, same_spec};

/// Pool settings. Defaults suit the real LIBERO server (a step of 8
/// rendering environments takes about 1.5 s on two cores).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// Pool slots; `None`: every slot of the workers that answered at connect.
    pub num_envs: Option<usize>,
    /// A reset or step slower than this marks the worker down. Default 60 s.
    pub request_timeout_ms: u64,
    /// Handshake limit, at connect and for reconnect probes. Default 10 s.
    pub connect_timeout_ms: u64,
    /// Pause between reconnect probes of a down worker. Default 1 s.
    pub reconnect_interval_ms: u64,
    /// A worker down this long is reported gone, never retried. Default 120 s.
    pub give_up_after_ms: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            num_envs: None,
            request_timeout_ms: 60_000,
            connect_timeout_ms: 10_000,
            reconnect_interval_ms: 1_000,
            give_up_after_ms: 120_000,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    id: u64,
    request: ResetRequest,
    steps: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// (worker, remote slot); `None` after its worker went down.
    place: Option<(usize, usize)>,
    episode: Option<Episode>,
    /// The worker the slot was on when it lost its place.
    lost_from: Option<usize>,
}

/// A [`VecEnv`] over remote workers speaking the wmrl-bridge protocol.
pub struct BridgePool {
    context: zmq::Context,
    workers: Vec<Worker>,
    spec: EnvSpec,
    config: PoolConfig,
    slots: Vec<Slot>,
    accounting: EpisodeAccounting,
    events: Vec<PoolEvent>,
    restarts: Vec<SlotRestart>,
    next_episode: u64,
    started: Instant,
    /// The worker processes, when the pool started them itself.
    processes: Option<Processes>,
}

impl std::fmt::Debug for BridgePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgePool")
            .field("suite", &self.spec.suite)
            .field("num_envs", &self.slots.len())
            .field("workers", &self.workers.len())
            .field("accounting", &self.accounting)
            .finish()
    }
}

impl BridgePool {
    /// Connect and handshake with every endpoint in parallel. Workers that do
    /// not answer start down (and are probed later); at least one must answer,
    /// and all that answer must announce the same spec.
    pub fn connect<S: AsRef<str>>(endpoints: &[S], config: PoolConfig) -> Result<Self> {
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_string()).collect();
        let context = zmq::Context::new();
        let timeout = Duration::from_millis(config.connect_timeout_ms);
        let (workers, hellos) = handshake_all(&context, &endpoints, timeout);
        let mut spec: Option<EnvSpec> = None;
        for (w, hello) in workers.iter().zip(&hellos) {
            let Some(hello) = hello else { continue };
            match &spec {
                None => spec = Some(hello.spec.clone()),
                Some(s) if !same_spec(s, &hello.spec) => {
                    return Err(BridgeError::Mismatch(format!(
                        "{} announces suite {} unlike the first worker's {}",
                        w.endpoint, hello.spec.suite, s.suite
                    )));
                }
                Some(_) => {}
            }
        }
        let Some(spec) = spec else {
            let reasons: Vec<String> = workers
                .iter()
                .map(|w| match &w.health {
                    Health::Down { reason, .. } => format!("{}: {reason}", w.endpoint),
                    _ => w.endpoint.clone(),
                })
                .collect();
            return Err(BridgeError::NoWorkers(reasons.join("; ")));
        };
        let capacity: usize = workers
            .iter()
            .filter(|w| w.is_up())
            .map(|w| w.num_envs)
            .sum();
        let num_envs = config.num_envs.unwrap_or(capacity);
        if num_envs == 0 || num_envs > capacity {
            return Err(BridgeError::Mismatch(format!(
                "{num_envs} slots asked, the live workers hold {capacity}"
            )));
        }
        let mut pool = Self {
            context,
            workers,
            spec,
            config,
            slots: vec![Slot::default(); num_envs],
            accounting: EpisodeAccounting::default(),
            events: Vec::new(),
            restarts: Vec::new(),
            next_episode: 0,
            started: Instant::now(),
            processes: None,
        };
        for slot in 0..num_envs {
            pool.place_now(slot);
        }
        Ok(pool)
    }

    /// The episode ledger.
    pub fn accounting(&self) -> EpisodeAccounting {
        self.accounting
    }

    /// Everything that happened, oldest first.
    pub fn events(&self) -> &[PoolEvent] {
        &self.events
    }

    /// Status of every worker, in endpoint order.
    pub fn workers(&self) -> Vec<WorkerStatus> {
        self.workers
            .iter()
            .enumerate()
            .map(|(i, w)| WorkerStatus {
                endpoint: w.endpoint.clone(),
                state: match &w.health {
                    Health::Up => WorkerState::Up,
                    Health::Down { since, reason, .. } => WorkerState::Down {
                        reason: reason.clone(),
                        down_for_ms: since.elapsed().as_millis() as u64,
                    },
                    Health::Gone { reason } => WorkerState::Gone {
                        reason: reason.clone(),
                    },
                },
                num_envs: w.num_envs,
                bound_slots: self
                    .slots
                    .iter()
                    .filter(|s| s.place.is_some_and(|(wi, _)| wi == i))
                    .count(),
                failures: w.failures,
                server_id: w.server_id,
            })
            .collect()
    }

    /// Look after the worker processes from now on: [`Self::maintain`]
    /// starts again those that exited (in worker order, as connected).
    pub(crate) fn supervise(&mut self, processes: Processes) {
        self.processes = Some(processes);
    }

    pub(crate) fn processes(&self) -> Option<&Processes> {
        self.processes.as_ref()
    }

    /// Start again the supervised worker processes that exited: each is
    /// down until it answers a probe (its episodes restart then); one that
    /// cannot be started is given up at once.
    fn revive(&mut self) {
        let Some(processes) = self.processes.as_mut() else {
            return;
        };
        for (i, outcome) in processes.revive() {
            match outcome {
                Ok(reason) => {
                    self.worker_down(i, &reason);
                    // It printed its endpoint: it serves now.
                    self.workers[i].start_probe(&self.context);
                }
                Err(reason) => {
                    self.worker_down(i, &reason);
                    self.give_up(i, reason);
                }
            }
        }
    }

    /// Start again supervised workers that exited (blocking until they
    /// serve), probe down workers (without blocking) and give up on those
    /// down too long.
    pub fn maintain(&mut self) {
        self.revive();
        let connect_timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let interval = Duration::from_millis(self.config.reconnect_interval_ms);
        let give_up = Duration::from_millis(self.config.give_up_after_ms);
        for i in 0..self.workers.len() {
            if let Some(answer) = self.workers[i].poll_probe(connect_timeout) {
                match answer {
                    Ok(hello) if same_spec(&hello.spec, &self.spec) => {
                        let restarted = self.workers[i].accept_hello(&hello);
                        let endpoint = self.workers[i].endpoint.clone();
                        tracing::info!(%endpoint, restarted, "worker up");
                        self.log(|at_ms| PoolEvent::WorkerUp {
                            at_ms,
                            worker: i,
                            endpoint,
                            restarted,
                        });
                    }
                    Ok(_) => self.give_up(i, "announces a different spec".into()),
                    Err(e) => {
                        self.workers[i].mark_down(&e);
                    }
                }
            }
            let w = &self.workers[i];
            if let Health::Down {
                since,
                probe,
                last_probe,
                reason,
            } = &w.health
            {
                if since.elapsed() > give_up {
                    let reason = format!("down for over {} ms: {reason}", give_up.as_millis());
                    self.give_up(i, reason);
                } else if probe.is_none() && last_probe.is_none_or(|t| t.elapsed() >= interval) {
                    self.workers[i].start_probe(&self.context);
                }
            }
        }
    }

    fn give_up(&mut self, i: usize, reason: String) {
        let endpoint = self.workers[i].endpoint.clone();
        tracing::warn!(%endpoint, %reason, "giving up on worker");
        self.workers[i].socket = None;
        self.workers[i].health = Health::Gone {
            reason: reason.clone(),
        };
        self.log(|at_ms| PoolEvent::WorkerGone {
            at_ms,
            worker: i,
            endpoint,
            reason,
        });
    }

    fn log(&mut self, event: impl FnOnce(u64) -> PoolEvent) {
        let at_ms = self.started.elapsed().as_millis() as u64;
        self.events.push(event(at_ms));
    }

    fn worker_down(&mut self, i: usize, reason: &str) {
        if self.workers[i].mark_down(reason) {
            let endpoint = self.workers[i].endpoint.clone();
            tracing::warn!(%endpoint, %reason, "worker down");
            self.log(|at_ms| PoolEvent::WorkerDown {
                at_ms,
                worker: i,
                endpoint,
                reason: reason.to_string(),
            });
        }
        for s in &mut self.slots {
            if s.place.is_some_and(|(w, _)| w == i) {
                s.place = None;
                s.lost_from = Some(i);
            }
        }
    }

    /// Place a slot on the live worker with the most free slots.
    fn place_now(&mut self, slot: usize) -> bool {
        let mut used: Vec<Vec<bool>> = self
            .workers
            .iter()
            .map(|w| vec![false; w.num_envs])
            .collect();
        for s in &self.slots {
            if let Some(u) = s
                .place
                .and_then(|(w, r)| used.get_mut(w).and_then(|u| u.get_mut(r)))
            {
                *u = true;
            }
        }
        let best = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, w)| w.is_up())
            .map(|(i, _)| (i, used[i].iter().filter(|u| !**u).count()))
            .filter(|(_, free)| *free > 0)
            .max_by_key(|(i, free)| (*free, std::cmp::Reverse(*i)));
        let Some((w, _)) = best else { return false };
        let Some(r) = used[w].iter().position(|u| !u) else {
            return false;
        };
        self.slots[slot].place = Some((w, r));
        true
    }

    /// Place every listed slot, waiting for a worker to come back when no
    /// capacity is free; fails once no worker can come back.
    fn place_all(&mut self, slots: &[usize]) -> Result<(), EnvError> {
        loop {
            self.maintain();
            let mut missing = false;
            for &s in slots {
                if self.slots[s].place.is_none() && !self.place_now(s) {
                    missing = true;
                }
            }
            if !missing {
                return Ok(());
            }
            let hope = self
                .workers
                .iter()
                .any(|w| matches!(w.health, Health::Down { .. }));
            if !hope {
                let gone: Vec<String> = self
                    .workers
                    .iter()
                    .filter_map(|w| match &w.health {
                        Health::Gone { reason } => Some(format!("{} ({reason})", w.endpoint)),
                        _ => None,
                    })
                    .collect();
                return Err(EnvError::NoWorkers(format!(
                    "no free slot on a live worker; gone: {}",
                    gone.join("; ")
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Reset slots on their workers, moving slots off workers that fail.
    fn reset_placed(
        &mut self,
        requests: &[(usize, ResetRequest)],
    ) -> Result<Vec<Observation>, EnvError> {
        let mut obs: Vec<Option<Observation>> = vec![None; requests.len()];
        let mut pending: Vec<usize> = (0..requests.len()).collect();
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        // A worker that answers handshakes but fails every reset must not
        // keep the pool busy forever.
        let max_rounds = 3 * self.workers.len() + 3;
        let mut rounds = 0;
        while !pending.is_empty() {
            rounds += 1;
            if rounds > max_rounds {
                return Err(EnvError::NoWorkers(format!(
                    "resets kept failing on every worker ({max_rounds} rounds)"
                )));
            }
            let slots: Vec<usize> = pending.iter().map(|&k| requests[k].0).collect();
            self.place_all(&slots)?;
            let mut by_worker: Vec<(usize, Vec<usize>)> = Vec::new();
            for &k in &pending {
                let (w, _) = self.slots[requests[k].0].place.ok_or_else(|| {
                    EnvError::NoWorkers("slot lost its place while placing".into())
                })?;
                match by_worker.iter_mut().find(|(wi, _)| *wi == w) {
                    Some((_, ks)) => ks.push(k),
                    None => by_worker.push((w, vec![k])),
                }
            }
            let mut reqs = Vec::with_capacity(by_worker.len());
            for (w, ks) in &by_worker {
                let mut h = self.workers[*w].request(Op::Reset);
                for &k in ks {
                    let (slot, r) = &requests[k];
                    let remote = self.slots[*slot].place.map_or(0, |p| p.1);
                    h.resets.push(wire_reset(remote, r));
                }
                reqs.push((*w, h));
            }
            let outcomes = exchange(&mut self.workers, reqs, timeout);
            let mut next = Vec::new();
            for ((w, ks), (_, outcome)) in by_worker.into_iter().zip(outcomes) {
                match self.collect(w, outcome, ks.len()) {
                    Ok(results) => {
                        for (k, r) in ks.into_iter().zip(results) {
                            obs[k] = Some(r.obs);
                        }
                    }
                    Err(Some(e)) => return Err(e),
                    Err(None) => next.extend(ks),
                }
            }
            pending = next;
        }
        obs.into_iter()
            .map(|o| o.ok_or_else(|| EnvError::Protocol("missing observation".into())))
            .collect()
    }

    /// Turn one worker's outcome into results. `Err(None)`: the worker failed
    /// (now marked down, retry elsewhere); `Err(Some(e))`: a typed refusal.
    fn collect(
        &mut self,
        w: usize,
        outcome: Outcome,
        expected: usize,
    ) -> Result<Vec<StepResult>, Option<EnvError>> {
        match outcome {
            Outcome::Reply(header, parts) => match decode_results(&header, parts, &self.spec) {
                Ok(r) if r.len() == expected => Ok(r.into_iter().map(|(_, r)| r).collect()),
                Ok(r) => {
                    let reason = format!("{} results for {expected} slots", r.len());
                    self.worker_down(w, &reason);
                    Err(None)
                }
                Err(e) => {
                    self.worker_down(w, &format!("bad reply: {}", e.message));
                    Err(None)
                }
            },
            Outcome::Refused(e) => Err(Some(EnvError::from(BridgeError::Remote {
                endpoint: self.workers[w].endpoint.clone(),
                error: e,
            }))),
            Outcome::Failed(reason) => {
                self.worker_down(w, &reason);
                Err(None)
            }
        }
    }

    fn check_slots<T>(&self, items: &[(usize, T)]) -> Result<(), EnvError> {
        let n = self.slots.len();
        let mut seen = vec![false; n];
        for (slot, _) in items {
            match seen.get_mut(*slot) {
                None => {
                    return Err(EnvError::BadSlot {
                        slot: *slot,
                        num_envs: n,
                    });
                }
                Some(true) => return Err(EnvError::Sim(format!("slot {slot} named twice"))),
                Some(s) => *s = true,
            }
        }
        Ok(())
    }

    /// Restart running episodes whose worker failed, on live workers.
    fn restart(&mut self, slots: &[usize]) -> Result<Vec<StepResult>, EnvError> {
        let requests: Vec<(usize, ResetRequest)> = slots
            .iter()
            .filter_map(|&s| self.slots[s].episode.map(|e| (s, e.request)))
            .collect();
        let obs = self.reset_placed(&requests)?;
        let mut out = Vec::with_capacity(obs.len());
        for ((slot, request), obs) in requests.into_iter().zip(obs) {
            let s = &mut self.slots[slot];
            let Some(ep) = s.episode.as_mut() else {
                continue;
            };
            let steps_lost = ep.steps;
            ep.steps = 0;
            let episode = ep.id;
            let from_worker = s.lost_from.take().unwrap_or(usize::MAX);
            let to_worker = s.place.map_or(usize::MAX, |p| p.0);
            let reason = self.workers.get(from_worker).map_or_else(
                || "worker failed".into(),
                |w| match &w.health {
                    Health::Down { reason, .. } | Health::Gone { reason } => {
                        format!("worker {} down: {reason}", w.endpoint)
                    }
                    Health::Up => format!("worker {} failed", w.endpoint),
                },
            );
            self.accounting.restarts += 1;
            self.restarts.push(SlotRestart {
                slot,
                request,
                steps_lost,
                reason,
            });
            self.log(|at_ms| PoolEvent::EpisodeRestarted {
                at_ms,
                slot,
                episode,
                request,
                from_worker,
                to_worker,
            });
            out.push(StepResult {
                obs,
                reward: 0.0,
                success: false,
                done: false,
                truncated: false,
            });
        }
        Ok(out)
    }

    /// Count the call's episodes as lost after an unrecoverable error.
    fn lose(&mut self, slots: &[usize]) {
        for &s in slots {
            if self.slots[s].episode.take().is_some() {
                self.accounting.in_flight -= 1;
                self.accounting.lost += 1;
            }
        }
    }

    fn step_inner(
        &mut self,
        actions: &[(usize, Action)],
    ) -> Result<(Vec<StepResult>, Vec<bool>), EnvError> {
        self.maintain();
        let mut restarted = vec![false; actions.len()];
        let mut results: Vec<Option<StepResult>> = vec![None; actions.len()];
        let mut to_restart: Vec<usize> = Vec::new();
        let mut by_worker: Vec<(usize, Vec<usize>)> = Vec::new();
        for (k, (slot, _)) in actions.iter().enumerate() {
            match self.slots[*slot].place {
                None => to_restart.push(k),
                Some((w, _)) => match by_worker.iter_mut().find(|(wi, _)| *wi == w) {
                    Some((_, ks)) => ks.push(k),
                    None => by_worker.push((w, vec![k])),
                },
            }
        }
        let mut reqs = Vec::with_capacity(by_worker.len());
        for (w, ks) in &by_worker {
            let mut h = self.workers[*w].request(Op::Step);
            for &k in ks {
                let (slot, a) = &actions[k];
                let remote = self.slots[*slot].place.map_or(0, |p| p.1);
                h.actions.push(WireAction {
                    slot: remote as u32,
                    action: a.clone(),
                });
            }
            reqs.push((*w, h));
        }
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let outcomes = exchange(&mut self.workers, reqs, timeout);
        for ((w, ks), (_, outcome)) in by_worker.into_iter().zip(outcomes) {
            match self.collect(w, outcome, ks.len()) {
                Ok(rs) => {
                    for (k, r) in ks.into_iter().zip(rs) {
                        results[k] = Some(r);
                    }
                }
                Err(Some(e)) => return Err(e),
                Err(None) => to_restart.extend(ks),
            }
        }
        if !to_restart.is_empty() {
            let slots: Vec<usize> = to_restart.iter().map(|&k| actions[k].0).collect();
            for (k, r) in to_restart.into_iter().zip(self.restart(&slots)?) {
                results[k] = Some(r);
                restarted[k] = true;
            }
        }
        let results = results
            .into_iter()
            .map(|r| r.ok_or_else(|| EnvError::Protocol("missing step result".into())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((results, restarted))
    }
}

impl VecEnv for BridgePool {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn num_envs(&self) -> usize {
        self.slots.len()
    }

    fn reset(&mut self, requests: &[(usize, ResetRequest)]) -> wmrl_env::Result<Vec<Observation>> {
        self.check_slots(requests)?;
        for (_, r) in requests {
            self.spec.check_reset(r)?;
        }
        self.maintain();
        for (slot, request) in requests {
            let s = &mut self.slots[*slot];
            if s.episode.take().is_some() {
                self.accounting.in_flight -= 1;
                self.accounting.abandoned += 1;
            }
            s.lost_from = None;
            s.episode = Some(Episode {
                id: self.next_episode,
                request: *request,
                steps: 0,
            });
            self.next_episode += 1;
            self.accounting.requested += 1;
            self.accounting.in_flight += 1;
        }
        let slots: Vec<usize> = requests.iter().map(|(s, _)| *s).collect();
        self.reset_placed(requests)
            .inspect_err(|_| self.lose(&slots))
    }

    fn step(&mut self, actions: &[(usize, Action)]) -> wmrl_env::Result<Vec<StepResult>> {
        self.check_slots(actions)?;
        let mut clean = Vec::with_capacity(actions.len());
        for (slot, a) in actions {
            if self.slots[*slot].episode.is_none() {
                return Err(EnvError::NotReset { slot: *slot });
            }
            clean.push((*slot, self.spec.sanitize_action(a)?));
        }
        let slots: Vec<usize> = clean.iter().map(|(s, _)| *s).collect();
        let (results, restarted) = self.step_inner(&clean).inspect_err(|_| self.lose(&slots))?;
        for (((slot, _), r), restarted) in clean.iter().zip(&results).zip(restarted) {
            self.accounting.steps += 1;
            let s = &mut self.slots[*slot];
            if let Some(ep) = s.episode.as_mut().filter(|_| !restarted) {
                ep.steps += 1;
            }
            if r.done || r.truncated {
                s.episode = None;
                self.accounting.in_flight -= 1;
                self.accounting.completed += 1;
                if r.success {
                    self.accounting.successes += 1;
                }
            }
        }
        Ok(results)
    }

    fn close(&mut self) -> wmrl_env::Result<()> {
        for s in &mut self.slots {
            if s.episode.take().is_some() {
                self.accounting.in_flight -= 1;
                self.accounting.abandoned += 1;
            }
        }
        let reqs: Vec<_> = self
            .workers
            .iter_mut()
            .enumerate()
            .filter(|(_, w)| w.is_up())
            .map(|(i, w)| (i, w.request(Op::Close)))
            .collect();
        let timeout = Duration::from_millis(self.config.connect_timeout_ms.min(2_000));
        // Best effort: a worker that does not answer a close is not an error.
        let _ = exchange(&mut self.workers, reqs, timeout);
        Ok(())
    }

    fn take_restarts(&mut self) -> Vec<SlotRestart> {
        std::mem::take(&mut self.restarts)
    }
}
