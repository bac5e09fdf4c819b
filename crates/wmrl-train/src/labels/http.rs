//! The label page's server (`wmrl label serve`, docs/labels.md): one HTML
//! page with its script, the frames of queued anchor rollouts, and a small
//! JSON API over the run's label files (`wmrl_train::labels`). Every label
//! goes to disk through the store's lock before the reply, so a restart of
//! this server or of the trainer loses nothing; leases (which labeller has
//! which rollout open) and "unsure" deferrals live in memory only.
//!
//! Routes (every one needs `?token=` when the server was started with a
//! token):
//!
//! | route | does |
//! |---|---|
//! | `GET /` | the page |
//! | `GET /api/next?labeller=NAME` | lease the next pending rollout to NAME |
//! | `GET /api/state` | counts, the labelled rollouts' world-model scores, the calibration map fitted to them, AUROC |
//! | `GET /frames/<id>/agent.png`, `/frames/<id>/wrist.png` | a queued rollout's frames (a strip) |
//! | `POST /api/label` `{id, label, labeller, seconds_to_label}` | a label (`success` or `failure`) |
//! | `POST /api/undo` `{id, labeller}` | undo one's own label, until the run used it |
//! | `POST /api/unsure` `{id, labeller}` | give the rollout back, to the end of the queue |
//!
//! This module must never open the run's `labels/sim_flags.jsonl` (the
//! simulator's own flag is hidden from labellers), and never serves a file
//! that is not a queued rollout's frames.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::labels::{LabelError, LabelStore, QueueItem, Snapshot, Verdict};
use serde::Deserialize;
use serde_json::json;

use wmrl_http::{self as http, Limits};

/// The page: HTML, CSS and script in one file, no build step.
const PAGE: &str = include_str!("page.html");
/// The page's limits: bodies of 64 KiB at most (a label is a few hundred
/// bytes), 30 s for the headers and for a body, 64 connections at once
/// (a browser keeps a few open per tab).
pub const LIMITS: Limits = Limits {
    header_deadline: Duration::from_secs(30),
    body_deadline: Duration::from_secs(30),
    max_body: 64 << 10,
    require_length: false,
    max_connections: 64,
};
/// Longest labeller name.
const MAX_NAME: usize = 64;

/// A reply: status, content type, body.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Reply {
    fn json(status: u16, v: &serde_json::Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: v.to_string().into_bytes(),
        }
    }
    fn ok(v: serde_json::Value) -> Self {
        Self::json(200, &v)
    }
    fn error(status: u16, message: impl Into<String>) -> Self {
        Self::json(status, &json!({ "error": message.into() }))
    }
}

impl From<LabelError> for Reply {
    fn from(e: LabelError) -> Self {
        let status = match &e {
            LabelError::Unknown(_) => 404,
            LabelError::AlreadyLabelled { .. }
            | LabelError::NotLabelled(_)
            | LabelError::NotYours { .. }
            | LabelError::Consumed { .. } => 409,
            LabelError::Io { .. } => 500,
        };
        Self::error(status, e.to_string())
    }
}

/// Who has which rollout open, and what was sent back as unsure.
#[derive(Default)]
struct Leases {
    /// id -> (labeller, until).
    open: HashMap<String, (String, Instant)>,
    /// id -> order of deferral (later: further back).
    deferred: HashMap<String, u64>,
    next_deferral: u64,
}

/// The server's state (shared by the connection threads).
pub struct LabelServer {
    run_dir: PathBuf,
    store: LabelStore,
    token: Option<String>,
    lease: Duration,
    leases: Mutex<Leases>,
    calibration: wmrl_core::config::CalibrationConfig,
    steps: usize,
}

