//! The crate's one error type.

use std::path::PathBuf;

/// Everything the AutoResearch track can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("io error at {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bad competition {name}: {reason}")]
    Competition { name: String, reason: String },
    #[error("bad csv {path}: {reason}")]
    Csv { path: PathBuf, reason: String },
    #[error("json error at {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("sandbox: {0}")]
    Sandbox(String),
    #[error("model: {0}")]
    Model(#[from] candle_core::Error),
    /// The policy update (a non-finite loss or gradient leaves the policy
    /// untouched).
    #[error("policy update: {0}")]
    Update(#[from] wmrl_grpo::GrpoError),
    /// Exporting the predictor to ONNX, or loading or running it through
    /// ONNX Runtime (the message names the file).
    #[error("onnx predictor: {0}")]
    Onnx(#[from] wmrl_onnx::OnnxError),
    #[error("core: {0}")]
    Core(#[from] wmrl_core::CoreError),
    #[error("invalid config: {0}")]
    Config(String),
    /// A run's record file that cannot be written or cut back.
    #[error("record file {0}")]
    Record(#[from] wmrl_run::RecordError),
    /// Something a live process holds (a reward service's state file).
    #[error("in use: {0}")]
    InUse(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
