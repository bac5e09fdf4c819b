//! `wmrl sft`: behaviour cloning of a policy preset on `wmrl demos` episodes,
//! or (`--minivla small`) of a whole MiniVLA built fresh in `--out`: the
//! flags read here, the training done by the policy kind
//! (`wmrl_train::PolicyKind::sft`).
//! `--check` instead builds the preset and times one forward pass (how the
//! `minivla` preset is exercised without a long test).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use wmrl_policy::candle::{DType, Device};
use wmrl_policy::{Policy, PolicyInput, RunConfig, SftConfig, SftReport};

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
    /// The policy kind to train (`tiny`, the default, or `minivla`; the
    /// kinds `wmrl train` loads by `policy_type`, docs/policy.md).
    #[arg(long, value_name = "NAME")]
    pub policy_type: Option<String>,
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
    // The kind trains; this command only reads the flags. `--minivla P`
    // is `--policy-type minivla` with MiniVLA's preset P.
    let kind = match (&args.minivla, &args.policy_type) {
        (Some(_), Some(t)) if t != "minivla" => {
            anyhow::bail!("--minivla trains the `minivla` kind, not `{t}`")
        }
        (Some(_), _) => "minivla",
        (None, Some(t)) => t.as_str(),
        (None, None) => "tiny",
    };
    let done = wmrl_train::PolicyKinds::builtin()
        .get(kind)?
        .sft(wmrl_train::SftRequest {
            demos: &demos,
            out: &out,
            run: rc,
            preset: args.minivla.as_deref(),
            init: args.init.as_deref(),
            resume,
            max_episodes: args.max_episodes,
            device: &device,
        })?;
    write_report(&demos, &out, &done.sft, &done.report, done.params)
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
