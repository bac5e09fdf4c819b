//! Simulator workers started and supervised by the client: `n` processes of
//! one command (e.g. `envs/libero/.venv/bin/python envs/libero/server.py`),
//! each bound to its own loopback endpoint, joined into a [`BridgePool`].
//!
//! The pool checks the processes whenever it looks after its workers: at
//! the start of every reset and step, and while a call waits for a free slot.
//! A worker whose process exited is started again on the same endpoint at
//! once, and the pool restarts the worker's running episodes from their
//! reset once it answers. So a layout without a spare slot (every worker's
//! slots in use, as in configs/libero_ci.toml) recovers as well: the call
//! that lost episodes waits for the new process instead of for a free slot
//! that never comes, and no episode is lost or counted twice. A worker that
//! cannot be started again is given up at once, with the reason. The
//! processes are killed when the pool is dropped.
//!
//! The command must accept `--bind ENDPOINT` and print one line
//! `ENDPOINT <endpoint>` on stdout once it serves (both servers do; see
//! docs/protocol.md). Its stderr is passed through; the last lines are kept
//! so that a worker that exits before serving is reported with its own
//! words (e.g. a Python import error), how long it ran and its exit status.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wmrl_env::{Action, EnvSpec, Observation, ResetRequest, SlotRestart, StepResult, VecEnv};

use crate::error::{BridgeError, Result};
use crate::pool::{BridgePool, PoolConfig};

/// How to start one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    /// Arguments before `--bind ENDPOINT`.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// How long a worker may take to print its endpoint (LIBERO imports and
    /// builds its environments first: about 10 s).
    pub ready_timeout: Duration,
}

/// Lines of a worker's stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 12;

struct Managed {
    endpoint: String,
    child: Child,
}

/// The worker processes of a pool, in worker order; `None` for a worker
/// that could not be started again (the pool gave it up).
pub(crate) struct Processes {
    cmd: WorkerCommand,
    procs: Vec<Option<Managed>>,
    restarts: usize,
}

impl Processes {
    /// Start `n` workers, each on a free loopback port. On an error the
    /// ones already started are killed (by drop).
    fn start_all(cmd: WorkerCommand, n: usize) -> Result<Self> {
        let mut p = Self {
            cmd,
            procs: Vec::with_capacity(n),
            restarts: 0,
        };
        for _ in 0..n {
            let endpoint = free_endpoint()?;
            p.procs.push(Some(start(&p.cmd, &endpoint)?));
        }
        Ok(p)
    }

    fn endpoints(&self) -> Vec<String> {
        self.procs
            .iter()
            .flatten()
            .map(|m| m.endpoint.clone())
            .collect()
    }

    /// Start again every worker whose process has exited (reaping it).
    /// Returns, per such worker, `Ok(what happened)` when it runs again or
    /// `Err(why it cannot)`; the pool marks the first down and gives the
    /// second up.
    pub(crate) fn revive(&mut self) -> Vec<(usize, std::result::Result<String, String>)> {
        let mut out = Vec::new();
        for (i, slot) in self.procs.iter_mut().enumerate() {
            let Some(m) = slot.as_mut() else { continue };
            let Ok(Some(status)) = m.child.try_wait() else {
                continue;
            };
            let died = format!("worker process {} exited ({status})", m.child.id());
            tracing::warn!(endpoint = %m.endpoint, %status, "simulator worker died; starting it again");
            match start(&self.cmd, &m.endpoint) {
                Ok(fresh) => {
                    *m = fresh;
                    self.restarts += 1;
                    out.push((i, Ok(format!("{died}; started again"))));
                }
                Err(e) => {
                    *slot = None;
                    out.push((i, Err(format!("{died}; starting it again failed: {e}"))));
                }
            }
        }
        out
    }

    pub(crate) fn restarts(&self) -> usize {
        self.restarts
    }

    /// Process ids, in worker order (0 for a worker given up).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.procs
            .iter()
            .map(|m| m.as_ref().map_or(0, |m| m.child.id()))
            .collect()
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for m in self.procs.iter_mut().flatten() {
            let _ = m.child.kill();
            let _ = m.child.wait();
        }
    }
}

/// A [`BridgePool`] over worker processes it started itself.
pub struct SupervisedPool {
    pool: BridgePool,
}

fn free_endpoint() -> Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| BridgeError::Spawn(format!("no free loopback port: {e}")))?;
    let port = l
        .local_addr()
        .map_err(|e| BridgeError::Spawn(e.to_string()))?
        .port();
    Ok(format!("tcp://127.0.0.1:{port}"))
}

