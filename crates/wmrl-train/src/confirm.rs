//! Confirmatory comparisons of a bench: the few paired differences decided
//! before its runs (`wmrl bench --confirm A-B:CRITERION`), each judged on the
//! primary measure at 95% and, for the family, at the Bonferroni level
//! `1 - 0.05 / k`. Everything else a report shows is exploratory.

use std::fmt::Write as _;
use std::str::FromStr;

use crate::TrainError;
use crate::bench::ArmResult;
use wmrl_core::stats::MeanCi;

/// One pre-registered comparison: `a - b` on the primary measure, in
/// percentage points, with what it must show.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirm {
    /// The text as given, e.g. `wmrl_mix-sparse:mean>=3,low>0`.
    pub spec: String,
    pub pair: String,
    pub criteria: Vec<Criterion>,
}

/// A bound on the paired difference, in percentage points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Criterion {
    pub on: Quantity,
    /// `>=` when true, `>` when false.
    pub inclusive: bool,
    pub points: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// The mean paired difference.
    Mean,
    /// The interval's lower end.
    Low,
}

impl Criterion {
    fn holds(&self, d: &MeanCi) -> bool {
        let x = 100.0
            * match self.on {
                Quantity::Mean => d.mean,
                Quantity::Low => d.lo,
            };
        if self.inclusive {
            x >= self.points
        } else {
            x > self.points
        }
    }
}

impl std::fmt::Display for Criterion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = match self.on {
            Quantity::Mean => "mean",
            Quantity::Low => "lower end",
        };
        let op = if self.inclusive { ">=" } else { ">" };
        write!(f, "{on} {op} {:+} points", self.points)
    }
}

impl FromStr for Confirm {
    type Err = TrainError;

    /// `A-B:mean>=3,low>0`: the arms' names (joined by `-`; resolved
    /// against the bench's arms by [`Confirm::arms`]) and one or more
    /// bounds on the mean difference or its interval's lower end, in
    /// percentage points.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |m: &str| TrainError::Config {
            path: "--confirm".into(),
            message: format!("`{s}`: {m} (expected A-B:mean>=X,low>Y, in points)"),
        };
        let (pair, rest) = s.split_once(':').ok_or_else(|| bad("no `:`"))?;
        if !pair.contains('-') {
            return Err(bad("no `A-B` pair"));
        }
        let mut criteria = Vec::new();
        for c in rest.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let (on, tail) = if let Some(t) = c.strip_prefix("mean") {
                (Quantity::Mean, t)
            } else if let Some(t) = c.strip_prefix("low") {
                (Quantity::Low, t)
            } else {
                return Err(bad(&format!("`{c}` is not on `mean` or `low`")));
            };
            let (inclusive, num) = if let Some(n) = tail.strip_prefix(">=") {
                (true, n)
            } else if let Some(n) = tail.strip_prefix('>') {
                (false, n)
            } else {
                let hint = if tail.is_empty() {
                    " (no bound at all: quote the argument, a shell takes `>` as a redirection)"
                } else {
                    ""
                };
                return Err(bad(&format!("`{c}`: only `>` and `>=` bounds{hint}")));
            };
            let points: f64 = num
                .trim()
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .ok_or_else(|| bad(&format!("`{num}` is not a number of points")))?;
            criteria.push(Criterion {
                on,
                inclusive,
                points,
            });
        }
        if criteria.is_empty() {
            return Err(bad("no criterion"));
        }
        Ok(Self {
            spec: s.to_string(),
            pair: pair.trim().to_string(),
            criteria,
        })
    }
}

impl Confirm {
    /// The two arms among `names`: the one split of `A-B` at a `-` whose
    /// both sides are arms of the bench (names may contain `-` too).
    pub fn arms<'a>(&self, names: &[&'a str]) -> Result<(&'a str, &'a str), TrainError> {
        split_pair(&self.pair, names).map_err(|why| TrainError::Config {
            path: "--confirm".into(),
            message: format!("`{}`: {why}", self.spec),
        })
    }
}

/// An exploratory comparison a bench reports beside its default pairs
/// (`wmrl bench --compare A-B`): `a - b`, paired by seed, with its 95%
/// interval and no target and no verdict beyond "resolved or not".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    pub pair: String,
}

