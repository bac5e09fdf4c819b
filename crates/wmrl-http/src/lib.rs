//! HTTP/1.1 for the label page (`wmrl label serve`) and the reward service
//! (`wmrl autoresearch serve-rewards`), on hyper over tokio
//! (docs/architecture.md says why hyper rather than a framework). hyper
//! does the protocol: parsing, keep-alive, `Expect: 100-continue`, the
//! header deadline, a graceful stop. This module adds what both services
//! share: the connection cap, the body cap judged at the header, the body
//! deadline, and replies that are never cached.
//!
//! Every connection is a task of its own, so a client that sends nothing
//! holds only its own connection (until the header deadline closes it) and
//! never delays another. A body is read only by [`read_body`], and never
//! more of it than the cap allows.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, EXPECT, TRANSFER_ENCODING};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Notify, Semaphore};

/// A reply's body.
pub type Body = Full<Bytes>;

/// Largest request line and headers (hyper answers 431 above it).
const MAX_HEAD: usize = 64 << 10;
/// How long in-flight replies may take to finish once a stop is asked for.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A service's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time a client has to send a request line and headers, counted from
    /// the connection's start or its previous reply; the connection is
    /// closed when it runs out.
    pub header_deadline: Duration,
    /// Time a client has to send the body once its headers are in (408).
    pub body_deadline: Duration,
    /// Largest body, judged by `Content-Length` before any of it is read (413).
    pub max_body: u64,
    /// A request without `Content-Length` is refused (411) rather than
    /// read as empty.
    pub require_length: bool,
    /// Connections open at once; more get 503 and are closed.
    pub max_connections: usize,
}

/// A request refused before it reached the service: a status and why.
#[derive(Debug)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// The parts of a request the services read: method, path with query, body.
#[derive(Debug)]
pub struct Received {
    pub method: String,
    pub target: String,
    pub body: Bytes,
}

/// Read a request's body within `limits`: the length is judged at the
/// header (so a client that announces too much is answered at once, and is
/// never sent `100 Continue`), the body must arrive before the deadline.
pub async fn read_body(req: Request<Incoming>, limits: &Limits) -> Result<Received, Refusal> {
    let (parts, body) = req.into_parts();
    let received = |body| Received {
        method: parts.method.as_str().to_string(),
        target: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string()),
        body,
    };
    if let Some(v) = parts.headers.get(EXPECT)
        && !v.as_bytes().eq_ignore_ascii_case(b"100-continue")
    {
        return Err(Refusal::new(
            417,
            format!(
                "cannot meet Expect: {}",
                String::from_utf8_lossy(v.as_bytes())
            ),
        ));
    }
    if parts.headers.contains_key(TRANSFER_ENCODING) {
        return Err(Refusal::new(
            411,
            "a chunked body is not accepted: send Content-Length",
        ));
    }
    // hyper has refused a malformed or conflicting Content-Length already.
    let len = match parts.headers.get(CONTENT_LENGTH) {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| Refusal::new(400, "malformed Content-Length"))?,
        None if limits.require_length => return Err(Refusal::new(411, "send Content-Length")),
        None => 0,
    };
    if len > limits.max_body {
        return Err(Refusal::new(
            413,
            format!(
                "a body of {len} bytes is over the {}-byte cap",
                limits.max_body
            ),
        ));
    }
    if len == 0 {
        return Ok(received(Bytes::new()));
    }
    // Bounded by max_body above (and by the length hyper enforces).
    let capped = Limited::new(body, limits.max_body as usize);
    match tokio::time::timeout(limits.body_deadline, capped.collect()).await {
        Ok(Ok(b)) => Ok(received(b.to_bytes())),
        Ok(Err(e)) => Err(Refusal::new(400, format!("reading the request: {e}"))),
        Err(_) => Err(Refusal::new(
            408,
            "reading the request: the client sent too slowly",
        )),
    }
}

/// A reply of any content type; nothing is cached (the pages and their
/// data change as labels and requests come in).
pub fn reply(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    if let Ok(v) = content_type.parse() {
        h.insert(CONTENT_TYPE, v);
    }
    h.insert(
        CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

/// A JSON reply.
pub fn json(status: u16, body: &serde_json::Value) -> Response<Body> {
    reply(status, "application/json", body.to_string())
}

/// Serve `handler` on `listener` until `stop` is notified (never, if
/// `None`), then let in-flight replies finish (a few seconds at most).
/// Blocks the calling thread; runs its own tokio runtime on two threads.
pub fn serve<H, F>(
    listener: std::net::TcpListener,
    limits: Limits,
    stop: Option<Arc<Notify>>,
    handler: H,
) -> anyhow::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http")
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    runtime.block_on(accept_loop(listener, limits, stop, handler))
}

async fn stopped(stop: &Option<Arc<Notify>>) {
    match stop {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

async fn accept_loop<H, F>(
    listener: std::net::TcpListener,
    limits: Limits,
    stop: Option<Arc<Notify>>,
    handler: H,
) -> anyhow::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&stop) => break,
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_deadline)
            .max_buf_size(MAX_HEAD);
        let io = TokioIo::new(stream);
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            builder.keep_alive(false);
            let busy = hyper::service::service_fn(|_req| async {
                Ok::<_, Infallible>(json(
                    503,
                    &serde_json::json!({ "error": "too many connections; try again" }),
                ))
            });
            tokio::spawn(async move {
                let _ = builder.serve_connection(io, busy).await;
            });
            continue;
        };
        let h = handler.clone();
        let service = hyper::service::service_fn(move |req| {
            let answer = h(req);
            async move { Ok::<_, Infallible>(answer.await) }
        });
        let conn = graceful.watch(builder.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection: {e}");
            }
            drop(permit);
        });
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(STOP_GRACE) => {
            tracing::warn!("stopping with replies still in flight after {STOP_GRACE:?}");
        }
    }
    Ok(())
}
