#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A policy kind added from outside the crate (docs/policy.md, "Adding a
//! policy kind"): a toy policy that ignores its input and samples each
//! action dimension from learned logits over 5 bins, trained by the
//! trainer's own loop (rollouts, world-model rewards, GRPO advantages,
//! checkpoint, resume, export) through `wmrl_train::PolicyKind` alone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wmrl_policy::{
    ACTION_DIM, ActionPolicy, ActionTokenizer, Learner, PolicyInput, Sample, UpdateBatch,
    UpdateSettings, UpdateStats,
};
use wmrl_train::{ActorOptions, Placement, PolicyKind, PolicyKinds, TrainConfig, Trainer};

const BINS: usize = 5;

/// The toy's whole state, and its checkpoint directory's config.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Toy {
    toy_logits: Vec<f32>,
}

impl Toy {
    fn read(path: &Path) -> wmrl_policy::Result<Toy> {
        let err = |message: String| wmrl_policy::PolicyError::Json {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))
    }
    fn write(&self, dir: &Path, name: &str) -> wmrl_policy::Result<()> {
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(dir.join(name), serde_json::to_string(self).unwrap()))
            .map_err(|e| wmrl_policy::PolicyError::Io {
                path: dir.display().to_string(),
                message: e.to_string(),
            })
    }
    fn probs(&self, dim: usize, temperature: f32) -> Vec<f32> {
        let t = if temperature > 0.0 { temperature } else { 1.0 };
        let l = &self.toy_logits[dim * BINS..(dim + 1) * BINS];
        let e: Vec<f32> = l.iter().map(|x| (x / t).exp()).collect();
        let z: f32 = e.iter().sum();
        e.iter().map(|x| x / z).collect()
    }
}

impl ActionPolicy for Toy {
    fn kind(&self) -> &'static str {
        "toy"
    }
    fn chunk(&self) -> usize {
        1
    }
    fn sample_streams(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
        streams: &[u64],
    ) -> wmrl_policy::Result<Vec<Sample>> {
        let tok = ActionTokenizer::new(BINS);
        let rows = inputs.len();
        Ok((0..rows)
            .map(|i| {
                let mut rng =
                    wmrl_core::rng::SplitMix64::new(seed ^ streams[i].wrapping_mul(0x9E37));
                let (mut tokens, mut logprobs, mut action) = (vec![], vec![], [0.0; ACTION_DIM]);
                for (d, a) in action.iter_mut().enumerate() {
                    let p = self.probs(d, temperature);
                    let u = (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32;
                    let t = if temperature <= 0.0 {
                        (0..BINS).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap()
                    } else {
                        let mut acc = 0.0;
                        (0..BINS)
                            .find(|&b| {
                                acc += p[b];
                                u < acc
                            })
                            .unwrap_or(BINS - 1)
                    };
                    tokens.push(t as u32);
                    logprobs.push(p[t].ln());
                    *a = tok.decode(t as u32);
                }
                Sample {
                    actions: vec![action],
                    tokens,
                    logprobs,
                }
            })
            .collect())
    }
}

/// REINFORCE on the logits: each executed token moves its dimension's
/// logits by `lr * advantage * (onehot - p)`.
impl Learner for Toy {
    fn policy(&self) -> &dyn ActionPolicy {
        self
    }
    fn update(
        &mut self,
        batch: &UpdateBatch<'_>,
        _: &UpdateSettings,
    ) -> wmrl_policy::Result<UpdateStats> {
        let mut grad = vec![0.0f32; self.toy_logits.len()];
        for s in &batch.samples {
            for (d, (&t, &m)) in s.tokens.iter().zip(s.mask).enumerate() {
                let p = self.probs(d % ACTION_DIM, batch.temperature);
                for (b, pb) in p.iter().enumerate() {
                    let onehot = if b == t as usize { 1.0 } else { 0.0 };
                    grad[(d % ACTION_DIM) * BINS + b] += m * s.advantage * (onehot - pb);
                }
            }
        }
        let norm = grad.iter().map(|g| g * g).sum::<f32>().sqrt();
        self.toy_logits
            .iter_mut()
            .zip(&grad)
            .for_each(|(l, g)| *l += 0.05 * g);
        Ok(UpdateStats {
            minibatches: 1,
            grad_norm: norm as f64,
            ..Default::default()
        })
    }
    fn save(&self, dir: &Path) -> wmrl_policy::Result<()> {
        self.write(dir, "toy.json")
    }
    fn restore(&mut self, dir: &Path) -> wmrl_policy::Result<()> {
        *self = Toy::read(&dir.join("toy.json"))?;
        Ok(())
    }
    fn export(&self, _start: &Path, dst: &Path) -> wmrl_policy::Result<()> {
        self.write(dst, wmrl_policy::CONFIG_FILE)
    }
}

