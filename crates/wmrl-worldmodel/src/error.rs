//! The one error type of the crate. Every failure a user can cause (missing
//! library, missing or broken model file, a model with another contract, bad
//! rollouts) is a variant with a message that says what to do.

/// Errors of the world-model crate.
#[derive(Debug, thiserror::Error)]
pub enum WmError {
    /// The ONNX Runtime shared library could not be found or loaded.
    #[error(
        "ONNX Runtime library not available: {reason}. Run `scripts/setup` (installs \
         onnxruntime into .cache/onnxruntime), or point ORT_DYLIB_PATH at a \
         libonnxruntime.so (>= 1.24)"
    )]
    RuntimeMissing { reason: String },
    /// The model file does not exist or cannot be read.
    #[error("model file {path}: {message}")]
    ModelFile { path: String, message: String },
    /// ONNX Runtime rejected the file (truncated, not ONNX, bad graph).
    #[error("ONNX Runtime could not load model {path}: {message}")]
    ModelLoad { path: String, message: String },
    /// The model loaded but its inputs/outputs differ from the contract.
    #[error("model {path} does not follow the progress-model contract: {message}")]
    Contract { path: String, message: String },
    /// A rollout the caller passed in cannot be scored.
    #[error("invalid rollout {index}: {message}")]
    BadRollout { index: usize, message: String },
    /// ONNX Runtime failed while running the model.
    #[error("ONNX Runtime inference failed: {0}")]
    Inference(String),
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

impl From<wmrl_onnx::OnnxError> for WmError {
    fn from(e: wmrl_onnx::OnnxError) -> Self {
        use wmrl_onnx::OnnxError as O;
        match e {
            O::RuntimeMissing { reason } => Self::RuntimeMissing { reason },
            O::ModelFile { path, message } => Self::ModelFile { path, message },
            O::ModelLoad { path, message } => Self::ModelLoad { path, message },
            O::Contract { path, message } => Self::Contract { path, message },
            O::Inference(m) => Self::Inference(m),
            O::Config(m) => Self::Config(m),
            O::Io { path, message } => Self::Io { path, message },
        }
    }
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, WmError>;

pub(crate) fn io_err(path: &std::path::Path, e: impl std::fmt::Display) -> WmError {
    WmError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}
