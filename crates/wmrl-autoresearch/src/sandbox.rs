//! Real execution: run one Python solution in a fresh working directory under
//! a wall-clock limit, CPU-time / address-space / file-size / process-count
//! rlimits, without network, with captured, size-capped output.
//!
//! Isolation backends, best first ([`Isolation::Auto`] picks the first that
//! works on this machine, probed once):
//! - `Bwrap`: bubblewrap with new network, pid, ipc and uts namespaces and a
//!   file system of its own: the system directories Python needs read-only,
//!   the interpreter's environment read-only, a private `/tmp`, and the
//!   working directory (with its copy of the public files) writable. The
//!   repository, the suite's private answers and the user's home do not
//!   exist inside.
//! - `UnshareNet`: `unshare -r -n` (util-linux): a new network namespace only;
//!   the host's files stay visible.
//! - `RlimitsOnly`: rlimits and the uid drop, no namespaces: the solution
//!   can reach the network. Used only where the kernel allows neither.
//!
//! Only `Bwrap` keeps the answers private, so by default
//! (`require_private_fs`) a sandbox that resolves to another backend refuses
//! to start; set it to false to run anyway on such a machine, knowing that
//! a solution can then read any file the host user can (and score by copying
//! the answer key).
//!
//! When the host runs as root the child drops to a per-run unprivileged uid
//! (`uid_base + k`) before exec, so `RLIMIT_NPROC` binds (the kernel exempts
//! root from it) and stray processes can be killed by uid afterwards. As a
//! non-root user the process limit is not set (it would count every process
//! the user owns) and the run says so in its `notes`.
//!
//! This module must never run the solution in the host's own directories or
//! with the host's environment variables.

#![allow(unsafe_code)]

use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io_err};

/// Exit code the runner uses for a solution that does not compile.
pub const SYNTAX_EXIT_CODE: i32 = 97;

const RUNNER: &str = r#"import sys
with open("solution.py", "rb") as f:
    src = f.read()
try:
    code = compile(src, "solution.py", "exec")
except (SyntaxError, ValueError) as e:
    print(f"SyntaxError: {e}", file=sys.stderr)
    sys.exit(97)
sys.argv = ["solution.py"]
exec(code, {"__name__": "__main__", "__file__": "solution.py"})
"#;

/// Which isolation to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    Auto,
    Bwrap,
    UnshareNet,
    RlimitsOnly,
}

/// Sandbox limits. Defaults suit the shipped suite (a solution takes about a
/// second of CPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxConfig {
    /// Python interpreter (default: the repository's `.venv/bin/python`,
    /// or `$WMRL_PYTHON`).
    pub python: PathBuf,
    /// Wall-clock limit; the whole process group is killed after it.
    pub wall_secs: f64,
    /// RLIMIT_CPU per process (SIGXCPU at the limit, SIGKILL one second later).
    pub cpu_secs: u64,
    /// RLIMIT_AS per process.
    pub memory_mb: u64,
    /// RLIMIT_NPROC (threads count too), enforced when the host is root.
    pub max_procs: u64,
    /// RLIMIT_FSIZE: the largest file the solution may write.
    pub max_file_mb: u64,
    /// Bytes of stdout and of stderr kept.
    pub max_output_bytes: usize,
    pub isolation: Isolation,
    /// First uid of the per-run unprivileged uids used when the host is root.
    pub uid_base: u32,
    /// Where working directories are created (default: the system temp dir).
    pub work_root: Option<PathBuf>,
    /// Refuse to start unless the backend gives the solution a file system
    /// of its own (`Bwrap`): other backends leave the suite's answers
    /// readable. Default true.
    pub require_private_fs: bool,
}

