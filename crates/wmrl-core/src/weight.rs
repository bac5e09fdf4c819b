//! Inverse-variance denoising (METHOD.md step 4): measure how much the
//! calibrated world model disagrees with the real outcomes inside anchor
//! groups, smooth it with an EMA, and up-weight the anchor stream by
//! `1 + c * ema`, clipped to `[1, w_max]`.

use serde::{Deserialize, Serialize};

use crate::config::WeightConfig;
use crate::error::check_finite;
use crate::{CoreError, Result};

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Population variance.
pub fn variance(xs: &[f64]) -> f64 {
    let m = mean(xs);
    xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64
}

/// Normalised within-group disagreement of calibrated world-model scores `d`
/// with real scores `s`:
/// `mean(((d - mean d) - (s - mean s))^2) / var(s)`; `None` when
/// `var(s) < min_var` (the group carries no ranking information).
pub fn group_disagreement(d: &[f64], s: &[f64], min_var: f64) -> Result<Option<f64>> {
    if d.len() != s.len() {
        return Err(CoreError::Shape(format!(
            "{} calibrated scores for {} real scores",
            d.len(),
            s.len()
        )));
    }
    if d.is_empty() {
        return Err(CoreError::EmptyGroup { group: 0 });
    }
    check_finite("disagreement.d", d)?;
    check_finite("disagreement.s", s)?;
    let vs = variance(s);
    if vs < min_var {
        return Ok(None);
    }
    let (md, ms) = (mean(d), mean(s));
    let r = d
        .iter()
        .zip(s)
        .map(|(&di, &si)| ((di - md) - (si - ms)).powi(2))
        .sum::<f64>()
        / d.len() as f64;
    Ok(Some(r / vs))
}

/// The anchor weight's state across a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnchorWeight {
    cfg: WeightConfig,
    alpha: f64,
    ema: Option<f64>,
    groups: usize,
    scale: Option<f64>,
}

impl AnchorWeight {
    pub fn new(cfg: WeightConfig) -> Result<Self> {
        if !(cfg.w_max.is_finite() && cfg.w_max >= 1.0) {
            return Err(CoreError::InvalidConfig {
                key: "weight.w_max",
                value: cfg.w_max.to_string(),
                reason: "must be >= 1",
            });
        }
        if !(cfg.half_life_groups.is_finite() && cfg.half_life_groups > 0.0) {
            return Err(CoreError::InvalidConfig {
                key: "weight.half_life_groups",
                value: cfg.half_life_groups.to_string(),
                reason: "must be positive",
            });
        }
        let alpha = 1.0 - 0.5f64.powf(1.0 / cfg.half_life_groups);
        Ok(Self {
            cfg,
            alpha,
            ema: None,
            groups: 0,
            scale: None,
        })
    }

    /// Fold one anchor group's disagreement into the EMA. After `warmup`
    /// groups the scale `c = (target - 1) / ema` is frozen once (deferred
    /// while the EMA is still zero, since no finite `c` exists then).
    pub fn observe(&mut self, s2: f64) -> Result<()> {
        check_finite("weight.s2", &[s2])?;
        if s2 < 0.0 {
            return Err(CoreError::NonFinite {
                what: "weight.s2 (negative)",
                index: 0,
                value: s2,
            });
        }
        self.ema = Some(match self.ema {
            None => s2,
            Some(e) => e + self.alpha * (s2 - e),
        });
        self.groups += 1;
        if self.scale.is_none()
            && self.groups >= self.cfg.warmup_groups
            && let Some(e) = self.ema
            && e > 1e-12
        {
            self.scale = Some((self.cfg.target_weight - 1.0) / e);
        }
        Ok(())
    }

    /// `clip(1 + c * ema, 1, w_max)`, exactly 1 before the scale is frozen.
    pub fn weight(&self) -> f64 {
        match (self.scale, self.ema) {
            (Some(c), Some(e)) => (1.0 + c * e).clamp(1.0, self.cfg.w_max),
            _ => 1.0,
        }
    }

    pub fn ema(&self) -> Option<f64> {
        self.ema
    }
    pub fn groups_observed(&self) -> usize {
        self.groups
    }
    pub fn scale(&self) -> Option<f64> {
        self.scale
    }
    pub fn at_max(&self) -> bool {
        self.weight() >= self.cfg.w_max
    }
    pub fn config(&self) -> &WeightConfig {
        &self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disagreement_is_zero_for_shifted_copies_and_skips_flat_groups() {
        let s = [0.0, 1.0, 0.0, 1.0];
        let d = [0.3, 1.3, 0.3, 1.3];
        assert_eq!(group_disagreement(&d, &s, 1e-9).expect("ok"), Some(0.0));
        assert_eq!(group_disagreement(&d, &[1.0; 4], 1e-9).expect("ok"), None);
        // A flat world model disagrees by exactly var(s)/var(s) = 1.
        let v = group_disagreement(&[0.5; 4], &s, 1e-9).expect("ok");
        assert!((v.expect("some") - 1.0).abs() < 1e-12);
    }

    #[test]
    fn weight_is_one_in_warmup_then_target_then_clipped() {
        let cfg = WeightConfig {
            warmup_groups: 4,
            ..WeightConfig::default()
        };
        let mut w = AnchorWeight::new(cfg).expect("ok");
        for _ in 0..3 {
            w.observe(0.5).expect("ok");
            assert_eq!(w.weight(), 1.0);
        }
        w.observe(0.5).expect("ok");
        assert!((w.weight() - 2.0).abs() < 1e-12, "{}", w.weight());
        for _ in 0..2000 {
            w.observe(50.0).expect("ok");
        }
        assert_eq!(w.weight(), 4.0);
        assert!(w.at_max());
        for _ in 0..2000 {
            w.observe(0.0).expect("ok");
        }
        assert!(w.weight() < 1.0 + 1e-6);
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let bad = WeightConfig {
            w_max: 0.5,
            ..WeightConfig::default()
        };
        assert!(matches!(
            AnchorWeight::new(bad),
            Err(CoreError::InvalidConfig {
                key: "weight.w_max",
                ..
            })
        ));
        let mut w = AnchorWeight::new(WeightConfig::default()).expect("ok");
        assert!(w.observe(f64::NAN).is_err());
        assert!(group_disagreement(&[0.1, f64::INFINITY], &[0.0, 1.0], 1e-9).is_err());
        assert!(group_disagreement(&[], &[], 1e-9).is_err());
    }
}
