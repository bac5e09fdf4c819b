#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The robot track's world-model refit on constructed anchor rollouts
//! (synthetic frames whose bright square moves right as a task progresses):
//! a refit fine-tunes, exports and reloads through ONNX Runtime with the
//! candle model's scores, changes the scores, is charged to the ledger and
//! recorded; the gate accepts a candidate that ranks the held-out anchors
//! better and refuses one fitted on misleading anchors.

use std::path::{Path, PathBuf};

use wmrl_core::refit::{RefitConfig, decide};
use wmrl_core::{AnchorGroup, Ledger};
use wmrl_run::read_all;
use wmrl_train::metrics::RefitRecord;
use wmrl_train::rollout::{EpisodeSpec, Rollout};
use wmrl_train::wm_refit::{RefitSetup, WmRefit};
use wmrl_worldmodel::finetune::{candle_scores, from_outcome};
use wmrl_worldmodel::train::{self, SplitRecord};
use wmrl_worldmodel::{
    FineTuneConfig, NetConfig, RolloutFrames, ScoreMode, WorldModel, WorldModelConfig, export_onnx,
    synthetic,
};

const SIZE: u32 = 16;
const GROUP: usize = 4;
const GROUPS: usize = 2;

fn net() -> NetConfig {
    NetConfig {
        num_frames: 8,
        instruction_len: 64,
        height: SIZE as usize,
        width: SIZE as usize,
        pool: 1,
        channels: vec![4, 8],
        hidden: 16,
        text_dim: 8,
    }
}

/// Member `i` of a group looks successful (the square reaches the right
/// edge) when `i` is even; it is labelled a success when it looks like one,
/// or the opposite with `mislabel`.
fn group(step: usize, g: usize, mislabel: bool) -> Vec<Rollout> {
    (0..GROUP)
        .map(|i| {
            let looks = i % 2 == 0;
            let task = (step + g) % 2;
            let n = 10 + (step + i) % 4;
            let top = if looks { 1.0 } else { 0.1 + 0.05 * i as f32 };
            let frames = (0..n)
                .map(|k| synthetic::frame(SIZE, task, top * k as f32 / (n - 1) as f32))
                .collect();
            Rollout {
                spec: EpisodeSpec {
                    group: g,
                    task,
                    init_state: 0,
                    seed: 0,
                },
                instruction: synthetic::TASKS[task].into(),
                chunks: Vec::new(),
                frames,
                wrist: Vec::new(),
                progress: Vec::new(),
                success: looks != mislabel,
                steps: n,
                restarts: 0,
            }
        })
        .collect()
}

/// A model directory as `wmrl wm train` leaves it, whose model ranks
/// backwards: trained on reversed outcomes.
fn backwards_model(dir: &Path) -> PathBuf {
    let eps: Vec<_> = (0..4)
        .flat_map(|s| group(s, 0, true))
        .filter_map(|r| from_outcome(&r.instruction, r.frames, r.success))
        .collect();
    let cfg = train::TrainConfig {
        net: net(),
        steps: 60,
        batch_size: 8,
        lr: 5e-3,
        eval_every: 1000,
        seed: 1,
        ..Default::default()
    };
    let backwards = train::train(
        &eps,
        &[],
        &cfg,
        &wmrl_policy::candle::Device::Cpu,
        &mut |_, _| {},
    )
    .unwrap();
    let out = dir.join("incumbent");
    train::save(&out, &backwards, &SplitRecord::default()).unwrap();
    let onnx = out.join(train::ONNX_FILE);
    export_onnx(&backwards.config.net, &backwards.varmap, &onnx, &[]).unwrap();
    onnx
}

/// The held-out groups as the correction loop hands them over: the scores
/// of the model in use and the real outcomes.
fn held_out(wm: &mut WorldModel, step: usize, groups: &[Vec<Rollout>]) -> Vec<AnchorGroup> {
    groups
        .iter()
        .enumerate()
        .map(|(g, rs)| {
            let frames: Vec<RolloutFrames<'_>> = rs
                .iter()
                .map(|r| RolloutFrames {
                    instruction: &r.instruction,
                    frames: r.frames.iter().collect(),
                })
                .collect();
            let scores = wm.score(&frames, ScoreMode::Potential).unwrap();
            AnchorGroup {
                step: step as u64,
                group: g,
                wm: scores.iter().map(|s| f64::from(s.score)).collect(),
                real: rs.iter().map(|r| f64::from(u8::from(r.success))).collect(),
            }
        })
        .collect()
}

