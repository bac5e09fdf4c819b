//! Record files (one JSON value per line: `metrics.jsonl`, `eval.jsonl`,
//! ...) and atomic writes. A checkpoint keeps each record file's length
//! ([`len_of`]); a resumed run cuts the file back to it ([`cut_back`]), so
//! what was written after the checkpoint is written once again, not twice.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A record file that cannot be written or read back; `path` names it.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct RecordError {
    pub path: String,
    pub message: String,
}

fn err(path: &Path, e: impl std::fmt::Display) -> RecordError {
    RecordError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Append `value` as one JSON line.
pub fn append<T: Serialize>(path: &Path, value: &T) -> Result<(), RecordError> {
    let line = serde_json::to_string(value).map_err(|e| err(path, e))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| err(path, e))?;
    writeln!(f, "{line}").map_err(|e| err(path, e))
}

/// Every line of a record file (a missing file: none); a line that does
/// not parse is an error naming the file and the line.
pub fn read_all<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, RecordError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(err(path, e)),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| err(path, format!("bad line {}: {e}", i + 1)))
        })
        .collect()
}

/// A record file's byte length (0 when it is missing).
pub fn len_of(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Cut a record file back to `len` bytes; nothing when it is missing.
pub fn cut_back(path: &Path, len: u64) -> Result<(), RecordError> {
    if !path.exists() {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .map_err(|e| err(path, e))
}

/// How far a run's record files reached at a checkpoint (bytes; a file the
/// run does not keep stays 0). A checkpoint's state holds them flattened
/// (`metrics_len`, `eval_len`, ...); resuming cuts each file back to its
/// mark ([`crate::RunDir::cut_back_to`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Marks {
    pub metrics_len: u64,
    pub eval_len: u64,
    /// The robot track's isotonic maps.
    #[serde(default)]
    pub calibration_len: u64,
    /// World-model refits (`wmrl.refit`, both tracks).
    #[serde(default)]
    pub refits_len: u64,
}

/// Write `bytes` to `path` so a reader never sees half of them: parent
/// directories, a temporary name beside it, then a rename.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    let tmp = path.with_file_name(name);
    std::fs::write(&tmp, bytes).map_err(|e| err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_append_read_and_cut_back_to_a_checkpoint() {
        let tmp = tempfile::tempdir().expect("tmp");
        let p = tmp.path().join("m.jsonl");
        assert!(read_all::<u32>(&p).expect("missing").is_empty());
        append(&p, &1u32).expect("1");
        let kept = len_of(&p);
        append(&p, &2u32).expect("2");
        assert_eq!(read_all::<u32>(&p).expect("read"), vec![1, 2]);
        cut_back(&p, kept).expect("cut");
        assert_eq!(read_all::<u32>(&p).expect("read"), vec![1]);
        std::fs::write(&p, "1\n{oops\n").expect("bad");
        let e = read_all::<u32>(&p).expect_err("bad line");
        assert!(e.to_string().contains("line 2"), "{e}");
        let out = tmp.path().join("sub/out.json");
        atomic_write(&out, b"{}").expect("write");
        assert_eq!(std::fs::read(&out).expect("read"), b"{}");
        assert!(!tmp.path().join("sub/out.json.partial").exists());
    }
}
