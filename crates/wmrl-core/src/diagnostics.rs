//! Measurements of what the paper leaves unvalidated (METHOD.md, last
//! section): is the world model's distortion monotone, do anchors cover every
//! score level, is the fitted map stationary, and how the residual
//! disagreement and the anchor weight evolve. Recording is cheap; the summary
//! is computed on demand for reports.

use serde::{Deserialize, Serialize};

use crate::calibration::fit_map;
use crate::config::CalibrationConfig;
use crate::rng::SplitMix64;

/// One anchor pair as observed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairRecord {
    pub step: u64,
    pub wm: f64,
    pub real: f64,
}

/// One rollout's raw world-model score, and whether it was an anchor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    pub step: u64,
    pub wm: f32,
    pub anchor: bool,
}

/// Per-step scalars.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    pub disagreement: Option<f64>,
    pub weight: f64,
    pub at_max: bool,
}

/// Everything recorded over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    pub pairs: Vec<PairRecord>,
    pub rollouts: Vec<RolloutRecord>,
    pub steps: Vec<StepRecord>,
}

/// Mean bias in one quantile bin of the real score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BiasBin {
    pub real_lo: f64,
    pub real_hi: f64,
    pub count: usize,
    pub mean_real: f64,
    pub mean_wm: f64,
    /// `mean(r_wm - r_real)`.
    pub mean_bias: f64,
    pub stderr_wm: f64,
}

/// Anchor coverage of one world-model score level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelCoverage {
    pub wm_lo: f64,
    pub wm_hi: f64,
    /// Fraction of all rollouts in this level.
    pub mass: f64,
    /// Fraction of this level's rollouts that were anchors: q(t).
    pub coverage: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosticsSummary {
    pub n_pairs: usize,
    /// How well the raw world-model score ranks the anchors' real outcomes
    /// on the policy's own rollouts ([`Diagnostics::concordance`]; the
    /// AUROC for success when outcomes are binary). Absent in summaries
    /// written before it existed.
    #[serde(default)]
    pub concordance: Option<f64>,
    pub bias_bins: Vec<BiasBin>,
    /// `mean_bias` is monotone (either direction) across real-score bins.
    pub bias_monotone: bool,
    /// `E[r_wm | r_real]` never falls by more than two standard errors as
    /// `r_real` rises: the monotone-distortion assumption holds.
    pub distortion_monotone: bool,
    /// Levels holding >= 1% of rollouts.
    pub coverage: Vec<LevelCoverage>,
    pub min_coverage: Option<f64>,
    /// L-infinity distance between maps fitted on the early and late halves
    /// of the anchor pairs, and the bootstrap 95% noise floor of that distance.
    pub map_shift: Option<f64>,
    pub map_shift_noise_floor: Option<f64>,
    pub map_shift_significant: Option<bool>,
    pub disagreement_first: Option<f64>,
    pub disagreement_last: Option<f64>,
    pub weight_last: f64,
    pub weight_at_max_fraction: f64,
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

fn is_monotone(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[1] >= w[0]) || v.windows(2).all(|w| w[1] <= w[0])
}

impl Diagnostics {
    /// Bias per quantile bin of the real score. Ties in the real score are
    /// never split, so binary outcomes give two bins.
    pub fn bias_bins(&self, n_bins: usize) -> Vec<BiasBin> {
        let mut p: Vec<(f64, f64)> = self.pairs.iter().map(|r| (r.real, r.wm)).collect();
        if p.is_empty() {
            return Vec::new();
        }
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        let n = p.len();
        let mut bins = Vec::new();
        let mut start = 0;
        while start < n {
            let mut end = ((bins.len() + 1) * n / n_bins.max(1)).max(start + 1).min(n);
            while end < n && p[end].0 == p[end - 1].0 {
                end += 1;
            }
            let chunk = &p[start..end];
            let reals: Vec<f64> = chunk.iter().map(|c| c.0).collect();
            let wms: Vec<f64> = chunk.iter().map(|c| c.1).collect();
            let (mr, mw) = (mean(&reals), mean(&wms));
            let var_w = wms.iter().map(|w| (w - mw).powi(2)).sum::<f64>()
                / (wms.len().saturating_sub(1)).max(1) as f64;
            bins.push(BiasBin {
                real_lo: chunk[0].0,
                real_hi: chunk[chunk.len() - 1].0,
                count: chunk.len(),
                mean_real: mr,
                mean_wm: mw,
                mean_bias: mw - mr,
                stderr_wm: (var_w / wms.len() as f64).sqrt(),
            });
            start = end;
        }
        bins
    }

    /// Anchor coverage over `levels` equal-width levels of the raw world-model
    /// score, over rollouts with `step` in `[from, to)`.
    pub fn coverage(&self, levels: usize, from: u64, to: u64) -> Vec<LevelCoverage> {
        let rs: Vec<&RolloutRecord> = self
            .rollouts
            .iter()
            .filter(|r| r.step >= from && r.step < to)
            .collect();
        if rs.is_empty() || levels == 0 {
            return Vec::new();
        }
        let lo = rs
            .iter()
            .map(|r| f64::from(r.wm))
            .fold(f64::INFINITY, f64::min);
        let hi = rs
            .iter()
            .map(|r| f64::from(r.wm))
            .fold(f64::NEG_INFINITY, f64::max);
        let width = ((hi - lo) / levels as f64).max(1e-12);
        let mut n = vec![0usize; levels];
        let mut a = vec![0usize; levels];
        for r in &rs {
            let b = (((f64::from(r.wm) - lo) / width) as usize).min(levels - 1);
            n[b] += 1;
            a[b] += usize::from(r.anchor);
        }
        let total = rs.len() as f64;
        (0..levels)
            .filter(|&b| n[b] as f64 / total >= 0.01)
            .map(|b| LevelCoverage {
                wm_lo: lo + b as f64 * width,
                wm_hi: lo + (b + 1) as f64 * width,
                mass: n[b] as f64 / total,
                coverage: a[b] as f64 / n[b] as f64,
            })
            .collect()
    }

