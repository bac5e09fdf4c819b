//! The real LIBERO server (envs/libero/server.py) through the pool, and
//! supervised LIBERO workers killed mid-step. Needs the venv from
//! scripts/setup.d/30-libero.sh; run by scripts/checks.d/30-libero.sh:
//! `cargo test -p wmrl-bridge --test libero -- --ignored`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use wmrl_bridge::{BridgePool, PoolConfig, PoolEvent, SupervisedPool, WorkerCommand, WorkerState};
use wmrl_env::{EnvError, Frame, ResetRequest, VecEnv};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn venv_python() -> PathBuf {
    let python = repo().join("envs/libero/.venv/bin/python");
    assert!(
        python.exists(),
        "run scripts/setup.d/30-libero.sh first ({} missing)",
        python.display()
    );
    python
}

fn spawn_libero() -> common::Proc {
    let root = repo();
    let python = venv_python();
    let mut cmd = Command::new(python);
    cmd.arg(root.join("envs/libero/server.py")).args([
        "--bind",
        "tcp://127.0.0.1:*",
        "--envs",
        "1",
        "--image",
        "128",
    ]);
    if std::env::var_os("MUJOCO_GL").is_none() {
        cmd.env("MUJOCO_GL", "egl");
    }
    common::spawn(&mut cmd)
}

/// Not blank: many distinct pixel values, not one flat colour.
fn is_informative(f: &Frame) -> bool {
    let mut seen = [false; 256];
    f.rgb.iter().for_each(|&v| seen[v as usize] = true);
    let distinct = seen.iter().filter(|s| **s).count();
    let mean = f.rgb.iter().map(|&v| f64::from(v)).sum::<f64>() / f.rgb.len() as f64;
    distinct > 32 && mean > 5.0 && mean < 250.0
}

/// The Python server answers bad input with the same typed errors as the
/// Rust one (all checked before any environment is built).
fn check_bad_input(endpoint: &str, after_reset: bool) {
    use wmrl_bridge::protocol::{
        ErrorKind, Op, PROTOCOL_VERSION, RequestHeader, WireAction, WireReset, decode_reply_header,
        encode_header,
    };
    let ctx = zmq::Context::new();
    let s = ctx.socket(zmq::REQ).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvtimeo(30_000).unwrap();
    s.connect(endpoint).unwrap();
    let ask = |parts: Vec<Vec<u8>>| {
        s.send_multipart(parts, 0).unwrap();
        let r = decode_reply_header(&s.recv_multipart(0).unwrap()).unwrap();
        assert!(!r.ok);
        r.error.unwrap().kind
    };
    let head = |op| RequestHeader {
        v: PROTOCOL_VERSION,
        id: 1,
        op,
        resets: vec![],
        actions: vec![],
    };
    assert_eq!(ask(vec![b"\xc1garbage".to_vec()]), ErrorKind::BadMessage);
    // The same hand-made malformed requests as the Rust server's test, the
    // same kinds (missing or mistyped fields, out-of-range values).
    for (name, bytes, want) in common::malformed_requests() {
        assert_eq!(ask(vec![bytes]), want, "{name}");
    }
    let mut reset = head(Op::Reset);
    reset.resets.push(WireReset {
        slot: 0,
        task: 0,
        init_state: 0,
        seed: 0,
    });
    let bytes = encode_header(&reset);
    assert_eq!(
        ask(vec![bytes[..bytes.len() - 3].to_vec()]),
        ErrorKind::BadMessage
    );
    let mut v2 = reset.clone();
    v2.v = 2;
    assert_eq!(ask(vec![encode_header(&v2)]), ErrorKind::Version);
    let mut bad = reset.clone();
    bad.resets[0].task = 10;
    assert_eq!(ask(vec![encode_header(&bad)]), ErrorKind::UnknownTask);
    bad.resets[0].task = 0;
    bad.resets[0].init_state = 50;
    assert_eq!(ask(vec![encode_header(&bad)]), ErrorKind::UnknownInitState);
    let mut step = head(Op::Step);
    step.actions.push(WireAction {
        slot: 0,
        action: vec![0.0; 7],
    });
    if !after_reset {
        assert_eq!(ask(vec![encode_header(&step)]), ErrorKind::NotReset);
    }
    if after_reset {
        step.actions[0].action = vec![0.0; 3];
        assert_eq!(ask(vec![encode_header(&step)]), ErrorKind::BadAction);
        step.actions[0].action = vec![f32::NAN; 7];
        assert_eq!(ask(vec![encode_header(&step)]), ErrorKind::BadAction);
    }
}

