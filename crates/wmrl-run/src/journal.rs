//! The run directory as the shared loop's [`Journal`]: each step's record
//! appended to `metrics.jsonl`, and checkpoints written whole
//! ([`RunDir::write_checkpoint`]) with one state file for both tracks,
//! [`Saved`].

use serde::{Deserialize, Serialize};
use wmrl_core::{CorrectionLoop, Journal, Ledger, Run, Track};

use crate::records::{Marks, RecordError, append, atomic_write};
use crate::rundir::RunDir;

/// A checkpoint's `state.json`, both tracks: the loop's state (steps done,
/// the method's state, the ledger), how far the record files reached, and
/// the track's own state under `track`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved<S> {
    pub step: usize,
    pub core: CorrectionLoop,
    pub ledger: Ledger,
    #[serde(flatten)]
    pub records: Marks,
    pub track: S,
}

impl RunDir {
    /// The last checkpoint's [`Saved`] state (`what` names the use:
    /// resume, export). A checkpoint of an older layout is named as such.
    pub fn read_saved<S: serde::de::DeserializeOwned>(
        &self,
        what: &str,
    ) -> Result<Saved<S>, RecordError> {
        let v: serde_json::Value = self.read_state(what)?;
        if v.get("track").is_none() && v.get("step").is_some() {
            return Err(RecordError {
                path: self.state().display().to_string(),
                message: "a checkpoint of a wmrl from before 2026-12-04 (no `track` state): \
                          finish the run with that version, or start it again"
                    .into(),
            });
        }
        serde_json::from_value(v).map_err(|e| RecordError {
            path: self.state().display().to_string(),
            message: format!("corrupt checkpoint state: {e}"),
        })
    }
}

/// The run directory `dir` as a [`Journal`]: records to metrics.jsonl,
/// checkpoints to `checkpoint/` (the track's files and `state.json`).
#[derive(Debug, Clone)]
pub struct RunJournal<'a> {
    pub dir: &'a RunDir,
}

impl<T: Track> Journal<T> for RunJournal<'_>
where
    T::Error: From<RecordError>,
{
    fn record(&mut self, record: &T::Record) -> Result<(), T::Error> {
        Ok(append(&self.dir.metrics(), record)?)
    }

    fn checkpoint(&mut self, run: &Run<T>) -> Result<(), T::Error> {
        let saved = Saved {
            step: run.step,
            core: run.core.clone(),
            ledger: run.ledger.clone(),
            records: self.dir.marks(),
            track: run.track.state()?,
        };
        let path = self.dir.state();
        let text = serde_json::to_vec(&saved).map_err(|e| RecordError {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        self.dir.write_checkpoint(|tmp| {
            run.track.save(tmp)?;
            Ok::<_, T::Error>(atomic_write(&tmp.join("state.json"), &text)?)
        })?;
        run.track.checkpointed()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn saved_state_reads_back_and_an_older_layout_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path());
        let core = CorrectionLoop::new(Default::default(), wmrl_core::Arm::Sparse, 0).unwrap();
        let saved = Saved {
            step: 3,
            core,
            ledger: Ledger::default(),
            records: Marks {
                metrics_len: 10,
                ..Marks::default()
            },
            track: vec![1u8, 2],
        };
        let text = serde_json::to_vec(&saved).unwrap();
        run.write_checkpoint(|d| atomic_write(&d.join("state.json"), &text))
            .unwrap();
        let back: Saved<Vec<u8>> = run.read_saved("resume").unwrap();
        assert_eq!(
            (back.step, back.records, back.track),
            (3, saved.records, vec![1, 2])
        );
        // The layout before the track's state had a key of its own.
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("track");
        std::fs::write(run.state(), old.to_string()).unwrap();
        let e = run.read_saved::<Vec<u8>>("resume").unwrap_err();
        assert!(e.message.contains("before 2026-12-04"), "{e}");
        let mut bad = v;
        bad["track"] = serde_json::json!("x");
        std::fs::write(run.state(), bad.to_string()).unwrap();
        let e = run.read_saved::<Vec<u8>>("resume").unwrap_err();
        assert!(e.message.contains("corrupt checkpoint state"), "{e}");
    }
}
