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
use wmrl_autoresearch::lock::WorkRoot;
use wmrl_autoresearch::onnx_predictor::{OnnxPredictor, max_abs_diff};
use wmrl_autoresearch::predictor::{InputKind, Predictor, PredictorConfig, PredictorCost};
use wmrl_autoresearch::rewards::{RewardConfig, RewardService};
use wmrl_autoresearch::sandbox::repo_root;
use wmrl_autoresearch::{
    Arm, Ladder, Sandbox, SandboxConfig, Split, Suite, TrainConfig, ar_name, train,
};

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
    /// replayed run's CPU seconds are charged again) [default:
    /// runs/autoresearch/exec_cache.jsonl; `run` replays only from a cache
    /// given here]
    #[arg(long, global = true)]
    pub cache: Option<PathBuf>,
    /// Execute every solution even if it ran before.
    #[arg(long, global = true)]
    pub no_cache: bool,
    /// Sandbox wall-clock limit per solution.
    #[arg(long, global = true, default_value_t = 30.0)]
    pub wall_secs: f64,
    /// Where the sandbox's working directories go: a folder of this
    /// process's own under this one, removed when it ends; what killed
    /// processes left there is removed when the next one starts [default:
    /// $TMPDIR/wmrl-work-<uid>]. The sandbox's unprivileged uids must be
    /// able to traverse it.
    #[arg(long, global = true)]
    pub work_root: Option<PathBuf>,
}

/// The replay cache used unless `--no-cache`.
const DEFAULT_CACHE: &str = "runs/autoresearch/exec_cache.jsonl";

impl Common {
    fn cache_path(&self) -> Option<PathBuf> {
        (!self.no_cache).then(|| {
            self.cache
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE))
        })
    }

    /// This process's work root for sandbox runs, after removing what
    /// killed wmrl processes left under the same base.
    fn work_root(&self, label: &str) -> anyhow::Result<WorkRoot> {
        let base = self
            .work_root
            .clone()
            .unwrap_or_else(WorkRoot::default_base);
        let (root, removed) = WorkRoot::claim(&base, label)?;
        if removed > 0 {
            tracing::info!(
                "removed {removed} sandbox work root(s) left under {} by killed wmrl processes",
                base.display()
            );
        }
        Ok(root)
    }
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
        /// The service's settings (TOML: configs/autoresearch_rewards.toml
        /// holds the defaults: arm, seed, [core]; `extends` supported, unknown keys
        /// refused). The flags below apply over it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override any config key: `--set core.anchors.fraction=0.5`
        /// (repeatable; the value is TOML).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// real (execute every group), wm (world model only) or wmrl
        /// [config default: wmrl].
        #[arg(long, value_parser = super::ar_arm_parser())]
        arm: Option<Arm>,
        /// Fraction of all groups executed in the sandbox (wmrl), in (0, 1],
        /// kept over the stream of requests [config default: 0.25].
        #[arg(long)]
        anchor_fraction: Option<wmrl_core::AnchorFraction>,
        /// Code predictor ONNX file (`fit-predictor --code`); wm and wmrl.
        #[arg(long, default_value = "runs/autoresearch/code_predictor.onnx")]
        predictor: PathBuf,
        #[arg(long)]
        seed: Option<u64>,
        /// The loop's state, loaded on start if present and written after
        /// every request; locked (`<state>.lock`) while the service runs.
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
        #[arg(long, default_value = "wmrl", value_parser = super::ar_arm_parser())]
        arm: Arm,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Outcome predictor ONNX file, run through ONNX Runtime (required
        /// for wm and wmrl; see fit-predictor).
        #[arg(long, default_value = "runs/autoresearch/predictor.onnx")]
        predictor: PathBuf,
        /// Run config (TOML: configs/autoresearch_train.toml holds the
        /// defaults; `extends` supported, unknown keys refused), or a run's
        /// recorded config.json.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override any config key: `--set policy.lr=0.01` (repeatable; the
        /// value is TOML).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long)]
        steps: Option<usize>,
        /// Where the solution policy trains: cpu, cuda or auto (recorded as
        /// `device` in the run's config.json; overrides the config's).
        #[arg(long)]
        device: Option<wmrl_run::DeviceChoice>,
        #[arg(long, default_value = "runs/autoresearch")]
        out: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Predictor data, predictor, then every arm over several seeds; prints
    /// score per arm with 95% intervals against training CPU-seconds, every
    /// cost charged (the predictor's data and fit shared over
    /// `predictor_runs` runs), and writes a PNG.
    Bench(BenchArgs),
}

