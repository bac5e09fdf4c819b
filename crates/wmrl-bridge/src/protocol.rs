//! The wire format: message headers, error kinds, and the pure encode and
//! decode functions (no sockets here, so they can be fuzzed).
//!
//! A message is a ZeroMQ multipart message. Part 0 is a msgpack map (the
//! header, fields by name); parts 1.. are raw RGB frames, one per
//! (result, camera) in result order then camera order, each exactly
//! `width * height * 3` bytes as the handshake announced. docs/protocol.md is
//! the normative description; keep the two in step.
//!
//! Decoding must never panic on any input: it returns [`WireError`]s.

use serde::{Deserialize, Serialize};
use wmrl_env::{EnvError, EnvSpec, Frame, Observation, ResetRequest, StepResult};

/// The protocol version this crate speaks. A peer with another version gets
/// a `version` error reply.
pub const PROTOCOL_VERSION: u32 = 1;

/// Operations a client can request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Handshake: the reply carries the server's [`Hello`].
    Hello,
    /// Liveness check; the reply is empty.
    Ping,
    /// Reset the named slots.
    Reset,
    /// Step the named slots once.
    Step,
    /// End the session: every slot needs a reset again. The server keeps serving.
    Close,
}

/// One slot to reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireReset {
    pub slot: u32,
    pub task: u32,
    pub init_state: u32,
    pub seed: u64,
}

/// One slot to step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireAction {
    pub slot: u32,
    pub action: Vec<f32>,
}

/// `nil` equals an absent list (docs/protocol.md).
fn nil_as_empty<'de, D, T>(d: D) -> std::result::Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// Part 0 of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeader {
    /// Protocol version of the sender.
    pub v: u32,
    /// Request id, echoed in the reply.
    pub id: u64,
    pub op: Op,
    #[serde(default, deserialize_with = "nil_as_empty")]
    pub resets: Vec<WireReset>,
    #[serde(default, deserialize_with = "nil_as_empty")]
    pub actions: Vec<WireAction>,
}

/// The handshake reply body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Free-form server name, e.g. `wmrl-serve-sim` or `libero-server`.
    pub server: String,
    /// Random per process start: a changed id means the worker restarted.
    pub server_id: u64,
    /// Slots this server holds.
    pub num_envs: u32,
    pub spec: EnvSpec,
}

/// One slot's result after a reset (reward 0, flags false) or a step. Its
/// frames follow in the message parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireResult {
    pub slot: u32,
    pub reward: f32,
    pub success: bool,
    pub done: bool,
    pub truncated: bool,
    pub proprio: Vec<f32>,
    #[serde(default)]
    pub progress: Option<f32>,
}

/// The kinds of typed error a server (or the decoder) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Undecodable header, missing parts, wrong field types.
    BadMessage,
    /// The request's protocol version is not the server's.
    Version,
    /// Wrong action dimension or a non-finite value.
    BadAction,
    UnknownTask,
    UnknownInitState,
    /// Slot out of range or named twice.
    BadSlot,
    /// Step before reset.
    NotReset,
    /// The simulator itself failed.
    Sim,
}

/// A typed error as it travels in a reply header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireError {
    pub kind: ErrorKind,
    pub message: String,
}

impl WireError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn bad(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadMessage, message)
    }

    /// Classify an environment error for the wire.
    pub fn from_env(e: &EnvError) -> Self {
        let kind = match e {
            EnvError::UnknownTask { .. } => ErrorKind::UnknownTask,
            EnvError::UnknownInitState { .. } => ErrorKind::UnknownInitState,
            EnvError::InvalidAction(_) => ErrorKind::BadAction,
            EnvError::BadSlot { .. } => ErrorKind::BadSlot,
            EnvError::NotReset { .. } => ErrorKind::NotReset,
            EnvError::Protocol(_) => ErrorKind::BadMessage,
            _ => ErrorKind::Sim,
        };
        Self::new(kind, e.to_string())
    }
}

