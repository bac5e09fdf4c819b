//! `wmrl bench`: every arm over several seeds from one SFT checkpoint, then a
//! report with intervals, the label and compute ledger, and plots. Runs are
//! ordinary run directories `BENCH/<arm>/seed<k>`, so a bench can be resumed
//! and inspected run by run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use wmrl_core::Arm;

use crate::confirm::{CONFIRM_HEADING, Compare, Confirm, confirm_section};
use crate::metrics::{CalibrationSnapshot, EvalRecord, StepMetrics};
use crate::plot::{Series, line_plot};
use crate::trainer::{RunSummary, read_summary};
use crate::{Result, TrainError};
use wmrl_core::stats::MeanCi;
use wmrl_run::RunDir;
use wmrl_run::bench::{PairedTable, Report};

/// One column of a bench: a reward arm under a name, with its own config
/// overrides (`wmrl` with free labels and `anchor_reward = "mix"`, say).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchArm {
    /// Directory and table name; the arm's own name for a plain arm.
    pub name: String,
    pub arm: Arm,
    /// `section.key=value` overrides applied to this arm's runs only.
    pub set: Vec<String>,
}

impl BenchArm {
    pub fn plain(arm: Arm) -> Self {
        Self {
            name: arm.name().to_string(),
            arm,
            set: Vec::new(),
        }
    }

    /// Parse `NAME:ARM:KEY=VALUE,KEY=VALUE` (`--variant`), e.g.
    /// `wmrl_mix:wmrl:wmrl.anchors.fraction=1.0,wmrl.anchor_reward=mix`.
    /// Values cannot contain commas.
    pub fn parse_variant(s: &str) -> Result<Self> {
        let bad = |m: String| TrainError::Config {
            path: "--variant".into(),
            message: format!("`{s}`: {m} (expected NAME:ARM:KEY=VALUE,KEY=VALUE)"),
        };
        let mut it = s.splitn(3, ':');
        let name = it.next().unwrap_or("").trim();
        let arm_name = it.next().ok_or_else(|| bad("no arm".into()))?.trim();
        let set: Vec<String> = it
            .next()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad("the name must be letters, digits, `_` or `-`".into()));
        }
        if name == "start" {
            return Err(bad("`start` is the bench's evaluation of the start".into()));
        }
        let arm =
            Arm::from_name(arm_name).ok_or_else(|| bad(format!("unknown arm `{arm_name}`")))?;
        if let Some(o) = set.iter().find(|o| !o.contains('=')) {
            return Err(bad(format!("`{o}` is not KEY=VALUE")));
        }
        Ok(Self {
            name: name.to_string(),
            arm,
            set,
        })
    }
}

/// The directory of the bench's one evaluation of the shared start (a
/// zero-step run): every arm and seed starts from that policy and is
/// evaluated on the same episodes, so it is evaluated once.
pub fn start_dir(bench: &Path) -> RunDir {
    RunDir::new(bench.join("start"))
}

/// Paired differences `a - b` over the seeds both finished (held-out
/// greedy success), with a 95% t-interval.
pub fn paired(a: &ArmResult, b: &ArmResult) -> Option<MeanCi> {
    wmrl_run::bench::paired(&a.runs, &b.runs, |r| Some((r.seed, r.heldout.rate)))
}

/// [`paired`] on the paper's sampled measure, over the seeds where both
/// runs took it.
pub fn paired_sampled(a: &ArmResult, b: &ArmResult) -> Option<MeanCi> {
    wmrl_run::bench::paired(&a.runs, &b.runs, |r| {
        r.heldout_sampled.as_ref().map(|x| (r.seed, x.rate))
    })
}

/// Held-out curve points of one run: the periodic `curve` evaluations (the
/// start's, from the bench's start run, when the run did not evaluate its
/// own step 0), falling back to `heldout` records of older runs.
fn curve_points(run: &RunDir, start: &[EvalRecord]) -> Result<Vec<(f64, f64)>> {
    let evals: Vec<EvalRecord> = wmrl_run::read_all(&run.eval())?;
    let mut ev: Vec<&EvalRecord> = evals.iter().filter(|e| e.split == "curve").collect();
    if ev.is_empty() {
        ev = evals.iter().filter(|e| e.split == "heldout").collect();
    } else if !ev.iter().any(|e| e.step == 0) {
        ev.splice(0..0, start.iter().filter(|e| e.split == "curve"));
    }
    Ok(ev.iter().map(|e| (e.step as f64, e.success)).collect())
}

