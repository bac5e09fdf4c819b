//! `wmrl bench`: every arm over several seeds from one SFT checkpoint, then a
//! report with intervals, the label and compute ledger, and plots. Runs are
//! ordinary run directories `BENCH/<arm>/seed<k>`, so a bench can be resumed
//! and inspected run by run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use wmrl_core::Arm;

use crate::metrics::{self, CalibrationSnapshot, EvalRecord, StepMetrics};
use crate::plot::{Series, line_plot};
use crate::stats::MeanCi;
use crate::trainer::{RunSummary, read_summary};
use crate::{Result, TrainError};

/// The run directory of one (arm, seed).
pub fn run_dir(bench: &Path, arm: Arm, seed: u64) -> PathBuf {
    bench.join(arm.name()).join(format!("seed{seed}"))
}

/// Parse `all` or a comma list of arm names.
pub fn parse_arms(s: &str) -> Result<Vec<Arm>> {
    if s == "all" {
        return Ok(Arm::ALL.to_vec());
    }
    s.split(',')
        .map(|a| {
            Arm::from_name(a.trim()).ok_or_else(|| TrainError::Config {
                path: "--arms".into(),
                message: format!(
                    "unknown arm `{a}` (expected all, or a list of sparse, sparse_scarce, dense_raw, mix, debias, denoise, wmrl)"
                ),
            })
        })
        .collect()
}

/// One arm's numbers over its seeds.
#[derive(Debug, Clone)]
pub struct ArmResult {
    pub arm: Arm,
    pub runs: Vec<RunSummary>,
    pub heldout: MeanCi,
    pub in_domain: Option<MeanCi>,
    pub labels: f64,
    pub sim_steps: f64,
    pub wm_rollouts: f64,
    pub wall_train_seconds: f64,
}

/// Collect finished runs of a bench directory.
pub fn collect_results(bench: &Path, arms: &[Arm], seeds: &[u64]) -> Result<Vec<ArmResult>> {
    let mut out = Vec::new();
    for &arm in arms {
        let runs: Vec<RunSummary> = seeds
            .iter()
            .filter_map(|&s| read_summary(&run_dir(bench, arm, s)).ok())
            .collect();
        if runs.is_empty() {
            continue;
        }
        let h: Vec<f64> = runs.iter().map(|r| r.heldout.rate).collect();
        let d: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.in_domain.as_ref().map(|x| x.rate))
            .collect();
        let mean =
            |f: &dyn Fn(&RunSummary) -> f64| runs.iter().map(f).sum::<f64>() / runs.len() as f64;
        out.push(ArmResult {
            arm,
            heldout: MeanCi::of(&h).ok_or_else(|| TrainError::Report("no runs".into()))?,
            in_domain: MeanCi::of(&d),
            labels: mean(&|r| r.ledger.labels as f64),
            sim_steps: mean(&|r| r.ledger.sim_steps as f64),
            wm_rollouts: mean(&|r| r.ledger.wm_rollouts as f64),
            wall_train_seconds: mean(&|r| {
                r.ledger.real_seconds
                    + r.ledger.wm_seconds
                    + r.ledger.policy_seconds
                    + r.ledger.update_seconds
            }),
            runs,
        });
    }
    Ok(out)
}

fn mean_series(points: Vec<Vec<(f64, f64)>>) -> Vec<(f64, f64)> {
    let mut by_x: BTreeMap<i64, (f64, f64, usize)> = BTreeMap::new();
    for run in points {
        for (x, y) in run {
            let e = by_x.entry((x * 1000.0) as i64).or_insert((x, 0.0, 0));
            e.1 += y;
            e.2 += 1;
        }
    }
    by_x.into_values()
        .map(|(x, s, n)| (x, s / n as f64))
        .collect()
}

