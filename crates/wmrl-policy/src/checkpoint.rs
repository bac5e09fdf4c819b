//! Checkpoints: `model.safetensors` plus `config.json` in a directory.
//!
//! The safetensors header is checked tensor by tensor before any data is
//! trusted, so a truncated or corrupt file fails with an error naming the
//! first bad tensor rather than a generic parse error.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};

use crate::error::{io_err, json_err};
use crate::{PolicyConfig, PolicyError, Result};

pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";

fn bad(path: &Path, tensor: &str, message: impl Into<String>) -> PolicyError {
    PolicyError::Checkpoint {
        path: path.display().to_string(),
        tensor: tensor.to_string(),
        message: message.into(),
    }
}

fn dtype_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "U8" | "I8" | "BOOL" => 1,
        _ => return None,
    })
}

/// Read and validate a safetensors file; every error names a tensor
/// (`<header>` when the header itself is unreadable).
pub fn read_tensors(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| bad(path, "<file>", e.to_string()))?;
    let header_len = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as usize)
        .ok_or_else(|| bad(path, "<header>", "file shorter than 8 bytes"))?;
    let header_end = 8usize
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| {
            bad(
                path,
                "<header>",
                format!("header length {header_len} exceeds the file"),
            )
        })?;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..header_end])
        .map_err(|e| bad(path, "<header>", format!("not JSON: {e}")))?;
    let obj = header
        .as_object()
        .ok_or_else(|| bad(path, "<header>", "not a JSON object"))?;
    let data_len = bytes.len() - header_end;
    let mut names: Vec<&String> = obj.keys().filter(|k| *k != "__metadata__").collect();
    names.sort();
    for name in names {
        let info = &obj[name.as_str()];
        let dtype = info["dtype"].as_str().unwrap_or("?");
        let size =
            dtype_size(dtype).ok_or_else(|| bad(path, name, format!("unknown dtype {dtype}")))?;
        let shape: Option<Vec<usize>> = info["shape"]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_u64().map(|x| x as usize)).collect());
        let shape = shape.ok_or_else(|| bad(path, name, "shape missing or malformed"))?;
        let offs: Option<Vec<usize>> = info["data_offsets"]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_u64().map(|x| x as usize)).collect());
        let offs = offs
            .filter(|o| o.len() == 2 && o[0] <= o[1])
            .ok_or_else(|| bad(path, name, "data_offsets missing or malformed"))?;
        if offs[1] > data_len {
            return Err(bad(
                path,
                name,
                format!(
                    "data ends at byte {} but the file holds {data_len} data bytes (truncated?)",
                    offs[1]
                ),
            ));
        }
        let want = shape.iter().product::<usize>() * size;
        if offs[1] - offs[0] != want {
            return Err(bad(
                path,
                name,
                format!(
                    "{} data bytes for shape {shape:?} {dtype} (needs {want})",
                    offs[1] - offs[0]
                ),
            ));
        }
    }
    candle_core::safetensors::load_buffer(&bytes, device)
        .map_err(|e| bad(path, "<data>", e.to_string()))
}

/// Write tensors atomically (temporary file, then rename).
pub fn write_tensors(path: &Path, tensors: &HashMap<String, Tensor>) -> Result<()> {
    let tmp = path.with_extension("safetensors.tmp");
    candle_core::safetensors::save(tensors, &tmp)?;
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(value).map_err(|e| json_err(path, e))?;
    wmrl_run::atomic_write(path, s.as_bytes()).map_err(|e| io_err(path, e.message))
}

pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let s = std::fs::read_to_string(path).map_err(|e| io_err(path, e))?;
    serde_json::from_str(&s).map_err(|e| json_err(path, e))
}

pub fn read_config(dir: &Path) -> Result<PolicyConfig> {
    let cfg: PolicyConfig = read_json(&dir.join(CONFIG_FILE))?;
    cfg.validate()?;
    Ok(cfg)
}
