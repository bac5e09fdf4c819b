use std::path::PathBuf;
use std::process::Child;

use anyhow::Context;
use wmrl_run::RunDir;
use wmrl_run::bench::{BenchJob, BenchProgress, fan_out};
use wmrl_train::bench::{BenchArm, parse_arms, start_dir, write_report};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Base run config (TOML) every arm shares.
    #[arg(long)]
    pub config: PathBuf,
    /// `all`, `none`, or a comma list of arms (sparse, sparse_scarce,
    /// dense_raw, mix, debias, denoise, wmrl, sparse_shuffled).
    #[arg(long, default_value = "all")]
    pub arms: String,
    /// An extra bench arm with its own overrides, `NAME:ARM:KEY=VALUE,...`
    /// (repeatable), e.g. `wmrl_mix:wmrl:wmrl.anchors.fraction=1.0,wmrl.anchor_reward=mix`.
    /// Its runs go to OUT/NAME/seed<k>.
    #[arg(long = "variant", value_name = "NAME:ARM:KEY=VALUE,...")]
    pub variants: Vec<String>,
    /// Seeds 0..N per arm.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Bench directory (runs go to OUT/<arm>/seed<k>).
    #[arg(long, default_value = "runs/bench")]
    pub out: PathBuf,
    /// Runs in parallel (each is a separate `wmrl train` process).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Override the anchor fraction for every arm (1.0: free labels).
    #[arg(long)]
    pub anchor_fraction: Option<wmrl_core::AnchorFraction>,
    /// Override training steps.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Override the SFT checkpoint.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Override the world model file.
    #[arg(long)]
    pub world_model: Option<PathBuf>,
    /// Override any config key for every run: `--set section.key=value`
    /// (repeatable; TOML values).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// A confirmatory comparison decided before the runs,
    /// `A-B:mean>=X,low>Y` in percentage points on the primary measure
    /// (repeatable): report.md judges each at 95% and at the family's
    /// Bonferroni level once every seed has finished, e.g.
    /// `--confirm 'wmrl_mix-sparse:mean>=3,low>0'` (quoted: `>` is the shell's redirection).
    #[arg(long = "confirm", value_name = "A-B:CRITERIA")]
    pub confirms: Vec<wmrl_train::confirm::Confirm>,
    /// An exploratory comparison `A-B` (repeatable): report.md's table of
    /// paired differences gains the row `A - B` with its 95% interval,
    /// beside the pairs it always shows (every arm against `sparse`, scarce
    /// world-model arms against `sparse_scarce`, world-model arms against
    /// `dense_raw`), e.g. `--compare wmrl_b_coevo-wmrl_b`.
    #[arg(long = "compare", value_name = "A-B")]
    pub compares: Vec<wmrl_train::confirm::Compare>,
    /// The arm whose final success the others are measured against in
    /// labels: report.md gains "Labels to reach ARM's final success" (the
    /// real labels each other arm's validation curve needed to reach the
    /// final curve value of ARM's run of the same seed), e.g.
    /// `--labels-reference sparse_full`.
    #[arg(long, value_name = "ARM")]
    pub labels_reference: Option<String>,
    /// Start no run: write report.md from the runs that have finished
    /// (unfinished seeds count as planned but missing, so a confirmatory
    /// comparison stays incomplete).
    #[arg(long)]
    pub report_only: bool,
    /// Title of report.md.
    #[arg(long, default_value = "wmrl bench")]
    pub title: String,
    /// `--device` of every run (`cpu`, `cuda`, `auto`; see `wmrl train`).
    #[arg(long, default_value = "cpu")]
    pub device: wmrl_run::DeviceChoice,
}

/// The config of one bench run, resolved once here: the file with the
/// bench's and the arm's `--set`s, the arm, the seed and every flag applied,
/// then validated. For a fresh run the parent writes it into the run
/// directory and the child reads only that; a resumed run must still match
/// it (its run.toml and checkpoint are the run's). `arm = None` is the
/// bench's single zero-step evaluation of the shared start.
fn resolved(
    args: &Args,
    arm: Option<&BenchArm>,
    seed: u64,
) -> anyhow::Result<wmrl_train::TrainConfig> {
    let sets = [
        args.set.clone(),
        arm.map(|a| a.set.clone()).unwrap_or_default(),
    ]
    .concat();
    let mut c = wmrl_train::TrainConfig::parse_with(&args.config, &sets)?;
    c.arm = arm.map_or(wmrl_core::Arm::Sparse, |a| a.arm);
    c.seed = seed;
    super::train::Flags {
        steps: args.steps,
        anchor_fraction: args.anchor_fraction,
        policy: args.policy.as_ref(),
        world_model: args.world_model.as_ref(),
    }
    .apply(&mut c);
    c.device = args.device;
    if arm.is_none() {
        c.steps = 0;
    } else {
        // The start is evaluated once, by the start run.
        c.eval.at_start = false;
    }
    c.validate()?;
    Ok(c)
}

