//! One connection from the pool to a worker: a REQ socket, its health, and
//! the send-to-all / poll-all exchange that steps workers in parallel.
//!
//! A REQ socket whose request timed out cannot send again, so a failed
//! worker's socket is dropped (linger 0) and a fresh one is made for every
//! reconnect probe. A late reply to a dropped socket is discarded by ZeroMQ.
//!
//! Each REQ socket has a ZeroMQ monitor: when the TCP connection to a worker
//! drops (the worker process died, even by SIGKILL), the pending request
//! fails at once instead of waiting for the timeout. A worker whose machine
//! vanishes without closing the connection is caught by the timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wmrl_env::EnvSpec;

use crate::protocol::{
    Hello, Op, PROTOCOL_VERSION, ReplyHeader, RequestHeader, WireError, decode_reply_header,
    encode_header,
};

pub(crate) enum Health {
    Up,
    Down {
        since: Instant,
        reason: String,
        /// A hello in flight on `socket`: (request id, sent at).
        probe: Option<(u64, Instant)>,
        last_probe: Option<Instant>,
    },
    Gone {
        reason: String,
    },
}

pub(crate) struct Worker {
    pub endpoint: String,
    pub socket: Option<Conn>,
    pub health: Health,
    pub num_envs: usize,
    pub server_id: u64,
    pub failures: u64,
    next_id: u64,
}

/// What came back from one worker in an exchange.
pub(crate) enum Outcome {
    /// A reply with `ok: true`: header and all parts (header part included).
    Reply(Box<ReplyHeader>, Vec<Vec<u8>>),
    /// A typed error reply: the worker is fine, the request was not.
    Refused(WireError),
    /// No usable reply: the worker must be marked down.
    Failed(String),
}

/// A REQ socket and the monitor that reports its connection drops.
pub(crate) struct Conn {
    pub req: zmq::Socket,
    monitor: zmq::Socket,
    /// The connection dropped and has not been re-established.
    broken: bool,
}

impl Conn {
    /// Read pending monitor events; returns whether the connection is lost.
    fn lost(&mut self) -> bool {
        while let Ok(parts) = self.monitor.recv_multipart(zmq::DONTWAIT) {
            if let Some(ev) = parts.first().and_then(|p| p.get(..2)) {
                let event = u16::from_le_bytes([ev[0], ev[1]]);
                if event == zmq::SocketEvent::DISCONNECTED.to_raw() {
                    self.broken = true;
                } else if event == zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw() {
                    self.broken = false;
                }
            }
        }
        self.broken
    }
}

static MONITORS: AtomicU64 = AtomicU64::new(0);

fn new_socket(context: &zmq::Context, endpoint: &str) -> Result<Conn, String> {
    let err = |e: zmq::Error| format!("connect {endpoint}: {e}");
    let req = context.socket(zmq::REQ).map_err(err)?;
    let addr = format!(
        "inproc://wmrl-bridge-monitor-{}-{}",
        std::process::id(),
        MONITORS.fetch_add(1, Ordering::Relaxed)
    );
    let events = zmq::SocketEvent::DISCONNECTED.to_raw() as i32
        | zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw() as i32;
    req.monitor(&addr, events).map_err(err)?;
    let monitor = context.socket(zmq::PAIR).map_err(err)?;
    monitor
        .set_linger(0)
        .and_then(|()| monitor.connect(&addr))
        .map_err(err)?;
    req.set_linger(0)
        .and_then(|()| req.set_reconnect_ivl(100))
        .and_then(|()| req.set_reconnect_ivl_max(1000))
        .and_then(|()| req.connect(endpoint))
        .map_err(err)?;
    Ok(Conn {
        req,
        monitor,
        broken: false,
    })
}

