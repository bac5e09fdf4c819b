//! How much a one-seed table can move: the range of each policy's held-out
//! figures over the seeds of a committed bench, widened by what another
//! CPU changes. `wmrl quickstart` prints it under its table
//! (results/quickstart_seeds), and README's quickstart figures are checked
//! against the same range (tests/docs.rs).
//!
//! Two sources of variation: the seed (which rollouts are drawn, and so
//! which update), measured by the bench's runs; and the machine. For the
//! same seed, candle's and ONNX Runtime's kernels sum in another order on
//! another CPU's vector instructions (AVX2 against AVX-512), and once one
//! episode's outcome changes the run takes another path. That part is not
//! measured by running seeds on one machine, so it is added as a margin:
//! [`CPU_MARGIN_POINTS`].

use std::path::Path;

use crate::bench::start_dir;
use crate::trainer::{RunSummary, read_summary};
use crate::{Result, TrainError};
use wmrl_run::RunDir;

/// Points added on either side of the seeds' range for another machine:
/// the largest same-seed difference seen between two machines' quickstart
/// tables is 8.8 points (`sparse` greedy, 58.8 on one machine against 67.6 on an
/// AVX-512 machine; docs/results.md, "The quickstart over five seeds").
pub const CPU_MARGIN_POINTS: f64 = 9.0;

/// One policy's range, in percent.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// `start` for the shared SFT policy, else the arm's name.
    pub policy: String,
    /// Seeds the range is over (1 for the start: it is evaluated once).
    pub seeds: usize,
    /// Lowest and highest greedy held-out success over the seeds, percent.
    pub greedy: (f64, f64),
    /// The same for the sampled measure, where the runs took it.
    pub sampled: Option<(f64, f64)>,
}

impl Spread {
    /// The range a figure of this policy on another seed or machine is
    /// expected in: the seeds' range widened by [`CPU_MARGIN_POINTS`],
    /// clamped to 0-100. `(greedy, sampled)`.
    pub fn expected(&self) -> ((f64, f64), Option<(f64, f64)>) {
        let widen = |(lo, hi): (f64, f64)| {
            (
                (lo - CPU_MARGIN_POINTS).max(0.0),
                (hi + CPU_MARGIN_POINTS).min(100.0),
            )
        };
        (widen(self.greedy), self.sampled.map(widen))
    }

    fn of(policy: &str, runs: &[RunSummary]) -> Option<Self> {
        let range = |xs: Vec<f64>| -> Option<(f64, f64)> {
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (!xs.is_empty()).then_some((100.0 * lo, 100.0 * hi))
        };
        let greedy = range(runs.iter().map(|r| r.heldout.rate).collect())?;
        let sampled: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.heldout_sampled.as_ref().map(|s| s.rate))
            .collect();
        Some(Self {
            policy: policy.to_string(),
            seeds: runs.len(),
            greedy,
            // Only where every run took it: a range over some is no range.
            sampled: if sampled.len() == runs.len() {
                range(sampled)
            } else {
                None
            },
        })
    }
}

/// The start's and each arm's range over the finished seeds of `bench`
/// (`<arm>/seed<k>/summary.json`, k = 0, 1, ...). Errs when the bench has
/// no evaluated start or an arm no finished seed.
pub fn bench_spread(bench: &Path, arms: &[&str]) -> Result<Vec<Spread>> {
    let start = start_dir(bench);
    let s0 = read_summary(&start.dir)
        .map_err(|e| TrainError::Report(format!("{}: no evaluated start: {e}", bench.display())))?;
    let mut out = vec![
        Spread::of("start", std::slice::from_ref(&s0)).ok_or_else(|| {
            TrainError::Report(format!("{}: the start has no result", bench.display()))
        })?,
    ];
    for arm in arms {
        let mut runs = Vec::new();
        for seed in 0.. {
            let run = RunDir::in_bench(bench, arm, seed);
            if !run.summary().exists() {
                break;
            }
            runs.push(read_summary(&run.dir)?);
        }
        out.push(Spread::of(arm, &runs).ok_or_else(|| {
            TrainError::Report(format!("{}: no finished seed of `{arm}`", bench.display()))
        })?);
    }
    Ok(out)
}

