//! Online debiasing (METHOD.md step 3): an isotonic map from world-model
//! scores to the real-outcome scale, refitted on a FIFO buffer of anchor
//! pairs. The map is monotone, so it never reorders a group, and
//! piecewise-linear (non-affine), so GRPO's per-group standardisation does not
//! cancel it. Before the first fit it is the identity.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::config::{CalibrationConfig, CalibrationMode, ScoreRange};
use crate::error::check_finite;
use crate::{CoreError, Result};

/// Batches at least this long are mapped on several threads.
const PARALLEL_MIN: usize = 1 << 16;

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
        self.on_segment(i - 1, x)
    }

    /// The linear piece starting at knot `j`, at `x` (the one formula both
    /// evaluators use, so they agree to the bit).
    #[inline]
    fn on_segment(&self, j: usize, x: f64) -> f64 {
        let slope = (self.ys[j + 1] - self.ys[j]) / (self.xs[j + 1] - self.xs[j]);
        self.ys[j] + slope * (x - self.xs[j])
    }

    /// [`Self::eval`] over many scores (same values, to the bit): a table of
    /// equal-width buckets over the knots' span gives each score its linear
    /// piece in O(1) (slope and offset precomputed); only the few buckets
    /// that contain a knot search.
    pub fn eval_many(&self, xs: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; xs.len()];
        self.eval_into(xs, &mut out);
        out
    }

    /// [`Self::eval_many`] into a buffer the caller keeps (no allocation:
    /// a loop that maps a batch every step reuses one). `out` must be as
    /// long as `xs` (it panics on a shorter one; [`Calibrator::apply_into`]
    /// returns an error instead); extra entries are left as they are.
    pub fn eval_into(&self, xs: &[f64], out: &mut [f64]) {
        const MIXED: u32 = u32::MAX;
        let n = self.xs.len();
        let (x0, xn) = (self.xs[0], self.xs[n - 1]);
        let (y0, yn) = (self.ys[0], self.ys[n - 1]);
        let buckets = (64 * n).clamp(1024, 1 << 16);
        let width = (xn - x0) / buckets as f64;
        let inv = 1.0 / width;
        let slope: Vec<f64> = (0..n - 1)
            .map(|j| (self.ys[j + 1] - self.ys[j]) / (self.xs[j + 1] - self.xs[j]))
            .collect();
        // A bucket whose range, widened by a bucket on each side (so that
        // rounding in the bucket index cannot matter), holds no knot lies
        // on one piece: the one starting at the last knot <= its start.
        // Both ends only move right with the bucket, so one sweep finds
        // every bucket's first knot above each end.
        let (mut above_lo, mut above_hi) = (0usize, 0usize);
        let seg: Vec<u32> = (0..buckets)
            .map(|b| {
                let lo = x0 + (b as f64 - 1.0) * width;
                let hi = x0 + (b as f64 + 2.0) * width;
                while above_lo < n && self.xs[above_lo] <= lo {
                    above_lo += 1;
                }
                above_hi = above_hi.max(above_lo);
                while above_hi < n && self.xs[above_hi] <= hi {
                    above_hi += 1;
                }
                if above_lo == above_hi && above_lo >= 1 && above_lo < n {
                    (above_lo - 1) as u32
                } else {
                    MIXED
                }
            })
            .collect();
        let (kx, ky) = (&self.xs[..], &self.ys[..]);
        let one = |x: f64| -> f64 {
            if x <= x0 {
                return y0;
            }
            if x >= xn {
                return yn;
            }
            let b = (((x - x0) * inv) as usize).min(buckets - 1);
            let j = match seg[b] {
                MIXED => kx.partition_point(|&k| k <= x) - 1,
                j => j as usize,
            };
            ky[j] + slope[j] * (x - kx[j])
        };
        let out = &mut out[..xs.len()];
        // Large batches (a step's scores are thousands; a replay of a whole
        // buffer, millions) are split over the machine's cores.
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        if xs.len() < PARALLEL_MIN || threads < 2 {
            out.iter_mut().zip(xs).for_each(|(o, &x)| *o = one(x));
            return;
        }
        let per = xs.len().div_ceil(threads);
        std::thread::scope(|sc| {
            for (o, x) in out.chunks_mut(per).zip(xs.chunks(per)) {
                let one = &one;
                sc.spawn(move || o.iter_mut().zip(x).for_each(|(o, &x)| *o = one(x)));
            }
        });
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

    /// Add anchor pairs one at a time, as the reference does: the first fit
    /// fires on the pair that brings the buffer to `min_pairs`, then a refit
    /// on every `refit_every`-th new pair, wherever it falls inside a push
    /// (a fit sees exactly the pairs pushed before it). While no map exists
    /// (e.g. every pair so far in one bin) every new pair retries. Returns
    /// whether a refit happened during this push.
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
        let mut refitted = false;
        for (&x, &y) in wm.iter().zip(real) {
            if self.buf.len() == self.cfg.cap {
                self.buf.pop_front();
            }
            self.buf.push_back((x, y));
            self.new_since_fit += 1;
            let due = self.map.is_none() || self.new_since_fit >= self.cfg.refit_every;
            if self.buf.len() >= self.cfg.min_pairs && due {
                refitted |= self.refit();
            }
        }
        Ok(refitted)
    }

    /// Start over (the world model changed): drop every pair and the map,
    /// then push `wm`/`real` (the new model's scores of recent anchors) as
    /// the first pairs.
    pub fn restart(&mut self, wm: &[f64], real: &[f64]) -> Result<()> {
        self.buf.clear();
        self.map = None;
        self.new_since_fit = 0;
        self.push(wm, real)?;
        Ok(())
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
        let mut out = vec![0.0; xs.len()];
        self.apply_into(xs, &mut out)?;
        Ok(out)
    }

    /// [`Calibrator::apply`] into a buffer the caller keeps (as long as
    /// `xs`; a shorter one is an error): no allocation per call.
    pub fn apply_into(&self, xs: &[f64], out: &mut [f64]) -> Result<()> {
        check_finite("calibration.apply", xs)?;
        if out.len() < xs.len() {
            return Err(CoreError::Shape(format!(
                "calibration.apply_into: {} scores but room for {}",
                xs.len(),
                out.len()
            )));
        }
        match &self.map {
            Some(m) => m.eval_into(xs, out),
            None => out[..xs.len()].copy_from_slice(xs),
        }
        Ok(())
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
            let [lo, hi] = match cfg.range {
                ScoreRange::Fixed(r) => r,
                ScoreRange::Auto(_) => {
                    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    [lo, hi]
                }
            };
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
        assert!(c.push(&xs, &ys).expect("ok")); // pair 20: first fit
        assert!(c.push(&xs, &ys).expect("ok")); // pair 30: 10 new
        assert_eq!(c.n_fits(), 2);
        assert!(c.push(&xs, &ys).expect("ok")); // pair 40
        assert_eq!(c.n_fits(), 3);
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
    fn eval_many_equals_eval_everywhere() {
        let mut rng = crate::rng::SplitMix64::new(9);
        for n in [2usize, 3, 10, 300] {
            let xs: Vec<f64> = (0..4 * n).map(|_| rng.unit()).collect();
            let ys: Vec<f64> = xs.iter().map(|&x| x * x + 0.1 * rng.unit()).collect();
            let m = IsotonicMap::fit_exact(&xs, &ys, &vec![1.0; xs.len()]).expect("fit");
            let (kx, _) = m.knots();
            // Probes: random, outside, and exactly on (and next to) knots.
            let mut probes: Vec<f64> = (0..2000).map(|_| 1.4 * rng.unit() - 0.2).collect();
            for &k in kx {
                probes.extend([k, k.next_down(), k.next_up()]);
            }
            let many = m.eval_many(&probes);
            for (&x, &y) in probes.iter().zip(&many) {
                assert_eq!(y.to_bits(), m.eval(x).to_bits(), "n={n} x={x}");
            }
        }
    }

    #[test]
    fn apply_into_equals_apply_and_refuses_a_short_buffer() {
        let mut c = Calibrator::new(CalibrationConfig {
            min_pairs: 4,
            ..CalibrationConfig::default()
        })
        .expect("valid");
        let probes = [0.05, 0.3, 0.5, 0.77, 0.95];
        let mut out = [7.0; 6];
        // Before the first fit: the identity.
        c.apply_into(&probes, &mut out).expect("into");
        assert_eq!(&out[..5], &probes);
        let xs: Vec<f64> = (0..40).map(|i| f64::from(i) / 40.0).collect();
        let ys: Vec<f64> = xs.iter().map(|&x| f64::from(u8::from(x > 0.4))).collect();
        c.push(&xs, &ys).expect("push");
        assert!(c.is_fitted());
        c.apply_into(&probes, &mut out).expect("into");
        assert_eq!(&out[..5], c.apply(&probes).expect("apply").as_slice());
        assert_ne!(&out[..5], &probes, "the fitted map is not the identity");
        assert_eq!(out[5], 7.0, "entries past the scores are left alone");
        assert!(c.apply_into(&probes, &mut [0.0; 4]).is_err());
        assert!(c.apply_into(&[f64::NAN], &mut out).is_err());
    }

    #[test]
    fn eval_many_on_threads_equals_eval() {
        let mut rng = crate::rng::SplitMix64::new(4);
        let xs: Vec<f64> = (0..200).map(|_| rng.unit()).collect();
        let ys: Vec<f64> = xs.iter().map(|&x| x.sqrt()).collect();
        let m = IsotonicMap::fit_binned(&xs, &ys, 10, 0.0, 1.0).expect("fit");
        let probes: Vec<f64> = (0..3 * PARALLEL_MIN)
            .map(|_| 1.2 * rng.unit() - 0.1)
            .collect();
        let many = m.eval_many(&probes);
        assert_eq!(many.len(), probes.len());
        for (&x, &y) in probes.iter().zip(&many) {
            assert_eq!(y.to_bits(), m.eval(x).to_bits(), "x={x}");
        }
    }

    #[test]
    fn refits_fire_on_exact_pair_counts_inside_pushes() {
        // min_pairs 20, refit_every 8, pushes of 16: fits after pairs 20,
        // 28, 36, 44, ... (not once per push, not reset by the push size).
        let mut c = Calibrator::new(cfg(20, 8, 100)).expect("valid");
        let xs: Vec<f64> = (0..16).map(|i| i as f64 / 15.0).collect();
        let ys: Vec<f64> = xs.iter().map(|&x| f64::from(u8::from(x > 0.5))).collect();
        let mut fits = Vec::new();
        for _ in 0..4 {
            c.push(&xs, &ys).expect("ok");
            fits.push(c.n_fits());
        }
        // 16 pairs: none; 32: at 20 and 28; 48: 36, 44; 64: 52, 60.
        assert_eq!(fits, vec![0, 2, 4, 6]);
        // The first fit saw exactly 20 pairs: the same map as fitting them.
        let mut d = Calibrator::new(cfg(20, 1000, 100)).expect("valid");
        d.push(&xs, &ys).expect("ok");
        d.push(&xs[..4], &ys[..4]).expect("ok");
        let mut e = Calibrator::new(cfg(20, 1000, 100)).expect("valid");
        e.push(&xs, &ys).expect("ok");
        e.push(&xs, &ys).expect("ok");
        assert_eq!(
            d.map(),
            e.map(),
            "pairs after the 20th wait for the next refit"
        );
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
