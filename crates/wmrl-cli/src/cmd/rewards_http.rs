//! HTTP front of `wmrl autoresearch serve-rewards` (docs/autoresearch.md):
//! JSON over HTTP/1.1 so that any trainer's Python reaches it with the
//! standard library. Reward requests are scored one at a time on one thread
//! (the correction loop is sequential); every connection has a thread of its
//! own, so `GET /v1/health` answers from a snapshot while a request is being
//! scored. A body is judged by its header: a `Content-Length` over the cap
//! is refused with 413 before any of the body is read. Every reply closes
//! its connection. A bad request gets a 4xx reply with `{"error": ...}` and
//! changes nothing.
//!
//! This module must never read or hold more of a request than its caps
//! allow, nor let one client's request hold up another's health check.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::Context;
use wmrl_autoresearch::rewards::{PROTOCOL, RewardReply, RewardRequest, RewardService};

use super::http1::{Refusal, read_head, read_to, send_continue, write_json};

/// Largest request body accepted (a group of long solutions is far less).
pub const MAX_BODY: u64 = 16 << 20;
/// Connections served at once; more get 503 at once.
const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send its body.
const BODY_DEADLINE: Duration = Duration::from_secs(120);

/// What scores reward requests: the reward service, or a stand-in in tests.
pub trait Scorer: Send + 'static {
    fn score(&mut self, req: &RewardRequest) -> wmrl_autoresearch::Result<RewardReply>;
    /// Requests answered, real outcomes used, sandbox CPU-seconds: since
    /// the state began.
    fn totals(&self) -> (u64, u64, f64);
}

impl Scorer for RewardService {
    fn score(&mut self, req: &RewardRequest) -> wmrl_autoresearch::Result<RewardReply> {
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
    /// Set once `max_requests` were answered.
    stop: AtomicBool,
    connections: AtomicUsize,
    addr: SocketAddr,
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
    reply: mpsc::Sender<Reply>,
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
}

impl From<Refusal> for Reply {
    fn from(r: Refusal) -> Self {
        Self::error(r.status, r.message)
    }
}

fn write_reply(stream: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    write_json(stream, reply.status, &reply.body.to_string())
}

/// Listen on `bind` (port 0: any free port; the address is in the result).
pub fn bind(bind: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(bind).with_context(|| format!("listening on {bind}"))
}

/// Serve until killed, or until `max_requests` reward requests were
/// answered (0: no limit).
pub fn serve<S: Scorer>(scorer: S, listener: TcpListener, max_requests: u64) -> anyhow::Result<()> {
    let (requests, labels_total, sandbox_cpu_secs_total) = scorer.totals();
    let shared = Arc::new(Shared {
        health: Mutex::new(Health {
            requests,
            labels_total,
            sandbox_cpu_secs_total,
            ..Health::default()
        }),
        stop: AtomicBool::new(false),
        connections: AtomicUsize::new(0),
        addr: listener.local_addr()?,
    });
    let (jobs, inbox) = mpsc::channel::<Job>();
    let scoring = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("score".into())
            .spawn(move || score_loop(scorer, &inbox, &shared, max_requests))?
    };
    for stream in listener.incoming() {
        // The scoring thread ends early only by panicking: stop, and say so.
        if shared.stop.load(Ordering::SeqCst) || scoring.is_finished() {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accepting a connection: {e}");
                continue;
            }
        };
        if shared.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            let mut stream = stream;
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = write_reply(&mut stream, &Reply::error(503, "too many connections"));
            continue;
        }
        let conn_shared = Arc::clone(&shared);
        let jobs = jobs.clone();
        let spawned = std::thread::Builder::new()
            .name("conn".into())
            .spawn(move || {
                connection(stream, &conn_shared, &jobs);
                conn_shared.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            tracing::warn!("starting a connection thread: {e}");
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
    drop(jobs);
    scoring
        .join()
        .map_err(|_| anyhow::anyhow!("the scoring thread panicked"))?;
    Ok(())
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
            Err(e @ wmrl_autoresearch::Error::Config(_)) => Reply::error(422, e.to_string()),
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
        let last = max_requests > 0 && answered >= max_requests;
        if last {
            shared.stop.store(true, Ordering::SeqCst);
        }
        // The client may have gone; its reply is then dropped.
        let _ = job.reply.send(reply);
        if last {
            return;
        }
    }
}

