//! Grading as shared/METHOD.md states: the competition metric on
//! `private/test_answer.csv`, a position on each leaderboard, the position
//! score averaged over the public and private leaderboards, and the reward
//! ladder 0.0 malformed / 0.1 syntax error / 0.2 runtime error or no
//! submission / 0.5 + 0.5 x position score.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::competition::{Competition, Leaderboard, Metric, Task};
use crate::error::Result;
use crate::table::Table;

/// The rung of the reward ladder a run landed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rung {
    /// A submission file exists but cannot be scored (columns, ids, values).
    Malformed,
    SyntaxError,
    /// Non-zero exit, a signal, a limit hit, or no submission file.
    RuntimeError,
    Valid,
}

/// The reward ladder's fixed values (METHOD.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ladder {
    pub malformed: f64,
    pub syntax_error: f64,
    pub runtime_error: f64,
    /// Valid: `valid_base + valid_scale * position_score`.
    pub valid_base: f64,
    pub valid_scale: f64,
}

impl Default for Ladder {
    /// METHOD.md, "The AutoResearch track": 0.0 / 0.1 / 0.2 / 0.5 + 0.5 x pos.
    fn default() -> Self {
        Self {
            malformed: 0.0,
            syntax_error: 0.1,
            runtime_error: 0.2,
            valid_base: 0.5,
            valid_scale: 0.5,
        }
    }
}

impl Ladder {
    pub fn reward(&self, rung: Rung, position_score: Option<f64>) -> f64 {
        match rung {
            Rung::Malformed => self.malformed,
            Rung::SyntaxError => self.syntax_error,
            Rung::RuntimeError => self.runtime_error,
            Rung::Valid => self.valid_base + self.valid_scale * position_score.unwrap_or(0.0),
        }
    }
}

/// A graded submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    pub rung: Rung,
    /// The metric on all test rows (valid submissions only).
    pub metric: Option<f64>,
    /// Mean of the public and private position scores (valid only).
    pub position_score: Option<f64>,
    pub reward: f64,
    /// Why a submission was not valid.
    pub reason: Option<String>,
}

/// 1-based position: the first entry (best first) the score beats or ties,
/// as MLE-Dojo counts it (`score >= entry`, `<=` when lower is better);
/// `len + 1` when it reaches none.
pub fn leaderboard_position(score: f64, board: &Leaderboard, higher_is_better: bool) -> usize {
    board
        .scores
        .iter()
        .position(|&s| {
            if higher_is_better {
                score >= s
            } else {
                score <= s
            }
        })
        .map_or(board.scores.len() + 1, |i| i + 1)
}

/// `(total - position + 1) / total`.
pub fn position_score(position: usize, total: usize) -> f64 {
    if total == 0 {
        return 0.0;
    }
    (total as f64 - position as f64 + 1.0) / total as f64
}

fn metric_value(metric: Metric, task: Task, truth: &[String], pred: &[String]) -> Option<f64> {
    let n = truth.len() as f64;
    match task {
        Task::Classification => {
            // Labels compare as numbers where both parse (so "1.0" == "1"), else as text.
            let norm = |s: &str| {
                s.parse::<f64>()
                    .map(|v| format!("{v}"))
                    .unwrap_or_else(|_| s.to_string())
            };
            let t: Vec<String> = truth.iter().map(|s| norm(s)).collect();
            let p: Vec<String> = pred.iter().map(|s| norm(s)).collect();
            match metric {
                Metric::Accuracy => {
                    Some(t.iter().zip(&p).filter(|(a, b)| a == b).count() as f64 / n)
                }
                Metric::F1Macro => {
                    let mut classes: Vec<&String> = t.iter().collect();
                    classes.sort();
                    classes.dedup();
                    let f1s = classes.iter().map(|c| {
                        let tp = t.iter().zip(&p).filter(|(a, b)| a == c && b == c).count() as f64;
                        let fp = t.iter().zip(&p).filter(|(a, b)| a != c && b == c).count() as f64;
                        let fne = t.iter().zip(&p).filter(|(a, b)| a == c && b != c).count() as f64;
                        if tp == 0.0 {
                            0.0
                        } else {
                            2.0 * tp / (2.0 * tp + fp + fne)
                        }
                    });
                    Some(f1s.sum::<f64>() / classes.len().max(1) as f64)
                }
                _ => None,
            }
        }
        Task::Regression => {
            let t: Vec<f64> = truth
                .iter()
                .map(|s| s.parse().ok())
                .collect::<Option<_>>()?;
            let p: Vec<f64> = pred.iter().map(|s| s.parse().ok()).collect::<Option<_>>()?;
            if p.iter().any(|v| !v.is_finite()) {
                return None;
            }
            let res = t.iter().zip(&p).map(|(a, b)| a - b);
            match metric {
                Metric::Rmse => Some((res.map(|r| r * r).sum::<f64>() / n).sqrt()),
                Metric::Mae => Some(res.map(f64::abs).sum::<f64>() / n),
                Metric::R2 => {
                    let m = t.iter().sum::<f64>() / n;
                    let ss_tot: f64 = t.iter().map(|a| (a - m).powi(2)).sum();
                    let ss_res: f64 = res.map(|r| r * r).sum();
                    Some(1.0 - ss_res / ss_tot.max(1e-300))
                }
                _ => None,
            }
        }
    }
}