fn keep_step(
    r: &mut WmRefit,
    step: usize,
    mislabel: bool,
    ledger: &mut Ledger,
) -> Vec<Vec<Rollout>> {
    let groups: Vec<Vec<Rollout>> = (0..GROUPS).map(|g| group(step, g, mislabel)).collect();
    let flat: Vec<Rollout> = groups.iter().flatten().cloned().collect();
    let real: Vec<Vec<Option<f64>>> = [1, 0]
        .iter()
        .map(|&g: &usize| {
            groups[g]
                .iter()
                .map(|m| Some(f64::from(u8::from(m.success))))
                .collect()
        })
        .collect();
    r.keep(step, &flat, &[1, 0], &real, ledger).unwrap();
    groups
}

#[test]
fn a_refit_is_exported_reloaded_judged_and_charged() {
    if !wmrl_onnx::runtime_available() {
        eprintln!("SKIP: ONNX Runtime library not found; run scripts/setup");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let incumbent = backwards_model(tmp.path());
    let run = tmp.path().join("run");
    let setup = RefitSetup {
        fit: FineTuneConfig {
            steps: 80,
            batch_size: 8,
            lr: 5e-3,
            max_rollouts: 2 * GROUPS * GROUP,
            ..FineTuneConfig::default()
        },
        runtime: WorldModelConfig::default(),
        mode: ScoreMode::Potential,
        seed: 5,
        n_groups: GROUPS,
        group_size: GROUP,
        holdout_groups: GROUPS,
    };
    let mut refit = WmRefit::open(setup.clone(), &run, &incumbent, 0).unwrap();
    let mut ledger = Ledger::default();
    for s in 0..2 {
        keep_step(&mut refit, s, false, &mut ledger);
    }
    let newest = keep_step(&mut refit, 2, false, &mut ledger);
    assert_eq!(refit.kept().count(), 3 * GROUPS * GROUP);
    let mut wm = WorldModel::load(&incumbent).unwrap();
    let held = held_out(&mut wm, 2, &newest);
    let gate = RefitConfig {
        every: 3,
        holdout_groups: GROUPS,
        min_pairs: 4,
        ..RefitConfig::default()
    };

    // 1. Fitted on the anchors the policy produced, the candidate ranks the
    // held-out groups right where the incumbent ranks them backwards.
    let before = ledger.clone();
    let cand = refit
        .candidate(3, &held, &mut ledger)
        .unwrap()
        .expect("fit");
    assert_eq!(cand.len(), GROUPS);
    assert!(cand.iter().all(|g| g.len() == GROUP));
    let moved = cand
        .iter()
        .flatten()
        .zip(held.iter().flat_map(|g| &g.wm))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(moved > 1e-2, "the refit changed no score ({moved})");
    // Exported and reloaded: ONNX Runtime scores what candle computes.
    let dir = run.join("wm/refit_00003");
    let (net, _, _) = train::load(&dir).unwrap();
    let frames: Vec<RolloutFrames<'_>> = newest
        .iter()
        .flatten()
        .map(|r| RolloutFrames {
            instruction: &r.instruction,
            frames: r.frames.iter().collect(),
        })
        .collect();
    let reference = candle_scores(&net, &frames, ScoreMode::Potential, 3).unwrap();
    for (a, b) in cand.iter().flatten().zip(&reference) {
        assert!(
            (a - f64::from(*b)).abs() < 1e-4,
            "onnx {a} against candle {b}"
        );
    }
    // Its cost: the fit and export (one entry) and the scoring of the
    // held-out rollouts, wall and CPU.
    assert_eq!(ledger.wm_calls, before.wm_calls + 2);
    assert_eq!(
        ledger.wm_rollouts,
        before.wm_rollouts + (GROUPS * GROUP) as u64
    );
    assert!(ledger.wm_seconds > before.wm_seconds);
    assert!(ledger.wm_cpu_seconds > before.wm_cpu_seconds);
    let d = decide(&gate, 3, &held, &cand).unwrap();
    assert!(d.accepted, "{d:?}");
    assert!(d.candidate > d.incumbent, "{d:?}");
    let installed = refit.done(&d).unwrap().expect("accepted: installed");
    assert_eq!(installed.path(), dir.join(train::ONNX_FILE));
    assert_eq!(refit.incumbent(), dir);

    // 2. Fitted on anchors labelled against what their frames show, the
    // next candidate ranks the held-out groups worse than the model it
    // would replace and is refused; the model in use stays.
    let mut wm = installed;
    for s in 3..5 {
        keep_step(&mut refit, s, true, &mut ledger);
    }
    let newest = keep_step(&mut refit, 5, false, &mut ledger);
    let held = held_out(&mut wm, 5, &newest);
    let cand = refit
        .candidate(6, &held, &mut ledger)
        .unwrap()
        .expect("fit");
    let d = decide(&gate, 6, &held, &cand).unwrap();
    assert!(!d.accepted, "{d:?}");
    assert!(d.candidate < d.incumbent, "{d:?}");
    assert!(refit.done(&d).unwrap().is_none());
    assert_eq!(refit.incumbent(), dir, "the incumbent stays");

    let lines: Vec<RefitRecord> = read_all(&wmrl_run::RunDir::new(&run).refits()).unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0].decision.accepted, lines[1].decision.accepted),
        (true, false)
    );
    assert_eq!(lines[0].model, "wm/refit_00003/model.onnx");
    assert_eq!(lines[0].training_rollouts, 2 * GROUPS * GROUP);
    assert_eq!(lines[0].training_groups, 2 * GROUPS);
    assert_eq!(lines[0].held_out_rollouts, GROUPS * GROUP);
    assert!(lines[0].decision.auroc_after > lines[0].decision.auroc_before);
    assert!(lines[0].fit_seconds > 0.0);

    // Read back for a resume after 6 steps: the same rollouts, in order,
    // at most what the fine-tune and the held-out groups need; the files of
    // the rollouts dropped from memory go once a checkpoint allows.
    let files = || {
        wmrl_env::list_episodes(&run.join(wmrl_train::wm_refit::ANCHORS_DIR))
            .unwrap()
            .len()
    };
    assert_eq!(
        files(),
        6 * GROUPS * GROUP,
        "each kept rollout written once"
    );
    // A resume after two steps reads back steps 0 and 1 only.
    let early = WmRefit::open(
        RefitSetup {
            fit: FineTuneConfig::default(),
            ..back_setup()
        },
        &run,
        &incumbent,
        2,
    )
    .unwrap();
    assert_eq!(
        early.kept().count(),
        2 * GROUPS * GROUP,
        "steps 0 and 1 only"
    );
    let back = WmRefit::open(setup.clone(), &run, &incumbent, 6).unwrap();
    refit.prune().unwrap();
    assert_eq!(files(), 3 * GROUPS * GROUP);
    let back_after_prune = WmRefit::open(setup, &run, &incumbent, 6).unwrap();
    assert!(
        back.kept()
            .zip(back_after_prune.kept())
            .all(|(a, b)| (a.step, a.group, a.member) == (b.step, b.group, b.member))
    );
    let keys = |r: &WmRefit| -> Vec<(u64, usize, usize, bool)> {
        r.kept()
            .map(|a| (a.step, a.group, a.member, a.success))
            .collect()
    };
    assert_eq!(keys(&back), keys(&refit));
    assert_eq!(back.kept().count(), 3 * GROUPS * GROUP, "capped");
    assert!(
        back.kept()
            .zip(refit.kept())
            .all(|(a, b)| a.frames == b.frames && a.instruction == b.instruction)
    );
}

fn back_setup() -> RefitSetup {
    RefitSetup {
        fit: FineTuneConfig::default(),
        runtime: WorldModelConfig::default(),
        mode: ScoreMode::Potential,
        seed: 5,
        n_groups: GROUPS,
        group_size: GROUP,
        holdout_groups: GROUPS,
    }
}

#[test]
fn a_model_without_candle_weights_cannot_be_refitted() {
    let tmp = tempfile::tempdir().unwrap();
    let onnx = tmp.path().join("only.onnx");
    std::fs::write(&onnx, b"not needed").unwrap();
    let err = WmRefit::open(back_setup(), tmp.path(), &onnx, 0).expect_err("no weights");
    let msg = err.to_string();
    assert!(msg.contains("world_model.path"), "{msg}");
    assert!(msg.contains("model.safetensors"), "{msg}");
}
