//! Workers the client starts itself: a killed worker process is started
//! again on its endpoint, the pool reconnects, and the episode ledger
//! balances (nothing lost, nothing counted twice).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use wmrl_bridge::{PoolConfig, SupervisedPool, WorkerCommand};
use wmrl_env::{ResetRequest, VecEnv};

#[test]
fn a_killed_worker_is_started_again_and_no_episode_is_lost() {
    let cmd = WorkerCommand {
        program: env!("CARGO_BIN_EXE_wmrl-test-server").into(),
        args: ["--envs", "2", "--max-steps", "30"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        env: Vec::new(),
        ready_timeout: Duration::from_secs(20),
    };
    let config = PoolConfig {
        // Two slots over two workers of two: room to move episodes.
        num_envs: Some(2),
        request_timeout_ms: 5_000,
        reconnect_interval_ms: 100,
        ..PoolConfig::default()
    };
    let mut env = SupervisedPool::spawn(cmd, 2, config).unwrap();
    assert_eq!(env.num_envs(), 2);
    let req = |i: u64| ResetRequest {
        task: 0,
        init_state: (i % 5) as usize,
        seed: i,
    };
    env.reset(&[(0, req(0)), (1, req(1))]).unwrap();
    let (mut ended, mut next) = (0u64, 2u64);
    for step in 0..120 {
        if step == 10 {
            let pid = env.worker_pids()[0];
            let ok = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "kill -9 {pid}");
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

#[test]
fn a_worker_that_never_serves_is_a_clear_error() {
    let cmd = WorkerCommand {
        program: "/bin/sleep".into(),
        args: vec!["30".into()],
        env: Vec::new(),
        ready_timeout: Duration::from_millis(500),
    };
    let err = SupervisedPool::spawn(cmd, 1, PoolConfig::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("ENDPOINT"), "{err}");
}
