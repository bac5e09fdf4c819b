use rayon::prelude::*;

use crate::{Action, EnvError, EnvSpec, Observation, ResetRequest, Result, StepResult, VecEnv};

/// One environment instance, stepped in this process.
pub trait Environment: Send {
    fn spec(&self) -> &EnvSpec;
    fn reset(&mut self, request: ResetRequest) -> Result<Observation>;
    /// Step once. Implementations clip actions to the range and reject NaN or
    /// infinite values with [`EnvError::InvalidAction`] (see
    /// [`EnvSpec::sanitize_action`]).
    fn step(&mut self, action: &Action) -> Result<StepResult>;
    /// [`Environment::step`], where the observation's frames are needed
    /// only when `observe` is true or the episode ends at this step (see
    /// [`VecEnv::step_observing`]). The default always renders.
    fn step_with(&mut self, action: &Action, observe: bool) -> Result<StepResult> {
        let _ = observe;
        self.step(action)
    }
}

/// A [`VecEnv`] over in-process environments, stepped in parallel with rayon.
pub struct LocalVecEnv<E: Environment> {
    spec: EnvSpec,
    envs: Vec<E>,
    is_reset: Vec<bool>,
}

impl<E: Environment> std::fmt::Debug for LocalVecEnv<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalVecEnv")
            .field("suite", &self.spec.suite)
            .field("num_envs", &self.envs.len())
            .finish()
    }
}

impl<E: Environment> LocalVecEnv<E> {
    /// Build from at least one environment; all must share one spec.
    pub fn new(envs: Vec<E>) -> Result<Self> {
        let first = envs
            .first()
            .ok_or_else(|| EnvError::Sim("a LocalVecEnv needs at least one environment".into()))?;
        let spec = first.spec().clone();
        if envs.iter().any(|e| e.spec() != &spec) {
            return Err(EnvError::Sim("environments disagree on their spec".into()));
        }
        let is_reset = vec![false; envs.len()];
        Ok(Self {
            spec,
            envs,
            is_reset,
        })
    }

    /// Direct access to one instance (for tests and tools that need the
    /// simulator's internals).
    pub fn env_mut(&mut self, slot: usize) -> Option<&mut E> {
        self.envs.get_mut(slot)
    }

    /// Pair each request with a distinct `&mut` environment, checking slots.
    fn borrow_slots<'a, T: Sync>(
        envs: &'a mut [E],
        requests: &'a [(usize, T)],
    ) -> Result<Vec<(&'a mut E, &'a T)>> {
        let n = envs.len();
        let mut slots: Vec<Option<&mut E>> = envs.iter_mut().map(Some).collect();
        requests
            .iter()
            .map(|(slot, req)| {
                let env = slots
                    .get_mut(*slot)
                    .ok_or(EnvError::BadSlot {
                        slot: *slot,
                        num_envs: n,
                    })?
                    .take()
                    .ok_or_else(|| EnvError::Sim(format!("slot {slot} named twice in one call")))?;
                Ok((env, req))
            })
            .collect()
    }
}

impl<E: Environment> VecEnv for LocalVecEnv<E> {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn num_envs(&self) -> usize {
        self.envs.len()
    }

    fn reset(&mut self, requests: &[(usize, ResetRequest)]) -> Result<Vec<Observation>> {
        for (_, req) in requests {
            self.spec.check_reset(req)?;
        }
        let pairs = Self::borrow_slots(&mut self.envs, requests)?;
        let out: Result<Vec<_>> = pairs
            .into_par_iter()
            .map(|(env, req)| env.reset(*req))
            .collect();
        let out = out?;
        for (slot, _) in requests {
            self.is_reset[*slot] = true;
        }
        Ok(out)
    }

    fn step(&mut self, actions: &[(usize, Action)]) -> Result<Vec<StepResult>> {
        self.step_observing(actions, true)
    }

    fn step_observing(
        &mut self,
        actions: &[(usize, Action)],
        observe: bool,
    ) -> Result<Vec<StepResult>> {
        let mut clean = Vec::with_capacity(actions.len());
        for (slot, a) in actions {
            if !self.is_reset.get(*slot).copied().unwrap_or(true) {
                return Err(EnvError::NotReset { slot: *slot });
            }
            clean.push((*slot, self.spec.sanitize_action(a)?));
        }
        let pairs = Self::borrow_slots(&mut self.envs, &clean)?;
        let out: Result<Vec<StepResult>> = pairs
            .into_par_iter()
            .map(|(env, a)| env.step_with(a, observe))
            .collect();
        let out = out?;
        for ((slot, _), r) in actions.iter().zip(&out) {
            if r.done || r.truncated {
                self.is_reset[*slot] = false;
            }
        }
        Ok(out)
    }
}