/// `autoresearch bench`'s settings: a config file, `--set`s, then the
/// shorthand flags over them.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Bench config (TOML: configs/autoresearch_bench.toml holds the
    /// defaults; `extends` supported, unknown keys refused), or a bench's
    /// recorded run.toml. The flags below apply over it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override any config key: `--set train.steps=8` (repeatable; the
    /// value is TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Seeds per arm [config default: 3]
    #[arg(long)]
    seeds: Option<u64>,
    /// Random solutions executed per competition for the predictor's
    /// data [config default: 24]
    #[arg(long)]
    per_competition: Option<usize>,
    #[arg(long)]
    steps: Option<usize>,
    /// Fraction of each step's groups the `wmrl` arm executes in the
    /// sandbox (anchors; at least one group a step) [config default: 0.1]
    #[arg(long)]
    anchor_fraction: Option<wmrl_core::AnchorFraction>,
    /// Beyond the paper: the `wmrl` arm refits the predictor on its data
    /// plus the run's anchor executions every N steps (0: never); sets
    /// `train.core.refit.every` [config default: 0]
    #[arg(long)]
    refit_predictor_every: Option<usize>,
    /// Where the learning curve is drawn: `train` (the training
    /// competitions; the held-out ones are read only at the start and
    /// the end) or `heldout` (at every evaluation) [config default: train]
    #[arg(long)]
    curve_on: Option<wmrl_autoresearch::train::CurveOn>,
    #[arg(long, default_value = "runs/autoresearch/bench")]
    out: PathBuf,
    #[command(flatten)]
    common: Common,
}

impl BenchArgs {
    /// The bench's settings: the file (or the defaults) with the `--set`s,
    /// then each flag given.
    fn settings(&self) -> anyhow::Result<BenchConfig> {
        let mut cfg = BenchConfig::load(self.config.as_deref(), &self.set)?;
        if let Some(n) = self.seeds {
            cfg.seeds = n;
        }
        if let Some(n) = self.per_competition {
            cfg.per_competition = n;
        }
        if let Some(n) = self.steps {
            cfg.train.steps = n;
        }
        if let Some(f) = self.anchor_fraction {
            cfg.train.core.anchors.fraction = f;
        }
        if let Some(n) = self.refit_predictor_every {
            cfg.train.core.refit.every = n;
        }
        if let Some(c) = self.curve_on {
            cfg.train.curve_on = c;
        }
        Ok(cfg)
    }
}

fn suite(c: &Common) -> anyhow::Result<Suite> {
    let dir = c.suite.clone().unwrap_or_else(default_suite_dir);
    Suite::load(&dir).with_context(|| format!("loading suite {}", dir.display()))
}

/// The sandbox and grader, running in `work` (the caller keeps it alive
/// while the executor runs).
fn executor(c: &Common, work: &WorkRoot) -> anyhow::Result<Executor> {
    let sb = Sandbox::new(SandboxConfig {
        wall_secs: c.wall_secs,
        work_root: Some(work.path().to_path_buf()),
        ..Default::default()
    })?;
    tracing::info!("sandbox backend: {:?}", sb.backend());
    // Every solution template imports these; without them every execution
    // fails and the run would measure nothing.
    sb.check_python(&["numpy", "pandas", "sklearn"])?;
    let ex = Executor::new(sb, Ladder::default());
    Ok(match c.cache_path() {
        None => ex,
        Some(p) => ex.with_cache(&p)?,
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
        } => run_one(&competition, &solution, data_path, output_path, common)?,
        Sub::Collect {
            split: sp,
            per_competition,
            seed,
            out,
            common,
        } => {
            let s = suite(&common)?;
            let work = common.work_root("collect")?;
            let ex = executor(&common, &work)?;
            let data = collect(&s, &ex, split(&sp)?, per_competition, seed)?;
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
        } => fit_predictor(&data, heldout.as_deref(), &out, code, &common)?,
        Sub::Train {
            arm,
            seed,
            predictor,
            config,
            set,
            steps,
            device,
            out,
            common,
        } => {
            let mut cfg = TrainConfig::load(config.as_deref(), &set)?;
            if let Some(n) = steps {
                cfg.steps = n;
            }
            if let Some(d) = device {
                cfg.device = d;
            }
            train_one(&cfg, arm, seed, &predictor, &out, &common)?;
        }
        Sub::Bench(b) => bench(&b.settings()?, &b.out, &b.common)?,
        Sub::ServeRewards {
            bind,
            config,
            set,
            arm,
            anchor_fraction,
            predictor,
            seed,
            state,
            max_requests,
            common,
        } => {
            let cfg = reward_config(config.as_deref(), &set, arm, anchor_fraction, seed)?;
            serve_rewards(&bind, cfg, &predictor, &state, max_requests, &common)?;
        }
    }
    Ok(())
}

