//! What a [`crate::BridgePool`] reports about its episodes and workers:
//! the episode ledger, the event log and per-worker status.
//!
//! The ledger is what proves recovery loses nothing: every episode the
//! caller started by a reset ends in exactly one of `completed`,
//! `abandoned` or `lost`, or is still `in_flight`
//! ([`EpisodeAccounting::is_balanced`]). A restart after a worker failure is
//! the same episode retried, counted in `restarts`, never as a new episode.

use serde::{Deserialize, Serialize};
use wmrl_env::ResetRequest;

/// Episode ledger of a pool since it connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeAccounting {
    /// Episodes the caller started (one per slot in a `reset` call).
    pub requested: u64,
    /// Episodes that ended (`done` or `truncated`) and were returned to the
    /// caller once.
    pub completed: u64,
    /// Of the completed, those that ended in success.
    pub successes: u64,
    /// Episodes running now.
    pub in_flight: u64,
    /// Episodes the caller replaced by a new reset, or left running at close.
    pub abandoned: u64,
    /// Episodes that could not be continued or restarted (no live worker);
    /// the call that lost them returned an error.
    pub lost: u64,
    /// Restarts of running episodes on a live worker after their worker
    /// failed (the same episode, retried from its reset).
    pub restarts: u64,
    /// Step results returned to the caller (restart observations included).
    pub steps: u64,
}

impl EpisodeAccounting {
    /// Nothing lost track of and nothing counted twice:
    /// `requested == completed + in_flight + abandoned + lost`.
    pub fn is_balanced(&self) -> bool {
        self.requested == self.completed + self.in_flight + self.abandoned + self.lost
    }
}

/// Health of one worker as the pool sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerState {
    /// Answering; its slots are in use.
    Up,
    /// Failed (timeout, disconnect, bad reply); probed for a reconnect every
    /// `reconnect_interval_ms` until `give_up_after_ms`.
    Down { reason: String, down_for_ms: u64 },
    /// Stayed down past `give_up_after_ms`: reported, never retried.
    Gone { reason: String },
}

/// One worker's status ([`crate::BridgePool::workers`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub endpoint: String,
    pub state: WorkerState,
    /// Slots the worker serves (from its handshake; 0 if it never answered).
    pub num_envs: usize,
    /// Pool slots currently placed on it.
    pub bound_slots: usize,
    /// Times it went down.
    pub failures: u64,
    /// Its process id from the last handshake (changes when it restarted).
    pub server_id: u64,
}

/// Something that happened in the pool ([`crate::BridgePool::events`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolEvent {
    WorkerDown {
        at_ms: u64,
        worker: usize,
        endpoint: String,
        reason: String,
    },
    WorkerUp {
        at_ms: u64,
        worker: usize,
        endpoint: String,
        /// The worker answered with a different server id: a new process.
        restarted: bool,
    },
    WorkerGone {
        at_ms: u64,
        worker: usize,
        endpoint: String,
        reason: String,
    },
    /// A running episode moved to another worker and restarted from its reset.
    EpisodeRestarted {
        at_ms: u64,
        slot: usize,
        episode: u64,
        request: ResetRequest,
        from_worker: usize,
        to_worker: usize,
    },
}