/// One connection: one request, one reply, then close.
fn connection(mut stream: TcpStream, shared: &Shared, jobs: &mpsc::Sender<Job>) {
    let reply = match read_request(&mut stream) {
        Ok(Request::Health) => {
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
        Ok(Request::Rewards(request)) => {
            let (tx, rx) = mpsc::channel();
            shared.health().queued += 1;
            if jobs.send(Job { request, reply: tx }).is_err() {
                shared.health().queued -= 1;
                Reply::error(503, "the service is stopping")
            } else {
                rx.recv()
                    .unwrap_or_else(|_| Reply::error(503, "the service stopped before answering"))
            }
        }
        Err(Some(reply)) => reply,
        // The client went away before sending a whole request.
        Err(None) => return,
    };
    if let Err(e) = write_reply(&mut stream, &reply) {
        tracing::debug!("replying: {e}");
    }
    if shared.stop.load(Ordering::SeqCst) {
        // Wake the accept loop so that it sees the stop.
        let mut addr = shared.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
    }
}

enum Request {
    Health,
    Rewards(RewardRequest),
}

/// Read one request. `Err(Some(reply))`: refuse it with that reply;
/// `Err(None)`: nothing to answer.
fn read_request(stream: &mut TcpStream) -> Result<Request, Option<Reply>> {
    let (head, mut body) = read_head(stream).map_err(|r| r.map(Reply::from))?;
    match (head.method.as_str(), head.target.as_str()) {
        ("GET", "/v1/health") => Ok(Request::Health),
        ("POST", "/v1/rewards") => {
            if head.chunked {
                return Err(Some(Reply::error(
                    411,
                    "a chunked body is not accepted: send Content-Length",
                )));
            }
            let Some(len) = head.content_length else {
                return Err(Some(Reply::error(411, "send Content-Length")));
            };
            if len > MAX_BODY {
                return Err(Some(Reply::error(
                    413,
                    format!("request of {len} bytes; at most {MAX_BODY}"),
                )));
            }
            if head.expect_continue {
                send_continue(stream).map_err(|_| None)?;
            }
            // Bounded by MAX_BODY above.
            let len = len as usize;
            body.truncate(len);
            read_to(stream, &mut body, len, Instant::now() + BODY_DEADLINE).map_err(|e| {
                Some(Reply::error(
                    e.status(),
                    format!("reading the request: {e}"),
                ))
            })?;
            serde_json::from_slice::<RewardRequest>(&body)
                .map(Request::Rewards)
                .map_err(|e| Some(Reply::error(400, format!("not a reward request: {e}"))))
        }
        (_, "/v1/rewards" | "/v1/health") => Err(Some(Reply::error(405, "method not allowed"))),
        (_, other) => Err(Some(Reply::error(404, format!("no endpoint {other}")))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::{Read, Write};

    use super::*;

    /// Scores every candidate 0 after `delay`, counting requests.
    struct Slow {
        delay: Duration,
        answered: u64,
    }

    impl Scorer for Slow {
        fn score(&mut self, req: &RewardRequest) -> wmrl_autoresearch::Result<RewardReply> {
            if req.competition == "nope" {
                return Err(wmrl_autoresearch::Error::Config(
                    "no competition `nope`".into(),
                ));
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
        let l = bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let scorer = Slow {
            delay: Duration::from_millis(delay_ms),
            answered: 0,
        };
        let h = std::thread::spawn(move || serve(scorer, l, max).unwrap());
        (addr, h)
    }

    /// Send `raw`, read the whole reply: (status, body).
    fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, serde_json::Value) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(raw).unwrap();
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
}
