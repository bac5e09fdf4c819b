//! `wmrl-policy`: the MiniVLA-style vision-language-action policy that WMRL
//! post-trains, written in candle.
//!
//! - [`PolicyConfig`] with presets `tiny` (CPU minutes), `small`, `minivla`
//!   (Qwen2.5-0.5B language-model dimensions);
//! - [`Policy`]: ViT over the camera frames -> projector -> decoder-only
//!   transformer over `[vision, instruction, proprio, action]` tokens, 7
//!   action dimensions x 256 bins, action chunks, autoregressive or parallel
//!   decoding; seeded batched [`Policy::sample`] returning the log-prob of
//!   every sampled token; differentiable [`Policy::token_stats`];
//!   safetensors checkpoints ([`Policy::save`], [`Policy::load`]);
//! - training pieces: [`nll_loss`] and [`train_sft`] (behaviour cloning),
//!   [`grpo_loss`] (clipped surrogate + KL to reference + entropy),
//!   [`PolicyOptimizer`] (AdamW, cosine schedule, grad-norm clipping);
//! - [`evaluate`] through any `wmrl_env::VecEnv`.
//!
//! This crate computes no rewards or advantages (that is `wmrl-core`) and
//! never talks to sockets or simulators directly.

mod action;
mod actor;
mod checkpoint;
mod config;
pub mod episodes;
mod error;
mod eval;
pub mod eval_record;
mod grpo;
mod input;
mod learner;
mod model;
mod optim;
mod params;
mod policy;
mod runconfig;
mod sft;

#[cfg(test)]
mod tests;

pub use action::ActionTokenizer;
pub use actor::ActionPolicy;
/// The candle version this crate is built on, for callers that build tensors.
pub use candle_core as candle;
pub use checkpoint::{CONFIG_FILE, WEIGHTS_FILE, read_tensors};
pub use config::{ACTION_DIM, Decoding, PolicyConfig};
pub use error::{PolicyError, Result};
pub use eval::{
    EpisodeResult, EvalConfig, EvalReport, RateSummary, TaskResult, evaluate,
    evaluate_with_progress, write_gif,
};
pub use grpo::{GrpoBatch, GrpoConfig, grpo_loss, nll_loss};
pub use input::{PolicyInput, normalize_proprio, resize_frame};
pub use learner::{
    Learner, OPTIMIZER_FILE, TINY_POLICY_DIR, TinyLearner, UpdateBatch, UpdateSample,
    UpdateSettings, UpdateStats, minibatch_orders,
};
pub use model::PreparedInputs;
pub use optim::PolicyOptimizer;
pub use policy::{Policy, Sample, TokenStats, sample_row};
pub use runconfig::{RunConfig, apply_overrides};
pub use sft::{
    PROPRIO_STD_FLOOR, PolicySft, SftConfig, SftDataset, SftModel, SftReport, can_resume, train_sft,
};
