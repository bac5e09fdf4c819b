//! Robometer-style progress world model for the robot track.
//!
//! - [`WorldModel`]: load any ONNX model with the progress contract
//!   (docs/worldmodel.md) and score rollouts through ONNX Runtime (`ort`):
//!   uniform sub-sampling to T frames, batched calls, one score per rollout
//!   ([`ScoreMode`]).
//! - [`ProgressNet`] and [`train`]: wmrl's own small model, trained in candle
//!   on episodes labelled by the simulator's progress oracle.
//! - [`finetune`]: a trained model fine-tuned from its weights on rollouts
//!   labelled by their real outcome (a run's online refit).
//! - [`export`]: the trained weights as a real `.onnx` file (opset 17), the
//!   graph built here with hand-written protobuf messages ([`onnx_proto`]).
//! - [`mlp`]: any small dense network (`x @ W + b` layers) as an ONNX file,
//!   and [`MlpSession`] to run it through ONNX Runtime.
//! - [`metrics`]: Spearman, AUROC and calibration curves for `wmrl wm report`.
//!
//! The ONNX Runtime library is loaded at run time ([`runtime`]); when it is
//! missing every entry point returns [`OnnxError::RuntimeMissing`] naming
//! `scripts/setup`, never a panic.

pub mod collapse;
pub mod contract;
mod error;
pub mod export;
pub mod finetune;
mod inference;
pub mod metrics;
pub mod net;
pub mod parity;
pub mod quality;
pub mod synthetic;
pub mod train;

pub use collapse::{DEFAULT_POTENTIAL_K, ScoreMode, uniform_indices};
pub use contract::ModelShape;
pub use error::{Result, WmError};
pub use export::export_onnx;
pub use finetune::{FineTuneConfig, fine_tune};
pub use inference::{
    ExecutionProvider, RolloutFrames, RolloutScore, WorldModel, WorldModelConfig,
    cuda_provider_status,
};
pub use net::{NetConfig, ProgressNet};

/// A Python helper shipped with this crate (`python/<name>`), e.g.
/// `parity.py` or `bench.py`.
pub fn python_script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(name)
}
