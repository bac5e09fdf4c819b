//! The robot track's record types (metrics.jsonl, eval.jsonl,
//! calibration.jsonl, refits.jsonl), written and cut back to a checkpoint
//! through `wmrl_run::records`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wmrl_core::Ledger;

/// One line of metrics.jsonl: everything about one training step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    pub step: usize,
    pub arm: String,
    /// Real success rate of this step's rollouts (measured for every arm,
    /// shown to the learner only where the arm allows).
    pub batch_success: f64,
    pub mean_episode_steps: f64,
    pub anchor_groups: usize,
    pub realised_anchor_fraction: f64,
    pub labels_used: usize,
    pub labels_cumulative: u64,
    pub calibrated: bool,
    pub refit: bool,
    pub bias_reduction: Option<f64>,
    pub disagreement: Option<f64>,
    pub disagreement_raw: Option<f64>,
    pub anchor_weight: f64,
    /// The raw world model's AUROC for success on this step's anchor
    /// rollouts (pooled over anchor groups; absent where the arm reads no
    /// world model or the anchors all share one outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wm_anchor_auroc: Option<f64>,
    pub fallback_groups: usize,
    pub groups_skipped: usize,
    /// Groups whose advantages were all zero (no signal); left out of the
    /// update with `update.skip_flat_groups`.
    #[serde(default)]
    pub flat_groups: usize,
    /// Groups dropped this step because their outcomes were all equal and
    /// drawn again (`rollout.redraw_rounds`); paid for in the ledger.
    /// Absent when none were.
    #[serde(default, skip_serializing_if = "crate::config::is_zero")]
    pub redrawn_groups: usize,
    /// Groups whose chunks got a per-chunk credit that varies
    /// (`[update.credit]`); they enter the update even when flat.
    #[serde(default)]
    pub credit_groups: usize,
    /// Cosine between the policy gradients of two halves of every group's
    /// rollouts (same prompts, independent samples): near 0 means the
    /// step's gradient is noise (`update.measure_grad_snr`).
    #[serde(default)]
    pub grad_half_cosine: Option<f64>,
    /// `grad_half_cosine` per part of the network (`vision`, `projector`,
    /// `lm.embed`, `lm.blocks.N`, `lm.head`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grad_half_cosine_parts: BTreeMap<String, f64>,
    /// Cosine between the policy gradients of two halves of the groups
    /// (mostly different tasks): below 0 means the tasks' updates conflict.
    #[serde(default)]
    pub grad_cross_group_cosine: Option<f64>,
    pub adv_abs_mean: f64,
    pub adv_abs_max: f64,
    pub wm_score_mean: Option<f64>,
    pub samples_updated: usize,
    pub loss: f64,
    pub kl_ref: f64,
    pub clip_frac: f64,
    pub entropy: f64,
    pub grad_norm: f64,
    pub restarts: usize,
    pub ledger: Ledger,
    pub wall_seconds: f64,
}

/// One line of eval.jsonl.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    pub step: usize,
    /// `curve`, `heldout`, `heldout_sampled` or `in_domain`
    /// ([`crate::trainer::EvalSplit`]).
    pub split: String,
    /// The initial states evaluated, inclusive (absent before 2026-12-03).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<[usize; 2]>,
    pub success: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub episodes: usize,
    pub per_task: Vec<f64>,
    pub labels_cumulative: u64,
    /// Sampling temperature (0: greedy).
    #[serde(default)]
    pub temperature: f32,
    #[serde(default)]
    pub seconds: f64,
}

/// One line of calibration.jsonl: the fitted map's knots at a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationSnapshot {
    pub step: usize,
    pub xs: Vec<f64>,
    pub ys: Vec<f64>,
}

/// One line of refits.jsonl: a world-model refit (`wmrl.refit`) and its
/// verdict ([`wmrl_core::RefitDecision`]: the before/after AUROC and
/// within-group concordance on the held-out anchor groups).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefitRecord {
    #[serde(flatten)]
    pub decision: wmrl_core::RefitDecision,
    /// The candidate's ONNX file, relative to the run directory.
    pub model: String,
    /// Anchor rollouts (and their groups) the candidate was fine-tuned on.
    pub training_rollouts: usize,
    pub training_groups: usize,
    /// Held-out rollouts it was judged on.
    pub held_out_rollouts: usize,
    /// Fine-tune and export, wall and process CPU (charged to the
    /// ledger's world-model stage, with the candidate's scoring).
    pub fit_seconds: f64,
    pub fit_cpu_seconds: f64,
}
