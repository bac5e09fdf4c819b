//! The answers stay private: a solution that tries to read (or overwrite)
//! the competition's answer key by every route we know gets nothing, scores
//! no more than a runtime error, and leaves the key unchanged. Needs the
//! repository venv and bubblewrap (scripts/setup).
#![allow(clippy::unwrap_used)]

use sha2::{Digest, Sha256};
use wmrl_autoresearch::{Competition, Isolation, Ladder, Rung, Sandbox, SandboxConfig, grade};

fn digest(path: &std::path::Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

/// Tries each route in turn; a route that yields the key copies it into
/// submission.csv and prints `LEAKED <route>`; each route also tries to
/// overwrite the key.
const ATTACK: &str = r#"
import os, glob, shutil
ANSWER = __ANSWER__
SUITE = __SUITE__
leaked = []

def take(route, path):
    try:
        with open(path) as f:
            text = f.read()
    except Exception as e:
        print(f"blocked {route}: {type(e).__name__}")
        return
    if "id" in text or "," in text:
        with open("submission.csv", "w") as out:
            out.write(text)
        leaked.append(route)
        print(f"LEAKED {route}")

def clobber(path):
    try:
        with open(path, "w") as f:
            f.write("id,target\n")
        print(f"CLOBBERED {path}")
    except Exception:
        pass

# 1. the absolute path
take("absolute", ANSWER)
clobber(ANSWER)
# 2. relative paths from the working directory
take("relative", os.path.relpath(ANSWER, os.getcwd()))
take("dotdot", "../" * 12 + ANSWER.lstrip("/"))
# 3. a symlink made inside the working directory
try:
    os.symlink(ANSWER, "link.csv")
    take("symlink", "link.csv")
except Exception as e:
    print(f"blocked symlink: {type(e).__name__}")
# 4. /proc: every visible process's root and cwd
for pid in os.listdir("/proc"):
    if pid.isdigit() or pid == "self":
        take(f"proc-root-{pid}", f"/proc/{pid}/root{ANSWER}")
        take(f"proc-cwd-{pid}", f"/proc/{pid}/cwd/../private/test_answer.csv")
        clobber(f"/proc/{pid}/root{ANSWER}")
# 5. environment variables that name host paths
for k, v in os.environ.items():
    print(f"ENV {k}={v}")
    for cand in (v, os.path.join(v, "private", "test_answer.csv")):
        if os.path.isfile(cand) and cand.endswith(".csv") and "private" in cand:
            take(f"env-{k}", cand)
# 6. the suite's location, and a search of the file system
for p in glob.glob(os.path.join(SUITE, "*", "private", "*.csv")):
    take("suite-glob", p)
for top in ("/", "/root", "/home", "/work", "/tmp", "/opt", "/srv", "/mnt"):
    if not os.path.isdir(top):
        continue
    for dirpath, dirnames, files in os.walk(top):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in ("/usr", "/proc", "/sys", "/dev")]
        if "test_answer.csv" in files:
            take(f"walk-{dirpath}", os.path.join(dirpath, "test_answer.csv"))
print("DONE", len(leaked))
"#;

#[test]
fn no_route_reaches_the_answer_key() {
    let sb = Sandbox::new(SandboxConfig {
        wall_secs: 60.0,
        cpu_secs: 30,
        ..Default::default()
    })
    .expect("a sandbox with a private file system (bubblewrap; scripts/setup installs it)");
    assert_eq!(sb.backend(), Isolation::Bwrap);
    let suite = wmrl_autoresearch::competition::default_suite_dir()
        .canonicalize()
        .unwrap();
    let comp = Competition::load(&suite.join("iris")).unwrap();
    let answer = comp.answer_path().canonicalize().unwrap();
    let before = digest(&answer);
    let code = ATTACK
        .replace("__ANSWER__", &format!("{:?}", answer.display().to_string()))
        .replace("__SUITE__", &format!("{:?}", suite.display().to_string()));
    let run = sb.run(&code, &comp.public_dir()).unwrap();
    let r = &run.report;
    assert!(r.stdout.contains("DONE 0"), "attack did not finish: {r:?}");
    assert!(!r.stdout.contains("LEAKED"), "{}", r.stdout);
    assert!(!r.stdout.contains("CLOBBERED"), "{}", r.stdout);
    let repo = wmrl_autoresearch::sandbox::repo_root()
        .canonicalize()
        .unwrap();
    // The solution sees only the sandbox's own variables, none naming a
    // host path.
    let allowed = [
        "PATH",
        "HOME",
        "TMPDIR",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "PYTHONHASHSEED",
        "MPLBACKEND",
        "LC_CTYPE",
        "PWD",
    ];
    for l in r.stdout.lines().filter(|l| l.starts_with("ENV ")) {
        let key = l["ENV ".len()..].split('=').next().unwrap_or("");
        assert!(
            allowed.contains(&key),
            "unexpected variable in the sandbox: {l}"
        );
        assert!(
            !l.contains(&repo.display().to_string()[..]) && !l.contains("mledojo"),
            "an environment variable names a host path: {l}"
        );
    }
    for route in [
        "absolute",
        "relative",
        "dotdot",
        "symlink",
        "proc-root-self",
    ] {
        assert!(
            r.stdout.contains(&format!("blocked {route}")),
            "route {route} not tried: {}",
            r.stdout
        );
    }
    let g = grade(
        &comp,
        &Ladder::default(),
        r.syntax_error,
        r.runtime_error(),
        &run.submission(),
    )
    .unwrap();
    assert!(g.reward <= 0.2, "the attack scored {g:?}");
    assert_ne!(g.rung, Rung::Valid);
    assert_eq!(digest(&answer), before, "the answer file changed");
}