#[test]
#[ignore = "needs the LIBERO venv (scripts/setup.d/30-libero.sh); run by scripts/checks.d/30-libero.sh"]
fn real_libero_through_the_pool() {
    let mut server = spawn_libero();
    let config = PoolConfig {
        request_timeout_ms: 120_000,
        connect_timeout_ms: 30_000,
        reconnect_interval_ms: 200,
        give_up_after_ms: 3_000,
        ..PoolConfig::default()
    };
    check_bad_input(&server.endpoint, false);
    let mut pool = BridgePool::connect(&[server.endpoint.as_str()], config).unwrap();
    let spec = pool.spec().clone();
    assert_eq!(spec.suite, "libero_10");
    assert_eq!(spec.tasks.len(), 10);
    assert!(spec.tasks.iter().all(|t| t.n_init_states == 50));
    assert_eq!(
        (spec.action_dim, spec.action_low, spec.action_high),
        (7, -1.0, 1.0)
    );
    assert_eq!(spec.cameras.len(), 2);
    assert!(
        spec.cameras
            .iter()
            .all(|c| (c.width, c.height) == (128, 128))
    );
    println!("task 0: {}", spec.tasks[0].instruction);

    let t0 = Instant::now();
    let obs = pool
        .reset(&[(
            0,
            ResetRequest {
                task: 0,
                init_state: 0,
                seed: 0,
            },
        )])
        .unwrap();
    println!(
        "first reset (builds the env): {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(obs[0].proprio.len(), spec.proprio_dim);
    let first = obs[0].frames.clone();
    let t1 = Instant::now();
    let mut last = None;
    for t in 0..20 {
        // Move down a little with the gripper open.
        let a = vec![0.0, 0.0, -0.3, 0.0, 0.0, 0.0, -1.0];
        let r = pool.step(&[(0, a)]).unwrap().remove(0);
        assert!(!r.success && !r.done, "no success after {t} steps");
        for (f, c) in r.obs.frames.iter().zip(&spec.cameras) {
            assert_eq!(
                (f.width, f.height, f.rgb.len()),
                (c.width, c.height, 128 * 128 * 3)
            );
            assert!(is_informative(f), "camera {} blank at step {t}", c.name);
        }
        last = Some(r);
    }
    let steps_per_s = 20.0 / t1.elapsed().as_secs_f64();
    println!("20 steps: {steps_per_s:.1} steps/s through the bridge");
    let last = last.unwrap();
    // Bad actions on a live slot: typed errors, and the episode goes on.
    check_bad_input(&server.endpoint, true);
    assert!(!pool.step(&[(0, vec![0.0; 7])]).unwrap()[0].done);
    assert!(pool.take_restarts().is_empty());
    // The arm moved: the wrist view changed.
    assert_ne!(first[1], last.obs.frames[1]);

    // Kill the server: the pool reports the worker, then gives up on it.
    server.kill9();
    let t2 = Instant::now();
    let err = pool.step(&[(0, vec![0.0; 7])]).expect_err("server is gone");
    println!(
        "killed server reported gone after {:.2} s (give_up_after 3 s)",
        t2.elapsed().as_secs_f64()
    );
    assert!(matches!(err, EnvError::NoWorkers(_)), "{err}");
    assert!(
        pool.events()
            .iter()
            .any(|e| matches!(e, PoolEvent::WorkerDown { .. }))
    );
    assert!(matches!(pool.workers()[0].state, WorkerState::Gone { .. }));
    let acc = pool.accounting();
    assert_eq!((acc.requested, acc.lost), (1, 1));
    assert!(acc.is_balanced());
    let _ = Duration::ZERO;
}

#[test]
#[ignore = "needs the LIBERO venv (scripts/setup.d/30-libero.sh); run by scripts/checks.d/30-libero.sh"]
fn a_killed_libero_worker_is_restarted_while_the_step_waits() {
    // configs/libero_ci.toml's layout: two workers of one environment, both
    // slots in use, so the victim's episode has nowhere else to go.
    let cmd = WorkerCommand {
        program: venv_python(),
        args: [
            repo().join("envs/libero/server.py").display().to_string(),
            "--envs".into(),
            "1".into(),
            "--suite".into(),
            "libero_10".into(),
            "--image".into(),
            "128".into(),
        ]
        .to_vec(),
        env: vec![(
            "MUJOCO_GL".into(),
            std::env::var("MUJOCO_GL").unwrap_or_else(|_| "egl".into()),
        )],
        ready_timeout: Duration::from_secs(180),
    };
    let config = PoolConfig {
        num_envs: Some(2),
        request_timeout_ms: 120_000,
        connect_timeout_ms: 30_000,
        reconnect_interval_ms: 200,
        give_up_after_ms: 300_000,
    };
    let mut env = SupervisedPool::spawn(cmd, 2, config).unwrap();
    let victim_slot = env.pool().workers()[0].bound_slots;
    assert_eq!(victim_slot, 1, "one slot on each worker");
    let requests = [(0, 0), (1, 1)].map(|(slot, task)| {
        (
            slot,
            ResetRequest {
                task,
                init_state: 0,
                seed: 0,
            },
        )
    });
    env.reset(&requests).unwrap();
    let act = |env: &mut SupervisedPool| {
        env.step(&[
            (0, vec![0.0, 0.0, -0.2, 0.0, 0.0, 0.0, -1.0]),
            (1, vec![0.0; 7]),
        ])
        .unwrap()
    };
    for _ in 0..3 {
        act(&mut env);
    }
    assert!(env.take_restarts().is_empty());
    let pid = env.worker_pids()[0];
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let t0 = Instant::now();
    let results = act(&mut env);
    killer.join().unwrap();
    println!(
        "step with a killed LIBERO worker returned after {:.1} s (worker started again)",
        t0.elapsed().as_secs_f64()
    );
    let restarts = env.take_restarts();
    assert_eq!(env.worker_restarts(), 1, "the killed worker started again");
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    let lost = restarts[0].slot;
    assert_eq!(
        results[lost].obs.proprio.len(),
        env.spec().proprio_dim,
        "the restart's first observation"
    );
    // Both episodes go on: the restarted one from its reset.
    for _ in 0..3 {
        let r = act(&mut env);
        assert!(r.iter().all(|r| !r.done && !r.truncated));
    }
    assert!(env.take_restarts().is_empty());
    assert!(matches!(env.pool().workers()[0].state, WorkerState::Up));
    let acc = env.pool().accounting();
    assert_eq!(
        (acc.requested, acc.in_flight, acc.lost, acc.restarts),
        (2, 2, 0, 1),
        "{acc:?}"
    );
    assert!(acc.is_balanced(), "{acc:?}");
}
