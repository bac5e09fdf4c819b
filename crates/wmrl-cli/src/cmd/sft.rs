//! `wmrl sft`: behaviour cloning of a policy preset on `wmrl demos` episodes,
//! or (`--minivla small`) of a whole MiniVLA built fresh in `--out`.
//! `--check` instead builds the preset and times one forward pass (how the
//! `minivla` preset is exercised without a long test).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use wmrl_minivla::{MiniVlaConfig, MiniVlaSft};
use wmrl_policy::candle::{DType, Device};
use wmrl_policy::{Policy, PolicyInput, RunConfig, SftConfig, SftDataset, SftModel, SftReport};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory of demonstration episodes (`wmrl demos --out`).
    #[arg(long)]
    pub demos: Option<PathBuf>,
    /// Policy preset: tiny, small, minivla.
    #[arg(long)]
    pub preset: Option<String>,
    /// Run-config TOML (`configs/policy_*.toml`): preset, policy overrides,
    /// [sft], [eval]; `extends = "other.toml"` and unknown keys refused, as
    /// for every command.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override any config key before it is read: `--set sft.steps=200`,
    /// `--set policy.image_size=64` (repeatable; the value is TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Run directory: the policy, checkpoints, metrics.jsonl, run.toml.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Use at most this many (successful) episodes, in file order.
    #[arg(long)]
    pub max_episodes: Option<usize>,
    /// Override the number of optimiser steps (also the cosine length).
    #[arg(long)]
    pub steps: Option<usize>,
    #[arg(long)]
    pub batch_size: Option<usize>,
    #[arg(long)]
    pub lr: Option<f64>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Continue the run in `--out` from its last checkpoint.
    #[arg(long)]
    pub resume: bool,
    /// Start from this policy checkpoint (its network and proprio
    /// normalisation) instead of a fresh preset: fine-tuning, e.g. on the
    /// policy's own successful episodes (`wmrl eval --save-episodes`).
    #[arg(long, conflicts_with_all = ["preset", "check"])]
    pub init: Option<PathBuf>,
    /// Build the preset, run one forward pass on a dummy observation, print
    /// parameter count and timing, and exit.
    #[arg(long)]
    pub check: bool,
    /// Train a whole MiniVLA (same structure and tensor names as the
    /// published one) instead of a `tiny`-family policy: `small` writes a
    /// fresh checkpoint into --out (random weights from the SFT seed, a
    /// word-level tokenizer of the embedded suite's and the demos'
    /// instructions), then trains every tensor on the demos' actions as
    /// action tokens. The result is a MiniVLA directory for `wmrl eval`,
    /// `wmrl train` and `wmrl bench` (`policy = DIR`). [sft] settings and
    /// --steps, --batch-size, --lr, --seed, --resume apply.
    #[arg(long, value_name = "PRESET", conflicts_with_all = ["preset", "init", "check"])]
    pub minivla: Option<String>,
    /// Where the model trains: cpu, cuda (candle's CUDA backend, a build
    /// with `--features cuda`; the CPU with a warning otherwise) or auto.
    /// Recorded as `device` in the run's run.toml (`[sft] device` in the config file); overrides the config's.
    #[arg(long)]
    pub device: Option<wmrl_run::DeviceChoice>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut rc = RunConfig::load_with(args.config.as_deref(), args.preset.as_deref(), &args.set)?;
    if let Some(d) = args.device {
        rc.sft.device = d;
    }
    let device = wmrl_device::candle_device(rc.sft.device, "the SFT model");
    if args.check {
        return check(rc, &device);
    }
    let demos = args.demos.context("--demos is required")?;
    let out = args.out.context("--out is required")?;
    if let Some(s) = args.steps {
        rc.sft.steps = s;
        rc.sft.optim.total_steps = s;
    }
    if let Some(b) = args.batch_size {
        rc.sft.batch_size = b;
    }
    if let Some(lr) = args.lr {
        rc.sft.optim.lr = lr;
    }
    if let Some(seed) = args.seed {
        rc.sft.seed = seed;
    }
    let resume = args.resume && wmrl_policy::can_resume(&out);
    if let Some(preset) = &args.minivla {
        let (report, params) = minivla_sft(
            preset,
            &demos,
            &out,
            &rc.sft,
            resume,
            args.max_episodes,
            &device,
        )?;
        return write_report(&demos, &out, &rc.sft, &report, params);
    }
    let init = match &args.init {
        Some(p) if !resume => Some(
            Policy::load_on(p, &device, DType::F32)
                .with_context(|| format!("loading --init {}", p.display()))?,
        ),
        _ => None,
    };
    if resume {
        // The network must be the one the run started with.
        rc.policy = Policy::load(&out)?.config().clone();
    } else if let Some(p) = &init {
        rc.policy = p.config().clone();
    } else {
        let first = wmrl_env::list_episodes(&demos)?
            .first()
            .map(|p| wmrl_env::read_episode(p))
            .transpose()?
            .context("no episodes in --demos")?;
        rc.policy.proprio_dim = first.steps.first().map(|s| s.proprio.len()).unwrap_or(0);
        rc.policy.proprio_mean.clear();
        rc.policy.proprio_std.clear();
    }
    let t_load = Instant::now();
    let data = SftDataset::from_dir(
        &rc.policy,
        &demos,
        args.max_episodes,
        rc.sft.include_failures,
    )
    .with_context(|| format!("loading demos from {}", demos.display()))?;
    tracing::info!(
        episodes = data.n_episodes,
        samples = data.len(),
        secs = t_load.elapsed().as_secs_f64(),
        "loaded demonstrations"
    );
    if !resume && init.is_none() {
        let (mean, std) = data.proprio_stats(rc.policy.proprio_dim);
        rc.policy.proprio_mean = mean;
        rc.policy.proprio_std = std;
    }
    let policy = match init {
        Some(p) => p,
        None => Policy::new(rc.policy.clone(), &device, DType::F32)?,
    };
    tracing::info!(preset = %rc.policy.preset, params = policy.n_params(), "policy");
    let report = wmrl_policy::train_sft(
        &wmrl_policy::PolicySft {
            policy: &policy,
            data: &data,
        },
        &rc.sft,
        &out,
        args.resume,
        true,
    )?;
    write_report(&demos, &out, &rc.sft, &report, policy.n_params())
}

