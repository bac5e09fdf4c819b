//! `wmrl autoresearch`: the AutoResearch track (MLE-Dojo-style competitions,
//! sandboxed execution, outcome predictor, WMRL training and its benchmark).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use wmrl_autoresearch::bench::{BenchConfig, run_bench};
use wmrl_autoresearch::collect::{
    collect, evaluate_predictor_on, example_inputs, read_examples, write_examples,
};
use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::execute::Executor;
use wmrl_autoresearch::onnx_predictor::{OnnxPredictor, max_abs_diff};
use wmrl_autoresearch::predictor::{InputKind, Predictor, PredictorConfig};
use wmrl_autoresearch::rewards::{RewardConfig, RewardService};
use wmrl_autoresearch::sandbox::repo_root;
use wmrl_autoresearch::{ArArm, Ladder, Sandbox, SandboxConfig, Split, Suite, TrainConfig, train};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

/// Options every subcommand shares.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Competition suite folder (default: envs/mledojo/competitions).
    #[arg(long, global = true)]
    pub suite: Option<PathBuf>,
    /// Replay cache of executed solutions (deterministic solutions; the
    /// replayed run's CPU seconds are charged again).
    #[arg(
        long,
        global = true,
        default_value = "runs/autoresearch/exec_cache.jsonl"
    )]
    pub cache: PathBuf,
    /// Execute every solution even if it ran before.
    #[arg(long, global = true)]
    pub no_cache: bool,
    /// Sandbox wall-clock limit per solution.
    #[arg(long, global = true, default_value_t = 30.0)]
    pub wall_secs: f64,
}

