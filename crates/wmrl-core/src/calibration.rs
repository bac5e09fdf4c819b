//! Online debiasing (METHOD.md step 3): an isotonic map from world-model
//! scores to the real-outcome scale, refitted on a FIFO buffer of anchor
//! pairs. The map is monotone, so it never reorders a group, and
//! piecewise-linear (non-affine), so GRPO's per-group standardisation does not
//! cancel it. Before the first fit it is the identity.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::config::{CalibrationConfig, CalibrationMode};
use crate::error::check_finite;
use crate::{CoreError, Result};

/// Weighted pool-adjacent-violators on points already sorted by x: returns
/// the non-decreasing least-squares fit, one value per input point.
pub fn pav(ys: &[f64], ws: &[f64]) -> Vec<f64> {
    // Blocks as (weighted mean, weight, number of points).
    let mut blocks: Vec<(f64, f64, usize)> = Vec::with_capacity(ys.len());
    for (&y, &w) in ys.iter().zip(ws) {
        blocks.push((y, w, 1));
        while blocks.len() >= 2 {
            let (m2, w2, n2) = blocks[blocks.len() - 1];
            let (m1, w1, n1) = blocks[blocks.len() - 2];
            if m1 <= m2 {
                break;
            }
            let w = w1 + w2;
            blocks.truncate(blocks.len() - 2);
            blocks.push(((m1 * w1 + m2 * w2) / w, w, n1 + n2));
        }
    }
    blocks
        .into_iter()
        .flat_map(|(m, _, n)| std::iter::repeat_n(m, n))
        .collect()
}

/// A fitted monotone map: linear between knots, flat beyond the end knots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IsotonicMap {
    /// Strictly increasing.
    xs: Vec<f64>,
    /// Non-decreasing, same length as `xs`.
    ys: Vec<f64>,
}

impl IsotonicMap {
    /// Fit exactly over all (x, y, weight) points: ties in x are merged into
    /// their weighted mean first (as scikit-learn does), then weighted PAV.
    /// `None` when fewer than two distinct x values exist.
    pub fn fit_exact(xs: &[f64], ys: &[f64], ws: &[f64]) -> Option<Self> {
        let mut idx: Vec<usize> = (0..xs.len()).collect();
        idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
        let (mut ux, mut uy, mut uw) = (Vec::new(), Vec::new(), Vec::new());
        for i in idx {
            match ux.last() {
                Some(&last) if last == xs[i] => {
                    let k = uy.len() - 1;
                    let w: f64 = uw[k] + ws[i];
                    uy[k] = (uy[k] * uw[k] + ys[i] * ws[i]) / w;
                    uw[k] = w;
                }
                _ => {
                    ux.push(xs[i]);
                    uy.push(ys[i]);
                    uw.push(ws[i]);
                }
            }
        }
        Self::from_sorted_points(ux, &uy, &uw)
    }

    /// The paper's binned fit: `bins` equal-width bins over `[lo, hi]`, the
    /// mean x and mean y of each non-empty bin, PAV on bin means weighted by
    /// counts. `None` when fewer than two bins are occupied.
    pub fn fit_binned(xs: &[f64], ys: &[f64], bins: usize, lo: f64, hi: f64) -> Option<Self> {
        if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) || bins < 2 {
            return None;
        }
        let mut sx = vec![0.0; bins];
        let mut sy = vec![0.0; bins];
        let mut n = vec![0usize; bins];
        let width = (hi - lo) / bins as f64;
        for (&x, &y) in xs.iter().zip(ys) {
            let b = (((x - lo) / width).floor().max(0.0) as usize).min(bins - 1);
            sx[b] += x;
            sy[b] += y;
            n[b] += 1;
        }
        let (mut bx, mut by, mut bw) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..bins {
            if n[b] > 0 {
                bx.push(sx[b] / n[b] as f64);
                by.push(sy[b] / n[b] as f64);
                bw.push(n[b] as f64);
            }
        }
        Self::from_sorted_points(bx, &by, &bw)
    }

    fn from_sorted_points(xs: Vec<f64>, ys: &[f64], ws: &[f64]) -> Option<Self> {
        if xs.len() < 2 {
            return None;
        }
        let ys = pav(ys, ws);
        Some(Self { xs, ys })
    }

    /// Evaluate at one finite x.
    pub fn eval(&self, x: f64) -> f64 {
        let n = self.xs.len();
        if x <= self.xs[0] {
            return self.ys[0];
        }
        if x >= self.xs[n - 1] {
            return self.ys[n - 1];
        }
        // First knot strictly greater than x; 1 <= i <= n-1 here.
        let i = self.xs.partition_point(|&k| k <= x);
        let (x0, x1, y0, y1) = (self.xs[i - 1], self.xs[i], self.ys[i - 1], self.ys[i]);
        y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    }

    pub fn knots(&self) -> (&[f64], &[f64]) {
        (&self.xs, &self.ys)
    }
}

/// The online calibrator: FIFO buffer of (world model, real) pairs and the
/// current map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibrator {
    cfg: CalibrationConfig,
    buf: VecDeque<(f64, f64)>,
    new_since_fit: usize,
    map: Option<IsotonicMap>,
    n_fits: usize,
}

impl Calibrator {
    pub fn new(cfg: CalibrationConfig) -> Result<Self> {
        if cfg.bins < 2 || cfg.refit_every == 0 || cfg.cap < cfg.min_pairs.max(2) {
            return Err(CoreError::InvalidConfig {
                key: "calibration",
                value: format!(
                    "bins={} refit_every={} cap={} min_pairs={}",
                    cfg.bins, cfg.refit_every, cfg.cap, cfg.min_pairs
                ),
                reason: "need bins >= 2, refit_every >= 1, cap >= max(min_pairs, 2)",
            });
        }
        Ok(Self {
            cfg,
            buf: VecDeque::new(),
            new_since_fit: 0,
            map: None,
            n_fits: 0,
        })
    }