/// The run directory and log name of a bench run.
fn place(args: &Args, arm: Option<&BenchArm>, seed: u64) -> (RunDir, String) {
    match arm {
        Some(a) => (
            RunDir::in_bench(&args.out, &a.name, seed),
            format!("{}-seed{seed}", a.name),
        ),
        None => (start_dir(&args.out), "start".to_string()),
    }
}

/// One bench run to do: fresh (with the config the parent writes) or a
/// resumption of an interrupted one (its directory holds its config).
struct Job<'a> {
    arm: Option<&'a BenchArm>,
    seed: u64,
    fresh: Option<wmrl_train::TrainConfig>,
    /// Training steps the run takes in all (0 for the start run).
    steps: u64,
}

/// Resolve a run's job, refusing to resume a run whose run.toml no
/// longer matches what this bench's file and flags resolve to.
fn job<'a>(args: &Args, arm: Option<&'a BenchArm>, seed: u64) -> anyhow::Result<Job<'a>> {
    let cfg = resolved(args, arm, seed)?;
    let (run, _) = place(args, arm, seed);
    if !run.state().exists() {
        return Ok(Job {
            arm,
            seed,
            steps: cfg.steps as u64,
            fresh: Some(cfg),
        });
    }
    // A run resumes on this bench's --device (`TrainConfig`'s
    // `RunSettings::MAY_CHANGE`); everything else must be what it was.
    let had = run.against_recorded(&cfg)?.with_context(|| {
        format!(
            "{}: a checkpoint without recorded settings (run.toml)",
            run.dir.display()
        )
    })?;
    if let Some(d) = had.differs {
        anyhow::bail!(
            "{} was started with other settings than this bench now gives it ({} against now: {d}); rerun with the bench's original file and flags, or another --out",
            run.dir.display(),
            had.path.display()
        );
    }
    Ok(Job {
        arm,
        seed,
        fresh: None,
        steps: had.recorded.steps as u64,
    })
}

/// Start one `wmrl train` child for `job`.
fn spawn(args: &Args, job: &Job) -> anyhow::Result<Child> {
    let (run, name) = place(args, job.arm, job.seed);
    let dir = &run.dir;
    let mut cmd = super::child_command()?;
    cmd.arg("train")
        .arg("--quiet")
        .arg("--device")
        .arg(args.device.to_string());
    match &job.fresh {
        None => {
            cmd.arg("--resume").arg(dir);
        }
        Some(cfg) => {
            if dir.exists() {
                std::fs::remove_dir_all(dir)
                    .with_context(|| format!("clearing {}", dir.display()))?;
            }
            std::fs::create_dir_all(dir)?;
            run.write_settings(&run.recorded(cfg)?)?;
            cmd.arg("--config")
                .arg(run.settings())
                .arg("--out")
                .arg(dir);
        }
    }
    std::fs::create_dir_all(&args.out)?;
    let log = std::fs::File::create(args.out.join(format!("{name}.log")))?;
    cmd.stdout(log.try_clone()?).stderr(log);
    // Two runs share two cores: one compute thread each.
    cmd.env("RAYON_NUM_THREADS", "1");
    Ok(cmd.spawn()?)
}

