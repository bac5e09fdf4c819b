//! Labels from people (`labels.source = "human"`, docs/labels.md): the
//! files in a run directory through which a trainer hands anchor rollouts
//! to the label page (`wmrl label serve`) and reads back what a person said.
//!
//! Everything lives under `labels/` in the run directory and is appended,
//! never rewritten, under one lock (`labels/.lock`, an exclusive
//! advisory lock) that the trainer and every page server take for each
//! read-check-append, so a restart of either loses nothing and no label is
//! counted twice:
//!
//! | file | written by | holds |
//! |---|---|---|
//! | `queue.jsonl` | trainer | one [`QueueItem`] per anchor rollout to label |
//! | `frames/<id>-agent.png`, `frames/<id>-wrist.png` | trainer | the rollout's frames as a horizontal strip |
//! | `labels.jsonl` | page server | one [`LabelRecord`] per label or undo |
//! | `consumed.jsonl` | trainer | one [`ConsumedRecord`] per label the run used: final, no undo |
//! | `sim_flags.jsonl` | trainer | the simulator's own success flag ([`SimFlag`]): for tests and scoring a labeller only |
//!
//! This module must never let the page side read `sim_flags.jsonl`: only
//! [`queue::write_sim_flags`] touches it, and [`LabelStore`] has no method
//! that opens it.

pub mod http;
pub mod queue;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The directory inside a run directory.
pub const DIR: &str = "labels";
pub const QUEUE_FILE: &str = "queue.jsonl";
pub const LABELS_FILE: &str = "labels.jsonl";
pub const CONSUMED_FILE: &str = "consumed.jsonl";
/// The simulator's flags: never read by the page server.
pub const SIM_FLAGS_FILE: &str = "sim_flags.jsonl";
pub const FRAMES_DIR: &str = "frames";
const LOCK_FILE: &str = ".lock";

/// A person's verdict on a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Success,
    Failure,
}

impl Verdict {
    /// The real outcome the correction loop reads.
    pub fn outcome(self) -> f64 {
        match self {
            Self::Success => 1.0,
            Self::Failure => 0.0,
        }
    }
}

/// One anchor rollout waiting for a person (a line of `queue.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueItem {
    /// `s<step>-g<group>-m<member>` (0-based), the same on every replay of
    /// the step.
    pub id: String,
    pub step: usize,
    pub group: usize,
    pub member: usize,
    pub task: usize,
    pub init_state: usize,
    pub instruction: String,
    /// The raw world-model score (absent for arms without one). The page
    /// shows it only after the rollout is labelled.
    pub wm_score: Option<f64>,
    /// Frames in each strip, and one frame's size.
    pub frames: usize,
    pub width: u32,
    pub height: u32,
    /// Whether a wrist-camera strip exists beside the agent view's.
    pub wrist: bool,
    /// Unix seconds.
    pub queued_at: f64,
}

/// What a line of `labels.jsonl` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelKind {
    Success,
    Failure,
    /// Undo the rollout's label (refused once the run has used it).
    Retract,
}

/// One line of `labels.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelRecord {
    pub id: String,
    pub label: LabelKind,
    /// Seconds the labeller spent on the rollout before answering.
    pub seconds_to_label: f64,
    pub labeller: String,
    /// Unix seconds.
    pub at: f64,
}

/// One line of `consumed.jsonl`: the run used this label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumedRecord {
    pub id: String,
    pub label: Verdict,
    pub step: usize,
}

/// One line of `sim_flags.jsonl` (tests and labeller scoring only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimFlag {
    pub id: String,
    pub success: bool,
}

/// A label in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Given {
    pub verdict: Verdict,
    pub labeller: String,
    pub seconds_to_label: f64,
}

