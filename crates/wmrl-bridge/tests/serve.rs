//! The server against bad input, and the pool against in-process stepping.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::time::Duration;

use serde::Serialize;
use wmrl_bridge::protocol::{
    ErrorKind, Op, PROTOCOL_VERSION, ReplyHeader, RequestHeader, WireAction, WireReset,
    decode_reply_header, encode_header,
};
use wmrl_bridge::testenv::{TestEnv, TestEnvConfig};
use wmrl_bridge::{BridgePool, PoolConfig, Server, ServerConfig};
use wmrl_env::{LocalVecEnv, ResetRequest, VecEnv};

fn spawn_in_thread(envs: usize) -> (String, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let env = LocalVecEnv::new(
        (0..envs)
            .map(|_| TestEnv::new(TestEnvConfig::default()))
            .collect(),
    )
    .unwrap();
    let mut server = Server::bind("tcp://127.0.0.1:*", env, ServerConfig::default()).unwrap();
    let endpoint = server.endpoint().to_string();
    let stop = server.shutdown_handle();
    std::thread::spawn(move || server.run().unwrap());
    (endpoint, stop)
}

fn req_socket(ctx: &zmq::Context, endpoint: &str) -> zmq::Socket {
    let s = ctx.socket(zmq::REQ).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvtimeo(5000).unwrap();
    s.connect(endpoint).unwrap();
    s
}

fn ask(s: &zmq::Socket, parts: Vec<Vec<u8>>) -> (ReplyHeader, usize) {
    s.send_multipart(parts, 0).unwrap();
    let reply = s.recv_multipart(0).unwrap();
    (decode_reply_header(&reply).unwrap(), reply.len())
}

fn header(op: Op) -> RequestHeader {
    RequestHeader {
        v: PROTOCOL_VERSION,
        id: 42,
        op,
        resets: vec![],
        actions: vec![],
    }
}

fn kind(r: &ReplyHeader) -> ErrorKind {
    assert!(!r.ok);
    r.error.as_ref().unwrap().kind
}

