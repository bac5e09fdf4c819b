//! `wmrl bench-sim`: simulator speed per task on one core, physics only and
//! with both cameras rendered, plus memory per environment instance.

use std::time::{Duration, Instant};

use wmrl_env::{Environment, ResetRequest};
use wmrl_sim::{SimConfig, TabletopEnv, sim_rng};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Control steps timed per task and mode.
    #[arg(long, default_value_t = 2000)]
    pub steps: usize,
    /// Camera size for the rendered mode.
    #[arg(long, default_value_t = 128)]
    pub image_size: u32,
    /// Instances created to measure memory per instance.
    #[arg(long, default_value_t = 40)]
    pub instances: usize,
    /// Print one JSON object per task instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Speeds of one timing run.
struct Timing {
    /// Steps per second of wall-clock time spent in `step`.
    wall: f64,
    /// Steps per second of this thread's CPU time for the whole loop
    /// (steps, expert actions and resets): the per-core speed, unaffected by
    /// other processes sharing the machine.
    cpu: f64,
    reset: Duration,
}

/// This thread's CPU time (Linux `/proc/thread-self/schedstat`), if readable.
fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Time `steps` control steps of `task` (expert actions with a little noise;
/// episodes restart through the initial states when they end).
fn time_steps(cfg: &SimConfig, task: usize, steps: usize) -> anyhow::Result<Timing> {
    let mut env = TabletopEnv::new(cfg.clone())?;
    let mut rng = sim_rng(task as u64);
    let mut init = 0;
    let mut reset_time = Duration::ZERO;
    let mut resets = 0u32;
    let mut step_time = Duration::ZERO;
    let mut reset = |env: &mut TabletopEnv, init: usize| -> anyhow::Result<()> {
        let t0 = Instant::now();
        env.reset(ResetRequest {
            task,
            init_state: init % 50,
            seed: 0,
        })?;
        reset_time += t0.elapsed();
        resets += 1;
        Ok(())
    };
    let cpu0 = thread_cpu();
    reset(&mut env, init)?;
    for _ in 0..steps {
        let a = env.expert_action(0.1, &mut rng)?;
        let t0 = Instant::now();
        let r = env.step(&a)?;
        step_time += t0.elapsed();
        if r.done || r.truncated {
            init += 1;
            reset(&mut env, init)?;
        }
    }
    let cpu = match (cpu0, thread_cpu()) {
        (Some(a), Some(b)) if b > a => steps as f64 / (b - a).as_secs_f64(),
        _ => f64::NAN,
    };
    Ok(Timing {
        wall: steps as f64 / step_time.as_secs_f64(),
        cpu,
        reset: reset_time / resets.max(1),
    })
}

/// Resident set size of this process in bytes (Linux), if readable.
fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let physics = SimConfig {
        render: false,
        ..SimConfig::default()
    };
    let rendered = SimConfig {
        image_size: args.image_size,
        ..SimConfig::default()
    };
    rendered.validate()?;
    if !args.json {
        println!(
            "one thread, {} steps per task; rendered = agentview + wrist at {}x{}",
            args.steps, args.image_size, args.image_size
        );
        println!(
            "steps/s per core (thread CPU time) and, in brackets, wall clock (shared machine)"
        );
        println!(
            "{:>4} {:>22} {:>22} {:>9}",
            "task", "physics steps/s", "rendered steps/s", "reset ms"
        );
    }
    let (mut sum_p, mut sum_r, mut sum_pw, mut sum_rw) = (0.0, 0.0, 0.0, 0.0);
    for task in 0..10 {
        let p = time_steps(&physics, task, args.steps)?;
        let r = time_steps(&rendered, task, args.steps)?;
        sum_p += p.cpu;
        sum_r += r.cpu;
        sum_pw += p.wall;
        sum_rw += r.wall;
        if args.json {
            let v = serde_json::json!({
                "task": task,
                "physics_steps_per_cpu_s": p.cpu, "rendered_steps_per_cpu_s": r.cpu,
                "physics_steps_per_wall_s": p.wall, "rendered_steps_per_wall_s": r.wall,
                "reset_ms": p.reset.as_secs_f64() * 1e3, "image_size": args.image_size,
            });
            println!("{v}");
        } else {
            println!(
                "{task:>4} {:>12.0} [{:>7.0}] {:>12.0} [{:>7.0}] {:>9.2}",
                p.cpu,
                p.wall,
                r.cpu,
                r.wall,
                p.reset.as_secs_f64() * 1e3
            );
        }
    }
    // Memory: RSS growth over `instances` reset, rendering environments.
    let before = rss_bytes();
    let mut envs = Vec::with_capacity(args.instances);
    for i in 0..args.instances {
        let mut e = TabletopEnv::new(rendered.clone())?;
        e.reset(ResetRequest {
            task: i % 10,
            init_state: 0,
            seed: 0,
        })?;
        envs.push(e);
    }
    let after = rss_bytes();
    let per = match (before, after) {
        (Some(b), Some(a)) if args.instances > 0 => {
            Some(a.saturating_sub(b) as f64 / args.instances as f64)
        }
        _ => None,
    };
    drop(envs);
    if args.json {
        let v = serde_json::json!({
            "mean_physics_steps_per_cpu_s": sum_p / 10.0, "mean_rendered_steps_per_cpu_s": sum_r / 10.0,
            "mean_physics_steps_per_wall_s": sum_pw / 10.0, "mean_rendered_steps_per_wall_s": sum_rw / 10.0,
            "memory_per_instance_bytes": per,
        });
        println!("{v}");
    } else {
        println!(
            "mean {:>12.0} [{:>7.0}] {:>12.0} [{:>7.0}]",
            sum_p / 10.0,
            sum_pw / 10.0,
            sum_r / 10.0,
            sum_rw / 10.0
        );
        match per {
            Some(b) => println!(
                "memory per rendering instance: {:.0} KiB (RSS growth over {} instances)",
                b / 1024.0,
                args.instances
            ),
            None => println!("memory per instance: /proc/self/statm not readable"),
        }
    }
    Ok(())
}
