//! `wmrl demos`: scripted-expert demonstrations from the embedded simulator,
//! written as episode files (see docs/episodes.md) with a progress bar.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use wmrl_run::Progress;
use wmrl_sim::{SimConfig, TabletopEnv, record_dart_episode, record_expert_episode};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// `all`, or task indices separated by commas (e.g. `0,3,9`).
    #[arg(long, default_value = "all")]
    pub tasks: String,
    /// Episodes per task; initial states cycle through `--init-states`.
    #[arg(long, default_value_t = 50)]
    pub per_task: usize,
    /// Inclusive range of initial states to draw from. Default: the training
    /// split 0-15, so demonstrations never show the held-out states 16-49.
    #[arg(long, default_value = "0-15")]
    pub init_states: String,
    /// Index of the first episode file (to add episodes to a directory).
    #[arg(long, default_value_t = 0)]
    pub start_index: usize,
    /// Output directory for `ep_NNNNNN.msgpack` files.
    #[arg(long)]
    pub out: PathBuf,
    /// Standard deviation of Gaussian action noise (0 = clean expert; 0.3
    /// gives a spread of partial failures).
    #[arg(long, default_value_t = 0.0)]
    pub noise: f32,
    /// DART noise: execute the expert's action plus Gaussian noise of this
    /// standard deviation but record the clean action, so demonstrations show
    /// the expert recovering from drift (what behaviour cloning needs; 0.1 is
    /// the SFT default). Exclusive with `--noise`.
    #[arg(long, default_value_t = 0.0)]
    pub dart: f32,
    /// Seed of the action noise (episode k of task t uses seed + 1000 t + k,
    /// so two sets share episode seeds when their seeds differ by less than
    /// --per-task, or by a multiple of 1000 give or take --per-task; the
    /// quickstart spaces its sets 100000 apart).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Camera size in pixels (64..=256).
    #[arg(long, default_value_t = 128)]
    pub image_size: u32,
    /// Episode limit in control steps.
    #[arg(long, default_value_t = SimConfig::default().max_steps)]
    pub max_steps: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

fn parse_tasks(s: &str) -> anyhow::Result<Vec<usize>> {
    if s == "all" {
        return Ok((0..10).collect());
    }
    s.split(',')
        .map(|t| {
            let i: usize = t
                .trim()
                .parse()
                .with_context(|| format!("task index {t:?}"))?;
            anyhow::ensure!(i < 10, "task {i} out of range: the suite has tasks 0..=9");
            Ok(i)
        })
        .collect()
}

fn keep_first(slot: &Mutex<Option<anyhow::Error>>, e: anyhow::Error) {
    if let Ok(mut g) = slot.lock()
        && g.is_none()
    {
        *g = Some(e);
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let tasks = parse_tasks(&args.tasks)?;
    anyhow::ensure!(
        args.noise >= 0.0 && args.noise.is_finite(),
        "--noise must be >= 0"
    );
    anyhow::ensure!(
        args.dart >= 0.0 && args.dart.is_finite(),
        "--dart must be >= 0"
    );
    anyhow::ensure!(
        args.noise == 0.0 || args.dart == 0.0,
        "--noise and --dart exclude each other: --noise records the noisy action, --dart the clean one"
    );
    let cfg = SimConfig {
        image_size: args.image_size,
        max_steps: args.max_steps,
        ..SimConfig::default()
    };
    cfg.validate()?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let jobs: Vec<(usize, usize, usize)> = tasks
        .iter()
        .flat_map(|&t| (0..args.per_task).map(move |k| (t, k)))
        .enumerate()
        .map(|(idx, (t, k))| (args.start_index + idx, t, k))
        .collect();
    let (lo, hi) = init_range(&args.init_states, cfg.n_init_states)?;
    let n_init = hi - lo + 1;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, jobs.len().max(1));
    let bar = Progress::new("demos", jobs.len() as u64, "episodes", true);
    let next = AtomicUsize::new(0);
    // Per task: (episodes, successes, steps, bytes).
    let stats = Mutex::new(vec![(0usize, 0usize, 0usize, 0u64); 10]);
    let first_err: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut env = match TabletopEnv::new(cfg.clone()) {
                    Ok(e) => e,
                    Err(e) => {
                        keep_first(&first_err, e.into());
                        return;
                    }
                };
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(idx, t, k)) = jobs.get(j) else {
                        break;
                    };
                    if first_err.lock().map(|g| g.is_some()).unwrap_or(true) {
                        break;
                    }
                    let seed = args.seed + 1000 * t as u64 + k as u64;
                    let init = lo + k % n_init;
                    let res = if args.dart > 0.0 {
                        record_dart_episode(&mut env, t, init, args.dart, seed)
                    } else {
                        record_expert_episode(&mut env, t, init, args.noise, seed)
                    };
                    let res = res.map_err(anyhow::Error::from).and_then(|ep| {
                        let path = wmrl_env::write_episode(&args.out, idx, &ep)?;
                        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                        Ok((ep.success, ep.steps.len(), bytes))
                    });
                    match res {
                        Ok((ok, n, bytes)) => {
                            if let Ok(mut st) = stats.lock() {
                                let e = &mut st[t];
                                e.0 += 1;
                                e.1 += usize::from(ok);
                                e.2 += n;
                                e.3 += bytes;
                            }
                            bar.inc(1);
                        }
                        Err(e) => {
                            keep_first(&first_err, e);
                            break;
                        }
                    }
                }
            });
        }
    });
    bar.finish();
    if let Some(e) = first_err.into_inner().ok().flatten() {
        return Err(e);
    }
    let stats = stats
        .into_inner()
        .map_err(|_| anyhow::anyhow!("worker panicked"))?;
    print_stats(&stats, &args.out);
    Ok(())
}

/// `LO-HI` of `--init-states`, inside the simulator's `n` states.
fn init_range(spec: &str, n: usize) -> anyhow::Result<(usize, usize)> {
    let (lo, hi) = spec
        .split_once('-')
        .and_then(|(a, b)| {
            Some((
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ))
        })
        .with_context(|| format!("--init-states {spec:?}: expected LO-HI"))?;
    anyhow::ensure!(
        lo <= hi && hi < n,
        "--init-states {lo}-{hi}: must lie in 0-{}",
        n - 1
    );
    Ok((lo, hi))
}

/// Per task: episodes, success rate, mean steps and size; then the totals.
fn print_stats(stats: &[(usize, usize, usize, u64)], out: &std::path::Path) {
    println!(
        "{:>4} {:>8} {:>8} {:>10} {:>12}",
        "task", "episodes", "success", "mean_steps", "KiB/episode"
    );
    let (mut n, mut ok, mut bytes) = (0, 0, 0u64);
    for (t, e) in stats.iter().enumerate().filter(|(_, e)| e.0 > 0) {
        println!(
            "{t:>4} {:>8} {:>7.0}% {:>10.0} {:>12.0}",
            e.0,
            100.0 * e.1 as f64 / e.0 as f64,
            e.2 as f64 / e.0 as f64,
            e.3 as f64 / 1024.0 / e.0 as f64
        );
        n += e.0;
        ok += e.1;
        bytes += e.3;
    }
    println!(
        "wrote {n} episodes to {} ({} successful, {:.1} MiB)",
        out.display(),
        ok,
        bytes as f64 / (1024.0 * 1024.0)
    );
}
