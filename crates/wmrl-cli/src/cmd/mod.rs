//! One module per subcommand: `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod autoresearch;
pub mod bench;
pub mod bench_sim;
pub mod demos;
pub mod episodes;
pub mod eval;
pub mod quickstart;
pub mod rewards_http;
pub mod serve_sim;
pub mod sft;
pub mod train;
pub mod wm;
