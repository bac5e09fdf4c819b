//! `wmrl eval`: success of a policy checkpoint on the embedded simulator,
//! on simulator workers over the bridge, or on the real LIBERO simulator
//! (workers wmrl starts itself), per task with 95% Wilson intervals, as JSON
//! plus a few rollout GIFs.

use std::path::PathBuf;

use anyhow::Context;
use wmrl_policy::EvalConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run directory holding config.json and model.safetensors.
    #[arg(long)]
    pub policy: PathBuf,
    /// `all` or a list like `0,3,5-7`.
    #[arg(long, default_value = "all")]
    pub tasks: String,
    /// Initial states, e.g. `16-49` (the held-out states).
    #[arg(long, default_value = "16-49")]
    pub init_states: String,
    /// Parallel environment slots.
    #[arg(long, default_value_t = 34)]
    pub num_envs: usize,
    /// `sim` (embedded, in-process), `bridge` (workers at `--endpoints`) or
    /// `libero` (real LIBERO workers started from envs/libero/.venv).
    #[arg(long, default_value = "sim")]
    pub backend: String,
    /// Bridge endpoints, comma-separated (`--backend bridge`).
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// LIBERO worker processes (`--backend libero`); `--num-envs` slots are
    /// spread over them.
    #[arg(long, default_value_t = 2)]
    pub libero_workers: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Episodes per (task, initial state); with a temperature above 0 this
    /// is the paper's measure (e.g. `--temperature 0.5 --repeats 8`).
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    /// Cap on steps per episode (0: the environment's own limit).
    #[arg(long, default_value_t = 0)]
    pub max_steps: usize,
    /// Actions executed per policy call (0: the whole chunk).
    #[arg(long, default_value_t = 0)]
    pub execute_steps: usize,
    /// Rollout GIFs to write.
    #[arg(long, default_value_t = 3)]
    pub gifs: usize,
    /// Output directory (default: `<policy>/eval`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the models run: `cpu`, `cuda` (the GPU where each part can use
    /// it; one warning names each part that stays on the CPU and why) or
    /// `auto` (the same, the fallback logged as information).
    #[arg(long, default_value = "cpu")]
    pub device: wmrl_train::DeviceChoice,
    /// Also write every episode in the episode format (docs/episodes.md)
    /// to this directory: `wmrl sft --demos DIR --init POLICY` then
    /// fine-tunes on the policy's own successful episodes.
    #[arg(long)]
    pub save_episodes: Option<PathBuf>,
    /// With `--save-episodes`: write only the successful episodes.
    #[arg(long, requires = "save_episodes")]
    pub successes_only: bool,
}

/// Parse `all`, `3`, `0,2,5-7` into indices.
pub fn parse_list(s: &str, all: usize) -> anyhow::Result<Vec<usize>> {
    if s == "all" {
        return Ok((0..all).collect());
    }
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse()?, b.parse()?);
                anyhow::ensure!(a <= b, "empty range {part}");
                out.extend(a..=b);
            }
            None => out.push(part.parse()?),
        }
    }
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    wmrl_train::device::select(args.device);
    let policy = wmrl_train::device::load_policy(&args.policy)
        .with_context(|| format!("loading {}", args.policy.display()))?;
    let mut env = make_env(&args)?;
    let n_tasks = env.spec().tasks.len();
    let out = args.out.clone().unwrap_or_else(|| args.policy.join("eval"));
    let cfg = EvalConfig {
        tasks: parse_list(&args.tasks, n_tasks)?,
        init_states: parse_list(&args.init_states, 0)?,
        temperature: args.temperature,
        seed: args.seed,
        repeats: args.repeats,
        execute_steps: args.execute_steps,
        max_steps: args.max_steps,
        gif_dir: (args.gifs > 0).then(|| out.join("gifs")),
        n_gifs: args.gifs,
        episode_dir: args.save_episodes.clone(),
        episode_successes_only: args.successes_only,
        ..EvalConfig::default()
    };
    let eval_tasks = if cfg.tasks.is_empty() {
        n_tasks
    } else {
        cfg.tasks.len()
    };
    let n_episodes = eval_tasks * cfg.init_states.len() * cfg.repeats.max(1);
    let bar = wmrl_policy::Progress::new("eval", n_episodes as u64, "episodes", true);
    let report = wmrl_policy::evaluate_with_progress(&policy, env.as_mut(), &cfg, Some(&bar))?;
    bar.finish();
    env.close()?;
    std::fs::create_dir_all(&out)?;
    report.write_json(&out.join("eval.json"))?;
    print!("{}", report.table());
    println!(
        "{} episodes, {} policy calls, {} env steps, {:.1} s; results in {}",
        report.episodes.len(),
        report.policy_calls,
        report.env_steps,
        report.wall_secs,
        out.join("eval.json").display()
    );
    Ok(())
}

/// The environment evaluation runs in (see `--backend`).
fn make_env(args: &Args) -> anyhow::Result<Box<dyn wmrl_env::VecEnv>> {
    let n = args.num_envs.max(1);
    let mut cfg = wmrl_train::EnvConfig {
        backend: args.backend.clone(),
        num_envs: n,
        endpoints: args.endpoints.clone(),
        ..wmrl_train::EnvConfig::default()
    };
    match args.backend.as_str() {
        "sim" => {}
        "bridge" => anyhow::ensure!(
            !args.endpoints.is_empty(),
            "--backend bridge needs --endpoints"
        ),
        "libero" => {
            anyhow::ensure!(
                args.libero_workers > 0,
                "--libero-workers must be at least 1"
            );
            cfg.libero.workers = args.libero_workers.min(n);
            cfg.libero.envs_per_worker = n.div_ceil(cfg.libero.workers);
        }
        other => anyhow::bail!("--backend {other}: expected sim, bridge or libero"),
    }
    Ok(wmrl_train::make_env(&cfg)?)
}
