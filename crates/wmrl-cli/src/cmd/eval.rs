//! `wmrl eval`: success of a policy checkpoint on the embedded simulator,
//! on simulator workers over the bridge, or on the real LIBERO simulator
//! (workers wmrl starts itself), per task with 95% Wilson intervals, as JSON
//! plus a few rollout GIFs. Each finished episode is recorded in
//! `<out>/episodes.jsonl` as it ends; `--resume` continues an evaluation
//! that stopped to the report an uninterrupted one gives.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use wmrl_policy::EvalConfig;

/// The dtype a MiniVLA runs in (`--dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dtype {
    F32,
    Bf16,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy directory holding config.json and model.safetensors: a
    /// `tiny` policy (models/policy-tiny, a run's checkpoint) or a converted
    /// MiniVLA (scripts/convert_minivla.py; its config.json names the two
    /// vision backbones), told apart by the config.
    #[arg(long)]
    pub policy: PathBuf,
    /// The policy's kind (`tiny`, `minivla`); absent, the kind whose
    /// checkpoint `--policy` holds.
    #[arg(long)]
    pub policy_type: Option<String>,
    /// MiniVLA only: the dtype it runs in (`f32`, or `bf16` on the GPU:
    /// candle's CPU backend has no bf16 matrix product; the `tiny` policy
    /// always runs in f32).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// MiniVLA only: the dataset in its `dataset_statistics.json` whose
    /// action statistics un-normalise the actions (e.g. `libero_10`; needed
    /// when the file holds several).
    #[arg(long)]
    pub stats_key: Option<String>,
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
    pub backend: wmrl_train::Backend,
    /// Bridge endpoints, comma-separated (`--backend bridge`).
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// LIBERO worker processes (`--backend libero`); `--num-envs` slots are
    /// spread over them, so at most `--num-envs` (default: 2, or 1 for one
    /// slot).
    #[arg(long)]
    pub libero_workers: Option<usize>,
    /// Interpreter of the LIBERO venv (`--backend libero`; default
    /// `envs/libero/.venv/bin/python`); a relative path is taken from the
    /// working directory.
    #[arg(long)]
    pub libero_python: Option<PathBuf>,
    /// The LIBERO worker script (`--backend libero`; default
    /// `envs/libero/server.py`); a relative path is taken from the working
    /// directory.
    #[arg(long)]
    pub libero_server: Option<PathBuf>,
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
    pub device: wmrl_run::DeviceChoice,
    /// Also write every episode in the episode format (docs/episodes.md)
    /// to this directory: `wmrl sft --demos DIR --init POLICY` then
    /// fine-tunes on the policy's own successful episodes.
    #[arg(long)]
    pub save_episodes: Option<PathBuf>,
    /// With `--save-episodes`: write only the successful episodes.
    #[arg(long, requires = "save_episodes")]
    pub successes_only: bool,
    /// Continue the evaluation recorded in `<out>/episodes.jsonl` (same
    /// policy and settings): its finished episodes are not run again, and
    /// eval.json equals an uninterrupted evaluation's. Without a record it
    /// starts afresh.
    #[arg(long)]
    pub resume: bool,
}