/// `sft_report.json` in `out`, and the same line on stdout.
fn write_report(
    demos: &Path,
    out: &Path,
    sft: &SftConfig,
    report: &SftReport,
    params: usize,
) -> anyhow::Result<()> {
    let summary = serde_json::json!({
        "demos": demos.display().to_string(),
        "episodes": report.n_episodes, "samples": report.n_samples,
        "steps": report.steps, "start_step": report.start_step,
        "batch_size": sft.batch_size,
        "final_loss": report.final_loss, "final_token_acc": report.final_token_acc,
        "wall_secs": report.wall_secs, "samples_per_sec": report.samples_per_sec,
        "params": params,
    });
    wmrl_run::atomic_write(
        &out.join("sft_report.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    println!("{summary}");
    Ok(())
}

/// `wmrl sft --minivla PRESET`: a fresh MiniVLA in `out` (unless resuming),
/// trained whole on the demos. Returns the report and the parameter count.
fn minivla_sft(
    preset: &str,
    demos: &Path,
    out: &Path,
    sft: &SftConfig,
    resume: bool,
    max_episodes: Option<usize>,
    device: &Device,
) -> anyhow::Result<(SftReport, usize)> {
    let episodes = wmrl_env::list_episodes(demos)?;
    if !resume {
        let cfg = match preset {
            "small" => MiniVlaConfig::small(),
            other => anyhow::bail!("unknown MiniVLA preset `{other}` (small)"),
        };
        let mut instructions: Vec<String> = wmrl_sim::tasks()?
            .into_iter()
            .map(|t| t.instruction)
            .collect();
        for p in &episodes {
            instructions.push(wmrl_env::read_episode(p)?.instruction);
        }
        let lower: Vec<String> = instructions.iter().map(|s| s.to_lowercase()).collect();
        let mut words: Vec<&str> = lower.iter().flat_map(|s| s.split_whitespace()).collect();
        words.sort_unstable();
        words.dedup();
        wmrl_minivla::stand_in::write_stand_in(out, &cfg, sft.seed, DType::F32, &words)
            .with_context(|| format!("writing a fresh MiniVLA into {}", out.display()))?;
    }
    let mut model = MiniVlaSft::load(out, device)?;
    for p in &episodes {
        if max_episodes.is_some_and(|m| model.n_episodes() >= m) {
            break;
        }
        let ep = wmrl_env::read_episode(p)?;
        if ep.success || sft.include_failures {
            model
                .push_episode(&ep)
                .with_context(|| format!("demo {}", p.display()))?;
        }
    }
    anyhow::ensure!(
        model.n_samples() > 0,
        "no usable episodes in {}",
        demos.display()
    );
    let params = model.model().n_params();
    tracing::info!(preset, params, samples = model.n_samples(), "minivla");
    let report = wmrl_policy::train_sft(&model, sft, out, resume, true)?;
    Ok((report, params))
}

fn check(rc: RunConfig, device: &Device) -> anyhow::Result<()> {
    let cfg = rc.policy;
    let t0 = Instant::now();
    let policy = Policy::new(cfg.clone(), device, DType::F32)?;
    let build = t0.elapsed().as_secs_f64();
    let frame = wmrl_env::Frame::blank(128, 128);
    let input = PolicyInput {
        instruction: "put both the alphabet soup and the tomato sauce in the basket".into(),
        frames: vec![frame.clone(), frame],
        prev_frame: None,
        proprio: vec![0.0; cfg.proprio_dim],
    };
    let prep = policy.prepare(std::slice::from_ref(&input))?;
    let toks = policy.tokens_tensor(&[vec![128; cfg.tokens_per_call()]])?;
    let t1 = Instant::now();
    let logits = policy.chunk_logits(&prep, &toks)?;
    let fwd = t1.elapsed().as_secs_f64();
    let v = logits.flatten_all()?.to_vec1::<f32>()?;
    anyhow::ensure!(v.iter().all(|x| x.is_finite()), "non-finite logits");
    println!(
        "{}",
        serde_json::json!({"preset": cfg.preset, "params": policy.n_params(), "seq_len": cfg.seq_len(),
            "logits_shape": logits.dims(), "build_secs": build, "forward_secs": fwd})
    );
    Ok(())
}