struct ToyKind;

impl PolicyKind for ToyKind {
    fn name(&self) -> &'static str {
        "toy"
    }
    fn holds(&self, dir: &Path) -> bool {
        Toy::read(&dir.join(wmrl_policy::CONFIG_FILE)).is_ok()
    }
    fn load_actor(
        &self,
        dir: &Path,
        _: &ActorOptions<'_>,
    ) -> wmrl_train::Result<Box<dyn ActionPolicy>> {
        Ok(Box::new(Toy::read(&dir.join(wmrl_policy::CONFIG_FILE))?))
    }
    fn load_learner(
        &self,
        cfg: &TrainConfig,
        _: &Placement,
    ) -> wmrl_train::Result<Box<dyn Learner>> {
        Ok(Box::new(Toy::read(
            &cfg.policy.join(wmrl_policy::CONFIG_FILE),
        )?))
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn a_toy_policy_kind_trains_resumes_and_exports_through_the_registry() {
    if !wmrl_onnx::runtime_available() {
        eprintln!("SKIPPED: ONNX Runtime library not found; run scripts/setup");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let start = tmp.path().join("toy");
    let zero = Toy {
        toy_logits: vec![0.0; ACTION_DIM * BINS],
    };
    zero.write(&start, wmrl_policy::CONFIG_FILE).unwrap();
    let kinds = PolicyKinds::builtin().with(ToyKind).unwrap();
    assert_eq!(kinds.resolve(&start, None).unwrap().name(), "toy");

    let wm = repo().join("models/progress-tiny/model.onnx");
    let sets: Vec<String> = vec![
        "arm=\"dense_raw\"".into(),
        "steps=2".into(),
        format!("policy={:?}", start.display().to_string()),
        "policy_type=\"toy\"".into(),
        format!("world_model.path={:?}", wm.display().to_string()),
        "rollout.n_groups=2".into(),
        "rollout.group_size=3".into(),
        "rollout.max_steps=4".into(),
        "update.loss.kl_beta=0.0".into(),
        "eval.every=0".into(),
        "eval.at_start=false".into(),
        "eval.in_domain=false".into(),
    ];
    let cfg = TrainConfig::load_with(&repo().join("configs/grpo_sim.toml"), &sets).unwrap();
    // The built-in registry does not know the kind the config names.
    let err = Trainer::create(cfg.clone(), &tmp.path().join("unknown"))
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("unknown policy kind `toy`"),
        "{err}"
    );

    let whole = tmp.path().join("whole");
    let mut t = Trainer::create_with(cfg.clone(), &whole, &kinds).unwrap();
    assert_eq!(t.policy().kind(), "toy");
    let first = t.train_step().unwrap();
    assert!(
        first.samples_updated > 0 && first.grad_norm > 0.0,
        "{first:?}"
    );
    t.checkpoint().unwrap();
    let moved = Toy::read(&whole.join("checkpoint/toy.json")).unwrap();
    assert_ne!(moved, zero, "the update moved the logits");
    let second = t.train_step().unwrap();
    drop(t);

    // Resumed from the step-1 checkpoint: the same second step.
    let mut back = Trainer::resume_with(&whole, None, &kinds).unwrap();
    assert_eq!(back.steps_done(), 1);
    // (Timings aside: what the step computed.)
    let what = |m: &wmrl_train::metrics::StepMetrics| {
        let l = &m.ledger;
        (
            m.adv_abs_mean,
            m.wm_score_mean,
            m.samples_updated,
            m.grad_norm,
            l.sim_steps,
            l.wm_rollouts,
        )
    };
    assert_eq!(what(&back.train_step().unwrap()), what(&second));
    back.checkpoint().unwrap();
    drop(back);
    let out = tmp.path().join("export");
    let (kind, step) =
        wmrl_train::export_policy_with(&whole, &out, wmrl_run::DeviceChoice::Cpu, &kinds).unwrap();
    assert_eq!((kind, step), ("toy", 2));
    assert_eq!(kinds.resolve(&out, None).unwrap().name(), "toy");
    // A kind that brings no SFT of its own is refused by `wmrl sft`, by
    // name, before anything is read or written.
    let sft_out = tmp.path().join("sft");
    let err = kinds
        .get("toy")
        .unwrap()
        .sft(wmrl_train::SftRequest {
            demos: &tmp.path().join("no-demos"),
            out: &sft_out,
            run: wmrl_policy::RunConfig::load(None, None).unwrap(),
            preset: None,
            init: None,
            resume: false,
            max_episodes: None,
            device: &wmrl_policy::candle::Device::Cpu,
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("the `toy` policy kind has no SFT"), "{err}");
    assert!(!sft_out.exists());
}