#[test]
fn a_sandbox_without_a_private_file_system_refuses_by_default() {
    for iso in [Isolation::UnshareNet, Isolation::RlimitsOnly] {
        let err = Sandbox::new(SandboxConfig {
            isolation: iso,
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("bubblewrap"), "{err}");
        assert!(
            Sandbox::new(SandboxConfig {
                isolation: iso,
                require_private_fs: false,
                ..Default::default()
            })
            .is_ok()
        );
    }
}

#[test]
fn mledojo_style_absolute_paths_reach_the_data_and_output_only() {
    let sb = Sandbox::new(SandboxConfig::default()).unwrap();
    let comp = Competition::load(&wmrl_autoresearch::competition::default_suite_dir().join("iris"))
        .unwrap();
    // The real public path (as MLE-Dojo's data_path names it) and an output
    // directory on the host.
    let data = comp.public_dir().canonicalize().unwrap();
    let out = tempfile::tempdir().unwrap();
    let views = wmrl_autoresearch::PathViews {
        public_at: Some(data.clone()),
        workdir_at: Some(out.path().to_path_buf()),
    };
    let code = format!(
        r#"import os, pandas as pd
data, out = {data:?}, {out:?}
try:
    open(os.path.join(data, "..", "private", "test_answer.csv")).read()
    print("LEAKED")
except OSError:
    print("private hidden")
s = pd.read_csv(os.path.join(data, "sample_submission.csv"))
s.to_csv(os.path.join(out, "submission.csv"), index=False)
"#,
        data = data.display().to_string(),
        out = out.path().display().to_string()
    );
    let run = sb.run_with(&code, &comp.public_dir(), &views).unwrap();
    let r = &run.report;
    assert!(r.stdout.contains("private hidden"), "{r:?}");
    let g = grade(
        &comp,
        &Ladder::default(),
        r.syntax_error,
        r.runtime_error(),
        &run.submission(),
    )
    .unwrap();
    assert_eq!(g.rung, Rung::Valid, "{g:?} {}", r.stderr);
    // The host's output directory itself is untouched (the run wrote into
    // its own working directory, seen at that path).
    assert!(!out.path().join("submission.csv").exists());
}

/// What a solution leaves behind is hostile too: the grader, which runs
/// outside the sandbox (as root in CI), opens `submission.csv` without
/// following links and reads only a regular file within the size limit.
/// Each solution here leaves something the host must not read; each is
/// graded through the executor that `wmrl autoresearch run` (and so the
/// MLE-Dojo server) and `serve-rewards` use, and scores no more than a
/// runtime error, with a short reason that quotes no host file.
#[test]
fn the_grader_follows_nothing_a_solution_leaves() {
    let sb = Sandbox::new(SandboxConfig {
        max_file_mb: 1,
        ..Default::default()
    })
    .unwrap();
    let ex = wmrl_autoresearch::execute::Executor::new(sb, Ladder::default());
    let suite = wmrl_autoresearch::competition::default_suite_dir()
        .canonicalize()
        .unwrap();
    let comp = Competition::load(&suite.join("iris")).unwrap();
    let answer = comp.answer_path().canonicalize().unwrap();
    let before = digest(&answer);
    // A root-only host file with a marker the reason must never show.
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.csv");
    std::fs::write(&secret, "id,target\nTOPSECRET,1\n").unwrap();
    let a = format!("{:?}", answer.display().to_string());
    let s = format!("{:?}", secret.display().to_string());
    let cases = [
        ("symlink to the answer key", format!("import os\nos.symlink({a}, 'submission.csv')\n")),
        ("symlink to a host file", format!("import os\nos.symlink({s}, 'submission.csv')\n")),
        ("symlink to the grader's environment", "import os\nos.symlink('/proc/self/environ', 'submission.csv')\n".to_string()),
        ("symlink to the grader's memory map", "import os\nos.symlink('/proc/self/maps', 'submission.csv')\n".to_string()),
        ("relative symlink", "import os\nopen('real.csv','w').write('id,target\\n')\nos.symlink('real.csv', 'submission.csv')\n".to_string()),
        ("symlink to a directory", "import os\nos.symlink('/', 'submission.csv')\n".to_string()),
        ("hard link", "import os\nopen('real.csv','w').write('id,target\\n')\nos.link('real.csv', 'submission.csv')\n".to_string()),
        ("fifo", "import os\nos.mkfifo('submission.csv')\n".to_string()),
        ("directory", "import os\nos.mkdir('submission.csv')\n".to_string()),
        ("unix socket", "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('submission.csv')\n".to_string()),
        ("over the size limit", "with open('submission.csv', 'w') as f:\n    f.write('id,target\\n' + '1,2\\n' * 400000)\n".to_string()),
        ("a child that swaps in a link after exit", format!("import os, time\nopen('submission.csv','w').write('id,target\\n')\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.5)\n    os.remove('submission.csv')\n    os.symlink({a}, 'submission.csv')\n    time.sleep(5)\n")),
    ];
    for (what, code) in cases {
        let o = ex.execute(&comp, &code).unwrap();
        let g = &o.grade;
        assert!(g.reward <= 0.2, "{what}: {o:?}");
        assert_ne!(g.rung, Rung::Valid, "{what}");
        let reason = g.reason.clone().unwrap_or_default();
        assert!(
            reason.chars().count() <= wmrl_autoresearch::grade::MAX_REASON_CHARS,
            "{what}: {reason}"
        );
        for leak in ["TOPSECRET", "PATH=", "sepal", "libc"] {
            assert!(!reason.contains(leak), "{what}: {reason}");
        }
    }
    assert_eq!(digest(&answer), before, "the answer file changed");
}
