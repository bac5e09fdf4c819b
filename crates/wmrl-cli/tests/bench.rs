//! `wmrl bench` end to end on a tiny policy: every `(arm, seed)` run in its
//! own directory next to the shared start's one evaluation, progress
//! counted in training steps across the runs, a report with arms paired by
//! seed; started again, it redoes only the run that is missing and leaves
//! the finished ones as they are.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{DType, Device};
use wmrl_core::Arm;
use wmrl_policy::{Policy, PolicyConfig};
use wmrl_train::TrainConfig;

fn config(dir: &Path) -> PathBuf {
    let mut pc = PolicyConfig::tiny();
    pc.proprio_dim = wmrl_sim::PROPRIO_DIM;
    pc.n_layers = 1;
    let policy = Policy::new(pc, &Device::Cpu, DType::F32).unwrap();
    let pdir = dir.join("sft");
    policy.save(&pdir).unwrap();
    let mut c = TrainConfig {
        arm: Arm::Sparse,
        steps: 1,
        policy: pdir,
        ..TrainConfig::default()
    };
    c.env.num_envs = 4;
    c.env.sim.image_size = 64;
    c.env.sim.max_steps = 8;
    c.rollout.n_groups = 2;
    c.rollout.group_size = 2;
    c.rollout.tasks = vec![0, 2];
    c.rollout.train_init_states = [0, 3];
    c.update.minibatch = 8;
    c.update.inner_epochs = 1;
    c.eval.init_states = [16, 17];
    c.eval.tasks = vec![0, 2];
    c.eval.in_domain = false;
    let path = dir.join("bench.toml");
    std::fs::write(&path, c.to_toml().unwrap()).unwrap();
    path
}

/// `wmrl bench` over two arms and two seeds; returns its stderr.
fn bench(cfg: &Path, out: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_wmrl"))
        .args(["bench", "--arms", "sparse,sparse_shuffled", "--seeds", "2"])
        .arg("--config")
        .arg(cfg)
        .arg("--out")
        .arg(out)
        .env("WMRL_PROGRESS_SECS", "0.2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    stderr
}

#[test]
fn a_bench_fans_out_reports_pairs_and_resumes_only_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path());
    let out = tmp.path().join("bench");
    let stderr = bench(&cfg, &out);
    // Progress counts the four runs' training steps (the start run has
    // none), not runs.
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("bench: ") && l.contains("/4 steps")),
        "{stderr}"
    );
    let run = |arm: &str, seed: u64| wmrl_run::RunDir::in_bench(&out, arm, seed);
    for arm in ["sparse", "sparse_shuffled"] {
        for seed in [0, 1] {
            assert!(run(arm, seed).summary().exists(), "{arm} seed {seed}");
        }
    }
    assert!(out.join("start").join("summary.json").exists());
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("## Paired differences (held-out, by seed)"),
        "{report}"
    );
    assert!(
        report.contains("| `sparse_shuffled` - `sparse` | 2 |"),
        "{report}"
    );

    // One run lost: only it is done again, to the same figures (one
    // compute thread per run), and the finished runs are left alone.
    let kept = std::fs::read(run("sparse", 1).summary()).unwrap();
    let kept_at = std::fs::metadata(run("sparse", 1).summary())
        .unwrap()
        .modified()
        .unwrap();
    let lost: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run("sparse_shuffled", 0).summary()).unwrap())
            .unwrap();
    std::fs::remove_dir_all(&run("sparse_shuffled", 0).dir).unwrap();
    let stderr = bench(&cfg, &out);
    assert!(
        !stderr.lines().any(|l| l.contains("/4 steps")),
        "only one run's step is left: {stderr}"
    );
    assert_eq!(std::fs::read(run("sparse", 1).summary()).unwrap(), kept);
    assert_eq!(
        std::fs::metadata(run("sparse", 1).summary())
            .unwrap()
            .modified()
            .unwrap(),
        kept_at
    );
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run("sparse_shuffled", 0).summary()).unwrap())
            .unwrap();
    assert_eq!(again["heldout"], lost["heldout"]);
    assert_eq!(again["seed"], lost["seed"]);
}
