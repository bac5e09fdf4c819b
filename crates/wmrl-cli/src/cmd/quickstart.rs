//! `wmrl quickstart`: post-training at a scale that fits two CPU cores, from
//! the shipped SFT policy and world model by default -> `sparse` and `wmrl`
//! GRPO -> held-out evaluation -> a success-rate table and report.md. With
//! `--from-scratch` the whole pipeline: expert demonstrations -> SFT of the
//! tiny policy -> world-model rollouts, training and ONNX export -> the same.
//!
//! Each stage is the ordinary subcommand run as a child process, so the
//! quickstart is exactly what a user would type; a stage whose output exists
//! is skipped, so an interrupted quickstart continues where it stopped.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Where everything goes.
    #[arg(long, default_value = "runs/quickstart")]
    pub out: PathBuf,
    /// Post-training config shared by both arms.
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Record demonstrations, train the SFT policy and the world model here
    /// (about 28 minutes more) instead of starting from the shipped ones.
    #[arg(long)]
    pub from_scratch: bool,
    /// SFT config (policy preset and schedule), with --from-scratch.
    #[arg(long, requires = "from_scratch")]
    pub sft_config: Option<PathBuf>,
    /// DART expert demonstrations per task for SFT (training states 0-15),
    /// with --from-scratch.
    #[arg(long, requires = "from_scratch")]
    pub demos_per_task: Option<usize>,
    /// Noisy rollouts per task and noise level for the world model, with
    /// --from-scratch.
    #[arg(long, requires = "from_scratch")]
    pub wm_rollouts_per_task: Option<usize>,
    /// Camera size of every stage; the world model is trained at this size,
    /// so it must match `[env.sim] image_size` of --config. The policy
    /// downsamples to its own `image_size` (64 for `tiny`).
    #[arg(long, default_value_t = 128)]
    pub image_size: u32,
    /// Override SFT optimiser steps (and the cosine length), with
    /// --from-scratch. Default: the SFT config's (2500 for
    /// configs/policy_tiny.toml, about 17 minutes on two cores); fewer steps
    /// leave the policy below the 20-60% band (docs/policy.md).
    #[arg(long, requires = "from_scratch")]
    pub sft_steps: Option<usize>,
    /// The SFT checkpoint post-training starts from (the shipped one by
    /// default; its MODEL_CARD.md).
    #[arg(
        long,
        default_value = DEFAULT_POLICY,
        conflicts_with = "from_scratch"
    )]
    pub sft_policy: PathBuf,
    /// The world model (ONNX) of the `wmrl` arm (the shipped one by default).
    #[arg(
        long,
        default_value = DEFAULT_WORLD_MODEL,
        conflicts_with = "from_scratch"
    )]
    pub world_model: PathBuf,
    /// Override world-model training steps, with --from-scratch.
    #[arg(long, requires = "from_scratch")]
    pub wm_steps: Option<usize>,
    /// Override post-training steps.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Arms to post-train.
    #[arg(long, default_value = "sparse,wmrl")]
    pub arms: String,
    /// Seeds per arm.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// A committed bench of the default quickstart over several seeds; the
    /// range each policy's figures took there (widened for another CPU) is
    /// printed under the table when the quickstart runs with its defaults.
    #[arg(long, default_value = "results/quickstart_seeds")]
    pub spread: PathBuf,
}

/// The quickstart's settings that the committed seed bench was run with.
const DEFAULT_CONFIG: &str = "configs/quickstart.toml";
const DEFAULT_POLICY: &str = "models/policy-tiny";
const DEFAULT_WORLD_MODEL: &str = "models/progress-tiny/model.onnx";

