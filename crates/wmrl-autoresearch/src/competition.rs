//! Competitions in MLE-Dojo's folder layout and the suite that lists them.
//!
//! ```text
//! <dir>/data/public/{description.txt, train.csv, test.csv, sample_submission.csv}
//! <dir>/data/private/{test_answer.csv, public_leaderboard.csv, private_leaderboard.csv}
//! <dir>/info/{description.txt, public_leaderboard.csv, private_leaderboard.csv}
//! <dir>/utils/{metric.py, prepare.py}   (MLE-Dojo's registry and grader)
//! <dir>/meta.json   (metric, task, split, meta-features: wmrl's own)
//! ```
//! Leaderboards are `rank,score,team` (MLE-Dojo reads the second column; wmrl
//! reads the column named `score`).
//! The suite wmrl ships is built by `envs/mledojo/build_suite.py`; its
//! leaderboards come from a documented population of reference submissions,
//! not from people.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io_err};
use crate::table::Table;

/// Number of meta-features every competition carries (see
/// `META_FEATURE_NAMES` in `envs/mledojo/build_suite.py`).
pub const N_META: usize = 12;

/// Classification or regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    Classification,
    Regression,
}

/// The competition's metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Accuracy,
    F1Macro,
    Rmse,
    Mae,
    R2,
}

impl Metric {
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Accuracy | Metric::F1Macro | Metric::R2)
    }
}

/// Which part of the suite a competition belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Train,
    Heldout,
}

/// `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompetitionMeta {
    pub name: String,
    pub task: Task,
    pub metric: Metric,
    pub split: Split,
    pub id_column: String,
    pub target_column: String,
    pub n_train: usize,
    pub n_test: usize,
    pub n_features: usize,
    #[serde(default)]
    pub n_classes: usize,
    pub meta_features: Vec<f32>,
}

/// One leaderboard: scores, best first.
#[derive(Debug, Clone, PartialEq)]
pub struct Leaderboard {
    pub scores: Vec<f64>,
}

/// A competition folder, its metadata and its two leaderboards.
#[derive(Debug, Clone)]
pub struct Competition {
    pub dir: PathBuf,
    pub meta: CompetitionMeta,
    pub public_leaderboard: Leaderboard,
    pub private_leaderboard: Leaderboard,
}

fn read_leaderboard(path: &Path) -> Result<Leaderboard> {
    let t = Table::read(path)?;
    let col = t.column("score").ok_or_else(|| Error::Csv {
        path: path.into(),
        reason: "no score column".into(),
    })?;
    let scores = t
        .rows
        .iter()
        .map(|r| {
            r[col].parse::<f64>().map_err(|e| Error::Csv {
                path: path.into(),
                reason: format!("score {:?}: {e}", r[col]),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if scores.is_empty() {
        return Err(Error::Csv {
            path: path.into(),
            reason: "empty leaderboard".into(),
        });
    }
    Ok(Leaderboard { scores })
}

impl Competition {
    /// Load a competition folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let meta_path = dir.join("meta.json");
        let text = std::fs::read_to_string(&meta_path).map_err(io_err(&meta_path))?;
        let meta: CompetitionMeta = serde_json::from_str(&text).map_err(|source| Error::Json {
            path: meta_path.clone(),
            source,
        })?;
        if meta.meta_features.len() != N_META {
            return Err(Error::Competition {
                name: meta.name.clone(),
                reason: format!("{} meta-features, want {N_META}", meta.meta_features.len()),
            });
        }
        // Best first, whatever the file's order (MLE-Dojo sorts too).
        let hib = meta.metric.higher_is_better();
        let board = |name: &str| -> Result<Leaderboard> {
            let mut b = read_leaderboard(&dir.join("data/private").join(name))?;
            b.scores
                .sort_by(|x, y| if hib { y.total_cmp(x) } else { x.total_cmp(y) });
            Ok(b)
        };
        Ok(Self {
            public_leaderboard: board("public_leaderboard.csv")?,
            private_leaderboard: board("private_leaderboard.csv")?,
            dir: dir.to_path_buf(),
            meta,
        })
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }
    pub fn public_dir(&self) -> PathBuf {
        self.dir.join("data/public")
    }
    pub fn answer_path(&self) -> PathBuf {
        self.dir.join("data/private/test_answer.csv")
    }
}

/// The competition suite: every sub-folder with a `meta.json`, sorted by name.
#[derive(Debug, Clone)]
pub struct Suite {
    pub competitions: Vec<Competition>,
}

impl Suite {
    pub fn load(dir: &Path) -> Result<Self> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io_err(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("meta.json").is_file())
            .collect();
        dirs.sort();
        let competitions = dirs
            .iter()
            .map(|d| Competition::load(d))
            .collect::<Result<Vec<_>>>()?;
        if competitions.is_empty() {
            return Err(Error::Competition {
                name: dir.display().to_string(),
                reason: "no competitions (run envs/mledojo/build_suite.py)".into(),
            });
        }
        Ok(Self { competitions })
    }

    /// Indices of the competitions in one split.
    pub fn indices(&self, split: Split) -> Vec<usize> {
        (0..self.competitions.len())
            .filter(|&i| self.competitions[i].meta.split == split)
            .collect()
    }

    pub fn by_name(&self, name: &str) -> Option<&Competition> {
        self.competitions.iter().find(|c| c.name() == name)
    }
}

/// The suite shipped in the repository (`envs/mledojo/competitions`),
/// found from this crate's source location.
pub fn default_suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../envs/mledojo/competitions")
}
