//! The AutoResearch benchmark's summary: per arm, the held-out mean position
//! score with a 95% interval over seeds against the training sandbox
//! CPU-seconds spent, and a PNG of score against sandbox seconds.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::arm::{AR_ARMS, ar_arm_from_name, ar_name, serde_ar_arm};
use crate::error::{Error, Result};
use crate::predictor::PredictorCost;
use crate::rundir::{read_record, write_record};
use crate::train::{Accounting, StepLog, TrainReport};
use wmrl_core::Arm;
use wmrl_run::RunDir;
use wmrl_run::bench::{BenchJob, BenchProgress, PairedTable, Report, Slot, fan_out};

/// Mean and half-width of the 95% t-interval ([`wmrl_core::stats::MeanCi`],
/// the robot track's too); NaN for no values, a NaN half-width for one.
pub fn mean_ci95(xs: &[f64]) -> (f64, f64) {
    wmrl_core::stats::MeanCi::of(xs).map_or((f64::NAN, f64::NAN), |c| ci95_of(&c))
}

/// Paired by seed: bench arm `a`'s final held-out position minus `b`'s
/// (arms by name: `real`, `wm`, `wmrl` or a variant's).
pub fn final_difference(
    reports: &[TrainReport],
    a: &str,
    b: &str,
) -> Option<wmrl_core::stats::MeanCi> {
    let of =
        |name: &str| -> Vec<&TrainReport> { reports.iter().filter(|r| r.name() == name).collect() };
    wmrl_run::bench::paired(&of(a), &of(b), |r| Some((r.seed, r.final_position())))
}

/// [`mean_ci95`]'s pair from an interval.
fn ci95_of(c: &wmrl_core::stats::MeanCi) -> (f64, f64) {
    if c.n < 2 {
        (c.mean, f64::NAN)
    } else {
        (c.mean, c.hi - c.mean)
    }
}

/// One bench arm over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmSummary {
    /// The bench arm: `real`, `wm`, `wmrl` or a variant's name.
    pub name: String,
    /// Written and read as `real`, `wm` or `wmrl` ([`crate::arm`]).
    #[serde(with = "serde_ar_arm")]
    pub arm: Arm,
    pub seeds: usize,
    pub position_mean: f64,
    pub position_ci95: f64,
    pub initial_position_mean: f64,
    pub train_cpu_secs_mean: f64,
    pub train_cpu_secs_ci95: f64,
    pub executions_mean: f64,
    pub wm_rollouts_mean: f64,
}

/// The bench arms of `reports` by name, in the order they first appear.
pub fn arm_names(reports: &[TrainReport]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for r in reports {
        if !names.contains(&r.name()) {
            names.push(r.name());
        }
    }
    names
}

pub fn summarize(reports: &[TrainReport]) -> Vec<ArmSummary> {
    arm_names(reports)
        .into_iter()
        .map(|name| {
            let rs: Vec<&TrainReport> = reports.iter().filter(|r| r.name() == name).collect();
            let (pm, pc) = mean_ci95(&rs.iter().map(|r| r.final_position()).collect::<Vec<_>>());
            let (cm, cc) = mean_ci95(&rs.iter().map(|r| r.train_cpu()).collect::<Vec<_>>());
            let n = rs.len() as f64;
            ArmSummary {
                name: name.to_string(),
                arm: rs[0].arm,
                seeds: rs.len(),
                position_mean: pm,
                position_ci95: pc,
                initial_position_mean: rs.iter().map(|r| r.start_position()).sum::<f64>() / n,
                train_cpu_secs_mean: cm,
                train_cpu_secs_ci95: cc,
                executions_mean: rs
                    .iter()
                    .map(|r| r.ledger.real_executions as f64)
                    .sum::<f64>()
                    / n,
                wm_rollouts_mean: rs.iter().map(|r| r.ledger.wm_rollouts as f64).sum::<f64>() / n,
            }
        })
        .collect()
}

/// One point of an arm's curve over seeds: mean training sandbox CPU
/// seconds, mean held-out position, and that mean's 95% t-interval half-width
/// over seeds (NaN for one seed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurvePoint {
    pub cpu_secs: f64,
    pub position: f64,
    pub ci95: f64,
}

/// The CPU at which `curve` first reaches `target`, linear between its
/// evaluations ([`wmrl_core::stats::first_reaching`]); `None` when it never
/// does.
pub fn cpu_to_reach(curve: &[CurvePoint], target: f64) -> Option<f64> {
    let points: Vec<(f64, f64)> = curve.iter().map(|p| (p.cpu_secs, p.position)).collect();
    wmrl_core::stats::first_reaching(&points, target)
}

/// What the curves are drawn on: "training-competition" when the runs drew
/// their curve on the training competitions (`curve_on = "train"`), else
/// "held-out" (runs before 2026-12-04).
pub fn curve_label(reports: &[TrainReport]) -> &'static str {
    if reports
        .iter()
        .flat_map(|r| &r.evals)
        .any(|e| e.train_competitions.is_some())
    {
        "training-competition"
    } else {
        "held-out"
    }
}

/// Mean curve of one bench arm (by name) over its seeds, one point per
/// evaluation (on the training competitions where the runs drew them
/// there).
pub fn mean_curve(reports: &[TrainReport], name: &str) -> Vec<CurvePoint> {
    let rs: Vec<&TrainReport> = reports.iter().filter(|r| r.name() == name).collect();
    let k = rs.iter().map(|r| r.evals.len()).min().unwrap_or(0);
    (0..k)
        .map(|i| {
            let n = rs.len() as f64;
            let (position, ci95) = mean_ci95(
                &rs.iter()
                    .map(|r| r.evals[i].curve_position().unwrap_or(0.0))
                    .collect::<Vec<_>>(),
            );
            CurvePoint {
                cpu_secs: rs.iter().map(|r| r.evals[i].train_cpu_secs).sum::<f64>() / n,
                position,
                ci95,
            }
        })
        .collect()
}

