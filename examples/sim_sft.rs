//! SFT of a preset on demonstrations, then evaluation on the embedded
//! simulator: the same library calls as `wmrl sft` + `wmrl eval`, in one
//! small binary for tuning the demo count without building the whole CLI.
//!
//! `cargo run --release -p wmrl-examples --example sim_sft -- DEMOS OUT STEPS [MAX_EPISODES] [PRESET] [EVAL_ENVS]`

use std::path::PathBuf;
use std::time::Instant;

use wmrl_policy::candle::{DType, Device};
use wmrl_policy::{
    EvalConfig, Policy, PolicyConfig, PolicySft, SftConfig, SftDataset, evaluate, train_sft,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let demos = PathBuf::from(
        a.get(1)
            .ok_or("usage: DEMOS OUT STEPS [MAX_EPISODES] [PRESET] [EVAL_ENVS]")?,
    );
    let out = PathBuf::from(a.get(2).ok_or("OUT")?);
    let steps: usize = a.get(3).ok_or("STEPS")?.parse()?;
    let max_eps: Option<usize> = a.get(4).map(|s| s.parse()).transpose()?.filter(|&n| n > 0);
    let preset = a.get(5).map(String::as_str).unwrap_or("tiny");
    let n_envs: usize = a.get(6).map(|s| s.parse()).transpose()?.unwrap_or(34);
    let mut cfg = PolicyConfig::preset(preset)?;
    // Tuning overrides: WRIST=1, IMG=96, PATCH=16, VLAYERS=2, LAYERS=4.
    let env_usize = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    if let Some(w) = env_usize("WRIST") {
        cfg.use_wrist = w != 0;
    }
    if let Some(v) = env_usize("IMG") {
        cfg.image_size = v;
    }
    if let Some(v) = env_usize("PATCH") {
        cfg.patch_size = v;
    }
    if let Some(v) = env_usize("VLAYERS") {
        cfg.vision_layers = v;
    }
    if let Some(v) = env_usize("LAYERS") {
        cfg.n_layers = v;
    }
    let first =
        wmrl_env::read_episode(wmrl_env::list_episodes(&demos)?.first().ok_or("no demos")?)?;
    cfg.proprio_dim = first.steps[0].proprio.len();
    let t0 = Instant::now();
    let data = SftDataset::from_dir(&cfg, &demos, max_eps, false)?;
    println!(
        "loaded {} episodes, {} samples in {:.1}s",
        data.n_episodes,
        data.len(),
        t0.elapsed().as_secs_f64()
    );
    let (m, s) = data.proprio_stats(cfg.proprio_dim);
    cfg.proprio_mean = m;
    cfg.proprio_std = s;
    let policy = Policy::new(cfg, &Device::Cpu, DType::F32)?;
    let mut scfg = SftConfig {
        steps,
        ..SftConfig::default()
    };
    scfg.optim.total_steps = steps;
    if let Some(v) = std::env::var("LR").ok().and_then(|v| v.parse::<f64>().ok()) {
        scfg.optim.lr = v;
    }
    if let Some(v) = env_usize("BS") {
        scfg.batch_size = v;
    }
    if steps > 0 {
        let rep = train_sft(
            &PolicySft {
                policy: &policy,
                data: &data,
            },
            &scfg,
            &out,
            true,
            true,
        )?;
        println!("{}", serde_json::to_string(&rep)?);
    }
    let policy = Policy::load(&out)?;
    let states: Vec<usize> = match std::env::var("EVAL_STATES").ok().and_then(|s| {
        let (a, b) = s.split_once('-')?;
        Some((a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?).collect())
    }) {
        Some(v) => v,
        None => (16..50).collect(),
    };
    let mut env = wmrl_sim::make_vec_env(&wmrl_sim::SimConfig::default(), n_envs, None)?;
    let ecfg = EvalConfig {
        init_states: states,
        execute_steps: std::env::var("EXEC")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        gif_dir: Some(out.join("eval/gifs")),
        ..EvalConfig::default()
    };
    let report = evaluate(&policy, &mut env, &ecfg)?;
    std::fs::create_dir_all(out.join("eval"))?;
    report.write_json(&out.join("eval/eval.json"))?;
    print!("{}", report.table());
    let prog: Vec<String> = report
        .per_task
        .iter()
        .map(|t| format!("{:.2}", t.mean_progress.unwrap_or(f64::NAN)))
        .collect();
    println!("mean final progress per task: {}", prog.join(" "));
    println!(
        "eval: {} policy calls, {} env steps, {:.1}s",
        report.policy_calls, report.env_steps, report.wall_secs
    );
    Ok(())
}
