//! `cargo bench -p wmrl-examples --bench bridge [-- --libero]`: what the
//! ZeroMQ bridge costs and how it scales, with the embedded simulator
//! (wmrl-sim, a dev-dependency used here only).
//!
//! 1. overhead: N embedded simulators stepped in this process
//!    ([`wmrl_env::LocalVecEnv`]) against the same N served by one
//!    worker process (this binary with `--serve-sim`) over loopback through a `BridgePool`;
//! 2. scaling: the pool over 1 worker process with N envs against 2 worker
//!    processes with N/2 each, every worker limited to one rayon thread (one
//!    core per worker process);
//! 3. with `--libero`: the real LIBERO server (envs/libero/server.py) through
//!    the pool: reset time (first reset builds the environment) and steps/s.
//!
//! Worker processes are children of this one and are killed at the end.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use wmrl_bridge::{BridgePool, PoolConfig, Server, ServerConfig};
use wmrl_env::{Action, ResetRequest, VecEnv};
use wmrl_sim::{SimConfig, make_vec_env};

#[derive(Debug)]
struct Args {
    /// Environments stepped per batch (`--envs`, 16).
    envs: usize,
    /// Timed batched steps per configuration after 3 warm-up steps (`--steps`, 40).
    steps: usize,
    /// Camera size, two cameras (`--image-size`, 128).
    image_size: u32,
    /// Also benchmark the real LIBERO server (`--libero`; needs envs/libero/.venv).
    libero: bool,
    /// LIBERO environments in the server process (`--libero-envs`, 1).
    libero_envs: usize,
    /// Timed LIBERO batched steps (`--libero-steps`, 20).
    libero_steps: usize,
}

fn parse_args() -> anyhow::Result<Option<Args>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = argv.iter().position(|a| a == "--serve-sim") {
        let usage = "--serve-sim BIND ENVS IMAGE";
        let bind = argv.get(i + 1).context(usage)?;
        let envs: usize = argv.get(i + 2).context(usage)?.parse()?;
        let image: u32 = argv.get(i + 3).context(usage)?.parse()?;
        serve(bind, envs, image)?;
        return Ok(None);
    }
    // `cargo test --benches` runs this binary without `--bench`: do nothing.
    if !argv.iter().any(|a| a == "--bench") {
        return Ok(None);
    }
    let mut args = Args {
        envs: 16,
        steps: 40,
        image_size: 128,
        libero: false,
        libero_envs: 1,
        libero_steps: 20,
    };
    let value = |i: usize| argv.get(i + 1).context("missing value");
    for (i, a) in argv.iter().enumerate() {
        match a.as_str() {
            "--envs" => args.envs = value(i)?.parse()?,
            "--steps" => args.steps = value(i)?.parse()?,
            "--image-size" => args.image_size = value(i)?.parse()?,
            "--libero" => args.libero = true,
            "--libero-envs" => args.libero_envs = value(i)?.parse()?,
            "--libero-steps" => args.libero_steps = value(i)?.parse()?,
            _ => {}
        }
    }
    Ok(Some(args))
}

/// Worker mode: serve `envs` embedded simulators until killed.
fn serve(bind: &str, envs: usize, image: u32) -> anyhow::Result<()> {
    let cfg = SimConfig {
        image_size: image,
        ..SimConfig::default()
    };
    let mut server = Server::bind(
        bind,
        make_vec_env(&cfg, envs, None)?,
        ServerConfig::default(),
    )?;
    println!("ENDPOINT {}", server.endpoint());
    std::io::stdout().flush()?;
    server.run()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match parse_args()? {
        Some(args) => run(args),
        None => Ok(()),
    }
}

