//! Simulator workers started and supervised by the client: `n` processes of
//! one command (e.g. `envs/libero/.venv/bin/python envs/libero/server.py`),
//! each bound to its own loopback endpoint, joined into a [`BridgePool`].
//! A worker that dies is started again on the same endpoint before the next
//! request; the pool moves its running episodes meanwhile (and reconnects
//! once it answers), so no episode is lost or counted twice. The processes
//! are killed when the supervisor is dropped.
//!
//! The command must accept `--bind ENDPOINT` and print one line
//! `ENDPOINT <endpoint>` on stdout once it serves (both servers do; see
//! docs/protocol.md).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

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

struct Managed {
    endpoint: String,
    child: Child,
}

/// A [`BridgePool`] over worker processes it started itself.
pub struct SupervisedPool {
    cmd: WorkerCommand,
    workers: Vec<Managed>,
    pool: BridgePool,
    restarts: usize,
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

fn start(cmd: &WorkerCommand, endpoint: &str) -> Result<Managed> {
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args)
        .arg("--bind")
        .arg(endpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in &cmd.env {
        c.env(k, v);
    }
    let mut child = c.spawn().map_err(|e| {
        BridgeError::Spawn(format!(
            "cannot start worker {}: {e}",
            cmd.program.display()
        ))
    })?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    // Read the ENDPOINT line, then keep draining so the worker never blocks
    // on a full pipe.
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
    match rx.recv_timeout(cmd.ready_timeout) {
        Ok(_) => Ok(Managed {
            endpoint: endpoint.to_string(),
            child,
        }),
        Err(_) => {
            let status = child.try_wait().ok().flatten();
            let _ = child.kill();
            let _ = child.wait();
            Err(BridgeError::Spawn(format!(
                "worker {} did not print `ENDPOINT ...` within {:.0} s ({})",
                cmd.program.display(),
                cmd.ready_timeout.as_secs_f64(),
                match status {
                    Some(s) => format!("it exited: {s}"),
                    None => "still running; killed".into(),
                }
            )))
        }
    }
}

impl SupervisedPool {
    /// Start `n_workers` workers and connect a pool to them.
    pub fn spawn(cmd: WorkerCommand, n_workers: usize, config: PoolConfig) -> Result<Self> {
        if n_workers == 0 {
            return Err(BridgeError::Spawn("no workers asked for".into()));
        }
        let mut workers = Vec::with_capacity(n_workers);
        for _ in 0..n_workers {
            let endpoint = free_endpoint()?;
            workers.push(start(&cmd, &endpoint)?);
        }
        let endpoints: Vec<String> = workers.iter().map(|w| w.endpoint.clone()).collect();
        tracing::info!(workers = n_workers, ?endpoints, "simulator workers started");
        let pool = BridgePool::connect(&endpoints, config)?;
        Ok(Self {
            cmd,
            workers,
            pool,
            restarts: 0,
        })
    }

    /// Start again every worker whose process has exited.
    fn revive(&mut self) -> Result<()> {
        for w in &mut self.workers {
            if let Ok(Some(status)) = w.child.try_wait() {
                tracing::warn!(endpoint = %w.endpoint, %status, "simulator worker died; starting it again");
                *w = start(&self.cmd, &w.endpoint)?;
                self.restarts += 1;
            }
        }
        Ok(())
    }

    /// Workers started again after dying.
    pub fn worker_restarts(&self) -> usize {
        self.restarts
    }

    pub fn pool(&self) -> &BridgePool {
        &self.pool
    }

    /// Process ids of the workers (e.g. to kill one in a test).
    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.child.id()).collect()
    }
}

impl Drop for SupervisedPool {
    fn drop(&mut self) {
        for w in &mut self.workers {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
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
        self.revive().map_err(wmrl_env::EnvError::from)?;
        self.pool.reset(requests)
    }
    fn step(&mut self, actions: &[(usize, Action)]) -> wmrl_env::Result<Vec<StepResult>> {
        self.revive().map_err(wmrl_env::EnvError::from)?;
        self.pool.step(actions)
    }
    fn take_restarts(&mut self) -> Vec<SlotRestart> {
        self.pool.take_restarts()
    }
    fn close(&mut self) -> wmrl_env::Result<()> {
        self.pool.close()
    }
}
