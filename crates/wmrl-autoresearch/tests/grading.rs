//! Grading: a known submission gets the position the leaderboard implies.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::table::Table;
use wmrl_autoresearch::{Competition, Ladder, Rung, Submission, grade};

/// The default sandbox file-size limit (64 MiB).
const CAP: u64 = 64 << 20;

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
    let g = grade(
        &c,
        &Ladder::default(),
        false,
        None,
        &Submission::read(&p, CAP),
    )
    .unwrap();
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
    let g = grade(
        &c,
        &Ladder::default(),
        false,
        None,
        &Submission::read(&p, CAP),
    )
    .unwrap();
    assert!((g.metric.unwrap() - 1.5).abs() < 1e-9);
    // public: beats 2.0 -> position 3 of 3 -> 1/3; private: beats 3.0 -> 1/3.
    assert!((g.position_score.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    std::fs::write(&p, sub.replace("\n100,", "\n0,")).unwrap();
    let g = grade(
        &c,
        &Ladder::default(),
        false,
        None,
        &Submission::read(&p, CAP),
    )
    .unwrap();
    assert_eq!((g.rung, g.reward), (Rung::Malformed, 0.0));
    std::fs::write(&p, sub.replace("\n101,", "\n101,nan")).unwrap();
    assert_eq!(
        grade(
            &c,
            &Ladder::default(),
            false,
            None,
            &Submission::read(&p, CAP)
        )
        .unwrap()
        .rung,
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
        let g = grade(
            c,
            &Ladder::default(),
            false,
            None,
            &Submission::read(&p, CAP),
        )
        .unwrap();
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

/// The answer key of a toy competition, written as a submission: valid with
/// a perfect metric (the reference for the hostile variants below).
fn perfect(d: &Path) -> (Competition, String) {
    let answer = ["0", "1", "0", "1", "0", "1", "0", "1", "0", "1"];
    let c = toy(
        d,
        "classification",
        "accuracy",
        &answer,
        &[0.9, 0.8],
        &[0.9, 0.8],
    );
    let text = std::fs::read_to_string(c.answer_path()).unwrap();
    (c, text)
}

fn grade_bytes(c: &Competition, bytes: &[u8]) -> wmrl_autoresearch::Grade {
    grade(
        c,
        &Ladder::default(),
        false,
        None,
        &Submission::Bytes(bytes.to_vec()),
    )
    .unwrap()
}

#[test]
fn a_byte_order_mark_is_dropped_as_pandas_drops_it() {
    let d = tempfile::tempdir().unwrap();
    let (c, text) = perfect(d.path());
    let plain = grade_bytes(&c, text.as_bytes());
    assert_eq!(plain.rung, Rung::Valid);
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(text.as_bytes());
    assert_eq!(grade_bytes(&c, &bom), plain);
}

#[test]
fn hostile_contents_are_malformed_with_short_reasons_that_quote_little() {
    let d = tempfile::tempdir().unwrap();
    let (c, text) = perfect(d.path());
    let secret = "S3CRET".repeat(1000);
    let huge_header = format!("{}\n1,2\n", vec!["x"; 100_000].join(","));
    let many_rows = format!("{text}{}", "999,1\n".repeat(100_000));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("long header", format!("{secret},id\n1,2\n").into_bytes()),
        ("huge header", huge_header.into_bytes()),
        ("too many rows", many_rows.into_bytes()),
        ("ragged row", format!("{text}1,2,3\n").into_bytes()),
        ("not utf-8", b"id,target\n\xff\xfe,1\n".to_vec()),
        ("empty", Vec::new()),
        (
            "long id",
            text.replacen("\n100,", &format!("\n{secret},"), 1)
                .into_bytes(),
        ),
        (
            "duplicate long id",
            format!("{text}{secret},1\n{secret},0\n").into_bytes(),
        ),
    ];
    for (what, bytes) in cases {
        let g = grade_bytes(&c, &bytes);
        assert_eq!(g.rung, Rung::Malformed, "{what}: {g:?}");
        let reason = g.reason.unwrap();
        assert!(
            reason.chars().count() <= wmrl_autoresearch::grade::MAX_REASON_CHARS,
            "{what}: {reason}"
        );
        assert!(!reason.contains(&"S3CRET".repeat(12)), "{what}: {reason}");
    }
}

#[test]
fn only_a_regular_file_with_one_link_within_the_cap_is_read() {
    let d = tempfile::tempdir().unwrap();
    let (c, text) = perfect(d.path());
    let dir = d.path().join("run");
    std::fs::create_dir_all(&dir).unwrap();
    let sub = dir.join("submission.csv");
    let refused = |what: &str, s: &Submission| match s {
        Submission::Refused(why) => {
            let g = grade(&c, &Ladder::default(), false, None, s).unwrap();
            assert_eq!((g.rung, g.reward), (Rung::Malformed, 0.0), "{what}");
            why.clone()
        }
        other => panic!("{what}: read {other:?}"),
    };
    // A symbolic link to the answer key is not followed.
    std::os::unix::fs::symlink(c.answer_path(), &sub).unwrap();
    let why = refused("symlink", &Submission::read(&sub, CAP));
    assert!(why.contains("symbolic link"), "{why}");
    std::fs::remove_file(&sub).unwrap();
    // Nor a relative one, nor one to a host file.
    std::os::unix::fs::symlink("/proc/self/environ", &sub).unwrap();
    refused("symlink to environ", &Submission::read(&sub, CAP));
    std::fs::remove_file(&sub).unwrap();
    // A hard link (to a copy of the key here; across mounts the kernel
    // refuses it anyway).
    let copy = d.path().join("copy.csv");
    std::fs::write(&copy, &text).unwrap();
    std::fs::hard_link(&copy, &sub).unwrap();
    let why = refused("hard link", &Submission::read(&sub, CAP));
    assert!(why.contains("hard link"), "{why}");
    std::fs::remove_file(&sub).unwrap();
    // A FIFO does not block the grader (nobody writes to it).
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&sub)
            .status()
            .unwrap()
            .success()
    );
    refused("fifo", &Submission::read(&sub, CAP));
    std::fs::remove_file(&sub).unwrap();
    // A directory.
    std::fs::create_dir(&sub).unwrap();
    refused("directory", &Submission::read(&sub, CAP));
    std::fs::remove_dir(&sub).unwrap();
    // Over the cap.
    std::fs::write(&sub, &text).unwrap();
    let why = refused("over the cap", &Submission::read(&sub, 10));
    assert!(why.contains("limit"), "{why}");
    // The same regular file within the cap is read and valid.
    let s = Submission::read(&sub, CAP);
    assert_eq!(s, Submission::Bytes(text.clone().into_bytes()));
    assert_eq!(
        grade(&c, &Ladder::default(), false, None, &s).unwrap().rung,
        Rung::Valid
    );
    assert_eq!(
        Submission::read(&dir.join("absent.csv"), CAP),
        Submission::Missing
    );
}
