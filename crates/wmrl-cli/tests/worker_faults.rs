//! `wmrl eval` and `wmrl train` on simulator workers wmrl starts itself,
//! with one worker killed (SIGKILL) while it is busy: the run completes,
//! the worker is started again once, and every episode counts once (an
//! evaluation's results equal an undisturbed one's). An evaluation killed
//! outright resumes (`--resume`) to the same eval.json. And the worker
//! layout and start-up errors say what happened.
//!
//! The embedded simulator's workers (`wmrl serve-sim`, behind a stand-in
//! for the LIBERO interpreter) run everywhere. The real LIBERO tests need
//! envs/libero/.venv (scripts/setup.d/30-libero.sh) and are ignored; run by
//! scripts/checks.d/35-libero-cli.sh:
//! `cargo test -p wmrl-cli --test worker_faults -- --ignored`.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn wmrl() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wmrl"));
    c.current_dir(repo()).env("RUST_LOG", "info");
    c
}

/// Stands in for the LIBERO interpreter: started as `python server.py
/// --envs N --suite S --image I --bind E`, it becomes (exec) a `wmrl
/// serve-sim` worker of the embedded simulator on that endpoint.
fn embedded_python(dir: &Path) -> PathBuf {
    let path = dir.join("python");
    let script = format!(
        "#!/bin/sh\nshift\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in\n    \
         --envs) envs=$2 ;;\n    --image) image=$2 ;;\n    --bind) bind=$2 ;;\n  esac\n  \
         shift 2\ndone\nexec '{}' serve-sim --envs \"$envs\" --image-size \"$image\" --bind \"$bind\"\n",
        env!("CARGO_BIN_EXE_wmrl")
    );
    std::fs::write(&path, script).unwrap();
    let ok = Command::new("chmod")
        .arg("755")
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    path
}

/// A running `wmrl` whose stderr is collected (and echoed).
struct Run {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
    workers_up: Arc<AtomicBool>,
}

impl Run {
    fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let workers_up = Arc::new(AtomicBool::new(false));
        let (lines, up) = (Arc::clone(&stderr), Arc::clone(&workers_up));
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                if line.contains("simulator workers started") {
                    up.store(true, Ordering::SeqCst);
                }
                lines.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            stderr,
            workers_up,
        }
    }

    /// The worker processes (direct children running a simulator server).
    fn workers(&self) -> Vec<u32> {
        let me = self.child.id();
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let parent = proc_stat(pid).and_then(|f| f.get(1).and_then(|p| p.parse::<u32>().ok()));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if parent == Some(me)
                && (cmdline.contains("serve-sim") || cmdline.contains("server.py"))
            {
                out.push(pid);
            }
        }
        out.sort_unstable();
        out
    }

    /// Once the workers serve, SIGKILL the first as soon as it has spent
    /// `busy_ticks` clock ticks of CPU serving (so it is mid-episode, not
    /// starting up or idle). Returns its pid.
    fn kill_a_busy_worker(&self, busy_ticks: u64) -> u32 {
        let t0 = Instant::now();
        let limit = Duration::from_secs(600);
        while !self.workers_up.load(Ordering::SeqCst) {
            assert!(t0.elapsed() < limit, "the workers never served");
            std::thread::sleep(Duration::from_millis(10));
        }
        let victim = self.workers()[0];
        let base = cpu_ticks(victim).unwrap();
        while cpu_ticks(victim).is_some_and(|t| t < base + busy_ticks) {
            assert!(t0.elapsed() < limit, "the worker never got busy");
            std::thread::sleep(Duration::from_millis(5));
        }
        kill9(victim);
        victim
    }

    /// Wait for the exit; the status and the stderr lines.
    fn finish(mut self, limit: Duration) -> (bool, Vec<String>) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                panic!("wmrl did not finish within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends with the pipe.
        std::thread::sleep(Duration::from_millis(200));
        let lines = self.stderr.lock().unwrap().clone();
        (status.success(), lines)
    }
}

