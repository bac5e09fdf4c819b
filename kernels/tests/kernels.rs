//! Every kernel compiles with NVRTC (no GPU needed); with a CUDA device,
//! each matches its CPU reference. Without NVRTC the compile test is
//! skipped with a message, unless `WMRL_REQUIRE_NVRTC=1` (CI), where it
//! fails.
#![allow(clippy::unwrap_used)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use wmrl_kernels::{Gpu, KERNELS, compile, nvrtc_available};

fn gpu_or_skip(what: &str) -> Option<Gpu> {
    match Gpu::new(0) {
        Ok(g) => Some(g),
        Err(e) => {
            // scripts/gpu-check sets WMRL_REQUIRE_GPU: there a skip is a failure.
            assert!(
                std::env::var_os("WMRL_REQUIRE_GPU").is_none(),
                "WMRL_REQUIRE_GPU is set but {what} cannot run: {e}"
            );
            eprintln!("SKIP {what}: {e}");
            None
        }
    }
}

#[test]
fn every_kernel_compiles_to_ptx() {
    if !nvrtc_available() {
        assert!(
            std::env::var_os("WMRL_REQUIRE_NVRTC").is_none(),
            "WMRL_REQUIRE_NVRTC is set but NVRTC cannot be loaded (LD_LIBRARY_PATH={:?})",
            std::env::var("LD_LIBRARY_PATH").ok()
        );
        eprintln!("SKIP: NVRTC not found (scripts/setup installs it from PyPI)");
        return;
    }
    for k in KERNELS {
        let ptx = compile(k).unwrap_or_else(|e| panic!("{e}")).to_src();
        for entry in k.entry_points {
            assert!(
                ptx.contains(&format!(".entry {entry}")),
                "{}: no entry point {entry} in the PTX",
                k.name
            );
        }
    }
}

#[test]
fn a_kernel_with_an_error_does_not_compile() {
    if !nvrtc_available() {
        eprintln!("SKIP: NVRTC not found");
        return;
    }
    let bad = wmrl_kernels::Kernel {
        name: "broken",
        source: "extern \"C\" __global__ void f(float* x) { x[0] = undefined_name; }",
        entry_points: &["f"],
    };
    let err = compile(&bad).unwrap_err().to_string();
    assert!(err.contains("broken"), "{err}");
}

#[test]
fn action_head_kernel_matches_the_policy_sampler() {
    let Some(gpu) = gpu_or_skip("action-head parity") else {
        return;
    };
    let (rows, bins) = (7 * 8 * 64, 256);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let logits: Vec<f32> = (0..rows * bins)
        .map(|_| 4.0 * (rng.random::<f32>() - 0.5))
        .collect();
    let uniforms: Vec<f64> = (0..rows).map(|_| rng.random::<f64>()).collect();
    for t in [0.0f32, 0.5, 1.0] {
        let (tok, lp, h) = gpu
            .sample_action_tokens(&logits, &uniforms, bins, f64::from(t))
            .unwrap();
        for r in 0..rows {
            let (k, l, e) =
                wmrl_policy::sample_row(&logits[r * bins..(r + 1) * bins], t, uniforms[r]);
            assert_eq!(tok[r], k, "T {t} row {r}");
            assert!((lp[r] - l).abs() < 1e-6, "T {t} row {r}: {} vs {l}", lp[r]);
            assert!((h[r] - e).abs() < 1e-5, "T {t} row {r}: {} vs {e}", h[r]);
        }
    }
}

#[test]
fn raster_kernel_matches_the_cpu_renderer() {
    let Some(gpu) = gpu_or_skip("raster parity") else {
        return;
    };
    let (w, h, images) = (128usize, 128usize, 16usize);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let (mut tris, mut colors, mut first, mut bg) =
        (Vec::new(), Vec::new(), vec![0u32], Vec::new());
    let mut cpu = Vec::new();
    for _ in 0..images {
        let top = [rng.random::<u8>(), rng.random(), rng.random()];
        let bottom = [rng.random::<u8>(), rng.random(), rng.random()];
        let mut r = wmrl_sim::raster::Raster::new(w, h);
        r.clear(top, bottom);
        let pack = |c: [u8; 3]| (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
        bg.extend([pack(top), pack(bottom)]);
        for _ in 0..60 {
            let mut t = [0f32; 9];
            for v in 0..3 {
                t[3 * v] = rng.random::<f32>() * 160.0 - 16.0;
                t[3 * v + 1] = rng.random::<f32>() * 160.0 - 16.0;
                t[3 * v + 2] = 0.1 + rng.random::<f32>();
            }
            let col = [rng.random::<u8>(), rng.random(), rng.random()];
            r.fill_screen_tri(t, col);
            tris.extend(t);
            colors.push(pack(col));
        }
        first.push(colors.len() as u32);
        cpu.extend_from_slice(&r.rgb);
    }
    let out = gpu
        .raster_images(&tris, &colors, &first, &bg, w, h)
        .unwrap();
    assert_eq!(out.len(), cpu.len());
    let differ = out
        .chunks(3)
        .zip(cpu.chunks(3))
        .filter(|(a, b)| a != b)
        .count();
    let frac = differ as f64 / (images * w * h) as f64;
    eprintln!(
        "raster parity: {differ} of {} pixels differ ({:.4}%)",
        images * w * h,
        100.0 * frac
    );
    assert!(frac < 0.005, "{:.3}% of pixels differ", 100.0 * frac);
}

#[test]
fn the_simulator_renders_on_the_gpu_like_on_the_cpu() {
    // The whole path `--device cuda` takes: an environment given the GPU
    // (`TabletopEnv::on`) records both cameras and fills them in one
    // launch; its frames agree with the CPU renderer's on real scenes.
    if gpu_or_skip("simulator rendering on the GPU").is_none() {
        return;
    }
    let new = || wmrl_sim::TabletopEnv::new(wmrl_sim::SimConfig::default()).unwrap();
    let mut cpu_env = new();
    let mut env = new().on(Some(wmrl_sim::gpu::open(0).unwrap()));
    let mut cpu_frames = Vec::new();
    let scenes: Vec<(usize, wmrl_sim::InitState)> = (0..10)
        .map(|task| (task, cpu_env.init_state(task, task).unwrap()))
        .collect();
    for (task, init) in &scenes {
        cpu_frames.push(cpu_env.reset_to(*task, init).unwrap().frames);
        assert!(!cpu_env.renders_on_gpu());
    }
    let (mut differ, mut total) = (0usize, 0usize);
    for ((task, init), cpu) in scenes.iter().zip(&cpu_frames) {
        let gpu = env.reset_to(*task, init).unwrap().frames;
        // Every frame came from the GPU: no launch failed over to the CPU.
        assert!(env.renders_on_gpu(), "a GPU launch failed");
        assert_eq!(gpu.len(), cpu.len());
        for (g, c) in gpu.iter().zip(cpu) {
            assert_eq!(g.rgb.len(), c.rgb.len());
            differ += g
                .rgb
                .chunks(3)
                .zip(c.rgb.chunks(3))
                .filter(|(a, b)| a != b)
                .count();
            total += c.rgb.len() / 3;
        }
    }
    let frac = differ as f64 / total as f64;
    eprintln!(
        "simulator frames on the GPU: {differ} of {total} pixels differ from the CPU's ({:.4}%)",
        100.0 * frac
    );
    assert!(frac < 0.005, "{:.3}% of pixels differ", 100.0 * frac);
}