/// The record of finished episodes in an evaluation's output directory.
const RECORD_FILE: &str = "episodes.jsonl";

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
    let placement = wmrl_train::Placement::select(args.device);
    let policy = load_any_policy(&args, &placement)
        .with_context(|| format!("loading {}", args.policy.display()))?;
    let mut env = make_env(&args, &placement)?;
    let n_tasks = env.spec().tasks.len();
    let out = args.out.clone().unwrap_or_else(|| args.policy.join("eval"));
    let record = out.join(RECORD_FILE);
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
        record: Some(record.clone()),
        resume: args.resume,
        policy_id: policy_id(&args.policy)?,
        ..EvalConfig::default()
    };
    let eval_tasks = if cfg.tasks.is_empty() {
        n_tasks
    } else {
        cfg.tasks.len()
    };
    let n_episodes = eval_tasks * cfg.init_states.len() * cfg.repeats.max(1);
    let bar = wmrl_run::Progress::new("eval", n_episodes as u64, "episodes", true);
    let report =
        wmrl_policy::evaluate_with_progress(policy.as_ref(), env.as_mut(), &cfg, Some(&bar));
    bar.finish();
    let report = report.map_err(|e| {
        let hint = match &e {
            wmrl_policy::PolicyError::EvalStopped { .. } => format!(
                "rerun the same command with --resume to continue it from {}",
                record.display()
            ),
            wmrl_policy::PolicyError::RecordExists { .. } => {
                "add --resume to continue that evaluation (a finished one is reported at once)"
                    .into()
            }
            _ => String::new(),
        };
        let e = anyhow::Error::from(e);
        if hint.is_empty() { e } else { e.context(hint) }
    })?;
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

/// The policy in `--policy`, of the kind its directory holds
/// (`wmrl_train::PolicyKinds`), on `placement`'s device.
fn load_any_policy(
    args: &Args,
    placement: &wmrl_train::Placement,
) -> anyhow::Result<Box<dyn wmrl_policy::ActionPolicy>> {
    let dtype = match args.dtype {
        Dtype::Bf16 => wmrl_policy::candle::DType::BF16,
        Dtype::F32 => wmrl_policy::candle::DType::F32,
    };
    let opts = wmrl_train::ActorOptions {
        placement,
        dtype,
        stats_key: args.stats_key.as_deref(),
    };
    let kinds = wmrl_train::PolicyKinds::builtin();
    Ok(kinds
        .resolve(&args.policy, args.policy_type.as_deref())?
        .load_actor(&args.policy, &opts)?)
}

/// Names the policy in the evaluation record: FNV-1a 64 of its config and
/// weights files (a resumed evaluation must use the same weights).
fn policy_id(dir: &Path) -> anyhow::Result<String> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for name in [wmrl_policy::CONFIG_FILE, wmrl_policy::WEIGHTS_FILE] {
        let path = dir.join(name);
        let file =
            std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, file);
        loop {
            let buf = r
                .fill_buf()
                .with_context(|| format!("reading {}", path.display()))?;
            if buf.is_empty() {
                break;
            }
            for &b in buf {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
            let n = buf.len();
            r.consume(n);
        }
    }
    Ok(format!("fnv1a64:{h:016x}"))
}

/// The environment evaluation runs in (see `--backend`).
fn make_env(
    args: &Args,
    placement: &wmrl_train::Placement,
) -> anyhow::Result<Box<dyn wmrl_env::VecEnv>> {
    let n = args.num_envs.max(1);
    let mut cfg = wmrl_train::EnvConfig {
        backend: args.backend,
        num_envs: n,
        endpoints: args.endpoints.clone(),
        ..wmrl_train::EnvConfig::default()
    };
    match args.backend {
        wmrl_train::Backend::Sim => {}
        wmrl_train::Backend::Bridge => anyhow::ensure!(
            !args.endpoints.is_empty(),
            "--backend bridge needs --endpoints"
        ),
        wmrl_train::Backend::Libero => {
            let workers = match args.libero_workers {
                Some(0) => anyhow::bail!("--libero-workers must be at least 1"),
                Some(w) if w > n => anyhow::bail!(
                    "--libero-workers {w} is more than --num-envs {n}: each worker needs a slot \
                     (ask for at most {n} workers, or for more slots)"
                ),
                Some(w) => w,
                None => n.min(2),
            };
            cfg.libero.workers = workers;
            cfg.libero.envs_per_worker = n.div_ceil(workers);
            if let Some(p) = &args.libero_python {
                cfg.libero.python = p.clone();
            }
            if let Some(p) = &args.libero_server {
                cfg.libero.server = p.clone();
            }
        }
    }
    Ok(wmrl_train::make_env(&cfg, placement.renderer.as_ref())?)
}