/// The repository root as seen from this crate's sources.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `$WMRL_PYTHON`, else the repository venv, else `python3`.
pub fn default_python() -> PathBuf {
    if let Ok(p) = std::env::var("WMRL_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = repo_root().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            python: default_python(),
            wall_secs: 30.0,
            cpu_secs: 20,
            memory_mb: 2048,
            max_procs: 32,
            max_file_mb: 64,
            max_output_bytes: 64 * 1024,
            isolation: Isolation::Auto,
            uid_base: 100_000,
            work_root: None,
            require_private_fs: true,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// Killed at the wall-clock limit.
    TimedOut,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub exit: Exit,
    pub syntax_error: bool,
    pub stdout: String,
    pub stderr: String,
    pub output_truncated: bool,
    /// CPU seconds of the run and every descendant: from a per-run cpuacct
    /// cgroup when the host is root, else `wait4`'s rusage (which misses
    /// processes inside bwrap's pid namespace; see `notes`).
    pub cpu_secs: f64,
    pub wall_secs: f64,
    pub isolation: Isolation,
    pub notes: Vec<String>,
}

impl RunReport {
    /// `None` when the solution exited 0, else why it failed.
    pub fn runtime_error(&self) -> Option<String> {
        match &self.exit {
            Exit::Code(0) => None,
            Exit::Code(c) => Some(format!("exit code {c}")),
            Exit::Signal(s) => Some(format!("killed by signal {s}")),
            Exit::TimedOut => Some("wall-clock limit".into()),
        }
    }
}

/// A finished run and its working directory (deleted on drop).
#[derive(Debug)]
pub struct Execution {
    pub report: RunReport,
    pub workdir: tempfile::TempDir,
    /// The working directory, opened before the solution started: the
    /// submission is read relative to this, so a solution that renames or
    /// replaces its directory (where the backend lets it) cannot redirect
    /// the grader.
    dir: File,
    /// The sandbox's file-size limit in bytes: the largest submission read.
    max_file_bytes: u64,
}

impl Execution {
    /// The solution's `./submission.csv` as the grader may read it: opened
    /// relative to the working directory held open since before the run,
    /// without following a symbolic link and without blocking on a FIFO;
    /// only a regular file with one link and at most the sandbox's
    /// file-size limit is read ([`crate::grade::Submission`]). Nothing a
    /// solution leaves can make the host read another file.
    pub fn submission(&self) -> crate::grade::Submission {
        use std::os::fd::{AsRawFd, FromRawFd};
        let name = c"submission.csv";
        // SAFETY: openat with a valid directory fd and a NUL-terminated
        // name; the returned fd (when >= 0) is owned by nobody else.
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        let opened = if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: fd is a freshly opened descriptor we own.
            Ok(unsafe { File::from_raw_fd(fd) })
        };
        crate::grade::Submission::from_open(opened, self.max_file_bytes)
    }
}

/// The sandbox: a resolved backend and its limits.
#[derive(Debug, Clone)]
pub struct Sandbox {
    cfg: SandboxConfig,
    backend: Isolation,
    drop_uid: bool,
}

static NEXT_UID: AtomicU32 = AtomicU32::new(0);
const UID_SLOTS: u32 = 1024;

/// A per-run uid reserved across processes by an exclusive marker file
/// (holding the owner's pid; a marker whose owner died is reclaimed), so two
/// wmrl processes never share a uid and `kill_uid` never reaches another
/// process's run.
struct UidLease {
    uid: u32,
    marker: PathBuf,
}

impl UidLease {
    fn take(base: u32) -> Result<Self> {
        let dir = std::env::temp_dir().join("wmrl-sandbox-uids");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let me = std::process::id();
        let start = me
            .wrapping_mul(131)
            .wrapping_add(NEXT_UID.fetch_add(1, Ordering::Relaxed));
        for k in 0..UID_SLOTS {
            let uid = base + (start.wrapping_add(k)) % UID_SLOTS;
            let marker = dir.join(uid.to_string());
            let open = || {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&marker)
            };
            let file = match open() {
                Ok(f) => Some(f),
                Err(_) => {
                    let owner = std::fs::read_to_string(&marker)
                        .ok()
                        .and_then(|t| t.trim().parse::<i32>().ok());
                    // SAFETY: kill with signal 0 only checks that the pid exists.
                    let alive = owner.is_some_and(|p| p > 0 && unsafe { libc::kill(p, 0) } == 0);
                    if !alive && owner.is_some() && std::fs::remove_file(&marker).is_ok() {
                        open().ok()
                    } else {
                        None
                    }
                }
            };
            if let Some(mut f) = file {
                let _ = std::io::Write::write_all(&mut f, me.to_string().as_bytes());
                return Ok(Self { uid, marker });
            }
        }
        Err(Error::Sandbox("no free sandbox uid".into()))
    }
}

