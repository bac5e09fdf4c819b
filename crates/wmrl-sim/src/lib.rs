//! wmrl-sim: the embedded LIBERO-Long-style tabletop simulator.
//!
//! A deterministic rapier3d scene with the ten LIBERO-10 tasks (goals as
//! predicates in `envs/tabletop/*.toml`, embedded at build time), an
//! end effector driven like LIBERO's OSC_POSE controller (7-D actions in
//! [-1, 1] at 20 Hz), articulated furniture on real joints, a software
//! rasteriser for the `agentview` and `wrist` cameras, a progress oracle, and
//! a scripted expert. [`TabletopEnv`] implements [`wmrl_env::Environment`];
//! [`make_vec_env`] gives the vectorised [`wmrl_env::LocalVecEnv`].
//!
//! See docs/sim.md for the physics, control and grasping model.

pub mod catalog;
mod config;
mod demo;
mod env;
mod error;
mod expert;
pub mod gpu;
pub mod predicates;
pub mod raster;
mod render;
pub mod task;
pub mod world;

pub use config::SimConfig;
pub use demo::{SimRng, record_dart_episode, record_expert_episode, sim_rng};
pub use env::{PROPRIO_DIM, SUITE, TabletopEnv, make_vec_env, suite_spec};
pub use error::{Result, SimError};
pub use expert::Expert;
pub use predicates::GoalStatus;
pub use task::{InitState, Predicate, Task, tasks};
