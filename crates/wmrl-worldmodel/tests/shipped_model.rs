#![allow(clippy::unwrap_used)]
//! The shipped models/progress-tiny/model.onnx loads through ort with the
//! contract in its metadata and still reproduces its recorded candle outputs.

mod common;

use wmrl_env::Frame;
use wmrl_worldmodel::parity::ParityFixture;
use wmrl_worldmodel::{NetConfig, RolloutFrames, ScoreMode, WorldModel, parity};

#[test]
fn shipped_model_loads_and_matches_its_fixture() {
    if common::skip_without_runtime("shipped_model_loads_and_matches_its_fixture") {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/progress-tiny");
    let mut wm = WorldModel::load(dir.join("model.onnx")).unwrap();
    let s = wm.shape();
    assert_eq!(
        (s.num_frames, s.instruction_len, s.frame_hw),
        (8, 64, Some((128, 128)))
    );

    let fx: ParityFixture =
        serde_json::from_str(&std::fs::read_to_string(dir.join("parity.json")).unwrap()).unwrap();
    let cfg = NetConfig {
        height: fx.height,
        width: fx.width,
        ..NetConfig::default()
    };
    let (frames, tokens, _) = parity::inputs(&cfg, fx.batch);
    let (p, sc) = wm
        .run_raw(&frames, &tokens, fx.batch, (fx.height, fx.width))
        .unwrap();
    let diff = p
        .iter()
        .zip(&fx.progress)
        .chain(sc.iter().zip(&fx.success))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-4, "{diff}");

    let blank = Frame::blank(128, 128);
    let r = RolloutFrames {
        instruction: "open the top drawer",
        frames: vec![&blank; 3],
    };
    let out = wm.score(&[r], ScoreMode::Max).unwrap();
    assert!(
        out[0]
            .per_frame_progress
            .iter()
            .all(|v| (0.0..=1.0).contains(v))
    );
}
