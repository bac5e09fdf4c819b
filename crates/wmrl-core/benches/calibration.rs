//! `cargo bench -p wmrl-core`: refit on a full 5000-pair buffer, and apply the
//! fitted map to 1e6 scores (into a new vector, and into a kept buffer), for
//! both fit modes.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use wmrl_core::rng::SplitMix64;
use wmrl_core::{CalibrationConfig, CalibrationMode, Calibrator};

fn filled(mode: CalibrationMode) -> Calibrator {
    let cfg = CalibrationConfig {
        mode,
        ..CalibrationConfig::default()
    };
    let mut c = Calibrator::new(cfg).expect("valid");
    let mut rng = SplitMix64::new(1);
    let xs: Vec<f64> = (0..5000).map(|_| rng.unit()).collect();
    let ys: Vec<f64> = xs
        .iter()
        .map(|&x| f64::from(u8::from(rng.unit() < x * x)))
        .collect();
    c.push(&xs, &ys).expect("push");
    c
}

fn bench(cr: &mut Criterion) {
    let mut rng = SplitMix64::new(2);
    let probes: Vec<f64> = (0..1_000_000).map(|_| rng.unit()).collect();
    for (name, mode) in [
        ("binned", CalibrationMode::Binned),
        ("exact", CalibrationMode::Exact),
    ] {
        let mut c = filled(mode);
        cr.bench_function(&format!("refit_5000_pairs_{name}"), |b| {
            b.iter(|| black_box(c.refit()))
        });
        cr.bench_function(&format!("apply_1e6_scores_{name}"), |b| {
            b.iter(|| black_box(c.apply(black_box(&probes)).expect("apply")))
        });
        // The same into a buffer the caller keeps (a loop that maps a batch
        // every step): the allocation and first-touch page faults of an
        // 8 MB output are not paid per call.
        let mut out = vec![0.0; probes.len()];
        cr.bench_function(&format!("apply_into_1e6_scores_{name}"), |b| {
            b.iter(|| {
                c.apply_into(black_box(&probes), &mut out).expect("apply");
                black_box(out[0])
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