/// Part 0 of a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyHeader {
    /// The server's protocol version (also on `version` errors).
    pub v: u32,
    /// The request id (0 when the request could not be decoded).
    pub id: u64,
    pub ok: bool,
    #[serde(default)]
    pub error: Option<WireError>,
    #[serde(default)]
    pub hello: Option<Hello>,
    #[serde(default)]
    pub results: Vec<WireResult>,
}

impl ReplyHeader {
    pub fn ok(id: u64) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            id,
            ok: true,
            error: None,
            hello: None,
            results: Vec::new(),
        }
    }

    pub fn err(id: u64, error: WireError) -> Self {
        Self {
            ok: false,
            error: Some(error),
            ..Self::ok(id)
        }
    }
}

/// Encode a header as a msgpack map with named fields.
pub fn encode_header<T: Serialize>(header: &T) -> Vec<u8> {
    // Serialising these plain structs into a Vec cannot fail.
    rmp_serde::to_vec_named(header).unwrap_or_default()
}

/// Only the version field, read before the rest so that a peer of another
/// version gets a `version` error even when its header shape differs.
#[derive(Deserialize)]
struct VersionProbe {
    v: u32,
    #[serde(default)]
    id: u64,
}

/// Decode a request's parts (header first). Requests carry no frames, so
/// extra parts are an error.
pub fn decode_request(parts: &[Vec<u8>]) -> Result<RequestHeader, (u64, WireError)> {
    let Some(head) = parts.first() else {
        return Err((0, WireError::bad("empty message")));
    };
    let probe: VersionProbe = rmp_serde::from_slice(head)
        .map_err(|e| (0, WireError::bad(format!("undecodable header: {e}"))))?;
    if probe.v != PROTOCOL_VERSION {
        return Err((
            probe.id,
            WireError::new(
                ErrorKind::Version,
                format!(
                    "protocol version {} not supported: this server speaks {PROTOCOL_VERSION}",
                    probe.v
                ),
            ),
        ));
    }
    let header: RequestHeader = rmp_serde::from_slice(head).map_err(|e| {
        (
            probe.id,
            WireError::bad(format!("undecodable request: {e}")),
        )
    })?;
    if parts.len() != 1 {
        return Err((
            header.id,
            WireError::bad(format!(
                "a request has exactly one part, got {}",
                parts.len()
            )),
        ));
    }
    Ok(header)
}

/// Encode a reply: the header, then each result's frames in camera order.
pub fn encode_reply(header: &ReplyHeader, frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut parts = Vec::with_capacity(1 + frames.len());
    parts.push(encode_header(header));
    parts.extend(frames);
    parts
}

/// Decode a reply header; frames stay in the remaining parts.
pub fn decode_reply_header(parts: &[Vec<u8>]) -> Result<ReplyHeader, WireError> {
    let head = parts.first().ok_or_else(|| WireError::bad("empty reply"))?;
    let header: ReplyHeader = rmp_serde::from_slice(head)
        .map_err(|e| WireError::bad(format!("undecodable reply: {e}")))?;
    if header.v != PROTOCOL_VERSION {
        return Err(WireError::new(
            ErrorKind::Version,
            format!(
                "server speaks protocol {}, this client {PROTOCOL_VERSION}",
                header.v
            ),
        ));
    }
    Ok(header)
}

