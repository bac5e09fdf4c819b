//! A bridge server over the deterministic test environment, for the
//! integration tests (killed with SIGKILL mid-step) and the benchmarks.
//!
//! `wmrl-test-server --bind tcp://127.0.0.1:* --envs 4 [--image 16]
//! [--cameras 2] [--work-us 0] [--sleep-ms 0] [--max-steps 40]`
//! prints `ENDPOINT <bound endpoint>` on stdout once it is serving.

use std::io::Write;

use wmrl_bridge::testenv::{TestEnv, TestEnvConfig};
use wmrl_bridge::{Server, ServerConfig};
use wmrl_env::LocalVecEnv;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut bind = "tcp://127.0.0.1:*".to_string();
    let mut envs = 4usize;
    let mut cfg = TestEnvConfig::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).ok_or("missing value")?;
        match args[i].as_str() {
            "--bind" => bind = value.clone(),
            "--envs" => envs = value.parse()?,
            "--image" => cfg.image_size = value.parse()?,
            "--cameras" => cfg.n_cameras = value.parse()?,
            "--work-us" => cfg.work_us = value.parse()?,
            "--sleep-ms" => cfg.sleep_ms = value.parse()?,
            "--max-steps" => cfg.max_steps = value.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
        i += 2;
    }
    let env = LocalVecEnv::new((0..envs).map(|_| TestEnv::new(cfg.clone())).collect())?;
    let config = ServerConfig {
        name: "wmrl-test-server".into(),
        ..ServerConfig::default()
    };
    let mut server = Server::bind(&bind, env, config)?;
    println!("ENDPOINT {}", server.endpoint());
    std::io::stdout().flush()?;
    server.run()?;
    Ok(())
}
