//! The run directory both tracks write (docs/architecture.md, "Run
//! directories"), and where a bench keeps each run: `<out>/<arm>/seed<k>/`.
//!
//! | file | what |
//! |---|---|
//! | `run.toml` | the run's resolved settings, `format = N` first, for every kind of run ([`RunDir::settings`]) |
//! | `metrics.jsonl` | one line per training step |
//! | `eval.jsonl` | one line per evaluation |
//! | `calibration.jsonl` | the isotonic map at each evaluation (robot) |
//! | `diagnostics.json` | the correction loop's records (`wmrl_core::Diagnostics`) |
//! | `summary.json` | the finished run's report, written last |
//! | `refits.jsonl` | one line per world-model refit (`wmrl.refit`) |
//! | `checkpoint/` | what resuming needs: `state.json` and the track's model files |
//! | `predictor.onnx` | a world model refitted during the run (AutoResearch) |

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::{ConfigError, is_json, load_versioned, read_recorded_json};
use crate::format::{Absent, Versioned};
use crate::records::{Marks, RecordError, atomic_write, cut_back, len_of};

/// The name of a run directory's recorded settings ([`RunDir::settings`]).
pub const SETTINGS_FILE: &str = "run.toml";

/// A run's settings type: recorded in run.toml, with the keys a later start
/// of the same run may change. Every kind of run compares its settings
/// through [`differs`] (and [`RunDir::against_recorded`]), so what may
/// change is declared once, beside the type.
pub trait RunSettings: Versioned + Serialize + DeserializeOwned {
    /// Dotted keys that may differ between starts of one run: where the
    /// models run (`device`: not what the run computes), and how long it
    /// runs where a run may be extended (`steps`).
    const MAY_CHANGE: &'static [&'static str];
}

/// The first key outside `T::MAY_CHANGE` whose value differs between the
/// settings a run was started with and `now`, as `key: then against now`;
/// `None` when they agree.
pub fn differs<T: RunSettings>(then: &T, now: &T) -> Option<String> {
    crate::config::first_difference_except(then, now, "", T::MAY_CHANGE)
}

/// A run directory's recorded settings against the ones a new start gives
/// it ([`RunDir::against_recorded`]).
#[derive(Debug)]
pub struct Against<T> {
    pub recorded: T,
    /// The file they were read from (run.toml, or an older wmrl's name).
    pub path: PathBuf,
    /// The first difference outside [`RunSettings::MAY_CHANGE`] ([`differs`]).
    pub differs: Option<String>,
}

/// A run's settings as they are recorded ([`RunDir::recorded`]):
/// `run.toml`'s text (`format = N` first), and the name an older wmrl gave
/// the file ([`Versioned::LEGACY_FILE`]), which writing `run.toml` removes
/// so that a directory holds one settings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub text: String,
    legacy: Option<&'static str>,
}