impl FromStr for Compare {
    type Err = TrainError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if !s.contains('-') {
            return Err(TrainError::Config {
                path: "--compare".into(),
                message: format!("`{s}`: no `A-B` pair of arms"),
            });
        }
        Ok(Self {
            pair: s.trim().to_string(),
        })
    }
}

impl Compare {
    /// The two arms among `names`, as [`Confirm::arms`] splits them.
    pub fn arms<'a>(&self, names: &[&'a str]) -> Result<(&'a str, &'a str), TrainError> {
        split_pair(&self.pair, names).map_err(|why| TrainError::Config {
            path: "--compare".into(),
            message: why,
        })
    }
}

/// The one split of `pair` at a `-` whose both sides are in `names`, or
/// why there is none.
fn split_pair<'a>(pair: &str, names: &[&'a str]) -> Result<(&'a str, &'a str), String> {
    let splits: Vec<(&'a str, &'a str)> = pair
        .match_indices('-')
        .filter_map(|(i, _)| {
            let (a, b) = (&pair[..i], &pair[i + 1..]);
            let a = names.iter().find(|n| **n == a)?;
            let b = names.iter().find(|n| **n == b)?;
            (a != b).then_some((*a, *b))
        })
        .collect();
    match splits.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!(
            "`{pair}` is not two of the bench's arms ({})",
            names.join(", ")
        )),
        _ => Err(format!("`{pair}` splits into arms two ways")),
    }
}

/// Whether every run of an arm took the paper's sampled measure.
fn all_sampled(r: &ArmResult) -> bool {
    r.runs.iter().all(|x| x.heldout_sampled.is_some())
}

/// An arm's per-seed values: sampled success, or greedy success.
fn values(r: &ArmResult, sampled: bool) -> Vec<(u64, f64)> {
    r.runs
        .iter()
        .map(|x| match (&x.heldout_sampled, sampled) {
            (Some(h), true) => (x.seed, h.rate),
            _ => (x.seed, x.heldout.rate),
        })
        .collect()
}

/// The heading of report.md's section on the confirmatory comparisons.
pub const CONFIRM_HEADING: &str = "Confirmatory comparisons (decided before the runs)";