impl Worker {
    pub fn new(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_string(),
            socket: None,
            health: Health::Down {
                since: Instant::now(),
                reason: "not connected yet".into(),
                probe: None,
                last_probe: None,
            },
            num_envs: 0,
            server_id: 0,
            failures: 0,
            next_id: 1,
        }
    }

    pub fn is_up(&self) -> bool {
        matches!(self.health, Health::Up)
    }

    pub fn request(&mut self, op: Op) -> RequestHeader {
        self.next_id += 1;
        RequestHeader {
            v: PROTOCOL_VERSION,
            id: self.next_id,
            op,
            resets: Vec::new(),
            actions: Vec::new(),
        }
    }

    /// Send on the live socket. Errors mean the worker is unusable.
    pub fn send(&mut self, header: &RequestHeader) -> Result<(), String> {
        let conn = self.socket.as_mut().ok_or("no socket")?;
        if conn.lost() {
            return Err("connection lost".into());
        }
        conn.req
            .send(encode_header(header), zmq::DONTWAIT)
            .map_err(|e| format!("send: {e}"))
    }

    /// Drop the socket and mark the worker down; returns whether it was up.
    pub fn mark_down(&mut self, reason: &str) -> bool {
        self.socket = None;
        let was_up = self.is_up();
        if was_up {
            self.failures += 1;
        }
        if !matches!(self.health, Health::Gone { .. }) {
            self.health = Health::Down {
                since: match self.health {
                    Health::Down { since, .. } => since,
                    _ => Instant::now(),
                },
                reason: reason.to_string(),
                probe: None,
                last_probe: Some(Instant::now()),
            };
        }
        was_up
    }

    /// Start a hello on a fresh socket (connect and reconnect probes).
    pub fn start_probe(&mut self, context: &zmq::Context) {
        let probe = new_socket(context, &self.endpoint).and_then(|s| {
            self.socket = Some(s);
            let req = self.request(Op::Hello);
            self.send(&req).map(|()| req.id)
        });
        if let Health::Down {
            probe: p,
            last_probe,
            reason,
            ..
        } = &mut self.health
        {
            *last_probe = Some(Instant::now());
            match probe {
                Ok(id) => *p = Some((id, Instant::now())),
                Err(e) => {
                    *reason = e;
                    self.socket = None;
                }
            }
        }
    }

    /// Check a probe without blocking. Returns the hello once it answered.
    pub fn poll_probe(&mut self, connect_timeout: Duration) -> Option<Result<Hello, String>> {
        let Health::Down {
            probe: Some((id, sent)),
            ..
        } = self.health
        else {
            return None;
        };
        let socket = &self.socket.as_ref()?.req;
        match socket.poll(zmq::POLLIN, 0) {
            Ok(n) if n > 0 => {
                let reply = socket
                    .recv_multipart(zmq::DONTWAIT)
                    .map_err(|e| e.to_string())
                    .and_then(|parts| check_hello(&parts, id));
                if reply.is_err() {
                    self.socket = None;
                }
                if let Health::Down { probe, .. } = &mut self.health {
                    *probe = None;
                }
                Some(reply)
            }
            _ if sent.elapsed() > connect_timeout => {
                self.socket = None;
                if let Health::Down { probe, reason, .. } = &mut self.health {
                    *probe = None;
                    *reason = format!(
                        "no handshake reply within {} ms",
                        connect_timeout.as_millis()
                    );
                }
                None
            }
            _ => None,
        }
    }

    /// Accept a hello: the worker is up with fresh (unbound) slots.
    /// Returns whether the server id changed (a restarted process).
    pub fn accept_hello(&mut self, hello: &Hello) -> bool {
        let restarted = self.server_id != 0 && self.server_id != hello.server_id;
        self.server_id = hello.server_id;
        self.num_envs = hello.num_envs as usize;
        self.health = Health::Up;
        restarted
    }
}

fn check_hello(parts: &[Vec<u8>], id: u64) -> Result<Hello, String> {
    let h = decode_reply_header(parts).map_err(|e| e.message)?;
    if h.id != id {
        return Err(format!("reply id {} for request {id}", h.id));
    }
    if !h.ok {
        return Err(h.error.map_or_else(|| "error".into(), |e| e.message));
    }
    h.hello.ok_or_else(|| "hello reply without hello".into())
}

