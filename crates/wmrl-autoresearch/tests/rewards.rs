//! The reward service's state (crates/wmrl-autoresearch/src/rewards.rs):
//! one live service per state file, a calibration tied to the world model it
//! was fitted to, layouts and settings checked on load, and rewards that are
//! standardised within each group. Nothing here executes a solution (the
//! end-to-end check with the sandbox is envs/mledojo/rewards_check.py).
#![allow(clippy::unwrap_used)]

use std::path::Path;

use wmrl_autoresearch::code_features::code_input;
use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::execute::Executor;
use wmrl_autoresearch::predictor::{InputKind, Predictor, PredictorConfig};
use wmrl_autoresearch::rewards::{PROTOCOL, RewardConfig, RewardRequest, RewardService};
use wmrl_autoresearch::{
    Arm, Error, Isolation, Ladder, N_META, OnnxPredictor, Sandbox, SandboxConfig, Suite,
};

fn runtime() -> bool {
    let ok = wmrl_onnx::runtime_available();
    if !ok {
        eprintln!("skipped: no ONNX Runtime library (scripts/setup installs it)");
    }
    ok
}

/// A small code predictor written to `path`; `seed` gives other weights.
fn predictor(path: &Path, seed: u64) -> OnnxPredictor {
    let meta = vec![0.3; N_META];
    let good = "import pandas as pd\nfrom sklearn.linear_model import Ridge\nm = Ridge().fit(x, y)\npd.DataFrame(p).to_csv('submission.csv')\n";
    let bad = "import pandas as pd\nx = (\n";
    let inputs: Vec<Vec<f32>> = (0..8)
        .map(|i| code_input(&meta, if i % 2 == 0 { good } else { bad }))
        .collect();
    let targets: Vec<f64> = (0..8).map(|i| if i % 2 == 0 { 0.8 } else { 0.1 }).collect();
    let cfg = PredictorConfig {
        epochs: 20,
        seed,
        ..Default::default()
    };
    let (p, _) = Predictor::train_on(&cfg, InputKind::Code, &inputs, &targets).unwrap();
    OnnxPredictor::export_and_load(&p, path).unwrap()
}

/// An executor that is never asked to execute here (no anchors are due).
fn executor() -> Executor {
    let sb = Sandbox::new(SandboxConfig {
        isolation: Isolation::RlimitsOnly,
        require_private_fs: false,
        ..Default::default()
    })
    .unwrap();
    Executor::new(sb, Ladder::default())
}

fn config(fraction: f64) -> RewardConfig {
    let mut core = wmrl_autoresearch::train::small_scale_core();
    core.anchors.fraction = wmrl_core::AnchorFraction::new(fraction).unwrap();
    RewardConfig {
        arm: Arm::Wmrl,
        seed: 0,
        core,
    }
}

fn service(pred: &Path, state: &Path, fraction: f64) -> wmrl_autoresearch::Result<RewardService> {
    let suite = Suite::load(&default_suite_dir()).unwrap();
    let p = OnnxPredictor::load_kind(pred, InputKind::Code).unwrap();
    RewardService::new(suite, executor(), Some(p), config(fraction), Some(state))
}

#[test]
fn a_second_service_on_one_state_is_refused_while_the_first_lives() {
    if !runtime() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let pred = d.path().join("code.onnx");
    predictor(&pred, 0);
    let state = d.path().join("state.json");
    let first = service(&pred, &state, 0.25).unwrap();
    // The lock is per open file, so a second service in this process is
    // refused exactly as one in another process would be.
    match service(&pred, &state, 0.25) {
        Err(Error::InUse(m)) => {
            assert!(
                m.contains("state.json") && m.contains("another reward service"),
                "{m}"
            );
            assert!(m.contains(&format!("pid {}", std::process::id())), "{m}");
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("two services share one state file"),
    }
    drop(first);
    service(&pred, &state, 0.25).expect("free once the first service is gone");
}

#[test]
fn a_calibration_fitted_to_another_world_model_is_refused() {
    if !runtime() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a.onnx"), d.path().join("b.onnx"));
    predictor(&a, 0);
    predictor(&b, 1);
    let state = d.path().join("state.json");
    drop(service(&a, &state, 0.25).unwrap());
    // Another file, and the same file retrained in place: both refused.
    let err = service(&b, &state, 0.25)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("calibration was fitted") && err.contains("a.onnx") && err.contains("b.onnx"),
        "{err}"
    );
    drop(service(&a, &state, 0.25).expect("the same model continues"));
    std::fs::copy(&b, &a).unwrap();
    let err = service(&a, &state, 0.25)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("calibration was fitted"), "{err}");
}

