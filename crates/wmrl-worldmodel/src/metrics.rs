//! Quality figures of a progress model on held-out rollouts: Spearman rank
//! correlation, ROC AUC, a binned calibration curve, and its PNG plot.
//! Pure functions over plain slices (the plot writes a file).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Result, WmError};

/// Average ranks (1-based), ties share the mean rank.
pub fn ranks(x: &[f32]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            r[idx[k]] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman correlation; `None` when either side is constant or lengths
/// differ or fewer than 2 points.
pub fn spearman(x: &[f32], y: &[f32]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Area under the ROC curve of `scores` for binary `labels` (ties count
/// half); `None` when one class is absent.
pub fn auroc(scores: &[f32], labels: &[bool]) -> Option<f64> {
    if scores.len() != labels.len() {
        return None;
    }
    let n_pos = labels.iter().filter(|&&l| l).count();
    let n_neg = labels.len() - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return None;
    }
    let r = ranks(scores);
    let sum_pos: f64 = r
        .iter()
        .zip(labels)
        .filter(|(_, l)| **l)
        .map(|(r, _)| r)
        .sum();
    let u = sum_pos - (n_pos * (n_pos + 1)) as f64 / 2.0;
    Some(u / (n_pos * n_neg) as f64)
}

/// One bin of a calibration curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationBin {
    pub lo: f32,
    pub hi: f32,
    pub mean_score: f32,
    pub success_rate: f32,
    pub count: usize,
}

/// Equal-width bins over the observed score range; empty bins are dropped.
pub fn calibration_curve(scores: &[f32], labels: &[bool], bins: usize) -> Vec<CalibrationBin> {
    if scores.is_empty() || bins == 0 {
        return Vec::new();
    }
    let lo = scores.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let width = ((hi - lo) / bins as f32).max(1e-9);
    let mut acc = vec![(0.0f32, 0usize, 0usize); bins];
    for (&s, &l) in scores.iter().zip(labels) {
        let b = (((s - lo) / width) as usize).min(bins - 1);
        acc[b].0 += s;
        acc[b].1 += usize::from(l);
        acc[b].2 += 1;
    }
    acc.iter()
        .enumerate()
        .filter(|(_, a)| a.2 > 0)
        .map(|(i, a)| CalibrationBin {
            lo: lo + i as f32 * width,
            hi: lo + (i + 1) as f32 * width,
            mean_score: a.0 / a.2 as f32,
            success_rate: a.1 as f32 / a.2 as f32,
            count: a.2,
        })
        .collect()
}

/// Plot a calibration curve (mean score per bin vs success rate) as PNG.
pub fn plot_calibration(path: &Path, curve: &[CalibrationBin], title: &str) -> Result<()> {
    use plotters::prelude::*;
    let perr = |e: &dyn std::fmt::Display| WmError::Plot(e.to_string());
    let root = BitMapBackend::new(path, (640, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| perr(&e))?;
    let x_lo = curve.iter().map(|b| b.lo).fold(0.0f32, f32::min).min(-0.05);
    let x_hi = curve.iter().map(|b| b.hi).fold(1.0f32, f32::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(x_lo..x_hi, -0.02f32..1.02f32)
        .map_err(|e| perr(&e))?;
    chart
        .configure_mesh()
        .x_desc("world-model score (bin mean)")
        .y_desc("real success rate")
        .draw()
        .map_err(|e| perr(&e))?;
    let pts: Vec<(f32, f32)> = curve
        .iter()
        .map(|b| (b.mean_score, b.success_rate))
        .collect();
    chart
        .draw_series(LineSeries::new(pts.clone(), BLUE.stroke_width(2)))
        .map_err(|e| perr(&e))?;
    chart
        .draw_series(pts.iter().zip(curve).map(|(&(x, y), b)| {
            Circle::new(
                (x, y),
                3 + (b.count as f32).sqrt().min(8.0) as i32,
                BLUE.filled(),
            )
        }))
        .map_err(|e| perr(&e))?;
    root.present().map_err(|e| perr(&e))?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn spearman_is_rank_based_and_signed() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!((spearman(&x, &[10.0, 20.0, 30.0, 1000.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((spearman(&x, &[4.0, 3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
        assert!(spearman(&x, &[1.0, 1.0, 1.0, 1.0]).is_none());
        let r = spearman(&x, &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!((r - 0.8).abs() < 1e-12, "{r}");
    }

    #[test]
    fn auroc_counts_pairs_and_ties() {
        assert_eq!(
            auroc(&[0.1, 0.2, 0.8, 0.9], &[false, false, true, true]),
            Some(1.0)
        );
        assert_eq!(
            auroc(&[0.9, 0.8, 0.2, 0.1], &[false, false, true, true]),
            Some(0.0)
        );
        assert_eq!(auroc(&[0.5, 0.5], &[false, true]), Some(0.5));
        assert_eq!(auroc(&[0.5, 0.6], &[true, true]), None);
    }

    #[test]
    fn calibration_bins_cover_all_points() {
        let s = [0.0, 0.1, 0.5, 0.9, 1.0];
        let l = [false, false, true, true, true];
        let c = calibration_curve(&s, &l, 2);
        assert_eq!(c.iter().map(|b| b.count).sum::<usize>(), 5);
        assert_eq!(c[0].success_rate, 0.0);
        assert_eq!(c.last().unwrap().success_rate, 1.0);
    }

    #[test]
    fn plot_writes_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cal.png");
        let c = calibration_curve(&[0.0, 0.4, 0.9], &[false, true, true], 3);
        plot_calibration(&p, &c, "test").unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
    }
}
