//! The policy update both tracks share (shared/METHOD.md step 7), in
//! candle and nothing else:
//! - [`objective`]: the clipped GRPO surrogate against frozen old
//!   log-probs (asymmetric upper clip allowed, as in DAPO), a KL penalty to
//!   a frozen reference (the k3 estimator `exp(ref - lp) - (ref - lp) - 1`,
//!   unbiased and non-negative) and an entropy bonus, as means over the
//!   unmasked units (tokens of robot action chunks, whole AutoResearch
//!   solutions);
//! - [`AdamW`]: backward, global grad-norm clipping, AdamW with decoupled
//!   weight decay on matrices and a warmup + cosine learning-rate schedule,
//!   its moments kept by parameter name so a run resumes exactly.
//!
//! Each track computes its own log-probabilities (a VLA's action tokens, a
//! categorical solution policy's slots) and hands them here.

mod objective;
mod optim;

pub use objective::{GrpoStats, Objective, ObjectiveInputs, objective};
pub use optim::{AdamW, Gradients, OptimConfig, StepStats};

/// What can go wrong in an update.
#[derive(Debug, thiserror::Error)]
pub enum GrpoError {
    #[error("tensor: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("invalid config: {0}")]
    Config(String),
    /// A loss or gradient that is not finite: nothing was updated.
    #[error("training diverged: {0}")]
    NonFinite(String),
    /// Saved optimiser state that lacks a tensor or has the wrong shape.
    #[error("optimizer state: tensor `{tensor}`: {message}")]
    State { tensor: String, message: String },
}

/// `Result` with [`GrpoError`].
pub type Result<T> = std::result::Result<T, GrpoError>;
