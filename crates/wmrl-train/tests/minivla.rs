#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `wmrl train` on a MiniVLA directory: the trainer takes the policy
//! through `wmrl_policy::Learner` (LoRA adapters on the language model,
//! GRPO on the 7 action tokens per step), so a MiniVLA run has the `tiny`
//! policy's loop, records and checkpoints. On a scaled-down stand-in (the
//! published structure and tensor names, random weights): the update moves
//! only the adapters, the checkpoint holds them and their optimiser, and a
//! run resumed from a checkpoint takes the same next step as one that never
//! stopped. Settings a MiniVLA cannot honour are refused up front.

use std::path::{Path, PathBuf};

use wmrl_policy::ActionPolicy;
use wmrl_train::{TrainConfig, Trainer};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stand_in(dir: &Path) {
    wmrl_minivla::stand_in::write_stand_in(
        dir,
        &wmrl_minivla::MiniVlaConfig::scaled_down(),
        7,
        wmrl_policy::candle::DType::F32,
        &["put", "the", "bowl", "on", "plate", "pick", "up"],
    )
    .expect("stand-in");
}

fn config(policy: &Path, extra: &[&str]) -> wmrl_train::Result<TrainConfig> {
    let wm = repo().join("models/progress-tiny/model.onnx");
    let mut sets: Vec<String> = vec![
        "arm=\"dense_raw\"".into(),
        "steps=2".into(),
        format!("policy={:?}", policy.display().to_string()),
        format!("world_model.path={:?}", wm.display().to_string()),
        "rollout.n_groups=2".into(),
        "rollout.group_size=2".into(),
        "rollout.max_steps=3".into(),
        "update.loss.kl_beta=0.0".into(),
        "update.minibatch=3".into(),
        "eval.every=0".into(),
        "eval.at_start=false".into(),
        "eval.in_domain=false".into(),
        "minivla.micro_batch=2".into(),
        "minivla.lora.rank=2".into(),
    ];
    sets.extend(extra.iter().map(|s| s.to_string()));
    TrainConfig::load_with(&repo().join("configs/grpo_sim.toml"), &sets)
}

#[test]
fn a_minivla_run_trains_its_adapters_and_resumes_to_the_same_step() {
    if !wmrl_onnx::runtime_available() {
        eprintln!("SKIPPED: ONNX Runtime library not found; run scripts/setup");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let policy = tmp.path().join("minivla");
    stand_in(&policy);
    let cfg = config(&policy, &[]).expect("config");

    let whole = tmp.path().join("whole");
    let mut t = Trainer::create(cfg.clone(), &whole).expect("create");
    assert_eq!(t.policy().kind(), "minivla");
    let first = t.train_step().expect("step 0");
    t.checkpoint().expect("checkpoint");
    let second = t.train_step().expect("step 1");
    // Dense world-model rewards differ inside a group: the update runs.
    assert!(first.samples_updated > 0, "{first:?}");
    assert!(
        first.grad_norm > 0.0 && first.grad_norm.is_finite(),
        "{first:?}"
    );
    // Both MiniVLA steps use one action per call: 7 tokens each.
    let ck = whole.join("checkpoint");
    for f in [
        wmrl_minivla::ADAPTERS_FILE,
        wmrl_minivla::ADAPTER_OPTIMIZER_FILE,
    ] {
        assert!(ck.join(f).exists(), "{f} in the checkpoint");
    }
    // The adapters' B started at zero (the start policy is the checkpoint)
    // and the update moved them.
    let adapters = wmrl_policy::candle::safetensors::load(
        ck.join(wmrl_minivla::ADAPTERS_FILE),
        &wmrl_policy::candle::Device::Cpu,
    )
    .expect("adapters");
    let moved = adapters
        .iter()
        .filter(|(k, _)| k.ends_with("lora_b"))
        .map(|(_, t)| {
            t.abs()
                .and_then(|a| a.max_all())
                .and_then(|m| m.to_scalar::<f32>())
                .expect("max")
        })
        .fold(0.0f32, f32::max);
    assert!(moved > 0.0, "no adapter B moved");
    assert!(
        !adapters.keys().any(|k| !k.contains(".lora_")),
        "only adapters are saved"
    );

    // Exported with the adapters merged, in the converted layout: the
    // merged checkpoint acts as the adapted model does (greedy tokens equal,
    // log-probabilities to rounding).
    t.checkpoint().expect("checkpoint at step 2");
    drop(t);
    let merged = tmp.path().join("merged");
    let (kind, step) =
        wmrl_train::export_policy(&whole, &merged, wmrl_run::DeviceChoice::Cpu).expect("export");
    assert_eq!((kind, step), ("minivla", 2));
    let adapted = Trainer::resume(&whole).expect("resume");
    let back = wmrl_minivla::MiniVlaPolicy::load(
        &merged,
        &wmrl_policy::candle::Device::Cpu,
        wmrl_policy::candle::DType::F32,
        None,
    )
    .expect("load the export");
    let input = |shade: u8| wmrl_policy::PolicyInput {
        instruction: "put the bowl on the plate".into(),
        frames: vec![
            wmrl_env::Frame::new(
                32,
                32,
                (0..32 * 32 * 3)
                    .map(|i| (i as u8).wrapping_mul(shade))
                    .collect(),
            )
            .expect("frame"),
        ],
        prev_frame: None,
        proprio: vec![0.0; 9],
    };
    let inputs = vec![input(3), input(7)];
    for temperature in [0.0, 1.0] {
        let a = adapted
            .policy()
            .sample_streams(&inputs, temperature, 5, &[0, 1])
            .expect("adapted");
        let b = back
            .sample_streams(&inputs, temperature, 5, &[0, 1])
            .expect("merged");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.tokens, y.tokens, "temperature {temperature}");
            for (p, q) in x.logprobs.iter().zip(&y.logprobs) {
                assert!((p - q).abs() < 1e-4, "{p} vs {q}");
            }
        }
    }
    let err =
        wmrl_train::export_policy(&whole, &merged, wmrl_run::DeviceChoice::Cpu).expect_err("taken");
    assert!(err.to_string().contains("not empty"), "{err}");

    // Stop after the first step's checkpoint, resume: the same next step.
    let part = tmp.path().join("part");
    let mut t = Trainer::create(cfg, &part).expect("create");
    let again = t.train_step().expect("step 0");
    assert_eq!(again.loss, first.loss);
    t.checkpoint().expect("checkpoint");
    drop(t);
    let mut t = Trainer::resume(&part).expect("resume");
    assert_eq!(t.steps_done(), 1);
    let resumed = t.train_step().expect("step 1");
    assert_eq!(resumed.batch_success, second.batch_success);
    assert_eq!(resumed.samples_updated, second.samples_updated);
    assert_eq!(resumed.loss, second.loss);
    assert_eq!(resumed.grad_norm, second.grad_norm);
}

