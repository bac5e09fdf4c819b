//! Containment: each attack is contained, graded on the ladder, and the host
//! keeps working. Needs the repository venv (scripts/setup.d/40-python-ml.sh).
#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use wmrl_autoresearch::{
    Competition, Exit, Isolation, Ladder, Rung, Sandbox, SandboxConfig, grade,
};

fn suite_dir() -> PathBuf {
    wmrl_autoresearch::competition::default_suite_dir()
}

fn iris() -> Competition {
    Competition::load(&suite_dir().join("iris")).unwrap()
}

fn sandbox(wall: f64) -> Sandbox {
    Sandbox::new(SandboxConfig {
        wall_secs: wall,
        cpu_secs: 5,
        memory_mb: 1024,
        ..Default::default()
    })
    .unwrap()
}

fn run_and_grade(
    sb: &Sandbox,
    comp: &Competition,
    code: &str,
) -> (wmrl_autoresearch::RunReport, wmrl_autoresearch::Grade) {
    let run = sb.run(code, &comp.public_dir()).unwrap();
    let r = run.report.clone();
    let g = grade(
        comp,
        &Ladder::default(),
        r.syntax_error,
        r.runtime_error(),
        &run.submission(),
    )
    .unwrap();
    (r, g)
}

fn host_still_works() {
    let out = std::process::Command::new("/bin/echo")
        .arg("ok")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

const VALID: &str = r#"
import pandas as pd
s = pd.read_csv("public/sample_submission.csv")
s.to_csv("submission.csv", index=False)
"#;

#[test]
fn valid_syntax_error_runtime_error_malformed() {
    let sb = sandbox(30.0);
    let c = iris();
    let (r, g) = run_and_grade(&sb, &c, VALID);
    assert_eq!(r.exit, Exit::Code(0), "{}", r.stderr);
    assert_eq!(g.rung, Rung::Valid);
    assert!(g.reward >= 0.5);
    // Importing pandas alone takes well over 50 ms of CPU; an accounting that
    // misses the sandboxed process reads about zero.
    if r.notes.is_empty() {
        assert!(r.cpu_secs > 0.05, "cpu {}", r.cpu_secs);
    }
    let (_, g) = run_and_grade(&sb, &c, "def f(:\n  pass\n");
    assert_eq!((g.rung, g.reward), (Rung::SyntaxError, 0.1));
    let (_, g) = run_and_grade(&sb, &c, "raise RuntimeError('boom')\n");
    assert_eq!((g.rung, g.reward), (Rung::RuntimeError, 0.2));
    let (_, g) = run_and_grade(&sb, &c, "print('no submission')\n");
    assert_eq!((g.rung, g.reward), (Rung::RuntimeError, 0.2));
    let (_, g) = run_and_grade(
        &sb,
        &c,
        "open('submission.csv','w').write('a,b\\n1,2\\n')\n",
    );
    assert_eq!((g.rung, g.reward), (Rung::Malformed, 0.0));
}

#[test]
fn network_is_unreachable() {
    let sb = sandbox(20.0);
    if sb.backend() == Isolation::RlimitsOnly {
        eprintln!("skipped: no network namespace on this machine");
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\ns.sendall(b'escaped')\nprint('CONNECTED')\n"
    );
    let (r, g) = run_and_grade(&sb, &iris(), &code);
    assert!(!r.stdout.contains("CONNECTED"));
    assert_eq!(g.rung, Rung::RuntimeError);
    assert!(listener.accept().is_err(), "the solution reached the host");
    host_still_works();
}

#[test]
fn fork_bomb_is_contained() {
    let sb = sandbox(4.0);
    let code =
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n";
    let (r, g) = run_and_grade(&sb, &iris(), code);
    assert_eq!(g.rung, Rung::RuntimeError);
    assert!(r.wall_secs < 15.0, "took {}", r.wall_secs);
    host_still_works();
}

#[test]
fn memory_bomb_is_contained() {
    let sb = sandbox(20.0);
    let code = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 2**20))\n";
    let (r, g) = run_and_grade(&sb, &iris(), code);
    assert_eq!(g.rung, Rung::RuntimeError);
    assert!(
        r.stderr.contains("MemoryError") || matches!(r.exit, Exit::Signal(_)),
        "{:?} {}",
        r.exit,
        r.stderr
    );
    host_still_works();
}

