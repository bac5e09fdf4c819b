//! The WMRL trainer: joins the simulator (in-process or over the bridge), the
//! policy, the world model and the method's correction loop into runs,
//! evaluations, benchmarks across the reward arms, and reports.
//!
//! It owns no method logic (that is `wmrl-core`) and no model code (that is
//! `wmrl-policy` and `wmrl-worldmodel`): it orders calls and keeps records.

pub mod bench;
pub mod config;
pub mod confirm;
pub mod credit;
pub mod device;
pub mod env;
mod error;
pub mod labels;
pub mod metrics;
pub mod plot;
pub mod policy_kind;
pub mod rollout;
pub mod sft;
pub mod spread;
pub mod trainer;
pub mod wm_refit;

pub use config::{
    Backend, CreditConfig, CreditSource, EnvConfig, LabelSource, LabelsSection, LiberoEnvConfig,
    LossNorm, LossSection, TrainConfig,
};
pub use device::Placement;
pub use env::make_env;
pub use error::{Result, TrainError};
pub use policy_kind::{ActorOptions, PolicyKind, PolicyKinds};
pub use sft::{SftDone, SftRequest};
pub use trainer::{EvalSplit, RunSummary, Trainer, export_policy, export_policy_with};
