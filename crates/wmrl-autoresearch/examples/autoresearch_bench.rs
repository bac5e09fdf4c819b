//! The AutoResearch benchmark without the CLI:
//! `cargo run --release -p wmrl-autoresearch --example autoresearch_bench -- OUT_DIR [SEEDS] [STEPS] [PER_COMPETITION] [GROUPS_PER_STEP] [EVAL_SAMPLES]`.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use wmrl_autoresearch::bench::{BenchConfig, run_bench};
use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::execute::Executor;
use wmrl_autoresearch::{Ladder, Sandbox, SandboxConfig, Suite};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber_init();
    let args: Vec<String> = std::env::args().collect();
    let out = PathBuf::from(
        args.get(1)
            .cloned()
            .unwrap_or_else(|| "runs/autoresearch/bench".into()),
    );
    let mut cfg = BenchConfig::default();
    if let Some(s) = args.get(2) {
        cfg.seeds = s.parse()?;
    }
    if let Some(s) = args.get(3) {
        cfg.train.steps = s.parse()?;
    }
    if let Some(s) = args.get(4) {
        cfg.per_competition = s.parse()?;
    }
    if let Some(s) = args.get(5) {
        cfg.train.groups_per_step = s.parse()?;
    }
    if let Some(s) = args.get(6) {
        cfg.train.eval_samples = s.parse()?;
    }
    let suite = Suite::load(&default_suite_dir())?;
    let ex = Executor::new(Sandbox::new(SandboxConfig::default())?, Ladder::default())
        .with_cache(&out.join("../exec_cache.jsonl"))?;
    let res = run_bench(&cfg, &suite, &ex, &out)?;
    print!("{}", res.table());
    Ok(())
}

fn tracing_subscriber_init() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
}
