//! Write a PNG grid of frames: by default the ten tasks' first agent-view
//! frames (docs/tasks_grid.png):
//! `cargo run --release -p wmrl-sim --example tasks_grid -- OUT.png [size] [camera] [task] [every]`.
//! With `task`, the grid instead shows that task's expert episode, one frame
//! every `every` steps.

use rand::SeedableRng;
use wmrl_env::{Environment, Frame, ResetRequest};
use wmrl_sim::{SimConfig, TabletopEnv};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let out = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "docs/tasks_grid.png".into());
    let size: u32 = args.get(2).map_or(Ok(128), |s| s.parse())?;
    let cam: usize = args.get(3).map_or(Ok(0), |s| s.parse())?;
    let task: Option<usize> = args.get(4).map(|s| s.parse()).transpose()?;
    let every: usize = args.get(5).map_or(Ok(10), |s| s.parse())?;
    let mut env = TabletopEnv::new(SimConfig {
        image_size: size,
        ..SimConfig::default()
    })?;
    let mut frames: Vec<Frame> = Vec::new();
    match task {
        None => {
            for t in 0..10 {
                let obs = env.reset(ResetRequest {
                    task: t,
                    init_state: 0,
                    seed: 0,
                })?;
                frames.push(obs.frames[cam].clone());
            }
        }
        Some(t) => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
            let obs = env.reset(ResetRequest {
                task: t,
                init_state: 0,
                seed: 0,
            })?;
            frames.push(obs.frames[cam].clone());
            for k in 1.. {
                let a = env.expert_action(0.0, &mut rng)?;
                let r = env.step(&a)?;
                if k % every == 0 || r.done || r.truncated {
                    frames.push(r.obs.frames[cam].clone());
                }
                if r.done || r.truncated {
                    break;
                }
            }
        }
    }
    let cols = 5u32;
    let rows = (frames.len() as u32).div_ceil(cols);
    let pad = 4u32;
    let (w, h) = (cols * (size + pad) + pad, rows * (size + pad) + pad);
    let mut img = image::RgbImage::from_pixel(w, h, image::Rgb([255, 255, 255]));
    for (k, f) in frames.iter().enumerate() {
        let (cx, cy) = (k as u32 % cols, k as u32 / cols);
        for y in 0..size {
            for x in 0..size {
                let i = 3 * (y * size + x) as usize;
                img.put_pixel(
                    pad + cx * (size + pad) + x,
                    pad + cy * (size + pad) + y,
                    image::Rgb([f.rgb[i], f.rgb[i + 1], f.rgb[i + 2]]),
                );
            }
        }
    }
    img.save(&out)?;
    println!("wrote {out}: {} frames", frames.len());
    Ok(())
}
