//! The server side: serves any [`VecEnv`] on a ZeroMQ ROUTER socket.
//!
//! One request at a time, in arrival order, from any number of clients. Every
//! request gets a reply: bad input (garbage, truncated headers, another
//! protocol version, a wrong action dimension, an unknown task) gets a typed
//! error reply and the server keeps serving. A batch is validated as a whole
//! before the environment sees any of it, so a rejected request changes no
//! slot. The server must never panic or exit on a client's input.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use wmrl_env::{EnvError, ResetRequest, StepResult, VecEnv};

use crate::error::{BridgeError, Result};
use crate::protocol::{
    ErrorKind, Hello, Op, ReplyHeader, RequestHeader, WireError, decode_request, encode_reply,
    split_result,
};

/// Server settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerConfig {
    /// Name reported in the handshake.
    pub name: String,
    /// How often the serve loop checks its shutdown flag.
    pub poll_interval_ms: u64,
    /// Larger incoming messages are dropped by ZeroMQ (garbage protection);
    /// requests are small (a 7-D action per slot). Default 16 MiB.
    pub max_message_bytes: i64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            name: "wmrl-bridge".into(),
            poll_interval_ms: 100,
            max_message_bytes: 16 << 20,
        }
    }
}

/// Counters a server keeps about what it served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStats {
    pub requests: u64,
    pub error_replies: u64,
    pub resets: u64,
    pub steps: u64,
}

/// A bound server. [`Server::run`] serves until the shutdown flag is set.
pub struct Server<E: VecEnv> {
    socket: zmq::Socket,
    _context: zmq::Context,
    env: E,
    endpoint: String,
    server_id: u64,
    is_reset: Vec<bool>,
    config: ServerConfig,
    shutdown: Arc<AtomicBool>,
    stats: ServerStats,
}