/// Write `report.md` and its PNG plots into the bench directory; returns the
/// success-rate table as text.
pub fn write_report(bench: &Path, arms: &[Arm], seeds: &[u64], title: &str) -> Result<String> {
    let results = collect_results(bench, arms, seeds)?;
    if results.is_empty() {
        return Err(TrainError::Report(format!(
            "no finished runs under {}",
            bench.display()
        )));
    }
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| arm | regime | seeds | held-out success % (95% CI) | in-domain success % (95% CI) | labels | sim steps | WM-scored rollouts | train s |"
    );
    let _ = writeln!(table, "|---|---|---|---|---|---|---|---|---|");
    for r in &results {
        let regime = r.runs.first().map_or("", |x| x.label_regime.as_str());
        let _ = writeln!(
            table,
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            r.arm.name(),
            regime,
            r.runs.len(),
            r.heldout.pct(),
            r.in_domain.map_or("-".into(), |c| c.pct()),
            r.labels,
            r.sim_steps,
            r.wm_rollouts,
            r.wall_train_seconds,
        );
    }

    // Overlaps, said plainly.
    let mut overlaps = String::new();
    for (i, a) in results.iter().enumerate() {
        for b in &results[i + 1..] {
            let verdict = if a.heldout.overlaps(&b.heldout) {
                "overlap: the difference is not resolved at these seeds"
            } else if a.heldout.mean > b.heldout.mean {
                "separated: the first is higher"
            } else {
                "separated: the second is higher"
            };
            let _ = writeln!(
                overlaps,
                "- `{}` vs `{}`: {verdict}",
                a.arm.name(),
                b.arm.name()
            );
        }
    }

    // Plots.
    let mut step_series = Vec::new();
    let mut label_series = Vec::new();
    let mut weight_series = Vec::new();
    let mut batch_series = Vec::new();
    for r in &results {
        let mut per_run_eval = Vec::new();
        let mut per_run_labels = Vec::new();
        let mut per_run_w = Vec::new();
        let mut per_run_batch = Vec::new();
        for s in seeds {
            let dir = run_dir(bench, r.arm, *s);
            let evals: Vec<EvalRecord> = metrics::read_all(&dir.join("eval.jsonl"))?;
            let ev: Vec<&EvalRecord> = evals.iter().filter(|e| e.split == "heldout").collect();
            per_run_eval.push(ev.iter().map(|e| (e.step as f64, e.success)).collect());
            per_run_labels.push(
                ev.iter()
                    .map(|e| (e.labels_cumulative as f64, e.success))
                    .collect(),
            );
            let ms: Vec<StepMetrics> = metrics::read_all(&dir.join("metrics.jsonl"))?;
            per_run_w.push(
                ms.iter()
                    .map(|m| (m.step as f64, m.anchor_weight))
                    .collect(),
            );
            per_run_batch.push(
                ms.iter()
                    .map(|m| (m.step as f64, m.batch_success))
                    .collect(),
            );
        }
        let name = r.arm.name().to_string();
        step_series.push(Series {
            name: name.clone(),
            points: mean_series(per_run_eval),
        });
        label_series.push(Series {
            name: name.clone(),
            points: mean_series(per_run_labels),
        });
        batch_series.push(Series {
            name: name.clone(),
            points: mean_series(per_run_batch),
        });
        if r.arm.weights() {
            weight_series.push(Series {
                name,
                points: mean_series(per_run_w),
            });
        }
    }
    line_plot(
        &bench.join("success_vs_step.png"),
        "Held-out success vs training step (mean over seeds)",
        "step",
        "success rate",
        &step_series,
    )?;
    line_plot(
        &bench.join("success_vs_labels.png"),
        "Held-out success vs real labels used",
        "labels",
        "success rate",
        &label_series,
    )?;
    line_plot(
        &bench.join("batch_success_vs_step.png"),
        "Training-batch success vs step",
        "step",
        "success rate",
        &batch_series,
    )?;
    line_plot(
        &bench.join("anchor_weight.png"),
        "Anchor weight over training",
        "step",
        "weight",
        &weight_series,
    )?;
    // Calibration map of the first seed of `wmrl` (or `debias`) at each snapshot.
    let calib_arm = results
        .iter()
        .find(|r| r.arm == Arm::Wmrl)
        .or_else(|| results.iter().find(|r| r.arm.calibrates()));
    let mut calib_note = String::from("No calibrating arm ran, or no map was fitted.");
    if let Some(r) = calib_arm
        && let Some(s) = seeds.first()
    {
        let snaps: Vec<CalibrationSnapshot> =
            metrics::read_all(&run_dir(bench, r.arm, *s).join("calibration.jsonl"))?;
        if !snaps.is_empty() {
            let series: Vec<Series> = snaps
                .iter()
                .map(|c| Series {
                    name: format!("step {}", c.step),
                    points: c.xs.iter().copied().zip(c.ys.iter().copied()).collect(),
                })
                .collect();
            line_plot(
                &bench.join("calibration_map.png"),
                &format!("Calibration map f (arm {}, seed {s})", r.arm.name()),
                "raw world-model score",
                "calibrated score",
                &series,
            )?;
            calib_note = format!(
                "![calibration map](calibration_map.png)\n\nKnots of the fitted isotonic map of `{}` seed {s} at {} evaluation points.",
                r.arm.name(),
                snaps.len()
            );
        }
    }

    // Diagnostics of the calibrating arms.
    let mut diag = String::new();
    for r in results
        .iter()
        .filter(|r| r.arm.uses_world_model() && r.arm.uses_real())
    {
        for run in &r.runs {
            let d = &run.diagnostics;
            let _ = writeln!(
                diag,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} |",
                r.arm.name(),
                run.seed,
                d.n_pairs,
                d.concordance.map_or("-".into(), |c| format!("{c:.3}")),
                d.distortion_monotone,
                d.min_coverage.map_or("-".into(), |c| format!("{c:.2}")),
                match (d.map_shift, d.map_shift_noise_floor) {
                    (Some(s), Some(f)) => format!("{s:.3} (floor {f:.3})"),
                    _ => "-".into(),
                },
                match (d.disagreement_first, d.disagreement_last) {
                    (Some(a), Some(b)) => format!("{a:.3} -> {b:.3}"),
                    _ => "-".into(),
                },
                d.weight_at_max_fraction,
            );
        }
    }

    let mut md = String::new();
    let _ = writeln!(md, "# {title}\n");
    let _ = writeln!(
        md,
        "Every number below was produced by `wmrl bench` from the run directories beside this file. Success rates are real simulator successes on held-out initial states (and on the training states for in-domain); intervals are 95% Student-t intervals over seeds.\n"
    );
    let _ = writeln!(md, "## Success rate\n\n{table}");
    let _ = writeln!(md, "## Where intervals overlap\n\n{overlaps}");
    let _ = writeln!(
        md,
        "## Curves\n\n![success vs step](success_vs_step.png)\n\n![success vs labels](success_vs_labels.png)\n\n![batch success](batch_success_vs_step.png)\n\n![anchor weight](anchor_weight.png)\n"
    );
    let _ = writeln!(md, "## Calibration\n\n{calib_note}\n");
    let _ = writeln!(
        md,
        "## Diagnostics of the unvalidated assumption (METHOD.md)\n\nWM AUROC: how often the raw world-model score ranks an anchor rollout that succeeded above one that failed (0.5 is chance; the world model's quality on the policy's own rollouts).\n\n| arm | seed | anchor pairs | WM AUROC | distortion monotone | min level coverage | map shift early/late | disagreement first -> last | weight at w_max |\n|---|---|---|---|---|---|---|---|---|\n{diag}"
    );
    let path = bench.join("report.md");
    std::fs::write(&path, &md).map_err(crate::error::io_err(&path))?;
    Ok(table)
}