#[test]
fn a_state_of_another_layout_or_a_zero_anchor_fraction_is_refused() {
    if !runtime() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let pred = d.path().join("code.onnx");
    predictor(&pred, 0);
    let state = d.path().join("state.json");
    drop(service(&pred, &state, 0.25).unwrap());
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();

    // A state written before the format was recorded (format 1 had its own
    // untyped anchor fraction and anchor rule).
    let mut old = saved.clone();
    old.as_object_mut().unwrap().remove("format");
    std::fs::write(&state, old.to_string()).unwrap();
    let err = service(&pred, &state, 0.25)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("format 0"), "{err}");

    // A fraction of 0 cannot come back through a state file either.
    let mut zero = saved.clone();
    zero["core"]["cfg"]["anchors"]["fraction"] = 0.0.into();
    std::fs::write(&state, zero.to_string()).unwrap();
    let err = service(&pred, &state, 0.25)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("anchors.fraction"), "{err}");
    assert!(wmrl_core::AnchorFraction::new(0.0).is_err());

    // Other settings are refused, naming the file and the differing key.
    std::fs::write(&state, saved.to_string()).unwrap();
    let err = service(&pred, &state, 0.5)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("other settings") && err.contains("state.json"),
        "{err}"
    );
    assert!(
        err.contains("core.anchors.fraction: 0.25 against 0.5"),
        "{err}"
    );
}

#[test]
fn rewards_are_standardised_within_each_group_and_anchors_follow_the_stream() {
    if !runtime() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let pred = d.path().join("code.onnx");
    predictor(&pred, 0);
    let state = d.path().join("state.json");
    let mut s = service(&pred, &state, 0.25).unwrap();
    let group = vec![
        "import pandas as pd\nfrom sklearn.linear_model import Ridge\nm = Ridge().fit(x, y)\npd.DataFrame(p).to_csv('submission.csv')\n".to_string(),
        "import pandas as pd\nx = (\n".to_string(),
        "print(1)\n".to_string(),
    ];
    let req = RewardRequest {
        protocol: PROTOCOL,
        competition: "iris".into(),
        groups: vec![group],
    };
    // At 0.25 the first three one-group requests are due no anchor (the
    // fourth would be executed), whatever the per-step minimum says.
    for n in 1..=3 {
        let r = s.score(&req).unwrap();
        assert!(r.anchors.is_empty() && r.labels_used == 0, "{r:?}");
        assert_eq!(r.requests, n);
        let scores: Vec<f64> = r.scores[0].iter().map(|x| x.unwrap()).collect();
        let rw = &r.rewards[0];
        let mean = rw.iter().sum::<f64>() / 3.0;
        let var = rw.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 3.0;
        assert!(mean.abs() < 1e-9, "centred: {rw:?}");
        // Standardised, not only centred: unit population spread (up to the
        // eps added to the spread), whatever the scores' own spread.
        let spread = {
            let m = scores.iter().sum::<f64>() / 3.0;
            (scores.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 3.0).sqrt()
        };
        assert!(spread > 1e-3 && spread < 0.5, "scores {scores:?}");
        assert!(
            (var.sqrt() - spread / (spread + 1e-4)).abs() < 1e-9,
            "{rw:?}"
        );
        for (a, b) in rw.iter().zip(&scores) {
            assert!((a - (b - scores.iter().sum::<f64>() / 3.0) / (spread + 1e-4)).abs() < 1e-9);
        }
    }
    // The state on disk has the three requests (saved after each one).
    drop(s);
    let s = service(&pred, &state, 0.25).unwrap();
    assert_eq!(s.requests(), 3);
}
