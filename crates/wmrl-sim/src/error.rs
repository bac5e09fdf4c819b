use thiserror::Error;

/// Everything the tabletop simulator can refuse or fail at.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SimError {
    #[error("unknown task index {task}: the suite has {n_tasks} tasks")]
    UnknownTask { task: usize, n_tasks: usize },
    #[error("unknown initial state {init_state} for task {task}: it has {n_init_states}")]
    UnknownInitState {
        task: usize,
        init_state: usize,
        n_init_states: usize,
    },
    #[error("task file {file}: {message}")]
    TaskFile { file: String, message: String },
    #[error("invalid config: {0}")]
    Config(String),
    #[error("the environment must be reset before it is stepped")]
    NotReset,
    #[error(transparent)]
    Env(#[from] wmrl_env::EnvError),
}

pub type Result<T, E = SimError> = std::result::Result<T, E>;

impl From<SimError> for wmrl_env::EnvError {
    fn from(e: SimError) -> Self {
        match e {
            SimError::UnknownTask { task, n_tasks } => Self::UnknownTask { task, n_tasks },
            SimError::UnknownInitState {
                task,
                init_state,
                n_init_states,
            } => Self::UnknownInitState {
                task,
                init_state,
                n_init_states,
            },
            SimError::Env(e) => e,
            other => Self::Sim(other.to_string()),
        }
    }
}