/// Held-out score against training sandbox CPU seconds, one line per arm
/// (the mean over seeds) in a shaded band (its 95% t-interval over seeds).
pub fn plot(reports: &[TrainReport], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| Error::Config(format!("plot {}: {e}", path.display()));
    let curves: Vec<(&str, Vec<CurvePoint>)> = arm_names(reports)
        .into_iter()
        .map(|a| (a, mean_curve(reports, a)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let half = |p: &CurvePoint| if p.ci95.is_finite() { p.ci95 } else { 0.0 };
    let xmax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.cpu_secs))
        .fold(1.0f64, f64::max)
        * 1.05;
    let (ymin, ymax) = curves
        .iter()
        .flat_map(|(_, c)| c.iter())
        .fold((1.0f64, 0.0f64), |(lo, hi), p| {
            (lo.min(p.position - half(p)), hi.max(p.position + half(p)))
        });
    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n_seeds = reports.iter().map(|r| r.seed).max().map_or(0, |m| m + 1);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "AutoResearch: {} position vs {} (mean, 95% band over {n_seeds} seeds)",
                curve_label(reports),
                accounting(reports).label()
            ),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..xmax, (ymin - 0.05).max(0.0)..(ymax + 0.05).min(1.0))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(accounting(reports).label())
        .y_desc(format!("{} mean position score", curve_label(reports)))
        .draw()
        .map_err(|e| err(&e))?;
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (_, c)) in curves.iter().enumerate() {
        // The band: upper edge forward, lower edge back.
        let band: Vec<(f64, f64)> = c
            .iter()
            .map(|p| (p.cpu_secs, p.position + half(p)))
            .chain(c.iter().rev().map(|p| (p.cpu_secs, p.position - half(p))))
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(
                band,
                colors[i % colors.len()].mix(0.15).filled(),
            )))
            .map_err(|e| err(&e))?;
    }
    for (i, (name, c)) in curves.iter().enumerate() {
        let color = colors[i % colors.len()];
        let pts: Vec<(f64, f64)> = c.iter().map(|p| (p.cpu_secs, p.position)).collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
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

    #[test]
    fn a_target_is_judged_once_every_seed_is_in() {
        let run = |arm, seed, position: f64, cpu: f64| {
            let ledger = wmrl_core::Ledger {
                real_cpu_seconds: cpu,
                ..Default::default()
            };
            TrainReport {
                arm,
                seed,
                evals: vec![crate::train::EvalPoint {
                    step: 16,
                    train_cpu_secs: cpu,
                    heldout_position: Some(position),
                    heldout_reward: Some(position),
                    valid_fraction: Some(1.0),
                    train_competitions: None,
                }],
                steps: Vec::new(),
                ledger,
                refits: Vec::new(),
                accounting: Accounting::Total,
                variant: None,
            }
        };
        // wmrl within 0.01 of real on every seed, at a tenth of its CPU.
        let mut rs: Vec<TrainReport> = (0..3)
            .flat_map(|s| {
                let p = 0.7 + 0.01 * s as f64;
                [
                    run(Arm::Sparse, s, p, 700.0),
                    run(Arm::Wmrl, s, p - 0.005, 70.0),
                ]
            })
            .collect();
        let target = |low: f64, ratio: f64| Target {
            a: "wmrl".into(),
            b: "real".into(),
            low_at_least: Some(low),
            low_above: None,
            cpu_ratio_at_least: Some(ratio),
        };
        let (interval, cpu, verdict) = target(-0.02, 3.0).judge(&rs, 3);
        assert_eq!(
            (cpu.as_str(), verdict.as_str()),
            ("10.00x", "met"),
            "{interval}"
        );
        assert_eq!(target(0.0, 3.0).judge(&rs, 3).2, "not met (lower end)");
        assert_eq!(target(-0.02, 20.0).judge(&rs, 3).2, "not met (CPU ratio)");
        assert!(
            target(-0.02, 3.0)
                .judge(&rs, 5)
                .2
                .starts_with("incomplete: 3 of 5")
        );
        rs.truncate(2);
        assert_eq!(target(-0.02, 3.0).judge(&rs, 1).2, "one seed: not judged");
        // A target names the bench's arms.
        let bad = BenchConfig {
            targets: vec![Target {
                b: "nope".into(),
                ..target(0.0, 1.0)
            }],
            ..Default::default()
        };
        assert!(
            bad.arms()
                .expect_err("unknown arm")
                .to_string()
                .contains("nope")
        );
    }

    #[test]
    fn curve_points_carry_the_interval_over_seeds() {
        let run = |seed, positions: &[f64]| TrainReport {
            arm: Arm::Sparse,
            seed,
            evals: positions
                .iter()
                .enumerate()
                .map(|(i, &p)| crate::train::EvalPoint {
                    step: i,
                    train_cpu_secs: 10.0 * i as f64 + seed as f64,
                    heldout_position: Some(p),
                    heldout_reward: Some(p),
                    valid_fraction: Some(1.0),
                    train_competitions: None,
                })
                .collect(),
            steps: Vec::new(),
            ledger: Default::default(),
            refits: Vec::new(),
            accounting: Accounting::Total,
            variant: None,
        };
        let rs = [
            run(0, &[0.2, 0.5]),
            run(1, &[0.2, 0.7]),
            run(2, &[0.2, 0.9]),
        ];
        let c = mean_curve(&rs, "real");
        assert_eq!(c.len(), 2);
        assert!(c[0].ci95.abs() < 1e-12);
        assert!((c[1].position - 0.7).abs() < 1e-12);
        assert!((c[1].ci95 - mean_ci95(&[0.5, 0.7, 0.9]).1).abs() < 1e-12);
        assert!((c[1].cpu_secs - 11.0).abs() < 1e-12);
        assert!(mean_curve(&rs, "wm").is_empty());
        // Seeds' mean reaches 0.45 halfway between the two evaluations.
        assert!((cpu_to_reach(&c, 0.45).expect("reached") - 6.0).abs() < 1e-12);
        assert_eq!(cpu_to_reach(&c, 0.1), Some(1.0));
        assert_eq!(cpu_to_reach(&c, 0.71), None);
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        plot(&rs, &dir.path().join("p.png")).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Settings of the full benchmark (configs/autoresearch_bench.toml holds the
/// defaults; recorded as the bench's run.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchConfig {
    pub seeds: u64,
    /// Random solutions executed per competition for the predictor's data.
    pub per_competition: usize,
    /// The number of runs the predictor's up-front cost (its training
    /// data's executions and its fit, `predictor_cost.json`) is divided
    /// over, declared before the bench: each `wm` and `wmrl` run is charged
    /// that cost over this number. At least 1 (each run pays it all) and at
    /// most the bench's runs that read the predictor (seeds x its arms other
    /// than `real`), so that they together pay at least the whole cost.
    pub predictor_runs: usize,
    pub train: crate::train::TrainConfig,
    pub predictor: crate::predictor::PredictorConfig,
    /// Which of the track's arms run (`real`, `wm`, `wmrl`; all three by
    /// default), beside the variants.
    pub arms: Vec<String>,
    /// Arms beyond `real`, `wm` and `wmrl`: one of them with `[train]` keys
    /// changed, e.g. `wmrl` given the CPU `real` spends as more steps or
    /// bigger groups (the equal-compute runs). Their runs go to
    /// `<name>/seed<k>/` and pair with every other arm by seed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<ArVariant>,
    /// Targets registered with the bench's settings (so a started bench
    /// refuses to change them): report.md judges each once every seed has
    /// finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<Target>,
}

/// A registered target on the final held-out position, paired by seed:
/// `a - b`'s 95% t-interval's lower end at least `low_at_least` (or above
/// `low_above`), and, with `cpu_ratio_at_least`, `b`'s mean training CPU
/// (every cost charged) at least that many times `a`'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub a: String,
    pub b: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_at_least: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_above: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ratio_at_least: Option<f64>,
}

impl Target {
    /// What it asks, in words.
    pub fn criteria(&self) -> String {
        let mut c = Vec::new();
        if let Some(x) = self.low_at_least {
            c.push(format!("lower end >= {x:+.3}"));
        }
        if let Some(x) = self.low_above {
            c.push(format!("lower end > {x:+.3}"));
        }
        if let Some(x) = self.cpu_ratio_at_least {
            c.push(format!("`{}` CPU / `{}` CPU >= {x}", self.b, self.a));
        }
        c.join(", ")
    }

    /// The verdict on `reports` with `planned` seeds: `met`, `not met`
    /// (naming what failed), or `incomplete` while a seed is missing; and
    /// the paired interval and CPU ratio it was judged on.
    pub fn judge(&self, reports: &[TrainReport], planned: usize) -> (String, String, String) {
        let d = final_difference(reports, &self.a, &self.b);
        let cpu = |name: &str| {
            let v: Vec<f64> = reports
                .iter()
                .filter(|r| r.name() == name)
                .map(|r| r.train_cpu())
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let ratio = match (cpu(&self.a), cpu(&self.b)) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        };
        let interval = d.map_or("-".into(), |d| d.plain(3, true));
        let ratio_cell = ratio.map_or("-".into(), |r| format!("{r:.2}x"));
        let n = d.map_or(0, |d| d.n);
        let Some(d) = d.filter(|d| d.n >= planned && d.n >= 2) else {
            let why = if n < planned {
                format!("incomplete: {n} of {planned} seeds paired")
            } else {
                "one seed: not judged".into()
            };
            return (interval, ratio_cell, why);
        };
        let mut failed = Vec::new();
        if self.low_at_least.is_some_and(|x| d.lo < x) {
            failed.push("lower end");
        }
        if self.low_above.is_some_and(|x| d.lo <= x) {
            failed.push("lower end");
        }
        if let Some(x) = self.cpu_ratio_at_least
            && !ratio.is_some_and(|r| r >= x)
        {
            failed.push("CPU ratio");
        }
        let verdict = if failed.is_empty() {
            "met".to_string()
        } else {
            format!("not met ({})", failed.join(", "))
        };
        (interval, ratio_cell, verdict)
    }
}

/// A bench arm that is one of the track's arms with `[train]` keys changed
/// (`[[variants]]` in a bench config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArVariant {
    /// Its name in reports and its runs' folder: lowercase letters, digits
    /// and `_`, not an arm's name.
    pub name: String,
    /// `real`, `wm` or `wmrl`.
    #[serde(with = "serde_ar_arm")]
    pub arm: Arm,
    /// `[train]` keys as `--set` writes them, e.g. `["steps=48"]`.
    #[serde(default)]
    pub set: Vec<String>,
}