/// Send each request, then poll all workers together until every one
/// answered or `timeout` passed. Workers step in parallel; this thread only
/// waits. Outcomes come back in request order.
pub(crate) fn exchange(
    workers: &mut [Worker],
    requests: Vec<(usize, RequestHeader)>,
    timeout: Duration,
) -> Vec<(usize, Outcome)> {
    let deadline = Instant::now() + timeout;
    let mut out: Vec<(usize, Option<Outcome>)> = Vec::with_capacity(requests.len());
    let mut waiting: Vec<(usize, u64)> = Vec::new(); // (index into out, request id)
    for (w, req) in &requests {
        let sent = workers[*w].send(req);
        match sent {
            Ok(()) => {
                waiting.push((out.len(), req.id));
                out.push((*w, None));
            }
            Err(e) => out.push((*w, Some(Outcome::Failed(e)))),
        }
    }
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        // Two poll items per worker: its REQ socket and its monitor.
        let ready: Vec<(bool, bool)> = {
            let mut items: Vec<zmq::PollItem> = Vec::with_capacity(2 * waiting.len());
            let mut ok = true;
            for (i, _) in &waiting {
                match workers[out[*i].0].socket.as_ref() {
                    Some(c) => {
                        items.push(c.req.as_poll_item(zmq::POLLIN));
                        items.push(c.monitor.as_poll_item(zmq::POLLIN));
                    }
                    None => ok = false,
                }
            }
            if !ok {
                break;
            }
            let polled = zmq::poll(&mut items, left.as_millis().max(1) as i64);
            if polled.is_err() {
                break;
            }
            items
                .chunks(2)
                .map(|c| (c[0].is_readable(), c[1].is_readable()))
                .collect()
        };
        let mut still = Vec::with_capacity(waiting.len());
        for ((i, id), (is_ready, has_event)) in waiting.into_iter().zip(ready) {
            if !is_ready {
                let w = &mut workers[out[i].0];
                if has_event && w.socket.as_mut().is_some_and(Conn::lost) {
                    out[i].1 = Some(Outcome::Failed(
                        "connection lost while waiting for the reply".into(),
                    ));
                } else {
                    still.push((i, id));
                }
                continue;
            }
            let w = &workers[out[i].0];
            let outcome = match w
                .socket
                .as_ref()
                .map(|s| s.req.recv_multipart(zmq::DONTWAIT))
            {
                Some(Ok(parts)) => match decode_reply_header(&parts) {
                    Ok(h) if h.id != id => {
                        Outcome::Failed(format!("reply id {} for request {id}", h.id))
                    }
                    Ok(h) if h.ok => Outcome::Reply(Box::new(h), parts),
                    Ok(h) => Outcome::Refused(
                        h.error
                            .unwrap_or_else(|| WireError::bad("error reply without error")),
                    ),
                    Err(e) => Outcome::Failed(format!("bad reply: {}", e.message)),
                },
                Some(Err(e)) => Outcome::Failed(format!("recv: {e}")),
                None => Outcome::Failed("no socket".into()),
            };
            out[i].1 = Some(outcome);
        }
        waiting = still;
    }
    let ms = timeout.as_millis();
    out.into_iter()
        .map(|(w, o)| {
            (
                w,
                o.unwrap_or_else(|| Outcome::Failed(format!("no reply within {ms} ms"))),
            )
        })
        .collect()
}

/// Connect to every endpoint and handshake, in parallel.
pub(crate) fn handshake_all(
    context: &zmq::Context,
    endpoints: &[String],
    timeout: Duration,
) -> (Vec<Worker>, Vec<Option<Hello>>) {
    let mut workers: Vec<Worker> = endpoints.iter().map(|e| Worker::new(e)).collect();
    let mut hellos = vec![None; workers.len()];
    let mut requests = Vec::new();
    for (i, w) in workers.iter_mut().enumerate() {
        match new_socket(context, &w.endpoint) {
            Ok(s) => {
                w.socket = Some(s);
                requests.push((i, w.request(Op::Hello)));
            }
            Err(e) => {
                w.mark_down(&e);
            }
        }
    }
    for (i, outcome) in exchange(&mut workers, requests, timeout) {
        match outcome {
            Outcome::Reply(h, _) => match h.hello {
                Some(hello) => {
                    workers[i].accept_hello(&hello);
                    hellos[i] = Some(hello);
                }
                None => {
                    workers[i].mark_down("hello reply without hello");
                }
            },
            Outcome::Refused(e) => {
                workers[i].mark_down(&format!("handshake refused: {}", e.message));
            }
            Outcome::Failed(e) => {
                workers[i].mark_down(&e);
            }
        }
    }
    (workers, hellos)
}

/// The spec every worker of a pool must share.
pub(crate) fn same_spec(a: &EnvSpec, b: &EnvSpec) -> bool {
    a == b
}
