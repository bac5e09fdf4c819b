//! Policy throughput on CPU: one `sample` call (a whole action chunk) at
//! batch 1, 16 and 64 for the `tiny` and `small` presets, and one SFT step
//! (forward + backward + AdamW) at batch 32 for `tiny`.
//! Calls/s = batch / time per iteration (criterion reports elements/s).
//! Run it on one thread, as benches run their runs:
//! `RAYON_NUM_THREADS=1 cargo bench -p wmrl-policy --bench policy`.

use candle_core::{DType, Device};
use criterion::{Criterion, Throughput, criterion_group};
use wmrl_env::Frame;
use wmrl_grpo::OptimConfig;
use wmrl_policy::{Policy, PolicyConfig, PolicyInput, PolicyOptimizer, nll_loss};

fn inputs(cfg: &PolicyConfig, n: usize) -> Vec<PolicyInput> {
    (0..n)
        .map(|i| PolicyInput {
            instruction: "put both the alphabet soup and the tomato sauce in the basket".into(),
            frames: vec![
                Frame {
                    width: 128,
                    height: 128,
                    rgb: vec![(i * 7) as u8; 128 * 128 * 3],
                },
                Frame {
                    width: 128,
                    height: 128,
                    rgb: vec![(i * 3) as u8; 128 * 128 * 3],
                },
            ],
            prev_frame: None,
            proprio: vec![0.1; cfg.proprio_dim],
        })
        .collect()
}

fn bench_sample(c: &mut Criterion) {
    for preset in ["tiny", "small"] {
        let cfg = PolicyConfig::preset(preset).expect("preset");
        let policy = Policy::new(cfg.clone(), &Device::Cpu, DType::F32).expect("policy");
        let mut group = c.benchmark_group(format!("sample_{preset}"));
        group.sample_size(10);
        for batch in [1usize, 16, 64] {
            let xs = inputs(&cfg, batch);
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_function(format!("batch{batch}"), |b| {
                b.iter(|| policy.sample(&xs, 1.0, 0).expect("sample"))
            });
        }
        group.finish();
    }
}

fn bench_sft_step(c: &mut Criterion) {
    let cfg = PolicyConfig::tiny();
    let policy = Policy::new(cfg.clone(), &Device::Cpu, DType::F32).expect("policy");
    let batch = 32;
    let xs = inputs(&cfg, batch);
    let prep = policy.prepare(&xs).expect("prep");
    let toks: Vec<Vec<u32>> = (0..batch)
        .map(|i| {
            (0..cfg.tokens_per_call())
                .map(|j| ((i + j) % 256) as u32)
                .collect()
        })
        .collect();
    let toks = policy.tokens_tensor(&toks).expect("tokens");
    let mask = candle_core::Tensor::ones(toks.dims(), DType::F32, &Device::Cpu).expect("mask");
    let mut opt = PolicyOptimizer::new(&policy, OptimConfig::default()).expect("opt");
    let mut group = c.benchmark_group("sft_tiny");
    group.sample_size(10);
    group.throughput(Throughput::Elements(batch as u64));
    group.bench_function("step_batch32", |b| {
        b.iter(|| {
            let (loss, _) = nll_loss(&policy, &prep, &toks, &mask).expect("loss");
            opt.step(&loss).expect("step")
        })
    });
    group.finish();
}

criterion_group!(benches, bench_sample, bench_sft_step);

// As `wmrl` runs: freed memory kept in the process (wmrl_run::process).
fn main() {
    wmrl_run::process::keep_freed_memory();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