/// One arm of a bench as it runs: its name, the track's arm, its settings
/// (resolved; a variant's carry its name).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchArm {
    pub name: String,
    pub arm: Arm,
    pub train: crate::train::TrainConfig,
}

impl BenchConfig {
    /// The settings in `path` (TOML with `extends`; a bench's recorded
    /// run.toml; or an older wmrl's bench_config.json, read strictly), with `sets` (`section.key=value`) applied,
    /// unknown keys refused; no file: the defaults with `sets` applied.
    pub fn load(path: Option<&std::path::Path>, sets: &[String]) -> Result<Self> {
        wmrl_run::load_over_defaults(path, sets).map_err(|e| Error::Config(e.to_string()))
    }

    /// Every arm of the bench: `real`, `wm` and `wmrl` with `[train]`, then
    /// each variant with its keys applied, resolved. A variant with a bad
    /// name, an unknown key or settings that do not resolve is refused,
    /// naming it.
    pub fn arms(&self) -> Result<Vec<BenchArm>> {
        let mut arms: Vec<BenchArm> = Vec::new();
        for name in &self.arms {
            let arm = ar_arm_from_name(name)
                .filter(|_| !arms.iter().any(|a: &BenchArm| &a.name == name))
                .ok_or_else(|| {
                    Error::Config(format!(
                        "arms: `{name}` is not one of real, wm, wmrl (each at most once)"
                    ))
                })?;
            arms.push(BenchArm {
                name: name.clone(),
                arm,
                train: self.train.clone(),
            });
        }
        for v in &self.variants {
            let bad = |m: String| Error::Config(format!("variant `{}`: {m}", v.name));
            let well_formed = !v.name.is_empty()
                && v.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !well_formed || arms.iter().any(|a| a.name == v.name) {
                return Err(bad(
                    "a name is lowercase letters, digits and `_`, and not another arm's".into(),
                ));
            }
            let mut doc = toml::Table::try_from(&self.train).map_err(|e| bad(e.to_string()))?;
            for set in &v.set {
                wmrl_run::apply_set(&mut doc, set).map_err(|e| bad(e.to_string()))?;
            }
            let mut train: crate::train::TrainConfig = doc
                .try_into()
                .map_err(|e: toml::de::Error| bad(e.to_string()))?;
            train.variant = Some(v.name.clone());
            arms.push(BenchArm {
                name: v.name.clone(),
                arm: v.arm,
                train: train.resolved().map_err(|e| bad(e.to_string()))?,
            });
        }
        if arms.is_empty() {
            return Err(Error::Config("the bench has no arms".into()));
        }
        for t in &self.targets {
            for name in [&t.a, &t.b] {
                if !arms.iter().any(|a| &a.name == name) {
                    return Err(Error::Config(format!(
                        "target {} - {}: `{name}` is not one of the bench's arms",
                        t.a, t.b
                    )));
                }
            }
        }
        Ok(arms)
    }