fn stage<S: AsRef<str>>(name: &str, done: bool, args: &[S]) -> anyhow::Result<f64> {
    if done {
        println!("== {name}: already done, skipped");
        return Ok(0.0);
    }
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    println!("== {name}: wmrl {}", args.join(" "));
    let t = Instant::now();
    let status = super::child_command()?
        .args(&args)
        .status()
        .with_context(|| format!("starting stage {name}"))?;
    anyhow::ensure!(status.success(), "stage {name} failed ({status})");
    let secs = t.elapsed().as_secs_f64();
    println!("== {name}: {secs:.0} s");
    Ok(secs)
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Fail before any work if the post-training config renders frames of a
    // size the quickstart's world model will not be trained on.
    let train_cfg = wmrl_train::TrainConfig::load(&args.config)?;
    anyhow::ensure!(
        train_cfg.env.sim.image_size == args.image_size,
        "{}: [env.sim] image_size = {} but --image-size is {}; the world model is trained at --image-size, so they must match",
        args.config.display(),
        train_cfg.env.sim.image_size,
        args.image_size
    );
    let q = &args.out;
    std::fs::create_dir_all(q)?;
    let demos = q.join("demos");
    let own_sft = args.from_scratch;
    let sft = if own_sft {
        q.join("sft")
    } else {
        args.sft_policy.clone()
    };
    if !own_sft {
        for f in [wmrl_policy::CONFIG_FILE, "model.safetensors"] {
            anyhow::ensure!(
                sft.join(f).exists(),
                "--sft-policy {}: no {f} there (expected an SFT checkpoint directory)",
                sft.display()
            );
        }
    }
    // The from-scratch pipeline post-trains into its own directory, so it
    // never picks up finished runs that started from the shipped policy.
    let bench = q.join(if own_sft { "bench-scratch" } else { "bench" });
    // Finished runs are reused only if they started from the same policy.
    let marker = bench.join("STARTED_FROM");
    let from = p(&sft);
    match std::fs::read_to_string(&marker) {
        Ok(prev) => anyhow::ensure!(
            prev.trim() == from,
            "{}: its runs started from {}, not {from}; pass another --out",
            bench.display(),
            prev.trim()
        ),
        Err(_) => {
            std::fs::create_dir_all(&bench)?;
            std::fs::write(&marker, &from)?;
        }
    }
    let size = args.image_size.to_string();
    let t0 = Instant::now();
    let mut timings = Vec::new();

    if own_sft {
        sft_stages(&args, &demos, &sft, &size, &mut timings)?;
    } else {
        println!("== demos, sft: skipped, starting from {}", sft.display());
    }

    let onnx = if own_sft {
        train_world_model(&args, q, &size, &mut timings)?
    } else {
        args.world_model.clone()
    };

    let seeds = args.seeds.to_string();
    let mut bench_args = vec![
        "bench".to_string(),
        "--config".into(),
        p(&args.config),
        "--arms".into(),
        args.arms.clone(),
        "--seeds".into(),
        seeds,
        "--out".into(),
        p(&bench),
        "--policy".into(),
        p(&sft),
        "--world-model".into(),
        p(&onnx),
        "--title".into(),
        "wmrl quickstart".into(),
    ];
    if let Some(s) = args.steps {
        bench_args.extend(["--steps".into(), s.to_string()]);
    }
    timings.push((
        "post-training + eval",
        stage("post-training", false, &bench_args)?,
    ));

    print_table(&args, &train_cfg, &bench)?;
    print_spread(&args);
    println!();
    for (name, secs) in &timings {
        println!("{name:<22} {secs:>7.0} s");
    }
    println!("{:<22} {:>7.0} s", "total", t0.elapsed().as_secs_f64());
    println!("report: {}", bench.join("report.md").display());
    Ok(())
}

