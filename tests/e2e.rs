//! End to end across crates: the embedded simulator, a tiny candle policy, an
//! ONNX world model through ONNX Runtime, and the correction loop. A tiny run
//! of every arm checks that the ledger and metrics agree with what the arm is
//! allowed to see; an interrupted run resumes to the same result.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use wmrl_core::Arm;
use wmrl_policy::{Policy, PolicyConfig};
use wmrl_run::read_all;
use wmrl_train::metrics::{RefitRecord, StepMetrics};
use wmrl_train::rollout::Keep;
use wmrl_train::{TrainConfig, Trainer};
use wmrl_worldmodel::{NetConfig, ProgressNet, export_onnx};

/// Collect with each chunk's head inputs kept.
const KEEP_FEATURES: Keep = Keep {
    features: true,
    wrist: false,
};

const IMAGE: u32 = 64;

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

fn config(arm: Arm, policy: &Path, wm: &Path, steps: usize) -> TrainConfig {
    let mut c = TrainConfig {
        arm,
        seed: 3,
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
    c.eval.tasks = vec![0, 2];
    c.eval.in_domain = false;
    c
}

fn runtime_or_skip() -> bool {
    if wmrl_onnx::runtime_available() {
        return true;
    }
    eprintln!("SKIP: ONNX Runtime library not found; run scripts/setup");
    false
}

#[test]
fn every_arm_keeps_a_consistent_ledger() {
    if !runtime_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (policy, wm) = fixtures(tmp.path());
    for arm in Arm::ALL {
        let dir = tmp.path().join(arm.name());
        let mut t = Trainer::create(config(arm, &policy, &wm, 2), &dir).expect("create");
        let s = t.run(|_| {}).expect("run");
        let ms: Vec<StepMetrics> = read_all(&dir.join("metrics.jsonl")).expect("metrics");
        assert_eq!(ms.len(), 2, "{arm:?}");
        let per_step = match arm {
            Arm::Sparse | Arm::SparseShuffled => 4,
            Arm::DenseRaw => 0,
            _ => 2, // one anchor group of two rollouts
        };
        for m in &ms {
            assert_eq!(m.labels_used, per_step, "{arm:?} step {}", m.step);
        }
        assert_eq!(s.ledger.labels, 2 * per_step as u64, "{arm:?}");
        assert_eq!(ms[1].labels_cumulative, s.ledger.labels);
        assert_eq!(s.ledger.real_executions, 8, "{arm:?}");
        assert!(
            s.ledger.sim_steps >= 8 && s.ledger.sim_steps <= 8 * 16,
            "{arm:?}"
        );
        let wm_rollouts = if arm.uses_world_model() { 8 } else { 0 };
        assert_eq!(s.ledger.wm_rollouts, wm_rollouts, "{arm:?}");
        assert_eq!(s.heldout.episodes, 2);
        assert!(dir.join("summary.json").exists() && dir.join("checkpoint/state.json").exists());
        if !arm.uses_real() {
            assert!(ms.iter().all(|m| m.anchor_groups == 0));
        }
    }
}

#[test]
fn flat_groups_leave_the_update_and_curves_are_recorded() {
    if !runtime_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (policy, wm) = fixtures(tmp.path());
    // An untrained policy in 16-step episodes never succeeds: every sparse
    // group is flat (all zero advantages).
    for skip in [true, false] {
        let dir = tmp.path().join(format!("skip{skip}"));
        let mut c = config(Arm::Sparse, &policy, &wm, 2);
        c.update.skip_flat_groups = skip;
        c.eval.every = 1;
        c.eval.curve_init_states = Some([17, 17]);
        let mut t = Trainer::create(c, &dir).expect("create");
        t.run(|_| {}).expect("run");
        let ms: Vec<StepMetrics> = read_all(&dir.join("metrics.jsonl")).expect("metrics");
        for m in &ms {
            assert_eq!(m.batch_success, 0.0);
            assert_eq!(m.flat_groups, 2, "both groups carry no signal");
            if skip {
                assert_eq!(m.samples_updated, 0, "flat groups are not in the batch");
            } else {
                assert!(m.samples_updated > 0);
            }
        }
        let ev: Vec<wmrl_train::metrics::EvalRecord> =
            read_all(&dir.join("eval.jsonl")).expect("eval");
        let curve: Vec<usize> = ev
            .iter()
            .filter(|e| e.split == "curve")
            .map(|e| e.step)
            .collect();
        assert_eq!(curve, vec![0, 1, 2], "start, then every step");
        assert!(ev.iter().any(|e| e.split == "heldout" && e.episodes == 2));
    }
}

#[test]
fn resume_continues_to_the_same_result() {
    if !runtime_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (policy, wm) = fixtures(tmp.path());
    let whole = tmp.path().join("whole");
    let mut a = Trainer::create(config(Arm::Wmrl, &policy, &wm, 3), &whole).expect("create");
    a.run(|_| {}).expect("run");

    let cut = tmp.path().join("cut");
    let mut b = Trainer::create(config(Arm::Wmrl, &policy, &wm, 3), &cut).expect("create");
    b.train_step().expect("step 0");
    b.train_step().expect("step 1");
    b.checkpoint().expect("checkpoint");
    // Work after the checkpoint that an interrupt would lose.
    b.train_step().expect("lost step");
    drop(b);
    // run.toml is the one source of truth: an edit to the method's
    // settings after the checkpoint is refused, not mixed in.
    let cfg_path = cut.join("run.toml");
    let original = std::fs::read_to_string(&cfg_path).expect("config");
    let mut edited = TrainConfig::load(&cfg_path).expect("load");
    edited.wmrl.anchors.fraction = wmrl_core::AnchorFraction::new(0.25).expect("valid");
    std::fs::write(&cfg_path, edited.to_toml().expect("toml")).expect("edit");
    let Err(err) = Trainer::resume(&cut) else {
        panic!("edited settings are refused");
    };
    assert!(err.to_string().contains("differs"), "{err}");
    std::fs::write(&cfg_path, original).expect("restore");
    let mut b = Trainer::resume(&cut).expect("resume");
    assert_eq!(b.steps_done(), 2);
    b.run(|_| {}).expect("finish");

    let ma: Vec<StepMetrics> = read_all(&whole.join("metrics.jsonl")).expect("a");
    let mb: Vec<StepMetrics> = read_all(&cut.join("metrics.jsonl")).expect("b");
    assert_eq!(ma.len(), 3);
    assert_eq!(mb.len(), 3, "the lost step's line is dropped on resume");
    for (x, y) in ma.iter().zip(&mb) {
        assert_eq!(x.batch_success, y.batch_success);
        assert_eq!(x.labels_cumulative, y.labels_cumulative);
        assert_eq!(x.loss, y.loss, "step {}", x.step);
        assert_eq!(x.anchor_weight, y.anchor_weight);
    }
    let wa = std::fs::read(
        whole
            .join("checkpoint/policy")
            .join(wmrl_policy::WEIGHTS_FILE),
    )
    .expect("wa");
    let wb = std::fs::read(
        cut.join("checkpoint/policy")
            .join(wmrl_policy::WEIGHTS_FILE),
    )
    .expect("wb");
    assert!(wa == wb, "final weights differ after resume");
}

/// A world model as `wmrl wm train` leaves it: candle weights and
/// run.toml beside model.onnx (what a refit fine-tunes).
fn refittable_world_model(dir: &Path) -> PathBuf {
    let net = NetConfig {
        height: IMAGE as usize,
        width: IMAGE as usize,
        pool: 4,
        channels: vec![8, 8],
        hidden: 16,
        text_dim: 8,
        ..NetConfig::default()
    };
    let (pn, varmap) = ProgressNet::init(net.clone(), &Device::Cpu, 11).expect("net");
    let trained = wmrl_worldmodel::train::Trained {
        net: pn,
        varmap,
        config: wmrl_worldmodel::train::TrainConfig {
            net: net.clone(),
            ..Default::default()
        },
        history: Vec::new(),
    };
    let wdir = dir.join("wm_dir");
    wmrl_worldmodel::train::save(&wdir, &trained, &Default::default()).expect("save");
    let onnx = wdir.join(wmrl_worldmodel::train::ONNX_FILE);
    export_onnx(&net, &trained.varmap, &onnx, &[]).expect("export");
    onnx
}

/// A step's metrics without its timings (wall and CPU seconds vary from
/// run to run; everything else must not).
fn without_seconds(mut m: StepMetrics) -> StepMetrics {
    m.wall_seconds = 0.0;
    let l = &mut m.ledger;
    for x in [
        &mut l.real_seconds,
        &mut l.real_cpu_seconds,
        &mut l.wm_seconds,
        &mut l.wm_cpu_seconds,
        &mut l.policy_seconds,
        &mut l.policy_cpu_seconds,
        &mut l.update_seconds,
        &mut l.update_cpu_seconds,
        &mut l.eval_seconds,
        &mut l.eval_cpu_seconds,
    ] {
        *x = 0.0;
    }
    m
}

fn refits_of(dir: &Path) -> Vec<RefitRecord> {
    read_all::<RefitRecord>(&wmrl_run::RunDir::new(dir).refits())
        .expect("refits")
        .into_iter()
        .map(|mut r| {
            (r.fit_seconds, r.fit_cpu_seconds) = (0.0, 0.0);
            r
        })
        .collect()
}

#[test]
fn world_model_refits_are_installed_charged_and_resume_exactly() {
    if !runtime_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (policy, onnx_only) = fixtures(tmp.path());
    let wm = refittable_world_model(tmp.path());
    let refit_config = |wm: &Path| {
        let mut c = config(Arm::Wmrl, &policy, wm, 3);
        c.wmrl.refit.every = 1;
        c.wmrl.refit.holdout_groups = 1;
        // The untrained policy never succeeds, so no held-out pair can
        // judge a candidate: without the gate every one goes in.
        c.wmrl.refit.gate = false;
        c.world_model.refit.steps = 4;
        c.world_model.refit.batch_size = 2;
        c
    };
    // A model without its candle weights cannot be refitted.
    let Err(err) = Trainer::create(refit_config(&onnx_only), &tmp.path().join("no")) else {
        panic!("an ONNX-only world model is refused when refits are on");
    };
    let msg = err.to_string();
    assert!(
        msg.contains("world_model.path") && msg.contains("model.safetensors"),
        "{msg}"
    );

    let whole = tmp.path().join("whole");
    let mut a = Trainer::create(refit_config(&wm), &whole).expect("create");
    let s = a.run(|_| {}).expect("run");
    // One anchor group of two per step, the newest held out: after step 1
    // nothing is left to fit on; after steps 2 and 3, a refit each.
    let refits = refits_of(&whole);
    assert_eq!(
        refits
            .iter()
            .map(|r| (r.decision.step, r.training_groups))
            .collect::<Vec<_>>(),
        [(2, 1), (3, 2)]
    );
    assert!(
        refits
            .iter()
            .all(|r| r.decision.accepted && r.held_out_rollouts == 2)
    );
    assert!(whole.join("wm/refit_00003/model.onnx").exists());
    let state = std::fs::read_to_string(whole.join("checkpoint/state.json")).expect("state");
    assert!(
        state.contains("wm/refit_00003/model.onnx"),
        "the checkpoint names the model in use"
    );
    // Charged: a scoring call per step, and per refit the fit (one entry)
    // and the held-out rollouts' scoring.
    assert_eq!(s.ledger.wm_calls, 3 + 2 * 2);
    assert_eq!(s.ledger.wm_rollouts, 3 * 4 + 2 * 2);
    let fit: f64 = read_all::<RefitRecord>(&wmrl_run::RunDir::new(&whole).refits())
        .expect("refits")
        .iter()
        .map(|r| r.fit_seconds)
        .sum();
    assert!(fit > 0.0 && s.ledger.wm_seconds >= fit);
    // The refit after two steps changes the scores of the third step's
    // rollouts, which are those of a run without refits (the update of the
    // second step used that step's scores, taken before the refit).
    let ma: Vec<StepMetrics> = read_all(&whole.join("metrics.jsonl")).expect("a");
    let plain = tmp.path().join("plain");
    let mut c = refit_config(&wm);
    c.wmrl.refit.every = 0;
    Trainer::create(c, &plain)
        .expect("create")
        .run(|_| {})
        .expect("run");
    let mp: Vec<StepMetrics> = read_all(&plain.join("metrics.jsonl")).expect("plain");
    assert_eq!(mp[2].batch_success, ma[2].batch_success);
    assert_eq!(mp[1].wm_score_mean, ma[1].wm_score_mean);
    let (x, y) = (
        mp[2].wm_score_mean.expect("x"),
        ma[2].wm_score_mean.expect("y"),
    );
    assert!(
        (x - y).abs() > 1e-6,
        "the refitted model scores as before: {x} {y}"
    );

    let cut = tmp.path().join("cut");
    let mut b = Trainer::create(refit_config(&wm), &cut).expect("create");
    b.train_step().expect("step 0");
    b.train_step().expect("step 1");
    b.checkpoint().expect("checkpoint");
    // Work after the checkpoint that an interrupt would lose (a refit too).
    b.train_step().expect("lost step");
    drop(b);
    let mut b = Trainer::resume(&cut).expect("resume");
    assert_eq!(b.steps_done(), 2);
    b.run(|_| {}).expect("finish");
    let mb: Vec<StepMetrics> = read_all(&cut.join("metrics.jsonl")).expect("b");
    assert_eq!(ma.len(), 3);
    assert_eq!(
        ma.into_iter().map(without_seconds).collect::<Vec<_>>(),
        mb.into_iter().map(without_seconds).collect::<Vec<_>>()
    );
    assert_eq!(refits_of(&whole), refits_of(&cut));
    let weights = |d: &Path| {
        std::fs::read(d.join("checkpoint/policy").join(wmrl_policy::WEIGHTS_FILE)).expect("w")
    };
    assert!(
        weights(&whole) == weights(&cut),
        "final weights differ after resume"
    );
}

#[test]
fn missing_inputs_name_the_path() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cfg = config(
        Arm::Sparse,
        &tmp.path().join("nope"),
        &tmp.path().join("nowm.onnx"),
        1,
    );
    let err = Trainer::create(cfg, &tmp.path().join("run")).expect_err("missing policy");
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn trainable_prefixes_freeze_the_rest_and_parts_are_diagnosed() {
    if !runtime_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (policy, wm) = fixtures(tmp.path());
    let start = Policy::load(&policy).expect("start");

    let mut bad = config(Arm::DenseRaw, &policy, &wm, 1);
    bad.update.trainable = vec!["lm.nothing".into()];
    let Err(err) = Trainer::create(bad, &tmp.path().join("bad")) else {
        panic!("a prefix that matches nothing is rejected");
    };
    assert!(err.to_string().contains("lm.nothing"), "{err}");

    // The untrained world model's scores differ within a group, so the
    // dense arm's advantages are not flat and the update moves something.
    let dir = tmp.path().join("head");
    let mut c = config(Arm::DenseRaw, &policy, &wm, 1);
    c.update.trainable = vec!["lm.head".into()];
    c.update.measure_grad_snr = true;
    c.update.optim.lr = 1e-2;
    let mut t = Trainer::create(c, &dir).expect("create");
    t.run(|_| {}).expect("run");
    let ms: Vec<StepMetrics> = read_all(&dir.join("metrics.jsonl")).expect("metrics");
    assert!(ms[0].samples_updated > 0);
    let parts: Vec<&str> = ms[0]
        .grad_half_cosine_parts
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(parts, vec!["lm.head"], "only trained parts are diagnosed");
    let after = Policy::load(&dir.join("checkpoint/policy")).expect("after");
    let mut moved = Vec::new();
    for (name, var) in start.vars() {
        let b = &after.vars()[name];
        let d = (var.as_tensor() - b.as_tensor())
            .and_then(|d| d.abs())
            .and_then(|d| d.max_all())
            .and_then(|d| d.to_scalar::<f32>())
            .expect("diff");
        if d > 0.0 {
            moved.push(name.clone());
        }
    }
    assert!(!moved.is_empty(), "the head was trained");
    assert!(
        moved.iter().all(|n| n.starts_with("lm.head")),
        "frozen parameters moved: {moved:?}"
    );
}

/// The same environment, rendering at every step whatever the caller asks.
struct AlwaysObserve(Box<dyn wmrl_env::VecEnv>);

impl wmrl_env::VecEnv for AlwaysObserve {
    fn spec(&self) -> &wmrl_env::EnvSpec {
        self.0.spec()
    }
    fn num_envs(&self) -> usize {
        self.0.num_envs()
    }
    fn reset(
        &mut self,
        r: &[(usize, wmrl_env::ResetRequest)],
    ) -> wmrl_env::Result<Vec<wmrl_env::Observation>> {
        self.0.reset(r)
    }
    fn step(
        &mut self,
        a: &[(usize, wmrl_env::Action)],
    ) -> wmrl_env::Result<Vec<wmrl_env::StepResult>> {
        self.0.step(a)
    }
}

#[test]
fn skipping_frames_between_policy_calls_changes_no_rollout_or_evaluation() {
    // Rollouts and evaluation ask the simulator for frames only at a
    // chunk's last step; against an environment that renders every step
    // they must produce the same samples, frames and outcomes. The step
    // limits (13 and 11) are not multiples of the chunk, so a slot's last
    // step by the caller's cap falls inside a chunk.
    let mut pc = PolicyConfig::tiny();
    pc.proprio_dim = wmrl_sim::PROPRIO_DIM;
    pc.n_layers = 1;
    assert!(pc.chunk > 1, "the test needs chunks of several actions");
    let policy = Policy::new(pc, &Device::Cpu, DType::F32).expect("policy");
    let sim = wmrl_sim::SimConfig {
        image_size: IMAGE,
        max_steps: 20,
        ..wmrl_sim::SimConfig::default()
    };
    let make = || wmrl_sim::make_vec_env(&sim, 3, None).expect("venv");
    let specs: Vec<wmrl_train::rollout::EpisodeSpec> = (0..5)
        .map(|i| wmrl_train::rollout::EpisodeSpec {
            group: i / 2,
            task: [0, 2, 5][i % 3],
            init_state: i,
            seed: 40 + i as u64,
        })
        .collect();
    for limit in [0, 13] {
        let (fast, _) = wmrl_train::rollout::collect(
            &policy,
            &mut make(),
            &specs,
            1.0,
            limit,
            7,
            Keep::default(),
        )
        .expect("collect");
        let mut slow_env = AlwaysObserve(Box::new(make()));
        let (slow, _) = wmrl_train::rollout::collect(
            &policy,
            &mut slow_env,
            &specs,
            1.0,
            limit,
            7,
            Keep::default(),
        )
        .expect("collect");
        assert_eq!(fast.len(), slow.len());
        for (a, b) in fast.iter().zip(&slow) {
            assert_eq!((a.success, a.steps), (b.success, b.steps), "limit {limit}");
            assert_eq!(a.frames, b.frames, "limit {limit}: world-model frames");
            assert_eq!(a.chunks.len(), b.chunks.len());
            for (x, y) in a.chunks.iter().zip(&b.chunks) {
                assert_eq!(x.tokens, y.tokens);
                assert_eq!(x.logprobs, y.logprobs);
                assert_eq!(x.mask, y.mask);
                assert_eq!(x.input.frames, y.input.frames);
                assert!(!x.input.frames.is_empty(), "every policy call sees frames");
            }
        }
    }
    let cfg = wmrl_policy::EvalConfig {
        tasks: vec![1, 3],
        init_states: vec![0, 1, 2],
        temperature: 1.0,
        seed: 5,
        max_steps: 11,
        ..wmrl_policy::EvalConfig::default()
    };
    let fast = wmrl_policy::evaluate(&policy, &mut make(), &cfg).expect("eval");
    let slow =
        wmrl_policy::evaluate(&policy, &mut AlwaysObserve(Box::new(make())), &cfg).expect("eval");
    assert_eq!(fast.episodes, slow.episodes);
    assert_eq!(fast.policy_calls, slow.policy_calls);
    assert_eq!(fast.env_steps, slow.env_steps);
}

/// The simulator with one worker death: at the `at`-th step call, slot 0's
/// episode restarts from its reset (as the bridge pool does when a worker
/// dies) and the restart is reported.
struct DiesOnce {
    inner: Box<dyn wmrl_env::VecEnv>,
    at: usize,
    calls: usize,
    resets: Vec<Option<wmrl_env::ResetRequest>>,
    restarts: Vec<wmrl_env::SlotRestart>,
}

impl DiesOnce {
    fn new(inner: Box<dyn wmrl_env::VecEnv>, at: usize) -> Self {
        let slots = inner.num_envs();
        Self {
            inner,
            at,
            calls: 0,
            resets: vec![None; slots],
            restarts: Vec::new(),
        }
    }
}

impl wmrl_env::VecEnv for DiesOnce {
    fn spec(&self) -> &wmrl_env::EnvSpec {
        self.inner.spec()
    }
    fn num_envs(&self) -> usize {
        self.inner.num_envs()
    }
    fn reset(
        &mut self,
        r: &[(usize, wmrl_env::ResetRequest)],
    ) -> wmrl_env::Result<Vec<wmrl_env::Observation>> {
        for (slot, req) in r {
            self.resets[*slot] = Some(*req);
        }
        self.inner.reset(r)
    }
    fn step(
        &mut self,
        a: &[(usize, wmrl_env::Action)],
    ) -> wmrl_env::Result<Vec<wmrl_env::StepResult>> {
        self.calls += 1;
        let mut out = self.inner.step(a)?;
        if self.calls == self.at
            && let Some(i) = a.iter().position(|(slot, _)| *slot == 0)
            && !(out[i].done || out[i].truncated)
        {
            let request = self.resets[0].expect("slot 0 was reset");
            let obs = self.inner.reset(&[(0, request)])?.remove(0);
            out[i] = wmrl_env::StepResult {
                obs,
                reward: 0.0,
                success: false,
                done: false,
                truncated: false,
            };
            self.restarts.push(wmrl_env::SlotRestart {
                slot: 0,
                request,
                steps_lost: self.at as u64,
                reason: "test: worker killed".into(),
            });
        }
        Ok(out)
    }
    fn take_restarts(&mut self) -> Vec<wmrl_env::SlotRestart> {
        std::mem::take(&mut self.restarts)
    }
}

/// An untrained one-layer tiny policy for the simulator, and a simulator
/// config whose episodes end at `max_steps`.
fn one_layer_policy_and_sim(max_steps: usize) -> (Policy, wmrl_sim::SimConfig) {
    let mut pc = PolicyConfig::tiny();
    pc.proprio_dim = wmrl_sim::PROPRIO_DIM;
    pc.n_layers = 1;
    let policy = Policy::new(pc, &Device::Cpu, DType::F32).expect("policy");
    let sim = wmrl_sim::SimConfig {
        image_size: IMAGE,
        max_steps,
        ..wmrl_sim::SimConfig::default()
    };
    (policy, sim)
}

#[test]
fn evaluation_reruns_an_episode_whose_worker_died_and_counts_it_once() {
    let (policy, sim) = one_layer_policy_and_sim(24);
    let make = || wmrl_sim::make_vec_env(&sim, 2, None).expect("venv");
    let cfg = wmrl_policy::EvalConfig {
        tasks: vec![0, 4],
        init_states: vec![0, 1],
        temperature: 0.0,
        ..wmrl_policy::EvalConfig::default()
    };
    let clean = wmrl_policy::evaluate(&policy, &mut make(), &cfg).expect("eval");
    let mut env = DiesOnce::new(Box::new(make()), 5);
    let faulty = wmrl_policy::evaluate(&policy, &mut env, &cfg).expect("eval");
    assert_eq!(faulty.restarts, 1);
    assert_eq!(clean.restarts, 0);
    // Every (task, state) once, each a whole episode from its reset.
    let key = |r: &wmrl_policy::EvalReport| {
        let mut k: Vec<(usize, usize, usize)> = r
            .episodes
            .iter()
            .map(|e| (e.task, e.init_state, e.steps))
            .collect();
        k.sort();
        k
    };
    assert_eq!(key(&faulty), key(&clean));
    assert!(
        wmrl_env::VecEnv::take_restarts(&mut env).is_empty(),
        "evaluation drained the restart"
    );
    assert_eq!(
        faulty.env_steps,
        clean.env_steps + 5,
        "the voided attempt's steps are counted as taken"
    );
}

#[test]
fn a_rollout_whose_worker_died_is_rerun_whole_and_marked() {
    // The same shared runner as evaluation: the episode of slot 0 restarts
    // from its reset at the 5th step call; what it had collected is void, so
    // (greedy) it ends exactly as the clean run's, with `restarts` 1.
    let (policy, sim) = one_layer_policy_and_sim(24);
    let make = || wmrl_sim::make_vec_env(&sim, 2, None).expect("venv");
    let specs: Vec<wmrl_train::rollout::EpisodeSpec> = (0..3)
        .map(|i| wmrl_train::rollout::EpisodeSpec {
            group: 0,
            task: [0, 4, 2][i],
            init_state: i,
            seed: 9 + i as u64,
        })
        .collect();
    let (clean, _) =
        wmrl_train::rollout::collect(&policy, &mut make(), &specs, 0.0, 0, 3, KEEP_FEATURES)
            .expect("collect");
    let mut env = DiesOnce::new(Box::new(make()), 5);
    let (faulty, _) =
        wmrl_train::rollout::collect(&policy, &mut env, &specs, 0.0, 0, 3, KEEP_FEATURES)
            .expect("collect");
    assert_eq!(
        faulty.iter().map(|r| r.restarts).collect::<Vec<_>>(),
        vec![1, 0, 0]
    );
    for (a, b) in clean.iter().zip(&faulty) {
        assert_eq!((a.success, a.steps), (b.success, b.steps));
        assert_eq!(a.frames, b.frames);
        assert_eq!(a.progress, b.progress);
        assert_eq!(a.chunks.len(), b.chunks.len());
        for (x, y) in a.chunks.iter().zip(&b.chunks) {
            assert_eq!((&x.tokens, &x.mask), (&y.tokens, &y.mask));
            assert_eq!(x.features, y.features);
        }
    }
    assert!(
        wmrl_env::VecEnv::take_restarts(&mut env).is_empty(),
        "the rollouts drained the restart"
    );
}

#[test]
fn flat_groups_are_redrawn_charged_and_the_recipe_resumes_exactly() {
    if !runtime_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (_, wm) = fixtures(tmp.path());
    // The shipped SFT policy on task 4, which it solves about half the
    // time: some groups are flat (all solved or all failed), some carry a
    // signal. The field's recipe keys (issue 41): dynamic sampling,
    // clip-higher, no KL, a hot rollout temperature, two passes.
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/policy-tiny");
    let recipe = |redraw_rounds: usize| {
        let mut c = config(Arm::Sparse, &shipped, &wm, 3);
        c.env.sim.image_size = 128;
        c.env.sim.max_steps = 160;
        c.rollout.tasks = vec![4];
        c.rollout.redraw_rounds = redraw_rounds;
        c.rollout.temperature = 0.7;
        c.update.loss.clip_high = 0.28;
        c.update.loss.kl_beta = 0.0;
        c.update.inner_epochs = 2;
        c.eval.tasks = vec![4];
        c
    };
    let whole = tmp.path().join("whole");
    let s = Trainer::create(recipe(3), &whole)
        .expect("create")
        .run(|_| {})
        .expect("run");
    let ma: Vec<StepMetrics> = read_all(&whole.join("metrics.jsonl")).expect("a");
    assert_eq!(ma.len(), 3);
    let redrawn: usize = ma.iter().map(|m| m.redrawn_groups).sum();
    assert!(redrawn > 0, "no flat group was drawn again");
    for m in &ma {
        // Each round redraws what is still flat: at most two groups thrice.
        assert!(m.redrawn_groups <= 6, "{}", m.redrawn_groups);
        assert_eq!(
            m.labels_used,
            2 * (2 + m.redrawn_groups),
            "the dropped groups' labels are paid for"
        );
    }
    // Every rollout drawn, the dropped ones included, is a real execution
    // in the ledger.
    assert_eq!(s.ledger.redrawn_groups, redrawn as u64);
    assert_eq!(s.ledger.real_executions, 2 * (6 + redrawn as u64));
    assert_eq!(s.ledger.labels, s.ledger.real_executions);
    assert!(
        ma.iter().any(|m| m.samples_updated > 0),
        "nothing was learnt"
    );

    let weights = |d: &Path| {
        std::fs::read(d.join("checkpoint/policy").join(wmrl_policy::WEIGHTS_FILE)).expect("w")
    };
    // Off, the same seed draws the same first groups and keeps them: the
    // update sees other rollouts, and nothing is counted as redrawn.
    let plain = tmp.path().join("plain");
    let p = Trainer::create(recipe(0), &plain)
        .expect("create")
        .run(|_| {})
        .expect("run");
    assert_eq!((p.ledger.redrawn_groups, p.ledger.real_executions), (0, 12));
    let mp: Vec<StepMetrics> = read_all(&plain.join("metrics.jsonl")).expect("plain");
    assert!(
        mp.iter()
            .all(|m| m.redrawn_groups == 0 && m.labels_used == 4)
    );
    assert!(
        weights(&plain) != weights(&whole),
        "the redrawn rollouts were not used"
    );
    let toml = std::fs::read_to_string(plain.join("run.toml")).expect("config");
    assert!(!toml.contains("redraw_rounds"), "off is not written");
    // Every other arm is refused: they do not label every group.
    let mut c = recipe(2);
    c.arm = Arm::Wmrl;
    let Err(err) = Trainer::create(c, &tmp.path().join("wmrl")) else {
        panic!("redrawing in an arm that labels a fraction of groups");
    };
    assert!(err.to_string().contains("rollout.redraw_rounds"), "{err}");

    let cut = tmp.path().join("cut");
    let mut b = Trainer::create(recipe(3), &cut).expect("create");
    b.train_step().expect("step 0");
    b.train_step().expect("step 1");
    b.checkpoint().expect("checkpoint");
    b.train_step().expect("lost step");
    drop(b);
    let mut b = Trainer::resume(&cut).expect("resume");
    assert_eq!(b.steps_done(), 2);
    let sb = b.run(|_| {}).expect("finish");
    let mb: Vec<StepMetrics> = read_all(&cut.join("metrics.jsonl")).expect("b");
    assert_eq!(
        ma.into_iter().map(without_seconds).collect::<Vec<_>>(),
        mb.into_iter().map(without_seconds).collect::<Vec<_>>()
    );
    assert_eq!(sb.ledger.real_executions, s.ledger.real_executions);
    assert!(
        weights(&whole) == weights(&cut),
        "final weights differ after resume"
    );
}
