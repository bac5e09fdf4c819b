//! The one error type of `wmrl-policy`.

/// Everything that can go wrong building, running, saving or training a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("tensor: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("environment: {0}")]
    Env(#[from] wmrl_env::EnvError),
    #[error("invalid config: {0}")]
    Config(String),
    #[error("invalid input: {0}")]
    Input(String),
    /// A policy implemented outside this crate failed (its own error, as
    /// text: e.g. a MiniVLA forward pass).
    #[error("policy model: {0}")]
    Model(String),
    /// A checkpoint that is missing, corrupt or does not match its config;
    /// `tensor` names the offending tensor.
    #[error("checkpoint {path}: tensor `{tensor}`: {message}")]
    Checkpoint {
        path: String,
        tensor: String,
        message: String,
    },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("json {path}: {message}")]
    Json { path: String, message: String },
    #[error("no training data: {0}")]
    NoData(String),
    #[error("training diverged: {0}")]
    NonFinite(String),
    /// An evaluation record that already holds episodes, met without
    /// [`crate::EvalConfig::resume`]: they are never dropped silently.
    #[error(
        "{path} already records {episodes} finished episodes of an evaluation: resume it, or remove the file"
    )]
    RecordExists { path: String, episodes: usize },
    /// An evaluation that stopped before its end, with what it finished.
    #[error(
        "evaluation stopped after {finished} of {total} episodes ({successes} successes; {kept}): {cause}"
    )]
    EvalStopped {
        finished: usize,
        total: usize,
        successes: usize,
        /// Where the finished episodes are kept, or that they are not.
        kept: String,
        cause: Box<PolicyError>,
    },
}

impl From<wmrl_run::RecordError> for PolicyError {
    fn from(e: wmrl_run::RecordError) -> Self {
        Self::Io {
            path: e.path,
            message: e.message,
        }
    }
}

impl From<wmrl_grpo::GrpoError> for PolicyError {
    fn from(e: wmrl_grpo::GrpoError) -> Self {
        use wmrl_grpo::GrpoError as G;
        match e {
            G::Candle(e) => Self::Candle(e),
            G::Config(m) => Self::Config(m),
            G::NonFinite(m) => Self::NonFinite(m),
            G::State { tensor, message } => Self::Checkpoint {
                path: "optimizer state".into(),
                tensor,
                message,
            },
        }
    }
}

/// `Result` with [`PolicyError`].
pub type Result<T> = std::result::Result<T, PolicyError>;

pub(crate) fn io_err(path: &std::path::Path, e: impl std::fmt::Display) -> PolicyError {
    PolicyError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

pub(crate) fn json_err(path: &std::path::Path, e: impl std::fmt::Display) -> PolicyError {
    PolicyError::Json {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}
