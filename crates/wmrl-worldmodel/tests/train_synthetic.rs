#![allow(clippy::unwrap_used)]
//! Training on synthetic episodes whose frames encode progress learns it:
//! held-out loss falls and predicted progress ranks like the oracle.

mod common;

use wmrl_worldmodel::train::{self, EpisodeData, TrainConfig};
use wmrl_worldmodel::{metrics, synthetic};

#[test]
fn learns_progress_on_synthetic_episodes() {
    let eps: Vec<EpisodeData> = (0..24)
        .map(|i| synthetic::episode(i, 16, 12 + (i as usize % 5), i % 3 != 0))
        .map(|e| EpisodeData::from_episode(&e, 0, 32, 0.999).unwrap())
        .collect();
    let cfg = TrainConfig {
        net: common::tiny_config(),
        steps: 150,
        batch_size: 8,
        lr: 5e-3,
        eval_every: 50,
        seed: 1,
        ..Default::default()
    };
    let (tr, va) = train::split(eps, 0.25, cfg.seed);
    assert_eq!(va.len(), 6);
    let trained = train::train(&tr, &va, &cfg, &candle_core::Device::Cpu, &mut |_, _| {}).unwrap();
    let h = &trained.history;
    let (first, last) = (h[0].val_loss.unwrap(), h.last().unwrap().val_loss.unwrap());
    assert!(
        last < first,
        "validation loss did not fall: {first} -> {last}"
    );

    // per-frame Spearman on held-out rollouts, candle side
    let dev = candle_core::Device::Cpu;
    let choices: Vec<(usize, usize)> = va
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.frames.len()))
        .collect();
    let b = train::make_batch(&va, &choices, &trained.config.net, &dev).unwrap();
    let (p, _) = trained.net.predict(&b.frames, &b.tokens).unwrap();
    let pred: Vec<f32> = p.flatten_all().unwrap().to_vec1().unwrap();
    let oracle: Vec<f32> = b.progress.flatten_all().unwrap().to_vec1().unwrap();
    let rho = metrics::spearman(&pred, &oracle).unwrap();
    assert!(rho > 0.6, "held-out Spearman {rho}");
}

#[test]
fn save_and_load_round_trip() {
    let eps: Vec<EpisodeData> = (0..4)
        .map(|i| {
            EpisodeData::from_episode(&synthetic::episode(i, 16, 10, true), 0, 16, 0.999).unwrap()
        })
        .collect();
    let cfg = TrainConfig {
        net: common::tiny_config(),
        steps: 2,
        batch_size: 2,
        ..Default::default()
    };
    let trained = train::train(&eps, &[], &cfg, &candle_core::Device::Cpu, &mut |_, _| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    train::save(dir.path(), &trained, &train::SplitRecord::default()).unwrap();
    let (net, _, cfg2) = train::load(dir.path()).unwrap();
    assert_eq!(cfg2.net, trained.config.net);
    let dev = candle_core::Device::Cpu;
    let b = train::make_batch(&eps, &[(0, 10)], &cfg2.net, &dev).unwrap();
    let a = trained.net.predict(&b.frames, &b.tokens).unwrap().0;
    let c = net.predict(&b.frames, &b.tokens).unwrap().0;
    let d: f32 = (a - c)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap();
    assert_eq!(d, 0.0);
}