impl Drop for UidLease {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.marker);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The directories the interpreter needs outside the system ones: the
/// virtual environment `python` lives in (its `bin/`'s parent, holding
/// `pyvenv.cfg` and site-packages) and, when the interpreter it links to is
/// not under `/usr`, that installation's prefix too.
fn python_roots(python: &Path) -> Vec<PathBuf> {
    let resolved = if python.is_absolute() {
        Some(python.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(python))
                .find(|p| p.is_file())
        })
    };
    let Some(python) = resolved else {
        return Vec::new();
    };
    let mut roots = Vec::new();
    let prefix = |p: &Path| p.parent().and_then(Path::parent).map(Path::to_path_buf);
    for p in [Some(python.clone()), std::fs::canonicalize(&python).ok()]
        .into_iter()
        .flatten()
    {
        if let Some(r) = prefix(&p)
            && r.is_dir()
            && !r.starts_with("/usr")
            && r != Path::new("/")
            && !roots.contains(&r)
        {
            roots.push(r);
        }
    }
    roots
}

/// What identifies the interpreter's library set, for replay-cache keys:
/// its path and, for each of its roots ([`python_roots`]) holding a
/// `site-packages`, the sorted names of the installed distributions
/// (`numpy-2.2.6.dist-info`, ...). Another venv, or a package upgraded or
/// missing, gives another fingerprint.
pub fn python_fingerprint(python: &Path) -> String {
    let mut parts = vec![python.display().to_string()];
    for root in python_roots(python) {
        let Ok(libs) = std::fs::read_dir(root.join("lib")) else {
            continue;
        };
        for lib in libs.flatten() {
            let Ok(pkgs) = std::fs::read_dir(lib.path().join("site-packages")) else {
                continue;
            };
            let mut names: Vec<String> = pkgs
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".dist-info"))
                .collect();
            names.sort();
            parts.extend(names);
        }
    }
    parts.join("\n")
}

/// bubblewrap's view of the file system: the system directories a Python
/// interpreter needs (`/usr`, `/etc`, the merged-usr links) read-only, the
/// interpreter's own environment read-only ([`python_roots`]), a private
/// `/tmp` and `/dev`, a `/proc` of the run's own pid namespace, and the
/// working directory (which holds a copy of the competition's public files)
/// writable. Nothing else of the host exists inside: not the repository, the
/// suite's `private/` answers, `/root` or `/home`.
fn bwrap_args(workdir: &Path, python: &Path, views: &PathViews) -> Vec<String> {
    let wd = workdir.display().to_string();
    let mut a: Vec<String> = Vec::new();
    let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
    push(&["--ro-bind", "/usr", "/usr"]);
    for dir in [
        "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
    ] {
        let path = Path::new(dir);
        match std::fs::read_link(path) {
            // Merged /usr: `/bin -> usr/bin` and the like stay links.
            Ok(target) => {
                let t = target.display().to_string();
                push(&["--symlink", &t, dir]);
            }
            Err(_) if path.is_dir() => push(&["--ro-bind", dir, dir]),
            Err(_) => {}
        }
    }
    push(&[
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
    ]);
    for r in python_roots(python) {
        let r = r.display().to_string();
        a.extend(["--ro-bind".into(), r.clone(), r]);
    }
    a.extend(["--bind".into(), wd.clone(), wd.clone()]);
    if let Some(inside) = &views.public_at {
        a.extend([
            "--ro-bind".into(),
            workdir.join("public").display().to_string(),
            inside.display().to_string(),
        ]);
    }
    if let Some(inside) = &views.workdir_at {
        a.extend(["--bind".into(), wd.clone(), inside.display().to_string()]);
    }
    a.extend(["--chdir".into(), wd]);
    a
}

