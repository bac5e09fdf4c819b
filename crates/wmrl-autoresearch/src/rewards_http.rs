//! HTTP front of `wmrl autoresearch serve-rewards` (docs/autoresearch.md):
//! JSON over HTTP/1.1 (hyper, through [`super::http`]) so that any
//! trainer's Python reaches it with the standard library. Reward requests
//! are scored one at a time on one thread (the correction loop is
//! sequential); connections are served concurrently, so `GET /v1/health`
//! answers from a snapshot while a request is being scored, and a client
//! that sends nothing delays nobody. A body is judged by its header: a
//! `Content-Length` over the cap is refused with 413 before any of the
//! body is read. A bad request gets a 4xx reply with `{"error": ...}` and
//! changes nothing.
//!
//! This module must never read or hold more of a request than its caps
//! allow, nor let one client's request hold up another's health check.

use std::net::TcpListener;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use crate::rewards::{PROTOCOL, RewardReply, RewardRequest, RewardService};
use anyhow::Context;
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::sync::{Notify, oneshot};

use wmrl_http::{self as http, Body, Limits, Refusal};

/// Largest request body accepted (a group of long solutions is far less).
pub const MAX_BODY: u64 = 16 << 20;

/// The service's limits: 16 MiB bodies with a length, 120 s to send one,
/// 30 s for the headers, 64 connections at once.
pub const LIMITS: Limits = Limits {
    header_deadline: Duration::from_secs(30),
    body_deadline: Duration::from_secs(120),
    max_body: MAX_BODY,
    require_length: true,
    max_connections: 64,
};

/// What scores reward requests: the reward service, or a stand-in in tests.
pub trait Scorer: Send + 'static {
    fn score(&mut self, req: &RewardRequest) -> crate::Result<RewardReply>;
    /// Requests answered, real outcomes used, sandbox CPU-seconds: since
    /// the state began.
    fn totals(&self) -> (u64, u64, f64);
}

impl Scorer for RewardService {
    fn score(&mut self, req: &RewardRequest) -> crate::Result<RewardReply> {
        RewardService::score(self, req)
    }
    fn totals(&self) -> (u64, u64, f64) {
        (
            self.requests(),
            self.ledger().labels,
            self.ledger().real_cpu_seconds,
        )
    }
}

/// What `/v1/health` reports: kept apart from the scorer, so it never
/// waits for a request being scored.
#[derive(Debug, Clone, Default)]
struct Health {
    requests: u64,
    labels_total: u64,
    sandbox_cpu_secs_total: f64,
    /// A request is being scored.
    busy: bool,
    /// Requests waiting behind it.
    queued: usize,
}

struct Shared {
    health: Mutex<Health>,
    jobs: mpsc::Sender<Job>,
    limits: Limits,
}

impl Shared {
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        // A panic elsewhere leaves plain numbers behind: keep serving them.
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One reward request handed to the scoring thread, and where its reply goes.
struct Job {
    request: RewardRequest,
    reply: oneshot::Sender<Reply>,
}

/// A status and a JSON body.
struct Reply {
    status: u16,
    body: serde_json::Value,
}

impl Reply {
    fn ok(body: serde_json::Value) -> Self {
        Self { status: 200, body }
    }
    fn error(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            body: serde_json::json!({ "protocol": PROTOCOL, "error": message.into() }),
        }
    }
    fn into_response(self) -> Response<Body> {
        http::json(self.status, &self.body)
    }
}

impl From<Refusal> for Reply {
    fn from(r: Refusal) -> Self {
        Self::error(r.status, r.message)
    }
}

/// Listen on `bind` (port 0: any free port; the address is in the result).
pub fn bind(bind: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(bind).with_context(|| format!("listening on {bind}"))
}

/// Serve until killed, or until `max_requests` reward requests were
/// answered (0: no limit).
pub fn serve<S: Scorer>(scorer: S, listener: TcpListener, max_requests: u64) -> anyhow::Result<()> {
    serve_with(scorer, listener, max_requests, LIMITS)
}

/// [`serve`] under other limits (tests shorten the deadlines).
fn serve_with<S: Scorer>(
    scorer: S,
    listener: TcpListener,
    max_requests: u64,
    limits: Limits,
) -> anyhow::Result<()> {
    let (requests, labels_total, sandbox_cpu_secs_total) = scorer.totals();
    let (jobs, inbox) = mpsc::channel::<Job>();
    let shared = Arc::new(Shared {
        health: Mutex::new(Health {
            requests,
            labels_total,
            sandbox_cpu_secs_total,
            ..Health::default()
        }),
        jobs,
        limits,
    });
    let stop = Arc::new(Notify::new());
    let scoring = {
        let shared = Arc::clone(&shared);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("score".into())
            .spawn(move || {
                // The loop ends by answering its last request or by
                // panicking: either way the server stops.
                let _stop = StopOnDrop(stop);
                score_loop(scorer, &inbox, &shared, max_requests);
            })?
    };
    let handler = move |req: Request<Incoming>| {
        let shared = Arc::clone(&shared);
        async move { route(&shared, req).await.into_response() }
    };
    // The scoring thread holds a sender of its own inbox: it ends only as
    // above, so it is joined only once the server stopped on its word.
    http::serve(listener, limits, Some(stop), handler)?;
    scoring
        .join()
        .map_err(|_| anyhow::anyhow!("the scoring thread panicked"))?;
    Ok(())
}

