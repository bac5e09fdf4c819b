//! HTTP front of `wmrl autoresearch serve-rewards` (docs/autoresearch.md):
//! JSON over HTTP/1.1 so that any trainer's Python reaches it with the
//! standard library. One request at a time (the correction loop is
//! sequential); a bad request gets a 4xx reply with `{"error": ...}` and
//! changes nothing.

use std::io::Read;

use anyhow::Context;
use wmrl_autoresearch::rewards::{PROTOCOL, RewardRequest, RewardService};

/// Largest request body accepted (a group of long solutions is far less).
pub const MAX_BODY: usize = 16 << 20;

fn json(status: u16, body: &serde_json::Value) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
        .expect("a valid static header");
    tiny_http::Response::from_string(body.to_string())
        .with_status_code(status)
        .with_header(header)
}

fn error(status: u16, message: impl Into<String>) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    json(
        status,
        &serde_json::json!({ "protocol": PROTOCOL, "error": message.into() }),
    )
}

/// Serve until killed, or until `max_requests` reward requests were
/// answered (0: no limit).
pub fn serve(mut service: RewardService, bind: &str, max_requests: u64) -> anyhow::Result<()> {
    let server = tiny_http::Server::http(bind)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("listening on {bind}"))?;
    let addr = server
        .server_addr()
        .to_ip()
        .context("the server has no IP address")?;
    println!("listening on http://{addr}");
    let mut answered = 0u64;
    for mut req in server.incoming_requests() {
        let method = req.method().clone();
        let url = req.url().to_string();
        let reply = match (method, url.as_str()) {
            (tiny_http::Method::Get, "/v1/health") => json(
                200,
                &serde_json::json!({
                    "protocol": PROTOCOL,
                    "status": "ok",
                    "requests": service.requests(),
                    "labels_total": service.ledger().labels,
                    "sandbox_cpu_secs_total": service.ledger().real_cpu_seconds,
                }),
            ),
            (tiny_http::Method::Post, "/v1/rewards") => {
                let mut body = Vec::new();
                let read = req
                    .as_reader()
                    .take(MAX_BODY as u64 + 1)
                    .read_to_end(&mut body);
                match read {
                    Err(e) => error(400, format!("reading the request: {e}")),
                    Ok(n) if n > MAX_BODY => {
                        error(413, format!("request larger than {MAX_BODY} bytes"))
                    }
                    Ok(_) => match serde_json::from_slice::<RewardRequest>(&body) {
                        Err(e) => error(400, format!("not a reward request: {e}")),
                        Ok(r) => match service.score(&r) {
                            Ok(out) => {
                                answered += 1;
                                json(200, &serde_json::to_value(&out)?)
                            }
                            // A request the service refuses is the
                            // client's to fix; anything else is ours.
                            Err(e @ wmrl_autoresearch::Error::Config(_)) => {
                                error(422, e.to_string())
                            }
                            Err(e) => error(500, e.to_string()),
                        },
                    },
                }
            }
            (_, "/v1/rewards" | "/v1/health") => error(405, "method not allowed"),
            (_, other) => error(404, format!("no endpoint {other}")),
        };
        if let Err(e) = req.respond(reply) {
            tracing::warn!("replying: {e}");
        }
        if max_requests > 0 && answered >= max_requests {
            break;
        }
    }
    Ok(())
}
