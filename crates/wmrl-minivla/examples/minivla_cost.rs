//! CPU time and peak memory of MiniVLA's two costs in GRPO (issue 30,
//! point 4): one policy step (both vision backbones and the projector on
//! one 224 px frame, then the 7 action tokens sampled through the KV cache)
//! and one GRPO update (the action tokens' log-probabilities of a group of
//! rollouts recomputed with gradient, backward to the LoRA adapters in
//! micro-batches of `--micro-batch` steps, one AdamW step).
//!
//! The weights are drawn at random in memory (no checkpoint is written or
//! read; the arithmetic of a step does not depend on the values), in the
//! full published sizes unless `--preset scaled_down`.
//!
//!     cargo run --release -p wmrl-minivla --example minivla_cost -- \
//!         [--preset full|scaled_down] [--dtype f32|bf16] [--group 8] \
//!         [--steps-per-rollout 1] [--micro-batch 1] [--no-update] \
//!         [--device cpu|cuda]
//!
//! Prints one JSON line: CPU seconds (process CPU time, all threads) and
//! wall seconds of each phase, and the peak resident memory (VmHWM) after
//! building, after the policy steps and after the update. `--device cuda`
//! (a build with `--features cuda`) runs on the first GPU through candle's
//! CUDA backend; each timed phase then ends with a device synchronisation,
//! so its wall seconds include the GPU's work (scripts/gpu-check samples
//! the GPU's memory with nvidia-smi beside it).

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use wmrl_minivla::rl::{ActionStep, LoraConfig};
use wmrl_minivla::{MiniVla, MiniVlaConfig, tensor_shapes};
use wmrl_run::clock::process_cpu_secs;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let preset: String = arg(&args, "--preset", "full".to_string());
    let dtype = match arg(&args, "--dtype", "f32".to_string()).as_str() {
        "f32" => DType::F32,
        "bf16" => DType::BF16,
        d => return Err(format!("--dtype {d}: f32 or bf16").into()),
    };
    let group: usize = arg(&args, "--group", 8);
    let per_rollout: usize = arg(&args, "--steps-per-rollout", 1);
    let update = !args.iter().any(|a| a == "--no-update");
    let micro: usize = arg(&args, "--micro-batch", 1);
    let cfg = match preset.as_str() {
        "full" => MiniVlaConfig::full(),
        "scaled_down" => MiniVlaConfig::scaled_down(),
        p => return Err(format!("--preset {p}: full or scaled_down").into()),
    };
    let dev = match arg(&args, "--device", "cpu".to_string()).as_str() {
        "cpu" => Device::Cpu,
        "cuda" => Device::new_cuda(0)?,
        d => return Err(format!("--device {d}: cpu or cuda").into()),
    };

    let (wall, cpu) = (std::time::Instant::now(), process_cpu_secs());
    let m = build(&cfg, dtype, &dev)?;
    dev.synchronize()?;
    let built = (wall.elapsed().as_secs_f64(), process_cpu_secs() - cpu);
    let rss_built = peak_rss_mib();
    let lora_params: usize = m.adapters().iter().map(|(_, v)| v.elem_count()).sum();

    let Sampled {
        steps,
        per_step: policy,
        vision_cpu: prefix_cpu,
        vision_wall,
    } = policy_steps(&m, group * per_rollout)?;
    let n_steps = group * per_rollout;
    let rss_policy = peak_rss_mib();

    let upd = if update {
        Some(grpo_update(&m, &steps, micro)?)
    } else {
        None
    };
    let rss_update = peak_rss_mib();
    let out = serde_json::json!({
        "preset": preset,
        "dtype": format!("{dtype:?}"),
        "device": if dev.is_cuda() { "cuda" } else { "cpu" },
        "params": m.n_params(),
        "lora_params": lora_params,
        // candle's CPU kernels use RAYON_NUM_THREADS threads when it is set
        "threads": std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
        "build": {"wall_s": built.0, "cpu_s": built.1},
        "policy_step": {
            "wall_s": policy.0,
            "cpu_s": policy.1,
            "vision_cpu_s": prefix_cpu / n_steps as f64,
            "vision_wall_s": vision_wall / n_steps as f64,
            "steps_timed": n_steps,
        },
        "grpo_update": upd.map(|(w, c, r)| serde_json::json!({
            "rollouts": group,
            "steps_per_rollout": per_rollout,
            "micro_batch": micro,
            "wall_s": w,
            "cpu_s": c,
            "ratio_mean_at_old_params": r,
        })),
        "peak_rss_mib": {"built": rss_built, "after_policy_steps": rss_policy, "after_update": rss_update},
    });
    println!("{out}");
    Ok(())
}

