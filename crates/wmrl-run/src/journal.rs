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
                message: "a checkpoint of an older wmrl's layout (no `track` state): \
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

/// Whether opening a run directory ([`RunDir::open`]) continues a
/// checkpoint found there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// A fresh run: a directory that holds a checkpoint is refused.
    Never,
    /// Continue the last checkpoint; a directory without one is an error.
    Always,
    /// Continue an interrupted run (a checkpoint and no summary), else
    /// start fresh.
    IfInterrupted,
}

/// What [`RunDir::open`] found: a fresh run, or a resumed one with its
/// checkpoint's state.
#[derive(Debug)]
pub enum Opened<S> {
    Fresh,
    Resumed(Box<Saved<S>>),
}

impl<S> Opened<S> {
    pub fn is_resumed(&self) -> bool {
        matches!(self, Opened::Resumed(_))
    }
}

impl RunDir {
    /// Open this directory for a run, writing nothing (a run that then
    /// fails to load its models leaves the directory as it was): a fresh
    /// run, or the last checkpoint's state when `resume` says so. `differs`
    /// compares the checkpoint with the run's settings and names the first
    /// difference (the key, both values); a checkpoint made under other
    /// settings is refused with that text rather than continued with a mix
    /// of both.
    pub fn open<S: serde::de::DeserializeOwned>(
        &self,
        resume: Resume,
        differs: impl FnOnce(&Saved<S>) -> Option<String>,
    ) -> Result<Opened<S>, RecordError> {
        let resumed = match resume {
            Resume::Never if self.checkpoint().exists() => {
                return Err(RecordError {
                    path: self.dir.display().to_string(),
                    message: "already holds a run; continue it with --resume or pick another --out"
                        .into(),
                });
            }
            Resume::Never => false,
            Resume::Always => true,
            Resume::IfInterrupted => self.interrupted(),
        };
        if !resumed {
            return Ok(Opened::Fresh);
        }
        self.resume(differs).map(|s| Opened::Resumed(Box::new(s)))
    }

    /// The last checkpoint's state for resuming, refused with the text
    /// `differs` gives when it was made under other settings (see
    /// [`RunDir::open`]); writes nothing.
    pub fn resume<S: serde::de::DeserializeOwned>(
        &self,
        differs: impl FnOnce(&Saved<S>) -> Option<String>,
    ) -> Result<Saved<S>, RecordError> {
        let saved = self.read_saved("resume")?;
        match differs(&saved) {
            Some(message) => Err(RecordError {
                path: self.state().display().to_string(),
                message,
            }),
            None => Ok(saved),
        }
    }

    /// Make the directory ready for what [`RunDir::open`] found, once
    /// everything the run needs is loaded. A fresh run: the directory
    /// created, every record file emptied and those in `empty` created.
    /// A resumed run: each record file cut back to the checkpoint's mark,
    /// so what was written after it is written once. `settings`, when
    /// given, is written to `run.toml` in both cases
    /// ([`RunDir::write_settings`]).
    pub fn prepare<S>(
        &self,
        opened: &Opened<S>,
        settings: Option<&crate::rundir::Recorded>,
        empty: &[std::path::PathBuf],
    ) -> Result<(), RecordError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| RecordError {
            path: self.dir.display().to_string(),
            message: e.to_string(),
        })?;
        match opened {
            Opened::Resumed(saved) => self.cut_back_to(&saved.records)?,
            Opened::Fresh => {
                self.cut_back_to(&Marks::default())?;
                for p in empty {
                    atomic_write(p, b"")?;
                }
            }
        }
        match settings {
            Some(s) => self.write_settings(s),
            None => Ok(()),
        }
    }

    /// Close a finished run: its `diagnostics` to diagnostics.json, then
    /// its `summary` to summary.json, last (a bench takes that file for a
    /// finished run), both pretty JSON written atomically.
    pub fn finish<D: Serialize, R: Serialize>(
        &self,
        diagnostics: &D,
        summary: &R,
    ) -> Result<(), RecordError> {
        for (path, value) in [
            (
                self.diagnostics(),
                serde_json::to_string_pretty(diagnostics),
            ),
            (self.summary(), serde_json::to_string_pretty(summary)),
        ] {
            let text = value.map_err(|e| RecordError {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            atomic_write(&path, text.as_bytes())?;
        }
        Ok(())
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
        assert!(e.message.contains("older wmrl's layout"), "{e}");
        let mut bad = v;
        bad["track"] = serde_json::json!("x");
        std::fs::write(run.state(), bad.to_string()).unwrap();
        let e = run.read_saved::<Vec<u8>>("resume").unwrap_err();
        assert!(e.message.contains("corrupt checkpoint state"), "{e}");
    }

    #[test]
    fn opening_a_run_starts_fresh_resumes_or_refuses_and_finishing_writes_the_summary_last() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path().join("run"));
        let same = |_: &Saved<u8>| None;
        // Nothing there: every mode but Always starts fresh.
        assert!(!run.open(Resume::Never, same).unwrap().is_resumed());
        assert!(!run.open(Resume::IfInterrupted, same).unwrap().is_resumed());
        let e = run.open(Resume::Always, same).unwrap_err();
        assert!(e.message.contains("no checkpoint to resume"), "{e}");
        assert!(!run.dir.exists(), "opening writes nothing");
        let fresh = Opened::<u8>::Fresh;
        run.prepare(&fresh, None, &[run.eval()]).unwrap();
        assert_eq!(std::fs::read(run.eval()).unwrap(), b"");
        std::fs::write(run.metrics(), "1\n").unwrap();
        let core = CorrectionLoop::new(Default::default(), wmrl_core::Arm::Sparse, 0).unwrap();
        let saved = Saved {
            step: 1,
            core,
            ledger: Ledger::default(),
            records: run.marks(),
            track: 5u8,
        };
        let text = serde_json::to_vec(&saved).unwrap();
        run.write_checkpoint(|d| atomic_write(&d.join("state.json"), &text))
            .unwrap();
        std::fs::write(run.metrics(), "1\n2\n").unwrap();
        let e = run.open(Resume::Never, same).unwrap_err();
        assert!(e.message.contains("already holds a run"), "{e}");
        let e = run
            .open(Resume::Always, |s: &Saved<u8>| {
                (s.track != 6).then(|| format!("track: {} then, 6 now", s.track))
            })
            .unwrap_err();
        assert!(e.message.contains("track: 5 then, 6 now"), "{e}");
        let opened = run.open(Resume::IfInterrupted, same).unwrap();
        let Opened::Resumed(back) = &opened else {
            panic!("an interrupted run resumes")
        };
        assert_eq!((back.step, back.track), (1, 5));
        run.prepare(&opened, None, &[]).unwrap();
        assert_eq!(std::fs::read_to_string(run.metrics()).unwrap(), "1\n");
        run.finish(&[1, 2], &"done").unwrap();
        assert_eq!(std::fs::read_to_string(run.summary()).unwrap(), "\"done\"");
        assert!(run.diagnostics().exists());
        // A finished run is not continued: IfInterrupted starts fresh.
        assert!(!run.open(Resume::IfInterrupted, same).unwrap().is_resumed());
    }
}
