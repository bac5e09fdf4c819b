//! `wmrl wm`: the progress world model. `train` (candle, on episodes with
//! oracle progress), `export` (real .onnx + parity fixture), `report`
//! (Spearman, AUROC, calibration PNG on held-out rollouts, through ONNX
//! Runtime), `bench` (frames/s through ort and Python onnxruntime, same run).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use wmrl_worldmodel::train::{self, ONNX_FILE, SplitRecord, TrainConfig};
use wmrl_worldmodel::{
    ScoreMode, WorldModel, WorldModelConfig, export_onnx, metrics, parity, quality,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: WmCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum WmCommand {
    /// Train the progress model on episodes (expert + noisy), holding some out.
    Train(TrainArgs),
    /// Write model.onnx (opset 17) and parity.json from trained weights.
    Export(ExportArgs),
    /// Quality on held-out rollouts: Spearman, AUROC, calibration PNG.
    Report(ReportArgs),
    /// Frames scored per second through ort and Python onnxruntime.
    Bench(BenchArgs),
}

#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// Directory of episodes (`wmrl demos`, with and without `--noise`).
    #[arg(long)]
    pub rollouts: PathBuf,
    /// Output model directory.
    #[arg(long, default_value = "models/progress-tiny")]
    pub out: PathBuf,
    /// Training settings: TOML through the loader every command uses
    /// (`extends`, unknown keys refused; fields not given keep their
    /// defaults), or a model's recorded run.toml (or an older wmrl's
    /// train_config.json).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override any setting: `--set net.hidden=32` (repeatable; TOML value).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    #[arg(long)]
    pub steps: Option<usize>,
    #[arg(long)]
    pub batch_size: Option<usize>,
    #[arg(long)]
    pub lr: Option<f64>,
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long)]
    pub val_fraction: Option<f64>,
    /// Where the network trains: cpu, cuda (candle's CUDA backend, a build
    /// with `--features cuda`; the CPU with a warning otherwise) or auto.
    /// Recorded as `device` in the model's run.toml; overrides the config's.
    #[arg(long)]
    pub device: Option<wmrl_run::DeviceChoice>,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Model directory written by `wmrl wm train`.
    #[arg(long, default_value = "models/progress-tiny")]
    pub model: PathBuf,
    /// Output file (default: <model>/model.onnx; parity.json goes beside it).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Model directory (uses its held-out split) or an .onnx file.
    #[arg(long, default_value = "models/progress-tiny")]
    pub model: PathBuf,
    /// Episode directory.
    #[arg(long)]
    pub rollouts: PathBuf,
    /// Score all episodes in `--rollouts`, not only the held-out ones.
    #[arg(long)]
    pub all: bool,
    /// potential, final, max or success.
    #[arg(long, default_value = "potential")]
    pub mode: ScoreMode,
    #[arg(long, default_value_t = 10)]
    pub bins: usize,
    #[arg(long, default_value_t = 0)]
    pub camera: usize,
    /// Where report.json and calibration.png go (default: the model directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Model directory or .onnx file.
    #[arg(long, default_value = "models/progress-tiny")]
    pub model: PathBuf,
    #[arg(long, default_value = "1,8,64", value_delimiter = ',')]
    pub batches: Vec<usize>,
    /// Seconds of timed calls per batch size and runtime.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Intra-op threads for both runtimes (0: each runtime's default).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Skip the Python onnxruntime side.
    #[arg(long)]
    pub no_python: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        WmCommand::Train(a) => run_train(a),
        WmCommand::Export(a) => run_export(a),
        WmCommand::Report(a) => run_report(a),
        WmCommand::Bench(a) => run_bench(a),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("?")
        .to_string()
}