/// The from-scratch pipeline's first stages: scripted demonstrations, then
/// SFT on them (each skipped when its output is there).
fn sft_stages(
    args: &Args,
    demos: &Path,
    sft: &Path,
    size: &str,
    timings: &mut Vec<(&'static str, f64)>,
) -> anyhow::Result<()> {
    let per = args.demos_per_task.unwrap_or(24).to_string();
    timings.push((
        "demos",
        stage(
            "demos",
            demos.join("DONE").exists(),
            &[
                "demos",
                "--tasks",
                "all",
                "--per-task",
                &per,
                "--init-states",
                "0-15",
                "--dart",
                "0.1",
                "--image-size",
                size,
                "--seed",
                "0",
                "--out",
                &p(demos),
            ],
        )?,
    ));
    std::fs::write(demos.join("DONE"), "")?;

    let mut sft_args = vec![
        "sft".to_string(),
        "--config".into(),
        p(args
            .sft_config
            .as_deref()
            .unwrap_or(Path::new("configs/policy_tiny.toml"))),
        "--demos".into(),
        p(demos),
        "--out".into(),
        p(sft),
    ];
    if let Some(s) = args.sft_steps {
        sft_args.extend(["--steps".into(), s.to_string()]);
    }
    let sft_done = sft.join(wmrl_policy::CONFIG_FILE).exists()
        && wmrl_run::RunDir::new(sft.to_path_buf())
            .recorded_settings::<wmrl_policy::SftConfig>()
            .is_some();
    timings.push(("sft", stage("sft", sft_done, &sft_args)?));

    Ok(())
}

/// The success table of the quickstart's runs against the SFT start.
fn print_table(
    args: &Args,
    train_cfg: &wmrl_train::TrainConfig,
    bench: &Path,
) -> anyhow::Result<()> {
    // The SFT starting point: every run evaluates it at step 0.
    let arms = wmrl_train::bench::parse_arms(&args.arms)?;
    let start = wmrl_train::trainer::read_summary(&wmrl_train::bench::start_dir(bench).dir).ok();
    println!();
    println!(
        "Held-out success on the config's evaluation states ({}), embedded simulator:",
        describe_eval(train_cfg)
    );
    println!(
        "{:<28} {:>24} {:>7} {:>27} {:>7} {:>7}  sampled vs start",
        "policy", "greedy (95% Wilson)", "gain", "sampled (95% Wilson)", "gain", "labels"
    );
    let cell = |r: &wmrl_policy::RateSummary| {
        format!(
            "{:>5.1}% [{:>4.1}, {:>4.1}]",
            100.0 * r.rate,
            100.0 * r.ci_low,
            100.0 * r.ci_high
        )
    };
    let gain =
        |a: Option<&wmrl_policy::RateSummary>, b: Option<&wmrl_policy::RateSummary>| match (a, b) {
            (Some(a), Some(b)) => format!("{:+.1}", 100.0 * (a.rate - b.rate)),
            _ => "-".into(),
        };
    let sampled = |s: &wmrl_train::trainer::RunSummary| {
        s.heldout_sampled.as_ref().map_or("-".to_string(), cell)
    };
    if let Some(s0) = &start {
        println!(
            "{:<28} {:>24} {:>7} {:>27} {:>7} {:>7}",
            "SFT (start)",
            cell(&s0.heldout),
            "-",
            sampled(s0),
            "-",
            0
        );
    }
    for arm in &arms {
        for s in 0..args.seeds {
            let dir = wmrl_run::RunDir::in_bench(bench, &arm.name, s).dir;
            if let Ok(sum) = wmrl_train::trainer::read_summary(&dir) {
                let s0 = start.as_ref();
                println!(
                    "{:<28} {:>24} {:>7} {:>27} {:>7} {:>7}  {}",
                    format!("{} seed {s}", labelled_name(&arm.name, &sum)),
                    cell(&sum.heldout),
                    gain(Some(&sum.heldout), s0.map(|x| &x.heldout)),
                    sampled(&sum),
                    gain(
                        sum.heldout_sampled.as_ref(),
                        s0.and_then(|x| x.heldout_sampled.as_ref())
                    ),
                    sum.ledger.labels,
                    versus_start(
                        sum.heldout_sampled.as_ref(),
                        s0.and_then(|x| x.heldout_sampled.as_ref())
                    )
                );
            }
        }
    }
    println!(
        "\nGains in points over the start. `resolved` where the arm's 95% interval of the sampled measure (the paper's) does not overlap the start's, `not resolved` otherwise: one seed tells a gain from noise only that far; the shuffled-advantage control (`--arms sparse,wmrl,sparse_shuffled`) and the bench over seeds (docs/results.md) say more. `wmrl` here has a quarter of the labels (`wmrl.anchors.fraction = 0.25`); its comparison with full-label `sparse` at equal rollouts is the method's scarce-label claim."
    );
    Ok(())
}

/// Under the table: the range the default quickstart's figures took over
/// the committed seed bench, or why there is none for these settings.
fn print_spread(args: &Args) {
    let defaults = !args.from_scratch
        && args.steps.is_none()
        && args.config == Path::new(DEFAULT_CONFIG)
        && args.sft_policy == Path::new(DEFAULT_POLICY)
        && args.world_model == Path::new(DEFAULT_WORLD_MODEL);
    println!();
    if !defaults {
        println!(
            "No committed seed range for these settings ({} is for the default config, start and steps); `--seeds N` measures one.",
            args.spread.display()
        );
        return;
    }
    let arms: Vec<&str> = args.arms.split(',').map(str::trim).collect();
    match wmrl_train::spread::bench_spread(&args.spread, &arms) {
        Ok(spread) => print!(
            "{}",
            wmrl_train::spread::spread_lines(&spread, &args.spread.display().to_string())
        ),
        Err(e) => println!("No seed range to compare with: {e}"),
    }
}

/// "task 0, states 16-49" and the like, from the config's `[eval]`.
fn describe_eval(cfg: &wmrl_train::TrainConfig) -> String {
    let tasks = match cfg.eval.tasks.as_slice() {
        [] => "every task".to_string(),
        [t] => format!("task {t}"),
        ts => format!(
            "tasks {}",
            ts.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let [a, b] = cfg.eval.init_states;
    match cfg.eval.sampled_per_state {
        0 => format!("{tasks}, states {a}-{b}"),
        k => format!(
            "{tasks}, states {a}-{b}; sampled: {k} per state at T = {}",
            cfg.rollout.temperature
        ),
    }
}

/// The world-model stages of --from-scratch: noisy rollouts, training, ONNX
/// export. Returns the exported model.
fn train_world_model(
    args: &Args,
    q: &Path,
    size: &str,
    timings: &mut Vec<(&'static str, f64)>,
) -> anyhow::Result<PathBuf> {
    let wm_rollouts = q.join("wm_rollouts");
    let wm = q.join("wm");
    let wm_per_task = args.wm_rollouts_per_task.unwrap_or(6);
    // World-model data: expert, mildly and strongly noisy rollouts of the
    // training states, so progress and failure both appear.
    let wper = wm_per_task.to_string();
    let mut wm_secs = 0.0;
    for (i, noise) in ["0.0", "0.3", "0.8"].iter().enumerate() {
        let start = (i * 10 * wm_per_task).to_string();
        let seed = (100_000 * (i + 1)).to_string();
        wm_secs += stage(
            &format!("world-model rollouts (noise {noise})"),
            wm_rollouts.join(format!("DONE{i}")).exists(),
            &[
                "demos",
                "--tasks",
                "all",
                "--per-task",
                &wper,
                "--init-states",
                "0-15",
                "--noise",
                noise,
                "--image-size",
                size,
                "--seed",
                &seed,
                "--start-index",
                &start,
                "--out",
                &p(&wm_rollouts),
            ],
        )?;
        std::fs::write(wm_rollouts.join(format!("DONE{i}")), "")?;
    }
    timings.push(("wm rollouts", wm_secs));

    let mut wm_args = vec![
        "wm".to_string(),
        "train".into(),
        "--rollouts".into(),
        p(&wm_rollouts),
        "--out".into(),
        p(&wm),
    ];
    if let Some(s) = args.wm_steps {
        wm_args.extend(["--steps".into(), s.to_string()]);
    }
    let onnx = wm.join("model.onnx");
    let mut wm_train = stage("world-model training", onnx.exists(), &wm_args)?;
    wm_train += stage(
        "world-model export",
        onnx.exists(),
        &["wm", "export", "--model", &p(&wm)],
    )?;
    timings.push(("wm train+export", wm_train));

    Ok(onnx)
}

/// An arm's name with the share of rollouts that had a real label.
fn labelled_name(name: &str, s: &wmrl_train::trainer::RunSummary) -> String {
    if s.anchor_fraction >= 1.0 || s.label_regime != "scarce" {
        name.to_string()
    } else {
        format!("{name} ({:.0}% labels)", 100.0 * s.anchor_fraction)
    }
}

/// Whether an arm's sampled success is resolved against the start's: their
/// 95% Wilson intervals do not overlap.
fn versus_start(
    arm: Option<&wmrl_policy::RateSummary>,
    start: Option<&wmrl_policy::RateSummary>,
) -> &'static str {
    match (arm, start) {
        (Some(a), Some(s)) if a.ci_low > s.ci_high => "up, resolved",
        (Some(a), Some(s)) if a.ci_high < s.ci_low => "down, resolved",
        (Some(_), Some(_)) => "not resolved",
        _ => "-",
    }
}