/// The reward service's settings: the file (or the defaults) with `sets`
/// applied, then the flags given.
fn reward_config(
    file: Option<&Path>,
    sets: &[String],
    arm: Option<Arm>,
    anchor_fraction: Option<wmrl_core::AnchorFraction>,
    seed: Option<u64>,
) -> anyhow::Result<RewardConfig> {
    let mut cfg = RewardConfig::load(file, sets)?;
    if let Some(a) = arm {
        cfg.arm = a;
    }
    if let Some(f) = anchor_fraction {
        cfg.core.anchors.fraction = f;
    }
    if let Some(s) = seed {
        cfg.seed = s;
    }
    Ok(cfg)
}

/// `autoresearch run`: one solution in the sandbox, its outcome printed.
fn run_one(
    competition: &str,
    solution: &Path,
    data_path: Option<PathBuf>,
    output_path: Option<PathBuf>,
    common: Common,
) -> anyhow::Result<()> {
    for p in data_path.iter().chain(&output_path) {
        anyhow::ensure!(p.is_absolute(), "{} must be an absolute path", p.display());
    }
    let views = wmrl_autoresearch::PathViews {
        public_at: data_path,
        workdir_at: output_path,
    };
    let s = suite(&common)?;
    let comp = s
        .by_name(competition)
        .with_context(|| format!("no competition {competition}"))?;
    let code = std::fs::read_to_string(solution)?;
    // One solution is run afresh unless a cache is named; the cache
    // is keyed by competition and code, not by the path views.
    let cached = common.cache.is_some() && !common.no_cache;
    if cached && views != wmrl_autoresearch::PathViews::default() {
        bail!(
            "--cache replays by competition and code only, so it cannot be combined with --data-path or --output-path"
        );
    }
    let work = common.work_root("run")?;
    let o = executor(
        &Common {
            no_cache: !cached,
            ..common
        },
        &work,
    )?
    .execute_with(comp, &code, &views)?;
    println!("{}", serde_json::to_string_pretty(&o)?);
    Ok(())
}

/// `autoresearch fit-predictor`: the outcome predictor on the training
/// competitions' examples, exported to ONNX and checked through ONNX Runtime.
fn fit_predictor(
    data: &Path,
    heldout: Option<&Path>,
    out: &Path,
    code: bool,
    common: &Common,
) -> anyhow::Result<()> {
    let s = suite(common)?;
    let train_data = read_examples(data)?;
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
        bail!("--out is the ONNX file (e.g. predictor.onnx); the JSON weights go beside it");
    }
    let kind = if code {
        InputKind::Code
    } else {
        InputKind::Template
    };
    let inputs = example_inputs(kind, &train_data, &s)?;
    let targets: Vec<f64> = train_data.iter().map(|e| e.reward).collect();
    let watch = wmrl_run::clock::Stopwatch::start();
    let (p, mse) = Predictor::train_on(&PredictorConfig::default(), kind, &inputs, &targets)?;
    let cost = PredictorCost {
        rows: train_data.len(),
        data_cpu_secs: train_data.iter().map(|e| e.cpu_secs).sum(),
        fit_cpu_secs: watch.elapsed().1,
    };
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        mkdir(dir)?;
    }
    let weights = out.with_extension("json");
    p.save(&weights)?;
    let cost_file = PredictorCost::path_beside(out);
    cost.save(&cost_file)?;
    let onnx = OnnxPredictor::export_and_load(&p, out)?;
    println!(
        "predictor: train mse {mse:.4} -> {} (ONNX, scored through ONNX Runtime; weights {}); max |candle - ort| on 256 random inputs {:.1e}",
        out.display(),
        weights.display(),
        max_abs_diff(&p, &onnx, 256, 0)?
    );
    println!(
        "predictor cost: data {:.1} sandbox CPU-s over {} rows + fit {:.1} CPU-s -> {} (`autoresearch train` charges it to a wm or wmrl run)",
        cost.data_cpu_secs,
        cost.rows,
        cost.fit_cpu_secs,
        cost_file.display()
    );
    print_predictor_eval("training data", &onnx, &train_data, &s)?;
    if let Some(h) = heldout {
        print_predictor_eval("held-out competitions", &onnx, &read_examples(h)?, &s)?;
    }
    Ok(())
}