    /// L-infinity distance between maps fitted on two sets of pairs, over a
    /// grid spanning both.
    fn map_distance(cfg: &CalibrationConfig, a: &[(f64, f64)], b: &[(f64, f64)]) -> Option<f64> {
        let split = |p: &[(f64, f64)]| -> (Vec<f64>, Vec<f64>) { p.iter().copied().unzip() };
        let (ax, ay) = split(a);
        let (bx, by) = split(b);
        let ma = fit_map(cfg, &ax, &ay)?;
        let mb = fit_map(cfg, &bx, &by)?;
        let lo = ax.iter().chain(&bx).copied().fold(f64::INFINITY, f64::min);
        let hi = ax
            .iter()
            .chain(&bx)
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        Some(
            (0..=100)
                .map(|i| lo + (hi - lo) * i as f64 / 100.0)
                .map(|x| (ma.eval(x) - mb.eval(x)).abs())
                .fold(0.0, f64::max),
        )
    }

    /// Early-versus-late shift of the fitted map and its bootstrap noise floor
    /// (95th percentile of the distance between random halves).
    pub fn stationarity(
        &self,
        cfg: &CalibrationConfig,
        resamples: usize,
        seed: u64,
    ) -> Option<(f64, f64)> {
        let p: Vec<(f64, f64)> = self.pairs.iter().map(|r| (r.wm, r.real)).collect();
        if p.len() < 20 {
            return None;
        }
        let half = p.len() / 2;
        let shift = Self::map_distance(cfg, &p[..half], &p[half..])?;
        let mut rng = SplitMix64::new(seed);
        let mut floor: Vec<f64> = (0..resamples)
            .filter_map(|_| {
                let idx = rng.sample_without_replacement(p.len(), half);
                let mut take = vec![false; p.len()];
                idx.iter().for_each(|&i| take[i] = true);
                let (a, b): (Vec<_>, Vec<_>) = p.iter().zip(&take).partition(|(_, t)| **t);
                let a: Vec<(f64, f64)> = a.into_iter().map(|(x, _)| *x).collect();
                let b: Vec<(f64, f64)> = b.into_iter().map(|(x, _)| *x).collect();
                Self::map_distance(cfg, &a, &b)
            })
            .collect();
        if floor.is_empty() {
            return None;
        }
        floor.sort_by(f64::total_cmp);
        let q = floor[((floor.len() as f64 * 0.95).ceil() as usize).clamp(1, floor.len()) - 1];
        Some((shift, q))
    }

    /// Concordance of the raw world-model score with the real outcome over
    /// the anchor pairs: of two pairs whose real outcomes differ, the
    /// probability that the one with the higher outcome also has the higher
    /// world-model score (ties in the score count one half). With binary
    /// outcomes this is the AUROC of the score for success; 0.5 is chance.
    /// `None` until two different outcomes have been seen.
    pub fn concordance(&self) -> Option<f64> {
        let p: Vec<(f64, f64)> = self.pairs.iter().map(|r| (r.real, r.wm)).collect();
        crate::rank::concordance(&p).0
    }

    pub fn summary(&self, cfg: &CalibrationConfig) -> DiagnosticsSummary {
        let bias_bins = self.bias_bins(5);
        let biases: Vec<f64> = bias_bins.iter().map(|b| b.mean_bias).collect();
        let distortion_monotone = bias_bins.windows(2).all(|w| {
            let tol = 2.0 * (w[0].stderr_wm.powi(2) + w[1].stderr_wm.powi(2)).sqrt();
            w[1].mean_wm >= w[0].mean_wm - tol
        });
        let last_step = self.steps.last().map_or(0, |s| s.step + 1);
        let coverage = self.coverage(10, 0, last_step.max(1));
        let min_coverage = coverage.iter().map(|c| c.coverage).reduce(f64::min);
        let st = self.stationarity(cfg, 50, 17);
        let dis: Vec<f64> = self.steps.iter().filter_map(|s| s.disagreement).collect();
        let n_steps = self.steps.len().max(1) as f64;
        DiagnosticsSummary {
            n_pairs: self.pairs.len(),
            concordance: self.concordance(),
            bias_monotone: is_monotone(&biases),
            distortion_monotone,
            bias_bins,
            coverage,
            min_coverage,
            map_shift: st.map(|s| s.0),
            map_shift_noise_floor: st.map(|s| s.1),
            map_shift_significant: st.map(|(s, f)| s > f),
            disagreement_first: dis.first().copied(),
            disagreement_last: dis.last().copied(),
            weight_last: self.steps.last().map_or(1.0, |s| s.weight),
            weight_at_max_fraction: self.steps.iter().filter(|s| s.at_max).count() as f64 / n_steps,
        }
    }
}