/// The most columns a submission's header may have: enough for any real
/// submission (two are read), few enough that a hostile header cannot make
/// the grader allocate per column without bound.
pub const MAX_SUBMISSION_COLUMNS: usize = 4096;

/// The longest grading `reason`, in characters. Reasons reach agents as
/// feedback (the MLE-Dojo server, the reward service): they name what is
/// wrong and quote at most a short excerpt of the submission itself.
pub const MAX_REASON_CHARS: usize = 160;

/// What the grader got of a solution's `submission.csv`. Everything a
/// solution leaves behind is hostile: the file is opened without following
/// links, and only a regular file with one link and no more bytes than the
/// sandbox's file-size limit is read (see [`Submission::from_file`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Submission {
    /// No `submission.csv`.
    Missing,
    /// Something is there but is not read, and why: a symbolic link, a hard
    /// link, a directory, a FIFO or device, a file over the size limit.
    Refused(String),
    /// The file's bytes.
    Bytes(Vec<u8>),
}

impl Submission {
    /// Read `path` as a submission: the last component is opened with
    /// `O_NOFOLLOW` (a symbolic link is refused, not followed) and
    /// `O_NONBLOCK` (a FIFO cannot make the grader wait). For files a host
    /// wrote itself (tests, checks); a sandbox run reads its submission
    /// through [`crate::sandbox::Execution::submission`], which also holds the
    /// working directory open from before the solution ran.
    pub fn read(path: &Path, cap_bytes: u64) -> Self {
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path);
        Self::from_open(opened, cap_bytes)
    }

    /// The outcome of opening the submission (with `O_NOFOLLOW`): missing,
    /// refused, or read through [`Self::from_file`].
    pub fn from_open(opened: std::io::Result<std::fs::File>, cap_bytes: u64) -> Self {
        match opened {
            Ok(f) => Self::from_file(f, cap_bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::Missing,
            // ELOOP: the last component is a symbolic link.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                Self::Refused("submission.csv is a symbolic link".into())
            }
            Err(e) => Self::Refused(format!("submission.csv cannot be opened ({:?})", e.kind())),
        }
    }

    /// Check the open file itself (`fstat`, so nothing can change between
    /// the check and the read): a regular file, one link, at most
    /// `cap_bytes`; then read at most `cap_bytes` from it.
    pub fn from_file(f: std::fs::File, cap_bytes: u64) -> Self {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = f.metadata() else {
            return Self::Refused("submission.csv cannot be inspected".into());
        };
        if !m.file_type().is_file() {
            let kind = if m.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            };
            return Self::Refused(format!("submission.csv is {kind}"));
        }
        if m.nlink() != 1 {
            return Self::Refused("submission.csv is a hard link".into());
        }
        if m.len() > cap_bytes {
            return Self::Refused(format!(
                "submission.csv has {} bytes, over the limit of {cap_bytes}",
                m.len()
            ));
        }
        let mut buf = Vec::with_capacity(m.len() as usize);
        match f.take(cap_bytes + 1).read_to_end(&mut buf) {
            Ok(_) if buf.len() as u64 > cap_bytes => Self::Refused(format!(
                "submission.csv grew over the limit of {cap_bytes} bytes"
            )),
            Ok(_) => Self::Bytes(buf),
            Err(e) => Self::Refused(format!("submission.csv cannot be read ({:?})", e.kind())),
        }
    }
}

