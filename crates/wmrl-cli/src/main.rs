//! `wmrl`: post-train VLA policies with world-model rewards kept honest by
//! real anchors. Each subcommand lives in its own module under `cmd/`, with a
//! clap `Args` struct and a `run` function; this file only wires them.

use clap::{Parser, Subcommand};

mod cmd;

#[derive(Debug, Parser)]
#[command(name = "wmrl", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the episode files in a directory (`wmrl demos`, `wmrl eval
    /// --save-episodes`, an envs/datasets import): file, task, init state,
    /// steps, success, source (`--json` adds final progress).
    Episodes(cmd::episodes::Args),
    /// Scripted-expert demonstrations from the embedded simulator, written as
    /// episode files (`--tasks all --per-task N --out DIR [--noise S]`).
    Demos(cmd::demos::Args),
    /// Embedded simulator speed per task (physics only and with both cameras)
    /// and memory per instance.
    BenchSim(cmd::bench_sim::Args),
    /// Behaviour-clone a policy preset on demonstrations (`--check` builds a
    /// preset and times one forward pass).
    Sft(cmd::sft::Args),
    /// Success of a policy checkpoint per task with 95% Wilson intervals,
    /// JSON results and rollout GIFs.
    Eval(cmd::eval::Args),
    /// The progress world model: train, export to ONNX, report quality, bench.
    Wm(cmd::wm::Args),
    /// Post-train a policy with GRPO under one reward arm (`--resume RUN`
    /// continues an interrupted run to the same result).
    Train(cmd::train::Args),
    /// Every arm over several seeds, then report.md with intervals, the label
    /// and compute ledger, and plots.
    Bench(cmd::bench::Args),
    /// A run's trained policy at its last checkpoint as a checkpoint
    /// directory (MiniVLA: adapters merged, in the converted layout).
    Export(cmd::export::Args),
    /// Post-training on two CPU cores from the shipped SFT policy and world
    /// model: `sparse` and scarce-label `wmrl`, a held-out success table and
    /// report.md (about 5 minutes; `--from-scratch` first records demos and
    /// trains the SFT policy and the world model, about 28 minutes more).
    Quickstart(cmd::quickstart::Args),
    /// Serve N embedded simulators over the wmrl-bridge ZeroMQ protocol.
    ServeSim(cmd::serve_sim::Args),
    /// Labels from people: `label serve --run DIR` serves the page on which
    /// people label a run's anchor rollouts (`labels.source = "human"`).
    Label(cmd::label::Args),
    /// AutoResearch track: MLE-Dojo-style competitions, sandboxed execution,
    /// outcome predictor, `train --arm {real,wm,wmrl}`, `bench --seeds 5` (resumable).
    Autoresearch(cmd::autoresearch::Args),
}

fn main() -> anyhow::Result<()> {
    wmrl_run::process::keep_freed_memory();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Episodes(args) => cmd::episodes::run(args),
        Command::Demos(args) => cmd::demos::run(args),
        Command::BenchSim(args) => cmd::bench_sim::run(args),
        Command::Sft(args) => cmd::sft::run(args),
        Command::Eval(args) => cmd::eval::run(args),
        Command::Wm(args) => cmd::wm::run(args),
        Command::Train(args) => cmd::train::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Export(args) => cmd::export::run(args),
        Command::Quickstart(args) => cmd::quickstart::run(args),
        Command::ServeSim(args) => cmd::serve_sim::run(args),
        Command::Label(args) => cmd::label::run(args),
        Command::Autoresearch(args) => cmd::autoresearch::run(args),
    }
}
