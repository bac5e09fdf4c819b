//! The anchor reward modes of the free-label regime (METHOD.md: `calib`,
//! `mix`, `sparse`), the scarce regime left as it was, and the shuffled
//! control arm, on hand-made groups.

use wmrl_core::{
    AnchorConfig, AnchorReward, Arm, CalibrationConfig, CoreConfig, CorrectionLoop, ScorerError,
    Scorers,
};

/// Fixed groups: world-model scores and 0/1 outcomes.
struct Fixed {
    wm: Vec<Vec<f64>>,
    real: Vec<Vec<f64>>,
    real_calls: Vec<usize>,
}

impl Scorers for Fixed {
    fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError> {
        Ok(groups.iter().map(|&g| self.wm[g].clone()).collect())
    }
    fn real(&mut self, groups: &[usize]) -> Result<Vec<Vec<Option<f64>>>, ScorerError> {
        self.real_calls.extend_from_slice(groups);
        Ok(groups
            .iter()
            .map(|&g| self.real[g].iter().map(|&r| Some(r)).collect())
            .collect())
    }
}

fn groups() -> Fixed {
    Fixed {
        // A world model that ranks well but is biased upward and non-affine.
        wm: vec![
            vec![0.15, 0.35, 0.62, 0.91],
            vec![0.05, 0.22, 0.48, 0.97],
            vec![0.12, 0.28, 0.33, 0.41],
        ],
        real: vec![
            vec![0.0, 0.0, 1.0, 1.0],
            vec![0.0, 1.0, 0.0, 1.0],
            vec![0.0, 0.0, 0.0, 0.0],
        ],
        real_calls: Vec::new(),
    }
}