/// At most `max` characters of `s`, control characters escaped, with `...`
/// when cut: the only form in which submission text enters a reason.
pub fn excerpt(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i >= max {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Cut a reason to [`MAX_REASON_CHARS`].
fn bounded(reason: String) -> String {
    if reason.chars().count() <= MAX_REASON_CHARS {
        reason
    } else {
        let mut r: String = reason.chars().take(MAX_REASON_CHARS - 3).collect();
        r.push_str("...");
        r
    }
}

/// Split one CSV line as [`Table`] does (double quotes toggle quoting, `""`
/// inside quotes is a quote, fields trimmed) and call `keep(i, field)` for
/// the fields `want(i)` selects, building no string for the others. Returns
/// the number of fields, or `None` past `max_fields`.
fn split_fields(
    line: &str,
    max_fields: usize,
    want: impl Fn(usize) -> bool,
    mut keep: impl FnMut(usize, String),
) -> Option<usize> {
    let mut idx = 0;
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    let mut wanted = want(0);
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                if wanted {
                    cur.push('"');
                }
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => {
                if wanted {
                    keep(idx, std::mem::take(&mut cur).trim().to_string());
                }
                idx += 1;
                if idx >= max_fields {
                    return None;
                }
                wanted = want(idx);
            }
            _ => {
                if wanted {
                    cur.push(c);
                }
            }
        }
    }
    if wanted {
        keep(idx, cur.trim().to_string());
    }
    Some(idx + 1)
}

/// Parse a submission into `(id, target)` pairs, reading no more than the
/// answer's `rows` rows: memory stays within a small multiple of the file's
/// size whatever its shape. `Err` is a bounded reason.
fn parse_submission(
    bytes: &[u8],
    id_column: &str,
    target_column: &str,
    rows: usize,
) -> std::result::Result<Vec<(String, String)>, String> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "submission.csv is not UTF-8 text (byte {})",
            e.valid_up_to()
        )
    })?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header_line = lines.next().ok_or("submission.csv is empty")?;
    let mut header: Vec<(usize, String)> = Vec::new();
    let n_cols = split_fields(
        header_line,
        MAX_SUBMISSION_COLUMNS,
        |_| true,
        |i, f| {
            if f == id_column || f == target_column {
                header.push((i, f));
            }
        },
    )
    .ok_or_else(|| format!("the header has more than {MAX_SUBMISSION_COLUMNS} columns"))?;
    let find = |name: &str| header.iter().find(|(_, f)| f == name).map(|(i, _)| *i);
    let (Some(sid), Some(stg)) = (find(id_column), find(target_column)) else {
        return Err(format!(
            "header {:?} lacks {id_column} or {target_column}",
            excerpt(header_line, 64)
        ));
    };
    let mut out = Vec::with_capacity(rows.min(1 << 20));
    for (i, line) in lines.enumerate() {
        if out.len() == rows {
            return Err(format!("more than {rows} rows, want {rows}"));
        }
        let (mut id, mut target) = (String::new(), String::new());
        let n = split_fields(
            line,
            n_cols + 1,
            |k| k == sid || k == stg,
            |k, f| {
                if k == sid {
                    id = f;
                } else {
                    target = f;
                }
            },
        );
        if n != Some(n_cols) {
            return Err(format!(
                "row {} has {} fields, the header {n_cols}",
                i + 1,
                n.map_or_else(|| format!("more than {n_cols}"), |n| n.to_string())
            ));
        }
        out.push((id, target));
    }
    Ok(out)
}

