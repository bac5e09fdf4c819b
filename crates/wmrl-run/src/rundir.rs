//! The run directory both tracks write (docs/architecture.md, "Run
//! directories"), and where a bench keeps each run: `<out>/<arm>/seed<k>/`.
//!
//! | file | what |
//! |---|---|
//! | `config.toml` / `config.json` | the run's resolved settings (robot / AutoResearch) |
//! | `metrics.jsonl` | one line per training step |
//! | `eval.jsonl` | one line per evaluation |
//! | `calibration.jsonl` | the isotonic map at each evaluation (robot) |
//! | `diagnostics.json` | the correction loop's records (`wmrl_core::Diagnostics`) |
//! | `summary.json` | the finished run's report, written last |
//! | `checkpoint/` | what resuming needs |
//! | `predictor.onnx` | a world model refitted during the run (AutoResearch) |

use std::path::{Path, PathBuf};

/// The files of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    pub dir: PathBuf,
}

impl RunDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
    /// `<out>/<arm>/seed<k>`: where a bench keeps a run.
    pub fn in_bench(out: &Path, arm: &str, seed: u64) -> Self {
        Self::new(out.join(arm).join(format!("seed{seed}")))
    }
    pub fn config_toml(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn config_json(&self) -> PathBuf {
        self.dir.join("config.json")
    }
    pub fn metrics(&self) -> PathBuf {
        self.dir.join("metrics.jsonl")
    }
    pub fn eval(&self) -> PathBuf {
        self.dir.join("eval.jsonl")
    }
    pub fn calibration(&self) -> PathBuf {
        self.dir.join("calibration.jsonl")
    }
    pub fn diagnostics(&self) -> PathBuf {
        self.dir.join("diagnostics.json")
    }
    pub fn summary(&self) -> PathBuf {
        self.dir.join("summary.json")
    }
    pub fn checkpoint(&self) -> PathBuf {
        self.dir.join("checkpoint")
    }
    pub fn predictor(&self) -> PathBuf {
        self.dir.join("predictor.onnx")
    }
}