/// `autoresearch train`: one arm, one seed, its evaluations printed.
fn train_one(
    cfg: &TrainConfig,
    arm: Arm,
    seed: u64,
    predictor: &Path,
    out: &Path,
    common: &Common,
) -> anyhow::Result<()> {
    let s = suite(common)?;
    let pred = if arm == Arm::Sparse {
        None
    } else {
        Some(OnnxPredictor::load(predictor).context(
            "loading the outcome predictor (`wmrl autoresearch fit-predictor --out <predictor.onnx>` writes one)",
        )?)
    };
    let cfg = &predictor_charged(cfg, arm, predictor)?;
    let run = wmrl_run::RunDir::in_bench(out, ar_name(arm), seed);
    let work = common.work_root("train")?;
    let r = train(
        cfg,
        arm,
        seed,
        &s,
        &executor(common, &work)?,
        pred.as_ref(),
        Some(&run),
    )?;
    for e in &r.evals {
        let mut line = format!("step {:>3}  train cpu {:>8.1}s", e.step, e.train_cpu_secs);
        for (name, sc) in [
            ("training", e.train_competitions),
            ("held-out", e.heldout()),
        ] {
            if let Some(sc) = sc {
                line.push_str(&format!(
                    "  {name} position {:.3} reward {:.3} valid {:.2}",
                    sc.position, sc.reward, sc.valid_fraction
                ));
            }
        }
        println!("{line}");
    }
    println!("ledger: {}", serde_json::to_string(&r.ledger)?);
    Ok(())
}

/// `cfg` with the predictor's up-front cost charged, for an arm that reads
/// it: the whole of the cost file beside `predictor` (what `fit-predictor`
/// wrote), unless the settings give `predictor_charge_cpu_secs`. A
/// predictor without a cost file is charged nothing, and says so.
fn predictor_charged(cfg: &TrainConfig, arm: Arm, predictor: &Path) -> anyhow::Result<TrainConfig> {
    let mut cfg = cfg.clone();
    if arm == Arm::Sparse || cfg.predictor_charge_cpu_secs > 0.0 {
        return Ok(cfg);
    }
    let file = PredictorCost::path_beside(predictor);
    if file.exists() {
        let cost = PredictorCost::load(&file)?;
        cfg.predictor_charge_cpu_secs = cost.total();
        println!(
            "predictor cost charged to this run: {:.1} CPU-s ({})",
            cost.total(),
            file.display()
        );
    } else {
        println!(
            "predictor cost unknown ({} is missing): nothing charged for it; \
             --set predictor_charge_cpu_secs=<CPU-s> charges it",
            file.display()
        );
    }
    Ok(cfg)
}

/// `autoresearch serve-rewards`: the reward service on `bind`.
fn serve_rewards(
    bind: &str,
    cfg: RewardConfig,
    predictor: &Path,
    state: &Path,
    max_requests: u64,
    common: &Common,
) -> anyhow::Result<()> {
    let pred = if cfg.arm == Arm::Sparse {
        None
    } else {
        Some(
            OnnxPredictor::load_kind(predictor, InputKind::Code).context(
                "loading the code predictor (`wmrl autoresearch fit-predictor --code --out <file.onnx>` writes one)",
            )?,
        )
    };
    if let Some(dir) = state.parent().filter(|d| !d.as_os_str().is_empty()) {
        mkdir(dir)?;
    }
    let work = common.work_root("serve-rewards")?;
    let ex = executor(common, &work)?;
    let service = RewardService::new(suite(common)?, ex, pred, cfg, Some(state))?;
    let listener = wmrl_autoresearch::rewards_http::bind(bind)?;
    println!("listening on http://{}", listener.local_addr()?);
    wmrl_autoresearch::rewards_http::serve(service, listener, max_requests)?;
    Ok(())
}

