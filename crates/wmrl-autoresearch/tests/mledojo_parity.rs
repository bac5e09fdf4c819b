//! wmrl's grader against MLE-Dojo's rules on known submissions: the fixture
//! (envs/mledojo/mledojo_rules.py, which restates MLE-Dojo's grading path and
//! loads each competition's utils/metric.py as MLE-Dojo does) holds, for
//! every shipped competition, the sample submission, the answer itself
//! (which ties the best leaderboard entries), perturbed answers and
//! malformed files, each with MLE-Dojo's verdict, raw score and position
//! score. wmrl must agree on all of them.
#![allow(clippy::unwrap_used)]

use serde::Deserialize;
use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::{Competition, Ladder, Rung, Submission, grade};

/// The default sandbox file-size limit (64 MiB).
const CAP: u64 = 64 << 20;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    competition: String,
    submission: String,
    csv: String,
    expected: Expected,
}

#[derive(Deserialize)]
struct Expected {
    valid: bool,
    raw: Option<f64>,
    position_score: Option<f64>,
}

#[test]
fn grades_like_mledojo_on_known_submissions() {
    let fx: Fixture = serde_json::from_str(include_str!("fixtures/mledojo_grading.json")).unwrap();
    assert!(fx.cases.len() >= 100);
    let tmp = tempfile::tempdir().unwrap();
    let (mut perfect_first, mut valid) = (0, 0);
    for c in &fx.cases {
        let comp = Competition::load(&default_suite_dir().join(&c.competition)).unwrap();
        let p = tmp.path().join("submission.csv");
        std::fs::write(&p, &c.csv).unwrap();
        let g = grade(
            &comp,
            &Ladder::default(),
            false,
            None,
            &Submission::read(&p, CAP),
        )
        .unwrap();
        let at = format!("{} / {}", c.competition, c.submission);
        assert_eq!(g.rung == Rung::Valid, c.expected.valid, "{at}: {g:?}");
        if !c.expected.valid {
            continue;
        }
        valid += 1;
        let (raw, ps) = (c.expected.raw.unwrap(), c.expected.position_score.unwrap());
        let m = g.metric.unwrap();
        assert!(
            (m - raw).abs() <= 1e-9 * (1.0 + raw.abs()),
            "{at}: raw {m} vs {raw}"
        );
        let got = g.position_score.unwrap();
        assert!((got - ps).abs() < 1e-12, "{at}: position {got} vs {ps}");
        if c.submission == "perfect" && (ps - 1.0).abs() < 1e-12 {
            perfect_first += 1;
        }
    }
    assert!(valid >= 80);
    // The answer key ties the best entries on most boards; under a strict
    // rule those would not score 1.0.
    assert!(
        perfect_first >= 8,
        "only {perfect_first} perfect submissions placed first"
    );
}