fn run_train(a: TrainArgs) -> anyhow::Result<()> {
    let mut cfg: TrainConfig = wmrl_run::load_over_defaults(a.config.as_deref(), &a.set)?;
    if let Some(v) = a.steps {
        cfg.steps = v;
    }
    if let Some(v) = a.batch_size {
        cfg.batch_size = v;
    }
    if let Some(v) = a.lr {
        cfg.lr = v;
    }
    if let Some(v) = a.seed {
        cfg.seed = v;
    }
    if let Some(v) = a.val_fraction {
        cfg.val_fraction = v;
    }
    if let Some(d) = a.device {
        cfg.device = d;
    }
    let device = wmrl_device::candle_device(cfg.device, "the progress network");
    let t0 = Instant::now();
    let eps = train::load_dir(&a.rollouts, &cfg)?;
    let n_success = eps.iter().filter(|e| e.success).count();
    tracing::info!(
        episodes = eps.len(),
        n_success,
        secs = t0.elapsed().as_secs_f32(),
        "episodes loaded"
    );
    let (tr, va) = train::split(eps, cfg.val_fraction, cfg.seed);
    let t1 = Instant::now();
    let bar = wmrl_run::Progress::new("world model", cfg.steps as u64, "steps", true);
    let trained = train::train(&tr, &va, &cfg, &device, &mut |step, loss| {
        bar.set_position(step as u64);
        bar.set_message(format!("loss {loss:.4}"));
    })?;
    bar.finish();
    let split = SplitRecord {
        train: tr.iter().map(|e| file_name(&e.path)).collect(),
        validation: va.iter().map(|e| file_name(&e.path)).collect(),
        history: trained.history.clone(),
    };
    train::save(&a.out, &trained, &split)?;
    let last = trained.history.last();
    println!(
        "trained on {} episodes ({} held out) in {:.0} s; final train loss {:.4}, val loss {:?}, val progress MAE {:?}",
        tr.len(),
        va.len(),
        t1.elapsed().as_secs_f32(),
        last.map(|r| r.train_loss).unwrap_or(f32::NAN),
        last.and_then(|r| r.val_loss),
        last.and_then(|r| r.val_progress_mae),
    );
    println!(
        "saved to {}; next: wmrl wm export --model {}",
        a.out.display(),
        a.out.display()
    );
    Ok(())
}

fn run_export(a: ExportArgs) -> anyhow::Result<()> {
    let (net, varmap, cfg) = train::load(&a.model)?;
    let out = a.out.unwrap_or_else(|| a.model.join(ONNX_FILE));
    let split = train::load_split(&a.model).unwrap_or_default();
    let meta = vec![
        ("wmrl.train_steps".to_string(), cfg.steps.to_string()),
        ("wmrl.train_seed".to_string(), cfg.seed.to_string()),
        (
            "wmrl.train_episodes".to_string(),
            split.train.len().to_string(),
        ),
        (
            "wmrl.val_episodes".to_string(),
            split.validation.len().to_string(),
        ),
    ];
    export_onnx(&cfg.net, &varmap, &out, &meta)?;
    let fx = parity::fixture(&net, 2)?;
    let fx_path = out.with_file_name("parity.json");
    std::fs::write(&fx_path, serde_json::to_string(&fx)?)?;
    let size = std::fs::metadata(&out)?.len();
    println!(
        "wrote {} ({:.1} KiB) and {}",
        out.display(),
        size as f64 / 1024.0,
        fx_path.display()
    );
    // Check the file through ONNX Runtime right away when it is available.
    if wmrl_onnx::runtime_available() {
        let mut wm = WorldModel::load(&out)?;
        let (frames, tokens, _) = parity::inputs(&cfg.net, 2);
        let (p, s) = wm.run_raw(&frames, &tokens, 2, (cfg.net.height, cfg.net.width))?;
        let diff = p
            .iter()
            .zip(&fx.progress)
            .chain(s.iter().zip(&fx.success))
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        println!("ort vs candle max |diff| = {diff:.2e}");
        if diff > 1e-4 {
            bail!("exported model disagrees with candle by {diff}");
        }
    }
    Ok(())
}

fn model_file(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.join(ONNX_FILE)
    } else {
        p.to_path_buf()
    }
}

