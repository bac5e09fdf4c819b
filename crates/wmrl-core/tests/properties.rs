//! Property tests of the method's invariants (proptest).

use proptest::prelude::*;
use wmrl_core::{
    AdvantageConfig, AnchorWeight, CalibrationConfig, CalibrationMode, Calibrator, IsotonicMap,
    WeightConfig, group_advantages,
};

/// Brute-force least-squares isotonic fit for tiny inputs: the minimiser of
/// sum w (y - f)^2 over non-decreasing f is piecewise the weighted mean of a
/// partition into consecutive blocks; try every partition and keep the best
/// feasible one.
fn brute_force_isotonic(ys: &[f64], ws: &[f64]) -> Vec<f64> {
    let n = ys.len();
    let mut best: Option<(f64, Vec<f64>)> = None;
    for mask in 0u32..(1 << (n - 1)) {
        let mut fit = Vec::with_capacity(n);
        let mut start = 0;
        for i in 0..n {
            let cut = i == n - 1 || mask & (1 << i) != 0;
            if cut {
                let w: f64 = ws[start..=i].iter().sum();
                let m = ys[start..=i]
                    .iter()
                    .zip(&ws[start..=i])
                    .map(|(y, w)| y * w)
                    .sum::<f64>()
                    / w;
                fit.extend(std::iter::repeat_n(m, i + 1 - start));
                start = i + 1;
            }
        }
        if fit.windows(2).any(|p| p[1] < p[0] - 1e-12) {
            continue;
        }
        let loss: f64 = fit
            .iter()
            .zip(ys)
            .zip(ws)
            .map(|((f, y), w)| w * (f - y) * (f - y))
            .sum();
        if best.as_ref().is_none_or(|(l, _)| loss < *l - 1e-12) {
            best = Some((loss, fit));
        }
    }
    best.map(|b| b.1).unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pav_equals_brute_force(
        data in prop::collection::vec((-5.0f64..5.0, 0.1f64..3.0), 1..9)
    ) {
        let ys: Vec<f64> = data.iter().map(|d| d.0).collect();
        let ws: Vec<f64> = data.iter().map(|d| d.1).collect();
        let fast = wmrl_core::pav(&ys, &ws);
        let slow = brute_force_isotonic(&ys, &ws);
        for (a, b) in fast.iter().zip(&slow) {
            prop_assert!((a - b).abs() < 1e-9, "{fast:?} vs {slow:?}");
        }
    }

    #[test]
    fn fitted_maps_are_monotone(
        pairs in prop::collection::vec((-1.0f64..1.0, 0.0f64..1.0), 2..300),
        probes in prop::collection::vec(-2.0f64..2.0, 2..50),
        exact in any::<bool>(),
    ) {
        let xs: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let map = if exact {
            IsotonicMap::fit_exact(&xs, &ys, &vec![1.0; xs.len()])
        } else {
            IsotonicMap::fit_binned(&xs, &ys, 10, -1.0, 1.0)
        };
        if let Some(m) = map {
            let mut p = probes.clone();
            p.sort_by(f64::total_cmp);
            let v: Vec<f64> = p.iter().map(|&x| m.eval(x)).collect();
            prop_assert!(v.windows(2).all(|w| w[1] >= w[0] - 1e-12), "{v:?}");
            // Outputs stay within the range of the targets.
            prop_assert!(v.iter().all(|&y| (-1e-12..=1.0 + 1e-12).contains(&y)));
        }
    }

    #[test]
    fn identity_before_min_pairs(
        pairs in prop::collection::vec((0.0f64..1.0, 0.0f64..1.0), 1..199),
        probe in 0.0f64..1.0,
    ) {
        let mut c = Calibrator::new(CalibrationConfig::default()).expect("valid");
        let xs: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        prop_assert!(!c.push(&xs, &ys).expect("ok"));
        prop_assert!(!c.is_fitted());
        prop_assert_eq!(c.apply(&[probe]).expect("ok"), vec![probe]);
    }

    #[test]
    fn advantages_sum_to_zero_and_exclude_ungraded(
        rewards in prop::collection::vec(prop::option::weighted(0.8, -3.0f64..3.0), 1..16),
        weight in 1.0f64..4.0,
        dr in any::<bool>(),
    ) {
        let cfg = AdvantageConfig { scale_by_std: !dr, ..AdvantageConfig::default() };
        let a = group_advantages(&rewards, weight, &cfg).expect("ok");
        prop_assert_eq!(a.len(), rewards.len());
        let graded = rewards.iter().flatten().count();
        for (r, adv) in rewards.iter().zip(&a) {
            if r.is_none() || graded < 2 {
                prop_assert!(adv.is_none());
            } else {
                prop_assert!(adv.is_some());
            }
        }
        let sum: f64 = a.iter().flatten().sum();
        prop_assert!(sum.abs() < 1e-6 * (1.0 + graded as f64) * weight * 100.0, "sum {sum}");
    }

    #[test]
    fn weight_stays_in_bounds_and_is_one_in_warmup(
        s2s in prop::collection::vec(0.0f64..20.0, 1..200),
        w_max in 1.0f64..6.0,
        warmup in 1usize..40,
    ) {
        let cfg = WeightConfig {
            w_max,
            target_weight: w_max.min(2.0),
            warmup_groups: warmup,
            ..WeightConfig::default()
        };
        let mut w = AnchorWeight::new(cfg).expect("valid");
        for (i, s2) in s2s.iter().enumerate() {
            w.observe(*s2).expect("ok");
            let v = w.weight();
            prop_assert!((1.0..=w_max).contains(&v), "{v}");
            if i + 1 < warmup {
                prop_assert_eq!(v, 1.0);
            }
        }
    }
}

#[test]
fn binned_map_is_not_affine() {
    // A convex distortion: the isotonic fit must bend, which an affine map
    // cannot (and GRPO's standardisation would cancel an affine one).
    let xs: Vec<f64> = (0..400).map(|i| i as f64 / 399.0).collect();
    let ys: Vec<f64> = xs.iter().map(|x| x.sqrt()).collect();
    let cfg = CalibrationConfig {
        mode: CalibrationMode::Binned,
        min_pairs: 10,
        ..CalibrationConfig::default()
    };
    let mut c = Calibrator::new(cfg).expect("valid");
    assert!(c.push(&xs, &ys).expect("ok"));
    let f = c.apply(&[0.05, 0.5, 0.95]).expect("ok");
    let slope_lo = (f[1] - f[0]) / 0.45;
    let slope_hi = (f[2] - f[1]) / 0.45;
    assert!(slope_lo > 1.5 * slope_hi, "{f:?}");
}
