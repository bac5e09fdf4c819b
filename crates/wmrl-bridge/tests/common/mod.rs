//! Spawning test-server processes for the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A spawned server process, killed (SIGKILL) on drop.
pub struct Proc {
    pub child: Child,
    pub endpoint: String,
}

impl Proc {
    pub fn kill9(&mut self) {
        // Child::kill sends SIGKILL on Unix.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Start `wmrl-test-server` with `args`, wait for its `ENDPOINT` line.
pub fn spawn_test_server(bind: &str, args: &[&str]) -> Proc {
    spawn(
        Command::new(env!("CARGO_BIN_EXE_wmrl-test-server"))
            .arg("--bind")
            .arg(bind)
            .args(args),
    )
}

pub fn spawn(cmd: &mut Command) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let endpoint = loop {
        let line = lines
            .next()
            .expect("server exited before printing its endpoint")
            .unwrap();
        if let Some(e) = line.strip_prefix("ENDPOINT ") {
            break e.trim().to_string();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Proc { child, endpoint }
}

/// A free TCP port on loopback (for servers restarted on the same endpoint).
pub fn free_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("tcp://127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Poll `f` until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A MessagePack value for hand-made (malformed) request headers.
#[derive(serde::Serialize, Clone)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum V {
    I(i64),
    U(u64),
    F(f64),
    B(bool),
    S(&'static str),
    L(Vec<V>),
    M(std::collections::BTreeMap<&'static str, V>),
    Nil(Option<u8>),
}

fn map(entries: &[(&'static str, V)]) -> V {
    V::M(entries.iter().cloned().collect())
}

/// Requests a client written from docs/protocol.md might get wrong, each
/// with the error kind the document (and the Rust server) gives it: a
/// field missing or of the wrong type is `bad_message`; a well-typed value
/// out of range is the range's own kind. Every server must answer these
/// alike (checked against the Rust server in tests/serve.rs and the real
/// LIBERO server in tests/libero.rs).
#[allow(dead_code)]
pub fn malformed_requests() -> Vec<(&'static str, Vec<u8>, wmrl_bridge::protocol::ErrorKind)> {
    use wmrl_bridge::protocol::ErrorKind::{BadMessage, BadSlot, UnknownInitState, UnknownTask};
    let reset = |r: V| {
        map(&[
            ("v", V::U(1)),
            ("id", V::U(7)),
            ("op", V::S("reset")),
            ("resets", V::L(vec![r])),
        ])
    };
    let good = [
        ("slot", V::U(0)),
        ("task", V::U(0)),
        ("init_state", V::U(0)),
        ("seed", V::U(0)),
    ];
    let with = |key: &'static str, v: Option<V>| {
        let mut m: Vec<(&'static str, V)> =
            good.iter().filter(|(k, _)| *k != key).cloned().collect();
        if let Some(v) = v {
            m.push((key, v));
        }
        reset(map(&m))
    };
    let head = |entries: &[(&'static str, V)]| map(entries);
    let cases: Vec<(&'static str, V, wmrl_bridge::protocol::ErrorKind)> = vec![
        (
            "no id",
            head(&[("v", V::U(1)), ("op", V::S("ping"))]),
            BadMessage,
        ),
        (
            "string id",
            head(&[("v", V::U(1)), ("id", V::S("1")), ("op", V::S("ping"))]),
            BadMessage,
        ),
        (
            "negative id",
            head(&[("v", V::U(1)), ("id", V::I(-1)), ("op", V::S("ping"))]),
            BadMessage,
        ),
        (
            "no op",
            head(&[("v", V::U(1)), ("id", V::U(1))]),
            BadMessage,
        ),
        (
            "unknown op",
            head(&[("v", V::U(1)), ("id", V::U(1)), ("op", V::S("jump"))]),
            BadMessage,
        ),
        ("reset without a seed", with("seed", None), BadMessage),
        ("negative seed", with("seed", Some(V::I(-3))), BadMessage),
        ("string seed", with("seed", Some(V::S("0"))), BadMessage),
        ("reset without a slot", with("slot", None), BadMessage),
        ("string slot", with("slot", Some(V::S("0"))), BadMessage),
        ("bool slot", with("slot", Some(V::B(true))), BadMessage),
        ("float slot", with("slot", Some(V::F(0.0))), BadMessage),
        ("reset without a task", with("task", None), BadMessage),
        ("slot out of range", with("slot", Some(V::U(4096))), BadSlot),
        (
            "task out of range",
            with("task", Some(V::U(4096))),
            UnknownTask,
        ),
        (
            "init state out of range",
            with("init_state", Some(V::U(4096))),
            UnknownInitState,
        ),
        (
            "step without a slot",
            head(&[
                ("v", V::U(1)),
                ("id", V::U(1)),
                ("op", V::S("step")),
                (
                    "actions",
                    V::L(vec![map(&[("action", V::L(vec![V::F(0.0); 7]))])]),
                ),
            ]),
            BadMessage,
        ),
        (
            "string in an action",
            head(&[
                ("v", V::U(1)),
                ("id", V::U(1)),
                ("op", V::S("step")),
                (
                    "actions",
                    V::L(vec![map(&[
                        ("slot", V::U(0)),
                        ("action", V::L(vec![V::S("x"); 7])),
                    ])]),
                ),
            ]),
            BadMessage,
        ),
    ];
    cases
        .into_iter()
        .map(|(name, v, kind)| (name, rmp_serde::to_vec_named(&v).expect("encode"), kind))
        .collect()
}