/// Why the store refused a request.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("no rollout `{0}` in this run's label queue")]
    Unknown(String),
    #[error("rollout `{id}` is already labelled {verdict:?} by {labeller}")]
    AlreadyLabelled {
        id: String,
        verdict: Verdict,
        labeller: String,
    },
    #[error("rollout `{0}` has no label to undo")]
    NotLabelled(String),
    #[error("rollout `{id}` was labelled by {labeller}; only they can undo it")]
    NotYours { id: String, labeller: String },
    #[error("the run already used the label of `{id}` at step {step}: it can no longer be undone")]
    Consumed { id: String, step: usize },
    #[error("i/o error at {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LabelError + '_ {
    move |source| LabelError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Unix seconds now.
pub fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Everything the files say, read under the lock.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// In queue order, each id once.
    pub queue: Vec<QueueItem>,
    /// Labels in force (after undos).
    pub labels: BTreeMap<String, Given>,
    /// Labels the run used, with the step that used them.
    pub consumed: BTreeMap<String, (Verdict, usize)>,
}

impl Snapshot {
    pub fn item(&self, id: &str) -> Option<&QueueItem> {
        self.queue.iter().find(|q| q.id == id)
    }
    /// Queued rollouts with no label yet, in queue order.
    pub fn pending(&self) -> impl Iterator<Item = &QueueItem> {
        self.queue
            .iter()
            .filter(|q| !self.labels.contains_key(&q.id))
    }
}

/// The label files of one run directory.
#[derive(Debug, Clone)]
pub struct LabelStore {
    dir: PathBuf,
}

