//! The environments a run or an evaluation steps, by `env.backend`: the
//! embedded simulator in process (`sim`), workers a user started that speak
//! the bridge protocol (`bridge`: the way to plug in any other simulator,
//! docs/protocol.md), and real LIBERO workers that wmrl starts and supervises
//! (`libero`). The settings are [`EnvConfig`]'s; what they must hold is
//! checked with the rest of a run's config ([`crate::TrainConfig::validate`]).

use crate::config::{Backend, EnvConfig};
use crate::{Result, TrainError};

/// The environment a run (or an evaluation) steps: see [`EnvConfig`]. The
/// embedded simulator renders on `renderer` when given (the placement's
/// GPU), else on the CPU.
pub fn make_env(
    cfg: &EnvConfig,
    renderer: Option<&std::sync::Arc<wmrl_sim::gpu::Gpu>>,
) -> Result<Box<dyn wmrl_env::VecEnv>> {
    Ok(match cfg.backend {
        Backend::Bridge => Box::new(wmrl_bridge::BridgePool::connect(
            &cfg.endpoints,
            wmrl_bridge::PoolConfig {
                num_envs: None,
                ..cfg.pool.clone()
            },
        )?),
        Backend::Libero => {
            let l = &cfg.libero;
            for (what, p) in [
                ("LIBERO venv interpreter (env.libero.python)", &l.python),
                ("LIBERO server script (env.libero.server)", &l.server),
            ] {
                if !p.exists() {
                    return Err(TrainError::Missing {
                        what,
                        path: p.display().to_string(),
                        hint: "run scripts/setup (scripts/setup.d/30-libero.sh builds envs/libero/.venv) from the repository root, or set env.libero.python / env.libero.server",
                    });
                }
            }
            let gl = std::env::var("MUJOCO_GL").unwrap_or_else(|_| l.mujoco_gl.clone());
            let cmd = wmrl_bridge::WorkerCommand {
                program: l.python.clone(),
                args: vec![
                    l.server.display().to_string(),
                    "--envs".into(),
                    l.envs_per_worker.to_string(),
                    "--suite".into(),
                    l.suite.clone(),
                    "--image".into(),
                    l.image_size.to_string(),
                ],
                env: vec![("MUJOCO_GL".into(), gl)],
                ready_timeout: std::time::Duration::from_secs_f64(l.ready_timeout_secs),
            };
            Box::new(wmrl_bridge::SupervisedPool::spawn(
                cmd,
                l.workers,
                wmrl_bridge::PoolConfig {
                    num_envs: Some(cfg.num_envs.min(l.workers * l.envs_per_worker)),
                    ..cfg.pool.clone()
                },
            )?)
        }
        Backend::Sim => Box::new(wmrl_sim::make_vec_env(&cfg.sim, cfg.num_envs, renderer)?),
    })
}
