use std::path::PathBuf;

use anyhow::Context;
use wmrl_core::Arm;
use wmrl_run::Progress;
use wmrl_train::{RunSummary, TrainConfig, Trainer};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Run config (TOML); unknown keys are an error.
    #[arg(long, required_unless_present = "resume")]
    pub config: Option<PathBuf>,
    /// Reward arm (docs/method.md); sparse_shuffled is the control
    /// (advantages shuffled within groups).
    #[arg(long, value_parser = super::arm_parser())]
    pub arm: Option<Arm>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run directory to create.
    #[arg(long, required_unless_present = "resume")]
    pub out: Option<PathBuf>,
    /// Continue the run in this directory from its last checkpoint.
    #[arg(long, conflicts_with_all = ["config", "out"])]
    pub resume: Option<PathBuf>,
    /// Override the number of training steps.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Override the anchor fraction (1.0 is the free-label regime).
    #[arg(long)]
    pub anchor_fraction: Option<wmrl_core::AnchorFraction>,
    /// Override the SFT checkpoint to start from.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Override the world model file.
    #[arg(long)]
    pub world_model: Option<PathBuf>,
    /// Override any config key before validation: `--set section.key=value`
    /// (repeatable; the value is TOML, e.g. `--set rollout.temperature=0.5`).
    #[arg(long = "set", value_name = "KEY=VALUE", conflicts_with = "resume")]
    pub set: Vec<String>,
    /// No progress bar (for benches running many runs).
    #[arg(long)]
    pub quiet: bool,
    /// Where the models run: `cpu`, `cuda` (the GPU where each part can use
    /// it; one warning names each part that stays on the CPU and why) or
    /// `auto` (the same, the fallback logged as information). Recorded as
    /// the run's `device`; without it a run uses its config's (default
    /// `cpu`), a resumed run the one it recorded.
    #[arg(long)]
    pub device: Option<wmrl_run::DeviceChoice>,
}

/// The override flags `wmrl train` and `wmrl bench` share, applied over a
/// loaded config (after its `--set`s, before validation).
pub struct Flags<'a> {
    pub steps: Option<usize>,
    pub anchor_fraction: Option<wmrl_core::AnchorFraction>,
    pub policy: Option<&'a PathBuf>,
    pub world_model: Option<&'a PathBuf>,
}

impl<'a> Flags<'a> {
    fn of(args: &'a Args) -> Self {
        Self {
            steps: args.steps,
            anchor_fraction: args.anchor_fraction,
            policy: args.policy.as_ref(),
            world_model: args.world_model.as_ref(),
        }
    }

    pub fn apply(&self, cfg: &mut TrainConfig) {
        if let Some(s) = self.steps {
            cfg.steps = s;
        }
        if let Some(f) = self.anchor_fraction {
            cfg.wmrl.anchors.fraction = f;
        }
        if let Some(p) = self.policy {
            cfg.policy = p.clone();
        }
        if let Some(p) = self.world_model {
            cfg.world_model.path = p.clone();
        }
    }
}

/// Build the config a fresh run would use, with the CLI's overrides applied
/// (validated once, by [`Trainer::create`]).
pub fn resolve(args: &Args) -> anyhow::Result<TrainConfig> {
    let path = args.config.as_ref().context("--config is required")?;
    let mut cfg = TrainConfig::parse_with(path, &args.set)?;
    if let Some(a) = args.arm {
        cfg.arm = a;
    }
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    if let Some(d) = args.device {
        cfg.device = d;
    }
    Flags::of(args).apply(&mut cfg);
    Ok(cfg)
}

/// Train (or resume) and return the summary.
pub fn train(args: &Args) -> anyhow::Result<RunSummary> {
    let mut trainer = match &args.resume {
        Some(dir) => {
            anyhow::ensure!(
                args.steps.is_none() && args.arm.is_none() && args.seed.is_none(),
                "a resumed run keeps its own run.toml: drop --steps/--arm/--seed"
            );
            Trainer::resume_on(dir, args.device)?
        }
        None => {
            let cfg = resolve(args)?;
            let out = args.out.as_ref().context("--out is required")?;
            Trainer::create(cfg, out)?
        }
    };
    let total = trainer.config().steps as u64;
    // Quiet (a bench's child run): one log line per step instead.
    let bar = Progress::new(
        &format!("train {}", trainer.config().arm.name()),
        total,
        "steps",
        !args.quiet,
    );
    bar.set_position(trainer.steps_done() as u64);
    let summary = trainer.run(|m| {
        bar.set_position(m.step as u64 + 1);
        bar.set_message(format!(
            "batch success {:.0}%  w {:.2}  labels {}",
            100.0 * m.batch_success,
            m.anchor_weight,
            m.labels_cumulative
        ));
        if args.quiet {
            tracing::info!(
                step = m.step,
                batch_success = m.batch_success,
                weight = m.anchor_weight,
                labels = m.labels_cumulative,
                "step"
            );
        }
    })?;
    bar.finish();
    Ok(summary)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let s = train(&args)?;
    println!(
        "arm {} seed {}: held-out success {:.1}% [{:.1}, {:.1}] over {} episodes{}; labels used {}",
        s.arm,
        s.seed,
        100.0 * s.heldout.rate,
        100.0 * s.heldout.ci_low,
        100.0 * s.heldout.ci_high,
        s.heldout.episodes,
        s.in_domain
            .as_ref()
            .map(|d| format!("; in-domain {:.1}%", 100.0 * d.rate))
            .unwrap_or_default(),
        s.ledger.labels
    );
    Ok(())
}
