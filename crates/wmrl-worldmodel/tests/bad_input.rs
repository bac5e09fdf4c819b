#![allow(clippy::unwrap_used)]
//! Missing, truncated, non-ONNX and wrong-contract model files, empty
//! rollouts and wrong frame sizes are clear errors, never panics.

mod common;

use candle_core::Device;
use prost::Message;
use wmrl_env::Frame;
use wmrl_onnx::OnnxError;
use wmrl_onnx::onnx_proto::*;
use wmrl_worldmodel::{ProgressNet, RolloutFrames, ScoreMode, WmError, WorldModel, export_onnx};

fn exported(dir: &std::path::Path) -> std::path::PathBuf {
    let cfg = common::tiny_config();
    let (_, varmap) = ProgressNet::init(cfg.clone(), &Device::Cpu, 1).unwrap();
    let p = dir.join("m.onnx");
    export_onnx(&cfg, &varmap, &p, &[]).unwrap();
    p
}

#[test]
fn missing_file_is_a_model_file_error() {
    let e = WorldModel::load("/nonexistent/model.onnx").unwrap_err();
    assert!(
        matches!(e, WmError::Onnx(OnnxError::ModelFile { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[test]
fn empty_truncated_and_garbage_files_are_errors() {
    if common::skip_without_runtime("empty_truncated_and_garbage_files_are_errors") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = exported(dir.path());
    let bytes = std::fs::read(&good).unwrap();

    let empty = dir.path().join("empty.onnx");
    std::fs::write(&empty, b"").unwrap();
    let e = WorldModel::load(&empty).unwrap_err();
    assert!(e.to_string().contains("is empty"), "{e}");

    let trunc = dir.path().join("trunc.onnx");
    std::fs::write(&trunc, &bytes[..bytes.len() / 2]).unwrap();
    let e = WorldModel::load(&trunc).unwrap_err();
    assert!(
        matches!(e, WmError::Onnx(OnnxError::ModelLoad { .. })),
        "{e}"
    );

    let junk = dir.path().join("junk.onnx");
    std::fs::write(&junk, b"this is not a protobuf at all \xff\xff\xff").unwrap();
    let e = WorldModel::load(&junk).unwrap_err();
    assert!(
        matches!(e, WmError::Onnx(OnnxError::ModelLoad { .. })),
        "{e}"
    );
}

/// A valid ONNX model with another contract: `x` float [N, 4] -> Relu -> `y`.
fn other_contract_model() -> Vec<u8> {
    let graph = GraphProto {
        node: vec![NodeProto {
            input: vec!["x".into()],
            output: vec!["y".into()],
            op_type: "Relu".into(),
            name: "relu".into(),
            ..Default::default()
        }],
        name: "other".into(),
        input: vec![ValueInfoProto::tensor("x", DT_FLOAT, &[Err("n"), Ok(4)])],
        output: vec![ValueInfoProto::tensor("y", DT_FLOAT, &[Err("n"), Ok(4)])],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn wrong_contract_says_expected_and_found() {
    if common::skip_without_runtime("wrong_contract_says_expected_and_found") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("other.onnx");
    std::fs::write(&p, other_contract_model()).unwrap();
    let e = WorldModel::load(&p).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, WmError::Contract { .. }), "{msg}");
    assert!(msg.contains("expected inputs `frames`"), "{msg}");
    assert!(
        msg.contains("the file has inputs `x` float32 [?, 4]"),
        "{msg}"
    );
}

#[test]
fn bad_rollouts_are_errors() {
    if common::skip_without_runtime("bad_rollouts_are_errors") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut wm = WorldModel::load(exported(dir.path())).unwrap();
    assert!(wm.score(&[], ScoreMode::Potential).unwrap().is_empty());

    let ok = Frame::blank(16, 16);
    let big = Frame::blank(32, 16);
    let empty = RolloutFrames {
        instruction: "x",
        frames: vec![],
    };
    let e = wm.score(
        &[
            RolloutFrames {
                instruction: "x",
                frames: vec![&ok],
            },
            empty,
        ],
        ScoreMode::Final,
    );
    let e = e.unwrap_err();
    assert!(matches!(e, WmError::BadRollout { index: 1, .. }), "{e}");
    assert!(e.to_string().contains("no frames"), "{e}");

    let wrong = RolloutFrames {
        instruction: "x",
        frames: vec![&ok, &big],
    };
    let e = wm.score(&[wrong], ScoreMode::Final).unwrap_err();
    assert!(
        e.to_string()
            .contains("frame 1 is 32x16 (WxH), the model takes 16x16"),
        "{e}"
    );

    let lying = Frame {
        width: 16,
        height: 16,
        rgb: vec![0; 10],
    };
    let e = wm.score(
        &[RolloutFrames {
            instruction: "x",
            frames: vec![&lying],
        }],
        ScoreMode::Final,
    );
    assert!(e.unwrap_err().to_string().contains("holds 10 bytes"));

    // a single frame is fine: it is repeated T times
    let one = wm
        .score(
            &[RolloutFrames {
                instruction: "x",
                frames: vec![&ok],
            }],
            ScoreMode::Potential,
        )
        .unwrap();
    assert_eq!(one[0].per_frame_progress.len(), 8);
    assert!(
        one[0].score.abs() < 1e-6,
        "identical frames have zero potential: {}",
        one[0].score
    );
}

#[test]
fn runtime_missing_error_names_the_fix() {
    let e = WmError::from(OnnxError::RuntimeMissing {
        reason: "no libonnxruntime found".into(),
    });
    assert!(e.to_string().contains("scripts/setup"));
    assert!(e.to_string().contains("ORT_DYLIB_PATH"));
}