#[test]
fn writes_outside_the_working_directory_do_not_land() {
    let sb = sandbox(20.0);
    let outside = tempfile::tempdir().unwrap();
    // World-writable, so only the sandbox (not file permissions) can stop it.
    let mut perms = std::fs::metadata(outside.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o777);
    std::fs::set_permissions(outside.path(), perms).unwrap();
    let target = outside.path().join("escaped.txt");
    let code = format!("open({:?}, 'w').write('x')\n", target.display().to_string());
    let (_, g) = run_and_grade(&sb, &iris(), &code);
    if sb.backend() == Isolation::Bwrap {
        assert_eq!(g.rung, Rung::RuntimeError);
        assert!(
            !target.exists(),
            "the solution wrote outside its working directory"
        );
    } else {
        eprintln!(
            "backend {:?}: only permissions guard the host",
            sb.backend()
        );
    }
    assert!(!Path::new("/etc/wmrl-escape").exists());
    host_still_works();
}

#[test]
fn infinite_loop_is_killed_and_output_capped() {
    let sb = Sandbox::new(SandboxConfig {
        wall_secs: 2.0,
        cpu_secs: 30,
        ..Default::default()
    })
    .unwrap();
    let (r, g) = run_and_grade(&sb, &iris(), "while True:\n    pass\n");
    assert_eq!(r.exit, Exit::TimedOut);
    assert!(r.wall_secs < 6.0, "took {}", r.wall_secs);
    assert_eq!(g.rung, Rung::RuntimeError);
    let sb = Sandbox::new(SandboxConfig {
        wall_secs: 30.0,
        cpu_secs: 1,
        ..Default::default()
    })
    .unwrap();
    let (r, g) = run_and_grade(&sb, &iris(), "while True:\n    pass\n");
    assert!(
        matches!(r.exit, Exit::Signal(_)),
        "cpu limit should kill: {:?}",
        r.exit
    );
    assert!(r.wall_secs < 10.0);
    assert_eq!(g.rung, Rung::RuntimeError);
    // Unbounded output: kept to the cap; the file-size rlimit or the wall
    // clock ends the run.
    let sb = Sandbox::new(SandboxConfig {
        wall_secs: 3.0,
        max_file_mb: 4,
        max_output_bytes: 1000,
        ..Default::default()
    })
    .unwrap();
    let (r, g) = run_and_grade(&sb, &iris(), "while True:\n    print('spam' * 100)\n");
    assert!(r.output_truncated && r.stdout.len() <= 1000);
    assert_ne!(r.exit, Exit::Code(0));
    assert_eq!(g.rung, Rung::RuntimeError);
    host_still_works();
}

#[test]
fn a_python_without_the_solutions_libraries_is_refused_up_front() {
    let sb = sandbox(20.0);
    // The repository venv has what every solution template imports.
    sb.check_python(&["numpy", "pandas", "sklearn"]).unwrap();
    let err = sb
        .check_python(&["numpy", "wmrl_no_such_module"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("wmrl_no_such_module"), "{err}");
    assert!(err.contains("scripts/setup python-ml"), "{err}");
    assert!(err.contains("ModuleNotFoundError"), "{err}");
}

#[test]
fn the_replay_cache_replays_only_under_the_same_interpreter() {
    use wmrl_autoresearch::execute::Executor;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache.jsonl");
    let comp = iris();
    let code = "import numpy\nopen('submission.csv', 'w').write('id\\n')\n";
    let ex = |python: Option<PathBuf>| {
        let mut cfg = SandboxConfig {
            wall_secs: 20.0,
            ..Default::default()
        };
        if let Some(p) = python {
            cfg.python = p;
        }
        Executor::new(Sandbox::new(cfg).unwrap(), Ladder::default())
            .with_cache(&cache)
            .unwrap()
    };
    let venv = ex(None);
    let first = venv.execute(&comp, code).unwrap();
    assert!(!first.cached);
    assert_eq!(first.exit, Exit::Code(0), "{}", first.stderr_tail);
    // Same interpreter, same code: replayed.
    assert!(ex(None).execute(&comp, code).unwrap().cached);
    // Another interpreter (the venv's base, without its packages) runs it.
    let base = std::fs::canonicalize(wmrl_autoresearch::sandbox::default_python()).unwrap();
    let other = ex(Some(base)).execute(&comp, code).unwrap();
    assert!(!other.cached);
}
