//! Interval estimates both tracks report with: Wilson intervals for the
//! success rate of one run, Student-t intervals for means over seeds.

use serde::{Deserialize, Serialize};

/// Two-sided 97.5% quantile of Student's t with `df` degrees of freedom.
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        d if d <= 30 => TABLE[d - 1],
        _ => 1.96,
    }
}

/// Mean with a 95% interval over independent values (seeds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanCi {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    pub n: usize,
}

impl MeanCi {
    pub fn of(xs: &[f64]) -> Option<Self> {
        if xs.is_empty() {
            return None;
        }
        let n = xs.len();
        let mean = xs.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Some(Self {
                mean,
                lo: f64::NEG_INFINITY,
                hi: f64::INFINITY,
                n,
            });
        }
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t_975(n - 1) * (var / n as f64).sqrt();
        Some(Self {
            mean,
            lo: mean - half,
            hi: mean + half,
            n,
        })
    }

    /// The paired differences `a - b` over the seeds both have (`(seed,
    /// value)`, in `a`'s order), with their interval; `None` when no seed
    /// is shared.
    pub fn paired(a: &[(u64, f64)], b: &[(u64, f64)]) -> Option<Self> {
        let d: Vec<f64> = a
            .iter()
            .filter_map(|&(seed, x)| b.iter().find(|y| y.0 == seed).map(|y| x - y.1))
            .collect();
        Self::of(&d)
    }

    pub fn overlaps(&self, o: &MeanCi) -> bool {
        self.lo <= o.hi && o.lo <= self.hi
    }

    /// `41.2 [38.0, 44.4]` in percent.
    pub fn pct(&self) -> String {
        self.format(false)
    }

    /// `+3.2 [+0.4, +6.0]`: a difference in percentage points.
    pub fn points(&self) -> String {
        self.format(true)
    }

    /// `0.633 [0.387, 0.879]` (`signed`: `+0.104 [...]`) on the value's
    /// own scale with `decimals` places.
    pub fn plain(&self, decimals: usize, signed: bool) -> String {
        self.format_by(|x| {
            if signed {
                format!("{x:+.decimals$}")
            } else {
                format!("{x:.decimals$}")
            }
        })
    }

    /// Whether a paired difference's interval separates the two, said
    /// plainly (both benches' reports use these words).
    pub fn verdict(&self) -> &'static str {
        if self.n < 2 {
            "one seed: not resolved"
        } else if self.lo > 0.0 {
            "resolved: the first is higher"
        } else if self.hi < 0.0 {
            "resolved: the second is higher"
        } else {
            "interval spans 0: not resolved"
        }
    }

    fn format(&self, signed: bool) -> String {
        self.format_by(|x| {
            if signed {
                format!("{:+.1}", 100.0 * x)
            } else {
                format!("{:.1}", 100.0 * x)
            }
        })
    }

    fn format_by(&self, f: impl Fn(f64) -> String) -> String {
        if self.n < 2 {
            return format!("{} (1 seed)", f(self.mean));
        }
        format!("{} [{}, {}]", f(self.mean), f(self.lo), f(self.hi))
    }
}

/// The normal quantile of a two-sided 95% interval.
pub const Z_95: f64 = 1.959_963_984_540_054;

/// Wilson score interval for `successes` out of `n` at normal quantile `z`
/// (`(0, 1)` for no trials).
pub fn wilson_interval(successes: usize, n: usize, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let nf = n as f64;
    let p = successes as f64 / nf;
    let z2 = z * z;
    let denom = 1.0 + z2 / nf;
    let centre = (p + z2 / (2.0 * nf)) / denom;
    let half = z * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// [`wilson_interval`] at 95%.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    wilson_interval(k, n, Z_95)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_interval_matches_hand_computation() {
        let ci = MeanCi::of(&[0.3, 0.4, 0.5]).expect("ci");
        // sd = 0.1, se = 0.0577, t(2) = 4.303
        assert!((ci.mean - 0.4).abs() < 1e-12);
        assert_eq!(ci.pct(), "40.0 [15.2, 64.8]");
        let d = MeanCi::of(&[-0.01, 0.02, 0.05]).expect("d");
        assert_eq!(d.points(), "+2.0 [-5.5, +9.5]");
        assert!((ci.hi - 0.4 - 4.303 * 0.1 / 3f64.sqrt()).abs() < 1e-9);
        assert!(ci.overlaps(&MeanCi::of(&[0.6, 0.62, 0.64]).expect("ci")));
        assert!(
            !MeanCi::of(&[0.1, 0.1, 0.1])
                .expect("ci")
                .overlaps(&MeanCi::of(&[0.9, 0.9, 0.9]).expect("ci"))
        );
    }

    #[test]
    fn wilson_known_value() {
        // 5/10: (0.2366, 0.7634)
        let (lo, hi) = wilson(5, 10);
        assert!((lo - 0.2366).abs() < 1e-4 && (hi - 0.7634).abs() < 1e-4);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    #[test]
    fn paired_differences_use_only_shared_seeds() {
        let a = [(0, 0.5), (1, 0.7), (3, 0.9)];
        let b = [(1, 0.4), (0, 0.25), (2, 0.0)];
        let d = MeanCi::paired(&a, &b).expect("two shared seeds");
        assert_eq!(d.n, 2);
        assert!((d.mean - 0.275).abs() < 1e-12);
        assert!(MeanCi::paired(&a[2..], &b).is_none());
    }
}