/// The bench's arms: `--arms` then `--variant`s, names unique.
pub fn bench_arms(arms: &str, variants: &[String]) -> anyhow::Result<Vec<BenchArm>> {
    let mut out = parse_arms(arms)?;
    for v in variants {
        out.push(BenchArm::parse_variant(v)?);
    }
    for (i, a) in out.iter().enumerate() {
        anyhow::ensure!(
            !out[..i].iter().any(|b| b.name == a.name),
            "bench arm `{}` is named twice",
            a.name
        );
    }
    anyhow::ensure!(!out.is_empty(), "no arms: give --arms or --variant");
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let arms = bench_arms(&args.arms, &args.variants)?;
    let seeds: Vec<u64> = (0..args.seeds).collect();
    // A confirmatory comparison must name two of the bench's arms: said
    // before any run, not in the report at the end.
    let names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
    for c in &args.confirms {
        c.arms(&names)?;
    }
    for c in &args.compares {
        c.arms(&names)?;
    }
    if let Some(r) = &args.labels_reference {
        anyhow::ensure!(
            names.contains(&r.as_str()),
            "--labels-reference {r}: not one of this bench's arms ({})",
            names.join(", ")
        );
    }
    let failed = if args.report_only {
        Vec::new()
    } else {
        let todo = plan(&args, &arms, &seeds)?;
        execute(&args, todo)?
    };
    let table = write_report(
        &args.out,
        &arms,
        &seeds,
        &args.title,
        &args.confirms,
        &args.compares,
        args.labels_reference.as_deref(),
    )?;
    println!("{table}");
    println!("report: {}", args.out.join("report.md").display());
    anyhow::ensure!(failed.is_empty(), "runs failed: {}", failed.join(", "));
    Ok(())
}

/// Every run still to do, seed-major, its config resolved (and a resumed
/// run's checked against it) before any work starts: a bad override fails
/// here, once; a machine without ONNX Runtime is told so here when an arm
/// needs it.
fn plan<'a>(args: &Args, arms: &'a [BenchArm], seeds: &[u64]) -> anyhow::Result<Vec<Job<'a>>> {
    let mut todo: Vec<Job> = Vec::new();
    if !start_dir(&args.out).summary().exists() {
        todo.push(job(args, None, 0).context("the start run")?);
    }
    let names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
    for slot in fan_out(&args.out, &names, seeds) {
        if !slot.finished() {
            let (arm, s) = (&arms[slot.arm], slot.seed);
            todo.push(
                job(args, Some(arm), s)
                    .with_context(|| format!("bench arm `{}` seed {s}", arm.name))?,
            );
        }
    }
    // Runs that read the world model need ONNX Runtime: a machine without
    // it is told so here, before any run starts and fails on its own.
    if todo
        .iter()
        .any(|j| j.arm.is_some_and(|a| a.arm.uses_world_model()))
    {
        wmrl_onnx::runtime::environment().context(
            "arms of this bench score rollouts with the world model through ONNX Runtime \
             (scripts/setup onnxruntime installs it)",
        )?;
    }
    Ok(todo)
}

/// What progress counts of `job`.
fn progress_job(args: &Args, job: &Job) -> BenchJob {
    let (run, name) = place(args, job.arm, job.seed);
    BenchJob {
        name,
        run,
        steps: job.steps,
        resumed: job.fresh.is_none(),
    }
}