/// A run's curve against the real labels it had used by each evaluation:
/// `(labels, success)` of its `curve` evaluations (`heldout` ones in older
/// runs).
fn label_points(run: &RunDir) -> Result<Vec<(f64, f64)>> {
    let evals: Vec<EvalRecord> = wmrl_run::read_all(&run.eval())?;
    let split = if evals.iter().any(|e| e.split == "curve") {
        "curve"
    } else {
        "heldout"
    };
    Ok(evals
        .iter()
        .filter(|e| e.split == split)
        .map(|e| (e.labels_cumulative as f64, e.success))
        .collect())
}

/// The labels at which a curve of `(labels, success)` first reaches
/// `target` ([`wmrl_core::stats::first_reaching`]).
pub fn labels_to_reach(points: &[(f64, f64)], target: f64) -> Option<f64> {
    wmrl_core::stats::first_reaching(points, target)
}

/// The section "Labels to reach `reference`'s final success": for each
/// other arm, paired by seed, the labels its validation curve needed to
/// reach the final curve value of the reference's run of the same seed
/// (from the start's curve point at 0 labels, linear between
/// evaluations), with the seeds that never reached it counted apart.
fn labels_section(
    bench: &Path,
    results: &[ArmResult],
    reference: &str,
    start_evals: &[EvalRecord],
) -> Result<String> {
    let Some(refr) = results.iter().find(|r| r.name == reference) else {
        return Ok(format!("No finished run of `{reference}` yet.\n"));
    };
    let start: Vec<(f64, f64)> = start_evals
        .iter()
        .filter(|e| e.split == "curve" && e.step == 0)
        .map(|e| (0.0, e.success))
        .collect();
    let curve = |name: &str, seed: u64| -> Result<Vec<(f64, f64)>> {
        let pts = label_points(&RunDir::in_bench(bench, name, seed))?;
        let own_start = pts.first().is_some_and(|p| p.0 == 0.0);
        Ok(if own_start {
            pts
        } else {
            [start.clone(), pts].concat()
        })
    };
    let mut text = format!(
        "Real labels each arm needed to reach the final validation-curve success (greedy, the curve states) of `{reference}`'s run of the same seed: read off the run's curve against the labels it had used by each evaluation, from the start's point at 0 labels, linear between evaluations (registered before the runs). The interval is over the seeds that reached it; `reached` counts them.\n\n| arm | seeds | reached | labels to reach (95% CI) | labels by the end | `{reference}`'s labels by the end |\n|---|---|---|---|---|---|\n"
    );
    for r in results.iter().filter(|r| r.name != reference) {
        let mut reached = Vec::new();
        let mut paired = 0;
        for run in &r.runs {
            let Some(target) = refr
                .runs
                .iter()
                .find(|x| x.seed == run.seed)
                .map(|x| curve(reference, x.seed))
                .transpose()?
                .and_then(|c| c.last().map(|p| p.1))
            else {
                continue;
            };
            paired += 1;
            reached.extend(labels_to_reach(&curve(&r.name, run.seed)?, target));
        }
        let cell = MeanCi::of(&reached).map_or("-".into(), |c| c.plain(0, false));
        let _ = writeln!(
            text,
            "| {} | {paired} | {} | {cell} | {:.0} | {:.0} |",
            r.name,
            reached.len(),
            r.labels,
            refr.labels
        );
    }
    Ok(text)
}

/// Parse `all`, `none` or a comma list of arm names.
pub fn parse_arms(s: &str) -> Result<Vec<BenchArm>> {
    match s.trim() {
        "all" => return Ok(Arm::ALL.iter().map(|&a| BenchArm::plain(a)).collect()),
        "none" | "" => return Ok(Vec::new()),
        _ => {}
    }
    s.split(',')
        .map(|a| {
            Arm::from_name(a.trim())
                .map(BenchArm::plain)
                .ok_or_else(|| TrainError::Config {
                    path: "--arms".into(),
                    message: format!(
                        "unknown arm `{a}` (expected all, none, or a list of sparse, sparse_scarce, dense_raw, mix, debias, denoise, wmrl, sparse_shuffled)"
                    ),
                })
        })
        .collect()
}