/// The exclusive lock, held while alive.
struct Locked(File);

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl LabelStore {
    /// The store of the run in `run_dir` (created on first write).
    pub fn new(run_dir: &Path) -> Self {
        Self {
            dir: run_dir.join(DIR),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The agent-view (`wrist == false`) or wrist strip of a rollout.
    pub fn frames_path(&self, id: &str, wrist: bool) -> PathBuf {
        let cam = if wrist { "wrist" } else { "agent" };
        self.dir.join(FRAMES_DIR).join(format!("{id}-{cam}.png"))
    }

    fn lock(&self) -> Result<Locked, LabelError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let p = self.dir.join(LOCK_FILE);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(io(&p))?;
        f.lock().map_err(io(&p))?;
        Ok(Locked(f))
    }

    /// Read every file (under the lock). A run whose labels/ does not exist
    /// yet has none: reading creates nothing, so a reader that starts before
    /// the run (a label page, a labeller) cannot leave a labels/ behind that
    /// the run's creation would refuse as another run's.
    pub fn snapshot(&self) -> Result<Snapshot, LabelError> {
        if !self.dir.exists() {
            return Ok(Snapshot::default());
        }
        let _l = self.lock()?;
        self.read()
    }

    fn read(&self) -> Result<Snapshot, LabelError> {
        let mut s = Snapshot::default();
        for q in read_lines::<QueueItem>(&self.dir.join(QUEUE_FILE))? {
            if s.item(&q.id).is_none() {
                s.queue.push(q);
            }
        }
        for r in read_lines::<LabelRecord>(&self.dir.join(LABELS_FILE))? {
            let verdict = match r.label {
                LabelKind::Retract => {
                    s.labels.remove(&r.id);
                    continue;
                }
                LabelKind::Success => Verdict::Success,
                LabelKind::Failure => Verdict::Failure,
            };
            s.labels.entry(r.id).or_insert(Given {
                verdict,
                labeller: r.labeller,
                seconds_to_label: r.seconds_to_label,
            });
        }
        for c in read_lines::<ConsumedRecord>(&self.dir.join(CONSUMED_FILE))? {
            s.consumed.entry(c.id).or_insert((c.label, c.step));
        }
        Ok(s)
    }

    /// A person's label. Refused for a rollout not in the queue and for one
    /// already labelled (the reply names who labelled it).
    pub fn submit(
        &self,
        id: &str,
        verdict: Verdict,
        labeller: &str,
        seconds_to_label: f64,
    ) -> Result<LabelRecord, LabelError> {
        let _l = self.lock()?;
        let s = self.read()?;
        if s.item(id).is_none() {
            return Err(LabelError::Unknown(id.into()));
        }
        if let Some(g) = s.labels.get(id) {
            return Err(LabelError::AlreadyLabelled {
                id: id.into(),
                verdict: g.verdict,
                labeller: g.labeller.clone(),
            });
        }
        let rec = LabelRecord {
            id: id.into(),
            label: match verdict {
                Verdict::Success => LabelKind::Success,
                Verdict::Failure => LabelKind::Failure,
            },
            seconds_to_label,
            labeller: labeller.into(),
            at: now_secs(),
        };
        append_line(&self.dir.join(LABELS_FILE), &rec)?;
        Ok(rec)
    }

    /// Undo `labeller`'s label of `id`, unless the run already used it.
    pub fn retract(&self, id: &str, labeller: &str) -> Result<LabelRecord, LabelError> {
        let _l = self.lock()?;
        let s = self.read()?;
        if s.item(id).is_none() {
            return Err(LabelError::Unknown(id.into()));
        }
        if let Some(&(_, step)) = s.consumed.get(id) {
            return Err(LabelError::Consumed {
                id: id.into(),
                step,
            });
        }
        let g = s
            .labels
            .get(id)
            .ok_or_else(|| LabelError::NotLabelled(id.into()))?;
        if g.labeller != labeller {
            return Err(LabelError::NotYours {
                id: id.into(),
                labeller: g.labeller.clone(),
            });
        }
        let rec = LabelRecord {
            id: id.into(),
            label: LabelKind::Retract,
            seconds_to_label: 0.0,
            labeller: labeller.into(),
            at: now_secs(),
        };
        append_line(&self.dir.join(LABELS_FILE), &rec)?;
        Ok(rec)
    }

    /// Queue `items` (those not queued yet), after `write_frames` has put
    /// each new item's frames on disk, so a listed rollout always has them.
    pub fn enqueue(
        &self,
        items: &[QueueItem],
        mut write_frames: impl FnMut(&QueueItem) -> Result<(), LabelError>,
    ) -> Result<usize, LabelError> {
        let _l = self.lock()?;
        let s = self.read()?;
        let mut added = 0;
        for it in items {
            if s.item(&it.id).is_some() {
                continue;
            }
            write_frames(it)?;
            append_line(&self.dir.join(QUEUE_FILE), it)?;
            added += 1;
        }
        Ok(added)
    }

    /// The labels of `ids` for step `step`, all or none: when every one is
    /// labelled (or was used before, by an earlier attempt at this step),
    /// the new ones are recorded as used (final) and returned in order.
    pub fn take(&self, ids: &[String], step: usize) -> Result<Option<Vec<Verdict>>, LabelError> {
        let _l = self.lock()?;
        let s = self.read()?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match (s.consumed.get(id), s.labels.get(id)) {
                (Some(&(v, _)), _) => out.push(v),
                (None, Some(g)) => out.push(g.verdict),
                (None, None) => return Ok(None),
            }
        }
        for (id, &v) in ids.iter().zip(&out) {
            if !s.consumed.contains_key(id) {
                append_line(
                    &self.dir.join(CONSUMED_FILE),
                    &ConsumedRecord {
                        id: id.clone(),
                        label: v,
                        step,
                    },
                )?;
            }
        }
        Ok(Some(out))
    }
}

/// Append one JSON line in one write; a torn last line (a crash mid-write)
/// is closed first so that it cannot swallow this one.
fn append_line<T: Serialize>(path: &Path, value: &T) -> Result<(), LabelError> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)
        .map_err(io(path))?;
    let len = f.metadata().map_err(io(path))?.len();
    let mut line = serde_json::to_string(value).map_err(|e| LabelError::Io {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    })?;
    line.push('\n');
    if len > 0 {
        use std::io::{Seek, SeekFrom};
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1)).map_err(io(path))?;
        f.read_exact(&mut last).map_err(io(path))?;
        if last[0] != b'\n' {
            line.insert(0, '\n');
        }
    }
    f.write_all(line.as_bytes()).map_err(io(path))?;
    f.sync_data().map_err(io(path))
}