fn config(fraction: f64, mode: AnchorReward) -> CoreConfig {
    CoreConfig {
        anchors: AnchorConfig {
            fraction: wmrl_core::AnchorFraction::new(fraction).expect("valid fraction"),
            ..AnchorConfig::default()
        },
        calibration: CalibrationConfig {
            min_pairs: 4,
            refit_every: 4,
            range: wmrl_core::ScoreRange::UNIT,
            ..CalibrationConfig::default()
        },
        anchor_reward: mode,
        ..CoreConfig::default()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn free_labels_reward_every_rollout_by_the_mode() {
    for mode in [AnchorReward::Calib, AnchorReward::Mix, AnchorReward::Sparse] {
        let mut lp = CorrectionLoop::new(config(1.0, mode), Arm::Wmrl, 0).expect("valid");
        let mut s = groups();
        let out = lp.step(&[4, 4, 4], None, &mut s).expect("step");
        // Every group is an anchor, every rollout labelled.
        assert_eq!(out.anchors, vec![0, 1, 2]);
        assert_eq!(out.stats.labels_used, 12, "{mode:?}");
        assert_eq!(out.stats.weight, 1.0, "the weight is off with free labels");
        // The map was fitted on this step's pairs before anyone was rewarded.
        assert!(lp.calibrator().is_fitted());
        for g in 0..3 {
            let f = lp.calibrator().apply(&s.wm[g]).expect("apply");
            for (i, fi) in f.iter().enumerate() {
                let r = out.rewards[g][i].expect("graded");
                let y = s.real[g][i];
                let want = match mode {
                    AnchorReward::Calib => *fi,
                    AnchorReward::Mix => (2.0 * y + fi) / 3.0,
                    AnchorReward::Sparse => y,
                };
                assert!(close(r, want), "{mode:?} g{g} i{i}: {r} vs {want}");
            }
        }
        // The all-failure group has a ranking under calib and mix only.
        let flat_adv: f64 = out.advantages[2].iter().flatten().map(|a| a.abs()).sum();
        match mode {
            AnchorReward::Sparse => assert!(close(flat_adv, 0.0)),
            _ => assert!(flat_adv > 0.0, "{mode:?}: f(dense) ranks a flat group"),
        }
    }
}

#[test]
fn calib_equals_the_calibrators_map_and_differs_from_raw() {
    let mut lp =
        CorrectionLoop::new(config(1.0, AnchorReward::Calib), Arm::Wmrl, 0).expect("valid");
    let mut s = groups();
    let out = lp.step(&[4, 4, 4], None, &mut s).expect("step");
    let map = lp.calibrator().map().expect("fitted");
    let mut moved = false;
    for g in 0..3 {
        for (r, &x) in out.rewards[g].iter().zip(&s.wm[g]) {
            let r = r.expect("graded");
            assert!(close(r, map.eval(x)));
            moved |= !close(r, x);
        }
    }
    assert!(moved, "the map is not the identity here");
}

#[test]
fn scarce_labels_keep_real_outcomes_on_anchors_in_every_mode() {
    for mode in [AnchorReward::Calib, AnchorReward::Mix, AnchorReward::Sparse] {
        let mut lp = CorrectionLoop::new(config(0.34, mode), Arm::Wmrl, 5).expect("valid");
        let mut s = groups();
        let out = lp.step(&[4, 4, 4], None, &mut s).expect("step");
        assert_eq!(out.anchors.len(), 1);
        assert_eq!(out.stats.labels_used, 4, "{mode:?}: only the anchor group");
        let a = out.anchors[0];
        for (r, &y) in out.rewards[a].iter().zip(&s.real[a]) {
            assert_eq!(*r, Some(y), "{mode:?}");
        }
        assert_eq!(s.real_calls, vec![a]);
    }
}

#[test]
fn shuffled_control_permutes_sparse_advantages_within_groups() {
    let mut sparse =
        CorrectionLoop::new(config(1.0, AnchorReward::Calib), Arm::Sparse, 3).expect("valid");
    let mut shuffled =
        CorrectionLoop::new(config(1.0, AnchorReward::Calib), Arm::SparseShuffled, 3)
            .expect("valid");
    let mut differs = false;
    for _ in 0..8 {
        let a = sparse.step(&[4, 4, 4], None, &mut groups()).expect("a");
        let b = shuffled.step(&[4, 4, 4], None, &mut groups()).expect("b");
        assert_eq!(a.stats.labels_used, b.stats.labels_used);
        assert!(b.wm_raw.is_none(), "the control reads no world model");
        for (ga, gb) in a.advantages.iter().zip(&b.advantages) {
            let mut x: Vec<f64> = ga.iter().flatten().copied().collect();
            let mut y: Vec<f64> = gb.iter().flatten().copied().collect();
            differs |= x != y;
            x.sort_by(f64::total_cmp);
            y.sort_by(f64::total_cmp);
            assert_eq!(x, y, "same multiset of advantages");
        }
    }
    assert!(differs, "some group was reordered");
}

#[test]
fn a_scarce_stream_in_one_group_slices_keeps_real_outcomes_and_the_weight() {
    // The reward service's case: one group per step, executed now and then.
    // In the scarce regime an all-anchor step is not free labels: its group
    // is rewarded with the real outcomes (not `calib`'s f(dense)) and the
    // weight is live once warmed up.
    let cfg = CoreConfig {
        weight: wmrl_core::WeightConfig {
            warmup_groups: 1,
            ..wmrl_core::WeightConfig::default()
        },
        ..config(0.25, AnchorReward::Calib)
    };
    let mut scarce = CorrectionLoop::new(cfg.clone(), Arm::Wmrl, 0)
        .expect("valid")
        .in_scarce_regime();
    let mut free = CorrectionLoop::new(cfg, Arm::Wmrl, 0).expect("valid");
    let mut weights = Vec::new();
    let mut free_calibrated = 0;
    for round in 0..3 {
        for g in 0..2 {
            let mut s = groups();
            s.wm = vec![s.wm[g].clone()];
            s.real = vec![s.real[g].clone()];
            let a = scarce.step_with_anchors(&[4], &[0], &mut s).expect("step");
            let b = free.step_with_anchors(&[4], &[0], &mut s).expect("step");
            let real: Vec<Option<f64>> = s.real[0].iter().map(|&r| Some(r)).collect();
            assert_eq!(a.rewards[0], real, "round {round}: real outcomes kept");
            weights.push(a.stats.weight);
            assert_eq!(b.stats.weight, 1.0, "free labels: the weight is off");
            if b.stats.calibrated {
                let f: Vec<Option<f64>> = free
                    .calibrator()
                    .apply(&s.wm[0])
                    .expect("apply")
                    .into_iter()
                    .map(Some)
                    .collect();
                assert_eq!(b.rewards[0], f, "free labels reward by calib");
                free_calibrated += 1;
            }
        }
    }
    assert!(
        weights.iter().any(|&w| w != 1.0),
        "the weight moves in the scarce regime: {weights:?}"
    );
    assert!(free_calibrated > 0, "the free-label comparison ran");
}