type Error = Box<dyn std::error::Error>;

/// The model of `cfg` with random weights (norm weights 1, the rest
/// N(0, 0.02)) and LoRA adapters at their defaults.
fn build(cfg: &MiniVlaConfig, dtype: DType, dev: &Device) -> Result<MiniVla, Error> {
    let mut tensors = HashMap::new();
    for (name, shape) in tensor_shapes(cfg)? {
        let t = if name.contains("norm") && name.ends_with("weight") {
            Tensor::ones(shape, dtype, dev)?
        } else {
            Tensor::randn(0f32, 0.02, shape, dev)?.to_dtype(dtype)?
        };
        tensors.insert(name, t);
    }
    let mut m = MiniVla::from_tensors(cfg, tensors, dev, dtype)?;
    m.attach_lora(&LoraConfig::default())?;
    Ok(m)
}

/// What the timed policy steps left: the steps (with alternating
/// advantages, for the update) and their cost.
struct Sampled {
    steps: Vec<ActionStep>,
    /// (wall s, CPU s) per step.
    per_step: (f64, f64),
    /// CPU seconds of the vision side, all steps together.
    vision_cpu: f64,
    /// Wall seconds of the vision side, all steps together.
    vision_wall: f64,
}

/// `n_steps` policy steps on synthetic 224 px frames.
fn policy_steps(m: &MiniVla, n_steps: usize) -> Result<Sampled, Error> {
    // A prompt of 24 ids (the real prompt is about as long) below the
    // action tokens.
    let prompt: Vec<u32> = (0..24u32).map(|i| 100 + i).collect();
    let frame = |k: u32| {
        image::RgbImage::from_fn(224, 224, |x, y| {
            let v = ((x * 7 + y * 13 + k * 31) % 256) as u8;
            image::Rgb([v, 255 - v, v / 2])
        })
    };
    let mut u = {
        let mut s = 7u64;
        move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        }
    };
    let dev = m.device();
    if dev.is_cuda() {
        // One untimed step first: the GPU loads (and JIT-compiles) each
        // kernel module on its first use.
        let prefix = m.prefix(&[frame(9_999)], &prompt)?;
        m.sample_action_tokens(&prefix, 1.0, &mut u)?;
        dev.synchronize()?;
    }
    let (wall, cpu) = (std::time::Instant::now(), process_cpu_secs());
    let mut prefix_cpu = 0.0;
    let mut prefix_wall = 0.0;
    let mut steps = Vec::with_capacity(n_steps);
    for k in 0..n_steps {
        let (c0, w0) = (process_cpu_secs(), std::time::Instant::now());
        let prefix = m.prefix(&[frame(k as u32)], &prompt)?;
        dev.synchronize()?;
        prefix_cpu += process_cpu_secs() - c0;
        prefix_wall += w0.elapsed().as_secs_f64();
        let sample = m.sample_action_tokens(&prefix, 1.0, &mut u)?;
        steps.push(ActionStep {
            prefix,
            sample,
            advantage: if k % 2 == 0 { 1.0 } else { -1.0 },
        });
    }
    let per_step = (
        wall.elapsed().as_secs_f64() / n_steps as f64,
        (process_cpu_secs() - cpu) / n_steps as f64,
    );
    Ok(Sampled {
        steps,
        per_step,
        vision_cpu: prefix_cpu,
        vision_wall: prefix_wall,
    })
}

/// One GRPO update over `steps` in micro-batches of `micro`: (wall s,
/// CPU s, the ratio's mean at the sampling parameters).
fn grpo_update(m: &MiniVla, steps: &[ActionStep], micro: usize) -> Result<(f64, f64, f64), Error> {
    let mut opt = wmrl_grpo::AdamW::new(
        m.adapters(),
        wmrl_grpo::OptimConfig {
            warmup_steps: 0,
            ..Default::default()
        },
        &[],
    )?;
    let (wall, cpu) = (std::time::Instant::now(), process_cpu_secs());
    let (_, stats) = m.grpo_update(
        &mut opt,
        steps,
        1.0,
        &wmrl_grpo::Objective::default(),
        micro,
        None,
    )?;
    m.device().synchronize()?;
    Ok((
        wall.elapsed().as_secs_f64(),
        process_cpu_secs() - cpu,
        stats.ratio_mean,
    ))
}