/// Score a submission's bytes: the metric on the full answer and the two
/// leaderboard positions; `Err(reason)` when it is malformed.
pub fn score_submission(
    comp: &Competition,
    submission: &[u8],
) -> Result<Result<(f64, f64), String>> {
    let answer = Table::read(&comp.answer_path())?;
    let meta = &comp.meta;
    let (aid, atg) = match (
        answer.column(&meta.id_column),
        answer.column(&meta.target_column),
    ) {
        (Some(a), Some(b)) => (a, b),
        _ => return Ok(Err("test_answer.csv lacks id/target columns".into())),
    };
    let sub = match parse_submission(
        submission,
        &meta.id_column,
        &meta.target_column,
        answer.rows.len(),
    ) {
        Ok(s) => s,
        Err(why) => return Ok(Err(why)),
    };
    if sub.len() != answer.rows.len() {
        return Ok(Err(format!(
            "{} rows, want {}",
            sub.len(),
            answer.rows.len()
        )));
    }
    let mut by_id: HashMap<&str, &str> = HashMap::with_capacity(sub.len());
    for (id, target) in &sub {
        if by_id.insert(id, target).is_some() {
            return Ok(Err(format!("duplicate id {:?}", excerpt(id, 32))));
        }
    }
    let mut truth = Vec::with_capacity(answer.rows.len());
    let mut pred = Vec::with_capacity(answer.rows.len());
    for r in &answer.rows {
        match by_id.get(r[aid].as_str()) {
            Some(p) => {
                truth.push(r[atg].clone());
                pred.push((*p).to_string());
            }
            None => return Ok(Err("an id of the test set is missing".into())),
        }
    }
    let Some(value) = metric_value(meta.metric, meta.task, &truth, &pred) else {
        return Ok(Err("predictions are not valid numbers".into()));
    };
    let hib = meta.metric.higher_is_better();
    let pos = |b: &Leaderboard| position_score(leaderboard_position(value, b, hib), b.scores.len());
    let ps = 0.5 * (pos(&comp.public_leaderboard) + pos(&comp.private_leaderboard));
    Ok(Ok((value, ps)))
}

/// Grade a finished run: `syntax_error` and `runtime_error` come from the
/// sandbox; otherwise the submission (if any) is scored. A submission the
/// grader refuses to read ([`Submission::Refused`]) is malformed. Every
/// reason is at most [`MAX_REASON_CHARS`] long.
pub fn grade(
    comp: &Competition,
    ladder: &Ladder,
    syntax_error: bool,
    runtime_error: Option<String>,
    submission: &Submission,
) -> Result<Grade> {
    let done = |rung: Rung, reason: String| Grade {
        rung,
        metric: None,
        position_score: None,
        reward: ladder.reward(rung, None),
        reason: Some(bounded(reason)),
    };
    if syntax_error {
        return Ok(done(Rung::SyntaxError, "syntax error".into()));
    }
    if let Some(why) = runtime_error {
        return Ok(done(Rung::RuntimeError, why));
    }
    let bytes = match submission {
        Submission::Missing => return Ok(done(Rung::RuntimeError, "no submission".into())),
        Submission::Refused(why) => return Ok(done(Rung::Malformed, why.clone())),
        Submission::Bytes(b) => b,
    };
    Ok(match score_submission(comp, bytes)? {
        Ok((metric, ps)) => Grade {
            rung: Rung::Valid,
            metric: Some(metric),
            position_score: Some(ps),
            reward: ladder.reward(Rung::Valid, Some(ps)),
            reason: None,
        },
        Err(why) => done(Rung::Malformed, why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_follows_method_definition() {
        let b = Leaderboard {
            scores: vec![0.9, 0.8, 0.7, 0.6],
        };
        assert_eq!(leaderboard_position(0.95, &b, true), 1);
        assert_eq!(leaderboard_position(0.8, &b, true), 2); // a tie counts (MLE-Dojo)
        assert_eq!(leaderboard_position(0.1, &b, true), 5);
        assert!((position_score(1, 4) - 1.0).abs() < 1e-12);
        assert!((position_score(3, 4) - 0.5).abs() < 1e-12);
        assert_eq!(
            leaderboard_position(0.9, &b, true),
            1,
            "tying the best is first"
        );
        assert_eq!(position_score(5, 4), 0.0);
        let e = Leaderboard {
            scores: vec![1.0, 2.0, 3.0],
        };
        assert_eq!(leaderboard_position(1.5, &e, false), 2);
        assert_eq!(leaderboard_position(2.0, &e, false), 2);
    }

    #[test]
    fn ladder_values() {
        let l = Ladder::default();
        assert_eq!(l.reward(Rung::Malformed, None), 0.0);
        assert_eq!(l.reward(Rung::SyntaxError, None), 0.1);
        assert_eq!(l.reward(Rung::RuntimeError, None), 0.2);
        assert!((l.reward(Rung::Valid, Some(0.5)) - 0.75).abs() < 1e-12);
    }
}