    /// The predictor's charge to each run that reads it: its up-front
    /// cost over `predictor_runs` (refused outside 1 to the bench's runs
    /// that read the predictor: seeds x its arms other than `real`).
    pub fn predictor_charge(&self, cost: &crate::predictor::PredictorCost) -> Result<f64> {
        let readers = self.arms()?.iter().filter(|a| a.arm != Arm::Sparse).count();
        let most = readers * self.seeds as usize;
        if !(1..=most.max(1)).contains(&self.predictor_runs) {
            return Err(Error::Config(format!(
                "predictor_runs = {}: the predictor's cost is divided over 1 to {most} runs \
                 (the bench's {readers} arms that read it over {} seeds), so that they pay it whole",
                self.predictor_runs, self.seeds
            )));
        }
        Ok(cost.total() / self.predictor_runs as f64)
    }
}

/// A bench resumes with more or fewer seeds, or under another
/// `train.device` (where the models run is not what the bench computes:
/// `--set train.device="cuda"`).
impl wmrl_run::RunSettings for BenchConfig {
    const MAY_CHANGE: &'static [&'static str] = &["seeds", "train.device"];
}

/// The layouts of a bench's recorded settings (its run.toml; an older
/// wmrl's bench_config.json, [`wmrl_run::Versioned::LEGACY_FILE`]): its
/// `train` table follows
/// [`crate::TrainConfig`]'s (layout 0, before the key, migrates as a run's
/// settings do); 1 writes every key.
impl wmrl_run::Versioned for BenchConfig {
    const FORMAT: u32 = 1;
    const LEGACY_FILE: Option<&'static str> = Some("bench_config.json");
    fn migrate(
        from: u32,
        doc: &mut serde_json::Map<String, serde_json::Value>,
    ) -> std::result::Result<(), String> {
        if from == 0
            && let Some(train) = doc.get_mut("train")
        {
            let train = train.as_object_mut().ok_or("`train` is not a table")?;
            crate::train::migrate_train_from_0(train)?;
        }
        Ok(())
    }
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            seeds: 3,
            per_competition: 24,
            predictor_runs: 1,
            train: Default::default(),
            predictor: Default::default(),
            arms: AR_ARMS.iter().map(|&a| ar_name(a).to_string()).collect(),
            variants: Vec::new(),
            targets: Vec::new(),
        }
    }
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    pub config: BenchConfig,
    pub summary: Vec<ArmSummary>,
    pub reports: Vec<TrainReport>,
    pub predictor_train: crate::collect::PredictorEval,
    pub predictor_heldout: crate::collect::PredictorEval,
    /// Largest |candle - ONNX Runtime| of the exported predictor on 256
    /// random inputs (`onnx_predictor::max_abs_diff`).
    #[serde(default)]
    pub predictor_onnx_max_abs_diff: f64,
    /// Sandbox CPU seconds of the predictor's training data.
    pub predictor_data_cpu_secs: f64,
    /// The predictor's up-front cost, of which each `wm` and `wmrl` run's
    /// ledger holds `1 / predictor_runs` (absent in benches before
    /// 2026-12-07, whose runs were not charged it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictor_cost: Option<crate::predictor::PredictorCost>,
    /// `real` over `wmrl` mean training sandbox CPU seconds.
    pub cpu_ratio_real_over_wmrl: Option<f64>,
    /// Paired by seed: `wmrl - real` final held-out position, mean and 95% half-width.
    pub wmrl_minus_real: Option<(f64, f64)>,
}

/// The layouts of a bench's bench.json: its `config` and `reports` follow
/// [`BenchConfig`]'s and [`TrainReport`]'s (layout 0, before the key,
/// migrates as those records do), and layout 0's oldest arm summaries have
/// no `name` (it was the arm's); 1 writes every key.
impl wmrl_run::Versioned for BenchResult {
    const FORMAT: u32 = 1;
    fn migrate(
        from: u32,
        doc: &mut serde_json::Map<String, serde_json::Value>,
    ) -> std::result::Result<(), String> {
        if let Some(c) = doc.get_mut("config") {
            BenchConfig::migrate(from, c.as_object_mut().ok_or("`config` is not a table")?)?;
        }
        // Layout 0's oldest summaries predate variants: each arm's name was
        // its arm's.
        if let Some(ss) = doc.get_mut("summary").filter(|_| from == 0) {
            for a in ss.as_array_mut().ok_or("`summary` is not a list")? {
                let a = a.as_object_mut().ok_or("a summary is not a table")?;
                if let Some(arm) = a.get("arm").cloned() {
                    a.entry("name").or_insert(arm);
                }
            }
        }
        if let Some(rs) = doc.get_mut("reports") {
            for r in rs.as_array_mut().ok_or("`reports` is not a list")? {
                TrainReport::migrate(from, r.as_object_mut().ok_or("a report is not a table")?)?;
            }
        }
        Ok(())
    }
}

