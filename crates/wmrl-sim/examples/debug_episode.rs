//! Print the goal status and the main object's pose along one expert episode:
//! `cargo run --release -p wmrl-sim --example debug_episode -- TASK INIT NOISE OBJECT`.

use wmrl_env::{Environment, ResetRequest};
use wmrl_sim::{SimConfig, TabletopEnv, sim_rng};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let task: usize = a[1].parse()?;
    let init: usize = a[2].parse()?;
    let noise: f32 = a[3].parse()?;
    let mut env = TabletopEnv::new(SimConfig {
        render: false,
        ..SimConfig::default()
    })?;
    env.reset(ResetRequest {
        task,
        init_state: init,
        seed: 0,
    })?;
    let i = env.task()?.object_index(&a[4]).ok_or("no such object")?;
    let mut rng = sim_rng(7);
    for t in 0.. {
        let act = env.expert_action(noise, &mut rng)?;
        let r = env.step(&act)?;
        let w = env.world()?;
        let (lo, hi) = w.bounds(i);
        if std::env::var("ALL").is_ok() || t % 5 == 0 || r.done || r.truncated {
            println!(
                "t={t:3} g=({:.3},{:.3},{:.3}) cl={:.2} held={:?} obj_lo=({:.3},{:.3},{:.3}) obj_hi_z={:.3} holds={:?} p={:.2}",
                w.gripper.pos.x,
                w.gripper.pos.y,
                w.gripper.pos.z,
                w.gripper.closure,
                w.gripper.held,
                lo.x,
                lo.y,
                lo.z,
                hi.z,
                env.status()?.holds,
                r.obs.progress.unwrap_or(0.0)
            );
        }
        if r.done || r.truncated {
            break;
        }
    }
    Ok(())
}
