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

/// The two-sided `level` quantile of Student's t with `df` degrees of
/// freedom: the `t` with `P(|T| <= t) = level` (for `level = 0.95`, the
/// 97.5% quantile; for a Bonferroni correction over `k` comparisons,
/// `level = 1 - 0.05 / k`). Infinite for `df = 0`.
pub fn t_two_sided(level: f64, df: usize) -> f64 {
    assert!(
        (0.0..1.0).contains(&level),
        "a two-sided level in [0, 1), not {level}"
    );
    if df == 0 {
        return f64::INFINITY;
    }
    let nu = df as f64;
    // P(|T| > t) = I_{nu / (nu + t^2)}(nu / 2, 1 / 2), falling in t.
    let tail = |t: f64| reg_inc_beta(nu / 2.0, 0.5, nu / (nu + t * t));
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    while tail(hi) > 1.0 - level {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if tail(mid) > 1.0 - level {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, nine terms; about 15 digits).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 - x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = C[1..]
        .iter()
        .enumerate()
        .fold(C[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularised incomplete beta function `I_x(a, b)` (continued
/// fraction, Lentz's method, on the side where it converges fast).
fn reg_inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
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
        Self::with_quantile(xs, t_975)
    }

    /// [`MeanCi::of`] at another two-sided level (`0.9875` for a 95%
    /// family of four comparisons, Bonferroni), with the exact t quantile.
    pub fn of_at(xs: &[f64], level: f64) -> Option<Self> {
        Self::with_quantile(xs, |df| t_two_sided(level, df))
    }

    fn with_quantile(xs: &[f64], t: impl Fn(usize) -> f64) -> Option<Self> {
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
        let half = t(n - 1) * (var / n as f64).sqrt();
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

/// Where a curve of `(x, y)` points, in order of `x`, first reaches
/// `target`: the first point's `x` when it starts there, else linear
/// between the two points that cross it; `None` when it never does (the
/// CPU or the labels an arm needed to reach a score).
pub fn first_reaching(points: &[(f64, f64)], target: f64) -> Option<f64> {
    if let Some(&(x, _)) = points.first().filter(|p| p.1 >= target) {
        return Some(x);
    }
    points.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        (y1 >= target).then(|| x0 + (target - y0) / (y1 - y0) * (x1 - x0))
    })
}

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
    fn t_quantiles_match_published_values() {
        // scipy.stats.t.ppf(1 - (1 - level) / 2, df)
        for (level, df, want) in [
            (0.95, 1, 12.706_204_736),
            (0.95, 4, 2.776_445_105),
            (0.95, 9, 2.262_157_163),
            (0.95, 30, 2.042_272_456),
            (0.9875, 1, 50.923_036_636),
            (0.9875, 4, 4.314_656_049),
            (0.9875, 9, 3.110_934_823),
            (0.99, 2, 9.924_843_201),
            (0.5, 3, 0.764_892_328),
        ] {
            let got = t_two_sided(level, df);
            assert!(
                (got - want).abs() < 1e-6 * want,
                "level {level} df {df}: {got} against {want}"
            );
        }
        assert!(t_two_sided(0.95, 0).is_infinite());
        for df in 1..=30 {
            assert!((t_two_sided(0.95, df) - t_975(df)).abs() < 6e-4, "df {df}");
        }
        let xs = [0.3, 0.4, 0.5];
        let wide = MeanCi::of_at(&xs, 0.9875).expect("ci");
        let narrow = MeanCi::of_at(&xs, 0.95).expect("ci");
        assert!(wide.lo < narrow.lo && wide.hi > narrow.hi);
        assert!((narrow.hi - MeanCi::of(&xs).expect("ci").hi).abs() < 1e-4);
    }

    #[test]
    fn wilson_known_value() {
        // 5/10: (0.2366, 0.7634)
        let (lo, hi) = wilson_interval(5, 10, Z_95);
        assert!((lo - 0.2366).abs() < 1e-4 && (hi - 0.7634).abs() < 1e-4);
        assert_eq!(wilson_interval(0, 0, Z_95), (0.0, 1.0));
        // 0/10: (0, 0.2775)
        let (lo, hi) = wilson_interval(0, 10, Z_95);
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-4, "{lo} {hi}");
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