/// A child process killed (SIGKILL) on drop.
struct Worker {
    child: Child,
    endpoint: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(cmd: &mut Command) -> anyhow::Result<Worker> {
    let mut child = cmd.stdout(Stdio::piped()).spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let endpoint = loop {
        let line = lines.next().context("worker exited before ENDPOINT")??;
        if let Some(e) = line.strip_prefix("ENDPOINT ") {
            break e.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Ok(Worker { child, endpoint })
}

fn serve_sim(
    bind: &str,
    envs: usize,
    image: u32,
    threads: Option<usize>,
) -> anyhow::Result<Worker> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("--serve-sim")
        .arg(bind)
        .arg(envs.to_string())
        .arg(image.to_string());
    if let Some(t) = threads {
        cmd.env("RAYON_NUM_THREADS", t.to_string());
    }
    spawn(&mut cmd)
}

fn action(slot: usize, t: usize) -> Action {
    (0..7)
        .map(|d| 0.3 * ((t * 7 + slot * 13 + d) as f32 * 0.37).sin())
        .collect()
}

/// Reset every slot, warm up, then time `steps` batched steps; slots whose
/// episode ends are reset outside the timed region. Appends each step's
/// seconds to `out`.
fn time_steps(env: &mut dyn VecEnv, steps: usize, out: &mut Vec<f64>) -> anyhow::Result<()> {
    let n = env.num_envs();
    let n_tasks = env.spec().tasks.len();
    let request = |i: usize| ResetRequest {
        task: i % n_tasks,
        init_state: i % 50,
        seed: i as u64,
    };
    env.reset(&(0..n).map(|i| (i, request(i))).collect::<Vec<_>>())?;
    for t in 0..steps + 3 {
        let actions: Vec<_> = (0..n).map(|i| (i, action(i, t))).collect();
        let t0 = Instant::now();
        let results = env.step(&actions)?;
        if t >= 3 {
            out.push(t0.elapsed().as_secs_f64());
        }
        let ended: Vec<_> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.done || r.truncated)
            .map(|(i, _)| (i, request(i + t)))
            .collect();
        if !ended.is_empty() {
            env.reset(&ended)?;
        }
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

const ROUNDS: usize = 5;

fn pool(workers: &[&Worker], num_envs: usize) -> anyhow::Result<BridgePool> {
    let endpoints: Vec<&str> = workers.iter().map(|w| w.endpoint.as_str()).collect();
    Ok(BridgePool::connect(
        &endpoints,
        PoolConfig {
            num_envs: Some(num_envs),
            ..PoolConfig::default()
        },
    )?)
}

fn run(args: Args) -> anyhow::Result<()> {
    let n = args.envs;
    let cfg = SimConfig {
        image_size: args.image_size,
        ..SimConfig::default()
    };
    println!(
        "bench-bridge: {n} envs, two {0}x{0} cameras, {1} timed steps",
        args.image_size, args.steps
    );

    // Every configuration stays up; rounds interleave them so that load
    // from other processes on the machine hits all alike. Medians per step.
    let mut local = make_vec_env(&cfg, n, None)?;
    let w_tcp = serve_sim("tcp://127.0.0.1:*", n, args.image_size, None)?;
    let ipc = format!("ipc:///tmp/wmrl-bench-bridge-{}.sock", std::process::id());
    let w_ipc = serve_sim(&ipc, n, args.image_size, None)?;
    let w1 = serve_sim("tcp://127.0.0.1:*", n, args.image_size, Some(1))?;
    let half = n.div_ceil(2);
    let wa = serve_sim("tcp://127.0.0.1:*", half, args.image_size, Some(1))?;
    let wb = serve_sim("tcp://127.0.0.1:*", half, args.image_size, Some(1))?;
    let mut p_tcp = pool(&[&w_tcp], n)?;
    let mut p_ipc = pool(&[&w_ipc], n)?;
    let mut p1 = pool(&[&w1], n)?;
    let mut p2 = pool(&[&wa, &wb], n)?;
    let mut t: [Vec<f64>; 5] = Default::default();
    for _ in 0..ROUNDS {
        time_steps(&mut local, args.steps, &mut t[0])?;
        time_steps(&mut p_tcp, args.steps, &mut t[1])?;
        time_steps(&mut p_ipc, args.steps, &mut t[2])?;
        time_steps(&mut p1, args.steps, &mut t[3])?;
        time_steps(&mut p2, args.steps, &mut t[4])?;
    }
    let [t_local, t_tcp, t_ipc, t1, t2] = t.map(|mut v| median(&mut v));
    println!(
        "overhead (median of {} steps each): in-process {:.2} ms/step, pool over loopback tcp {:.2} ms/step (ratio {:.3}), over ipc {:.2} ms/step (ratio {:.3})",
        ROUNDS * args.steps,
        t_local * 1e3,
        t_tcp * 1e3,
        t_tcp / t_local,
        t_ipc * 1e3,
        t_ipc / t_local
    );
    println!(
        "scaling (1 rayon thread per worker process): 1 worker {:.0} env-steps/s, 2 workers {:.0} env-steps/s, speed-up {:.2}x",
        n as f64 / t1,
        n as f64 / t2,
        t1 / t2
    );
    let _ = std::fs::remove_file(ipc.trim_start_matches("ipc://"));

    if args.libero {
        bench_libero(&args)?;
    }
    Ok(())
}

fn bench_libero(args: &Args) -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join("envs/libero/.venv/bin/python");
    anyhow::ensure!(
        python.exists(),
        "{} missing: run scripts/setup.d/30-libero.sh",
        python.display()
    );
    let mut cmd = Command::new(python);
    cmd.arg(root.join("envs/libero/server.py"))
        .args(["--bind", "tcp://127.0.0.1:*", "--envs"])
        .arg(args.libero_envs.to_string())
        .arg("--image")
        .arg(args.image_size.to_string());
    if std::env::var_os("MUJOCO_GL").is_none() {
        cmd.env("MUJOCO_GL", "egl");
    }
    let w = spawn(&mut cmd)?;
    let mut p = BridgePool::connect(
        &[w.endpoint.as_str()],
        PoolConfig {
            request_timeout_ms: 300_000,
            connect_timeout_ms: 60_000,
            ..PoolConfig::default()
        },
    )?;
    let k = args.libero_envs;
    let reqs = |seed: u64| -> Vec<(usize, ResetRequest)> {
        (0..k)
            .map(|i| {
                (
                    i,
                    ResetRequest {
                        task: 0,
                        init_state: i,
                        seed,
                    },
                )
            })
            .collect()
    };
    let t0 = Instant::now();
    p.reset(&reqs(0))?;
    let first = t0.elapsed().as_secs_f64();
    let mut again = Duration::ZERO;
    for s in 1..=3 {
        let t = Instant::now();
        p.reset(&reqs(s))?;
        again += t.elapsed();
    }
    let t1 = Instant::now();
    for t in 0..args.libero_steps {
        let actions: Vec<_> = (0..k).map(|i| (i, action(i, t))).collect();
        let r = p.step(&actions)?;
        let ended: Vec<_> = r
            .iter()
            .enumerate()
            .filter(|(_, r)| r.done || r.truncated)
            .map(|(i, _)| i)
            .collect();
        anyhow::ensure!(ended.is_empty(), "an episode ended within the benchmark");
    }
    let rate = (args.libero_steps * k) as f64 / t1.elapsed().as_secs_f64();
    println!(
        "libero: first reset {first:.2} s (builds {k} env(s)), later resets {:.3} s per batch of {k}, {rate:.2} env-steps/s ({k} env(s), two {}x{} cameras)",
        again.as_secs_f64() / 3.0,
        args.image_size,
        args.image_size
    );
    Ok(())
}