/// Pass a worker's stderr through, keeping its last lines.
fn pass_stderr(stderr: impl std::io::Read + Send + 'static) -> Arc<Mutex<VecDeque<String>>> {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_LINES)));
    let keep = Arc::clone(&tail);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            if let Ok(mut t) = keep.lock() {
                if t.len() == STDERR_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }
    });
    tail
}

/// The exit status of a worker that closed its stdout, waiting briefly (it
/// normally exits at once); a worker still running after that is killed.
fn exit_status(child: &mut Child) -> Option<ExitStatus> {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn start(cmd: &WorkerCommand, endpoint: &str) -> Result<Managed> {
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args)
        .arg("--bind")
        .arg(endpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &cmd.env {
        c.env(k, v);
    }
    let shown = std::iter::once(cmd.program.display().to_string())
        .chain(cmd.args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let started = Instant::now();
    let mut child = c
        .spawn()
        .map_err(|e| BridgeError::Spawn(format!("cannot start worker `{shown}`: {e}")))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(BridgeError::Spawn(format!(
            "worker `{shown}` started without its output pipes"
        )));
    };
    let tail = pass_stderr(stderr);
    let (tx, rx) = mpsc::channel();
    // Read the ENDPOINT line, then keep draining so the worker never blocks
    // on a full pipe. The channel closes when stdout does (the worker exited).
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(e) = line.strip_prefix("ENDPOINT ") {
                let _ = tx.send(e.trim().to_string());
                sent = true;
            }
        }
    });
    let what = match rx.recv_timeout(cmd.ready_timeout) {
        Ok(_) => {
            return Ok(Managed {
                endpoint: endpoint.to_string(),
                child,
            });
        }
        Err(RecvTimeoutError::Disconnected) => {
            let status = exit_status(&mut child);
            format!(
                "exited after {:.1} s without serving ({})",
                started.elapsed().as_secs_f64(),
                status.map_or_else(|| "closed its stdout; killed".into(), |s| s.to_string())
            )
        }
        Err(RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            format!(
                "did not print `ENDPOINT ...` within {:.1} s (still running; killed)",
                cmd.ready_timeout.as_secs_f64()
            )
        }
    };
    // The stderr reader ends at the worker's exit; give it a moment to
    // catch the last lines.
    std::thread::sleep(Duration::from_millis(100));
    let tail: Vec<String> = tail
        .lock()
        .map(|t| t.iter().cloned().collect())
        .unwrap_or_default();
    let said = if tail.is_empty() {
        " Its stderr was empty.".to_string()
    } else {
        format!(" Its stderr ended with:\n  {}", tail.join("\n  "))
    };
    Err(BridgeError::Spawn(format!(
        "worker `{shown}` {what}.{said}"
    )))
}

impl SupervisedPool {
    /// Start `n_workers` workers and connect a pool to them.
    pub fn spawn(cmd: WorkerCommand, n_workers: usize, config: PoolConfig) -> Result<Self> {
        if n_workers == 0 {
            return Err(BridgeError::Spawn("no workers asked for".into()));
        }
        let processes = Processes::start_all(cmd, n_workers)?;
        let endpoints = processes.endpoints();
        tracing::info!(workers = n_workers, ?endpoints, "simulator workers started");
        let mut pool = BridgePool::connect(&endpoints, config)?;
        pool.supervise(processes);
        Ok(Self { pool })
    }

    /// Workers started again after dying.
    pub fn worker_restarts(&self) -> usize {
        self.pool.processes().map_or(0, Processes::restarts)
    }

    pub fn pool(&self) -> &BridgePool {
        &self.pool
    }

    /// Process ids of the workers (e.g. to kill one in a test); 0 for a
    /// worker that could not be started again.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.pool.processes().map_or_else(Vec::new, Processes::pids)
    }
}

impl VecEnv for SupervisedPool {
    fn spec(&self) -> &EnvSpec {
        self.pool.spec()
    }
    fn num_envs(&self) -> usize {
        self.pool.num_envs()
    }
    fn reset(&mut self, requests: &[(usize, ResetRequest)]) -> wmrl_env::Result<Vec<Observation>> {
        self.pool.reset(requests)
    }
    fn step(&mut self, actions: &[(usize, Action)]) -> wmrl_env::Result<Vec<StepResult>> {
        self.pool.step(actions)
    }
    fn take_restarts(&mut self) -> Vec<SlotRestart> {
        self.pool.take_restarts()
    }
    fn close(&mut self) -> wmrl_env::Result<()> {
        self.pool.close()
    }
}
