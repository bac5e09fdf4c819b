//! Run the scripted expert on every task and print its success rate:
//! `cargo run --release -p wmrl-sim --example expert_check -- [inits] [noise]`.

use rand::SeedableRng;
use wmrl_env::{Environment, ResetRequest};
use wmrl_sim::{SimConfig, TabletopEnv};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let inits: usize = args.get(1).map_or(Ok(10), |s| s.parse())?;
    let noise: f32 = args.get(2).map_or(Ok(0.0), |s| s.parse())?;
    let only: Option<usize> = args.get(3).map(|s| s.parse()).transpose()?;
    let cfg = SimConfig {
        render: false,
        ..SimConfig::default()
    };
    let mut env = TabletopEnv::new(cfg)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for task in 0..10 {
        if only.is_some_and(|o| o != task) {
            continue;
        }
        let (mut ok, mut steps, mut prog) = (0, 0, 0.0);
        let mut fails = Vec::new();
        for init in 0..inits {
            env.reset(ResetRequest {
                task,
                init_state: init,
                seed: 0,
            })?;
            loop {
                let a = env.expert_action(noise, &mut rng)?;
                let r = env.step(&a)?;
                if r.done || r.truncated {
                    if r.success {
                        ok += 1;
                        steps += env.steps()?;
                    } else {
                        fails.push((init, env.status()?.holds.clone()));
                    }
                    prog += r.obs.progress.unwrap_or(0.0);
                    break;
                }
            }
        }
        println!(
            "task {task}: success {ok}/{inits}, mean steps {:.0}, mean final progress {:.2}, fails {:?}",
            steps as f32 / ok.max(1) as f32,
            prog / inits as f32,
            &fails[..fails.len().min(4)]
        );
    }
    Ok(())
}