/// Recorded settings at `path`, migrated from their layout and parsed
/// strictly: an older wmrl's `.json`, or TOML.
fn read_settings_at<T: Versioned + DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    if is_json(path) {
        read_recorded_json(path, &[], |t| crate::format::from_json(t, Absent::Recorded))
    } else {
        Ok(load_versioned(path, &[], Absent::Recorded)?.0)
    }
}

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
    /// `run.toml`: the run's settings, the one file every kind of run
    /// records them in (robot and AutoResearch training, SFT, world-model
    /// training, an AutoResearch bench's own settings).
    pub fn settings(&self) -> PathBuf {
        self.dir.join(SETTINGS_FILE)
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

    /// The file that holds this directory's recorded settings of type
    /// `T`: `run.toml`, or in a directory an older wmrl wrote, the name it
    /// gave them then ([`Versioned::LEGACY_FILE`]); `None` when neither is
    /// there.
    pub fn recorded_settings<T: Versioned>(&self) -> Option<PathBuf> {
        std::iter::once(self.settings())
            .chain(T::LEGACY_FILE.map(|f| self.dir.join(f)))
            .find(|p| p.is_file())
    }

    /// This directory's recorded settings, migrated from their layout (a
    /// file without `format` is layout 0) and parsed strictly, with the
    /// file they came from.
    pub fn read_settings<T: Versioned + DeserializeOwned>(
        &self,
    ) -> Result<(T, PathBuf), ConfigError> {
        let path = self.recorded_settings::<T>().ok_or_else(|| ConfigError {
            path: self.dir.display().to_string(),
            message: format!("holds no recorded settings ({SETTINGS_FILE})"),
        })?;
        Ok((read_settings_at(&path)?, path))
    }

    /// This directory's recorded settings against `now` ([`differs`]);
    /// `None` when it records none.
    pub fn against_recorded<T: RunSettings>(
        &self,
        now: &T,
    ) -> Result<Option<Against<T>>, ConfigError> {
        let Some(path) = self.recorded_settings::<T>() else {
            return Ok(None);
        };
        let recorded = read_settings_at(&path)?;
        let differs = differs(&recorded, now);
        Ok(Some(Against {
            recorded,
            path,
            differs,
        }))
    }

    /// `t` as this directory's run.toml, to write ([`RunDir::write_settings`],
    /// [`RunDir::prepare`]); fails only on a value TOML cannot hold (a path
    /// that is not UTF-8), naming the file.
    pub fn recorded<T: Versioned + Serialize>(&self, t: &T) -> Result<Recorded, RecordError> {
        let text = crate::format::to_toml(t)
            .map_err(|e| err(&self.settings(), format!("cannot be written as TOML: {e}")))?;
        Ok(Recorded {
            text,
            legacy: T::LEGACY_FILE,
        })
    }

    /// Write `settings` to `run.toml` atomically, then remove the file an
    /// older wmrl recorded them in, if it is there.
    pub fn write_settings(&self, settings: &Recorded) -> Result<(), RecordError> {
        atomic_write(&self.settings(), settings.text.as_bytes())?;
        if let Some(old) = settings.legacy.map(|f| self.dir.join(f))
            && old.is_file()
        {
            std::fs::remove_file(&old).map_err(|e| err(&old, e))?;
        }
        Ok(())
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

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        steps: usize,
    }

    impl Versioned for Settings {
        const FORMAT: u32 = 1;
        const LEGACY_FILE: Option<&'static str> = Some("old_config.json");
        fn migrate(
            _: u32,
            doc: &mut serde_json::Map<String, serde_json::Value>,
        ) -> Result<(), String> {
            if let Some(n) = doc.remove("n_steps") {
                doc.insert("steps".into(), n);
            }
            Ok(())
        }
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Placed {
        steps: usize,
        device: String,
    }

    impl Versioned for Placed {
        const FORMAT: u32 = 0;
    }

    impl RunSettings for Placed {
        const MAY_CHANGE: &'static [&'static str] = &["device"];
    }

    #[test]
    fn a_later_start_may_change_what_its_type_declares_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path());
        let cpu = Placed {
            steps: 3,
            device: "cpu".into(),
        };
        assert!(
            run.against_recorded(&cpu).unwrap().is_none(),
            "nothing recorded"
        );
        run.write_settings(&run.recorded(&cpu).unwrap()).unwrap();
        let gpu = Placed {
            device: "cuda".into(),
            ..cpu
        };
        let a = run.against_recorded(&gpu).unwrap().unwrap();
        assert_eq!((a.differs, a.recorded.device.as_str()), (None, "cpu"));
        let longer = Placed { steps: 4, ..gpu };
        let a = run.against_recorded(&longer).unwrap().unwrap();
        assert_eq!(a.differs.as_deref(), Some("steps: 3 against 4"));
        assert_eq!(a.path, run.settings());
    }

    #[test]
    fn settings_live_in_run_toml_and_an_older_name_is_read_then_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path());
        let e = run.read_settings::<Settings>().unwrap_err();
        assert!(e.message.contains("no recorded settings (run.toml)"), "{e}");
        // An older wmrl's file (layout 0, its old key) reads through the
        // migration; nothing is written by reading.
        let old = tmp.path().join("old_config.json");
        std::fs::write(&old, r#"{"n_steps": 3}"#).unwrap();
        let (s, from) = run.read_settings::<Settings>().unwrap();
        assert_eq!((s.steps, from), (3, old.clone()));
        assert!(!run.settings().exists());
        // Writing records run.toml, format first, and removes the old file.
        let rec = run.recorded(&Settings { steps: 4 }).unwrap();
        assert_eq!(rec.text, "format = 1\nsteps = 4\n");
        run.write_settings(&rec).unwrap();
        assert!(!old.exists(), "one settings file a directory");
        let (s, from) = run.read_settings::<Settings>().unwrap();
        assert_eq!((s.steps, from), (4, run.settings()));
        // A broken run.toml is an error naming it, not a fall-back.
        std::fs::write(run.settings(), "steps = ").unwrap();
        let e = run.read_settings::<Settings>().unwrap_err();
        assert!(e.path.ends_with("run.toml"), "{e}");
    }

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
