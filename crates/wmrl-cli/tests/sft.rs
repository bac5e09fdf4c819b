//! `wmrl sft` through the policy registry: the `tiny` kind trains on `wmrl
//! demos` episodes, records its settings in run.toml, resumes with more
//! steps and refuses other settings; kinds and presets nobody has are
//! refused by name before anything is written.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

fn wmrl(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wmrl"))
        .args(args)
        .current_dir(dir)
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn refused(o: &Output) -> String {
    assert!(!o.status.success(), "expected a refusal");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn sft_trains_through_the_policy_kind_resumes_and_refuses_unknown_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(&wmrl(
        &[
            "demos",
            "--tasks",
            "0",
            "--per-task",
            "2",
            "--init-states",
            "0-3",
            "--image-size",
            "64",
            "--out",
            "demos",
        ],
        d,
    ));
    let tiny = [
        "sft",
        "--demos",
        "demos",
        "--preset",
        "tiny",
        "--set",
        "policy.image_size=64",
        "--set",
        "policy.n_layers=1",
        "--set",
        "sft.batch_size=4",
        "--set",
        "sft.checkpoint_every=1",
        "--out",
        "p",
    ];
    let steps = |n: &'static str| [&tiny[..], &["--steps", n]].concat();
    let report = ok(&wmrl(&steps("2"), d));
    assert!(report.contains("\"steps\":2"), "{report}");
    let settings = std::fs::read_to_string(d.join("p/run.toml")).unwrap();
    assert!(settings.starts_with("format = 0\n"), "{settings}");
    assert!(!d.join("p/sft.json").exists(), "one settings file");
    assert!(d.join("p/checkpoint/train_state.json").exists());
    // More steps resume the run (the schedule's length may change with them).
    let more = [&steps("3")[..], &["--resume"]].concat();
    let report = ok(&wmrl(&more, d));
    assert!(report.contains("\"start_step\":2"), "{report}");
    // Other settings do not.
    let other = [&more[..], &["--set", "sft.batch_size=8"]].concat();
    let err = refused(&wmrl(&other, d));
    assert!(err.contains("batch_size: 4 against 8"), "{err}");
    // A kind or preset nobody has is refused by name, writing nothing.
    let err = refused(&wmrl(
        &[
            "sft",
            "--demos",
            "demos",
            "--policy-type",
            "openvla",
            "--out",
            "q",
        ],
        d,
    ));
    assert!(
        err.contains("unknown policy kind `openvla`") && err.contains("tiny, minivla"),
        "{err}"
    );
    let err = refused(&wmrl(
        &["sft", "--demos", "demos", "--minivla", "huge", "--out", "q"],
        d,
    ));
    assert!(err.contains("unknown MiniVLA preset `huge`"), "{err}");
    let err = refused(&wmrl(
        &[
            "sft",
            "--demos",
            "demos",
            "--minivla",
            "small",
            "--policy-type",
            "tiny",
            "--out",
            "q",
        ],
        d,
    ));
    assert!(err.contains("trains the `minivla` kind"), "{err}");
    assert!(!d.join("q").exists());
}