impl BenchResult {
    /// report.md: the arms with intervals over seeds, every pair of arms
    /// paired by seed with a verdict (the robot bench's words), and the
    /// plain-text details.
    pub fn report(&self) -> Report {
        use wmrl_core::stats::MeanCi;
        let by_seed = |name: &str, f: &dyn Fn(&TrainReport) -> f64| -> Vec<(u64, f64)> {
            self.reports
                .iter()
                .filter(|r| r.name() == name)
                .map(|r| (r.seed, f(r)))
                .collect()
        };
        let finals = |name| by_seed(name, &|r: &TrainReport| r.final_position());
        let starts = |name| by_seed(name, &|r: &TrainReport| r.start_position());
        let cell = |c: Option<MeanCi>, signed| c.map_or("-".into(), |c| c.plain(3, signed));
        let values = |v: &[(u64, f64)]| v.iter().map(|x| x.1).collect::<Vec<_>>();
        let mut report = Report::new(
            "wmrl autoresearch bench",
            &[
                "Every number below was produced by `wmrl autoresearch bench` \
             from the run directories beside this file (`<arm>/seed<k>/`). A run's figure is its \
             final held-out mean position score (leaderboard position, invalid solutions count 0) \
             over sampled solutions on every held-out competition; `start` is the same measure \
             before training, and gains are paired with it by seed. Intervals are 95% Student-t \
             intervals over seeds.",
            ],
        );
        let mut table = format!(
            "| arm | seeds | final position (95% CI) | start | gain over start (95% CI) | \
             {} (95% CI) | executions | world-model scores |\n\
             |---|---|---|---|---|---|---|---|\n",
            accounting(&self.reports).label()
        );
        for a in &self.summary {
            let cpu = values(&by_seed(&a.name, &|r: &TrainReport| r.train_cpu()));
            table += &format!(
                "| {} | {} | {} | {:.3} | {} | {} | {:.0} | {:.0} |\n",
                a.name,
                a.seeds,
                cell(MeanCi::of(&values(&finals(&a.name))), false),
                a.initial_position_mean,
                cell(MeanCi::paired(&finals(&a.name), &starts(&a.name)), true),
                MeanCi::of(&cpu).map_or("-".into(), |c| c.plain(1, false)),
                a.executions_mean,
                a.wm_rollouts_mean,
            );
        }
        report.section("Held-out position", &table);
        let mut paired = PairedTable::default();
        let arms: Vec<&str> = self.summary.iter().map(|a| a.name.as_str()).collect();
        for (i, &a) in arms.iter().enumerate().rev() {
            for &b in arms[..i].iter().rev() {
                if let Some(d) = final_difference(&self.reports, a, b) {
                    paired.row(a, b, d.n, &[d.plain(3, true), d.verdict().into()]);
                }
            }
        }
        if !self.config.targets.is_empty() {
            let mut t = String::from(
                "Registered with the bench's settings before its first run; judged on the final held-out position, paired by seed (95% t), and on mean training CPU with every cost charged.\n\n\
                 | target | criteria | difference (95% t-interval) | CPU ratio | verdict |\n|---|---|---|---|---|\n",
            );
            for target in &self.config.targets {
                let (interval, ratio, verdict) =
                    target.judge(&self.reports, self.config.seeds as usize);
                t += &format!(
                    "| `{}` - `{}` | {} | {interval} | {ratio} | {verdict} |\n",
                    target.a,
                    target.b,
                    target.criteria()
                );
            }
            report.section("Registered targets", &t);
        }
        report.section(
            "Paired differences (final held-out position, by seed)",
            &paired.markdown(&["position difference (95% t-interval)", "verdict"]),
        );
        report.section(
            "Details (as `wmrl autoresearch bench` prints them)",
            &format!(
                "```text\n{}```\n\n![{} position against {}]({PLOT_FILE})",
                self.table(),
                curve_label(&self.reports),
                accounting(&self.reports).label()
            ),
        );
        report
    }

    /// The CPU each arm's mean curve needed to reach `real`'s final curve
    /// position (none without a `real` arm).
    fn reach_lines(&self, label: &str) -> String {
        let mut s = String::new();
        let real = mean_curve(&self.reports, ar_name(Arm::Sparse));
        if let Some(target) = real.last().map(|p| p.position) {
            let real_cpu = cpu_to_reach(&real, target);
            s += &format!(
                "{label} to reach real's final {} position {target:.3} (mean curve, linear between evaluations):\n",
                curve_label(&self.reports)
            );
            for a in &self.summary {
                let at = cpu_to_reach(&mean_curve(&self.reports, &a.name), target);
                s += &match (at, real_cpu) {
                    (Some(c), Some(r)) if c > 0.0 => {
                        format!("  {:<6} {c:.1} (real / it: {:.2}x)\n", a.name, r / c)
                    }
                    (Some(c), _) => format!("  {:<6} {c:.1}\n", a.name),
                    (None, _) => format!("  {:<6} not reached\n", a.name),
                };
            }
        }
        s
    }

    /// The summary as a plain-text table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<6} {:>5} {:>24} {:>26} {:>10} {:>10}\n",
            "arm", "seeds", "held-out position", "train CPU-s", "execs", "wm scores"
        );
        let label = accounting(&self.reports).label();
        for a in &self.summary {
            s += &format!(
                "{:<6} {:>5} {:>8.3} ± {:<6.3}(from {:.3}) {:>12.1} ± {:<11.1} {:>10.0} {:>10.0}\n",
                a.name,
                a.seeds,
                a.position_mean,
                a.position_ci95,
                a.initial_position_mean,
                a.train_cpu_secs_mean,
                a.train_cpu_secs_ci95,
                a.executions_mean,
                a.wm_rollouts_mean
            );
        }
        if let Some(r) = self.cpu_ratio_real_over_wmrl {
            s += &format!("real / wmrl {label}: {r:.2}x\n");
        }
        if let Some((m, h)) = self.wmrl_minus_real {
            s += &format!(
                "wmrl - real final held-out position (paired by seed): {m:+.3} ± {h:.3}\n"
            );
        }
        let f = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.3}"));
        s += &format!(
            "predictor Spearman, held-out competitions: pooled {} / within-competition mean {} (n={}); training competitions: pooled {}\n",
            f(self.predictor_heldout.spearman_pooled),
            f(self.predictor_heldout.spearman_within_mean),
            self.predictor_heldout.n,
            f(self.predictor_train.spearman_pooled)
        );
        s += &format!(
            "predictor scored as ONNX through ONNX Runtime (predictor.onnx; max |candle - ort| {:.1e} on 256 random inputs)\n",
            self.predictor_onnx_max_abs_diff
        );
        s += &match self.predictor_cost {
            Some(c) => format!(
                "predictor up front: {} rows, data {:.1} + fit {:.1} CPU-s; each run that reads it charged 1/{} of it: {:.1} CPU-s\n",
                c.rows,
                c.data_cpu_secs,
                c.fit_cpu_secs,
                self.config.predictor_runs,
                c.total() / self.config.predictor_runs as f64
            ),
            None => format!(
                "predictor data (once, shared by wm and wmrl, charged to no run): {:.1} sandbox CPU-s\n",
                self.predictor_data_cpu_secs
            ),
        };
        s += &format!(
            "mean curve over seeds ({label}: {} position):\n",
            curve_label(&self.reports)
        );
        for a in &self.summary {
            let pts: Vec<String> = mean_curve(&self.reports, &a.name)
                .iter()
                .map(|p| format!("{:.1}: {:.3}", p.cpu_secs, p.position))
                .collect();
            s += &format!("  {:<6} {}\n", a.name, pts.join(", "));
        }
        s += &self.reach_lines(label);
        s += "per run (anchor-group disagreement, mean over the first quarter of steps -> the second half; 1 = no ranking):\n";
        for r in &self.reports {
            let mean = |xs: &[StepLog]| {
                let v: Vec<f64> = xs.iter().filter_map(|x| x.disagreement).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            let n = r.steps.len();
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let refits = if r.refits.is_empty() {
                String::new()
            } else {
                let steps = |accepted: bool| -> String {
                    let v: Vec<String> = r
                        .refits
                        .iter()
                        .filter(|x| x.decision.accepted == accepted)
                        .map(|x| x.decision.step.to_string())
                        .collect();
                    if v.is_empty() {
                        "none".into()
                    } else {
                        v.join(" ")
                    }
                };
                format!(
                    ", predictor refits accepted at steps {}, refused at {}",
                    steps(true),
                    steps(false)
                )
            };
            s += &format!(
                "  {:<6} seed {}: position {:.3}, disagreement {} -> {}, max weight {:.2}, final entropy {}{refits}\n",
                r.name(),
                r.seed,
                r.final_position(),
                f(mean(&r.steps[..n.div_ceil(4).min(n)])),
                f(mean(&r.steps[n / 2..])),
                r.steps.iter().map(|x| x.weight).fold(0.0, f64::max),
                f(r.steps.last().map(|x| x.entropy)),
            );
        }
        s
    }
}

