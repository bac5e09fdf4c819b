//! `cargo run --release -p wmrl-kernels --example gpu_timing`: each kernel
//! against its CPU reference on the same inputs (a step's action tokens:
//! 64 calls x 56 tokens x 256 bins; 64 images of 128x128 with 200
//! triangles each; one simulator observation, both cameras), milliseconds
//! per call, as a markdown table. Needs a CUDA
//! device (scripts/gpu-check runs it).

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn ms<F: FnMut()>(mut f: F, reps: usize) -> f64 {
    f();
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    1e3 * t.elapsed().as_secs_f64() / reps as f64
}

fn main() {
    let gpu = match wmrl_kernels::Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("no GPU: {e}");
            std::process::exit(2);
        }
    };
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (rows, bins) = (64 * 56, 256);
    let logits: Vec<f32> = (0..rows * bins)
        .map(|_| rng.random::<f32>() * 4.0)
        .collect();
    let u: Vec<f64> = (0..rows).map(|_| rng.random()).collect();
    let cpu_ah = ms(
        || {
            for r in 0..rows {
                std::hint::black_box(wmrl_policy::sample_row(
                    &logits[r * bins..(r + 1) * bins],
                    0.5,
                    u[r],
                ));
            }
        },
        5,
    );
    let gpu_ah = ms(
        || {
            std::hint::black_box(
                gpu.sample_action_tokens(&logits, &u, bins, 0.5)
                    .expect("gpu"),
            );
        },
        20,
    );
    let (w, h, images, per) = (128usize, 128usize, 64usize, 200usize);
    let mut tris = Vec::new();
    let mut colors = Vec::new();
    let mut first = vec![0u32];
    for _ in 0..images {
        for _ in 0..per {
            for _ in 0..3 {
                tris.extend([
                    rng.random::<f32>() * 128.0,
                    rng.random::<f32>() * 128.0,
                    0.1 + rng.random::<f32>(),
                ]);
            }
            colors.push(rng.random::<u32>() & 0xFFFFFF);
        }
        first.push(colors.len() as u32);
    }
    let bg = vec![0x202020u32; 2 * images];
    let cpu_r = ms(
        || {
            for k in 0..images {
                let mut r = wmrl_sim::raster::Raster::new(w, h);
                r.clear([32; 3], [32; 3]);
                for i in first[k] as usize..first[k + 1] as usize {
                    let t: [f32; 9] = tris[9 * i..9 * i + 9].try_into().expect("9");
                    let c = colors[i];
                    r.fill_screen_tri(t, [(c >> 16) as u8, (c >> 8) as u8, c as u8]);
                }
                std::hint::black_box(&r.rgb);
            }
        },
        3,
    );
    let gpu_r = ms(
        || {
            std::hint::black_box(
                gpu.raster_images(&tris, &colors, &first, &bg, w, h)
                    .expect("gpu"),
            );
        },
        20,
    );
    // The simulator's whole observation (both 128x128 cameras of a task-0
    // scene): the CPU renderer, then the same environment on the GPU.
    let mut env = wmrl_sim::TabletopEnv::new(wmrl_sim::SimConfig::default()).expect("sim");
    let init = env.init_state(0, 0).expect("init state");
    env.reset_to(0, &init).expect("reset");
    let cpu_obs = ms(
        || {
            std::hint::black_box(env.observe().expect("observe"));
        },
        50,
    );
    let mut env = env.on(Some(wmrl_sim::gpu::open(0).expect("GPU renderer")));
    env.reset_to(0, &init).expect("reset");
    let gpu_obs = ms(
        || {
            std::hint::black_box(env.observe().expect("observe"));
        },
        50,
    );
    assert!(
        env.renders_on_gpu(),
        "a GPU launch failed: the row would time the CPU"
    );
    println!("| kernel | work | CPU ms | GPU ms (with transfers) | speed-up |");
    println!("|---|---|---|---|---|");
    println!(
        "| action head | {rows} tokens x {bins} bins | {cpu_ah:.2} | {gpu_ah:.2} | {:.1}x |",
        cpu_ah / gpu_ah
    );
    println!(
        "| raster | {images} images {w}x{h}, {per} triangles each | {cpu_r:.2} | {gpu_r:.2} | {:.1}x |",
        cpu_r / gpu_r
    );
    println!(
        "| raster in the simulator | one observation: agent view + wrist, 128x128 (host part on the CPU) | {cpu_obs:.2} | {gpu_obs:.2} | {:.1}x |",
        cpu_obs / gpu_obs
    );
}
