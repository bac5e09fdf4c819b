//! One module per subcommand: `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod episodes;
