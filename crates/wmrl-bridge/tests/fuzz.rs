//! Protocol fuzz: random, truncated and mutated messages through the
//! request decoder, the server's handler and the reply decoder. Nothing may
//! panic; the server must answer every input with a decodable reply, and
//! anything that is not a well-formed request gets `ok: false`.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use wmrl_bridge::protocol::{
    Op, PROTOCOL_VERSION, RequestHeader, WireAction, WireReset, decode_reply_header,
    decode_request, decode_results, encode_header,
};
use wmrl_bridge::testenv::{TestEnv, TestEnvConfig};
use wmrl_bridge::{Server, ServerConfig};
use wmrl_env::LocalVecEnv;

static INPUTS: AtomicUsize = AtomicUsize::new(0);
const CASES: u32 = 4000;

fn server() -> Server<LocalVecEnv<TestEnv>> {
    let env = LocalVecEnv::new(vec![
        TestEnv::new(TestEnvConfig::default()),
        TestEnv::new(TestEnvConfig::default()),
    ])
    .unwrap();
    // inproc: no port, nothing else can talk to it.
    Server::bind("inproc://fuzz", env, ServerConfig::default()).unwrap()
}

fn valid_requests() -> Vec<Vec<u8>> {
    let base = RequestHeader {
        v: PROTOCOL_VERSION,
        id: 3,
        op: Op::Reset,
        resets: vec![WireReset {
            slot: 1,
            task: 2,
            init_state: 4,
            seed: 9,
        }],
        actions: vec![],
    };
    let step = RequestHeader {
        op: Op::Step,
        resets: vec![],
        actions: vec![WireAction {
            slot: 1,
            action: vec![0.25; 7],
        }],
        ..base.clone()
    };
    let hello = RequestHeader {
        op: Op::Hello,
        resets: vec![],
        ..base.clone()
    };
    vec![
        encode_header(&base),
        encode_header(&step),
        encode_header(&hello),
    ]
}

fn check_server_answers(server: &mut Server<LocalVecEnv<TestEnv>>, parts: &[Vec<u8>]) {
    INPUTS.fetch_add(1, Ordering::Relaxed);
    let reply = server.handle(parts);
    let header = decode_reply_header(&reply).expect("every reply decodes");
    if decode_request(parts).is_err() {
        assert!(!header.ok, "undecodable input answered ok");
        assert!(header.error.is_some());
        assert_eq!(reply.len(), 1, "error replies carry no frames");
    }
    if header.ok && !header.results.is_empty() {
        let spec = server_spec();
        decode_results(&header, reply, &spec).expect("ok replies are well-formed");
    }
}

fn server_spec() -> wmrl_env::EnvSpec {
    TestEnvConfig::default().spec()
}

fn runner() -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

#[test]
fn protocol_fuzz() {
    let server = RefCell::new(server());

    // 1. Random multipart messages of random bytes.
    let random = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..4);
    runner()
        .run(&random, |parts| {
            check_server_answers(&mut server.borrow_mut(), &parts);
            Ok(())
        })
        .unwrap();

    // 2. Valid requests truncated at any byte and with bytes flipped.
    let mutated = (
        0usize..3,
        any::<prop::sample::Index>(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    );
    runner()
        .run(&mutated, |(which, cut, flips)| {
            let mut bytes = valid_requests()[which].clone();
            bytes.truncate(cut.index(bytes.len() + 1));
            for (at, v) in flips {
                if !bytes.is_empty() {
                    let i = at.index(bytes.len());
                    bytes[i] ^= v;
                }
            }
            check_server_answers(&mut server.borrow_mut(), &[bytes]);
            Ok(())
        })
        .unwrap();

    // 3. Random replies through the client's decoder.
    let replies = (
        prop::collection::vec(any::<u8>(), 0..200),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..4),
    );
    runner()
        .run(&replies, |(head, frames)| {
            INPUTS.fetch_add(1, Ordering::Relaxed);
            let mut parts = vec![head];
            parts.extend(frames);
            if let Ok(h) = decode_reply_header(&parts) {
                let _ = decode_results(&h, parts, &server_spec());
            }
            Ok(())
        })
        .unwrap();

    // 4. A real reply with frames dropped or cut short: always refused.
    let cuts = (0usize..3, any::<prop::sample::Index>());
    runner()
        .run(&cuts, |(keep_frames, cut)| {
            INPUTS.fetch_add(1, Ordering::Relaxed);
            let mut reply = server.borrow_mut().handle(&[valid_requests()[0].clone()]);
            prop_assert_eq!(reply.len(), 3);
            reply.truncate(1 + keep_frames);
            let last = reply.len() - 1;
            let full = reply[last].len();
            let keep = cut.index(full.max(1));
            if last > 0 {
                reply[last].truncate(keep);
            }
            let h = decode_reply_header(&reply).unwrap();
            let complete = keep_frames == 2 && keep == full;
            prop_assert_eq!(decode_results(&h, reply, &server_spec()).is_ok(), complete);
            Ok(())
        })
        .unwrap();

    let n = INPUTS.load(Ordering::Relaxed);
    assert_eq!(n, 4 * CASES as usize);
    println!("protocol fuzz: {n} inputs, no panic, every bad input refused");
}