/// Notifies the server's stop when dropped.
struct StopOnDrop(Arc<Notify>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// The scoring thread: one request at a time, in arrival order.
fn score_loop<S: Scorer>(
    mut scorer: S,
    inbox: &mpsc::Receiver<Job>,
    shared: &Shared,
    max_requests: u64,
) {
    let mut answered = 0u64;
    for job in inbox {
        {
            let mut h = shared.health();
            h.busy = true;
            h.queued = h.queued.saturating_sub(1);
        }
        let reply = match scorer.score(&job.request) {
            Ok(out) => {
                answered += 1;
                match serde_json::to_value(&out) {
                    Ok(v) => Reply::ok(v),
                    Err(e) => Reply::error(500, e.to_string()),
                }
            }
            // A request the service refuses is the client's to fix;
            // anything else is ours.
            Err(e @ crate::Error::Config(_)) => Reply::error(422, e.to_string()),
            Err(e) => Reply::error(500, e.to_string()),
        };
        let (requests, labels_total, sandbox_cpu_secs_total) = scorer.totals();
        {
            let mut h = shared.health();
            h.busy = false;
            h.requests = requests;
            h.labels_total = labels_total;
            h.sandbox_cpu_secs_total = sandbox_cpu_secs_total;
        }
        // The client may have gone; its reply is then dropped.
        let _ = job.reply.send(reply);
        if max_requests > 0 && answered >= max_requests {
            return;
        }
    }
}

/// One request's reply.
async fn route(shared: &Shared, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_string();
    match (req.method().as_str(), path.as_str()) {
        ("GET", "/v1/health") => {
            let h = shared.health().clone();
            Reply::ok(serde_json::json!({
                "protocol": PROTOCOL,
                "status": "ok",
                "requests": h.requests,
                "labels_total": h.labels_total,
                "sandbox_cpu_secs_total": h.sandbox_cpu_secs_total,
                "busy": h.busy,
                "queued": h.queued,
            }))
        }
        ("POST", "/v1/rewards") => match http::read_body(req, &shared.limits).await {
            Ok(got) => match serde_json::from_slice::<RewardRequest>(&got.body) {
                Ok(request) => score(shared, request).await,
                Err(e) => Reply::error(400, format!("not a reward request: {e}")),
            },
            Err(r) => r.into(),
        },
        (_, "/v1/rewards" | "/v1/health") => Reply::error(405, "method not allowed"),
        (_, other) => Reply::error(404, format!("no endpoint {other}")),
    }
}

/// Hand a request to the scoring thread and wait for its reply.
async fn score(shared: &Shared, request: RewardRequest) -> Reply {
    let (tx, rx) = oneshot::channel();
    shared.health().queued += 1;
    if shared.jobs.send(Job { request, reply: tx }).is_err() {
        shared.health().queued -= 1;
        return Reply::error(503, "the service is stopping");
    }
    rx.await
        .unwrap_or_else(|_| Reply::error(503, "the service stopped before answering"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Instant;

    use super::*;

    /// Scores every candidate 0 after `delay`, counting requests.
    struct Slow {
        delay: Duration,
        answered: u64,
    }

    impl Scorer for Slow {
        fn score(&mut self, req: &RewardRequest) -> crate::Result<RewardReply> {
            if req.competition == "nope" {
                return Err(crate::Error::Config("no competition `nope`".into()));
            }
            std::thread::sleep(self.delay);
            self.answered += 1;
            Ok(RewardReply {
                protocol: PROTOCOL,
                rewards: req.groups.iter().map(|g| vec![0.0; g.len()]).collect(),
                scores: req.groups.iter().map(|g| vec![None; g.len()]).collect(),
                anchors: vec![],
                calibrated: false,
                weight: 1.0,
                labels_used: 0,
                labels_total: 0,
                sandbox_cpu_secs: 0.0,
                sandbox_cpu_secs_total: 0.0,
                requests: self.answered,
            })
        }
        fn totals(&self) -> (u64, u64, f64) {
            (self.answered, 0, 0.0)
        }
    }

    /// A server on a free loopback port; the handle returns when it stops.
    fn start(delay_ms: u64, max: u64) -> (SocketAddr, std::thread::JoinHandle<()>) {
        start_with(delay_ms, max, LIMITS)
    }

    fn start_with(
        delay_ms: u64,
        max: u64,
        limits: Limits,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let l = bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let scorer = Slow {
            delay: Duration::from_millis(delay_ms),
            answered: 0,
        };
        let h = std::thread::spawn(move || serve_with(scorer, l, max, limits).unwrap());
        (addr, h)
    }

    /// Send `raw` (as the one request of its connection: `Connection:
    /// close` is added after the request line), read the whole reply:
    /// (status, body).
    fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, serde_json::Value) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let line = raw.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
        s.write_all(&raw[..line]).unwrap();
        s.write_all(b"Connection: close\r\n").unwrap();
        s.write_all(&raw[line..]).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, serde_json::from_str(body).unwrap())
    }

    fn post(addr: SocketAddr, body: &str) -> (u16, serde_json::Value) {
        let raw = format!(
            "POST /v1/rewards HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        exchange(addr, raw.as_bytes())
    }

    fn health(addr: SocketAddr) -> serde_json::Value {
        let (status, h) = exchange(addr, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status, 200);
        h
    }

    const REQUEST: &str = r#"{"protocol": 1, "competition": "iris", "groups": [["a", "b"]]}"#;

    #[test]
    fn an_oversized_body_is_refused_at_its_header() {
        let (addr, _h) = start(0, 0);
        // 20 GB announced, 2 bytes sent: the reply comes at once, without
        // the server waiting for (or allocating) the rest.
        let t = Instant::now();
        let (status, e) = exchange(
            addr,
            b"POST /v1/rewards HTTP/1.1\r\nHost: x\r\nContent-Length: 20000000000\r\n\r\n{}",
        );
        assert_eq!(status, 413, "{e}");
        assert!(e["error"].as_str().unwrap().contains("20000000000"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        // The same with Expect: 100-continue (curl's way): no 100 first.
        let (status, _) = exchange(
            addr,
            b"POST /v1/rewards HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 99999999999\r\n\r\n",
        );
        assert_eq!(status, 413);
        // A chunked body has no length to judge: refused too.
        let (status, _) = exchange(
            addr,
            b"POST /v1/rewards HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        );
        assert_eq!(status, 411);
        // The service still answers.
        assert_eq!(post(addr, REQUEST).0, 200);
    }

    #[test]
    fn health_answers_while_a_request_is_scored() {
        let (addr, _h) = start(3000, 0);
        let scoring = std::thread::spawn(move || post(addr, REQUEST));
        let t = Instant::now();
        loop {
            let h = health(addr);
            if h["busy"] == true {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(2), "never busy: {h}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let t = Instant::now();
        let h = health(addr);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(
            (h["busy"].clone(), h["requests"].clone()),
            (true.into(), 0.into())
        );
        let (status, r) = scoring.join().unwrap();
        assert_eq!((status, r["requests"].clone()), (200, 1.into()));
        assert_eq!(health(addr)["requests"], 1);
    }

    #[test]
    fn errors_are_typed_and_max_requests_stops_the_server() {
        let (addr, h) = start(0, 1);
        assert_eq!(post(addr, "{not json").0, 400);
        let (status, e) = post(
            addr,
            r#"{"protocol": 1, "competition": "nope", "groups": [["a", "b"]]}"#,
        );
        assert_eq!(status, 422, "{e}");
        assert_eq!(exchange(addr, b"GET /v1/other HTTP/1.1\r\n\r\n").0, 404);
        assert_eq!(exchange(addr, b"GET /v1/rewards HTTP/1.1\r\n\r\n").0, 405);
        assert_eq!(exchange(addr, b"POST /v1/rewards HTTP/1.1\r\n\r\n").0, 411);
        // Refusals count no request; the first answered one ends the server.
        assert_eq!(health(addr)["requests"], 0);
        assert_eq!(post(addr, REQUEST).0, 200);
        h.join().unwrap();
    }

    #[test]
    fn a_silent_client_delays_nobody_and_is_dropped_at_the_header_deadline() {
        let limits = Limits {
            header_deadline: Duration::from_secs(1),
            ..LIMITS
        };
        let (addr, _h) = start_with(0, 0, limits);
        // One client connects and sends nothing; another sends half a
        // request line.
        let mut silent = TcpStream::connect(addr).unwrap();
        let mut partial = TcpStream::connect(addr).unwrap();
        partial.write_all(b"POST /v1/rew").unwrap();
        let t = Instant::now();
        assert_eq!(post(addr, REQUEST).0, 200);
        assert_eq!(health(addr)["requests"], 1);
        assert!(
            t.elapsed() < Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );
        // Both are closed once the deadline passed, with nothing sent back
        // but the close.
        for s in [&mut silent, &mut partial] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            assert!(
                t.elapsed() < Duration::from_secs(4),
                "still open after {:?}",
                t.elapsed()
            );
        }
    }

    #[test]
    fn fifty_concurrent_clients_are_all_answered_and_a_connection_carries_several_requests() {
        let (addr, _h) = start(20, 0);
        let clients: Vec<_> = (0..50)
            .map(|k| {
                std::thread::spawn(move || {
                    if k % 2 == 0 {
                        post(addr, REQUEST).0
                    } else {
                        exchange(addr, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n").0
                    }
                })
            })
            .collect();
        for c in clients {
            assert_eq!(c.join().unwrap(), 200);
        }
        assert_eq!(health(addr)["requests"], 25);
        // Keep-alive: two requests, two replies, one connection.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200").count(), 2, "{text}");
    }
}
