//! Workers the client starts itself: a killed worker process is started
//! again on its endpoint while the call that lost it waits, whatever the
//! layout (no spare slot needed), the pool reconnects, and the episode
//! ledger balances (nothing lost, nothing counted twice). A worker that
//! cannot serve is reported with its own words, its run time and its exit.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wmrl_bridge::{PoolConfig, PoolEvent, SupervisedPool, WorkerCommand, WorkerState};
use wmrl_env::{EnvError, ResetRequest, VecEnv};

fn test_server(args: &[&str]) -> WorkerCommand {
    WorkerCommand {
        program: env!("CARGO_BIN_EXE_wmrl-test-server").into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        ready_timeout: Duration::from_secs(20),
    }
}

fn shell(script: &str) -> WorkerCommand {
    WorkerCommand {
        program: "/bin/sh".into(),
        // `--bind ENDPOINT` lands in $1 $2 after the script's $0.
        args: vec!["-c".into(), script.into(), "worker".into()],
        env: Vec::new(),
        ready_timeout: Duration::from_millis(1_500),
    }
}

fn kill9(pid: u32) {
    let ok = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -9 {pid}");
}

fn req(i: u64) -> ResetRequest {
    ResetRequest {
        task: (i % 3) as usize,
        init_state: (i % 5) as usize,
        seed: i,
    }
}

#[test]
fn a_killed_worker_is_started_again_and_no_episode_is_lost() {
    let cmd = test_server(&["--envs", "2", "--max-steps", "30"]);
    let config = PoolConfig {
        // Two slots over two workers of two: room to move episodes.
        num_envs: Some(2),
        request_timeout_ms: 5_000,
        reconnect_interval_ms: 100,
        ..PoolConfig::default()
    };
    let mut env = SupervisedPool::spawn(cmd, 2, config).unwrap();
    assert_eq!(env.num_envs(), 2);
    env.reset(&[(0, req(0)), (1, req(1))]).unwrap();
    let (mut ended, mut next) = (0u64, 2u64);
    for step in 0..120 {
        if step == 10 {
            // Killed between calls: noticed at the next call.
            kill9(env.worker_pids()[0]);
            std::thread::sleep(Duration::from_millis(200));
        }
        let res = env.step(&[(0, vec![0.1; 7]), (1, vec![0.1; 7])]).unwrap();
        let _ = env.take_restarts();
        for (slot, r) in res.iter().enumerate() {
            if r.done || r.truncated {
                ended += 1;
                env.reset(&[(slot, req(next))]).unwrap();
                next += 1;
            }
        }
    }
    assert_eq!(
        env.worker_restarts(),
        1,
        "the dead worker was started again"
    );
    let acc = env.pool().accounting();
    assert_eq!(acc.lost, 0, "{acc:?}");
    assert_eq!(
        acc.completed, ended,
        "every ended episode counted once: {acc:?}"
    );
    assert_eq!(acc.requested, next, "{acc:?}");
    assert!(
        ended >= 6,
        "episodes kept finishing after the kill: {ended}"
    );
}