#[test]
fn malformed_requests_get_the_documented_error_kinds() {
    let (endpoint, stop) = spawn_in_thread(2);
    let ctx = zmq::Context::new();
    let s = req_socket(&ctx, &endpoint);
    for (name, bytes, want) in common::malformed_requests() {
        let (r, _) = ask(&s, vec![bytes]);
        assert!(!r.ok, "{name}: accepted");
        assert_eq!(kind(&r), want, "{name}");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn bad_input_gets_typed_errors_and_the_server_keeps_serving() {
    let (endpoint, stop) = spawn_in_thread(2);
    let ctx = zmq::Context::new();
    let s = req_socket(&ctx, &endpoint);

    // Garbage, empty and truncated headers.
    let (r, _) = ask(&s, vec![b"\xc1\xff garbage".to_vec()]);
    assert_eq!(kind(&r), ErrorKind::BadMessage);
    let (r, _) = ask(&s, vec![Vec::new()]);
    assert_eq!(kind(&r), ErrorKind::BadMessage);
    let mut reset = header(Op::Reset);
    reset.resets.push(WireReset {
        slot: 0,
        task: 0,
        init_state: 0,
        seed: 1,
    });
    let full = encode_header(&reset);
    let (r, _) = ask(&s, vec![full[..full.len() / 2].to_vec()]);
    assert_eq!(kind(&r), ErrorKind::BadMessage);
    // Extra parts.
    let (r, _) = ask(&s, vec![full.clone(), b"extra".to_vec()]);
    assert_eq!(kind(&r), ErrorKind::BadMessage);

    // Another protocol version, whatever its shape.
    #[derive(Serialize)]
    struct V2 {
        v: u32,
        id: u64,
        verb: &'static str,
    }
    let (r, _) = ask(
        &s,
        vec![encode_header(&V2 {
            v: 2,
            id: 5,
            verb: "x",
        })],
    );
    assert_eq!(kind(&r), ErrorKind::Version);
    assert_eq!(r.id, 5);
    assert_eq!(r.v, PROTOCOL_VERSION);

    // Step before reset; unknown task; unknown init state; bad slot.
    let mut step = header(Op::Step);
    step.actions.push(WireAction {
        slot: 0,
        action: vec![0.0; 7],
    });
    let (r, _) = ask(&s, vec![encode_header(&step)]);
    assert_eq!(kind(&r), ErrorKind::NotReset);
    let mut bad = reset.clone();
    bad.resets[0].task = 99;
    let (r, _) = ask(&s, vec![encode_header(&bad)]);
    assert_eq!(kind(&r), ErrorKind::UnknownTask);
    let mut bad = reset.clone();
    bad.resets[0].init_state = 99;
    let (r, _) = ask(&s, vec![encode_header(&bad)]);
    assert_eq!(kind(&r), ErrorKind::UnknownInitState);
    let mut bad = reset.clone();
    bad.resets[0].slot = 7;
    let (r, _) = ask(&s, vec![encode_header(&bad)]);
    assert_eq!(kind(&r), ErrorKind::BadSlot);

    // A good reset: one result, two camera frames after the header.
    let (r, parts) = ask(&s, vec![full.clone()]);
    assert!(r.ok, "{r:?}");
    assert_eq!((r.results.len(), parts), (1, 3));

    // Wrong action dimension, non-finite action.
    step.actions[0].action = vec![0.0; 3];
    let (r, _) = ask(&s, vec![encode_header(&step)]);
    assert_eq!(kind(&r), ErrorKind::BadAction);
    step.actions[0].action = vec![f32::NAN; 7];
    let (r, _) = ask(&s, vec![encode_header(&step)]);
    assert_eq!(kind(&r), ErrorKind::BadAction);

    // Raw bytes on the TCP port (not even ZMTP): the server drops that peer.
    let addr = endpoint.trim_start_matches("tcp://");
    let mut raw = std::net::TcpStream::connect(addr).unwrap();
    let _ = raw.write_all(&[0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 0xff, 0xff, 0xff]);
    drop(raw);
    // A peer that sends a request and disappears before the reply.
    let gone = req_socket(&ctx, &endpoint);
    gone.send(encode_header(&header(Op::Ping)), 0).unwrap();
    drop(gone);

    // Still serving: the same client and a fresh pool both work.
    step.actions[0].action = vec![0.5; 7];
    let (r, parts) = ask(&s, vec![encode_header(&step)]);
    assert!(r.ok, "{r:?}");
    assert_eq!(parts, 3);
    assert_eq!(r.results[0].proprio[0], 1.0, "one step taken");
    let mut pool = BridgePool::connect(&[endpoint.as_str()], PoolConfig::default()).unwrap();
    let obs = pool
        .reset(&[(
            1,
            ResetRequest {
                task: 1,
                init_state: 2,
                seed: 3,
            },
        )])
        .unwrap();
    assert_eq!(obs[0].proprio[..4], [0.0, 1.0, 2.0, 3.0]);
    // The pool checks before sending: typed local errors.
    assert!(pool.step(&[(0, vec![0.0; 7])]).is_err(), "slot 0 not reset");
    assert!(pool.step(&[(1, vec![0.0; 6])]).is_err(), "wrong dimension");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
}

#[test]
fn pool_over_two_worker_processes_matches_in_process_stepping() {
    let a = common::spawn_test_server("tcp://127.0.0.1:*", &["--envs", "3"]);
    let b = common::spawn_test_server("tcp://127.0.0.1:*", &["--envs", "3"]);
    let mut pool = BridgePool::connect(
        &[a.endpoint.as_str(), b.endpoint.as_str()],
        PoolConfig {
            num_envs: Some(5),
            ..PoolConfig::default()
        },
    )
    .unwrap();
    assert_eq!(pool.num_envs(), 5);
    let mut local = LocalVecEnv::new(
        (0..5)
            .map(|_| TestEnv::new(TestEnvConfig::default()))
            .collect(),
    )
    .unwrap();
    assert_eq!(pool.spec(), local.spec());
    // Both workers carry slots.
    assert!(pool.workers().iter().all(|w| w.bound_slots >= 2));
    let resets: Vec<_> = (0..5)
        .map(|i| {
            (
                i,
                ResetRequest {
                    task: i % 3,
                    init_state: i,
                    seed: 10 + i as u64,
                },
            )
        })
        .collect();
    assert_eq!(pool.reset(&resets).unwrap(), local.reset(&resets).unwrap());
    let mut live: Vec<usize> = (0..5).collect();
    let mut done = 0;
    for t in 0..60 {
        if live.is_empty() {
            break;
        }
        let actions: Vec<_> = live
            .iter()
            .map(|&i| (i, vec![((t + i) as f32 * 0.37).sin(); 7]))
            .collect();
        let p = pool.step(&actions).unwrap();
        let l = local.step(&actions).unwrap();
        assert_eq!(p, l, "step {t}");
        for ((slot, _), r) in actions.iter().zip(&p) {
            if r.done || r.truncated {
                done += 1;
                live.retain(|s| s != slot);
            }
        }
    }
    assert_eq!(done, 5);
    let acc = pool.accounting();
    assert_eq!((acc.requested, acc.completed, acc.in_flight), (5, 5, 0));
    assert!(acc.is_balanced());
    assert!(pool.take_restarts().is_empty());
    pool.close().unwrap();
    let _ = Duration::ZERO;
}