impl LabelServer {
    /// The server of the run in `run_dir`, which must be a run with
    /// `labels.source = "human"`.
    pub fn open(run_dir: &Path, token: Option<String>, lease: Duration) -> anyhow::Result<Self> {
        let (cfg, cfg_path) = crate::TrainConfig::recorded_in(&wmrl_run::RunDir::new(run_dir))
            .map_err(|e| {
            anyhow::anyhow!(
                "{}: not a wmrl train run directory ({e}); start the run first (`wmrl train --config ... --set labels.source=\"human\" --out DIR`)",
                run_dir.display()
            )
        })?;
        if cfg.labels.source != crate::LabelSource::Human {
            anyhow::bail!(
                "{}: this run reads the simulator's success flag (labels.source = \"sim\"); labels given here would never be used. Start a run with --set labels.source=\"human\"",
                cfg_path.display()
            );
        }
        Ok(Self {
            run_dir: run_dir.to_path_buf(),
            store: LabelStore::new(run_dir),
            token,
            lease,
            leases: Mutex::new(Leases::default()),
            calibration: cfg.wmrl.calibration.clone(),
            steps: cfg.steps,
        })
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Answer one request.
    pub fn handle(&self, method: &str, target: &str, body: &[u8]) -> Reply {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let q = parse_query(query);
        if let Some(t) = &self.token
            && q.get("token").map(String::as_str) != Some(t.as_str())
        {
            return Reply::error(
                403,
                "this server needs the token it printed at start: open the URL with ?token=...",
            );
        }
        let result = match (method, path) {
            ("GET", "/") | ("GET", "/index.html") => {
                return Reply {
                    status: 200,
                    content_type: "text/html; charset=utf-8",
                    body: PAGE.as_bytes().to_vec(),
                };
            }
            ("GET", "/api/state") => self.state(),
            ("GET", "/api/next") => match q.get("labeller") {
                Some(n) => self.next(n),
                None => Err(Reply::error(400, "missing ?labeller=NAME")),
            },
            ("POST", "/api/label") => self.label(body),
            ("POST", "/api/undo") => self.undo(body),
            ("POST", "/api/unsure") => self.unsure(body),
            ("GET", p) if p.starts_with("/frames/") => return self.frames(p),
            (_, "/" | "/api/state" | "/api/next" | "/api/label" | "/api/undo" | "/api/unsure") => {
                Err(Reply::error(
                    405,
                    format!("{method} is not allowed on {path}"),
                ))
            }
            _ => Err(Reply::error(404, format!("no such page: {path}"))),
        };
        result.unwrap_or_else(|r| r)
    }

    fn snapshot(&self) -> Result<Snapshot, Reply> {
        self.store.snapshot().map_err(Reply::from)
    }

    fn state(&self) -> Result<Reply, Reply> {
        let s = self.snapshot()?;
        let mut pairs = Vec::new();
        let mut labelled = Vec::new();
        let mut labellers: HashMap<&str, usize> = HashMap::new();
        for q in &s.queue {
            if let Some(g) = s.labels.get(&q.id) {
                *labellers.entry(g.labeller.as_str()).or_default() += 1;
                let y = g.verdict.outcome();
                if let Some(x) = q.wm_score {
                    pairs.push((x, y));
                }
                labelled.push(json!({
                    "id": q.id, "step": q.step, "wm_score": q.wm_score,
                    "label": g.verdict, "labeller": g.labeller,
                    "used": s.consumed.contains_key(&q.id),
                }));
            }
        }
        let (auroc, informative) = wmrl_core::rank::concordance(&pairs);
        let (xs, ys): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        let map = wmrl_core::calibration::fit_map(&self.calibration, &xs, &ys).map(|m| {
            let (kx, ky) = m.knots();
            json!({ "xs": kx, "ys": ky })
        });
        let run = wmrl_run::RunDir::new(&self.run_dir);
        let steps_done = wmrl_run::bench::steps_done(&run, u64::MAX);
        let pending = s.pending().count();
        Ok(Reply::ok(json!({
            "run": self.run_dir.display().to_string(),
            "queued": s.queue.len(),
            "pending": pending,
            "labelled": s.labels.len(),
            "used": s.consumed.len(),
            "steps_done": steps_done,
            "steps": self.steps,
            "finished": run.summary().exists(),
            "labellers": labellers,
            "labelled_rollouts": labelled,
            "auroc": auroc,
            "auroc_pairs": informative,
            "calibration": map,
        })))
    }

    fn next(&self, labeller: &str) -> Result<Reply, Reply> {
        let labeller = check_name(labeller)?;
        let s = self.snapshot()?;
        let now = Instant::now();
        let mut l = self.leases();
        l.open.retain(|id, (who, until)| {
            *until > now && who != labeller && !s.labels.contains_key(id)
        });
        let mut free: Vec<(u64, usize, &QueueItem)> = s
            .pending()
            .enumerate()
            .filter(|(_, q)| !l.open.contains_key(&q.id))
            .map(|(k, q)| (l.deferred.get(&q.id).copied().unwrap_or(0), k, q))
            .collect();
        free.sort_by_key(|&(d, k, _)| (d, k));
        let Some(&(_, _, q)) = free.first() else {
            let pending = s.pending().count();
            let message = if pending > 0 {
                format!("all {pending} pending rollouts are open with other labellers")
            } else {
                "nothing to label: the trainer queues the next anchor rollouts when it reaches them"
                    .into()
            };
            return Ok(Reply::ok(json!({ "item": null, "message": message })));
        };
        l.open
            .insert(q.id.clone(), (labeller.to_string(), now + self.lease));
        // The world model's score stays hidden until the rollout is labelled.
        Ok(Reply::ok(json!({
            "item": {
                "id": q.id, "step": q.step, "group": q.group, "member": q.member,
                "task": q.task, "init_state": q.init_state,
                "instruction": q.instruction, "frames": q.frames,
                "width": q.width, "height": q.height, "wrist": q.wrist,
            },
            "lease_secs": self.lease.as_secs(),
        })))
    }

    fn label(&self, body: &[u8]) -> Result<Reply, Reply> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Req {
            id: String,
            label: Verdict,
            labeller: String,
            #[serde(default)]
            seconds_to_label: f64,
        }
        let r: Req = parse_body(body)?;
        let labeller = check_name(&r.labeller)?;
        if !(r.seconds_to_label.is_finite() && r.seconds_to_label >= 0.0) {
            return Err(Reply::error(400, "seconds_to_label must be >= 0"));
        }
        {
            let l = self.leases();
            if let Some((who, until)) = l.open.get(&r.id)
                && who != labeller
                && *until > Instant::now()
            {
                let left = until.saturating_duration_since(Instant::now()).as_secs();
                return Err(Reply::error(
                    409,
                    format!(
                        "{who} has rollout `{}` open (for {left} s more); take the next one",
                        r.id
                    ),
                ));
            }
        }
        let rec = self
            .store
            .submit(&r.id, r.label, labeller, r.seconds_to_label)?;
        self.leases().open.remove(&r.id);
        Ok(Reply::ok(json!({ "ok": true, "record": rec })))
    }

