//! Parity with an independent numpy implementation of the method
//! (scripts/parity/reference.py, written from shared/METHOD.md): recorded
//! anchor streams replayed through `CorrectionLoop::step_with_anchors` must
//! give the same calibration map, fit count, disagreement, anchor weight and
//! advantages after every step. Regenerate the fixture with
//! `python3 scripts/parity/reference.py` (numpy needed).

use serde::Deserialize;
use wmrl_core::{Arm, CoreConfig, CorrectionLoop, ScoreRange, ScorerError, Scorers};

#[derive(Deserialize)]
struct Fixture {
    streams: Vec<Stream>,
}

#[derive(Deserialize)]
struct Stream {
    name: String,
    config: Cfg,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Cfg {
    bins: usize,
    min_pairs: usize,
    refit_every: usize,
    cap: usize,
    range: [f64; 2],
    half_life_groups: f64,
    warmup_groups: usize,
    target_weight: f64,
    w_max: f64,
    min_var: f64,
    adv_eps: f64,
    min_graded: usize,
}

#[derive(Deserialize)]
struct Step {
    group_sizes: Vec<usize>,
    anchors: Vec<usize>,
    wm: Vec<Vec<f64>>,
    real: Vec<Vec<Option<f64>>>,
    expected: Expected,
}

#[derive(Deserialize)]
struct Expected {
    advantages: Vec<Vec<Option<f64>>>,
    weight: f64,
    disagreement: Option<f64>,
    n_fits: usize,
    knots_x: Vec<f64>,
    knots_y: Vec<f64>,
}

struct Replay<'a> {
    step: &'a Step,
}

impl Scorers for Replay<'_> {
    fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError> {
        Ok(groups.iter().map(|&g| self.step.wm[g].clone()).collect())
    }
    fn real(&mut self, groups: &[usize]) -> Result<Vec<Vec<Option<f64>>>, ScorerError> {
        Ok(groups
            .iter()
            .map(|g| {
                let k = self
                    .step
                    .anchors
                    .iter()
                    .position(|a| a == g)
                    .expect("anchor");
                self.step.real[k].clone()
            })
            .collect())
    }
}

fn core_config(c: &Cfg) -> CoreConfig {
    let mut core = CoreConfig::default();
    core.anchors.fraction = wmrl_core::AnchorFraction::new(0.25).expect("valid");
    core.calibration.bins = c.bins;
    core.calibration.min_pairs = c.min_pairs;
    core.calibration.refit_every = c.refit_every;
    core.calibration.cap = c.cap;
    core.calibration.range = ScoreRange::Fixed(c.range);
    core.weight.half_life_groups = c.half_life_groups;
    core.weight.warmup_groups = c.warmup_groups;
    core.weight.target_weight = c.target_weight;
    core.weight.w_max = c.w_max;
    core.weight.min_var = c.min_var;
    core.advantage.eps = c.adv_eps;
    core.advantage.min_graded = c.min_graded;
    core
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + b.abs())
}

#[test]
fn correction_loop_matches_the_numpy_reference() {
    let text = include_str!("fixtures/reference_parity.json");
    let fx: Fixture = serde_json::from_str(text).expect("fixture");
    assert_eq!(fx.streams.len(), 4);
    for s in &fx.streams {
        let mut lp = CorrectionLoop::new(core_config(&s.config), Arm::Wmrl, 0).expect("config");
        let mut fitted_once = false;
        for (t, st) in s.steps.iter().enumerate() {
            let at = format!("stream {} step {t}", s.name);
            let out = lp
                .step_with_anchors(&st.group_sizes, &st.anchors, &mut Replay { step: st })
                .expect("step");
            let ex = &st.expected;
            assert_eq!(lp.calibrator().n_fits(), ex.n_fits, "{at}: fits");
            match lp.calibrator().map() {
                Some(m) => {
                    let (kx, ky) = m.knots();
                    assert_eq!(kx.len(), ex.knots_x.len(), "{at}: knots");
                    for (a, b) in kx.iter().zip(&ex.knots_x).chain(ky.iter().zip(&ex.knots_y)) {
                        assert!(close(*a, *b), "{at}: knot {a} vs {b}");
                    }
                    fitted_once = true;
                }
                None => assert!(ex.knots_x.is_empty(), "{at}: the reference has a map"),
            }
            assert!(
                close(out.stats.weight, ex.weight),
                "{at}: weight {} vs {}",
                out.stats.weight,
                ex.weight
            );
            match (out.stats.disagreement, ex.disagreement) {
                (Some(a), Some(b)) => assert!(close(a, b), "{at}: disagreement {a} vs {b}"),
                (a, b) => assert_eq!(a.is_some(), b.is_some(), "{at}: disagreement"),
            }
            for (g, (ga, gb)) in out.advantages.iter().zip(&ex.advantages).enumerate() {
                for (i, (a, b)) in ga.iter().zip(gb).enumerate() {
                    match (a, b) {
                        (Some(a), Some(b)) => {
                            assert!(close(*a, *b), "{at}: group {g} rollout {i}: {a} vs {b}")
                        }
                        _ => assert_eq!(a.is_some(), b.is_some(), "{at}: group {g} rollout {i}"),
                    }
                }
            }
        }
        assert!(
            fitted_once,
            "stream {} never fitted: a weak fixture",
            s.name
        );
        assert!(
            lp.anchor_weight().weight() > 1.0,
            "stream {}: the weight never moved",
            s.name
        );
    }
}

#[test]
fn score_range_reads_fixed_or_observed() {
    let fixed: ScoreRange = serde_json::from_str("[-1.0, 1.0]").expect("fixed");
    assert_eq!(fixed, ScoreRange::Fixed([-1.0, 1.0]));
    let observed: ScoreRange = serde_json::from_str("\"observed\"").expect("observed");
    assert_eq!(observed, ScoreRange::Auto(wmrl_core::AutoRange::Observed));
    assert!(serde_json::from_str::<ScoreRange>("\"widest\"").is_err());
    assert_eq!(
        wmrl_core::CalibrationConfig::default().range,
        ScoreRange::UNIT,
        "the reference's fixed [0, 1] is the default"
    );
    let mut c = CoreConfig::default();
    c.calibration.range = ScoreRange::Fixed([1.0, 0.0]);
    assert!(c.validate().is_err(), "an empty range is rejected");
}