/// Collect predictor data, fit the predictor, export it to
/// `out/predictor.onnx` (scored through ONNX Runtime from then on), train
/// every arm for every seed, write `bench.json`, per-run JSONL metrics and
/// the PNG into `out`.
///
/// Resumable: the settings go to `out/run.toml` first; the
/// predictor's data and weights, and every finished run
/// (`<arm>/seed<k>/summary.json`, a [`RunDir`]), are read back instead of redone when the
/// bench is started again on the same `out`. Settings that differ from the
/// recorded ones (other than the number of seeds) are refused, naming the
/// first differing key, so one bench never mixes runs of two settings.
pub fn run_bench(
    cfg: &BenchConfig,
    suite: &crate::Suite,
    ex: &crate::execute::Executor,
    out: &Path,
) -> Result<BenchResult> {
    use crate::collect::evaluate_predictor;
    // Recorded and compared as the runs use them.
    let cfg = &BenchConfig {
        train: cfg.train.resolved()?,
        ..cfg.clone()
    };
    // The arms' settings and the charge's bounds are checked before
    // anything is spent.
    let arms = cfg.arms()?;
    cfg.predictor_charge(&PredictorCost {
        rows: 0,
        data_cpu_secs: 0.0,
        fit_cpu_secs: 0.0,
    })?;
    std::fs::create_dir_all(out).map_err(crate::error::io_err(out))?;
    check_settings(&RunDir::new(out), cfg)?;
    let (train_data, held_data, pred, cost) = predictor_stage(cfg, suite, ex, out)?;
    let predictor_data_cpu_secs = train_data.iter().map(|e| e.cpu_secs).sum();
    // Each run that reads the predictor pays its share at its start.
    let charge = cfg.predictor_charge(&cost)?;
    // Everything below scores through the ONNX file, as users run it.
    let onnx = crate::onnx_predictor::OnnxPredictor::export_and_load(
        &pred,
        &out.join(crate::onnx_predictor::FILE_NAME),
    )?;
    let onnx_max_abs_diff = crate::onnx_predictor::max_abs_diff(&pred, &onnx, 256, 0)?;
    let predictor_train = evaluate_predictor(&onnx, &train_data)?;
    let predictor_heldout = evaluate_predictor(&onnx, &held_data)?;
    tracing::info!(
        onnx_max_abs_diff,
        ?predictor_heldout,
        "predictor scored through ONNX Runtime"
    );
    let names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
    let seeds: Vec<u64> = (0..cfg.seeds).collect();
    // Each run still to do, with what progress counts of it.
    let plan: Vec<(Slot, Option<BenchJob>)> = fan_out(out, &names, &seeds)
        .into_iter()
        .map(|x| {
            let job = (!x.finished()).then(|| BenchJob {
                name: format!("{}-seed{}", names[x.arm], x.seed),
                run: x.run.clone(),
                steps: arms[x.arm].train.steps as u64,
                resumed: x.run.interrupted(),
            });
            (x, job)
        })
        .collect();
    let todo: Vec<BenchJob> = plan.iter().filter_map(|(_, j)| j.clone()).collect();
    let progress = BenchProgress::new("autoresearch bench", &todo, true);
    let mut reports = Vec::new();
    for (Slot { arm, seed, run }, job) in plan {
        let spec = &arms[arm];
        let arm = spec.arm;
        let done = run.summary();
        let Some(job) = job else {
            reports.push(read_finished(&done, spec, seed, charge)?);
            continue;
        };
        progress.started(&job);
        let refit = crate::train::PredictorRefit {
            predictor: &pred,
            data: &train_data,
            config: &cfg.predictor,
            onnx_path: run.predictor(),
        };
        let r = crate::train::train_with_refit(
            &crate::train::TrainConfig {
                predictor_charge_cpu_secs: charge,
                ..spec.train.clone()
            },
            arm,
            seed,
            suite,
            ex,
            Some(&onnx),
            Some(&run),
            Some(&refit),
        )?;
        progress.ended(&job);
        tracing::info!(
            arm = ar_name(arm),
            seed,
            position = r.final_position(),
            cpu = r.train_cpu(),
            "run done"
        );
        check_accounting(&r, charge)?;
        reports.push(r);
    }
    progress.finish();
    let summary = summarize(&reports);
    let cpu_ratio_real_over_wmrl = cpu_ratio(&summary);
    let wmrl_minus_real =
        final_difference(&reports, ar_name(Arm::Wmrl), ar_name(Arm::Sparse)).map(|d| ci95_of(&d));
    plot(&reports, &out.join(PLOT_FILE))?;
    let res = BenchResult {
        config: cfg.clone(),
        summary,
        reports,
        predictor_train,
        predictor_heldout,
        predictor_onnx_max_abs_diff: onnx_max_abs_diff,
        predictor_data_cpu_secs,
        predictor_cost: Some(cost),
        cpu_ratio_real_over_wmrl,
        wmrl_minus_real,
    };
    write_record(&out.join("bench.json"), &res)?;
    res.report().write(out)?;
    Ok(res)
}

