//! Criterion benchmarks: one control step of the tabletop simulator, physics
//! only and with both 128x128 cameras, on a cheap and an articulated task.
//! `cargo bench -p wmrl-sim` (per-task figures: `wmrl bench-sim`).

use criterion::{Criterion, criterion_group, criterion_main};
use wmrl_env::{Environment, ResetRequest};
use wmrl_sim::{SimConfig, TabletopEnv, sim_rng};

fn bench_step(c: &mut Criterion) {
    for (label, render) in [("physics", false), ("rendered_128", true)] {
        for task in [0usize, 9] {
            let cfg = SimConfig {
                render,
                ..SimConfig::default()
            };
            let mut env = TabletopEnv::new(cfg).expect("env");
            let mut rng = sim_rng(0);
            let mut init = 0;
            env.reset(ResetRequest {
                task,
                init_state: 0,
                seed: 0,
            })
            .expect("reset");
            c.bench_function(&format!("step/{label}/task{task}"), |b| {
                b.iter(|| {
                    let a = env.expert_action(0.1, &mut rng).expect("expert");
                    let r = env.step(&a).expect("step");
                    if r.done || r.truncated {
                        init = (init + 1) % 50;
                        env.reset(ResetRequest {
                            task,
                            init_state: init,
                            seed: 0,
                        })
                        .expect("reset");
                    }
                });
            });
        }
    }
}

criterion_group!(benches, bench_step);
criterion_main!(benches);
