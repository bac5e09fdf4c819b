//! MiniVLA (Stanford-ILIAD/openvla-mini): a Prismatic VLM with a fused
//! DINOv2 ViT-L/14 + SigLIP ViT-SO400M/14 backbone at 224 px, the
//! `fused-gelu-mlp` projector and Qwen2.5-0.5B, emitting 7 action tokens on
//! the last 256 ids of the tokenizer. Built from candle-transformers' pieces;
//! loads a Prismatic checkpoint converted by `scripts/convert_minivla.py`
//! (key map in docs/policy.md).
//!
//! Inference (load, greedy `predict_action`), whole-model behaviour cloning
//! on demonstrations ([`MiniVlaSft`], `wmrl sft --minivla`) and the pieces
//! of GRPO on the action tokens (`rl`: LoRA adapters, sampled and
//! recomputed log-probabilities, the objective, merged export); it must
//! never download anything (tokenizer and weights come from the directory).

mod config;
mod learner;
pub mod libero;
mod llm;
mod model;
mod policy;
pub mod rl;
mod sft;
pub mod stand_in;
mod vit;

#[cfg(test)]
mod tests;

pub use config::{ACTION_DIM, LlmConfig, MiniVlaConfig, VitConfig};
pub use learner::{ADAPTER_OPTIMIZER_FILE, ADAPTERS_FILE, MiniVlaLearner};
pub use model::{CONFIG_FILE, MiniVla, TOKENIZER_FILE, WEIGHTS_FILE, prompt, tensor_shapes};
pub use policy::{MiniVlaPolicy, STATS_FILE, is_minivla_dir};
pub use rl::{ActionSample, ActionStep, LoraConfig, Prefix};
pub use sft::MiniVlaSft;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum MiniVlaError {
    #[error("config: {0}")]
    Config(String),
    /// A tensor of the checkpoint is missing, mis-shaped or unexpected.
    #[error("{path}: tensor `{key}`: {message}")]
    Tensor {
        path: String,
        key: String,
        message: String,
    },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, MiniVlaError>;
