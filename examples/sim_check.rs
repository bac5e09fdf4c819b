//! Diagnostic: does a trained policy reproduce the demo's actions on the
//! demo's own observations, and does the simulator's reset match the demo?
//! `sim_check RUN DEMO_EPISODE`

use wmrl_env::{Environment, ResetRequest};
use wmrl_policy::{Policy, PolicyInput};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let policy = Policy::load(std::path::Path::new(&a[1]))?;
    let ep = wmrl_env::read_episode(std::path::Path::new(&a[2]))?;
    let mut env = wmrl_sim::TabletopEnv::new(wmrl_sim::SimConfig::default())?;
    let obs = env.reset(ResetRequest {
        task: ep.task,
        init_state: ep.init_state,
        seed: ep.seed,
    })?;
    println!(
        "reset frames equal: {}, proprio equal: {}",
        obs.frames == ep.steps[0].frames,
        obs.proprio == ep.steps[0].proprio
    );
    for t in (0..ep.steps.len()).step_by(8).take(8) {
        let s = &ep.steps[t];
        let input = PolicyInput {
            instruction: ep.instruction.clone(),
            frames: s.frames.clone(),
            prev_frame: None,
            proprio: s.proprio.clone(),
        };
        let out = policy.sample(&[input], 0.0, 0)?;
        let pred = &out[0].actions[0];
        println!(
            "t={t:3} expert {:?}\n      policy {:?}",
            s.action
                .iter()
                .map(|v| (v * 100.0).round() / 100.0)
                .collect::<Vec<_>>(),
            pred.iter()
                .map(|v| (v * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        );
    }
    // Closed loop from the reset: policy vs expert on the same states.
    let mut obs = obs;
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
    for t in 0..40 {
        let input = PolicyInput {
            instruction: ep.instruction.clone(),
            frames: obs.frames.clone(),
            prev_frame: None,
            proprio: obs.proprio.clone(),
        };
        let act = policy.sample(&[input], 0.0, 0)?[0].actions[0];
        let exp = env.expert_action(0.0, &mut rng)?;
        if t % 5 == 0 {
            println!(
                "loop t={t:2} expert {:?}\n           policy {:?} proprio {:?}",
                exp.iter()
                    .map(|v| (v * 100.0).round() / 100.0)
                    .collect::<Vec<_>>(),
                act.iter()
                    .map(|v| (v * 100.0).round() / 100.0)
                    .collect::<Vec<_>>(),
                obs.proprio
                    .iter()
                    .map(|v| (v * 1000.0).round() / 1000.0)
                    .collect::<Vec<_>>()
            );
        }
        obs = env.step(&act.to_vec())?.obs;
    }
    Ok(())
}
