//! Recording scripted-expert episodes in the project's episode format.

use rand::SeedableRng;
use wmrl_env::{Environment, Episode, EpisodeStep, ResetRequest};

use crate::env::{SUITE, TabletopEnv};
use crate::{Result, SimError};

/// The random generator the simulator's expert noise uses.
pub type SimRng = rand_chacha::ChaCha8Rng;

/// A seeded [`SimRng`].
pub fn sim_rng(seed: u64) -> SimRng {
    SimRng::seed_from_u64(seed)
}

/// Run the scripted expert on `task` from initial state `init`, with action
/// noise of standard deviation `noise_std` drawn from a generator seeded by
/// `seed`, until success or the episode limit, and return the episode (every
/// observation with the action taken after it).
pub fn record_expert_episode(
    env: &mut TabletopEnv,
    task: usize,
    init: usize,
    noise_std: f32,
    seed: u64,
) -> Result<Episode> {
    let mut rng = sim_rng(seed);
    let mut obs = env.reset(ResetRequest {
        task,
        init_state: init,
        seed,
    })?;
    let spec = env.spec().clone();
    let ts = spec.tasks.get(task).ok_or(SimError::UnknownTask {
        task,
        n_tasks: spec.tasks.len(),
    })?;
    let mut steps = Vec::new();
    loop {
        let action = env.expert_action(noise_std, &mut rng)?;
        let r = env.step(&action)?;
        steps.push(EpisodeStep {
            frames: std::mem::take(&mut obs.frames),
            proprio: std::mem::take(&mut obs.proprio),
            action,
            progress: obs.progress,
        });
        obs = r.obs;
        if r.done || r.truncated {
            return Ok(Episode {
                suite: SUITE.into(),
                task,
                init_state: init,
                seed,
                instruction: ts.instruction.clone(),
                cameras: spec.cameras.clone(),
                success: r.success,
                final_progress: obs.progress,
                source: if noise_std > 0.0 {
                    format!("expert+noise{noise_std}")
                } else {
                    "expert".into()
                },
                steps,
            });
        }
    }
}
