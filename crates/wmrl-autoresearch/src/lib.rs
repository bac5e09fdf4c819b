//! The AutoResearch track (shared/METHOD.md): an agent writes solutions to
//! machine-learning competitions in MLE-Dojo's layout, a sandbox executes
//! them and grades them against leaderboards, a world model predicts the
//! grade without running the code, and wmrl-core's correction loop trains the
//! agent with GRPO. The saving here is sandbox CPU time, which the ledger
//! records.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod arm;
pub mod bench;
pub mod code_features;
pub mod collect;
pub mod competition;
mod error;
pub mod execute;
pub mod grade;
pub mod lock;
pub mod nn;
pub mod onnx_predictor;
pub mod policy;
pub mod predictor;
pub mod rewards;
pub mod rewards_http;
pub mod rundir;
pub mod sandbox;
pub mod solution;
pub mod table;
pub mod train;

pub use arm::{AR_ARMS, ar_name, parse_ar_arm};
pub use competition::{Competition, CompetitionMeta, Metric, N_META, Split, Suite, Task};
pub use error::{Error, Result};
pub use grade::{Grade, Ladder, Rung, Submission, grade, leaderboard_position, position_score};
pub use onnx_predictor::OnnxPredictor;
pub use sandbox::{Execution, Exit, Isolation, PathViews, RunReport, Sandbox, SandboxConfig};
pub use train::{TrainConfig, TrainReport, train};
/// The track's arms are the core's ([`arm`] names the three it runs).
pub use wmrl_core::Arm;
