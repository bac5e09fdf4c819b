//! An AutoResearch run directory, laid out as the robot track's
//! (docs/architecture.md, "Run directories"):
//!
//! | file | what |
//! |---|---|
//! | `run.toml` (`wmrl_run::RunDir::settings`) | the run's [`crate::TrainConfig`] |
//! | `metrics.jsonl` | one [`crate::train::StepLog`] per training step |
//! | `eval.jsonl` | one [`crate::train::EvalPoint`] per held-out evaluation |
//! | `diagnostics.json` | the correction loop's records (`wmrl_core::Diagnostics`) |
//! | `summary.json` | the [`crate::TrainReport`], written last: the run is finished |
//! | `checkpoint/state.json` | what resuming needs, after every step |
//! | `predictor.onnx` | with `core.refit.every`, the latest refitted predictor |

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result, io_err};

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.into(),
        source,
    })
}

/// Read a JSON record wmrl wrote (a run's summary.json, a bench's
/// bench.json), migrated from its layout
/// ([`wmrl_run::format`]; none: format 0).
pub(crate) fn read_record<T: serde::de::DeserializeOwned + wmrl_run::Versioned>(
    path: &Path,
) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    wmrl_run::format::from_json(&text, wmrl_run::Absent::Recorded)
        .map_err(|e| Error::Config(format!("{}: {e}", path.display())))
}

/// `value` as the JSON document a record at `path` holds: its fields and
/// its `format`.
pub(crate) fn record_value<T: Serialize + wmrl_run::Versioned>(
    path: &Path,
    value: &T,
) -> Result<serde_json::Value> {
    wmrl_run::format::to_json(value).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
}

/// [`record_value`] as pretty JSON text.
pub(crate) fn record_text<T: Serialize + wmrl_run::Versioned>(
    path: &Path,
    value: &T,
) -> Result<String> {
    serde_json::to_string_pretty(&record_value(path, value)?).map_err(|source| Error::Json {
        path: path.into(),
        source,
    })
}

/// Write a record ([`record_text`]) atomically.
pub(crate) fn write_record<T: Serialize + wmrl_run::Versioned>(
    path: &Path,
    value: &T,
) -> Result<()> {
    Ok(wmrl_run::atomic_write(
        path,
        record_text(path, value)?.as_bytes(),
    )?)
}

/// Write JSON ([`wmrl_run::atomic_write`]: a temporary file and a rename),
/// so an interrupted write never leaves a half file that a resumed bench
/// would read.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|source| Error::Json {
        path: path.into(),
        source,
    })?;
    Ok(wmrl_run::atomic_write(path, text.as_bytes())?)
}
