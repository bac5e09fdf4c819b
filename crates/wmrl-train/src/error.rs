use thiserror::Error;

#[derive(Debug, Error)]
pub enum TrainError {
    #[error("config {path}: {message}")]
    Config { path: String, message: String },
    #[error("{what} not found at {path}: {hint}")]
    Missing {
        what: &'static str,
        path: String,
        hint: &'static str,
    },
    #[error(transparent)]
    Core(#[from] wmrl_core::CoreError),
    #[error(transparent)]
    Env(#[from] wmrl_env::EnvError),
    #[error(transparent)]
    Policy(#[from] wmrl_policy::PolicyError),
    #[error(transparent)]
    WorldModel(#[from] wmrl_worldmodel::WmError),
    #[error(transparent)]
    Sim(#[from] wmrl_sim::SimError),
    #[error(transparent)]
    Bridge(#[from] wmrl_bridge::BridgeError),
    #[error("i/o error at {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("run directory {path}: {message}")]
    RunDir { path: String, message: String },
    #[error("labels: {0}")]
    Labels(#[from] crate::labels::LabelError),
    #[error("report: {0}")]
    Report(String),
}

pub type Result<T, E = TrainError> = std::result::Result<T, E>;

pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl From<wmrl_grpo::GrpoError> for TrainError {
    fn from(e: wmrl_grpo::GrpoError) -> Self {
        Self::Policy(e.into())
    }
}

impl From<wmrl_run::ConfigError> for TrainError {
    fn from(e: wmrl_run::ConfigError) -> Self {
        TrainError::Config {
            path: e.path,
            message: e.message,
        }
    }
}

impl From<wmrl_run::RecordError> for TrainError {
    fn from(e: wmrl_run::RecordError) -> Self {
        TrainError::RunDir {
            path: e.path,
            message: e.message,
        }
    }
}