fn bench(cfg: &BenchConfig, out: &Path, common: &Common) -> anyhow::Result<()> {
    let s = suite(common)?;
    let work = common.work_root("bench")?;
    let res = run_bench(cfg, &s, &executor(common, &work)?, out).map_err(|e| {
        let hint = if e.to_string().contains("train.curve_on:") {
            " (this bench drew its curve on the held-out competitions: `--curve-on heldout` resumes it)"
        } else if e.to_string().contains("train.accounting") {
            " (this bench counted sandbox CPU alone; this version charges every cost and does not resume it: use another --out)"
        } else {
            ""
        };
        anyhow::anyhow!("{e}{hint}")
    })?;
    print!("{}", res.table());
    println!(
        "wrote {}/bench.json and score_vs_train_cpu.png",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        sub: Sub,
    }

    #[test]
    fn an_anchor_fraction_outside_0_1_is_refused_at_the_command_line() {
        for bad in ["0", "-0.5", "1.5", "nan"] {
            let arg = format!("--anchor-fraction={bad}");
            let err = Cli::try_parse_from(["wmrl", "serve-rewards", &arg])
                .unwrap_err()
                .to_string();
            assert!(err.contains("(0, 1]"), "{bad}: {err}");
        }
        let cli = Cli::try_parse_from(["wmrl", "serve-rewards", "--anchor-fraction", "1"]).unwrap();
        let Sub::ServeRewards {
            anchor_fraction, ..
        } = cli.sub
        else {
            panic!("parsed another subcommand");
        };
        assert!(anchor_fraction.is_some_and(wmrl_core::AnchorFraction::is_all));
    }

    #[test]
    fn arms_are_named_real_wm_and_wmrl_at_the_command_line() {
        let train_arm = |args: &[&str]| {
            let mut v = vec!["wmrl", "train"];
            v.extend_from_slice(args);
            match Cli::try_parse_from(v).map(|c| c.sub) {
                Ok(Sub::Train { arm, .. }) => Ok(arm),
                Ok(_) => panic!("parsed another subcommand"),
                Err(e) => Err(e.to_string()),
            }
        };
        assert_eq!(train_arm(&[]), Ok(Arm::Wmrl));
        for (name, arm) in [
            ("real", Arm::Sparse),
            ("wm", Arm::DenseRaw),
            ("wmrl", Arm::Wmrl),
        ] {
            assert_eq!(train_arm(&["--arm", name]), Ok(arm));
            let cli = Cli::try_parse_from(["wmrl", "serve-rewards", "--arm", name]).unwrap();
            let Sub::ServeRewards { arm: served, .. } = cli.sub else {
                panic!("parsed another subcommand");
            };
            assert_eq!(served, Some(arm));
        }
        // No flag: the config's arm (the shipped defaults: wmrl).
        let cli = Cli::try_parse_from(["wmrl", "serve-rewards"]).unwrap();
        assert!(matches!(cli.sub, Sub::ServeRewards { arm: None, .. }));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let shipped = root.join("configs/autoresearch_rewards.toml");
        let cfg = reward_config(Some(&shipped), &[], None, None, None).unwrap();
        assert_eq!(cfg, RewardConfig::default());
        assert_eq!(cfg.arm, Arm::Wmrl);
        assert_eq!(cfg.core.anchors.fraction.get(), 0.25);
        // Flags over sets over the file; unknown keys refused.
        let sets = [
            "seed=4".to_string(),
            "core.anchors.fraction=0.5".to_string(),
        ];
        let cfg = reward_config(Some(&shipped), &sets, Some(Arm::Sparse), None, Some(7)).unwrap();
        assert_eq!((cfg.arm, cfg.seed), (Arm::Sparse, 7));
        assert_eq!(cfg.core.anchors.fraction.get(), 0.5);
        let e = reward_config(Some(&shipped), &["core.anchorz=1".into()], None, None, None)
            .unwrap_err();
        assert!(e.to_string().contains("anchorz"), "{e}");
        // Without a file, a --set in [core] keeps the track's small-scale
        // core for the other keys (not the paper-scale defaults).
        let sets = ["core.anchors.fraction=0.5".to_string()];
        let cfg = reward_config(None, &sets, None, None, None).unwrap();
        assert_eq!(cfg.core.anchors.fraction.get(), 0.5);
        assert_eq!(
            cfg.core.calibration,
            RewardConfig::default().core.calibration
        );
        // The core's names for the other two are not the track's.
        for bad in ["sparse", "dense_raw", "mix", "Real"] {
            let err = train_arm(&["--arm", bad]).unwrap_err();
            assert!(
                err.contains(&format!("invalid value '{bad}' for '--arm <ARM>'"))
                    && err.contains("[possible values: real, wm, wmrl]"),
                "{err}"
            );
        }
    }

    #[test]
    fn run_replays_only_from_a_cache_it_is_given() {
        let common = |args: &[&str]| {
            let mut v = vec!["wmrl", "run", "--competition", "iris", "--solution", "s.py"];
            v.extend_from_slice(args);
            match Cli::try_parse_from(v).unwrap().sub {
                Sub::Run { common, .. } => common,
                _ => panic!("parsed another subcommand"),
            }
        };
        assert!(common(&[]).cache.is_none());
        let c = common(&["--cache", "c.jsonl"]);
        assert_eq!(c.cache_path(), Some(PathBuf::from("c.jsonl")));
        assert_eq!(
            common(&["--cache", "c.jsonl", "--no-cache"]).cache_path(),
            None
        );
        // Other subcommands use the default cache when none is named.
        assert_eq!(common(&[]).cache_path(), Some(PathBuf::from(DEFAULT_CACHE)));
    }
}
