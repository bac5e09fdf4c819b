//! The label server's answers to bad input, over real sockets on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::labels::queue::write_strip;
use crate::labels::{LabelStore, QueueItem, Verdict};
use wmrl_env::Frame;

use super::{LIMITS, LabelServer, serve_with};
use wmrl_http::Limits;

fn item(id: &str, step: usize) -> QueueItem {
    QueueItem {
        id: id.into(),
        step,
        group: 0,
        member: 0,
        task: 0,
        init_state: 0,
        instruction: "open the drawer".into(),
        wm_score: Some(0.3),
        frames: 2,
        width: 4,
        height: 4,
        wrist: false,
        queued_at: 0.0,
    }
}

/// A human-label run directory with `ids` queued (frames on disk).
fn run_dir(dir: &Path, ids: &[&str]) -> LabelStore {
    std::fs::write(
        dir.join("run.toml"),
        "format = 1\nsteps = 3\n[labels]\nsource = \"human\"\n",
    )
    .expect("config");
    let st = LabelStore::new(dir);
    let items: Vec<QueueItem> = ids.iter().map(|id| item(id, 0)).collect();
    st.enqueue(&items, |q| {
        let f = Frame::new(4, 4, vec![200; 48]).expect("frame");
        write_strip(&st.frames_path(&q.id, false), &[f.clone(), f])
    })
    .expect("enqueue");
    st
}

fn start(dir: &Path, token: Option<&str>) -> SocketAddr {
    start_with(dir, token, LIMITS)
}

fn start_with(dir: &Path, token: Option<&str>, limits: Limits) -> SocketAddr {
    let server =
        LabelServer::open(dir, token.map(String::from), Duration::from_secs(60)).expect("open");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || serve_with(Arc::new(server), listener, limits));
    addr
}

/// One request; (status, body).
fn call(addr: SocketAddr, method: &str, target: &str, body: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").expect("head");
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .expect("status")
        .parse()
        .expect("num");
    (status, out[end + 4..].to_vec())
}

fn json(addr: SocketAddr, method: &str, target: &str, body: &str) -> (u16, serde_json::Value) {
    let (st, b) = call(addr, method, target, body);
    (st, serde_json::from_slice(&b).expect("json reply"))
}

