//! Recovery with real processes: SIGKILL a worker mid-step, time out a slow
//! worker, give up on a worker that stays down; the episode ledger balances.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use wmrl_bridge::{BridgePool, PoolConfig, PoolEvent, WorkerState};
use wmrl_env::{ResetRequest, StepResult, VecEnv};

fn request(i: usize) -> ResetRequest {
    ResetRequest {
        task: i % 3,
        init_state: i % 5,
        seed: i as u64,
    }
}

/// What the caller itself saw: episodes by slot, ended episodes.
#[derive(Default)]
struct Caller {
    current: HashMap<usize, u64>,
    next: u64,
    ended: HashMap<u64, usize>,
    restarts_seen: usize,
}

impl Caller {
    fn reset(&mut self, pool: &mut BridgePool, slots: &[usize]) {
        let reqs: Vec<_> = slots
            .iter()
            .map(|&s| (s, request(self.next as usize + s)))
            .collect();
        let obs = pool.reset(&reqs).unwrap();
        for (&s, o) in slots.iter().zip(&obs) {
            assert_eq!(o.proprio[0], 0.0);
            self.current.insert(s, self.next);
            self.next += 1;
        }
    }

    fn step(&mut self, pool: &mut BridgePool) -> Vec<StepResult> {
        let mut slots: Vec<usize> = self.current.keys().copied().collect();
        slots.sort_unstable();
        let actions: Vec<_> = slots.iter().map(|&s| (s, vec![0.1; 7])).collect();
        let results = pool.step(&actions).unwrap();
        let restarted: Vec<usize> = pool.take_restarts().iter().map(|r| r.slot).collect();
        self.restarts_seen += restarted.len();
        for (&s, r) in slots.iter().zip(&results) {
            if restarted.contains(&s) {
                assert_eq!(
                    r.obs.proprio[0], 0.0,
                    "a restart returns the reset observation"
                );
                assert!(!(r.done || r.truncated));
            }
            if r.done || r.truncated {
                let ep = self.current.remove(&s).unwrap();
                *self.ended.entry(ep).or_default() += 1;
            }
        }
        results
    }
}

fn fast_config(num_envs: usize) -> PoolConfig {
    PoolConfig {
        num_envs: Some(num_envs),
        request_timeout_ms: 1_500,
        connect_timeout_ms: 1_000,
        reconnect_interval_ms: 100,
        give_up_after_ms: 20_000,
    }
}

#[test]
fn kill_9_mid_step_restarts_episodes_and_the_worker_rejoins() {
    let fixed = common::free_endpoint();
    let mut victim = common::spawn_test_server(&fixed, &["--envs", "2", "--sleep-ms", "150"]);
    let b = common::spawn_test_server("tcp://127.0.0.1:*", &["--envs", "2", "--sleep-ms", "150"]);
    let c = common::spawn_test_server("tcp://127.0.0.1:*", &["--envs", "2", "--sleep-ms", "150"]);
    let endpoints = [fixed.clone(), b.endpoint.clone(), c.endpoint.clone()];
    // A long timeout: the death must be noticed from the dropped connection.
    let config = PoolConfig {
        request_timeout_ms: 20_000,
        ..fast_config(4)
    };
    let mut pool = BridgePool::connect(&endpoints, config).unwrap();
    let on_victim = pool.workers()[0].bound_slots;
    assert!(on_victim > 0, "round-robin placed slots on every worker");

    let mut caller = Caller::default();
    caller.reset(&mut pool, &[0, 1, 2, 3]);
    caller.step(&mut pool);
    caller.step(&mut pool);

    // SIGKILL the victim while a step (150 ms per env on the server) is in flight.
    let pid = victim.child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    });
    let t0 = std::time::Instant::now();
    let results = caller.step(&mut pool);
    let took = t0.elapsed();
    killer.join().unwrap();
    assert!(
        took < Duration::from_secs(10),
        "the kill was noticed before the 20 s timeout ({took:?})"
    );
    victim.kill9();
    assert_eq!(results.len(), 4);
    assert_eq!(
        caller.restarts_seen, on_victim,
        "every episode on the victim restarted"
    );
    assert!(matches!(pool.workers()[0].state, WorkerState::Down { .. }));
    assert!(
        pool.events()
            .iter()
            .any(|e| matches!(e, PoolEvent::WorkerDown { worker: 0, .. }))
    );
    assert_eq!(pool.accounting().restarts, on_victim as u64);

    // Run every episode to its end, starting new ones, while the victim
    // comes back on the same endpoint.
    let mut revived = None;
    for round in 0..200 {
        if round == 5 {
            revived = Some(common::spawn_test_server(
                &fixed,
                &["--envs", "2", "--sleep-ms", "150"],
            ));
        }
        caller.step(&mut pool);
        let free: Vec<usize> = (0..4).filter(|s| !caller.current.contains_key(s)).collect();
        if caller.next < 12 && !free.is_empty() {
            caller.reset(&mut pool, &free);
        }
        if caller.current.is_empty() {
            break;
        }
    }
    assert!(caller.current.is_empty(), "all episodes ended");
    assert!(
        common::wait_until(Duration::from_secs(5), || {
            pool.maintain();
            pool.workers()[0].state == WorkerState::Up
        }),
        "the victim reconnected: {:?}",
        pool.workers()[0]
    );
    assert!(pool.events().iter().any(|e| matches!(
        e,
        PoolEvent::WorkerUp {
            worker: 0,
            restarted: true,
            ..
        }
    )));

    // The ledger: nothing lost, nothing twice.
    let acc = pool.accounting();
    assert!(
        caller.ended.values().all(|&n| n == 1),
        "no episode ended twice"
    );
    assert_eq!(acc.requested, caller.next);
    assert_eq!(acc.completed, caller.ended.len() as u64);
    assert_eq!(
        acc.completed, caller.next,
        "every started episode completed"
    );
    assert_eq!((acc.in_flight, acc.lost, acc.abandoned), (0, 0, 0));
    assert_eq!(acc.restarts, caller.restarts_seen as u64);
    assert!(acc.is_balanced(), "{acc:?}");
    drop(revived);
}

