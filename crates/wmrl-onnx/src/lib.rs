//! The ONNX pieces both tracks share, without the robot world model.
//!
//! - [`runtime`]: find and load the ONNX Runtime shared library once per
//!   process (`ort` with `load-dynamic`; a missing library is
//!   [`OnnxError::RuntimeMissing`] naming `scripts/setup`, never a panic).
//! - [`onnx_proto`]: the ONNX protobuf messages, written by hand with prost.
//! - [`mlp`]: any small dense network (`x @ W + b` layers with element-wise
//!   activations) as an ONNX file, and [`MlpSession`] to score it through
//!   ONNX Runtime (the AutoResearch outcome predictor).
//! - [`model_proto`] and [`write_atomic`]: the model wrapper and the atomic
//!   file write every wmrl export shares (the robot world model's too).

pub mod mlp;
pub mod onnx_proto;
pub mod runtime;

use std::path::Path;

pub use mlp::{Activation, DenseLayer, MlpGraph, MlpSession, export_mlp_onnx};
pub use runtime::runtime_available;

use onnx_proto::{GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto};

/// The ONNX opset every wmrl export targets.
pub const OPSET: i64 = 17;
/// The ONNX IR version of wmrl's exports.
pub const IR_VERSION: i64 = 8;

/// Errors of the shared ONNX code.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
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
    /// The model loaded but its inputs/outputs differ from what the caller
    /// needs.
    #[error("model {path} does not follow its contract: {message}")]
    Contract { path: String, message: String },
    /// ONNX Runtime failed while running the model.
    #[error("ONNX Runtime inference failed: {0}")]
    Inference(String),
    /// A graph or setting is unusable.
    #[error("{0}")]
    Config(String),
    /// Filesystem error with the path involved.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, OnnxError>;

fn io_err(path: &Path, e: impl std::fmt::Display) -> OnnxError {
    OnnxError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The model wrapper every wmrl export shares: IR version, opset, producer,
/// and the metadata entries.
pub fn model_proto(
    graph: GraphProto,
    doc_string: String,
    metadata: Vec<(String, String)>,
) -> ModelProto {
    ModelProto {
        ir_version: IR_VERSION,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: OPSET,
        }],
        producer_name: "wmrl".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        domain: "wmrl".into(),
        model_version: 1,
        doc_string,
        graph: Some(graph),
        metadata_props: metadata
            .into_iter()
            .map(|(key, value)| StringStringEntryProto { key, value })
            .collect(),
    }
}

/// Write ONNX bytes atomically: parent directories, a temporary name, then
/// rename, so a reader never sees a half-written model.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    wmrl_run::atomic_write(path, bytes).map_err(|e| io_err(Path::new(&e.path), e.message))
}