/// A finished run read back: the arm and seed its slot holds, its costs
/// counted as the bench's ([`check_accounting`]).
fn read_finished(done: &Path, spec: &BenchArm, seed: u64, charge: f64) -> Result<TrainReport> {
    let r: TrainReport = read_record(done)?;
    check_accounting(&r, charge).map_err(|e| Error::Config(format!("{}: {e}", done.display())))?;
    if r.arm != spec.arm || r.name() != spec.name || r.seed != seed {
        return Err(Error::Config(format!(
            "{}: holds the run of arm {} seed {}, not {} seed {seed}",
            done.display(),
            r.name(),
            r.seed,
            spec.name
        )));
    }
    tracing::info!(arm = %spec.name, seed, "finished run resumed");
    Ok(r)
}

/// `real`'s mean training CPU over `wmrl`'s.
fn cpu_ratio(summary: &[ArmSummary]) -> Option<f64> {
    let get = |arm| summary.iter().find(|a| a.name == ar_name(arm));
    match (get(Arm::Sparse), get(Arm::Wmrl)) {
        (Some(r), Some(w)) if w.train_cpu_secs_mean > 0.0 => {
            Some(r.train_cpu_secs_mean / w.train_cpu_secs_mean)
        }
        _ => None,
    }
}

/// The bench's predictor stage: the training and held-out competitions'
/// random-solution data, the predictor fitted on the former, and what that
/// cost; read back when a start of the bench finished it before.
type PredictorStage = (
    Vec<crate::predictor::Example>,
    Vec<crate::predictor::Example>,
    crate::predictor::Predictor,
    PredictorCost,
);

fn predictor_stage(
    cfg: &BenchConfig,
    suite: &crate::Suite,
    ex: &crate::execute::Executor,
    out: &Path,
) -> Result<PredictorStage> {
    use crate::collect::{collect, read_examples, write_examples};
    use crate::competition::Split;
    let (train_path, held_path, pred_path, cost_path) = (
        out.join("predictor_train.jsonl"),
        out.join("predictor_heldout.jsonl"),
        out.join("predictor.json"),
        out.join("predictor_cost.json"),
    );
    if train_path.exists() && held_path.exists() && pred_path.exists() {
        tracing::info!(out = %out.display(), "predictor data and weights resumed");
        if !cost_path.exists() {
            return Err(Error::Config(format!(
                "{}: missing, so the predictor's cost cannot be charged to the runs; \
                     delete predictor.json to collect and fit again, or use another --out",
                cost_path.display()
            )));
        }
        Ok((
            read_examples(&train_path)?,
            read_examples(&held_path)?,
            crate::predictor::Predictor::load(&pred_path)?,
            PredictorCost::load(&cost_path)?,
        ))
    } else {
        let watch = wmrl_run::clock::Stopwatch::start();
        let train_data = collect(suite, ex, Split::Train, cfg.per_competition, 1000)?;
        let collecting = watch.elapsed().1;
        // The held-out data only measures the predictor (its Spearman
        // below); no run trains on it, so no run is charged for it.
        let held_data = collect(suite, ex, Split::Heldout, cfg.per_competition, 2000)?;
        let watch = wmrl_run::clock::Stopwatch::start();
        let (pred, mse) = crate::predictor::Predictor::train(&cfg.predictor, &train_data)?;
        let cost = PredictorCost {
            rows: train_data.len(),
            data_cpu_secs: collecting + train_data.iter().map(|e| e.cpu_secs).sum::<f64>(),
            fit_cpu_secs: watch.elapsed().1,
        };
        tracing::info!(mse, ?cost, "predictor fitted on training competitions");
        write_examples(&train_path, &train_data)?;
        write_examples(&held_path, &held_data)?;
        cost.save(&cost_path)?;
        // Weights last (`save` writes through a rename): their presence
        // marks the stage finished, so a half file must never be there.
        pred.save(&pred_path)?;
        Ok((train_data, held_data, pred, cost))
    }
}

/// A run is compared with the bench's others only when its costs were
/// counted as theirs: every cost (`accounting = "total"`), and the
/// predictor's `charge` in the ledger of a run that reads the predictor
/// (none in `real`'s).
fn check_accounting(r: &TrainReport, charge: f64) -> Result<()> {
    let want = if r.arm == Arm::Sparse { 0.0 } else { charge };
    let got = r.ledger.predictor_cpu_seconds;
    if r.accounting != Accounting::Total || (got - want).abs() > 1e-9 * want.max(1.0) {
        return Err(Error::Config(format!(
            "the run of {} seed {} counted its costs as `{}` with {got} CPU-s of the \
             predictor charged, this bench's runs as `total` with {want}: runs whose \
             cost accounting differs are not compared",
            ar_name(r.arm),
            r.seed,
            accounting_name(r.accounting)
        )));
    }
    Ok(())
}

fn accounting_name(a: Accounting) -> &'static str {
    match a {
        Accounting::Total => "total",
        Accounting::Sandbox => "sandbox",
    }
}

/// The accounting of a bench's runs (one: [`check_accounting`]); `sandbox`
/// for benches before 2026-12-07.
pub fn accounting(reports: &[TrainReport]) -> Accounting {
    reports.first().map_or(Accounting::Total, |r| r.accounting)
}

/// The PNG of score against training CPU, every cost charged (benches
/// before 2026-12-07 drew score_vs_sandbox_cpu.png).
pub const PLOT_FILE: &str = "score_vs_train_cpu.png";

