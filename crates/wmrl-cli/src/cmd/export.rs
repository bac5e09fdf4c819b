//! `wmrl export --run RUN --out DIR`: the trained policy of a run at its
//! last checkpoint as a checkpoint directory of its kind.

use std::path::PathBuf;

/// Write a run's trained policy as a checkpoint directory: a `tiny` policy
/// as `wmrl sft` writes one; a MiniVLA as its start checkpoint with the
/// LoRA adapters merged into the weights, in the converted layout (so
/// `wmrl eval --policy DIR`, a further run, or scripts/convert_minivla.py's
/// key map back to PyTorch read it).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory (`wmrl train --out`, or `<bench>/<arm>/seed<k>`).
    #[arg(long)]
    pub run: PathBuf,
    /// Where to write the policy (must not exist yet, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Where the policy runs while it is merged: `cpu`, `cuda` or `auto`.
    #[arg(long, default_value = "cpu")]
    pub device: wmrl_run::DeviceChoice,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (kind, step) = wmrl_train::export_policy(&args.run, &args.out, args.device)?;
    println!(
        "{kind} policy of {} at step {step} -> {}",
        args.run.display(),
        args.out.display()
    );
    Ok(())
}