/// Fields of /proc/PID/stat after the command name (state first).
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(String::from).collect())
}

/// User plus system CPU time of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let f = proc_stat(pid)?;
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(tick(11)? + tick(12)?)
}

fn kill9(pid: u32) {
    let ok = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -9 {pid}");
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// What two evaluations must share: the episodes and the rates.
fn results(eval: &serde_json::Value) -> serde_json::Value {
    serde_json::json!([eval["episodes"], eval["per_task"], eval["overall"]])
}

/// The recorded episodes of an evaluation's record, by index.
fn recorded(out: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(out.join("episodes.jsonl")).unwrap();
    let mut idx: Vec<u64> = text
        .lines()
        .skip(1)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["index"]
                .as_u64()
                .unwrap()
        })
        .collect();
    idx.sort_unstable();
    idx
}

fn count(lines: &[String], needle: &str) -> usize {
    lines.iter().filter(|l| l.contains(needle)).count()
}

const EVAL: &[&str] = &["eval", "--policy", "models/policy-tiny", "--seed", "3"];

/// Evaluate on the embedded simulator in process (the reference), then on
/// `workers` embedded-simulator workers holding `num_envs` slots (none
/// spare), killing one mid-episode.
fn eval_with_a_killed_embedded_worker(workers: usize, num_envs: usize, tmp: &Path) {
    let layout = format!("{workers} worker(s), {num_envs} slots");
    let settings = [
        "--tasks",
        "0-4",
        "--init-states",
        "16-19",
        "--max-steps",
        "60",
        "--num-envs",
        &num_envs.to_string(),
        "--gifs",
        "0",
    ]
    .map(String::from);
    let reference = tmp.join(format!("reference{workers}"));
    let ok = wmrl()
        .args(EVAL)
        .args(&settings)
        .args(["--backend", "sim", "--out"])
        .arg(&reference)
        .status()
        .unwrap()
        .success();
    assert!(ok, "{layout}: reference evaluation");

    let out = tmp.join(format!("killed{workers}"));
    let mut cmd = wmrl();
    cmd.args(EVAL)
        .args(&settings)
        .args([
            "--backend",
            "libero",
            "--libero-workers",
            &workers.to_string(),
        ])
        .arg("--libero-python")
        .arg(embedded_python(tmp))
        .arg("--libero-server")
        .arg(repo().join("envs/libero/server.py"))
        .arg("--out")
        .arg(&out);
    let run = Run::start(cmd);
    run.kill_a_busy_worker(15);
    let (ok, stderr) = run.finish(Duration::from_secs(600));
    assert!(ok, "{layout}: the evaluation completed");
    assert_eq!(
        count(&stderr, "simulator worker died; starting it again"),
        1,
        "{layout}: the killed worker was started again, once"
    );
    let got = read_json(&out.join("eval.json"));
    let want = read_json(&reference.join("eval.json"));
    assert_eq!(got["episodes"].as_array().unwrap().len(), 20, "{layout}");
    assert_eq!(
        results(&got),
        results(&want),
        "{layout}: the kill changed no result"
    );
    assert_eq!(
        recorded(&out),
        (0..20).collect::<Vec<_>>(),
        "{layout}: each once"
    );
    eprintln!("{layout}: {} episode(s) restarted", got["restarts"]);
}

#[test]
fn an_evaluation_survives_a_killed_embedded_worker_in_any_layout() {
    let tmp = tempfile::tempdir().unwrap();
    // configs/libero_ci.toml's layout (two workers of one slot), and one
    // worker holding every slot.
    eval_with_a_killed_embedded_worker(2, 2, tmp.path());
    eval_with_a_killed_embedded_worker(1, 2, tmp.path());
}

