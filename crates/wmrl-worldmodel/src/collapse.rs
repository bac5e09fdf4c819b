//! From a rollout to model input and back: uniform frame sub-sampling to the
//! model's T frames, frame-to-tensor conversion, and collapsing per-frame
//! progress into one cheap reward per rollout.
//!
//! Pure functions, no ONNX Runtime: the trainer's reward path and the tests
//! use them directly.

use serde::{Deserialize, Serialize};
use wmrl_env::Frame;

/// How per-frame predictions become one score per rollout (METHOD.md, robot
/// track: potential shaping by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoreMode {
    /// Mean progress of the last k frames minus the mean of the first k
    /// (k = [`DEFAULT_POTENTIAL_K`] = 3 by default).
    #[default]
    Potential,
    /// Progress of the last frame.
    Final,
    /// Highest progress over the frames.
    Max,
    /// Success probability of the last frame.
    Success,
}

/// Window of the `potential` score (METHOD.md: k = 3).
pub const DEFAULT_POTENTIAL_K: usize = 3;

impl std::str::FromStr for ScoreMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "potential" => Ok(Self::Potential),
            "final" => Ok(Self::Final),
            "max" => Ok(Self::Max),
            "success" => Ok(Self::Success),
            other => Err(format!(
                "unknown score mode `{other}` (expected potential, final, max or success)"
            )),
        }
    }
}

/// Indices of `t` frames spread uniformly over `n >= 1` frames, first and
/// last included; frames repeat when `n < t`.
pub fn uniform_indices(n: usize, t: usize) -> Vec<usize> {
    if n == 0 || t == 0 {
        return Vec::new();
    }
    if t == 1 {
        return vec![n - 1];
    }
    (0..t)
        .map(|i| ((i * (n - 1)) as f64 / (t - 1) as f64).round() as usize)
        .collect()
}

/// Collapse per-frame predictions to one score. `progress` and `success`
/// have one value per model frame (non-empty).
pub fn collapse(progress: &[f32], success: &[f32], mode: ScoreMode, k: usize) -> f32 {
    let n = progress.len();
    if n == 0 {
        return 0.0;
    }
    match mode {
        ScoreMode::Potential => {
            let k = k.clamp(1, (n / 2).max(1));
            let first: f32 = progress[..k].iter().sum::<f32>() / k as f32;
            let last: f32 = progress[n - k..].iter().sum::<f32>() / k as f32;
            last - first
        }
        ScoreMode::Final => progress[n - 1],
        ScoreMode::Max => progress.iter().copied().fold(f32::MIN, f32::max),
        ScoreMode::Success => success.last().copied().unwrap_or(0.0),
    }
}

/// Append a frame as CHW float32 in [0, 1] to `out`.
pub fn push_frame_chw(frame: &Frame, out: &mut Vec<f32>) {
    let hw = frame.width as usize * frame.height as usize;
    let start = out.len();
    out.resize(start + 3 * hw, 0.0);
    let dst = &mut out[start..];
    for (p, px) in frame.rgb.chunks_exact(3).enumerate() {
        for c in 0..3 {
            dst[c * hw + p] = f32::from(px[c]) / 255.0;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn uniform_indices_cover_both_ends_and_repeat_when_short() {
        assert_eq!(uniform_indices(100, 8)[0], 0);
        assert_eq!(*uniform_indices(100, 8).last().unwrap(), 99);
        let idx = uniform_indices(100, 8);
        assert!(idx.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(uniform_indices(3, 8), vec![0, 0, 1, 1, 1, 1, 2, 2]);
        assert_eq!(uniform_indices(1, 4), vec![0, 0, 0, 0]);
        assert!(uniform_indices(0, 8).is_empty());
    }

    #[test]
    fn collapse_modes() {
        let p = [0.0, 0.1, 0.2, 0.3, 0.5, 0.9, 0.7, 0.8];
        let s = [0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.2, 0.6];
        let pot = collapse(&p, &s, ScoreMode::Potential, 3);
        assert!((pot - (0.8 - 0.1)).abs() < 1e-6, "{pot}");
        assert_eq!(collapse(&p, &s, ScoreMode::Final, 3), 0.8);
        assert_eq!(collapse(&p, &s, ScoreMode::Max, 3), 0.9);
        assert_eq!(collapse(&p, &s, ScoreMode::Success, 3), 0.6);
        // k larger than half the frames shrinks to fit
        let pot2 = collapse(&[0.0, 1.0], &[0.0, 0.0], ScoreMode::Potential, 3);
        assert_eq!(pot2, 1.0);
    }

    #[test]
    fn score_mode_parses_and_serializes_lowercase() {
        assert_eq!("final".parse::<ScoreMode>().unwrap(), ScoreMode::Final);
        assert!("best".parse::<ScoreMode>().is_err());
        assert_eq!(
            serde_json::to_string(&ScoreMode::Potential).unwrap(),
            "\"potential\""
        );
        assert_eq!(ScoreMode::default(), ScoreMode::Potential);
    }

    #[test]
    fn frames_become_chw_in_unit_range() {
        let f = Frame::new(2, 1, vec![255, 0, 51, 0, 255, 102]).unwrap();
        let mut v = Vec::new();
        push_frame_chw(&f, &mut v);
        assert_eq!(v.len(), 6);
        assert_eq!(v[0], 1.0); // R of pixel 0
        assert_eq!(v[1], 0.0); // R of pixel 1
        assert!((v[4] - 0.2).abs() < 1e-6); // B of pixel 0
        assert!((v[5] - 0.4).abs() < 1e-6);
    }
}
