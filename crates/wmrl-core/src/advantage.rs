//! Group-relative advantages (METHOD.md step 6).

use crate::config::AdvantageConfig;
use crate::error::check_finite;
use crate::{CoreError, Result};

/// Advantages of one group. `rewards[i] = None` marks an ungraded rollout: it
/// is excluded (advantage `None`), never scored zero. A group with fewer than
/// `min_graded` graded rollouts is skipped (all `None`). Graded advantages
/// are `(r - mean) / (std + eps)` (population std), or `r - mean` without
/// std scaling (Dr. GRPO), times `weight`.
pub fn group_advantages(
    rewards: &[Option<f64>],
    weight: f64,
    cfg: &AdvantageConfig,
) -> Result<Vec<Option<f64>>> {
    if rewards.is_empty() {
        return Err(CoreError::EmptyGroup { group: 0 });
    }
    let graded: Vec<f64> = rewards.iter().flatten().copied().collect();
    check_finite("rewards", &graded)?;
    check_finite("weight", &[weight])?;
    if graded.len() < cfg.min_graded.max(1) {
        return Ok(vec![None; rewards.len()]);
    }
    let n = graded.len() as f64;
    let mean = graded.iter().sum::<f64>() / n;
    let std = (graded.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
    let denom = if cfg.scale_by_std && std + cfg.eps > 0.0 {
        std + cfg.eps
    } else {
        // Dr. GRPO, or a flat group with eps = 0 (its centred rewards are 0).
        1.0
    };
    Ok(rewards
        .iter()
        .map(|r| r.map(|r| weight * (r - mean) / denom))
        .collect())
}