#[test]
fn a_libero_ci_train_step_survives_a_killed_embedded_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let python = embedded_python(tmp.path());
    let out = tmp.path().join("train");
    let mut cmd = wmrl();
    cmd.args(["train", "--config", "configs/libero_ci.toml", "--out"])
        .arg(&out)
        .arg("--set")
        .arg(format!("env.libero.python={}", python.display()))
        // Longer rollouts than CI's, so the kill lands in them; the layout
        // (two workers of one slot, none spare) is libero_ci's.
        .args([
            "--set",
            "rollout.n_groups=4",
            "--set",
            "rollout.max_steps=150",
        ]);
    let run = Run::start(cmd);
    run.kill_a_busy_worker(15);
    let (ok, stderr) = run.finish(Duration::from_secs(600));
    assert!(ok, "the training step completed");
    assert_eq!(
        count(&stderr, "simulator worker died; starting it again"),
        1
    );
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let steps: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps.len(), 1);
    let m = &steps[0];
    assert!(
        m["restarts"].as_u64().unwrap() >= 1,
        "the kill hit a rollout: {m}"
    );
    assert_eq!(
        m["ledger"]["real_executions"], 8,
        "4 groups of 2 rollouts, each executed once: {m}"
    );
    assert_eq!(
        m["labels_used"], 4,
        "two anchor groups' outcomes, once each: {m}"
    );
    let evals = std::fs::read_to_string(out.join("eval.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(evals.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["episodes"], 2,
        "the final two-episode evaluation: {last}"
    );
}

#[test]
fn a_killed_evaluation_resumes_to_the_same_eval_json() {
    let tmp = tempfile::tempdir().unwrap();
    // Sampled, so the resumed episodes must draw what they drew before.
    let settings = [
        "--tasks",
        "0-9",
        "--init-states",
        "16-21",
        "--max-steps",
        "60",
        "--num-envs",
        "3",
        "--temperature",
        "0.7",
        "--gifs",
        "2",
    ];
    let whole = tmp.path().join("whole");
    let ok = wmrl()
        .args(EVAL)
        .args(settings)
        .arg("--out")
        .arg(&whole)
        .status()
        .unwrap()
        .success();
    assert!(ok);

    let out = tmp.path().join("killed");
    let mut cmd = wmrl();
    cmd.args(EVAL).args(settings).arg("--out").arg(&out);
    let mut run = Run::start(cmd);
    let t0 = Instant::now();
    while std::fs::read_to_string(out.join("episodes.jsonl")).map_or(0, |t| t.lines().count()) < 6 {
        assert!(t0.elapsed() < Duration::from_secs(300), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    run.child.kill().unwrap();
    let _ = run.child.wait();
    let kept = recorded(&out).len();
    assert!(
        (5..60).contains(&kept),
        "killed mid-run: {kept} episodes kept"
    );
    assert!(!out.join("eval.json").exists());

    // Without --resume the record is kept and the command says what to do.
    let again = wmrl()
        .args(EVAL)
        .args(settings)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("--resume"), "{said}");
    assert!(recorded(&out).len() >= kept);

    let ok = wmrl()
        .args(EVAL)
        .args(settings)
        .args(["--resume", "--out"])
        .arg(&out)
        .status()
        .unwrap()
        .success();
    assert!(ok, "resumed");
    let (a, b) = (
        read_json(&whole.join("eval.json")),
        read_json(&out.join("eval.json")),
    );
    assert_eq!(results(&a), results(&b), "the resumed evaluation's results");
    for key in ["policy_calls", "env_steps", "restarts"] {
        assert_eq!(a[key], b[key], "{key}");
    }
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["gifs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let p = PathBuf::from(g.as_str().unwrap());
                p.file_name().unwrap().to_string_lossy().into_owned()
            })
            .collect()
    };
    assert_eq!(names(&a), names(&b), "the same GIFs");
    assert_eq!(
        recorded(&out),
        (0..60).collect::<Vec<_>>(),
        "each episode once"
    );
}

