//! The AutoResearch benchmark's summary: per arm, the held-out mean position
//! score with a 95% interval over seeds against the training sandbox
//! CPU-seconds spent, and a PNG of score against sandbox seconds.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::train::{ArArm, TrainReport};

/// Mean and half-width of the 95% t-interval.
pub fn mean_ci95(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let m = xs.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (m, f64::NAN);
    }
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
    const T: [f64; 10] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    ];
    let t = T.get(n - 2).copied().unwrap_or(1.96);
    (m, t * (var / n as f64).sqrt())
}

/// One arm over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmSummary {
    pub arm: ArArm,
    pub seeds: usize,
    pub position_mean: f64,
    pub position_ci95: f64,
    pub initial_position_mean: f64,
    pub train_cpu_secs_mean: f64,
    pub train_cpu_secs_ci95: f64,
    pub executions_mean: f64,
    pub wm_rollouts_mean: f64,
}

pub fn summarize(reports: &[TrainReport]) -> Vec<ArmSummary> {
    ArArm::ALL
        .iter()
        .filter_map(|&arm| {
            let rs: Vec<&TrainReport> = reports.iter().filter(|r| r.arm == arm).collect();
            if rs.is_empty() {
                return None;
            }
            let (pm, pc) = mean_ci95(&rs.iter().map(|r| r.final_position()).collect::<Vec<_>>());
            let (cm, cc) = mean_ci95(
                &rs.iter()
                    .map(|r| r.ledger.real_cpu_seconds)
                    .collect::<Vec<_>>(),
            );
            let n = rs.len() as f64;
            Some(ArmSummary {
                arm,
                seeds: rs.len(),
                position_mean: pm,
                position_ci95: pc,
                initial_position_mean: rs
                    .iter()
                    .map(|r| r.evals.first().map_or(0.0, |e| e.heldout_position))
                    .sum::<f64>()
                    / n,
                train_cpu_secs_mean: cm,
                train_cpu_secs_ci95: cc,
                executions_mean: rs
                    .iter()
                    .map(|r| r.ledger.real_executions as f64)
                    .sum::<f64>()
                    / n,
                wm_rollouts_mean: rs.iter().map(|r| r.ledger.wm_rollouts as f64).sum::<f64>() / n,
            })
        })
        .collect()
}

/// Mean curve of one arm: (train CPU seconds, held-out position) per eval.
pub fn mean_curve(reports: &[TrainReport], arm: ArArm) -> Vec<(f64, f64)> {
    let rs: Vec<&TrainReport> = reports.iter().filter(|r| r.arm == arm).collect();
    let k = rs.iter().map(|r| r.evals.len()).min().unwrap_or(0);
    (0..k)
        .map(|i| {
            let n = rs.len() as f64;
            (
                rs.iter().map(|r| r.evals[i].train_cpu_secs).sum::<f64>() / n,
                rs.iter().map(|r| r.evals[i].heldout_position).sum::<f64>() / n,
            )
        })
        .collect()
}

/// Held-out score against training sandbox CPU seconds, one line per arm.
pub fn plot(reports: &[TrainReport], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| Error::Config(format!("plot {}: {e}", path.display()));
    let curves: Vec<(ArArm, Vec<(f64, f64)>)> = ArArm::ALL
        .iter()
        .map(|&a| (a, mean_curve(reports, a)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let xmax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.0))
        .fold(1.0f64, f64::max)
        * 1.05;
    let ys = curves.iter().flat_map(|(_, c)| c.iter().map(|p| p.1));
    let (ymin, ymax) = ys.fold((1.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "AutoResearch: held-out position score vs sandbox CPU-seconds",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..xmax, (ymin - 0.05).max(0.0)..(ymax + 0.05).min(1.0))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("training sandbox CPU-seconds")
        .y_desc("held-out mean position score")
        .draw()
        .map_err(|e| err(&e))?;
    let colors = [RED, BLUE, GREEN];
    for (i, (arm, c)) in curves.iter().enumerate() {
        let color = colors[i % 3];
        chart
            .draw_series(LineSeries::new(c.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(arm.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(c.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_uses_t_quantile() {
        let (m, h) = mean_ci95(&[1.0, 2.0, 3.0]);
        assert!((m - 2.0).abs() < 1e-12);
        assert!((h - 4.303 * (1.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert!(mean_ci95(&[1.0]).1.is_nan());
    }
}
