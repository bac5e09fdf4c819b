//! The one error type of the crate. Every failure a user can cause (missing
//! library, missing or broken model file, a model with another contract, bad
//! rollouts) is a variant with a message that says what to do.

/// Errors of the world-model crate.
#[derive(Debug, thiserror::Error)]
pub enum WmError {
    /// ONNX Runtime itself: the library missing, a model file unreadable or
    /// rejected, inference failing (shared with the AutoResearch track).
    #[error(transparent)]
    Onnx(#[from] wmrl_onnx::OnnxError),
    /// The model loaded but its inputs/outputs differ from the contract.
    #[error("model {path} does not follow the progress-model contract: {message}")]
    Contract { path: String, message: String },
    /// A rollout the caller passed in cannot be scored.
    #[error("invalid rollout {index}: {message}")]
    BadRollout { index: usize, message: String },
    /// candle (training, the reference model) failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// Reading episodes failed.
    #[error(transparent)]
    Env(#[from] wmrl_env::EnvError),
    /// A training or export setting or dataset is unusable.
    #[error("{0}")]
    Config(String),
    /// Filesystem error with the path involved.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// Plotting failed.
    #[error("plot: {0}")]
    Plot(String),
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, WmError>;

pub(crate) fn io_err(path: &std::path::Path, e: impl std::fmt::Display) -> WmError {
    WmError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}