/// Extra views of a run's files at absolute paths, for code written against
/// MLE-Dojo, which reads the data from its `data_path` and writes
/// `submission.csv` into its `output_path`: the run's copy of the public
/// files (`./public/`) also read-only at `public_at`, and the working
/// directory also at `workdir_at`. Only `Bwrap` can give them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathViews {
    pub public_at: Option<PathBuf>,
    pub workdir_at: Option<PathBuf>,
}

/// The rlimits and uid drop applied in the child between fork and exec.
#[derive(Clone, Copy)]
struct ChildSetup {
    limits: [(libc::__rlimit_resource_t, libc::rlim_t, libc::rlim_t); 5],
    nproc: Option<libc::rlim_t>,
    uid: Option<u32>,
    /// An open `cgroup.procs` to join (writing "0" moves the writer).
    cgroup_fd: Option<std::os::fd::RawFd>,
}

/// A per-run CPU-accounting cgroup (root only): counts the CPU time of every
/// process of the run, including ones in bwrap's pid namespace that
/// `wait4`'s rusage never sees.
struct CpuCgroup {
    dir: PathBuf,
    procs: File,
    v1: bool,
}

static NEXT_CGROUP: AtomicU32 = AtomicU32::new(0);

impl CpuCgroup {
    fn create() -> Option<Self> {
        let n = NEXT_CGROUP.fetch_add(1, Ordering::Relaxed);
        let name = format!("run-{}-{n}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpuacct/cpuacct.usage");
        let (dir, v1) = if v1.exists() {
            (
                PathBuf::from("/sys/fs/cgroup/cpuacct/wmrl-sandbox").join(name),
                true,
            )
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (
                PathBuf::from("/sys/fs/cgroup").join(format!("wmrl-sandbox-{name}")),
                false,
            )
        } else {
            return None;
        };
        std::fs::create_dir_all(&dir).ok()?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .ok()?;
        Some(Self { dir, procs, v1 })
    }

    fn usage_secs(&self) -> Option<f64> {
        if self.v1 {
            let t = std::fs::read_to_string(self.dir.join("cpuacct.usage")).ok()?;
            Some(t.trim().parse::<f64>().ok()? * 1e-9)
        } else {
            let t = std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
            let line = t.lines().find(|l| l.starts_with("usage_usec"))?;
            Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? * 1e-6)
        }
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn apply_child_setup(cmd: &mut Command, setup: ChildSetup) {
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setsid, write, setrlimit, setgroups,
    // setgid, setuid); it allocates nothing and touches no locks. The cgroup
    // fd stays open in the parent until the child has exited.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = setup.cgroup_fd
                && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(std::io::Error::last_os_error());
            }
            for (res, soft, hard) in setup.limits {
                let r = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(res, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(n) = setup.nproc {
                let r = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NPROC, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(uid) = setup.uid
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Kill every process of `uid` (they are all this run's: uids are per run).
fn kill_uid(uid: u32) {
    let mut cmd = Command::new("/bin/true");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: async-signal-safe calls only, in the forked child before exec;
    // kill(-1) from a process running as `uid` reaches exactly that uid's
    // processes (and never the caller itself).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            libc::kill(-1, libc::SIGKILL);
            Ok(())
        });
    }
    let _ = cmd.status();
}

fn read_capped(path: &Path, cap: usize) -> (String, bool) {
    let mut buf = Vec::new();
    let truncated = match File::open(path) {
        Ok(f) => {
            let _ = f.take(cap as u64 + 1).read_to_end(&mut buf);
            buf.len() > cap
        }
        Err(_) => false,
    };
    buf.truncate(cap);
    (String::from_utf8_lossy(&buf).into_owned(), truncated)
}

fn copy_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst).map_err(io_err(dst))?;
    for entry in std::fs::read_dir(src).map_err(io_err(src))? {
        let entry = entry.map_err(io_err(src))?;
        let to = dst.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else {
            std::fs::copy(entry.path(), &to).map_err(io_err(&to))?;
        }
    }
    Ok(())
}

