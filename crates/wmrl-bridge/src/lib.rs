//! The wmrl simulator protocol over ZeroMQ.
//!
//! - [`protocol`]: the wire format (msgpack header, raw frames in separate
//!   message parts), documented for any language in `docs/protocol.md`.
//! - [`Server`] / [`serve`]: serve any [`wmrl_env::VecEnv`] (for example a
//!   [`wmrl_env::LocalVecEnv`] of N environments) on a ROUTER socket; bad
//!   input gets a typed error reply and the server keeps serving.
//! - [`BridgePool`]: a [`wmrl_env::VecEnv`] over many workers that steps
//!   them in parallel and survives worker deaths: episodes on a dead worker
//!   restart from their reset on a live one
//!   ([`wmrl_env::VecEnv::take_restarts`] names them), down workers are
//!   reconnected, and workers that stay down are reported
//!   ([`BridgePool::workers`], [`BridgePool::events`]); the episode ledger
//!   ([`BridgePool::accounting`]) shows nothing lost or counted twice.
//! - [`SupervisedPool`]: a pool over worker processes it starts itself and
//!   starts again when one dies, even while a call waits for it, so a pool
//!   without a spare slot recovers too.
//! - [`testenv`]: a deterministic environment for tests and benchmarks.
//!
//! This crate must never know which simulator it carries.

mod accounting;
mod error;
mod pool;
pub mod protocol;
mod server;
mod supervise;
pub mod testenv;
mod worker;

pub use accounting::{EpisodeAccounting, PoolEvent, WorkerState, WorkerStatus};
pub use error::{BridgeError, Result};
pub use pool::{BridgePool, PoolConfig};
pub use protocol::PROTOCOL_VERSION;
pub use server::{Server, ServerConfig, ServerStats, serve};
pub use supervise::{SupervisedPool, WorkerCommand};
