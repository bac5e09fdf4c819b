//! Measuring a loaded progress model on held-out episodes: per-frame Spearman
//! against the oracle progress, success AUROC of the collapsed score and of
//! the success head, and the calibration curve of the collapsed score against
//! real success. Reads episodes one chunk at a time to bound memory.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::metrics::{CalibrationBin, auroc, calibration_curve, spearman};
use crate::{Result, RolloutFrames, ScoreMode, WorldModel, uniform_indices};

/// Quality figures of one model on one set of episodes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QualityReport {
    pub model: String,
    pub mode: ScoreMode,
    pub n_rollouts: usize,
    pub n_success: usize,
    /// Spearman of predicted vs oracle progress over all sub-sampled frames.
    pub spearman_per_frame: Option<f64>,
    /// Spearman of predicted vs oracle progress at the last frame, across rollouts.
    pub spearman_final: Option<f64>,
    /// AUROC of the collapsed score for real success.
    pub auroc_score: Option<f64>,
    /// AUROC of the success head's last-frame probability for real success.
    pub auroc_success_head: Option<f64>,
    pub mean_score_success: Option<f32>,
    pub mean_score_failure: Option<f32>,
    pub calibration: Vec<CalibrationBin>,
}

/// Per-rollout numbers behind a report.
#[derive(Debug, Clone, Default)]
pub struct Scored {
    pub scores: Vec<f32>,
    pub success: Vec<bool>,
    pub last_success_prob: Vec<f32>,
    pub pred_frames: Vec<f32>,
    pub oracle_frames: Vec<f32>,
    pub pred_final: Vec<f32>,
    pub oracle_final: Vec<f32>,
}

/// Score the episodes at `paths` (camera `camera`) and collect the figures.
pub fn evaluate_paths(
    wm: &mut WorldModel,
    paths: &[PathBuf],
    camera: usize,
    mode: ScoreMode,
    bins: usize,
) -> Result<QualityReport> {
    let t = wm.shape().num_frames;
    let mut acc = Scored::default();
    for chunk in paths.chunks(32) {
        let eps = chunk
            .iter()
            .map(|p| wmrl_env::read_episode(p))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let rollouts: Vec<RolloutFrames> = eps
            .iter()
            .map(|e| RolloutFrames {
                instruction: &e.instruction,
                frames: e
                    .steps
                    .iter()
                    .filter_map(|s| s.frames.get(camera))
                    .collect(),
            })
            .collect();
        let scored = wm.score(&rollouts, mode)?;
        for (e, s) in eps.iter().zip(&scored) {
            acc.scores.push(s.score);
            acc.success.push(e.success);
            acc.last_success_prob
                .push(s.per_frame_success.last().copied().unwrap_or(0.0));
            let idx = uniform_indices(e.steps.len(), t);
            let oracle: Vec<Option<f32>> = idx.iter().map(|&i| e.steps[i].progress).collect();
            if oracle.iter().all(Option::is_some) {
                let oracle: Vec<f32> = oracle.into_iter().flatten().collect();
                acc.pred_frames.extend(&s.per_frame_progress);
                acc.oracle_frames.extend(&oracle);
                acc.pred_final.push(s.per_frame_progress[t - 1]);
                acc.oracle_final.push(oracle[t - 1]);
            }
        }
    }
    Ok(report_from(
        wm.path().display().to_string(),
        mode,
        &acc,
        bins,
    ))
}

/// Turn collected numbers into a report.
pub fn report_from(model: String, mode: ScoreMode, acc: &Scored, bins: usize) -> QualityReport {
    let mean_where = |want: bool| {
        let v: Vec<f32> = acc
            .scores
            .iter()
            .zip(&acc.success)
            .filter(|(_, s)| **s == want)
            .map(|(x, _)| *x)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f32>() / v.len() as f32)
    };
    QualityReport {
        model,
        mode,
        n_rollouts: acc.scores.len(),
        n_success: acc.success.iter().filter(|s| **s).count(),
        spearman_per_frame: spearman(&acc.pred_frames, &acc.oracle_frames),
        spearman_final: spearman(&acc.pred_final, &acc.oracle_final),
        auroc_score: auroc(&acc.scores, &acc.success),
        auroc_success_head: auroc(&acc.last_success_prob, &acc.success),
        mean_score_success: mean_where(true),
        mean_score_failure: mean_where(false),
        calibration: calibration_curve(&acc.scores, &acc.success, bins),
    }
}