/// Wait for `pid` with a deadline; returns (exit, cpu seconds).
fn wait_with_deadline(pid: libc::pid_t, deadline: Instant) -> (Exit, f64) {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    loop {
        // SAFETY: pid is our own child, status and ru are valid pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            return (Exit::Signal(0), 0.0);
        }
        if Instant::now() >= deadline && !timed_out {
            timed_out = true;
            // SAFETY: pid leads its own process group (setsid in the child).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    let cpu = tv(ru.ru_utime) + tv(ru.ru_stime);
    let exit = if timed_out {
        Exit::TimedOut
    } else if libc::WIFEXITED(status) {
        Exit::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        Exit::Signal(0)
    };
    (exit, cpu)
}

impl Sandbox {
    /// Resolve the backend (probing the machine once per process for `Auto`).
    pub fn new(cfg: SandboxConfig) -> Result<Self> {
        if cfg.wall_secs <= 0.0 || cfg.cpu_secs == 0 || cfg.memory_mb == 0 {
            return Err(Error::Config("sandbox limits must be positive".into()));
        }
        let drop_uid = is_root();
        let backend = match cfg.isolation {
            Isolation::Auto => {
                static PROBED: OnceLock<Isolation> = OnceLock::new();
                *PROBED.get_or_init(|| probe(drop_uid, cfg.uid_base))
            }
            other => other,
        };
        if cfg.require_private_fs && backend != Isolation::Bwrap {
            return Err(Error::Sandbox(format!(
                "the sandbox backend here is {backend:?}, which leaves the host's files (and the competitions' private answers) readable to solutions; install bubblewrap (scripts/setup does: apt-get install bubblewrap) or set require_private_fs = false to run without that guarantee"
            )));
        }
        Ok(Self {
            cfg,
            backend,
            drop_uid,
        })
    }

    pub fn backend(&self) -> Isolation {
        self.backend
    }

    /// Check, through the sandbox itself, that its Python imports every
    /// module in `modules` (the solutions' libraries), so that a missing
    /// venv is one clear error up front instead of every solution failing
    /// with a runtime error and a bench measuring nothing.
    pub fn check_python(&self, modules: &[&str]) -> Result<()> {
        let public = tempfile::tempdir().map_err(io_err(std::env::temp_dir()))?;
        let code = format!("import {}\n", modules.join(", "));
        let run = self.run(&code, public.path())?;
        match run.report.runtime_error() {
            None => Ok(()),
            Some(why) => {
                let last = run
                    .report
                    .stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .to_string();
                Err(Error::Sandbox(format!(
                    "the sandbox's Python ({}) cannot import {} ({why}: {last}); \
                     build the repository's venv with `scripts/setup python-ml` \
                     (.venv/, envs/mledojo/requirements.txt) or point WMRL_PYTHON \
                     at an interpreter that has them",
                    self.cfg.python.display(),
                    modules.join(", ")
                )))
            }
        }
    }
    pub fn config(&self) -> &SandboxConfig {
        &self.cfg
    }

    /// Run `code` as `solution.py` in a fresh working directory holding a
    /// copy of `public_dir` at `./public/`. The solution writes
    /// `./submission.csv`.
    pub fn run(&self, code: &str, public_dir: &Path) -> Result<Execution> {
        self.run_with(code, public_dir, &PathViews::default())
    }

    /// [`Self::run`] with extra [`PathViews`] of the run's files.
    pub fn run_with(&self, code: &str, public_dir: &Path, views: &PathViews) -> Result<Execution> {
        if *views != PathViews::default() && self.backend != Isolation::Bwrap {
            return Err(Error::Sandbox(format!(
                "path views (MLE-Dojo's data_path/output_path) need bubblewrap; backend is {:?}",
                self.backend
            )));
        }
        let (workdir, logs, dir) = self.prepare_workdir(code, public_dir)?;
        let wd = workdir.path().to_path_buf();
        let lease = if self.drop_uid {
            Some(UidLease::take(self.cfg.uid_base)?)
        } else {
            None
        };
        let uid = lease.as_ref().map(|l| l.uid);
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&wd, Some(uid), Some(uid)).map_err(io_err(&wd))?;
        }
        let out_path = logs.path().join("stdout");
        let err_path = logs.path().join("stderr");
        let stdout = File::create(&out_path).map_err(io_err(&out_path))?;
        let stderr = File::create(&err_path).map_err(io_err(&err_path))?;

        let mut cmd = self.command(&wd, views, stdout, stderr);
        let mut notes = Vec::new();
        let cgroup = if uid.is_some() {
            CpuCgroup::create()
        } else {
            None
        };
        let setup = self.child_setup(uid, cgroup.as_ref());
        if uid.is_none() {
            notes.push("not root: no per-run uid, RLIMIT_NPROC not set".to_string());
        }
        if self.backend == Isolation::RlimitsOnly {
            notes.push("no namespaces on this machine: network not isolated".to_string());
        }
        apply_child_setup(&mut cmd, setup);
        let (exit, rusage_cpu, wall_secs) = self.spawn_and_wait(&mut cmd, uid)?;
        drop(lease);
        let cpu_secs = match cgroup.as_ref().and_then(CpuCgroup::usage_secs) {
            Some(c) => c,
            None => {
                if self.backend == Isolation::Bwrap {
                    notes.push(
                        "no cpu cgroup: cpu_secs from rusage, which misses bwrap's pid namespace"
                            .to_string(),
                    );
                }
                rusage_cpu
            }
        };
        drop(cgroup);
        let (stdout, t1) = read_capped(&out_path, self.cfg.max_output_bytes);
        let (stderr, t2) = read_capped(&err_path, self.cfg.max_output_bytes);
        let syntax_error = exit == Exit::Code(SYNTAX_EXIT_CODE);
        Ok(Execution {
            report: RunReport {
                exit,
                syntax_error,
                stdout,
                stderr,
                output_truncated: t1 || t2,
                cpu_secs,
                wall_secs,
                isolation: self.backend,
                notes,
            },
            workdir,
            dir,
            max_file_bytes: self.cfg.max_file_mb * 1024 * 1024,
        })
    }

    /// Create the run's working directory and its log directory under the
    /// work root, open the working directory (`O_NOFOLLOW`) before anything
    /// runs in it, then fill it: a copy of `public_dir` at `./public/`,
    /// `solution.py` and the runner. Returns (working dir, log dir, open
    /// working dir).
    fn prepare_workdir(
        &self,
        code: &str,
        public_dir: &Path,
    ) -> Result<(tempfile::TempDir, tempfile::TempDir, File)> {
        let root = self
            .cfg
            .work_root
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&root).map_err(io_err(&root))?;
        let workdir = tempfile::Builder::new()
            .prefix("wmrl-sbx-")
            .tempdir_in(&root)
            .map_err(io_err(&root))?;
        let wd = workdir.path().to_path_buf();
        let logs = tempfile::Builder::new()
            .prefix("wmrl-sbx-log-")
            .tempdir_in(&root)
            .map_err(io_err(&root))?;
        let dir = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&wd)
                .map_err(io_err(&wd))?
        };
        copy_dir(public_dir, &wd.join("public"))?;
        std::fs::write(wd.join("solution.py"), code).map_err(io_err(&wd))?;
        std::fs::write(wd.join("_wmrl_runner.py"), RUNNER).map_err(io_err(&wd))?;
        Ok((workdir, logs, dir))
    }

    /// The command that runs the runner under this sandbox's backend in
    /// `wd`, with a cleared environment, no stdin, and its output into the
    /// given log files.
    fn command(&self, wd: &Path, views: &PathViews, stdout: File, stderr: File) -> Command {
        let python = self.cfg.python.display().to_string();
        let py_args = ["-B".to_string(), "-u".into(), "_wmrl_runner.py".into()];
        let mut cmd = match self.backend {
            Isolation::Bwrap => {
                let mut c = Command::new("bwrap");
                c.args(bwrap_args(wd, &self.cfg.python, views))
                    .arg(&python)
                    .args(&py_args);
                c
            }
            Isolation::UnshareNet => {
                let mut c = Command::new("unshare");
                c.args(["-r", "-n", "--"]).arg(&python).args(&py_args);
                c
            }
            Isolation::RlimitsOnly | Isolation::Auto => {
                let mut c = Command::new(&python);
                c.args(&py_args);
                c
            }
        };
        cmd.current_dir(wd)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", wd)
            .env("TMPDIR", wd)
            .env("OMP_NUM_THREADS", "1")
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("MKL_NUM_THREADS", "1")
            .env("PYTHONHASHSEED", "0")
            .env("MPLBACKEND", "Agg")
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        cmd
    }

    /// The configured rlimits, and (with a per-run `uid`) the process limit,
    /// the uid drop and the cgroup to join, for [`apply_child_setup`].
    fn child_setup(&self, uid: Option<u32>, cgroup: Option<&CpuCgroup>) -> ChildSetup {
        let mb = |m: u64| (m * 1024 * 1024) as libc::rlim_t;
        ChildSetup {
            limits: [
                (
                    libc::RLIMIT_CPU,
                    self.cfg.cpu_secs as _,
                    (self.cfg.cpu_secs + 1) as _,
                ),
                (
                    libc::RLIMIT_AS,
                    mb(self.cfg.memory_mb),
                    mb(self.cfg.memory_mb),
                ),
                (
                    libc::RLIMIT_FSIZE,
                    mb(self.cfg.max_file_mb),
                    mb(self.cfg.max_file_mb),
                ),
                (libc::RLIMIT_CORE, 0, 0),
                (libc::RLIMIT_NOFILE, 256, 256),
            ],
            nproc: uid.map(|_| self.cfg.max_procs as _),
            uid,
            cgroup_fd: cgroup.map(|c| std::os::fd::AsRawFd::as_raw_fd(&c.procs)),
        }
    }

    /// Spawn `cmd`, wait for it up to the wall-clock limit, then kill
    /// whatever the run left behind (its process group and, with a per-run
    /// `uid`, every process of that uid). Returns (exit, rusage CPU seconds,
    /// wall seconds).
    fn spawn_and_wait(&self, cmd: &mut Command, uid: Option<u32>) -> Result<(Exit, f64, f64)> {
        let start = Instant::now();
        let child = cmd
            .spawn()
            .map_err(|e| Error::Sandbox(format!("spawn {:?}: {e}", cmd.get_program())))?;
        let pid = child.id() as libc::pid_t;
        let deadline = start + Duration::from_secs_f64(self.cfg.wall_secs);
        let (mut exit, rusage_cpu) = wait_with_deadline(pid, deadline);
        // bwrap reports a signalled child as exit code 128 + signal.
        if let (Isolation::Bwrap, Exit::Code(c)) = (self.backend, &exit)
            && *c > 128
            && *c < 128 + 65
        {
            exit = Exit::Signal(c - 128);
        }
        let wall_secs = start.elapsed().as_secs_f64();
        // Anything left behind (a detached grandchild, a fork bomb) dies here.
        // SAFETY: the group id was our child's pid; signalling a dead group is harmless.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        if let Some(uid) = uid {
            kill_uid(uid);
        }
        Ok((exit, rusage_cpu, wall_secs))
    }
}

/// Try the backends in order with the same uid drop a run would use.
fn probe(drop_uid: bool, uid_base: u32) -> Isolation {
    let try_cmd = |mut cmd: Command| -> bool {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        apply_child_setup(
            &mut cmd,
            ChildSetup {
                limits: [(libc::RLIMIT_CORE, 0, 0); 5],
                nproc: None,
                uid: drop_uid.then_some(uid_base + UID_SLOTS),
                cgroup_fd: None,
            },
        );
        cmd.status().map(|s| s.success()).unwrap_or(false)
    };
    let tmp = std::env::temp_dir();
    let mut bw = Command::new("bwrap");
    bw.args(bwrap_args(
        &tmp,
        Path::new("/bin/true"),
        &PathViews::default(),
    ))
    .arg("/bin/true");
    if try_cmd(bw) {
        return Isolation::Bwrap;
    }
    let mut un = Command::new("unshare");
    un.args(["-r", "-n", "--", "/bin/true"]);
    if try_cmd(un) {
        return Isolation::UnshareNet;
    }
    tracing::warn!("sandbox: neither bwrap nor unshare -n works here; network is not isolated");
    Isolation::RlimitsOnly
}
