//! One module per subcommand: `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod episodes;
pub mod eval;
pub mod sft;