fn run_report(a: ReportArgs) -> anyhow::Result<()> {
    let onnx = model_file(&a.model);
    let mut wm = WorldModel::load(&onnx)?;
    let all = wmrl_env::list_episodes(&a.rollouts)?;
    let paths: Vec<PathBuf> = match (a.model.is_dir() && !a.all, train::load_split(&a.model)) {
        (true, Ok(split)) if !split.validation.is_empty() => {
            let held: std::collections::HashSet<&String> = split.validation.iter().collect();
            all.into_iter()
                .filter(|p| held.contains(&file_name(p)))
                .collect()
        }
        _ => all,
    };
    if paths.is_empty() {
        bail!("no episodes to score in {}", a.rollouts.display());
    }
    let t0 = Instant::now();
    let rep = quality::evaluate_paths(&mut wm, &paths, a.camera, a.mode, a.bins)?;
    let out = a.out.unwrap_or_else(|| {
        if a.model.is_dir() {
            a.model.clone()
        } else {
            PathBuf::from(".")
        }
    });
    std::fs::create_dir_all(&out)?;
    let png = out.join("calibration.png");
    metrics::plot_calibration(
        &png,
        &rep.calibration,
        &format!(
            "{:?} score vs real success ({} held-out rollouts)",
            rep.mode, rep.n_rollouts
        ),
    )?;
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&rep)?)?;
    let f = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.3}"));
    println!(
        "model {} on {} rollouts ({} successes), {:.1} s",
        onnx.display(),
        rep.n_rollouts,
        rep.n_success,
        t0.elapsed().as_secs_f32()
    );
    println!(
        "  Spearman per frame (pred vs oracle progress): {}",
        f(rep.spearman_per_frame)
    );
    println!(
        "  Spearman last frame across rollouts:          {}",
        f(rep.spearman_final)
    );
    println!(
        "  success AUROC, {:?} score:                 {}",
        rep.mode,
        f(rep.auroc_score)
    );
    println!(
        "  success AUROC, success head (last frame):     {}",
        f(rep.auroc_success_head)
    );
    println!(
        "  mean score success / failure: {:?} / {:?}",
        rep.mean_score_success, rep.mean_score_failure
    );
    println!("  calibration (score bin mean -> success rate, n):");
    for b in &rep.calibration {
        println!(
            "    {:+.3} -> {:.2} ({})",
            b.mean_score, b.success_rate, b.count
        );
    }
    println!(
        "wrote {} and {}",
        out.join("report.json").display(),
        png.display()
    );
    Ok(())
}

fn run_bench(a: BenchArgs) -> anyhow::Result<()> {
    let onnx = model_file(&a.model);
    let cfg = WorldModelConfig {
        intra_threads: (a.threads > 0).then_some(a.threads),
        ..Default::default()
    };
    let mut wm = WorldModel::load_with(&onnx, cfg)?;
    let shape = wm.shape();
    let (t, l) = (shape.num_frames, shape.instruction_len);
    let (h, w) = shape
        .frame_hw
        .context("the model does not fix its frame size")?;
    let mut rust = Vec::new();
    for &b in &a.batches {
        let mut state = 0x1234_5678u64;
        let frames: Vec<f32> = (0..b * t * 3 * h * w)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect();
        let tokens: Vec<i64> = (0..b * l).map(|i| (i % 256) as i64 + 1).collect();
        wm.run_raw(&frames, &tokens, b, (h, w))?; // warm-up
        let (mut n, start) = (0usize, Instant::now());
        loop {
            wm.run_raw(&frames, &tokens, b, (h, w))?;
            n += 1;
            if start.elapsed().as_secs_f64() >= a.seconds && n >= 3 {
                break;
            }
        }
        rust.push((b, (n * b * t) as f64 / start.elapsed().as_secs_f64()));
    }
    let py: Option<serde_json::Value> = if a.no_python {
        None
    } else {
        let script = wmrl_worldmodel::python_script("bench.py");
        let batches = a
            .batches
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg(&onnx)
            .args([
                "--batches",
                &batches,
                "--seconds",
                &a.seconds.to_string(),
                "--threads",
                &a.threads.to_string(),
            ])
            .env("PYTHONPATH", wmrl_onnx::runtime::python_path())
            .output()
            .context("running python3 for the onnxruntime side (run scripts/setup)")?;
        if !out.status.success() {
            bail!(
                "{} failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(serde_json::from_slice(&out.stdout)?)
    };
    println!(
        "model {} (T={t}, {h}x{w}), frames scored per second:",
        onnx.display()
    );
    println!(
        "{:>6} {:>14} {:>14} {:>12}",
        "batch", "ort (Rust)", "onnxruntime", "py/rust time"
    );
    for (b, fps) in rust {
        let pf = py
            .as_ref()
            .and_then(|v| v.get(b.to_string()))
            .and_then(|v| v.as_f64());
        // ratio of Rust time to Python time for the same work (<= 1.1 is the target)
        let ratio = pf.map_or("n/a".into(), |p| format!("{:.3}", p / fps));
        let pf = pf.map_or("n/a".into(), |p| format!("{p:.0}"));
        println!("{b:>6} {fps:>14.0} {pf:>14} {ratio:>12}");
    }
    Ok(())
}