/// Run `total` episodes on every slot of `workers` x `envs_per_worker`
/// (no spare slot), SIGKILL worker 0 in the middle of a step, and check
/// that the step returns soon (the worker restarted while it waited, long
/// before `give_up_after_ms`), the victim's episodes restarted, and every
/// episode ended exactly once.
fn kill_mid_step_without_a_spare_slot(workers: usize, envs_per_worker: usize) {
    let layout = format!("{workers} worker(s) x {envs_per_worker} env(s)");
    let per = envs_per_worker.to_string();
    let cmd = test_server(&["--envs", &per, "--max-steps", "12", "--sleep-ms", "60"]);
    let slots = workers * envs_per_worker;
    let config = PoolConfig {
        num_envs: Some(slots),
        request_timeout_ms: 30_000,
        reconnect_interval_ms: 100,
        give_up_after_ms: 60_000,
        ..PoolConfig::default()
    };
    let mut env = SupervisedPool::spawn(cmd, workers, config).unwrap();
    let on_victim = env.pool().workers()[0].bound_slots;
    assert_eq!(on_victim, envs_per_worker, "{layout}: every slot in use");
    let total = 3 * slots as u64;
    let mut current: HashMap<usize, u64> = HashMap::new();
    let mut ended: HashMap<u64, usize> = HashMap::new();
    let mut next = 0u64;
    let mut restarts_seen = 0;
    let first: Vec<_> = (0..slots)
        .map(|s| {
            current.insert(s, next);
            next += 1;
            (s, req(next - 1))
        })
        .collect();
    env.reset(&first).unwrap();
    for round in 0..400 {
        if current.is_empty() {
            break;
        }
        let mut active: Vec<usize> = current.keys().copied().collect();
        active.sort_unstable();
        let actions: Vec<_> = active.iter().map(|&s| (s, vec![0.1; 7])).collect();
        let killer = (round == 3).then(|| {
            let pid = env.worker_pids()[0];
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                kill9(pid);
            })
        });
        let t0 = Instant::now();
        let results = env.step(&actions).unwrap();
        if let Some(k) = killer {
            k.join().unwrap();
            let took = t0.elapsed();
            assert!(
                took < Duration::from_secs(15),
                "{layout}: the step waited {took:?} (give-up is 60 s)"
            );
        }
        let restarted: Vec<usize> = env.take_restarts().iter().map(|r| r.slot).collect();
        restarts_seen += restarted.len();
        let mut free = Vec::new();
        for (&s, r) in active.iter().zip(&results) {
            if restarted.contains(&s) {
                assert_eq!(r.obs.proprio[0], 0.0, "{layout}: a restart is a reset");
                continue;
            }
            if r.done || r.truncated {
                let ep = current.remove(&s).unwrap();
                *ended.entry(ep).or_default() += 1;
                free.push(s);
            }
        }
        let mut refill = Vec::new();
        for s in free {
            if next < total {
                current.insert(s, next);
                refill.push((s, req(next)));
                next += 1;
            }
        }
        if !refill.is_empty() {
            env.reset(&refill).unwrap();
        }
    }
    assert!(current.is_empty(), "{layout}: every episode ended");
    assert_eq!(
        env.worker_restarts(),
        1,
        "{layout}: the victim started again"
    );
    assert_eq!(
        restarts_seen, on_victim,
        "{layout}: the victim's episodes restarted, the others went on"
    );
    assert_eq!(env.pool().workers()[0].state, WorkerState::Up, "{layout}");
    assert!(
        env.pool().events().iter().any(|e| matches!(
            e,
            PoolEvent::WorkerUp {
                worker: 0,
                restarted: true,
                ..
            }
        )),
        "{layout}: the new process answered"
    );
    assert_eq!(ended.len() as u64, total, "{layout}");
    assert!(
        ended.values().all(|&n| n == 1),
        "{layout}: none ended twice"
    );
    let acc = env.pool().accounting();
    assert_eq!(
        (acc.requested, acc.completed, acc.in_flight, acc.lost),
        (total, total, 0, 0),
        "{layout}: {acc:?}"
    );
    assert_eq!(acc.restarts, on_victim as u64, "{layout}: {acc:?}");
    assert!(acc.is_balanced(), "{layout}: {acc:?}");
}

#[test]
fn a_worker_killed_mid_step_is_restarted_while_the_call_waits_in_every_layout() {
    // The layouts of issue 28: 2 x 1 (configs/libero_ci.toml), 2 x 2, 1 x 2.
    for (workers, envs) in [(2, 1), (2, 2), (1, 2)] {
        kill_mid_step_without_a_spare_slot(workers, envs);
    }
}

#[test]
fn a_worker_that_exits_before_serving_says_why_and_when() {
    let t0 = Instant::now();
    let cmd = shell("echo \"ModuleNotFoundError: No module named 'libero'\" >&2; exit 3");
    let err = SupervisedPool::spawn(cmd, 1, PoolConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(t0.elapsed() < Duration::from_secs(5), "{err}");
    assert!(err.contains("exited after"), "{err}");
    assert!(err.contains("exit status: 3"), "{err}");
    assert!(err.contains("No module named 'libero'"), "{err}");
    assert!(!err.contains("within"), "no timeout was reached: {err}");
}

#[test]
fn a_worker_that_never_serves_is_a_clear_error() {
    let err = SupervisedPool::spawn(shell("sleep 30"), 1, PoolConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("did not print `ENDPOINT"), "{err}");
    assert!(err.contains("within 1.5 s"), "{err}");
}

#[test]
fn a_worker_that_cannot_start_again_is_given_up_with_its_reason() {
    // Serves the first time; every later start fails at once.
    let marker = std::env::temp_dir().join(format!("wmrl-supervise-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "if [ -e '{m}' ]; then echo 'simulator install broken' >&2; exit 7; fi; \
         touch '{m}'; exec '{bin}' --envs 1 \"$@\"",
        m = marker.display(),
        bin = env!("CARGO_BIN_EXE_wmrl-test-server"),
    );
    let mut cmd = shell(&script);
    cmd.ready_timeout = Duration::from_secs(20);
    let config = PoolConfig {
        reconnect_interval_ms: 100,
        give_up_after_ms: 60_000,
        ..PoolConfig::default()
    };
    let mut env = SupervisedPool::spawn(cmd, 1, config).unwrap();
    env.reset(&[(0, req(0))]).unwrap();
    kill9(env.worker_pids()[0]);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let err = env.step(&[(0, vec![0.0; 7])]).expect_err("no worker left");
    let _ = std::fs::remove_file(&marker);
    assert!(t0.elapsed() < Duration::from_secs(10), "given up at once");
    assert!(matches!(err, EnvError::NoWorkers(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("simulator install broken"), "{msg}");
    assert!(msg.contains("exit status: 7"), "{msg}");
    assert!(matches!(
        env.pool().workers()[0].state,
        WorkerState::Gone { .. }
    ));
    let acc = env.pool().accounting();
    assert_eq!((acc.requested, acc.lost), (1, 1), "{acc:?}");
    assert!(acc.is_balanced(), "{acc:?}");
}
