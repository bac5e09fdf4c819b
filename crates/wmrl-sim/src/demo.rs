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
    record(env, task, init, seed, Noise::Label(noise_std))
}

/// DART-style demonstration (Laskey et al., 2017): the environment executes
/// the expert's action plus Gaussian noise of standard deviation `dart_std`,
/// but the episode records the clean expert action. The demonstrations then
/// visit the perturbed states a learned policy drifts into and show the
/// expert correcting them, which cuts compounding error in behaviour cloning.
pub fn record_dart_episode(
    env: &mut TabletopEnv,
    task: usize,
    init: usize,
    dart_std: f32,
    seed: u64,
) -> Result<Episode> {
    record(env, task, init, seed, Noise::Dart(dart_std))
}

#[derive(Clone, Copy)]
enum Noise {
    /// Noise in the executed and recorded action alike.
    Label(f32),
    /// Noise in the executed action only; the clean action is recorded.
    Dart(f32),
}

fn record(
    env: &mut TabletopEnv,
    task: usize,
    init: usize,
    seed: u64,
    noise: Noise,
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
        let (action, r) = match noise {
            Noise::Label(std) => {
                let action = env.expert_action(std, &mut rng)?;
                let r = env.step(&action)?;
                (action, r)
            }
            Noise::Dart(std) => {
                let clean = env.expert_action(0.0, &mut rng)?;
                let executed = crate::env::add_noise(&clean, std, &mut rng)?;
                let r = env.step(&executed)?;
                (clean, r)
            }
        };
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
                source: match noise {
                    Noise::Label(std) if std > 0.0 => format!("expert+noise{std}"),
                    Noise::Dart(std) if std > 0.0 => format!("expert+dart{std}"),
                    _ => "expert".into(),
                },
                steps,
            });
        }
    }
}
