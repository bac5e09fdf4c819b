use std::path::PathBuf;
use std::process::{Child, Command};

use anyhow::Context;
use indicatif::ProgressBar;
use wmrl_core::Arm;
use wmrl_train::bench::{parse_arms, run_dir, write_report};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Base run config (TOML) every arm shares.
    #[arg(long)]
    pub config: PathBuf,
    /// `all` or a comma list of arms.
    #[arg(long, default_value = "all")]
    pub arms: String,
    /// Seeds 0..N per arm.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Bench directory (runs go to OUT/<arm>/seed<k>).
    #[arg(long, default_value = "runs/bench")]
    pub out: PathBuf,
    /// Runs in parallel (each is a separate `wmrl train` process).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Override the anchor fraction for every arm (1.0: free labels).
    #[arg(long)]
    pub anchor_fraction: Option<f64>,
    /// Override training steps.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Override the SFT checkpoint.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Override the world model file.
    #[arg(long)]
    pub world_model: Option<PathBuf>,
    /// Title of report.md.
    #[arg(long, default_value = "wmrl bench")]
    pub title: String,
}

fn spawn(args: &Args, arm: Arm, seed: u64) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("locating the wmrl binary")?;
    let dir = run_dir(&args.out, arm, seed);
    let mut cmd = Command::new(exe);
    cmd.arg("train").arg("--quiet");
    if dir.join("checkpoint").join("state.json").exists() {
        cmd.arg("--resume").arg(&dir);
    } else {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        cmd.arg("--config").arg(&args.config);
        cmd.arg("--arm").arg(arm.name());
        cmd.arg("--seed").arg(seed.to_string());
        cmd.arg("--out").arg(&dir);
        if let Some(f) = args.anchor_fraction {
            cmd.arg("--anchor-fraction").arg(f.to_string());
        }
        if let Some(s) = args.steps {
            cmd.arg("--steps").arg(s.to_string());
        }
        if let Some(p) = &args.policy {
            cmd.arg("--policy").arg(p);
        }
        if let Some(p) = &args.world_model {
            cmd.arg("--world-model").arg(p);
        }
    }
    std::fs::create_dir_all(&args.out)?;
    let log = std::fs::File::create(args.out.join(format!("{}-seed{seed}.log", arm.name())))?;
    cmd.stdout(log.try_clone()?).stderr(log);
    // Two runs share two cores: one compute thread each.
    cmd.env("RAYON_NUM_THREADS", "1");
    Ok(cmd.spawn()?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let arms = parse_arms(&args.arms)?;
    let seeds: Vec<u64> = (0..args.seeds).collect();
    // Fail on a bad config before any work starts.
    wmrl_train::TrainConfig::load(&args.config)?;
    let mut todo: Vec<(Arm, u64)> = Vec::new();
    for &arm in &arms {
        for &s in &seeds {
            if !run_dir(&args.out, arm, s).join("summary.json").exists() {
                todo.push((arm, s));
            }
        }
    }
    let bar = ProgressBar::new(todo.len() as u64);
    bar.set_message("runs");
    let mut running: Vec<(Arm, u64, Child)> = Vec::new();
    let mut failed = Vec::new();
    let mut queue = todo.into_iter();
    loop {
        while running.len() < args.jobs.max(1) {
            match queue.next() {
                Some((arm, s)) => running.push((arm, s, spawn(&args, arm, s)?)),
                None => break,
            }
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut i = 0;
        while i < running.len() {
            if let Some(status) = running[i].2.try_wait()? {
                let (arm, s, _) = running.remove(i);
                if !status.success() {
                    failed.push(format!(
                        "{} seed {s} (see {}/{}-seed{s}.log)",
                        arm.name(),
                        args.out.display(),
                        arm.name()
                    ));
                }
                bar.inc(1);
            } else {
                i += 1;
            }
        }
    }
    bar.finish();
    let table = write_report(&args.out, &arms, &seeds, &args.title)?;
    println!("{table}");
    println!("report: {}", args.out.join("report.md").display());
    anyhow::ensure!(failed.is_empty(), "runs failed: {}", failed.join(", "));
    Ok(())
}
