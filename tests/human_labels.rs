//! Labels from people through the trainer (`labels.source = "human"`,
//! docs/labels.md), with a stand-in labeller that answers through the same
//! label files the page server writes: a waiting run gives the simulator
//! run's metrics when the labels agree, and a run that does not wait takes
//! late labels into the correction loop at the next step, once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use wmrl_core::Arm;
use wmrl_policy::{Policy, PolicyConfig};
use wmrl_run::read_all;
use wmrl_train::labels::queue::read_sim_flags;
use wmrl_train::labels::{LabelStore, Verdict};
use wmrl_train::metrics::StepMetrics;
use wmrl_train::{LabelSource, TrainConfig, Trainer};
use wmrl_worldmodel::{NetConfig, ProgressNet, export_onnx};

const IMAGE: u32 = 64;

/// A one-layer policy and an untrained ONNX world model.
fn fixtures(dir: &Path) -> (PathBuf, PathBuf) {
    let mut pc = PolicyConfig::tiny();
    pc.proprio_dim = wmrl_sim::PROPRIO_DIM;
    pc.n_layers = 1;
    let policy = Policy::new(pc, &Device::Cpu, DType::F32).expect("policy");
    let pdir = dir.join("sft");
    policy.save(&pdir).expect("save policy");
    let net = NetConfig {
        height: IMAGE as usize,
        width: IMAGE as usize,
        pool: 4,
        channels: vec![8, 8],
        hidden: 16,
        text_dim: 8,
        ..NetConfig::default()
    };
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    ProgressNet::new(net.clone(), vb).expect("net");
    let wm = dir.join("wm.onnx");
    export_onnx(&net, &varmap, &wm, &[]).expect("export");
    (pdir, wm)
}

fn config(policy: &Path, wm: &Path, steps: usize) -> TrainConfig {
    let mut c = TrainConfig {
        arm: Arm::Wmrl,
        seed: 5,
        steps,
        policy: policy.to_path_buf(),
        ..TrainConfig::default()
    };
    c.env.num_envs = 4;
    c.env.sim.image_size = IMAGE;
    c.env.sim.max_steps = 16;
    c.rollout.n_groups = 2;
    c.rollout.group_size = 2;
    c.rollout.tasks = vec![0, 2];
    c.rollout.train_init_states = [0, 3];
    c.update.minibatch = 8;
    c.update.inner_epochs = 1;
    c.world_model.path = wm.to_path_buf();
    c.wmrl.anchors.fraction = wmrl_core::AnchorFraction::new(0.5).expect("valid");
    c.wmrl.calibration.min_pairs = 2;
    c.wmrl.weight.warmup_groups = 1;
    c.eval.init_states = [16, 16];
    c.eval.tasks = vec![0];
    c.eval.in_domain = false;
    c.eval.at_start = false;
    c
}

fn human(mut c: TrainConfig, wait: bool) -> TrainConfig {
    c.labels.source = LabelSource::Human;
    c.labels.wait = wait;
    c.labels.poll_ms = 20;
    c
}

/// Label every queued rollout from the simulator's hidden flag, as a
/// person watching would; `true` when something was labelled.
fn label_all(run: &Path) -> bool {
    let store = LabelStore::new(run);
    let flags = read_sim_flags(run);
    let Ok(snap) = store.snapshot() else {
        return false;
    };
    let mut any = false;
    for q in snap.pending() {
        if let Some(f) = flags.iter().find(|f| f.id == q.id) {
            store
                .submit(&q.id, Verdict::from(f.success), "stand-in", 0.5)
                .expect("label");
            any = true;
        }
    }
    any
}

fn without_seconds(mut m: StepMetrics) -> StepMetrics {
    m.wall_seconds = 0.0;
    m.ledger = wmrl_core::Ledger {
        labels: m.ledger.labels,
        real_executions: m.ledger.real_executions,
        wm_rollouts: m.ledger.wm_rollouts,
        wm_calls: m.ledger.wm_calls,
        policy_samples: m.ledger.policy_samples,
        updates: m.ledger.updates,
        sim_steps: m.ledger.sim_steps,
        eval_episodes: m.ledger.eval_episodes,
        ..wmrl_core::Ledger::default()
    };
    m
}

#[test]
fn a_waiting_run_labelled_by_people_ends_as_the_simulator_run() {
    if !wmrl_onnx::runtime_available() {
        eprintln!("SKIP: ONNX Runtime library not found; run scripts/setup");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (policy, wm) = fixtures(tmp.path());
    let sim_dir = tmp.path().join("sim");
    let sim = Trainer::create(config(&policy, &wm, 3), &sim_dir)
        .expect("create")
        .run(|_| {})
        .expect("run");
    let run = tmp.path().join("human");
    let stop = Arc::new(AtomicBool::new(false));
    let labeller = {
        let (run, stop) = (run.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut given = 0;
            while !stop.load(Ordering::SeqCst) {
                given += usize::from(label_all(&run));
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            given
        })
    };
    let out = Trainer::create(human(config(&policy, &wm, 3), true), &run)
        .expect("create")
        .run(|_| {});
    stop.store(true, Ordering::SeqCst);
    let rounds = labeller.join().expect("labeller");
    let out = out.expect("human-label run");
    assert!(rounds >= 3, "the trainer waited for each step's labels");
    let a: Vec<StepMetrics> = read_all(&sim_dir.join("metrics.jsonl")).expect("sim");
    let b: Vec<StepMetrics> = read_all(&run.join("metrics.jsonl")).expect("human");
    assert_eq!(
        a.into_iter().map(without_seconds).collect::<Vec<_>>(),
        b.into_iter().map(without_seconds).collect::<Vec<_>>()
    );
    assert_eq!(sim.heldout, out.heldout);
    assert_eq!(out.ledger.labels, 6, "one anchor group of two per step");
    let consumed = std::fs::read_to_string(run.join("labels/consumed.jsonl")).expect("consumed");
    assert_eq!(consumed.lines().count(), 6);
    // The wrist camera's frames are queued beside the agent view's.
    let store = LabelStore::new(&run);
    let snap = store.snapshot().expect("snapshot");
    let q = &snap.queue[0];
    assert!(q.wrist && q.frames >= 2, "{q:?}");
    assert!(store.frames_path(&q.id, true).is_file());
    // A simulator-label run writes no label files.
    assert!(!sim_dir.join("labels").exists());
}

#[test]
fn a_run_that_does_not_wait_takes_late_labels_at_the_next_step_once() {
    if !wmrl_onnx::runtime_available() {
        eprintln!("SKIP: ONNX Runtime library not found; run scripts/setup");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (policy, wm) = fixtures(tmp.path());
    let run = tmp.path().join("run");
    let mut t = Trainer::create(human(config(&policy, &wm, 3), false), &run).expect("create");
    let m0 = t.train_step().expect("step 0");
    assert_eq!(
        (m0.labels_used, m0.labels_cumulative),
        (0, 0),
        "nobody labelled yet"
    );
    assert!(label_all(&run), "step 0's anchors were queued");
    let m1 = t.train_step().expect("step 1");
    assert_eq!(m1.labels_used, 0, "step 1's own anchors are not labelled");
    assert_eq!(m1.labels_cumulative, 2, "step 0's two labels, taken late");
    let m2 = t.train_step().expect("step 2");
    assert_eq!(m2.labels_cumulative, 2, "taken once");
    let consumed = std::fs::read_to_string(run.join("labels/consumed.jsonl")).expect("consumed");
    assert_eq!(consumed.lines().count(), 2);
    assert!(
        consumed.lines().all(|l| l.contains("\"step\":1")),
        "{consumed}"
    );
}