#[test]
fn more_libero_workers_than_slots_is_an_error() {
    let out = wmrl()
        .args(EVAL)
        .args([
            "--backend",
            "libero",
            "--num-envs",
            "1",
            "--libero-workers",
            "2",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--libero-workers 2 is more than --num-envs 1"),
        "{said}"
    );
}

#[test]
fn a_python_without_libero_is_reported_with_its_error_and_time() {
    // The machine's own Python: LIBERO (and the server's msgpack and zmq)
    // live only in envs/libero/.venv.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let python = std::env::split_paths(&path)
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 on PATH");
    let tmp = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let out = wmrl()
        .args(EVAL)
        .args(["--backend", "libero", "--num-envs", "1", "--libero-python"])
        .arg(&python)
        .arg("--out")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(t0.elapsed() < Duration::from_secs(60), "{said}");
    assert!(said.contains("exited after"), "{said}");
    assert!(said.contains("No module named"), "{said}");
    assert!(
        !said.contains("within 180"),
        "no timeout was reached: {said}"
    );
}

fn libero_python() -> PathBuf {
    let python = repo().join("envs/libero/.venv/bin/python");
    assert!(
        python.exists(),
        "run scripts/setup.d/30-libero.sh first ({} missing)",
        python.display()
    );
    python
}

#[test]
#[ignore = "needs the LIBERO venv (scripts/setup.d/30-libero.sh); run by scripts/checks.d/35-libero-cli.sh"]
fn an_evaluation_survives_a_killed_libero_worker() {
    libero_python();
    let tmp = tempfile::tempdir().unwrap();
    let settings = [
        "--backend",
        "libero",
        "--libero-workers",
        "2",
        "--num-envs",
        "2",
        "--tasks",
        "0,1",
        "--init-states",
        "0-1",
        "--max-steps",
        "30",
        "--gifs",
        "0",
    ];
    let reference = tmp.path().join("reference");
    let ok = wmrl()
        .args(EVAL)
        .args(settings)
        .arg("--out")
        .arg(&reference)
        .status()
        .unwrap()
        .success();
    assert!(ok, "reference evaluation");
    let out = tmp.path().join("killed");
    let mut cmd = wmrl();
    cmd.args(EVAL).args(settings).arg("--out").arg(&out);
    let run = Run::start(cmd);
    run.kill_a_busy_worker(600);
    let (ok, stderr) = run.finish(Duration::from_secs(600));
    assert!(ok, "the evaluation completed");
    assert_eq!(
        count(&stderr, "simulator worker died; starting it again"),
        1
    );
    let got = read_json(&out.join("eval.json"));
    assert_eq!(
        results(&got),
        results(&read_json(&reference.join("eval.json"))),
        "the kill changed no result"
    );
    assert_eq!(recorded(&out), vec![0, 1, 2, 3], "each episode once");
}

#[test]
#[ignore = "needs the LIBERO venv (scripts/setup.d/30-libero.sh); run by scripts/checks.d/35-libero-cli.sh"]
fn a_libero_ci_train_step_survives_a_killed_libero_worker() {
    libero_python();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train");
    let mut cmd = wmrl();
    cmd.args(["train", "--config", "configs/libero_ci.toml", "--out"])
        .arg(&out);
    let run = Run::start(cmd);
    run.kill_a_busy_worker(600);
    let (ok, stderr) = run.finish(Duration::from_secs(600));
    assert!(ok, "the training step completed");
    assert_eq!(
        count(&stderr, "simulator worker died; starting it again"),
        1
    );
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let m: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(text.lines().count(), 1);
    // A LIBERO worker spends much of a rollout building environments in
    // resets; a reset that loses its worker is sent again, so the kill
    // restarts the victim's one episode or none
    // (crates/wmrl-bridge/tests/libero.rs kills one mid-step for certain).
    let restarts = m["restarts"].as_u64().unwrap();
    eprintln!("{restarts} rollout(s) restarted");
    assert!(restarts <= 1, "only the victim's slot: {m}");
    assert_eq!(
        m["ledger"]["real_executions"], 4,
        "each rollout executed once: {m}"
    );
    assert_eq!(m["labels_used"], 2, "{m}");
    let evals = std::fs::read_to_string(out.join("eval.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(evals.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["episodes"], 2,
        "the final two-episode evaluation: {last}"
    );
}