/// Every parseable line of a JSONL file (missing file: none). A torn or
/// foreign line is skipped with a warning rather than stopping the run.
fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, LabelError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path)(e)),
    };
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| match serde_json::from_str(l) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!("{}: skipping an unreadable line ({e})", path.display());
                None
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str) -> QueueItem {
        QueueItem {
            id: id.into(),
            step: 0,
            group: 0,
            member: 0,
            task: 0,
            init_state: 0,
            instruction: "put the bowl on the plate".into(),
            wm_score: Some(0.5),
            frames: 1,
            width: 2,
            height: 2,
            wrist: false,
            queued_at: 0.0,
        }
    }

    #[test]
    fn labels_are_given_once_undone_only_by_their_author_and_final_once_used() {
        let tmp = tempfile::tempdir().expect("tmp");
        let st = LabelStore::new(tmp.path());
        let n = st
            .enqueue(&[item("s0-g0-m0"), item("s0-g0-m1")], |_| Ok(()))
            .expect("enqueue");
        assert_eq!(n, 2);
        // Queued twice (a resumed trainer): once.
        assert_eq!(st.enqueue(&[item("s0-g0-m0")], |_| Ok(())).expect("re"), 0);
        assert!(matches!(
            st.submit("s9-g0-m0", Verdict::Success, "ann", 1.0),
            Err(LabelError::Unknown(_))
        ));
        st.submit("s0-g0-m0", Verdict::Success, "ann", 1.0)
            .expect("label");
        match st.submit("s0-g0-m0", Verdict::Failure, "bob", 1.0) {
            Err(LabelError::AlreadyLabelled { labeller, .. }) => assert_eq!(labeller, "ann"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            st.retract("s0-g0-m0", "bob"),
            Err(LabelError::NotYours { .. })
        ));
        let ids = vec!["s0-g0-m0".to_string(), "s0-g0-m1".to_string()];
        assert_eq!(st.take(&ids, 0).expect("take"), None, "one is missing");
        st.retract("s0-g0-m0", "ann").expect("undo");
        st.submit("s0-g0-m0", Verdict::Failure, "ann", 2.0)
            .expect("relabel");
        st.submit("s0-g0-m1", Verdict::Success, "bob", 3.0)
            .expect("label");
        let got = st.take(&ids, 0).expect("take");
        assert_eq!(got, Some(vec![Verdict::Failure, Verdict::Success]));
        assert!(matches!(
            st.retract("s0-g0-m1", "bob"),
            Err(LabelError::Consumed { step: 0, .. })
        ));
        // Taken again (the step replayed after a crash): the same labels,
        // recorded once.
        assert_eq!(st.take(&ids, 0).expect("again"), got);
        let consumed =
            std::fs::read_to_string(st.dir().join(CONSUMED_FILE)).expect("consumed file");
        assert_eq!(consumed.lines().count(), 2);
        let s = st.snapshot().expect("snap");
        assert_eq!(s.pending().count(), 0);
        assert_eq!(s.consumed.len(), 2);
    }

    #[test]
    fn a_torn_last_line_loses_no_later_label() {
        let tmp = tempfile::tempdir().expect("tmp");
        let st = LabelStore::new(tmp.path());
        st.enqueue(&[item("a"), item("b")], |_| Ok(()))
            .expect("enqueue");
        st.submit("a", Verdict::Success, "ann", 1.0).expect("a");
        let p = st.dir().join(LABELS_FILE);
        let mut f = OpenOptions::new().append(true).open(&p).expect("open");
        f.write_all(b"{\"id\":\"b\",\"lab").expect("torn");
        st.submit("b", Verdict::Failure, "ann", 1.0).expect("b");
        let s = st.snapshot().expect("snap");
        assert_eq!(s.labels.len(), 2);
        assert_eq!(s.labels["b"].verdict, Verdict::Failure);
    }
}
