//! Grading: a known submission gets the position the leaderboard implies.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::table::Table;
use wmrl_autoresearch::{Competition, Ladder, Rung, grade};

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

fn meta(task: &str, metric: &str) -> String {
    format!(
        r#"{{"name":"toy","task":"{task}","metric":"{metric}","split":"train","id_column":"id","target_column":"target","n_train":1,"n_test":10,"n_features":1,"n_classes":2,"meta_features":[0,0,0,0,0,0,0,0,0,0,0,0]}}"#
    )
}

fn toy(
    dir: &Path,
    task: &str,
    metric: &str,
    answer: &[&str],
    public: &[f64],
    private: &[f64],
) -> Competition {
    write(&dir.join("meta.json"), &meta(task, metric));
    let mut a = String::from("id,target\n");
    for (i, v) in answer.iter().enumerate() {
        a += &format!("{},{v}\n", 100 + i);
    }
    write(&dir.join("data/private/test_answer.csv"), &a);
    for (name, lb) in [("public", public), ("private", private)] {
        let mut s = String::from("rank,score,team\n");
        for (i, v) in lb.iter().enumerate() {
            s += &format!("{},{v},t{i}\n", i + 1);
        }
        write(
            &dir.join(format!("data/private/{name}_leaderboard.csv")),
            &s,
        );
    }
    Competition::load(dir).unwrap()
}

#[test]
fn known_accuracy_gets_its_leaderboard_position() {
    let d = tempfile::tempdir().unwrap();
    let answer = ["0", "1", "0", "1", "0", "1", "0", "1", "0", "1"];
    let c = toy(
        d.path(),
        "classification",
        "accuracy",
        &answer,
        &[0.9, 0.8, 0.7, 0.6],
        &[0.95, 0.78, 0.75, 0.65],
    );
    // 8 of 10 right, rows in a shuffled order, labels written as floats.
    let mut sub = String::from("target,id\n");
    for i in (0..10).rev() {
        let v: f64 = answer[i].parse::<f64>().unwrap();
        let v = if i < 2 { 1.0 - v } else { v };
        sub += &format!("{v:.1},{}\n", 100 + i);
    }
    let p = d.path().join("submission.csv");
    std::fs::write(&p, sub).unwrap();
    let g = grade(&c, &Ladder::default(), false, None, &p).unwrap();
    assert_eq!(g.rung, Rung::Valid);
    assert!((g.metric.unwrap() - 0.8).abs() < 1e-12);
    // public: 0.8 ties t1, which counts as beating it (MLE-Dojo's `>=`):
    // position 2 of 4 -> 0.75. private: beats t1 (0.78): position 2 of 4 ->
    // 0.75.
    assert!((g.position_score.unwrap() - 0.75).abs() < 1e-12);
    assert!((g.reward - (0.5 + 0.5 * 0.75)).abs() < 1e-12);
}

#[test]
fn known_rmse_gets_its_leaderboard_position_and_bad_ids_are_malformed() {
    let d = tempfile::tempdir().unwrap();
    let answer = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"];
    let c = toy(
        d.path(),
        "regression",
        "rmse",
        &answer,
        &[0.5, 1.0, 2.0],
        &[0.1, 0.2, 3.0],
    );
    let mut sub = String::from("id,target\n");
    for (i, v) in answer.iter().enumerate() {
        sub += &format!("{},{}\n", 100 + i, v.parse::<f64>().unwrap() + 1.5);
    }
    let p = d.path().join("submission.csv");
    std::fs::write(&p, &sub).unwrap();
    let g = grade(&c, &Ladder::default(), false, None, &p).unwrap();
    assert!((g.metric.unwrap() - 1.5).abs() < 1e-9);
    // public: beats 2.0 -> position 3 of 3 -> 1/3; private: beats 3.0 -> 1/3.
    assert!((g.position_score.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    std::fs::write(&p, sub.replace("\n100,", "\n0,")).unwrap();
    let g = grade(&c, &Ladder::default(), false, None, &p).unwrap();
    assert_eq!((g.rung, g.reward), (Rung::Malformed, 0.0));
    std::fs::write(&p, sub.replace("\n101,", "\n101,nan")).unwrap();
    assert_eq!(
        grade(&c, &Ladder::default(), false, None, &p).unwrap().rung,
        Rung::Malformed
    );
}

#[test]
fn shipped_suite_grades_the_sample_submission_like_the_majority_baseline() {
    let suite = wmrl_autoresearch::Suite::load(&default_suite_dir()).unwrap();
    assert!(suite.competitions.len() >= 12);
    assert!(!suite.indices(wmrl_autoresearch::Split::Heldout).is_empty());
    for c in &suite.competitions {
        let p = c.public_dir().join("sample_submission.csv");
        let g = grade(c, &Ladder::default(), false, None, &p).unwrap();
        assert_eq!(g.rung, Rung::Valid, "{}: {:?}", c.name(), g.reason);
        // Expected position on each leaderboard: 1 + entries strictly better
        // than the score (a tie counts as beaten, as MLE-Dojo counts it).
        let s = g.metric.unwrap();
        let hib = c.meta.metric.higher_is_better();
        let expect = |file: &str| {
            let t = Table::read(&c.dir.join("data/private").join(file)).unwrap();
            // MLE-Dojo reads the second column.
            let scores: Vec<f64> = t.rows.iter().map(|r| r[1].parse().unwrap()).collect();
            let not_beaten = scores
                .iter()
                .filter(|&&x| if hib { s < x } else { s > x })
                .count();
            let n = scores.len() as f64;
            (n - (not_beaten + 1) as f64 + 1.0) / n
        };
        let want = 0.5 * (expect("public_leaderboard.csv") + expect("private_leaderboard.csv"));
        assert!(
            (g.position_score.unwrap() - want).abs() < 1e-9,
            "{}",
            c.name()
        );
        // A constant prediction never reaches the top half.
        assert!(g.position_score.unwrap() < 0.5, "{}", c.name());
    }
}