/// One arm's numbers over its seeds.
#[derive(Debug, Clone)]
pub struct ArmResult {
    pub name: String,
    pub arm: Arm,
    pub runs: Vec<RunSummary>,
    pub heldout: MeanCi,
    /// The paper's sampled measure, where the runs took it.
    pub heldout_sampled: Option<MeanCi>,
    pub in_domain: Option<MeanCi>,
    pub labels: f64,
    pub sim_steps: f64,
    pub wm_rollouts: f64,
    /// Mean wall seconds of a run's training phases (simulation, world
    /// model, sampling, update).
    pub wall_train_seconds: f64,
    /// Mean process CPU seconds of the same phases, where every run
    /// measured them (runs from 2026-12-03 on).
    pub cpu_train_seconds: Option<f64>,
}

/// Collect finished runs of a bench directory.
pub fn collect_results(bench: &Path, arms: &[BenchArm], seeds: &[u64]) -> Result<Vec<ArmResult>> {
    let mut out = Vec::new();
    for spec in arms {
        let arm = spec.arm;
        // A run without summary.json has not finished; one whose summary
        // cannot be read is an error, not a seed silently left out.
        let runs: Vec<RunSummary> = seeds
            .iter()
            .map(|&s| RunDir::in_bench(bench, &spec.name, s))
            .filter(|r| r.summary().exists())
            .map(|r| read_summary(&r.dir))
            .collect::<Result<_>>()?;
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
        let sampled: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.heldout_sampled.as_ref().map(|x| x.rate))
            .collect();
        out.push(ArmResult {
            name: spec.name.clone(),
            arm,
            heldout: MeanCi::of(&h).ok_or_else(|| TrainError::Report("no runs".into()))?,
            heldout_sampled: MeanCi::of(&sampled),
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
            cpu_train_seconds: runs
                .iter()
                .all(|r| r.ledger.policy_cpu_seconds > 0.0)
                .then(|| {
                    mean(&|r| {
                        r.ledger.real_cpu_seconds
                            + r.ledger.wm_cpu_seconds
                            + r.ledger.policy_cpu_seconds
                            + r.ledger.update_cpu_seconds
                    })
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
/// success-rate table as text. `confirms` are the bench's pre-registered
/// comparisons (a section of their own; none: no section); `compares` are
/// exploratory pairs added to the paired-differences table.
pub fn write_report(
    bench: &Path,
    arms: &[BenchArm],
    seeds: &[u64],
    title: &str,
    confirms: &[Confirm],
    compares: &[Compare],
    labels_reference: Option<&str>,
) -> Result<String> {
    let results = collect_results(bench, arms, seeds)?;
    if results.is_empty() {
        return Err(TrainError::Report(format!(
            "no finished runs under {}",
            bench.display()
        )));
    }
    let start = read_summary(&start_dir(bench).dir).ok();
    let start_evals: Vec<EvalRecord> =
        wmrl_run::read_all(&start_dir(bench).eval()).unwrap_or_default();
    let table = success_table(&results, start.as_ref());
    write_curves(bench, &results, seeds, &start_evals)?;
    let states = states_line(&results);
    let mut report = Report::new(
        title,
        &[
            states.trim_end(),
            "Every number below was produced by `wmrl bench` from the run directories beside this file. Success rates are real simulator successes on held-out initial states (and on the training states for in-domain); intervals are 95% Student-t intervals over seeds.",
        ],
    );
    report.section(
        "Success rate",
        &format!("A run's figure is its last checkpoint's greedy success on every held-out (task, state) (fixed before any result). `start` is the shared SFT policy, evaluated once on the same episodes; gains are paired with it. `sampled` is the paper's measure (sampled episodes at the rollout temperature per held-out state), where the runs took it. A gain's interval is over seeds: it counts the arm's spread, not the start's own sampling error (the start's Wilson interval; `scripts/gain-with-start-error.py` widens a gain by it). `train CPU s` is a run's mean process CPU seconds in its training phases (simulation, world model, sampling, update; `-` where the runs did not measure it), `train wall s` the same phases' wall seconds.\n\n{table}"),
    );
    // Pairs name the bench's arms, finished or not: an arm with no
    // finished run leaves its comparisons incomplete, not the report failed.
    let names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
    let confirmed = confirm_section(&results, &names, confirms, seeds.len())?;
    if !confirmed.is_empty() {
        report.section(CONFIRM_HEADING, &confirmed);
    }
    report.section(
        "Paired differences (held-out, by seed)",
        &paired_rows(&results, &names, compares)?.markdown(&[
            "greedy, points (95% t-interval)",
            "verdict",
            "sampled, points (95% t-interval)",
            "verdict",
        ]),
    );
    report.section("Where intervals overlap", &overlap_lines(&results));
    if let Some(reference) = labels_reference {
        report.section(
            &format!("Labels to reach `{reference}`'s final success"),
            &labels_section(bench, &results, reference, &start_evals)?,
        );
    }
    report.section(
        "Where the time goes",
        &format!("Seconds per training rollout by phase, from each run's ledger: process CPU seconds (`clock` CPU) where the runs measured them, else wall seconds (`clock` wall; runs before 2026-12-03). Simulation includes rendering both cameras where a frame is looked at: a chunk's last step and episode ends; sampling is the policy's forward passes and token draws; the update is GRPO's forward and backward passes; then seconds per evaluation episode.\n\n| arm | clock | rollouts per run | simulate s | sample s | world model s | update s | total s | eval s per episode |\n|---|---|---|---|---|---|---|---|---|\n{}", phase_rows(&results)),
    );
    report.section(
        "Curves",
        "![success vs step](success_vs_step.png)\n\n![success vs labels](success_vs_labels.png)\n\n![batch success](batch_success_vs_step.png)\n\n![anchor weight](anchor_weight.png)\n",
    );
    report.section(
        "Calibration",
        &format!("{}\n", calibration_note(bench, &results, seeds)?),
    );
    report.section(
        "Diagnostics of the unvalidated assumption (METHOD.md)",
        &format!("WM AUROC: how often the raw world-model score ranks an anchor rollout that succeeded above one that failed (0.5 is chance; the world model's quality on the policy's own rollouts).\n\n| arm | seed | anchor pairs | WM AUROC | distortion monotone | min level coverage | map shift early/late | disagreement first -> last | weight at w_max |\n|---|---|---|---|---|---|---|---|---|\n{}", diagnostics_rows(&results)),
    );
    report.write(bench)?;
    Ok(table)
}

/// The success-rate table: the start, then every arm.
fn success_table(results: &[ArmResult], start: Option<&RunSummary>) -> String {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| arm | regime | seeds | held-out greedy % (95% CI) | gain over start, points (95% CI) | held-out sampled % | sampled gain, points (95% CI) | in-domain % | labels | sim steps | WM-scored rollouts | train CPU s | train wall s |"
    );
    let _ = writeln!(
        table,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    if let Some(s0) = start {
        let _ = writeln!(
            table,
            "| start (SFT) | - | 1 | {:.1} [{:.1}, {:.1}] (Wilson) | - | {} | - | {} | 0 | 0 | 0 | 0 | 0 |",
            100.0 * s0.heldout.rate,
            100.0 * s0.heldout.ci_low,
            100.0 * s0.heldout.ci_high,
            s0.heldout_sampled
                .as_ref()
                .map_or("-".into(), |x| format!("{:.1}", 100.0 * x.rate)),
            s0.in_domain
                .as_ref()
                .map_or("-".into(), |x| format!("{:.1}", 100.0 * x.rate)),
        );
    }
    for r in results {
        let regime = r.runs.first().map_or("", |x| x.label_regime.as_str());
        let gain = start.and_then(|s0| {
            let d: Vec<f64> = r
                .runs
                .iter()
                .map(|x| x.heldout.rate - s0.heldout.rate)
                .collect();
            MeanCi::of(&d)
        });
        let sampled_gain = start
            .and_then(|s0| s0.heldout_sampled.as_ref())
            .and_then(|s0| {
                let d: Vec<f64> = r
                    .runs
                    .iter()
                    .filter_map(|x| x.heldout_sampled.as_ref().map(|h| h.rate - s0.rate))
                    .collect();
                MeanCi::of(&d)
            });
        let _ = writeln!(
            table,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {:.0} |",
            r.name,
            regime,
            r.runs.len(),
            r.heldout.pct(),
            gain.map_or("-".into(), |g| g.points()),
            r.heldout_sampled.map_or("-".into(), |c| c.pct()),
            sampled_gain.map_or("-".into(), |g| g.points()),
            r.in_domain.map_or("-".into(), |c| c.pct()),
            r.labels,
            r.sim_steps,
            r.wm_rollouts,
            r.cpu_train_seconds
                .map_or("-".into(), |c| format!("{c:.0}")),
            r.wall_train_seconds,
        );
    }

    table
}

fn paired_rows(results: &[ArmResult], names: &[&str], compares: &[Compare]) -> Result<PairedTable> {
    // Paired differences by seed: every arm against full-label `sparse` and
    // the shuffled control, `wmrl` against `sparse_scarce` at equal labels,
    // every other world-model arm against `dense_raw` (what anchors and
    // calibration add over the raw score), then the bench's `--compare`
    // pairs.
    let mut table = PairedTable::default();
    let find = |name: &str| results.iter().find(|r| r.name == name);
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for base in ["sparse", "sparse_shuffled", "sparse_scarce", "dense_raw"] {
        for r in results {
            let scarce_wm = r.arm.uses_world_model()
                && r.runs.first().is_some_and(|x| x.label_regime == "scarce");
            let wanted = match base {
                "sparse_scarce" => scarce_wm,
                "dense_raw" => r.arm.uses_world_model(),
                _ => true,
            };
            if r.name != base && wanted {
                pairs.push((r.name.as_str(), base));
            }
        }
    }
    for c in compares {
        let pair = c.arms(names)?;
        if !pairs.contains(&pair) {
            pairs.push(pair);
        }
    }
    for (a, b) in pairs {
        if let (Some(ra), Some(rb)) = (find(a), find(b))
            && let Some(d) = paired(ra, rb)
        {
            let (sampled, sampled_verdict) = paired_sampled(ra, rb)
                .map_or(("-".into(), "-".into()), |s| {
                    (s.points(), s.verdict().to_string())
                });
            table.row(
                a,
                b,
                d.n,
                &[d.points(), d.verdict().into(), sampled, sampled_verdict],
            );
        }
    }

    Ok(table)
}

fn overlap_lines(results: &[ArmResult]) -> String {
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
            let _ = writeln!(overlaps, "- `{}` vs `{}`: {verdict}", a.name, b.name);
        }
    }

    overlaps
}

/// The curves' PNGs: success vs step and vs labels, batch success, anchor
/// weight, each the mean over seeds.
fn write_curves(
    bench: &Path,
    results: &[ArmResult],
    seeds: &[u64],
    start_evals: &[EvalRecord],
) -> Result<()> {
    // Plots.
    let mut step_series = Vec::new();
    let mut label_series = Vec::new();
    let mut weight_series = Vec::new();
    let mut batch_series = Vec::new();
    for r in results {
        let mut per_run_eval = Vec::new();
        let mut per_run_labels = Vec::new();
        let mut per_run_w = Vec::new();
        let mut per_run_batch = Vec::new();
        for s in seeds {
            let run = RunDir::in_bench(bench, &r.name, *s);
            if !run.summary().exists() {
                continue;
            }
            per_run_eval.push(curve_points(&run, start_evals)?);
            per_run_labels.push(label_points(&run)?);
            let ms: Vec<StepMetrics> = wmrl_run::read_all(&run.metrics())?;
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
        let name = r.name.clone();
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
        "Held-out greedy success (curve states) vs training step, mean over seeds",
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
        "Sampled success of the training rollouts vs step, mean over seeds",
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
    Ok(())
}

/// The calibration map's PNG and the section's text.
fn calibration_note(bench: &Path, results: &[ArmResult], seeds: &[u64]) -> Result<String> {
    // Calibration map of the first seed of `wmrl` (or `debias`) at each snapshot.
    let calib_arm = results
        .iter()
        .find(|r| r.arm == Arm::Wmrl && r.runs.iter().any(|x| x.diagnostics.n_pairs > 0))
        .or_else(|| results.iter().find(|r| r.arm.calibrates()));
    let mut calib_note = String::from("No calibrating arm ran, or no map was fitted.");
    if let Some(r) = calib_arm
        && let Some(s) = seeds.first()
    {
        let snaps: Vec<CalibrationSnapshot> =
            wmrl_run::read_all(&RunDir::in_bench(bench, &r.name, *s).calibration())?;
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
                &format!("Calibration map f (arm {}, seed {s})", r.name),
                "raw world-model score",
                "calibrated score",
                &series,
            )?;
            calib_note = format!(
                "![calibration map](calibration_map.png)\n\nKnots of the fitted isotonic map of `{}` seed {s} at {} evaluation points.",
                r.name,
                snaps.len()
            );
        }
    }

    Ok(calib_note)
}

fn diagnostics_rows(results: &[ArmResult]) -> String {
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
                r.name,
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

    diag
}

fn phase_rows(results: &[ArmResult]) -> String {
    // Where a run's time goes, per training rollout: process CPU seconds
    // by phase where the runs measured them (runs from 2026-12-03 on),
    // else wall seconds (one compute thread per run, so wall seconds are
    // CPU seconds only when runs do not share a core).
    let mut phases = String::new();
    for r in results {
        let sum = |f: &dyn Fn(&wmrl_core::Ledger) -> f64| -> f64 {
            r.runs.iter().map(|x| f(&x.ledger)).sum::<f64>()
        };
        let n = sum(&|l| l.real_executions as f64).max(1.0);
        let eval_eps = sum(&|l| l.eval_episodes as f64).max(1.0);
        let cpu = sum(&|l| l.policy_cpu_seconds) > 0.0;
        let (sim, pol, wm, upd, ev) = if cpu {
            (
                sum(&|l| l.real_cpu_seconds) / n,
                sum(&|l| l.policy_cpu_seconds) / n,
                sum(&|l| l.wm_cpu_seconds) / n,
                sum(&|l| l.update_cpu_seconds) / n,
                sum(&|l| l.eval_cpu_seconds) / eval_eps,
            )
        } else {
            (
                sum(&|l| l.real_seconds) / n,
                sum(&|l| l.policy_seconds) / n,
                sum(&|l| l.wm_seconds) / n,
                sum(&|l| l.update_seconds) / n,
                sum(&|l| l.eval_seconds) / eval_eps,
            )
        };
        let _ = writeln!(
            phases,
            "| {} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            r.name,
            if cpu { "CPU" } else { "wall" },
            n / r.runs.len().max(1) as f64,
            sim,
            pol,
            wm,
            upd,
            sim + pol + wm + upd,
            ev,
        );
    }

    phases
}

/// Which states the final figures were measured on, said plainly.
fn states_line(results: &[ArmResult]) -> String {
    results
        .iter()
        .flat_map(|r| &r.runs)
        .next()
        .map_or_else(String::new, |x| match (x.final_states, x.test_states) {
            (Some([lo, hi]), true) => format!(
                "The final figures are measured on the **test states {lo}-{hi}** of every evaluated task, read once per run at its end; settings were chosen on the validation states (shared/BENCHMARKS.md).\n"
            ),
            (Some([lo, hi]), false) => format!(
                "The final figures are measured on states {lo}-{hi}, which are **validation states** (no `eval.test_states` in the config): figures to choose settings by, not final claims (shared/BENCHMARKS.md).\n"
            ),
            _ => "The final figures are measured on the config's `eval.init_states` (runs from before the validation/test split of 2026-12-03: those are validation states).\n".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse_and_bad_ones_say_why() {
        let v = BenchArm::parse_variant(
            "wmrl_mix:wmrl:wmrl.anchors.fraction=1.0, wmrl.anchor_reward=mix",
        )
        .expect("variant");
        assert_eq!(v.name, "wmrl_mix");
        assert_eq!(v.arm, Arm::Wmrl);
        assert_eq!(
            v.set,
            vec!["wmrl.anchors.fraction=1.0", "wmrl.anchor_reward=mix"]
        );
        let plain = BenchArm::parse_variant("s2:sparse").expect("no overrides");
        assert!(plain.set.is_empty());
        for bad in [
            "nocolon",
            "x:nosucharm",
            "a/b:wmrl",
            "start:wmrl",
            "x:wmrl:novalue",
        ] {
            let err = BenchArm::parse_variant(bad).expect_err(bad);
            assert!(err.to_string().contains("--variant"), "{err}");
        }
        assert_eq!(parse_arms("all").expect("all").len(), Arm::ALL.len());
        assert!(parse_arms("none").expect("none").is_empty());
        assert!(parse_arms("sparse,bogus").is_err());
    }

    fn summary(seed: u64, rate: f64) -> RunSummary {
        let r = wmrl_policy::RateSummary::new((rate * 100.0).round() as usize, 100);
        RunSummary {
            arm: "sparse".into(),
            seed,
            steps: 1,
            label_regime: "free".into(),
            anchor_fraction: 1.0,
            heldout: r.clone(),
            in_domain: None,
            heldout_sampled: None,
            heldout_per_task: vec![],
            final_states: None,
            test_states: false,
            ledger: wmrl_core::Ledger::default(),
            diagnostics: wmrl_core::Diagnostics::default()
                .summary(&wmrl_core::CalibrationConfig::default()),
        }
    }

    fn result(name: &str, runs: Vec<RunSummary>) -> ArmResult {
        let h: Vec<f64> = runs.iter().map(|r| r.heldout.rate).collect();
        ArmResult {
            name: name.into(),
            arm: Arm::Sparse,
            heldout: MeanCi::of(&h).expect("runs"),
            heldout_sampled: None,
            in_domain: None,
            labels: 0.0,
            sim_steps: 0.0,
            wm_rollouts: 0.0,
            wall_train_seconds: 0.0,
            cpu_train_seconds: None,
            runs,
        }
    }

    /// A curve record as a run's eval.jsonl holds it.
    fn curve_line(step: usize, labels: u64, success: f64) -> String {
        format!(
            "{{\"step\":{step},\"split\":\"curve\",\"states\":[16,25],\"success\":{success},\"ci_low\":0.0,\"ci_high\":1.0,\"episodes\":100,\"per_task\":[],\"labels_cumulative\":{labels},\"temperature\":0.0,\"seconds\":1.0}}\n"
        )
    }

    #[test]
    fn labels_to_reach_reads_each_curve_against_its_seeds_reference() {
        assert_eq!(labels_to_reach(&[(0.0, 0.7)], 0.6), Some(0.0));
        assert_eq!(labels_to_reach(&[(0.0, 0.2), (100.0, 0.5)], 0.6), None);
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, seed: u64, lines: &[(usize, u64, f64)]| {
            let run = RunDir::in_bench(dir.path(), name, seed);
            std::fs::create_dir_all(&run.dir).expect("dir");
            let text: String = lines.iter().map(|&(s, l, y)| curve_line(s, l, y)).collect();
            std::fs::write(run.eval(), text).expect("eval");
        };
        // The reference ends at 0.6 on both seeds; `a` reaches it on seed 0
        // halfway between 240 and 1,200 labels, and never on seed 1.
        write("full", 0, &[(10, 2560, 0.4), (50, 12800, 0.6)]);
        write("full", 1, &[(10, 2560, 0.5), (50, 12800, 0.6)]);
        write("a", 0, &[(10, 240, 0.5), (50, 1200, 0.7)]);
        write("a", 1, &[(10, 240, 0.4), (50, 1200, 0.5)]);
        let start: Vec<EvalRecord> =
            vec![serde_json::from_str(curve_line(0, 0, 0.3).trim()).expect("record")];
        let results = [
            result("full", vec![summary(0, 0.5), summary(1, 0.5)]),
            result("a", vec![summary(0, 0.5), summary(1, 0.5)]),
        ];
        let text = labels_section(dir.path(), &results, "full", &start).expect("section");
        assert!(text.contains("| a | 2 | 1 | 720 (1 seed) |"), "{text}");
        // From the start's point: a curve already above the target at its
        // first evaluation reaches it between 0 labels and there.
        write("a", 1, &[(10, 240, 0.9)]);
        let text = labels_section(dir.path(), &results, "full", &start).expect("section");
        assert!(text.contains("| a | 2 | 2 |"), "{text}");
        assert!(
            labels_section(dir.path(), &results, "none", &start)
                .expect("no reference")
                .contains("No finished run")
        );
    }

    #[test]
    fn paired_differences_match_seeds() {
        // b is a shifted by a seed-dependent amount; seed 9 has no partner.
        let a = result(
            "a",
            vec![
                summary(0, 0.40),
                summary(1, 0.30),
                summary(2, 0.50),
                summary(9, 0.9),
            ],
        );
        let b = result(
            "b",
            vec![summary(2, 0.45), summary(0, 0.36), summary(1, 0.27)],
        );
        let d = paired(&a, &b).expect("paired");
        assert_eq!(d.n, 3);
        assert!((d.mean - 0.04).abs() < 1e-9, "{}", d.mean);
        // Differences 0.04, 0.03, 0.05: sd 0.01, t(2) = 4.303.
        assert!((d.hi - d.mean - 4.303 * 0.01 / 3f64.sqrt()).abs() < 1e-9);
        assert!(d.lo > 0.0, "a consistent paired gain is resolved");
        assert!(
            paired_sampled(&a, &b).is_none(),
            "no run took the sampled measure"
        );
        // The sampled measure pairs only seeds where both runs took it.
        let with = |mut r: RunSummary, rate: Option<f64>| {
            r.heldout_sampled =
                rate.map(|x| wmrl_policy::RateSummary::new((x * 100.0).round() as usize, 100));
            r
        };
        let a = result(
            "a",
            vec![
                with(summary(0, 0.4), Some(0.50)),
                with(summary(1, 0.3), Some(0.20)),
                with(summary(2, 0.5), None),
            ],
        );
        let b = result(
            "b",
            vec![
                with(summary(0, 0.3), Some(0.40)),
                with(summary(1, 0.3), Some(0.30)),
                with(summary(2, 0.5), Some(0.10)),
            ],
        );
        let s = paired_sampled(&a, &b).expect("two seeds");
        assert_eq!(s.n, 2);
        assert!(s.mean.abs() < 1e-9, "+0.10 and -0.10: {}", s.mean);
        assert_eq!(s.verdict(), "interval spans 0: not resolved");
    }

    #[test]
    fn compare_pairs_add_their_rows_and_unknown_arms_are_refused() {
        // Two arms named like variants: neither is a default pair of the
        // other (both `sparse` in kind, neither named `sparse`).
        let a = result("a_x", vec![summary(0, 0.40), summary(1, 0.50)]);
        let b = result("a_y", vec![summary(0, 0.30), summary(1, 0.45)]);
        let results = vec![a, b];
        let names = ["a_x", "a_y", "a_z"];
        let plain = paired_rows(&results, &names, &[]).expect("rows");
        let md = plain.markdown(&["greedy", "verdict", "sampled", "verdict"]);
        assert!(!md.contains("`a_x` - `a_y`"), "{md}");
        let c: Compare = "a_x-a_y".parse().expect("pair");
        let md = paired_rows(&results, &names, &[c])
            .expect("rows")
            .markdown(&["greedy", "verdict", "sampled", "verdict"]);
        assert!(md.contains("`a_x` - `a_y`"), "{md}");
        assert!(md.contains("+7.5"), "mean of +10 and +5 points: {md}");
        let bad: Compare = "a_x-b".parse().expect("parses");
        assert!(paired_rows(&results, &names, &[bad]).is_err());
        // An arm of the bench with no finished run: no row, no error.
        let waiting: Compare = "a_z-a_x".parse().expect("parses");
        let md = paired_rows(&results, &names, &[waiting])
            .expect("rows")
            .markdown(&["greedy", "verdict", "sampled", "verdict"]);
        assert!(!md.contains("`a_z`"), "{md}");
        assert!("nodash".parse::<Compare>().is_err());
    }

    #[test]
    fn confirmatory_section_judges_the_sampled_measure_once_every_seed_is_in() {
        let with = |seed: u64, greedy: f64, sampled: f64| {
            let mut r = summary(seed, greedy);
            r.heldout_sampled = Some(wmrl_policy::RateSummary::new(
                (sampled * 100.0).round() as usize,
                100,
            ));
            r
        };
        // a - b sampled: +4, +5, +6 points (greedy: -10 each).
        let a = result(
            "a",
            vec![with(0, 0.3, 0.44), with(1, 0.3, 0.35), with(2, 0.3, 0.56)],
        );
        let b = result(
            "b",
            vec![with(0, 0.4, 0.40), with(1, 0.4, 0.30), with(2, 0.4, 0.50)],
        );
        let results = vec![a, b];
        let confirms: Vec<Confirm> = ["a-b:mean>=3,low>2", "a-b:low>0", "b-a:low>0"]
            .iter()
            .map(|s| s.parse().expect("spec"))
            .collect();
        let names = ["a", "b", "c"];
        let md = confirm_section(&results, &names, &confirms, 3).expect("section");
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(rows.len(), 3, "{md}");
        assert!(md.contains("98.33%"), "{md}");
        assert!(md.contains("sampled success"), "{md}");
        // +5.0 [+2.5, +7.5] at 95%; lower at the family level, below 2.
        assert!(rows[0].contains("+5.0 [+2.5, +7.5]"), "{}", rows[0]);
        assert!(rows[0].ends_with("met at 95% only: not with the correction |"));
        assert!(
            rows[1].ends_with("met, also with the correction |"),
            "{}",
            rows[1]
        );
        assert!(rows[2].ends_with("not met |"), "{}", rows[2]);
        // Planned five seeds, three finished: nothing is judged yet.
        let early = confirm_section(&results, &names, &confirms, 5).expect("section");
        assert!(early.contains("incomplete: 3 of 5 seeds"), "{early}");
        assert!(!early.contains("| met"), "{early}");
        assert!(
            confirm_section(&results, &names, &[], 3)
                .expect("none")
                .is_empty()
        );
        let unknown: Confirm = "a-d:low>0".parse().expect("spec");
        assert!(confirm_section(&results, &names, &[unknown], 3).is_err());
        // `c` is an arm of the bench with no finished run yet: incomplete.
        let waiting: Confirm = "a-c:low>0".parse().expect("spec");
        let md = confirm_section(&results, &names, &[waiting], 3).expect("section");
        assert!(md.contains("incomplete: 0 of 3 seeds"), "{md}");
    }
}
