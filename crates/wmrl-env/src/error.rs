use thiserror::Error;

/// Everything an environment can refuse or fail at.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum EnvError {
    #[error("unknown task index {task}: this environment has {n_tasks} tasks")]
    UnknownTask { task: usize, n_tasks: usize },
    #[error("unknown initial state {init_state} for task {task}: it has {n_init_states}")]
    UnknownInitState {
        task: usize,
        init_state: usize,
        n_init_states: usize,
    },
    #[error("invalid action: {0}")]
    InvalidAction(String),
    #[error("slot {slot} out of range: {num_envs} slots")]
    BadSlot { slot: usize, num_envs: usize },
    #[error("slot {slot} must be reset before it is stepped")]
    NotReset { slot: usize },
    #[error("worker {endpoint} is down: {reason}")]
    WorkerDown { endpoint: String, reason: String },
    #[error("no live worker left: {0}")]
    NoWorkers(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("simulator error: {0}")]
    Sim(String),
    #[error("i/o error at {path}: {message}")]
    Io { path: String, message: String },
    #[error("corrupt episode file {path}: {message}")]
    CorruptEpisode { path: String, message: String },
}

pub type Result<T, E = EnvError> = std::result::Result<T, E>;