#[test]
fn a_slow_worker_times_out_and_a_dead_one_is_given_up() {
    let a = common::spawn_test_server("tcp://127.0.0.1:*", &["--envs", "1", "--sleep-ms", "900"]);
    let mut b = common::spawn_test_server("tcp://127.0.0.1:*", &["--envs", "2"]);
    let config = PoolConfig {
        request_timeout_ms: 300,
        give_up_after_ms: 1_500,
        ..fast_config(2)
    };
    let mut pool =
        BridgePool::connect(&[a.endpoint.as_str(), b.endpoint.as_str()], config).unwrap();
    let mut caller = Caller::default();
    caller.reset(&mut pool, &[0, 1]);
    // Slot 0 sits on the slow worker: the step times out and it restarts on b.
    caller.step(&mut pool);
    assert_eq!(caller.restarts_seen, 1);
    assert!(matches!(pool.workers()[0].state, WorkerState::Down { .. }));
    // The slow worker still answers handshakes: it comes back (same process).
    assert!(common::wait_until(Duration::from_secs(5), || {
        pool.maintain();
        pool.workers()[0].state == WorkerState::Up
    }));
    assert!(pool.events().iter().any(|e| matches!(
        e,
        PoolEvent::WorkerUp {
            worker: 0,
            restarted: false,
            ..
        }
    )));

    // Now b dies for good. Both slots sit on b; a has room for one of them
    // only, so the pool waits for b until give_up_after, reports it gone,
    // and the call fails with its episodes counted as lost.
    b.kill9();
    let slots: Vec<usize> = caller.current.keys().copied().collect();
    let actions: Vec<_> = slots.iter().map(|&s| (s, vec![0.0; 7])).collect();
    let err = pool.step(&actions).expect_err("no worker left");
    assert!(matches!(err, wmrl_env::EnvError::NoWorkers(_)), "{err}");
    let states: Vec<_> = pool.workers().into_iter().map(|w| w.state).collect();
    assert_eq!(states[0], WorkerState::Up, "{states:?}");
    assert!(matches!(states[1], WorkerState::Gone { .. }), "{states:?}");
    assert!(
        pool.events()
            .iter()
            .any(|e| matches!(e, PoolEvent::WorkerGone { worker: 1, .. }))
    );
    let acc = pool.accounting();
    assert_eq!(acc.lost, slots.len() as u64);
    assert!(acc.is_balanced(), "{acc:?}");
}
