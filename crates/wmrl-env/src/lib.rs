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