/// Record `cfg` in `out`'s run.toml, or check it against the settings
/// recorded there by an earlier start of the same bench (the seed count
/// may grow or shrink).
fn check_settings(out: &RunDir, cfg: &BenchConfig) -> Result<()> {
    let Some(had) = out
        .against_recorded(cfg)
        .map_err(|e| Error::Config(e.to_string()))?
    else {
        // Results without recorded settings (a folder of an older wmrl, or
        // of something else) cannot be checked, so they are not resumed.
        let dir = &out.dir;
        let stale = std::fs::read_dir(dir)
            .map_err(crate::error::io_err(dir))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| {
                n.starts_with("predictor")
                    || n.ends_with(".report.json")
                    || ar_arm_from_name(n).is_some()
            });
        if let Some(name) = stale {
            return Err(Error::Config(format!(
                "{}: holds bench results ({name}) but no recorded settings (run.toml), \
                 so their settings cannot be checked; use another --out, or delete the \
                 folder to start over",
                dir.display()
            )));
        }
        return Ok(out.write_settings(&out.recorded(cfg)?)?);
    };
    if let Some(d) = had.differs {
        return Err(Error::Config(format!(
            "{}: this bench was started with other settings (recorded against now: {d}); \
             use another --out, or delete the folder to start over",
            had.path.display(),
        )));
    }
    // Only the keys that may change can differ here: the record follows them.
    if had.recorded != *cfg {
        out.write_settings(&out.recorded(cfg)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn the_shipped_bench_config_is_the_defaults_and_unknown_keys_are_refused() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let shipped = root.join("configs/autoresearch_bench.toml");
        assert_eq!(
            BenchConfig::load(Some(&shipped), &[]).expect("shipped"),
            BenchConfig::default()
        );
        let c = BenchConfig::load(Some(&shipped), &["train.steps=8".into(), "seeds=5".into()])
            .expect("sets");
        assert_eq!((c.train.steps, c.seeds), (8, 5));
        // A [train] given in part (here by --set) keeps the bench's other
        // defaults: the curve on the training competitions.
        assert_eq!(c.train.curve_on, crate::train::CurveOn::Train);
        assert_eq!(c.train.core, BenchConfig::default().train.core);
        for bad in ["predictor.hiden=3", "seedz=1"] {
            let e = BenchConfig::load(Some(&shipped), &[bad.into()]).expect_err("unknown");
            assert!(e.to_string().contains(&bad[..bad.len() - 2]), "{e}");
        }
        // The committed trial and registered configs resolve, arms,
        // variants, targets and the predictor's charge included.
        for name in ["autoresearch_trials.toml", "autoresearch_bench_costed.toml"] {
            let c = BenchConfig::load(Some(&root.join("configs").join(name)), &[])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(c.arms().unwrap_or_else(|e| panic!("{name}: {e}")).len() >= 4);
            let cost = PredictorCost {
                rows: 1,
                data_cpu_secs: 15.0,
                fit_cpu_secs: 0.0,
            };
            c.predictor_charge(&cost)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // Every committed bench's record reads back as strictly.
        for b in [
            "autoresearch_bench",
            "autoresearch_bench_a25",
            "autoresearch_bench_refit4",
            "autoresearch_bench_refit4_gated",
        ] {
            let p = root.join("results").join(b).join("bench_config.json");
            BenchConfig::load(Some(&p), &[]).unwrap_or_else(|e| panic!("{b}: {e}"));
        }
    }

    #[test]
    fn variants_are_arms_with_their_keys_and_bad_ones_are_refused() {
        let variant = |name: &str, set: &[&str]| ArVariant {
            name: name.into(),
            arm: Arm::Wmrl,
            set: set.iter().map(|s| s.to_string()).collect(),
        };
        let cfg = BenchConfig {
            variants: vec![variant("wmrl_long", &["steps=48", "group_size=8"])],
            ..Default::default()
        };
        let arms = cfg.arms().expect("arms");
        let names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["real", "wm", "wmrl", "wmrl_long"]);
        let long = &arms[3];
        assert_eq!(
            (long.arm, long.train.steps, long.train.group_size),
            (Arm::Wmrl, 48, 8)
        );
        assert_eq!(long.train.variant.as_deref(), Some("wmrl_long"));
        // Everything else is the bench's [train].
        let back = crate::train::TrainConfig {
            steps: cfg.train.steps,
            group_size: cfg.train.group_size,
            variant: None,
            ..long.train.clone()
        };
        assert_eq!(back, cfg.train.resolved().expect("resolved"));
        for (bad, why) in [
            (variant("wmrl", &[]), "not another arm's"),
            (variant("Long run", &[]), "lowercase"),
            (variant("x", &["stepz=3"]), "stepz"),
            (variant("x", &["steps=\"many\""]), "steps"),
        ] {
            let c = BenchConfig {
                variants: vec![bad],
                ..Default::default()
            };
            let e = c.arms().expect_err(why).to_string();
            assert!(e.contains(why) && e.contains("variant"), "{e}");
        }
        // A bench of some of the arms; an arm twice or of another track is
        // refused.
        let some = BenchConfig {
            arms: vec!["wmrl".into()],
            ..cfg.clone()
        };
        let names: Vec<String> = some
            .arms()
            .expect("arms")
            .into_iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(names, ["wmrl", "wmrl_long"]);
        for arms in [vec!["wmrl", "wmrl"], vec!["sparse"], vec![]] {
            let c = BenchConfig {
                arms: arms.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            };
            assert!(c.arms().is_err(), "{arms:?}");
        }
        // In a bench config, as TOML.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.toml");
        std::fs::write(
            &path,
            "[[variants]]\nname = \"wmrl_long\"\narm = \"wmrl\"\nset = [\"steps=48\"]\n",
        )
        .expect("write");
        let read = BenchConfig::load(Some(&path), &[]).expect("load");
        assert_eq!(read.variants, vec![variant("wmrl_long", &["steps=48"])]);
    }

    #[test]
    fn a_bench_resumes_on_another_device_or_seed_count_and_refuses_other_settings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = RunDir::new(dir.path());
        let cfg = BenchConfig::default();
        check_settings(&out, &cfg).expect("fresh");
        let mut moved = cfg.clone();
        moved.train.device = wmrl_run::DeviceChoice::Cuda;
        moved.seeds = 5;
        check_settings(&out, &moved).expect("another device and seed count");
        let (recorded, path) = out.read_settings::<BenchConfig>().expect("recorded");
        assert_eq!(recorded, moved, "the record follows the resumed bench");
        assert_eq!(path, out.settings());
        let mut other = moved.clone();
        other.train.steps += 1;
        let e = check_settings(&out, &other).expect_err("other steps");
        assert!(e.to_string().contains("train.steps"), "{e}");
        // A bench an older wmrl started (bench_config.json, layout 0)
        // resumes, and its settings move to run.toml when they change.
        let old = serde_json::to_value(&moved).expect("json");
        std::fs::remove_file(out.settings()).expect("rm");
        let legacy = dir.path().join("bench_config.json");
        std::fs::write(&legacy, old.to_string()).expect("write");
        check_settings(&out, &moved).expect("an older bench resumes");
        assert!(
            legacy.exists() && !out.settings().exists(),
            "unchanged: left as is"
        );
        moved.seeds = 6;
        check_settings(&out, &moved).expect("more seeds");
        assert!(!legacy.exists() && out.settings().exists());
    }
}
