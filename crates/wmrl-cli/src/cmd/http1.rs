//! The little of HTTP/1.1 the reward service and the label page speak
//! (`wmrl autoresearch serve-rewards`, `wmrl label serve`): one request
//! per connection, its line and headers capped in size and time, one reply
//! (JSON, or a page or an image), then close (after letting the client
//! finish sending, so that a refused client reads its reply rather than a
//! reset).
//!
//! This module must never read more than a cap allows: a body is read only
//! by [`read_to`], up to a length the caller has accepted.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Largest request line and headers.
const MAX_HEAD: usize = 64 << 10;
/// Time a client has to send its request line and headers.
const HEAD_DEADLINE: Duration = Duration::from_secs(30);
/// How long a reply waits for the client to stop sending before closing.
const LINGER: Duration = Duration::from_secs(2);

/// A request line and the headers the service reads.
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    pub content_length: Option<u64>,
    /// A `Transfer-Encoding` was sent (no length to judge the body by).
    pub chunked: bool,
    pub expect_continue: bool,
}

/// A request refused before it reached the service: a status and why.
#[derive(Debug)]
pub(crate) struct Refusal {
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

/// Why reading stopped.
#[derive(Debug)]
pub(crate) enum ReadError {
    Closed,
    TimedOut,
    Io(std::io::Error),
}

impl ReadError {
    pub fn status(&self) -> u16 {
        match self {
            Self::TimedOut => 408,
            _ => 400,
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed => write!(f, "the client closed the connection early"),
            Self::TimedOut => write!(f, "the client sent too slowly"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Read once into `buf`, waiting at most until `deadline`.
fn read_some(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(), ReadError> {
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(ReadError::TimedOut)?;
    stream.set_read_timeout(Some(left)).map_err(ReadError::Io)?;
    let mut chunk = [0u8; 16 << 10];
    match stream.read(&mut chunk) {
        Ok(0) => Err(ReadError::Closed),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(ReadError::TimedOut)
        }
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(ReadError::Io(e)),
    }
}

/// Read until `buf` holds `len` bytes (never more: `len` is at most the cap).
pub(crate) fn read_to(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    len: usize,
    deadline: Instant,
) -> Result<(), ReadError> {
    while buf.len() < len {
        read_some(stream, buf, deadline)?;
    }
    buf.truncate(len);
    Ok(())
}

/// Read the request line and headers; returns them and whatever of the
/// body came with them.
pub(crate) fn read_head(stream: &mut TcpStream) -> Result<(Head, Vec<u8>), Option<Refusal>> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut buf = Vec::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(Some(Refusal::new(431, "request headers too large")));
        }
        match read_some(stream, &mut buf, deadline) {
            Ok(()) => {}
            Err(ReadError::TimedOut) => return Err(Some(Refusal::new(408, "no request in time"))),
            Err(_) => return Err(None),
        }
    };
    let bad = |m: &str| Some(Refusal::new(400, m.to_string()));
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| bad("headers are not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return Err(bad("malformed request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad("HTTP/1.x only"));
    }
    let mut head = Head {
        method: method.to_string(),
        target: target.to_string(),
        content_length: None,
        chunked: false,
        expect_continue: false,
    };
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("malformed header"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value
                .parse()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| bad("malformed Content-Length"))?;
            if head.content_length.is_some_and(|m| m != n) {
                return Err(bad("conflicting Content-Length headers"));
            }
            head.content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = true;
        } else if name.eq_ignore_ascii_case("expect") {
            if !value.eq_ignore_ascii_case("100-continue") {
                return Err(Some(Refusal::new(
                    417,
                    format!("cannot meet Expect: {value}"),
                )));
            }
            head.expect_continue = true;
        }
    }
    Ok((head, buf[end + 4..].to_vec()))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// Tell a client that sent `Expect: 100-continue` to send its body.
pub(crate) fn send_continue(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
}

/// Write a JSON reply, close the sending side, and let the client finish
/// sending (bounded), so that it reads the reply rather than a reset.
pub(crate) fn write_json(stream: &mut TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    write_reply(stream, status, "application/json", body.as_bytes())
}

/// Write a reply of any content type, then close as [`write_json`] does.
/// Nothing is cached: the page and its data change as labels come in.
pub(crate) fn write_reply(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    stream.shutdown(Shutdown::Write)?;
    let deadline = Instant::now() + LINGER;
    let mut sink = Vec::new();
    while sink.len() < (1 << 20) && read_some(stream, &mut sink, deadline).is_ok() {
        sink.clear();
    }
    Ok(())
}
