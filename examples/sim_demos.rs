//! Stand-in demo writer until `wmrl demos` lands: runs the embedded
//! simulator's scripted expert (with optional action noise) on the training
//! initial states and writes episodes with `wmrl_env::write_episode`.
//!
//! `cargo run --release -p wmrl-examples --example sim_demos -- OUT PER_TASK [NOISE] [INIT_STATES]`
//! e.g. `... /tmp/demos 16 0.1 16` writes 16 episodes per task from init
//! states 0..16 (cycling when PER_TASK > INIT_STATES).

use std::path::PathBuf;

use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use wmrl_env::{Environment, Episode, EpisodeStep, ResetRequest};
use wmrl_sim::{SimConfig, TabletopEnv};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let out = PathBuf::from(
        args.get(1)
            .ok_or("usage: sim_demos OUT PER_TASK [NOISE] [INIT_STATES]")?,
    );
    let per_task: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(16);
    let noise: f32 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(0.0);
    let n_init: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(16);
    let jobs: Vec<(usize, usize, usize)> = (0..10)
        .flat_map(|task| (0..per_task).map(move |k| (task, k % n_init, k)))
        .collect();
    let results: Vec<Result<(usize, bool, usize), String>> = jobs
        .par_iter()
        .enumerate()
        .map(|(index, &(task, init_state, k))| {
            let mut env = TabletopEnv::new(SimConfig::default()).map_err(|e| e.to_string())?;
            let seed = (task * 1000 + k) as u64;
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut obs = env
                .reset(ResetRequest {
                    task,
                    init_state,
                    seed,
                })
                .map_err(|e| e.to_string())?;
            let mut steps = Vec::new();
            loop {
                // DART-style: record the clean expert action, execute a noisy
                // one, so the demos show the expert correcting perturbations.
                let a = env
                    .expert_action(0.0, &mut rng)
                    .map_err(|e| e.to_string())?;
                let noisy: Vec<f32> = a
                    .iter()
                    .map(|v| {
                        let g: f32 = (0..4).map(|_| rng.random::<f32>() - 0.5).sum::<f32>() * 1.732;
                        (v + noise * g).clamp(-1.0, 1.0)
                    })
                    .collect();
                let r = env.step(&noisy).map_err(|e| e.to_string())?;
                steps.push(EpisodeStep {
                    frames: obs.frames,
                    proprio: obs.proprio,
                    action: a,
                    progress: obs.progress,
                });
                obs = r.obs;
                if r.done || r.truncated {
                    let spec = env.spec().clone();
                    let n = steps.len();
                    let ep = Episode {
                        suite: spec.suite.clone(),
                        task,
                        init_state,
                        seed,
                        instruction: spec.tasks[task].instruction.clone(),
                        cameras: spec.cameras.clone(),
                        success: r.success,
                        final_progress: obs.progress,
                        source: format!("expert+dart{noise}"),
                        steps,
                    };
                    wmrl_env::write_episode(&out, index, &ep).map_err(|e| e.to_string())?;
                    return Ok((task, r.success, n));
                }
            }
        })
        .collect();
    let mut per = vec![(0usize, 0usize, 0usize); 10];
    for r in results {
        let (t, ok, n) = r?;
        per[t].0 += 1;
        per[t].1 += usize::from(ok);
        per[t].2 += n;
    }
    for (t, (n, ok, steps)) in per.iter().enumerate() {
        println!(
            "task {t}: {ok}/{n} successful, mean length {:.0}",
            *steps as f64 / (*n).max(1) as f64
        );
    }
    Ok(())
}
