//! The one environment interface of wmrl.
//!
//! The embedded simulator, the ZeroMQ client pool and the real LIBERO server
//! all implement [`VecEnv`]; the trainer, evaluation and demo writers talk to
//! nothing else, so they cannot tell them apart. The surface is deliberately
//! as small as burn-rl's: reset with (task, initial state, seed), batched
//! step, success, frames.
//!
//! This crate must never depend on a simulator, a model framework or a socket
//! library: it is the contract, not an implementation.

mod episode;
mod error;
mod local;
pub mod text;
mod types;

pub use episode::{Episode, EpisodeStep, list_episodes, read_episode, write_episode};
pub use error::{EnvError, Result};
pub use local::{Environment, LocalVecEnv};
pub use types::{
    Action, CameraSpec, EnvSpec, Frame, Observation, ResetRequest, SlotRestart, StepResult,
    TaskSpec,
};

/// A batch of environments stepped together.
///
/// Slots are indices in `0..num_envs()`. A slot must be reset before it is
/// stepped; a slot whose episode ended (`done` or `truncated`) must be reset
/// again before the next step. Requests name their slots, so a caller may step
/// any subset (for example only the episodes still running).
pub trait VecEnv: Send {
    /// What every slot looks like: action space, cameras, tasks.
    fn spec(&self) -> &EnvSpec;
    /// Number of slots.
    fn num_envs(&self) -> usize;
    /// Reset the named slots; observations come back in request order.
    fn reset(&mut self, requests: &[(usize, ResetRequest)]) -> Result<Vec<Observation>>;
    /// Step the named slots once; results come back in request order.
    fn step(&mut self, actions: &[(usize, Action)]) -> Result<Vec<StepResult>>;
    /// [`VecEnv::step`], with camera frames needed only when `observe` is
    /// true or a slot's episode ends at this step (success or the
    /// environment's own limit): otherwise an environment may skip rendering
    /// and return observations without frames (proprio and progress only).
    /// Physics, rewards and flags are the same either way. Callers that
    /// execute a chunk of actions pass `false` for all but the chunk's last
    /// step (rendering is most of an embedded simulator step). The default
    /// always observes.
    fn step_observing(
        &mut self,
        actions: &[(usize, Action)],
        observe: bool,
    ) -> Result<Vec<StepResult>> {
        let _ = observe;
        self.step(actions)
    }
    /// Release resources (worker connections, simulator processes).
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
    /// Slots whose episode the environment had to restart from its reset
    /// since the last call (e.g. their remote worker died mid-episode), in
    /// the order they happened; draining. For such a slot, the `StepResult`
    /// returned by that `step` is the first observation of the restarted
    /// episode (reward 0, no flags): drop the trajectory collected so far.
    /// In-process environments never restart episodes.
    fn take_restarts(&mut self) -> Vec<SlotRestart> {
        Vec::new()
    }
}