/// Run `todo` with `--jobs` children at a time, showing progress in
/// training steps; returns the runs that failed (the others go on).
fn execute(args: &Args, todo: Vec<Job<'_>>) -> anyhow::Result<Vec<String>> {
    let jobs: Vec<BenchJob> = todo.iter().map(|j| progress_job(args, j)).collect();
    let progress = BenchProgress::new("bench", &jobs, true);
    let mut running: Vec<(BenchJob, Child)> = Vec::new();
    let mut failed = Vec::new();
    let mut queue = todo.iter().zip(jobs);
    loop {
        while running.len() < args.jobs.max(1) {
            let Some((j, p)) = queue.next() else { break };
            // A run that cannot start is a failed run; the others go on
            // (and are waited for).
            match spawn(args, j) {
                Ok(child) => {
                    progress.started(&p);
                    running.push((p, child));
                }
                Err(e) => {
                    failed.push(format!("{} (could not start: {e:#})", p.name));
                    progress.ended(&p);
                }
            }
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut i = 0;
        while i < running.len() {
            if let Some(status) = running[i].1.try_wait()? {
                let (p, _) = running.remove(i);
                progress.ended(&p);
                if !status.success() {
                    failed.push(format!(
                        "{} (see {}/{}.log)",
                        p.name,
                        args.out.display(),
                        p.name
                    ));
                }
            } else {
                i += 1;
            }
        }
    }
    progress.finish();
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(extra: &[&str]) -> Result<Args, clap::Error> {
        let config = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../configs/bench_one_task.toml"
        );
        let mut argv = vec!["bench", "--config", config];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn confirmatory_comparisons_parse_and_must_name_the_benchs_arms() {
        let a = args(&[
            "--arms",
            "sparse,dense_raw",
            "--confirm",
            "dense_raw-sparse:low>0",
            "--confirm",
            "dense_raw-sparse:mean>=3",
        ])
        .expect("parse");
        assert_eq!(a.confirms.len(), 2);
        assert!(args(&["--confirm", "dense_raw-sparse:above0"]).is_err());
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("bench");
        let mut bad = args(&["--arms", "sparse", "--confirm", "wmrl-sparse:low>0"]).expect("parse");
        bad.out = out.clone();
        let err = run(bad).expect_err("wmrl is not an arm of this bench");
        assert!(
            err.to_string().contains("not two of the bench's arms"),
            "{err}"
        );
        assert!(!out.exists(), "refused before anything was written");
    }

    #[test]
    fn each_run_gets_one_resolved_config_that_reads_back_the_same() {
        let a = args(&[
            "--set",
            "rollout.n_groups=4",
            "--variant",
            "wmrl_mix:wmrl:wmrl.anchors.fraction=1.0,wmrl.anchor_reward=mix",
            "--steps",
            "3",
        ])
        .expect("parse");
        let arms = bench_arms(&a.arms, &a.variants).expect("arms");
        let mix = arms.iter().find(|b| b.name == "wmrl_mix").expect("variant");
        let c = resolved(&a, Some(mix), 4).expect("resolve");
        assert_eq!((c.arm, c.seed, c.steps), (wmrl_core::Arm::Wmrl, 4, 3));
        assert!(c.wmrl.anchors.fraction.is_all());
        assert_eq!(c.wmrl.anchor_reward, wmrl_core::AnchorReward::Mix);
        assert_eq!(c.rollout.n_groups, 4, "the bench's --set");
        assert!(!c.eval.at_start, "arms do not evaluate the start again");
        let start = resolved(&a, None, 0).expect("start");
        assert_eq!((start.steps, start.eval.at_start), (0, true));
        // What the parent writes is what the child reads.
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("run.toml");
        std::fs::write(&p, c.to_toml().expect("toml")).expect("write");
        assert_eq!(wmrl_train::TrainConfig::load(&p).expect("read back"), c);
    }

    #[test]
    fn a_resumed_run_must_match_what_the_bench_now_resolves() {
        let tmp = tempfile::tempdir().expect("tmp");
        let out = tmp.path().to_str().expect("utf-8").to_string();
        let a = args(&["--out", &out]).expect("parse");
        let arms = bench_arms("sparse", &[]).expect("arms");
        let (run, _) = place(&a, Some(&arms[0]), 1);
        std::fs::create_dir_all(run.checkpoint()).expect("dirs");
        std::fs::write(run.state(), "{}").expect("state");
        let cfg = resolved(&a, Some(&arms[0]), 1).expect("resolve");
        std::fs::write(run.settings(), cfg.to_toml().expect("toml")).expect("config");
        let j = job(&a, Some(&arms[0]), 1).expect("same settings resume");
        assert!(
            j.fresh.is_none(),
            "an interrupted run is resumed, not restarted"
        );
        // A run an older wmrl started (config.toml, layout 0: no `format`)
        // resumes the same.
        let old = cfg.to_toml().expect("toml").replacen("format = 1\n", "", 1);
        std::fs::remove_file(run.settings()).expect("rm");
        std::fs::write(run.dir.join("config.toml"), old).expect("config");
        let j = job(&a, Some(&arms[0]), 1).expect("an older run's settings resume");
        assert!(j.fresh.is_none());
        std::fs::remove_file(run.dir.join("config.toml")).expect("rm");
        std::fs::write(run.settings(), cfg.to_toml().expect("toml")).expect("config");
        let b = args(&["--out", &out, "--set", "rollout.n_groups=4"]).expect("parse");
        let Err(err) = job(&b, Some(&arms[0]), 1) else {
            panic!("other settings than the run's are refused");
        };
        assert!(format!("{err:#}").contains("rollout.n_groups"), "{err:#}");
        // A fresh run carries the config the parent will write.
        assert!(job(&a, Some(&arms[0]), 2).expect("fresh").fresh.is_some());
    }

    #[test]
    fn bad_overrides_fail_before_any_run() {
        let Err(err) = args(&["--anchor-fraction", "1.5"]) else {
            panic!("a fraction above 1 is refused");
        };
        assert!(err.to_string().contains("anchors.fraction"), "{err}");
        let a = args(&["--set", "rollout.group_size=1"]).expect("parse");
        let arms = bench_arms("sparse", &[]).expect("arms");
        assert!(resolved(&a, Some(&arms[0]), 0).is_err());
    }
}
