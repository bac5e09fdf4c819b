//! `wmrl eval --policy DIR` with a MiniVLA directory: the command tells a
//! MiniVLA checkpoint from a `tiny` policy by its config and runs it through
//! the same episode runner on the embedded simulator, one action per call;
//! the evaluation resumes from its record to the same report; a truncated
//! weights file is refused with the file named. The checkpoint is a
//! scaled-down stand-in (the published structure and tensor names, random
//! weights: `wmrl_minivla::stand_in`).

use std::path::{Path, PathBuf};
use std::process::Command;

use wmrl_minivla::{MiniVlaConfig, WEIGHTS_FILE};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn eval(policy: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wmrl"))
        .current_dir(repo())
        .args(["eval", "--policy"])
        .arg(policy)
        .args([
            "--tasks",
            "0,3",
            "--init-states",
            "16-17",
            "--max-steps",
            "3",
            "--num-envs",
            "2",
            "--gifs",
            "0",
            "--temperature",
            "1.0",
            "--seed",
            "4",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .expect("wmrl eval")
}

fn report(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("eval.json")).expect("eval.json");
    serde_json::from_str(&text).expect("json")
}

#[test]
fn wmrl_eval_runs_a_minivla_directory_and_resumes_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("minivla");
    wmrl_minivla::stand_in::write_stand_in(
        &dir,
        &MiniVlaConfig::scaled_down(),
        7,
        wmrl_policy::candle::DType::F32,
        &["put", "bowl", "on", "plate"],
    )
    .expect("stand-in");

    let first = tmp.path().join("first");
    let o = eval(&dir, &first, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = report(&first);
    let episodes = r["episodes"].as_array().expect("episodes");
    assert_eq!(episodes.len(), 4, "2 tasks x 2 states");
    let steps: u64 = episodes
        .iter()
        .map(|e| e["steps"].as_u64().expect("steps"))
        .sum();
    assert!(
        episodes
            .iter()
            .all(|e| e["steps"].as_u64().is_some_and(|s| s <= 3))
    );
    assert_eq!(r["env_steps"].as_u64(), Some(steps));

    // Asked again with --resume, the finished record is reported as it is;
    // a fresh directory with the same seed gives the same episodes.
    let o = eval(&dir, &first, &["--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(report(&first)["episodes"], r["episodes"]);
    let second = tmp.path().join("second");
    assert!(eval(&dir, &second, &[]).status.success());
    assert_eq!(report(&second)["episodes"], r["episodes"]);

    // A truncated weights file: a clear error naming it, nothing written.
    let w = dir.join(WEIGHTS_FILE);
    let bytes = std::fs::read(&w).expect("weights");
    std::fs::write(&w, &bytes[..bytes.len() / 2]).expect("truncate");
    let bad = tmp.path().join("bad");
    let o = eval(&dir, &bad, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("model.safetensors") || err.contains(&dir.display().to_string()),
        "{err}"
    );
    assert!(!bad.join("eval.json").exists());
}