fn label(addr: SocketAddr, id: &str, verdict: &str, who: &str) -> (u16, serde_json::Value) {
    let body =
        format!(r#"{{"id":"{id}","label":"{verdict}","labeller":"{who}","seconds_to_label":1.5}}"#);
    json(addr, "POST", "/api/label", &body)
}

fn error(v: &serde_json::Value) -> String {
    v["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn unknown_double_and_concurrent_labels_are_refused_with_a_reason_and_nothing_counted_twice() {
    let tmp = tempfile::tempdir().expect("tmp");
    let st = run_dir(tmp.path(), &["s0-g0-m0", "s0-g0-m1"]);
    let addr = start(tmp.path(), None);

    let (s, v) = label(addr, "s7-g0-m0", "success", "ann");
    assert_eq!(s, 404, "{v}");
    assert!(error(&v).contains("no rollout `s7-g0-m0`"), "{v}");

    // Ann opens the first rollout; Bob, at the same time, gets the other
    // one, and his label of Ann's is refused while she has it.
    let (_, a) = json(addr, "GET", "/api/next?labeller=ann", "");
    let (_, b) = json(addr, "GET", "/api/next?labeller=bob", "");
    let (ia, ib) = (
        a["item"]["id"].as_str().expect("a"),
        b["item"]["id"].as_str().expect("b"),
    );
    assert_ne!(ia, ib, "two labellers are never handed the same rollout");
    assert!(
        a["item"].get("wm_score").is_none(),
        "score hidden before labelling"
    );
    let (s, v) = label(addr, ia, "failure", "bob");
    assert_eq!(s, 409, "{v}");
    assert!(error(&v).contains("ann has rollout"), "{v}");

    let (s, v) = label(addr, ia, "success", "ann");
    assert_eq!(s, 200, "{v}");
    let (s, v) = label(addr, ia, "failure", "bob");
    assert_eq!(s, 409, "{v}");
    assert!(error(&v).contains("already labelled Success by ann"), "{v}");
    // Undo is the author's only.
    let (s, v) = json(
        addr,
        "POST",
        "/api/undo",
        &format!(r#"{{"id":"{ia}","labeller":"bob"}}"#),
    );
    assert_eq!(s, 409, "{v}");
    assert!(error(&v).contains("only they can undo"), "{v}");

    let snap = st.snapshot().expect("snap");
    assert_eq!(snap.labels.len(), 1);
    let lines = std::fs::read_to_string(st.dir().join("labels.jsonl")).expect("labels");
    assert_eq!(lines.lines().count(), 1, "refusals write nothing");
    let (_, v) = json(addr, "GET", "/api/state", "");
    assert_eq!(
        (v["pending"].as_u64(), v["labelled"].as_u64()),
        (Some(1), Some(1))
    );
}

#[test]
fn malformed_requests_get_400_and_change_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let st = run_dir(tmp.path(), &["s0-g0-m0"]);
    let addr = start(tmp.path(), None);
    for body in [
        "{not json",
        r#"{"id":"s0-g0-m0","label":"maybe","labeller":"ann"}"#,
        r#"{"id":"s0-g0-m0","label":"success"}"#,
        r#"{"id":"s0-g0-m0","label":"success","labeller":"ann","extra":1}"#,
        r#"{"id":"s0-g0-m0","label":"success","labeller":"  "}"#,
        r#"{"id":"s0-g0-m0","label":"success","labeller":"ann","seconds_to_label":-1}"#,
    ] {
        let (s, v) = json(addr, "POST", "/api/label", body);
        assert_eq!(s, 400, "{body}: {v}");
        assert!(!error(&v).is_empty(), "{body}: {v}");
    }
    let (s, v) = json(addr, "GET", "/api/label", "");
    assert_eq!(s, 405, "{v}");
    let (s, v) = json(addr, "GET", "/api/next", "");
    assert_eq!(s, 400, "{v}");
    // Only a queued rollout's frames, whatever the path says.
    for p in [
        "/frames/../config.toml/agent.png",
        "/frames/s0-g0-m0/x.png",
        "/nope",
    ] {
        assert_eq!(call(addr, "GET", p, "").0, 404, "{p}");
    }
    let (s, png) = call(addr, "GET", "/frames/s0-g0-m0/agent.png", "");
    assert_eq!(s, 200);
    assert!(png.starts_with(b"\x89PNG"));
    let (s, page) = call(addr, "GET", "/", "");
    assert_eq!(s, 200);
    assert!(String::from_utf8_lossy(&page).contains("<canvas"));
    assert!(st.snapshot().expect("snap").labels.is_empty());
}

#[test]
fn a_used_label_cannot_be_undone_and_survives_a_server_restart() {
    let tmp = tempfile::tempdir().expect("tmp");
    let st = run_dir(tmp.path(), &["s0-g0-m0", "s0-g0-m1"]);
    let addr = start(tmp.path(), Some("t0k"));
    // The token is required once set.
    let (s, v) = label(addr, "s0-g0-m0", "success", "ann");
    assert_eq!(s, 403, "{v}");
    let (s, _) = json(addr, "GET", "/api/state?token=t0k", "");
    assert_eq!(s, 200);
    for (id, verdict) in [("s0-g0-m0", "success"), ("s0-g0-m1", "failure")] {
        let body = format!(r#"{{"id":"{id}","label":"{verdict}","labeller":"ann"}}"#);
        let (s, v) = json(addr, "POST", "/api/label?token=t0k", &body);
        assert_eq!(s, 200, "{v}");
    }
    // The trainer takes them (step 0): they are final.
    let ids = vec!["s0-g0-m0".to_string(), "s0-g0-m1".to_string()];
    let got = st.take(&ids, 0).expect("take");
    assert_eq!(got, Some(vec![Verdict::Success, Verdict::Failure]));
    // A page left open across a restart talks to a new server.
    let addr2 = start(tmp.path(), None);
    let (s, v) = json(
        addr2,
        "POST",
        "/api/undo",
        r#"{"id":"s0-g0-m1","labeller":"ann"}"#,
    );
    assert_eq!(s, 409, "{v}");
    assert!(error(&v).contains("already used"), "{v}");
    let (_, v) = json(addr2, "GET", "/api/state", "");
    assert_eq!(
        (v["used"].as_u64(), v["labelled"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(v["pending"].as_u64(), Some(0));
    let (_, v) = json(addr2, "GET", "/api/next?labeller=ann", "");
    assert!(v["item"].is_null(), "{v}");
    // "Unsure" sends a rollout to the back: not for a labelled one.
    let (s, v) = json(
        addr2,
        "POST",
        "/api/unsure",
        r#"{"id":"s0-g0-m0","labeller":"ann"}"#,
    );
    assert_eq!(s, 409, "{v}");
}

#[test]
fn unsure_sends_a_rollout_to_the_back_of_the_queue() {
    let tmp = tempfile::tempdir().expect("tmp");
    run_dir(tmp.path(), &["a", "b"]);
    let addr = start(tmp.path(), None);
    let (_, v) = json(addr, "GET", "/api/next?labeller=ann", "");
    assert_eq!(v["item"]["id"], "a");
    let (s, _) = json(
        addr,
        "POST",
        "/api/unsure",
        r#"{"id":"a","labeller":"ann"}"#,
    );
    assert_eq!(s, 200);
    let (_, v) = json(addr, "GET", "/api/next?labeller=ann", "");
    assert_eq!(v["item"]["id"], "b");
    label(addr, "b", "success", "ann");
    let (_, v) = json(addr, "GET", "/api/next?labeller=ann", "");
    assert_eq!(v["item"]["id"], "a", "it comes back");
}

#[test]
fn a_run_reading_the_simulator_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    // An older wmrl's run directory: config.toml, layout 0.
    std::fs::write(tmp.path().join("config.toml"), "steps = 3\n").expect("config");
    let e = LabelServer::open(tmp.path(), None, Duration::from_secs(1))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("labels.source"), "{e}");
}

#[test]
fn a_body_over_the_cap_is_refused_at_the_header_and_nothing_is_labelled() {
    let tmp = tempfile::tempdir().expect("tmp");
    run_dir(tmp.path(), &["a"]);
    let addr = start(tmp.path(), None);
    // Announced over the cap: answered 413 without the body being sent.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /api/label HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        LIMITS.max_body + 1
    );
    s.write_all(head.as_bytes()).expect("send");
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).expect("reply");
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    let (_, st) = json(addr, "GET", "/api/state", "");
    assert_eq!(st["labelled"], 0, "{st}");
}

#[test]
fn a_silent_client_delays_no_labeller_and_is_dropped_at_the_header_deadline() {
    let tmp = tempfile::tempdir().expect("tmp");
    run_dir(tmp.path(), &["a"]);
    let limits = Limits {
        header_deadline: Duration::from_secs(1),
        ..LIMITS
    };
    let addr = start_with(tmp.path(), None, limits);
    let mut silent = TcpStream::connect(addr).expect("connect");
    let mut partial = TcpStream::connect(addr).expect("connect");
    partial.write_all(b"GET /api/sta").expect("send");
    let t = Instant::now();
    let (s, v) = label(addr, "a", "success", "ann");
    assert_eq!(s, 200, "{v}");
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    for c in [&mut silent, &mut partial] {
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "still open after {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn fifty_concurrent_labellers_are_all_answered_and_each_rollout_is_labelled_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ids: Vec<String> = (0..10).map(|k| format!("r{k}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    run_dir(tmp.path(), &refs);
    let addr = start(tmp.path(), None);
    // Five labellers race for each of ten rollouts, all at once.
    let clients: Vec<_> = (0..50)
        .map(|k| {
            let id = format!("r{}", k % 10);
            std::thread::spawn(move || label(addr, &id, "success", &format!("l{k}")).0)
        })
        .collect();
    let statuses: Vec<u16> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    assert!(
        statuses.iter().all(|s| [200, 409].contains(s)),
        "{statuses:?}"
    );
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 10);
    let (_, st) = json(addr, "GET", "/api/state", "");
    assert_eq!(st["labelled"], 10, "{st}");
}