/// The lines `wmrl quickstart` prints under its table: each policy's
/// expected range, and where it comes from.
pub fn spread_lines(spread: &[Spread], source: &str) -> String {
    let mut s = format!(
        "How much these figures vary: each policy's range over the {} seeds of {source} on the project's machine, widened by {CPU_MARGIN_POINTS:.0} points on either side for another CPU (candle's and ONNX Runtime's kernels round differently on other vector instructions; docs/results.md). A figure inside its range is what this install is expected to print:\n",
        spread.iter().map(|x| x.seeds).max().unwrap_or(0),
    );
    s.push_str("    policy          seeds   greedy: seeds' range -> expected   sampled: seeds' range -> expected\n");
    for x in spread {
        let ((glo, ghi), sampled) = x.expected();
        let samp = match (x.sampled, sampled) {
            (Some((lo, hi)), Some((elo, ehi))) => {
                format!("{lo:.1}-{hi:.1} -> {elo:.1}-{ehi:.1}")
            }
            _ => "-".into(),
        };
        s.push_str(&format!(
            "    {:<15} {:>5}   {:>15} -> {:<13}   {}\n",
            x.policy,
            x.seeds,
            format!("{:.1}-{:.1}", x.greedy.0, x.greedy.1),
            format!("{glo:.1}-{ghi:.1}"),
            samp
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(greedy: f64, sampled: Option<f64>) -> RunSummary {
        let rate = |r: f64| wmrl_policy::RateSummary {
            episodes: 100,
            successes: (100.0 * r) as usize,
            rate: r,
            ci_low: r,
            ci_high: r,
        };
        // A real run's summary (the MiniVLA bench's start), its rates replaced.
        let mut s: RunSummary = serde_json::from_str(include_str!(
            "../../../results/bench_minivla/start/summary.json"
        ))
        .expect("summary");
        s.heldout = rate(greedy);
        s.heldout_sampled = sampled.map(rate);
        s
    }

    #[test]
    fn the_range_spans_the_seeds_and_widens_by_the_cpu_margin() {
        let runs = [
            summary(0.5, Some(0.6)),
            summary(0.7, Some(0.55)),
            summary(0.6, Some(0.65)),
        ];
        let s = Spread::of("sparse", &runs).expect("spread");
        assert_eq!(s.seeds, 3);
        assert!((s.greedy.0 - 50.0).abs() < 1e-9 && (s.greedy.1 - 70.0).abs() < 1e-9);
        let (lo, hi) = s.sampled.expect("sampled");
        assert!((lo - 55.0).abs() < 1e-9 && (hi - 65.0).abs() < 1e-9);
        let ((glo, ghi), samp) = s.expected();
        assert!((glo - 41.0).abs() < 1e-9 && (ghi - 79.0).abs() < 1e-9);
        assert!(samp.is_some_and(|(a, b)| (a - 46.0).abs() < 1e-9 && (b - 74.0).abs() < 1e-9));
        // Clamped to 0-100.
        let edge = Spread::of("x", &[summary(0.02, None), summary(0.97, None)]).expect("spread");
        assert_eq!(edge.expected().0, (0.0, 100.0));
        // A sampled measure some runs lack gives no sampled range.
        assert_eq!(edge.sampled, None);
        let mixed =
            Spread::of("y", &[summary(0.3, Some(0.3)), summary(0.4, None)]).expect("spread");
        assert_eq!(mixed.sampled, None);
    }

    #[test]
    fn a_bench_without_a_start_or_a_finished_seed_is_an_error() {
        let tmp = tempfile::tempdir().expect("tmp");
        let err = bench_spread(tmp.path(), &["sparse"]).expect_err("no start");
        assert!(err.to_string().contains("no evaluated start"), "{err}");
    }
}
