//! The WMRL method, framework-free (shared/METHOD.md): GRPO where most groups
//! are rewarded by a world model, a thin stream of anchor groups gets real
//! outcomes, an isotonic map calibrates the world model's scores, and an
//! inverse-variance weight up-weights the anchor stream.
//!
//! Both tracks (robots and AutoResearch) use this crate. It must never depend
//! on a model framework, a simulator, ONNX or sockets: serde and thiserror
//! only.
//!
//! Entry points: [`CorrectionLoop::step`], driven by a [`Scorers`]
//! implementation, and the training loop both tracks share, [`Run`] over a
//! [`Track`] (rollouts, scorers, the policy update, evaluation).

pub mod advantage;
pub mod anchors;
pub mod calibration;
pub mod config;
pub mod correction;
pub mod diagnostics;
mod error;
pub mod ledger;
pub mod rank;
pub mod refit;
pub mod rng;
pub mod stats;
pub mod track;
pub mod weight;

pub use advantage::group_advantages;
pub use anchors::AnchorScheduler;
pub use calibration::{Calibrator, IsotonicMap, pav};
pub use config::{
    AdvantageConfig, AnchorConfig, AnchorFraction, AnchorMode, AnchorReward, Arm, AutoRange,
    CalibrationConfig, CalibrationMode, CoreConfig, ScoreRange, WeightConfig,
};
pub use correction::{CorrectionLoop, ScorerError, Scorers, StepOutcome, StepStats, is_flat_group};
pub use diagnostics::{Diagnostics, DiagnosticsSummary};
pub use error::{CoreError, Result};
pub use ledger::{Ledger, Stage};
pub use refit::{AnchorGroup, RefitConfig, RefitDecision};
pub use track::{Journal, NoJournal, Run, Schedule, Step, Track};
pub use weight::{AnchorWeight, group_disagreement};