/// The body of report.md's section [`CONFIRM_HEADING`] (empty: no
/// comparisons were given). For the bench's pre-registered comparisons (if
/// any): each pair's paired difference by seed on the primary measure at
/// 95% and at the family's Bonferroni level, and whether its criteria hold
/// at each. With fewer finished seeds than planned a comparison is
/// incomplete, whatever its interval says.
pub fn confirm_section(
    results: &[ArmResult],
    names: &[&str],
    confirms: &[Confirm],
    planned_seeds: usize,
) -> Result<String, TrainError> {
    if confirms.is_empty() {
        return Ok(String::new());
    }
    let k = confirms.len();
    let family = 1.0 - 0.05 / k as f64;
    let mut rows = String::new();
    let mut measures = Vec::new();
    for c in confirms {
        let (a, b) = c.arms(names)?;
        let find = |n: &str| results.iter().find(|r| r.name == n);
        // The primary measure is sampled success; greedy where an arm's
        // runs did not take it (older runs).
        let (d, sampled) = match (find(a), find(b)) {
            (Some(ra), Some(rb)) => {
                let sampled = all_sampled(ra) && all_sampled(rb);
                let (va, vb) = (values(ra, sampled), values(rb, sampled));
                let d: Vec<f64> = va
                    .iter()
                    .filter_map(|&(s, x)| vb.iter().find(|y| y.0 == s).map(|y| x - y.1))
                    .collect();
                (d, sampled)
            }
            _ => (Vec::new(), true),
        };
        measures.push(if sampled { "sampled" } else { "greedy" });
        let criterion = c
            .criteria
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let at95 = MeanCi::of_at(&d, 0.95);
        let atk = MeanCi::of_at(&d, family);
        let verdict = match (&at95, &atk) {
            _ if d.len() < planned_seeds.max(2) => {
                format!("incomplete: {} of {planned_seeds} seeds", d.len())
            }
            (Some(x), Some(y)) => {
                let h95 = c.criteria.iter().all(|cr| cr.holds(x));
                let hk = c.criteria.iter().all(|cr| cr.holds(y));
                match (h95, hk) {
                    (true, true) => "met, also with the correction".into(),
                    (true, false) => "met at 95% only: not with the correction".into(),
                    _ => "not met".into(),
                }
            }
            _ => "no paired seeds".into(),
        };
        let show = |m: Option<MeanCi>| m.map_or("-".into(), |m| m.points());
        let _ = writeln!(
            rows,
            "| `{a}` - `{b}` | {criterion} | {} | {} | {} | {verdict} |",
            d.len(),
            show(at95),
            show(atk),
        );
    }
    let measure = if measures.iter().all(|m| *m == "sampled") {
        "the paper's sampled success on the held-out states".to_string()
    } else {
        "sampled success where both arms took it, else greedy success (per row)".to_string()
    };
    Ok(format!(
        "{k} comparisons given to `wmrl bench --confirm`, on {measure}, paired by seed, in percentage points: each with its 95% Student-t interval and with the family's Bonferroni interval at {:.2}% (1 - 0.05/{k}). A comparison is met when every criterion holds for its interval; it is judged only once all {planned_seeds} planned seeds have finished. Every other comparison in this report is exploratory.\n\n| comparison | criterion | seeds | difference, points (95%) | difference, points ({:.2}%) | verdict |\n|---|---|---|---|---|---|\n{rows}",
        100.0 * family,
        100.0 * family,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let c: Confirm = "wmrl_mix-sparse:mean>=3, low>0".parse().expect("spec");
        assert_eq!(c.pair, "wmrl_mix-sparse");
        assert_eq!(
            c.criteria,
            vec![
                Criterion {
                    on: Quantity::Mean,
                    inclusive: true,
                    points: 3.0
                },
                Criterion {
                    on: Quantity::Low,
                    inclusive: false,
                    points: 0.0
                },
            ]
        );
        let n: Confirm = "wmrl-sparse:low>=-2".parse().expect("negative bound");
        assert_eq!(n.criteria[0].points, -2.0);
        for bad in [
            "wmrl-sparse",
            "wmrl:low>0",
            "wmrl-sparse:",
            "wmrl-sparse:high>0",
            "wmrl-sparse:low<0",
            "wmrl-sparse:low>x",
            "wmrl-sparse:low>inf",
        ] {
            let err = bad.parse::<Confirm>().expect_err(bad);
            assert!(err.to_string().contains("--confirm"), "{err}");
        }
        // What an unquoted `mean>=3` leaves after the shell's redirection.
        let err = "wmrl_mix-sparse:mean".parse::<Confirm>().expect_err("cut");
        assert!(err.to_string().contains("quote"), "{err}");
    }

    #[test]
    fn pairs_resolve_against_arm_names_with_dashes() {
        let names = ["wmrl-b", "sparse", "wmrl", "b-sparse"];
        let c: Confirm = "wmrl-sparse:low>0".parse().expect("spec");
        assert_eq!(c.arms(&names).expect("one split"), ("wmrl", "sparse"));
        let c: Confirm = "wmrl-b-sparse:low>0".parse().expect("spec");
        let err = c.arms(&names).expect_err("two splits");
        assert!(err.to_string().contains("two ways"), "{err}");
        let c: Confirm = "dense_raw-sparse:low>0".parse().expect("spec");
        assert!(c.arms(&names).is_err());
    }

    #[test]
    fn criteria_are_judged_on_the_interval_at_each_level() {
        // Differences +4, +5, +6 points: mean 5, 95% lower end
        // 5 - 4.303 * 1 / sqrt(3) = 2.52, 98.33% (k = 3) lower end lower.
        let d = [0.04, 0.05, 0.06];
        let at95 = MeanCi::of_at(&d, 0.95).expect("ci");
        let at3 = MeanCi::of_at(&d, 1.0 - 0.05 / 3.0).expect("ci");
        let c: Confirm = "a-b:mean>=3,low>2".parse().expect("spec");
        assert!(c.criteria.iter().all(|x| x.holds(&at95)));
        assert!((100.0 * at95.lo - 2.516).abs() < 1e-2);
        assert!(100.0 * at3.lo < 2.0, "{}", at3.lo);
        assert!(!c.criteria[1].holds(&at3));
        let exact: Confirm = "a-b:mean>=5".parse().expect("spec");
        assert!(exact.criteria[0].holds(&at95));
        let strict: Confirm = "a-b:mean>5.0001".parse().expect("spec");
        assert!(!strict.criteria[0].holds(&at95));
    }
}
