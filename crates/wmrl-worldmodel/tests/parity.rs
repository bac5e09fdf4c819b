#![allow(clippy::unwrap_used)]
//! The exported ONNX file, run through ONNX Runtime, computes what the candle
//! model computes (to 1e-4), and `WorldModel::score` agrees with the candle
//! model on whole rollouts.

mod common;

use candle_core::{Device, Tensor};
use wmrl_worldmodel::{
    ProgressNet, RolloutFrames, ScoreMode, WorldModel, collapse, export_onnx, parity, synthetic,
};

#[test]
fn exported_onnx_matches_candle() {
    if common::skip_without_runtime("exported_onnx_matches_candle") {
        return;
    }
    // pool 2 exercises AveragePool too
    let mut cfg = common::tiny_config();
    cfg.pool = 2;
    let (net, varmap) = ProgressNet::init(cfg.clone(), &Device::Cpu, 7).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    export_onnx(&cfg, &varmap, &path, &[]).unwrap();

    let mut wm = WorldModel::load(&path).unwrap();
    let shape = wm.shape();
    assert_eq!((shape.num_frames, shape.instruction_len), (8, 64));
    assert_eq!(shape.frame_hw, Some((16, 16)));

    let batch = 3;
    let fx = parity::fixture(&net, batch).unwrap();
    let (frames, tokens, _) = parity::inputs(&cfg, batch);
    let (p, s) = wm.run_raw(&frames, &tokens, batch, (16, 16)).unwrap();
    let max_diff = p
        .iter()
        .zip(&fx.progress)
        .chain(s.iter().zip(&fx.success))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(max_diff < 1e-4, "ort vs candle max |diff| = {max_diff}");
    // outputs vary across the batch: the check is not comparing constants
    assert!(
        fx.progress
            .iter()
            .any(|v| (v - fx.progress[0]).abs() > 1e-5)
    );

    // Leave the file and fixture where the Python parity check finds them.
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/wm-parity");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(&path, out.join("model.onnx")).unwrap();
    std::fs::write(out.join("parity.json"), serde_json::to_string(&fx).unwrap()).unwrap();
}

#[test]
fn score_matches_candle_on_subsampled_rollouts() {
    if common::skip_without_runtime("score_matches_candle_on_subsampled_rollouts") {
        return;
    }
    let cfg = common::tiny_config();
    let (net, varmap) = ProgressNet::init(cfg.clone(), &Device::Cpu, 3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    export_onnx(&cfg, &varmap, &path, &[]).unwrap();
    let mut wm = WorldModel::load(&path).unwrap();

    let eps: Vec<_> = (0..5)
        .map(|i| synthetic::episode(i, 16, 5 + 7 * i as usize, i % 2 == 0))
        .collect();
    let rollouts: Vec<RolloutFrames> = eps
        .iter()
        .map(|e| RolloutFrames {
            instruction: &e.instruction,
            frames: e.steps.iter().map(|s| &s.frames[0]).collect(),
        })
        .collect();
    let scores = wm.score(&rollouts, ScoreMode::Potential).unwrap();
    assert_eq!(scores.len(), 5);
    for (r, sc) in rollouts.iter().zip(&scores) {
        let idx = collapse::uniform_indices(r.frames.len(), 8);
        let mut buf = Vec::new();
        for i in idx {
            collapse::push_frame_chw(r.frames[i], &mut buf);
        }
        let f = Tensor::from_vec(buf, (1, 8, 3, 16, 16), &Device::Cpu).unwrap();
        let t = Tensor::from_vec(
            wmrl_env::text::byte_tokens(r.instruction, 64),
            (1, 64),
            &Device::Cpu,
        )
        .unwrap();
        let (p, _) = net.predict(&f, &t).unwrap();
        let p: Vec<f32> = p.flatten_all().unwrap().to_vec1().unwrap();
        for (a, b) in p.iter().zip(&sc.per_frame_progress) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
        let want = collapse::collapse(
            &sc.per_frame_progress,
            &sc.per_frame_success,
            ScoreMode::Potential,
            3,
        );
        assert_eq!(sc.score, want);
    }
    // batching does not change results
    let one = wm.score(&rollouts[2..3], ScoreMode::Final).unwrap();
    assert!((one[0].score - scores[2].per_frame_progress[7]).abs() < 1e-5);
}