#[test]
fn settings_a_minivla_cannot_honour_are_refused_before_the_run_starts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let policy = tmp.path().join("minivla");
    stand_in(&policy);
    // No KL-to-reference term for adapters.
    let cfg = config(&policy, &["update.loss.kl_beta=0.04"]).expect("config");
    let out = tmp.path().join("kl");
    let err = Trainer::create(cfg, &out).expect_err("kl refused");
    assert!(err.to_string().contains("kl_beta"), "{err}");
    assert!(!out.exists(), "nothing written");
    // A bad adapter target is named.
    let err = config(&policy, &["minivla.lora.targets=[\"qkv\"]"]).expect_err("bad target");
    assert!(err.to_string().contains("qkv"), "{err}");
    // [minivla] on a `tiny` policy.
    let tiny = repo().join("models/policy-tiny");
    let cfg = config(&tiny, &["arm=\"sparse\""]).expect("config");
    let err = Trainer::create(cfg, &tmp.path().join("tiny")).expect_err("minivla on tiny");
    assert!(err.to_string().contains("[minivla]"), "{err}");
}

/// The shipped small MiniVLA (models/minivla-small, trained by `wmrl sft
/// --minivla small` on task 9) takes one `sparse` GRPO step on the
/// embedded simulator under the one-task bench's own settings, scaled to
/// one group of 4: its rollouts succeed on some episodes (it is a trained
/// policy, not random weights), the group with mixed outcomes is updated,
/// and its one AdamW step at the sampling parameters clips nothing (the
/// recomputed log-probabilities equal the sampled ones). `sparse` reads no
/// world model, so this runs without ONNX Runtime too.
#[test]
fn the_shipped_small_minivla_takes_a_sparse_grpo_step_on_the_embedded_simulator() {
    let sets: Vec<String> = [
        "steps=1",
        "seed=1",
        "rollout.n_groups=1",
        "rollout.group_size=4",
        "rollout.max_steps=220",
        "update.minibatch=100000",
        "eval.every=0",
        "eval.at_start=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "policy={:?}",
        repo().join("models/minivla-small").display().to_string()
    )])
    .collect();
    let cfg = TrainConfig::load_with(&repo().join("configs/bench_minivla_one_task.toml"), &sets)
        .expect("config");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut t = Trainer::create(cfg, &tmp.path().join("run")).expect("create");
    assert_eq!(t.policy().kind(), "minivla");
    let s = t.train_step().expect("step 0");
    assert!(
        s.batch_success > 0.0 && s.batch_success < 1.0,
        "mixed outcomes expected from the trained model: {s:?}"
    );
    assert!(s.samples_updated > 0, "{s:?}");
    assert!(s.grad_norm > 0.0 && s.grad_norm.is_finite(), "{s:?}");
    assert_eq!(s.clip_frac, 0.0, "{s:?}");
}
