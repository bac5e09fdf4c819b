//! `wmrl serve-sim`: serve N embedded tabletop simulators in this process
//! over the wmrl-bridge protocol (docs/protocol.md), for a `BridgePool` on
//! this machine or another. Runs until killed.

use wmrl_bridge::{Server, ServerConfig};
use wmrl_env::LocalVecEnv;
use wmrl_sim::{SimConfig, TabletopEnv, make_vec_env};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// ZeroMQ endpoint to bind; `tcp://127.0.0.1:*` picks a free port.
    #[arg(long, default_value = "tcp://127.0.0.1:5555")]
    pub bind: String,
    /// Simulator instances (slots) served by this process.
    #[arg(long, default_value_t = 8)]
    pub envs: usize,
    /// Square camera size of both cameras.
    #[arg(long, default_value_t = 128)]
    pub image_size: u32,
    /// Episode limit in control steps (simulator default 300).
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Where the simulators render: `cpu`, `cuda` (the batched GPU
    /// rasteriser, kernels/raster.cu, when a driver and NVRTC are there; the
    /// CPU with one warning otherwise) or `auto` (the same, the fallback
    /// logged as information). Physics runs on the CPU either way.
    #[arg(long, default_value = "cpu")]
    pub device: wmrl_run::DeviceChoice,
}

/// The GPU the simulators render with for `choice`, or `None` (the CPU),
/// with one log line when the GPU was asked for and is not there.
fn renderer(choice: wmrl_run::DeviceChoice) -> Option<std::sync::Arc<wmrl_sim::gpu::Gpu>> {
    use wmrl_run::DeviceChoice;
    if choice == DeviceChoice::Cpu {
        return None;
    }
    match wmrl_sim::gpu::open(0) {
        Ok(gpu) => Some(gpu),
        Err(why) => {
            let line = format!("--device {choice}: rendering on the CPU instead: {why}");
            match choice {
                DeviceChoice::Cuda => tracing::warn!("{line}"),
                _ => tracing::info!("{line}"),
            }
            None
        }
    }
}

/// Build the simulators and bind the server.
fn bind(args: &Args) -> anyhow::Result<Server<LocalVecEnv<TabletopEnv>>> {
    let mut cfg = SimConfig {
        image_size: args.image_size,
        ..SimConfig::default()
    };
    if let Some(m) = args.max_steps {
        cfg.max_steps = m;
    }
    let env = make_vec_env(&cfg, args.envs, renderer(args.device).as_ref())?;
    let config = ServerConfig {
        name: "wmrl-serve-sim".into(),
        ..ServerConfig::default()
    };
    Ok(Server::bind(&args.bind, env, config)?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut server = bind(&args)?;
    // Machine-readable line for launchers (envs/ray) and tests.
    println!("ENDPOINT {}", server.endpoint());
    tracing::info!(
        endpoint = server.endpoint(),
        envs = args.envs,
        "serve-sim ready"
    );
    server.run()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wmrl_bridge::{BridgePool, PoolConfig};
    use wmrl_env::{ResetRequest, VecEnv};

    #[test]
    fn serves_the_embedded_simulator_to_a_pool() {
        let args = Args {
            bind: "tcp://127.0.0.1:*".into(),
            envs: 2,
            image_size: 64,
            max_steps: Some(50),
            device: wmrl_run::DeviceChoice::Cpu,
        };
        let mut server = bind(&args).unwrap();
        let endpoint = server.endpoint().to_string();
        let stop = server.shutdown_handle();
        let handle = std::thread::spawn(move || server.run().unwrap());
        let mut pool = BridgePool::connect(&[endpoint.as_str()], PoolConfig::default()).unwrap();
        assert_eq!(pool.spec().suite, wmrl_sim::SUITE);
        assert_eq!(pool.num_envs(), 2);
        let req = |task| ResetRequest {
            task,
            init_state: 1,
            seed: 7,
        };
        let obs = pool.reset(&[(0, req(0)), (1, req(3))]).unwrap();
        assert_eq!(obs[0].frames.len(), 2);
        let r = pool.step(&[(0, vec![0.0; 7]), (1, vec![0.5; 7])]).unwrap();
        for o in r.iter().map(|r| &r.obs) {
            assert!(
                o.frames
                    .iter()
                    .all(|f| f.width == 64 && f.rgb.len() == 64 * 64 * 3)
            );
            let first = o.frames[0].rgb[0];
            assert!(
                o.frames[0].rgb.iter().any(|&v| v != first),
                "frame not blank"
            );
            assert!(o.progress.is_some());
        }
        // The same episode in-process gives the same frames.
        let mut local = make_vec_env(
            &SimConfig {
                image_size: 64,
                max_steps: 50,
                ..SimConfig::default()
            },
            1,
            None,
        )
        .unwrap();
        local.reset(&[(0, req(3))]).unwrap();
        let l = local.step(&[(0, vec![0.5; 7])]).unwrap();
        assert_eq!(l[0], r[1]);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        handle.join().unwrap();
    }
}