    /// Add anchor pairs; refit when the buffer holds `min_pairs` and either no
    /// map exists yet or `refit_every` pairs arrived since the last fit.
    /// Pairs arrive a batch at a time, so a refit happens after the batch that
    /// crosses the threshold. Returns whether a refit happened.
    pub fn push(&mut self, wm: &[f64], real: &[f64]) -> Result<bool> {
        if wm.len() != real.len() {
            return Err(CoreError::Shape(format!(
                "{} world-model scores for {} real scores",
                wm.len(),
                real.len()
            )));
        }
        check_finite("calibration.wm", wm)?;
        check_finite("calibration.real", real)?;
        for (&x, &y) in wm.iter().zip(real) {
            if self.buf.len() == self.cfg.cap {
                self.buf.pop_front();
            }
            self.buf.push_back((x, y));
        }
        self.new_since_fit += wm.len();
        let due = self.map.is_none() || self.new_since_fit >= self.cfg.refit_every;
        if self.buf.len() >= self.cfg.min_pairs && due {
            return Ok(self.refit());
        }
        Ok(false)
    }

    /// Fit on the whole buffer now. Keeps the previous map when the buffer
    /// has fewer than two distinct score levels.
    pub fn refit(&mut self) -> bool {
        let xs: Vec<f64> = self.buf.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = self.buf.iter().map(|p| p.1).collect();
        let fitted = fit_map(&self.cfg, &xs, &ys);
        self.new_since_fit = 0;
        match fitted {
            Some(m) => {
                self.map = Some(m);
                self.n_fits += 1;
                true
            }
            None => false,
        }
    }

    /// Map scores through the calibration (identity before the first fit).
    pub fn apply(&self, xs: &[f64]) -> Result<Vec<f64>> {
        check_finite("calibration.apply", xs)?;
        Ok(match &self.map {
            Some(m) => xs.iter().map(|&x| m.eval(x)).collect(),
            None => xs.to_vec(),
        })
    }

    pub fn map(&self) -> Option<&IsotonicMap> {
        self.map.as_ref()
    }
    pub fn is_fitted(&self) -> bool {
        self.map.is_some()
    }
    pub fn n_fits(&self) -> usize {
        self.n_fits
    }
    pub fn n_pairs(&self) -> usize {
        self.buf.len()
    }
    pub fn pairs(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.buf.iter().copied()
    }
}

/// Fit a map on pairs with the configured mode and range.
pub fn fit_map(cfg: &CalibrationConfig, xs: &[f64], ys: &[f64]) -> Option<IsotonicMap> {
    match cfg.mode {
        CalibrationMode::Exact => IsotonicMap::fit_exact(xs, ys, &vec![1.0; xs.len()]),
        CalibrationMode::Binned => {
            let [lo, hi] = cfg.range.unwrap_or_else(|| {
                let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                [lo, hi]
            });
            IsotonicMap::fit_binned(xs, ys, cfg.bins, lo, hi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(min_pairs: usize, refit_every: usize, cap: usize) -> CalibrationConfig {
        CalibrationConfig {
            min_pairs,
            refit_every,
            cap,
            ..CalibrationConfig::default()
        }
    }

    #[test]
    fn refits_on_schedule_and_keeps_a_fifo_cap() {
        let mut c = Calibrator::new(cfg(20, 10, 30)).expect("valid");
        let xs: Vec<f64> = (0..8).map(|i| i as f64 / 7.0).collect();
        let ys = xs.clone();
        assert!(!c.push(&xs, &ys).expect("ok")); // 8
        assert!(!c.push(&xs, &ys).expect("ok")); // 16
        assert!(c.push(&xs, &ys).expect("ok")); // 24 >= min_pairs: first fit
        assert!(!c.push(&xs, &ys).expect("ok")); // 8 new < 10
        assert!(c.push(&xs, &ys).expect("ok")); // 16 new >= 10
        assert_eq!(c.n_fits(), 2);
        assert_eq!(c.n_pairs(), 30);
    }

    #[test]
    fn map_interpolates_between_bin_means_and_is_flat_outside() {
        let xs = [0.0, 0.1, 0.9, 1.0];
        let ys = [0.0, 0.2, 0.6, 1.0];
        let m = IsotonicMap::fit_binned(&xs, &ys, 2, 0.0, 1.0).expect("fit");
        // Bin means: (0.05, 0.1) and (0.95, 0.8).
        assert!((m.eval(0.5) - 0.45).abs() < 1e-12);
        assert_eq!(m.eval(-3.0), 0.1);
        assert_eq!(m.eval(3.0), 0.8);
    }

    #[test]
    fn decreasing_bin_means_are_pooled() {
        let xs = [0.0, 0.5, 1.0];
        let ys = [0.0, 1.0, 0.5];
        let m = IsotonicMap::fit_binned(&xs, &ys, 3, 0.0, 1.0).expect("fit");
        let (_, y) = m.knots();
        assert_eq!(y, &[0.0, 0.75, 0.75]);
    }

    #[test]
    fn a_single_score_level_keeps_the_identity() {
        let mut c = Calibrator::new(cfg(4, 4, 10)).expect("valid");
        assert!(
            !c.push(&[0.3; 6], &[1.0, 0.0, 1.0, 0.0, 1.0, 1.0])
                .expect("ok")
        );
        assert_eq!(c.apply(&[0.7]).expect("ok"), vec![0.7]);
        assert!(c.push(&[0.3], &[f64::NAN]).is_err());
        assert!(c.push(&[0.3, 0.2], &[1.0]).is_err());
    }
}
