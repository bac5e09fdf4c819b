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
