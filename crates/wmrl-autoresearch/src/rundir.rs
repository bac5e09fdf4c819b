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

/// How the settings `now` differ from the recorded `then` (read from or
/// going to `path`), leaving out the top-level key `ignore` (the one that
/// may change between starts: a bench's seed count, a run's steps):
/// `key: <then> then, <now> now` for the first differing key, if any.
pub(crate) fn settings_difference<T: Serialize>(
    then: &T,
    now: &T,
    ignore: &str,
    path: &Path,
) -> Result<Option<String>> {
    let value = |c: &T| -> Result<serde_json::Value> {
        let mut v = serde_json::to_value(c).map_err(|source| Error::Json {
            path: path.into(),
            source,
        })?;
        if let Some(m) = v.as_object_mut() {
            m.remove(ignore);
        }
        Ok(v)
    };
    let (was, is) = (value(then)?, value(now)?);
    let lookup = |v: &serde_json::Value, key: &str| {
        wmrl_run::value_at(v, key).unwrap_or_else(|| "(absent)".into())
    };
    Ok(wmrl_run::differing_key(&was, &is).map(|key| {
        format!(
            "{key}: {} then, {} now",
            lookup(&was, &key),
            lookup(&is, &key)
        )
    }))
}
