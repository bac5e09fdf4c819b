//! The record of an evaluation in progress ([`crate::EvalConfig::record`]):
//! a JSON-lines file whose first line holds the settings that fix the
//! result, then one line per finished episode, appended and flushed to disk
//! as the episode ends. An evaluation that stops early (a failure, a kill)
//! keeps what it finished, and [`crate::EvalConfig::resume`] continues it:
//! the recorded episodes are taken from the record, not run again, and
//! hold their slots for the policy calls they held
//! ([`crate::episodes::run_episodes_after`]), so the rest run as they
//! would have and the report equals an uninterrupted one.
//!
//! Never rewrites a recorded episode: it only appends, after cutting off a
//! last line that an interruption left incomplete.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wmrl_env::ResetRequest;

use crate::episodes::Placement;
use crate::error::{io_err, json_err};
use crate::eval::EpisodeResult;
use crate::{PolicyError, Result};

/// Format version of the record's first line.
const RECORD_VERSION: u32 = 1;

/// Everything a resumed evaluation must share with the one it continues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordSettings {
    /// [`crate::EvalConfig::policy_id`].
    pub policy: String,
    pub suite: String,
    /// Slots of the environment: they fix the schedule and so the samples.
    pub num_envs: usize,
    pub tasks: Vec<usize>,
    pub init_states: Vec<usize>,
    pub repeats: usize,
    pub seed: u64,
    pub temperature: f32,
    pub execute_steps: usize,
    pub max_steps: usize,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    wmrl_eval_record: u32,
    settings: RecordSettings,
}

/// One finished episode as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedEpisode {
    /// Position in the evaluation (task-major, then initial state, then
    /// repeat).
    pub index: usize,
    pub seed: u64,
    #[serde(flatten)]
    pub result: EpisodeResult,
    #[serde(flatten)]
    pub placement: Placement,
    /// Its GIF, if one was written.
    pub gif: Option<PathBuf>,
}

/// An open record, appending.
pub(crate) struct Record {
    path: PathBuf,
    file: std::fs::File,
}

/// Read the record at `path`: its settings and its complete episode lines,
/// and the byte length of those lines (an incomplete last line after them
/// is not counted). `None` when the file is absent or empty.
fn read(path: &Path) -> Result<Option<(RecordSettings, Vec<RecordedEpisode>, u64)>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, e)),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // Bytes, not text: a line cut off mid-character must not fail the rest.
    let mut lines = bytes.split_inclusive(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    let header: Header = serde_json::from_slice(first).map_err(|e| {
        json_err(
            path,
            format!("line 1 is not an evaluation record's header: {e}"),
        )
    })?;
    if header.wmrl_eval_record != RECORD_VERSION {
        return Err(json_err(
            path,
            format!(
                "record version {} (this wmrl writes {RECORD_VERSION})",
                header.wmrl_eval_record
            ),
        ));
    }
    let mut kept = first.len() as u64;
    let mut episodes = Vec::new();
    for (n, line) in lines.enumerate() {
        if !line.ends_with(b"\n") {
            // Cut off mid-write: the episode is run again.
            break;
        }
        let ep: RecordedEpisode = serde_json::from_slice(line)
            .map_err(|e| json_err(path, format!("line {}: {e}", n + 2)))?;
        episodes.push(ep);
        kept += line.len() as u64;
    }
    Ok(Some((header.settings, episodes, kept)))
}

impl Record {
    /// Open the record at `path` for an evaluation of `requests` with
    /// `settings`. With `resume`, the episodes it holds are returned in the
    /// order they were recorded (each checked against its request, none
    /// twice) and new ones are appended;
    /// without, a record holding episodes is an error (they are never
    /// dropped silently), and an empty one is started afresh.
    pub(crate) fn open(
        path: &Path,
        settings: &RecordSettings,
        requests: &[ResetRequest],
        resume: bool,
    ) -> Result<(Self, Vec<RecordedEpisode>)> {
        let mut seen = vec![false; requests.len()];
        let mut done = Vec::new();
        let found = read(path)?;
        let keep = match found {
            Some((old, episodes, kept)) if resume => {
                if let Some(d) = wmrl_run::first_difference(&old, settings, "") {
                    return Err(PolicyError::Input(format!(
                        "{} records an evaluation with other settings ({d}); \
                         it cannot be resumed with these",
                        path.display()
                    )));
                }
                for ep in episodes {
                    let i = ep.index;
                    let want = requests.get(i).ok_or_else(|| {
                        json_err(path, format!("episode {i} beyond the {}", requests.len()))
                    })?;
                    let got = (ep.result.task, ep.result.init_state, ep.seed);
                    if got != (want.task, want.init_state, want.seed) {
                        return Err(json_err(
                            path,
                            format!("episode {i} records {got:?}, the evaluation asks {want:?}"),
                        ));
                    }
                    if std::mem::replace(&mut seen[i], true) {
                        return Err(json_err(path, format!("episode {i} recorded twice")));
                    }
                    done.push(ep);
                }
                Some(kept)
            }
            Some((_, episodes, _)) if !episodes.is_empty() => {
                return Err(PolicyError::RecordExists {
                    path: path.display().to_string(),
                    episodes: episodes.len(),
                });
            }
            _ => None,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        match keep {
            Some(len) => file.set_len(len).map_err(|e| io_err(path, e))?,
            None => {
                file.set_len(0).map_err(|e| io_err(path, e))?;
                let header = Header {
                    wmrl_eval_record: RECORD_VERSION,
                    settings: settings.clone(),
                };
                let line = serde_json::to_string(&header).map_err(|e| json_err(path, e))?;
                file.write_all(format!("{line}\n").as_bytes())
                    .and_then(|()| file.sync_data())
                    .map_err(|e| io_err(path, e))?;
            }
        }
        let record = Self {
            path: path.to_path_buf(),
            file,
        };
        Ok((record, done))
    }

    /// Append one finished episode and flush it to disk.
    pub(crate) fn append(&mut self, ep: &RecordedEpisode) -> Result<()> {
        let line = serde_json::to_string(ep).map_err(|e| json_err(&self.path, e))?;
        self.file
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io_err(&self.path, e))
    }
}

/// The finished episodes a record holds (for a report after a failure);
/// empty when there is no record.
pub fn recorded_episodes(path: &Path) -> Result<Vec<RecordedEpisode>> {
    Ok(read(path)?.map(|(_, e, _)| e).unwrap_or_default())
}
