//! Real execution of one solution on one competition: sandbox, then grade.
//! An optional on-disk cache keyed by (competition, code hash, the sandbox
//! interpreter's library set) replays the
//! outcome of a solution that was already run. Solutions are deterministic
//! (every template fixes its seeds), so a replay returns the same grade; the
//! replayed run's measured CPU seconds are charged again, so the ledger still
//! counts every execution the learner asked for.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::competition::Competition;
use crate::error::{Result, io_err};
use crate::grade::{Grade, Ladder, grade};
use crate::sandbox::{Exit, PathViews, Sandbox};

/// The outcome of executing one solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub grade: Grade,
    pub cpu_secs: f64,
    pub wall_secs: f64,
    pub exit: Exit,
    /// Last lines of stderr, for diagnosis.
    pub stderr_tail: String,
    /// Last lines of stdout (what the solution printed).
    #[serde(default)]
    pub stdout_tail: String,
    /// Served from the cache (its cpu_secs are the original run's).
    #[serde(default)]
    pub cached: bool,
}

#[derive(Serialize, Deserialize)]
struct CacheLine {
    key: String,
    outcome: Outcome,
}

/// Sandbox + grader + optional replay cache.
#[derive(Debug)]
pub struct Executor {
    pub sandbox: Sandbox,
    pub ladder: Ladder,
    cache_path: Option<PathBuf>,
    cache: Mutex<HashMap<String, Outcome>>,
    /// [`crate::sandbox::python_fingerprint`] of the sandbox's interpreter,
    /// part of every cache key: a run under another venv (or none) is not
    /// replayed as this one's.
    python: String,
}

/// Part of every cache key: bump it when grading changes, so a replay never
/// returns a grade the current rules would not give. 2: ties with a
/// leaderboard entry count as beating it (MLE-Dojo's rule).
/// 3: the submission is read without following links, only as a regular
/// file within the size limit; a byte-order mark is dropped; bounded
/// reasons (a cache written before replays a symlink to the answer key as a
/// perfect score).
const GRADING_VERSION: &[u8] = b"grading-3";

fn key(python: &str, comp: &Competition, code: &str) -> String {
    let mut h = Sha256::new();
    h.update(GRADING_VERSION);
    h.update(python.as_bytes());
    h.update([0u8]);
    h.update(comp.name().as_bytes());
    h.update([0u8]);
    h.update(code.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Executor {
    pub fn new(sandbox: Sandbox, ladder: Ladder) -> Self {
        let python = crate::sandbox::python_fingerprint(&sandbox.config().python);
        Self {
            python,
            sandbox,
            ladder,
            cache_path: None,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Use (and append to) a JSONL replay cache at `path`.
    pub fn with_cache(mut self, path: &Path) -> Result<Self> {
        let mut map = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                if let Ok(l) = serde_json::from_str::<CacheLine>(line) {
                    map.insert(l.key, l.outcome);
                }
            }
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        self.cache = Mutex::new(map);
        self.cache_path = Some(path.to_path_buf());
        Ok(self)
    }

    /// Execute `code` on `comp` and grade it.
    pub fn execute(&self, comp: &Competition, code: &str) -> Result<Outcome> {
        self.execute_with(comp, code, &PathViews::default())
    }

    /// [`Self::execute`] with the run's files also visible at `views`
    /// (MLE-Dojo-style absolute data and output paths).
    pub fn execute_with(
        &self,
        comp: &Competition,
        code: &str,
        views: &PathViews,
    ) -> Result<Outcome> {
        let k = key(&self.python, comp, code);
        if self.cache_path.is_some()
            && let Ok(map) = self.cache.lock()
            && let Some(o) = map.get(&k)
        {
            return Ok(Outcome {
                cached: true,
                ..o.clone()
            });
        }
        let run = self.sandbox.run_with(code, &comp.public_dir(), views)?;
        let r = &run.report;
        let g = grade(
            comp,
            &self.ladder,
            r.syntax_error,
            r.runtime_error(),
            &run.submission(),
        )?;
        let outcome = Outcome {
            grade: g,
            cpu_secs: r.cpu_secs,
            wall_secs: r.wall_secs,
            exit: r.exit.clone(),
            stderr_tail: tail(&r.stderr, 5),
            stdout_tail: tail(&r.stdout, 20),
            cached: false,
        };
        if let Some(path) = &self.cache_path
            && let Ok(mut map) = self.cache.lock()
        {
            map.insert(k.clone(), outcome.clone());
            let line = serde_json::to_string(&CacheLine {
                key: k,
                outcome: outcome.clone(),
            })
            .unwrap_or_default();
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(f, "{line}");
            }
        }
        Ok(outcome)
    }
}
