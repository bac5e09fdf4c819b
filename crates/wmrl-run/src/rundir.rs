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
//! | `refits.jsonl` | one line per world-model refit (`wmrl.refit`) |
//! | `checkpoint/` | what resuming needs: `state.json` and the track's model files |
//! | `predictor.onnx` | a world model refitted during the run (AutoResearch) |

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::records::{Marks, RecordError, cut_back, len_of};

fn err(path: &Path, message: impl std::fmt::Display) -> RecordError {
    RecordError {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

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
    pub fn refits(&self) -> PathBuf {
        self.dir.join("refits.jsonl")
    }
    /// The last checkpoint's state: `checkpoint/state.json`.
    pub fn state(&self) -> PathBuf {
        self.checkpoint().join("state.json")
    }

    /// A run that checkpointed and did not finish: one to resume.
    pub fn interrupted(&self) -> bool {
        self.state().exists() && !self.summary().exists()
    }

    /// The last checkpoint's state; the error says whether there is none
    /// (`what` names the use: resume, export) or it does not parse.
    pub fn read_state<S: DeserializeOwned>(&self, what: &str) -> Result<S, RecordError> {
        let path = self.state();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            err(
                &self.dir,
                format!("no checkpoint to {what} ({}: {e})", path.display()),
            )
        })?;
        serde_json::from_str(&text)
            .map_err(|e| err(&path, format!("corrupt checkpoint state: {e}")))
    }

    /// Write a checkpoint: `fill` writes everything into a fresh
    /// `checkpoint.partial/`, which then replaces `checkpoint/` by renames,
    /// so a run stopped at any moment keeps one whole checkpoint.
    pub fn write_checkpoint<E: From<RecordError>>(
        &self,
        fill: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<(), E> {
        let ck = self.checkpoint();
        let tmp = self.dir.join("checkpoint.partial");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| err(&tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| err(&tmp, e))?;
        fill(&tmp)?;
        if ck.exists() {
            let old = self.dir.join("checkpoint.old");
            if old.exists() {
                std::fs::remove_dir_all(&old).map_err(|e| err(&old, e))?;
            }
            std::fs::rename(&ck, &old).map_err(|e| err(&ck, e))?;
            std::fs::rename(&tmp, &ck).map_err(|e| err(&ck, e))?;
            std::fs::remove_dir_all(&old).map_err(|e| err(&old, e))?;
        } else {
            std::fs::rename(&tmp, &ck).map_err(|e| err(&ck, e))?;
        }
        Ok(())
    }

    /// How far the record files reach now (for a checkpoint's state).
    pub fn marks(&self) -> Marks {
        Marks {
            metrics_len: len_of(&self.metrics()),
            eval_len: len_of(&self.eval()),
            calibration_len: len_of(&self.calibration()),
            refits_len: len_of(&self.refits()),
        }
    }

    /// Cut every record file back to its mark (a missing file stays
    /// missing): what was written after the checkpoint goes, so resuming
    /// writes it once, not twice. `Marks::default()` empties them for a
    /// fresh run.
    pub fn cut_back_to(&self, m: &Marks) -> Result<(), RecordError> {
        cut_back(&self.metrics(), m.metrics_len)?;
        cut_back(&self.eval(), m.eval_len)?;
        cut_back(&self.calibration(), m.calibration_len)?;
        cut_back(&self.refits(), m.refits_len)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_replace_whole_and_records_cut_back_to_their_marks() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path());
        assert!(!run.interrupted());
        let e = run.read_state::<u64>("resume").unwrap_err();
        assert!(e.message.contains("no checkpoint to resume"), "{e}");
        std::fs::write(run.metrics(), "1\n2\n").unwrap();
        let marks = run.marks();
        assert_eq!(marks.metrics_len, 4);
        assert_eq!((marks.eval_len, marks.refits_len), (0, 0));
        run.write_checkpoint(|d| std::fs::write(d.join("state.json"), "7").map_err(|e| err(d, e)))
            .unwrap();
        assert!(run.interrupted());
        assert_eq!(run.read_state::<u64>("resume").unwrap(), 7);
        // A fill that fails leaves the last whole checkpoint.
        let failed = run.write_checkpoint(|d| {
            std::fs::write(d.join("state.json"), "{").unwrap();
            Err(err(d, "disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(run.read_state::<u64>("resume").unwrap(), 7);
        std::fs::write(run.state(), "{").unwrap();
        let e = run.read_state::<u64>("resume").unwrap_err();
        assert!(e.message.contains("corrupt checkpoint state"), "{e}");
        std::fs::write(run.metrics(), "1\n2\n3\n").unwrap();
        run.cut_back_to(&marks).unwrap();
        assert_eq!(std::fs::read_to_string(run.metrics()).unwrap(), "1\n2\n");
        assert!(!run.eval().exists(), "a missing file stays missing");
        std::fs::write(run.summary(), "{}").unwrap();
        assert!(!run.interrupted(), "a finished run is not resumed");
    }
}