    fn undo(&self, body: &[u8]) -> Result<Reply, Reply> {
        let r: IdReq = parse_body(body)?;
        let labeller = check_name(&r.labeller)?;
        let rec = self.store.retract(&r.id, labeller)?;
        Ok(Reply::ok(json!({ "ok": true, "record": rec })))
    }

    fn unsure(&self, body: &[u8]) -> Result<Reply, Reply> {
        let r: IdReq = parse_body(body)?;
        let labeller = check_name(&r.labeller)?;
        let s = self.snapshot()?;
        if s.item(&r.id).is_none() {
            return Err(LabelError::Unknown(r.id).into());
        }
        if let Some(g) = s.labels.get(&r.id) {
            return Err(Reply::error(
                409,
                format!(
                    "rollout `{}` is already labelled {:?} by {}; undo it first",
                    r.id, g.verdict, g.labeller
                ),
            ));
        }
        let mut l = self.leases();
        if l.open.get(&r.id).is_some_and(|(who, _)| who == labeller) {
            l.open.remove(&r.id);
        }
        l.next_deferral += 1;
        let d = l.next_deferral;
        l.deferred.insert(r.id, d);
        Ok(Reply::ok(json!({ "ok": true })))
    }

    fn frames(&self, path: &str) -> Reply {
        let rest = &path["/frames/".len()..];
        let Some((id, cam)) = rest.split_once('/') else {
            return Reply::error(404, "frames are at /frames/<id>/agent.png or wrist.png");
        };
        let wrist = match cam {
            "agent.png" => false,
            "wrist.png" => true,
            _ => return Reply::error(404, "frames are at /frames/<id>/agent.png or wrist.png"),
        };
        // Only a queued rollout's frames: the id is checked against the
        // queue, never joined into a path unchecked.
        let s = match self.snapshot() {
            Ok(s) => s,
            Err(r) => return r,
        };
        if s.item(id).is_none() {
            return Reply::from(LabelError::Unknown(id.to_string()));
        }
        match std::fs::read(self.store.frames_path(id, wrist)) {
            Ok(b) => Reply {
                status: 200,
                content_type: "image/png",
                body: b,
            },
            Err(e) => Reply::error(404, format!("no {cam} frames for `{id}`: {e}")),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdReq {
    id: String,
    labeller: String,
}

fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Reply> {
    serde_json::from_slice(body).map_err(|e| Reply::error(400, format!("malformed request: {e}")))
}

fn check_name(name: &str) -> Result<&str, Reply> {
    let n = name.trim();
    if n.is_empty() || n.len() > MAX_NAME || n.chars().any(char::is_control) {
        return Err(Reply::error(
            400,
            format!("a labeller name of 1-{MAX_NAME} printable characters is needed"),
        ));
    }
    Ok(n)
}

/// `a=1&b=x%20y` as a map (later keys win).
fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
            (b'+', _, _) => out.push(b' '),
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 2;
            }
            (c, _, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Serve until killed.
pub fn serve(server: Arc<LabelServer>, listener: TcpListener) -> anyhow::Result<()> {
    serve_with(server, listener, LIMITS)
}

/// [`serve`] under other limits (tests shorten the deadlines).
pub fn serve_with(
    server: Arc<LabelServer>,
    listener: TcpListener,
    limits: Limits,
) -> anyhow::Result<()> {
    let handler = move |req: hyper::Request<hyper::body::Incoming>| {
        let server = Arc::clone(&server);
        async move {
            let got = match http::read_body(req, &limits).await {
                Ok(got) => got,
                Err(r) => return http::json(r.status, &json!({ "error": r.message })),
            };
            // The store's reads and writes block on files and their lock:
            // off the runtime's threads.
            let answered = tokio::task::spawn_blocking(move || {
                server.handle(&got.method, &got.target, &got.body)
            })
            .await;
            match answered {
                Ok(r) => http::reply(r.status, r.content_type, r.body),
                Err(e) => http::json(500, &json!({ "error": format!("the request failed: {e}") })),
            }
        }
    };
    http::serve(listener, limits, None, handler)
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
