//! An AutoResearch run directory, laid out as the robot track's
//! (docs/architecture.md, "Run directories"):
//!
//! | file | what |
//! |---|---|
//! | `config.json` (`wmrl_run::RunDir::config_json`) | the run's [`crate::TrainConfig`] |
//! | `metrics.jsonl` | one [`crate::train::StepLog`] per training step |
//! | `eval.jsonl` | one [`crate::train::EvalPoint`] per held-out evaluation |
//! | `diagnostics.json` | the correction loop's records (`wmrl_core::Diagnostics`) |
//! | `summary.json` | the [`crate::TrainReport`], written last: the run is finished |
//! | `checkpoint/state.json` | what resuming needs, after every step |
//! | `predictor.onnx` | with `refit_predictor_every`, the latest refitted predictor |

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
