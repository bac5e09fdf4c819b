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

/// Score a submission file that exists: the metric on the full answer and the
/// two leaderboard positions; `Err(reason)` when it is malformed.
pub fn score_submission(
    comp: &Competition,
    submission: &Path,
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
    let sub = match Table::read(submission) {
        Ok(t) => t,
        Err(e) => return Ok(Err(format!("unreadable: {e}"))),
    };
    let (sid, stg) = match (sub.column(&meta.id_column), sub.column(&meta.target_column)) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            return Ok(Err(format!(
                "columns {:?}, want {} and {}",
                sub.header, meta.id_column, meta.target_column
            )));
        }
    };
    if sub.rows.len() != answer.rows.len() {
        return Ok(Err(format!(
            "{} rows, want {}",
            sub.rows.len(),
            answer.rows.len()
        )));
    }
    let mut by_id: HashMap<&str, &str> = HashMap::with_capacity(sub.rows.len());
    for r in &sub.rows {
        if by_id.insert(&r[sid], &r[stg]).is_some() {
            return Ok(Err(format!("duplicate id {}", r[sid])));
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
            None => return Ok(Err(format!("missing id {}", r[aid]))),
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
/// sandbox; otherwise the submission (if any) is scored.
pub fn grade(
    comp: &Competition,
    ladder: &Ladder,
    syntax_error: bool,
    runtime_error: Option<String>,
    submission: &Path,
) -> Result<Grade> {
    let done = |rung: Rung, reason: Option<String>| Grade {
        rung,
        metric: None,
        position_score: None,
        reward: ladder.reward(rung, None),
        reason,
    };
    if syntax_error {
        return Ok(done(Rung::SyntaxError, Some("syntax error".into())));
    }
    if let Some(why) = runtime_error {
        return Ok(done(Rung::RuntimeError, Some(why)));
    }
    if !submission.is_file() {
        return Ok(done(Rung::RuntimeError, Some("no submission".into())));
    }
    Ok(match score_submission(comp, submission)? {
        Ok((metric, ps)) => Grade {
            rung: Rung::Valid,
            metric: Some(metric),
            position_score: Some(ps),
            reward: ladder.reward(Rung::Valid, Some(ps)),
            reason: None,
        },
        Err(why) => done(Rung::Malformed, Some(why)),
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