#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Regenerate the competition suite with envs/mledojo/build_suite.py.
    BuildSuite {
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Execute one Python solution file on a competition and print its grade.
    Run {
        #[arg(long)]
        competition: String,
        #[arg(long)]
        solution: PathBuf,
        /// Also show the run's public files read-only at this absolute path
        /// (MLE-Dojo's `data_path`, for code that reads data from there).
        #[arg(long)]
        data_path: Option<PathBuf>,
        /// Also show the run's working directory at this absolute path
        /// (MLE-Dojo's `output_path`: code writes `submission.csv` there).
        #[arg(long)]
        output_path: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Execute random solutions on one split (predictor data), as JSONL.
    Collect {
        #[arg(long, default_value = "train")]
        split: String,
        #[arg(long, default_value_t = 24)]
        per_competition: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Train the outcome predictor on training-split data, export it to
    /// ONNX (`--out`, e.g. predictor.onnx; the candle weights go beside it as
    /// .json); report its rank correlation, scored through ONNX Runtime.
    FitPredictor {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        heldout: Option<PathBuf>,
        #[arg(long)]
        out: PathBuf,
        /// Train the code predictor instead: inputs are static features of
        /// the code each solution renders to (any code can be scored, the
        /// world model of `serve-rewards`), not the template one-hot.
        #[arg(long)]
        code: bool,
        #[command(flatten)]
        common: Common,
    },
    /// The reward service for LLM trainers: answers HTTP POST /v1/rewards
    /// with one reward per candidate solution through the correction loop
    /// (anchor groups executed in the sandbox, the rest scored by the code
    /// predictor and calibrated); GET /v1/health. Protocol:
    /// docs/autoresearch.md; Python client: envs/mledojo/wmrl_rewards.py.
    ServeRewards {
        /// Address to listen on (port 0: any free port; the bound address
        /// is printed as `listening on http://HOST:PORT`).
        #[arg(long, default_value = "127.0.0.1:8799")]
        bind: String,
        /// real (execute every group), wm (world model only) or wmrl.
        #[arg(long, default_value = "wmrl")]
        arm: String,
        /// Fraction of groups executed in the sandbox (wmrl).
        #[arg(long, default_value_t = 0.25)]
        anchor_fraction: f64,
        /// Code predictor ONNX file (`fit-predictor --code`); wm and wmrl.
        #[arg(long, default_value = "runs/autoresearch/code_predictor.onnx")]
        predictor: PathBuf,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The loop's state, loaded on start if present and written after
        /// every request.
        #[arg(long, default_value = "runs/autoresearch/rewards_state.json")]
        state: PathBuf,
        /// Stop after this many answered requests (0: serve until killed).
        #[arg(long, default_value_t = 0)]
        max_requests: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Train the policy with one arm and one seed.
    Train {
        #[arg(long, default_value = "wmrl")]
        arm: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Outcome predictor ONNX file, run through ONNX Runtime (required
        /// for wm and wmrl; see fit-predictor).
        #[arg(long, default_value = "runs/autoresearch/predictor.onnx")]
        predictor: PathBuf,
        /// TrainConfig as JSON (defaults otherwise).
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        steps: Option<usize>,
        #[arg(long, default_value = "runs/autoresearch")]
        out: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Predictor data, predictor, then every arm over several seeds; prints
    /// score per arm with 95% intervals against sandbox CPU-seconds and
    /// writes a PNG.
    Bench {
        #[arg(long, default_value_t = 3)]
        seeds: u64,
        #[arg(long, default_value_t = 24)]
        per_competition: usize,
        #[arg(long)]
        steps: Option<usize>,
        /// Fraction of each step's groups the `wmrl` arm executes in the
        /// sandbox (anchors; at least one group a step) [default: 0.1]
        #[arg(long)]
        anchor_fraction: Option<wmrl_core::AnchorFraction>,
        /// Beyond the paper: the `wm` and `wmrl` arms refit the predictor on
        /// its data plus the run's anchor executions every N steps (0: never)
        #[arg(long, default_value_t = 0)]
        refit_predictor_every: usize,
        #[arg(long, default_value = "runs/autoresearch/bench")]
        out: PathBuf,
        #[command(flatten)]
        common: Common,
    },
}

fn suite(c: &Common) -> anyhow::Result<Suite> {
    let dir = c.suite.clone().unwrap_or_else(default_suite_dir);
    Suite::load(&dir).with_context(|| format!("loading suite {}", dir.display()))
}

fn executor(c: &Common) -> anyhow::Result<Executor> {
    let sb = Sandbox::new(SandboxConfig {
        wall_secs: c.wall_secs,
        ..Default::default()
    })?;
    tracing::info!("sandbox backend: {:?}", sb.backend());
    // Every solution template imports these; without them every execution
    // fails and the run would measure nothing.
    sb.check_python(&["numpy", "pandas", "sklearn"])?;
    let ex = Executor::new(sb, Ladder::default());
    Ok(if c.no_cache {
        ex
    } else {
        ex.with_cache(&c.cache)?
    })
}

fn split(s: &str) -> anyhow::Result<Split> {
    Ok(match s {
        "train" => Split::Train,
        "heldout" => Split::Heldout,
        _ => bail!("split must be train or heldout"),
    })
}

fn mkdir(p: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))
}

fn print_predictor_eval(
    label: &str,
    p: &OnnxPredictor,
    data: &[wmrl_autoresearch::predictor::Example],
    suite: &Suite,
) -> anyhow::Result<serde_json::Value> {
    let inputs = example_inputs(p.kind(), data, suite)?;
    let e = evaluate_predictor_on(p, &inputs, data)?;
    println!(
        "predictor on {label}: n={} spearman pooled={} within-competition mean={} mae={:.3}",
        e.n,
        e.spearman_pooled
            .map_or("n/a".into(), |v| format!("{v:.3}")),
        e.spearman_within_mean
            .map_or("n/a".into(), |v| format!("{v:.3}")),
        e.mae
    );
    Ok(serde_json::to_value(e)?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Sub::BuildSuite { out, common } => {
            let out = out.unwrap_or_else(default_suite_dir);
            let py = SandboxConfig::default().python;
            let script = repo_root().join("envs/mledojo/build_suite.py");
            let _ = &common;
            let st = std::process::Command::new(&py)
                .arg(&script)
                .arg(&out)
                .status()?;
            if !st.success() {
                bail!("{} failed", script.display());
            }
        }
        Sub::Run {
            competition,
            solution,
            data_path,
            output_path,
            common,
        } => {
            for p in data_path.iter().chain(&output_path) {
                anyhow::ensure!(p.is_absolute(), "{} must be an absolute path", p.display());
            }
            let views = wmrl_autoresearch::PathViews {
                public_at: data_path,
                workdir_at: output_path,
            };
            let s = suite(&common)?;
            let comp = s
                .by_name(&competition)
                .with_context(|| format!("no competition {competition}"))?;
            let code = std::fs::read_to_string(&solution)?;
            let o = executor(&Common {
                no_cache: true,
                ..common
            })?
            .execute_with(comp, &code, &views)?;
            println!("{}", serde_json::to_string_pretty(&o)?);
        }
        Sub::Collect {
            split: sp,
            per_competition,
            seed,
            out,
            common,
        } => {
            let s = suite(&common)?;
            let data = collect(&s, &executor(&common)?, split(&sp)?, per_competition, seed)?;
            write_examples(&out, &data)?;
            let cpu: f64 = data.iter().map(|e| e.cpu_secs).sum();
            println!(
                "{} examples, {cpu:.1} sandbox CPU-seconds -> {}",
                data.len(),
                out.display()
            );
        }
        Sub::FitPredictor {
            data,
            heldout,
            out,
            code,
            common,
        } => {
            let s = suite(&common)?;
            let train_data = read_examples(&data)?;
            for e in &train_data {
                if s.by_name(&e.competition)
                    .is_some_and(|c| c.meta.split != Split::Train)
                {
                    bail!(
                        "{} is not a training competition: the predictor trains on the training split only",
                        e.competition
                    );
                }
            }
            if out.extension().is_some_and(|e| e == "json") {
                bail!(
                    "--out is the ONNX file (e.g. predictor.onnx); the JSON weights go beside it"
                );
            }
            let kind = if code {
                InputKind::Code
            } else {
                InputKind::Template
            };
            let inputs = example_inputs(kind, &train_data, &s)?;
            let targets: Vec<f64> = train_data.iter().map(|e| e.reward).collect();
            let (p, mse) =
                Predictor::train_on(&PredictorConfig::default(), kind, &inputs, &targets)?;
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
                mkdir(dir)?;
            }
            let weights = out.with_extension("json");
            p.save(&weights)?;
            let onnx = OnnxPredictor::export_and_load(&p, &out)?;
            println!(
                "predictor: train mse {mse:.4} -> {} (ONNX, scored through ONNX Runtime; weights {}); max |candle - ort| on 256 random inputs {:.1e}",
                out.display(),
                weights.display(),
                max_abs_diff(&p, &onnx, 256, 0)?
            );
            print_predictor_eval("training data", &onnx, &train_data, &s)?;
            if let Some(h) = heldout {
                print_predictor_eval("held-out competitions", &onnx, &read_examples(&h)?, &s)?;
            }
        }
        Sub::Train {
            arm,
            seed,
            predictor,
            config,
            steps,
            out,
            common,
        } => {
            let arm = ArArm::from_name(&arm).context("arm must be real, wm or wmrl")?;
            let mut cfg: TrainConfig = match config {
                Some(p) => serde_json::from_str(&std::fs::read_to_string(&p)?)?,
                None => TrainConfig::default(),
            };
            if let Some(n) = steps {
                cfg.steps = n;
            }
            let s = suite(&common)?;
            let pred = if arm == ArArm::Real {
                None
            } else {
                Some(OnnxPredictor::load(&predictor).context(
                    "loading the outcome predictor (`wmrl autoresearch fit-predictor --out <predictor.onnx>` writes one)",
                )?)
            };
            let run = wmrl_autoresearch::RunDir::in_bench(&out, arm.name(), seed);
            let r = train(
                &cfg,
                arm,
                seed,
                &s,
                &executor(&common)?,
                pred.as_ref(),
                Some(&run),
            )?;
            for e in &r.evals {
                println!(
                    "step {:>3}  sandbox cpu {:>8.1}s  held-out position {:.3}  reward {:.3}  valid {:.2}",
                    e.step,
                    e.train_cpu_secs,
                    e.heldout_position,
                    e.heldout_reward,
                    e.valid_fraction
                );
            }
            println!("ledger: {}", serde_json::to_string(&r.ledger)?);
        }
        Sub::Bench {
            seeds,
            per_competition,
            steps,
            anchor_fraction,
            refit_predictor_every,
            out,
            common,
        } => bench(
            seeds,
            per_competition,
            steps,
            anchor_fraction,
            refit_predictor_every,
            &out,
            &common,
        )?,
        Sub::ServeRewards {
            bind,
            arm,
            anchor_fraction,
            predictor,
            seed,
            state,
            max_requests,
            common,
        } => {
            let arm = ArArm::from_name(&arm).context("arm must be real, wm or wmrl")?;
            let pred = if arm == ArArm::Real {
                None
            } else {
                Some(
                    OnnxPredictor::load_kind(&predictor, InputKind::Code).context(
                        "loading the code predictor (`wmrl autoresearch fit-predictor --code --out <file.onnx>` writes one)",
                    )?,
                )
            };
            if let Some(dir) = state.parent().filter(|d| !d.as_os_str().is_empty()) {
                mkdir(dir)?;
            }
            let cfg = RewardConfig {
                arm,
                anchor_fraction,
                seed,
                core: wmrl_autoresearch::train::small_scale_core(),
            };
            let service =
                RewardService::new(suite(&common)?, executor(&common)?, pred, cfg, Some(&state))?;
            crate::cmd::rewards_http::serve(service, &bind, max_requests)?;
        }
    }
    Ok(())
}

fn bench(
    seeds: u64,
    per_competition: usize,
    steps: Option<usize>,
    anchor_fraction: Option<wmrl_core::AnchorFraction>,
    refit_predictor_every: usize,
    out: &Path,
    common: &Common,
) -> anyhow::Result<()> {
    let mut cfg = BenchConfig {
        seeds,
        per_competition,
        ..Default::default()
    };
    if let Some(n) = steps {
        cfg.train.steps = n;
    }
    if let Some(f) = anchor_fraction {
        cfg.train.core.anchors.fraction = f;
    }
    cfg.train.refit_predictor_every = refit_predictor_every;
    let s = suite(common)?;
    let res = run_bench(&cfg, &s, &executor(common)?, out)?;
    print!("{}", res.table());
    println!(
        "wrote {}/bench.json and score_vs_sandbox_cpu.png",
        out.display()
    );
    Ok(())
}