impl<E: VecEnv> std::fmt::Debug for Server<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("endpoint", &self.endpoint)
            .field("num_envs", &self.env.num_envs())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Bind `bind` (e.g. `tcp://127.0.0.1:5555`, or `tcp://127.0.0.1:*` for any
/// free port) and serve `env` until the process ends.
pub fn serve<E: VecEnv>(bind: &str, env: E, config: ServerConfig) -> Result<()> {
    Server::bind(bind, env, config)?.run()
}

fn fresh_id() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // splitmix64 of time and pid: distinct per process start.
    let mut z = nanos ^ (u64::from(std::process::id()) << 32);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<E: VecEnv> Server<E> {
    pub fn bind(bind: &str, env: E, config: ServerConfig) -> Result<Self> {
        let context = zmq::Context::new();
        let socket = context
            .socket(zmq::ROUTER)
            .map_err(|e| BridgeError::zmq(bind, e))?;
        socket
            .set_linger(0)
            .and_then(|()| socket.set_maxmsgsize(config.max_message_bytes))
            .and_then(|()| socket.bind(bind))
            .map_err(|e| BridgeError::zmq(bind, e))?;
        let endpoint = match socket.get_last_endpoint() {
            Ok(Ok(s)) => s,
            _ => bind.to_string(),
        };
        let n = env.num_envs();
        Ok(Self {
            socket,
            _context: context,
            env,
            endpoint,
            server_id: fresh_id(),
            is_reset: vec![false; n],
            config,
            shutdown: Arc::new(AtomicBool::new(false)),
            stats: ServerStats::default(),
        })
    }

    /// The endpoint actually bound (the port filled in for `*`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Set the returned flag to make [`Server::run`] return.
    pub fn shutdown_handle(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Serve until the shutdown flag is set.
    pub fn run(&mut self) -> Result<()> {
        tracing::info!(endpoint = %self.endpoint, envs = self.env.num_envs(), "serving");
        while !self.shutdown.load(Ordering::Relaxed) {
            self.serve_one(self.config.poll_interval_ms as i64)?;
        }
        Ok(())
    }

    /// Wait up to `timeout_ms` for one request and answer it. Returns whether
    /// a request was served.
    pub fn serve_one(&mut self, timeout_ms: i64) -> Result<bool> {
        let ready = self
            .socket
            .poll(zmq::POLLIN, timeout_ms)
            .map_err(|e| BridgeError::zmq(&self.endpoint, e))?;
        if ready == 0 {
            return Ok(false);
        }
        let mut parts = match self.socket.recv_multipart(zmq::DONTWAIT) {
            Ok(p) => p,
            Err(zmq::Error::EAGAIN) => return Ok(false),
            Err(e) => return Err(BridgeError::zmq(&self.endpoint, e)),
        };
        // ROUTER envelope: identity, then (from REQ peers) an empty delimiter.
        if parts.is_empty() {
            return Ok(false);
        }
        let identity = parts.remove(0);
        let delimited = parts.first().is_some_and(Vec::is_empty);
        if delimited {
            parts.remove(0);
        }
        let reply = self.handle(&parts);
        let mut envelope = Vec::with_capacity(reply.len() + 2);
        envelope.push(identity);
        if delimited {
            envelope.push(Vec::new());
        }
        envelope.extend(reply);
        // A peer that disconnected meanwhile is not an error for the server.
        if let Err(e) = self.socket.send_multipart(envelope, 0) {
            tracing::warn!(error = %e, "reply not sent");
        }
        Ok(true)
    }

    /// Answer one request's parts (without envelope). Never panics.
    pub fn handle(&mut self, parts: &[Vec<u8>]) -> Vec<Vec<u8>> {
        self.stats.requests += 1;
        let (header, frames) = match decode_request(parts) {
            Ok(req) => match self.dispatch(&req) {
                Ok(reply) => reply,
                Err(e) => (ReplyHeader::err(req.id, e), Vec::new()),
            },
            Err((id, e)) => (ReplyHeader::err(id, e), Vec::new()),
        };
        if !header.ok {
            self.stats.error_replies += 1;
            if let Some(e) = &header.error {
                tracing::debug!(kind = ?e.kind, message = %e.message, "error reply");
            }
        }
        encode_reply(&header, frames)
    }

    fn check_slots(&self, slots: impl Iterator<Item = u32>) -> Result<Vec<usize>, WireError> {
        let n = self.env.num_envs();
        let mut seen = vec![false; n];
        slots
            .map(|s| {
                let slot = s as usize;
                match seen.get_mut(slot) {
                    None => Err(WireError::new(
                        ErrorKind::BadSlot,
                        format!("slot {slot} out of range: {n} slots"),
                    )),
                    Some(true) => Err(WireError::new(
                        ErrorKind::BadSlot,
                        format!("slot {slot} named twice"),
                    )),
                    Some(s) => {
                        *s = true;
                        Ok(slot)
                    }
                }
            })
            .collect()
    }

    fn dispatch(&mut self, req: &RequestHeader) -> Result<(ReplyHeader, Vec<Vec<u8>>), WireError> {
        let mut reply = ReplyHeader::ok(req.id);
        match req.op {
            Op::Hello => {
                reply.hello = Some(Hello {
                    server: self.config.name.clone(),
                    server_id: self.server_id,
                    num_envs: self.env.num_envs() as u32,
                    spec: self.env.spec().clone(),
                });
                Ok((reply, Vec::new()))
            }
            Op::Ping => Ok((reply, Vec::new())),
            Op::Close => {
                self.is_reset.iter_mut().for_each(|r| *r = false);
                Ok((reply, Vec::new()))
            }
            Op::Reset => {
                let slots = self.check_slots(req.resets.iter().map(|r| r.slot))?;
                let requests: Vec<(usize, ResetRequest)> = slots
                    .iter()
                    .zip(&req.resets)
                    .map(|(&slot, r)| {
                        let rr = ResetRequest {
                            task: r.task as usize,
                            init_state: r.init_state as usize,
                            seed: r.seed,
                        };
                        self.env
                            .spec()
                            .check_reset(&rr)
                            .map(|()| (slot, rr))
                            .map_err(|e| WireError::from_env(&e))
                    })
                    .collect::<Result<_, _>>()?;
                let obs = self
                    .env
                    .reset(&requests)
                    .map_err(|e| WireError::from_env(&e))?;
                if obs.len() != requests.len() {
                    return Err(WireError::new(ErrorKind::Sim, "wrong observation count"));
                }
                self.stats.resets += requests.len() as u64;
                let results = requests
                    .iter()
                    .zip(obs)
                    .map(|((slot, _), obs)| {
                        self.is_reset[*slot] = true;
                        (
                            *slot,
                            StepResult {
                                obs,
                                reward: 0.0,
                                success: false,
                                done: false,
                                truncated: false,
                            },
                        )
                    })
                    .collect();
                self.finish(reply, results)
            }
            Op::Step => {
                let slots = self.check_slots(req.actions.iter().map(|a| a.slot))?;
                let spec = self.env.spec();
                let mut actions = Vec::with_capacity(slots.len());
                for (&slot, a) in slots.iter().zip(&req.actions) {
                    if !self.is_reset[slot] {
                        return Err(WireError::from_env(&EnvError::NotReset { slot }));
                    }
                    let clean = spec
                        .sanitize_action(&a.action)
                        .map_err(|e| WireError::from_env(&e))?;
                    actions.push((slot, clean));
                }
                let results = self
                    .env
                    .step(&actions)
                    .map_err(|e| WireError::from_env(&e))?;
                if results.len() != actions.len() {
                    return Err(WireError::new(ErrorKind::Sim, "wrong result count"));
                }
                self.stats.steps += actions.len() as u64;
                let results = actions
                    .iter()
                    .zip(results)
                    .map(|((slot, _), r)| {
                        if r.done || r.truncated {
                            self.is_reset[*slot] = false;
                        }
                        (*slot, r)
                    })
                    .collect();
                self.finish(reply, results)
            }
        }
    }

    /// Check frame sizes against the spec and move them into message parts.
    fn finish(
        &self,
        mut reply: ReplyHeader,
        results: Vec<(usize, StepResult)>,
    ) -> Result<(ReplyHeader, Vec<Vec<u8>>), WireError> {
        let cams = &self.env.spec().cameras;
        let mut frames = Vec::with_capacity(results.len() * cams.len());
        for (slot, r) in results {
            let ok = r.obs.frames.len() == cams.len()
                && r.obs.frames.iter().zip(cams).all(|(f, c)| {
                    f.width == c.width
                        && f.height == c.height
                        && f.rgb.len() == c.width as usize * c.height as usize * 3
                });
            if !ok {
                return Err(WireError::new(
                    ErrorKind::Sim,
                    format!("slot {slot}: frames do not match the announced cameras"),
                ));
            }
            let (wire, f) = split_result(slot, r);
            reply.results.push(wire);
            frames.extend(f);
        }
        Ok((reply, frames))
    }
}