/// Rebuild per-slot observations from a reply: checks the part count and
/// every frame's size against the spec's cameras.
pub fn decode_results(
    header: &ReplyHeader,
    mut parts: Vec<Vec<u8>>,
    spec: &EnvSpec,
) -> Result<Vec<(usize, StepResult)>, WireError> {
    let n_cams = spec.cameras.len();
    let want = 1 + header.results.len() * n_cams;
    if parts.len() != want {
        return Err(WireError::bad(format!(
            "reply with {} results needs {want} parts, got {}",
            header.results.len(),
            parts.len()
        )));
    }
    let mut frames = parts.drain(1..);
    let mut out = Vec::with_capacity(header.results.len());
    for r in &header.results {
        let mut obs_frames = Vec::with_capacity(n_cams);
        for cam in &spec.cameras {
            let rgb = frames
                .next()
                .ok_or_else(|| WireError::bad("missing frame part"))?;
            let frame = Frame::new(cam.width, cam.height, rgb)
                .map_err(|e| WireError::bad(format!("slot {} camera {}: {e}", r.slot, cam.name)))?;
            obs_frames.push(frame);
        }
        if r.proprio.len() != spec.proprio_dim {
            return Err(WireError::bad(format!(
                "slot {}: proprio has {} values, spec says {}",
                r.slot,
                r.proprio.len(),
                spec.proprio_dim
            )));
        }
        out.push((
            r.slot as usize,
            StepResult {
                obs: Observation {
                    frames: obs_frames,
                    proprio: r.proprio.clone(),
                    progress: r.progress,
                },
                reward: r.reward,
                success: r.success,
                done: r.done,
                truncated: r.truncated,
            },
        ));
    }
    Ok(out)
}

/// Split a result into its wire header and its frames (moved, not copied).
pub fn split_result(slot: usize, r: StepResult) -> (WireResult, Vec<Vec<u8>>) {
    let frames = r.obs.frames.into_iter().map(|f| f.rgb).collect();
    (
        WireResult {
            slot: slot as u32,
            reward: r.reward,
            success: r.success,
            done: r.done,
            truncated: r.truncated,
            proprio: r.obs.proprio,
            progress: r.obs.progress,
        },
        frames,
    )
}

/// The wire form of a reset request for one slot.
pub fn wire_reset(slot: usize, r: &ResetRequest) -> WireReset {
    WireReset {
        slot: slot as u32,
        task: r.task as u32,
        init_state: r.init_state as u32,
        seed: r.seed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nil_lists_equal_absent_ones() {
        #[derive(Serialize)]
        struct Raw {
            v: u32,
            id: u64,
            op: &'static str,
            resets: Option<Vec<WireReset>>,
            actions: Option<Vec<WireAction>>,
        }
        let raw = Raw {
            v: PROTOCOL_VERSION,
            id: 7,
            op: "ping",
            resets: None,
            actions: None,
        };
        let bytes = rmp_serde::to_vec_named(&raw).expect("encode");
        let head = decode_request(&[bytes]).expect("nil resets/actions decode as empty");
        assert!(head.resets.is_empty() && head.actions.is_empty());
        assert_eq!(head.id, 7);
    }

    #[test]
    fn request_round_trips_and_is_a_named_map() {
        let h = RequestHeader {
            v: PROTOCOL_VERSION,
            id: 7,
            op: Op::Step,
            resets: vec![],
            actions: vec![WireAction {
                slot: 3,
                action: vec![0.5; 7],
            }],
        };
        let bytes = encode_header(&h);
        // fixmap marker: a map, not an array, so other languages read names.
        assert_eq!(bytes[0] & 0xf0, 0x80);
        let back = decode_request(&[bytes]).expect("decodes");
        assert_eq!(back, h);
    }

    #[test]
    fn wrong_version_is_a_version_error_even_with_another_shape() {
        #[derive(Serialize)]
        struct Future {
            v: u32,
            id: u64,
            op: String,
            extra: Vec<u8>,
        }
        let bytes = encode_header(&Future {
            v: 2,
            id: 9,
            op: "teleport".into(),
            extra: vec![1, 2],
        });
        let (id, e) = decode_request(&[bytes]).expect_err("rejected");
        assert_eq!(id, 9);
        assert_eq!(e.kind, ErrorKind::Version);
    }

    #[test]
    fn truncated_header_is_bad_message() {
        let h = RequestHeader {
            v: PROTOCOL_VERSION,
            id: 1,
            op: Op::Ping,
            resets: vec![],
            actions: vec![],
        };
        let bytes = encode_header(&h);
        for cut in 0..bytes.len() {
            let (_, e) = decode_request(&[bytes[..cut].to_vec()]).expect_err("truncated");
            assert_eq!(e.kind, ErrorKind::BadMessage, "cut at {cut}");
        }
    }
}
