//! Unit tests over tiny dimensions, plus a toy environment that implements
//! `wmrl_env::Environment` (two tasks: push a 1-D point left or right).

use candle_core::{D, DType, Device, Tensor};
use wmrl_env::{
    Action, CameraSpec, EnvSpec, Environment, Episode, EpisodeStep, Frame, LocalVecEnv,
    Observation, ResetRequest, StepResult, TaskSpec,
};
use wmrl_grpo::OptimConfig;

use crate::*;

pub(crate) fn tiny_cfg(decoding: Decoding) -> PolicyConfig {
    PolicyConfig {
        preset: "test".into(),
        image_size: 16,
        patch_size: 8,
        use_wrist: false,
        use_prev_frame: true,
        vision_width: 32,
        vision_layers: 1,
        vision_heads: 2,
        d_model: 32,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        mlp_hidden: 64,
        text_len: 12,
        text_patch: 2,
        text_vocab: wmrl_env::text::BYTE_VOCAB,
        proprio_dim: 2,
        proprio_mean: vec![],
        proprio_std: vec![],
        action_dim: ACTION_DIM,
        n_bins: 256,
        chunk: 2,
        decoding,
        norm_eps: 1e-6,
        init_seed: 7,
    }
}

fn frame(seed: u8) -> Frame {
    let rgb = (0..20 * 20 * 3)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect();
    Frame {
        width: 20,
        height: 20,
        rgb,
    }
}

fn inputs(n: usize) -> Vec<PolicyInput> {
    (0..n)
        .map(|i| PolicyInput {
            instruction: if i % 2 == 0 {
                "go left".into()
            } else {
                "go right".into()
            },
            frames: vec![frame(i as u8 + 1)],
            prev_frame: None,
            proprio: vec![i as f32 * 0.1, -0.3],
        })
        .collect()
}

#[test]
fn sampled_logprob_equals_log_softmax_at_the_token() {
    for decoding in [Decoding::Parallel, Decoding::Autoregressive] {
        let p = Policy::new(tiny_cfg(decoding), &Device::Cpu, DType::F32).expect("policy");
        let xs = inputs(3);
        for temp in [0.0f32, 0.7, 1.0] {
            let samples = p.sample(&xs, temp, 11).expect("sample");
            let prep = p.prepare(&xs).expect("prep");
            let toks = p
                .tokens_tensor(&samples.iter().map(|s| s.tokens.clone()).collect::<Vec<_>>())
                .expect("t");
            // Independent path: raw logits -> log_softmax -> index.
            let logits = p.chunk_logits(&prep, &toks).expect("logits");
            let scaled = if temp > 0.0 {
                (logits / f64::from(temp)).expect("s")
            } else {
                logits
            };
            let lsm = candle_nn::ops::log_softmax(&scaled, D::Minus1)
                .expect("lsm")
                .to_vec3::<f32>()
                .expect("v");
            for (b, s) in samples.iter().enumerate() {
                assert_eq!(s.tokens.len(), 14);
                assert_eq!(s.actions.len(), 2);
                for (j, (&tok, &lp)) in s.tokens.iter().zip(&s.logprobs).enumerate() {
                    let want = lsm[b][j][tok as usize];
                    assert!(
                        (want - lp).abs() < 1e-4,
                        "{decoding:?} t={temp} b={b} j={j}: {lp} vs {want}"
                    );
                    assert!(lp <= 0.0);
                }
                assert_eq!(s.actions[1][3], p.tokenizer().decode(s.tokens[7 + 3]));
            }
            let stats = p
                .token_stats(&prep, &toks, temp)
                .expect("stats")
                .logprobs
                .to_vec2::<f32>()
                .expect("v");
            for (b, s) in samples.iter().enumerate() {
                for (j, &lp) in s.logprobs.iter().enumerate() {
                    assert!((stats[b][j] - lp).abs() < 1e-4);
                }
            }
        }
    }
}

#[test]
fn sampling_is_deterministic_per_seed_and_row() {
    let p = Policy::new(tiny_cfg(Decoding::Parallel), &Device::Cpu, DType::F32).expect("policy");
    let xs = inputs(4);
    let a = p.sample(&xs, 1.0, 5).expect("a");
    let b = p.sample(&xs, 1.0, 5).expect("b");
    let c = p.sample(&xs, 1.0, 6).expect("c");
    assert_eq!(a, b);
    assert_ne!(
        a.iter().map(|s| &s.tokens).collect::<Vec<_>>(),
        c.iter().map(|s| &s.tokens).collect::<Vec<_>>()
    );
    // Row 0 alone draws what it drew in the batch.
    let solo = p.sample(&xs[..1], 1.0, 5).expect("solo");
    assert_eq!(solo[0].tokens, a[0].tokens);
    // Same init seed -> same parameters.
    let q = Policy::new(tiny_cfg(Decoding::Parallel), &Device::Cpu, DType::F32).expect("policy");
    assert_eq!(q.sample(&xs, 1.0, 5).expect("q"), a);
}

#[test]
fn checkpoint_round_trip_and_corrupt_checkpoints_name_the_tensor() {
    let dir = tempfile::tempdir().expect("tmp");
    let p =
        Policy::new(tiny_cfg(Decoding::Autoregressive), &Device::Cpu, DType::F32).expect("policy");
    p.save(dir.path()).expect("save");
    let q = Policy::load(dir.path()).expect("load");
    assert_eq!(q.config(), p.config());
    let xs = inputs(2);
    assert_eq!(
        p.sample(&xs, 0.8, 3).expect("p"),
        q.sample(&xs, 0.8, 3).expect("q")
    );

    // Mismatched config: a wider LM than the weights.
    let bad = tempfile::tempdir().expect("tmp");
    std::fs::copy(dir.path().join(WEIGHTS_FILE), bad.path().join(WEIGHTS_FILE)).expect("copy");
    let mut cfg = p.config().clone();
    cfg.mlp_hidden = 48;
    std::fs::write(
        bad.path().join(CONFIG_FILE),
        serde_json::to_string(&cfg).expect("j"),
    )
    .expect("w");
    let err = Policy::load(bad.path()).expect_err("mismatch").to_string();
    assert!(
        err.contains("lm.blocks.0.mlp.down.weight") || err.contains("mlp.gate.weight"),
        "{err}"
    );
    assert!(err.contains("shape"), "{err}");

    // Truncated weights file.
    std::fs::copy(dir.path().join(CONFIG_FILE), bad.path().join(CONFIG_FILE)).expect("copy");
    let bytes = std::fs::read(dir.path().join(WEIGHTS_FILE)).expect("read");
    std::fs::write(bad.path().join(WEIGHTS_FILE), &bytes[..bytes.len() - 100]).expect("w");
    let err = Policy::load(bad.path()).expect_err("truncated").to_string();
    assert!(
        err.contains("tensor `") && err.contains("truncated"),
        "{err}"
    );

    // A tensor poisoned with NaN.
    let mut map = read_tensors(&dir.path().join(WEIGHTS_FILE), &Device::Cpu).expect("read");
    let shape = map["lm.head.weight"].dims().to_vec();
    map.insert(
        "lm.head.weight".into(),
        Tensor::full(f32::NAN, shape, &Device::Cpu).expect("nan"),
    );
    candle_core::safetensors::save(&map, bad.path().join(WEIGHTS_FILE)).expect("save");
    let err = Policy::load(bad.path()).expect_err("nan").to_string();
    assert!(
        err.contains("lm.head.weight") && err.contains("NaN"),
        "{err}"
    );

    // A missing tensor.
    map.remove("lm.head.weight");
    candle_core::safetensors::save(&map, bad.path().join(WEIGHTS_FILE)).expect("save");
    let err = Policy::load(bad.path()).expect_err("missing").to_string();
    assert!(
        err.contains("lm.head.weight") && err.contains("missing"),
        "{err}"
    );
}

#[test]
fn nll_loss_decreases_on_a_fixed_batch() {
    for decoding in [Decoding::Parallel, Decoding::Autoregressive] {
        let p = Policy::new(tiny_cfg(decoding), &Device::Cpu, DType::F32).expect("policy");
        let xs = inputs(4);
        let prep = p.prepare(&xs).expect("prep");
        let toks: Vec<Vec<u32>> = (0..4)
            .map(|i| (0..14).map(|j| ((i * 37 + j * 11) % 256) as u32).collect())
            .collect();
        let toks = p.tokens_tensor(&toks).expect("t");
        let mask = Tensor::ones((4, 14), DType::F32, &Device::Cpu).expect("m");
        let mut opt = PolicyOptimizer::new(
            &p,
            OptimConfig {
                lr: 3e-3,
                warmup_steps: 0,
                ..OptimConfig::default()
            },
        )
        .expect("opt");
        let (l0, _) = nll_loss(&p, &prep, &toks, &mask).expect("l0");
        let l0 = l0.to_scalar::<f32>().expect("s");
        for _ in 0..40 {
            let (l, _) = nll_loss(&p, &prep, &toks, &mask).expect("l");
            opt.step(&l).expect("step");
        }
        let (l1, acc) = nll_loss(&p, &prep, &toks, &mask).expect("l1");
        let l1 = l1.to_scalar::<f32>().expect("s");
        assert!(l0 > 5.0 && l1 < 0.5 * l0, "{decoding:?}: {l0} -> {l1}");
        assert!(acc > 0.5, "{decoding:?}: token accuracy {acc}");
    }
}

#[test]
fn reference_logprobs_in_chunks_equal_one_pass() {
    let mut cfg = tiny_cfg(Decoding::Parallel);
    cfg.d_model = 16;
    cfg.mlp_hidden = 24;
    cfg.vision_width = 16;
    let p = Policy::new(cfg, &Device::Cpu, DType::F32).expect("policy");
    // One row more than a chunk, so the last chunk has a single row.
    let n = crate::grpo::REFERENCE_CHUNK + 1;
    let xs: Vec<PolicyInput> = inputs(8).into_iter().cycle().take(n).collect();
    let samples = p.sample(&xs, 1.0, 5).expect("sample");
    let tokens: Vec<Vec<u32>> = samples.iter().map(|s| s.tokens.clone()).collect();
    let old: Vec<Vec<f32>> = samples.iter().map(|s| s.logprobs.clone()).collect();
    let prepared = p.prepare(&xs).expect("prep");
    let batch = GrpoBatch::new(&p, prepared.clone(), &tokens, &old, &vec![1.0; n], None)
        .expect("batch")
        .with_reference(&p, 1.0)
        .expect("reference");
    let whole = p
        .token_stats(&prepared, &p.tokens_tensor(&tokens).expect("t"), 1.0)
        .expect("stats")
        .logprobs;
    let got = batch.ref_logprobs.expect("set");
    assert_eq!(got.dims(), whole.dims());
    let diff = max_abs(&(got - whole).expect("diff"));
    assert!(diff < 1e-4, "max |diff| {diff}");
}

/// Largest absolute entry of an f32 tensor.
fn max_abs(t: &Tensor) -> f32 {
    t.abs()
        .and_then(|a| a.max_all())
        .and_then(|m| m.to_scalar::<f32>())
        .expect("max |x|")
}

#[test]
fn head_feature_loss_equals_the_full_loss_and_its_head_gradient() {
    for decoding in [Decoding::Parallel, Decoding::Autoregressive] {
        let mut cfg = tiny_cfg(decoding);
        cfg.d_model = 16;
        cfg.mlp_hidden = 24;
        cfg.vision_width = 16;
        let p = Policy::new(cfg, &Device::Cpu, DType::F32).expect("policy");
        // A reference that differs in the head only (a frozen-backbone
        // update's reference), so the KL term is not zero.
        let r = p.deep_clone().expect("clone");
        let w = r.vars()["lm.head.weight"].as_tensor();
        let bumped = (w + w.randn_like(0.0, 0.05).expect("noise")).expect("add");
        r.vars()["lm.head.weight"].set(&bumped).expect("set");
        let xs = inputs(6);
        let samples = p.sample(&xs, 0.7, 3).expect("sample");
        let tokens: Vec<Vec<u32>> = samples.iter().map(|s| s.tokens.clone()).collect();
        let old: Vec<Vec<f32>> = samples
            .iter()
            .map(|s| s.logprobs.iter().map(|l| l - 0.1).collect())
            .collect();
        let adv = [1.0, -0.5, 0.25, -1.0, 0.5, -0.25];
        let full = GrpoBatch::new(&p, p.prepare(&xs).expect("prep"), &tokens, &old, &adv, None)
            .expect("batch");
        let fast = full
            .clone()
            .with_head_features(&p)
            .expect("features")
            .with_reference(&r, 0.7)
            .expect("reference");
        let full = full.with_reference(&r, 0.7).expect("reference");
        // The head inputs recorded while sampling: same samples, and a batch
        // built from them alone scores like the one that recomputes them.
        let (again, recorded) = p.sample_with_features(&xs, 0.7, 3).expect("sample");
        assert_eq!(again, samples, "{decoding:?}: recording changes no sample");
        let from_rollout = GrpoBatch::from_features(&p, &recorded, &tokens, &old, &adv, None)
            .expect("batch")
            .with_reference(&r, 0.7)
            .expect("reference");
        let cfg = GrpoConfig {
            temperature: 0.7,
            entropy_coef: 0.01,
            ..GrpoConfig::default()
        };
        let (l_full, s_full) = grpo_loss(&p, None, &full, &cfg).expect("loss");
        let (l_fast, s_fast) = grpo_loss(&p, None, &fast, &cfg).expect("loss");
        let (_, s_rec) = grpo_loss(&p, None, &from_rollout, &cfg).expect("loss");
        assert!(
            (s_full.loss - s_rec.loss).abs() < 1e-5 && (s_full.kl_ref - s_rec.kl_ref).abs() < 1e-6,
            "{decoding:?}: loss {} vs {} from the recorded features",
            s_full.loss,
            s_rec.loss
        );
        // A row of the wrong width is refused, not reshaped.
        let mut short = recorded.clone();
        short[0].pop();
        assert!(GrpoBatch::from_features(&p, &short, &tokens, &old, &adv, None).is_err());
        assert!(s_full.kl_ref > 0.0, "{decoding:?}: the KL term is live");
        assert!(
            (s_full.loss - s_fast.loss).abs() < 1e-5,
            "{decoding:?}: loss {} vs {}",
            s_full.loss,
            s_fast.loss
        );
        let head = p.vars()["lm.head.weight"].as_tensor();
        let g_full = l_full
            .backward()
            .expect("bwd")
            .get(head)
            .expect("g")
            .clone();
        let g_fast_all = l_fast.backward().expect("bwd");
        let g_fast = g_fast_all.get(head).expect("g");
        let diff = max_abs(&(&g_full - g_fast).expect("diff"));
        let scale = max_abs(&g_full);
        assert!(
            scale > 0.0 && diff < 1e-4 * scale.max(1.0),
            "{decoding:?}: {diff} of {scale}"
        );
        // Nothing before the head is in the fast loss's graph.
        let before = p.vars()["lm.final_norm.weight"].as_tensor();
        assert!(g_fast_all.get(before).is_none(), "{decoding:?}");
    }
}

#[test]
fn grpo_loss_gradient_matches_finite_differences() {
    let mut cfg = tiny_cfg(Decoding::Autoregressive);
    cfg.d_model = 16;
    cfg.mlp_hidden = 24;
    cfg.vision_width = 16;
    let p = Policy::new(cfg.clone(), &Device::Cpu, DType::F64).expect("policy");
    // The reference differs from the policy so the KL term has a gradient.
    let mut rcfg = cfg.clone();
    rcfg.init_seed = 99;
    let reference = Policy::new(rcfg, &Device::Cpu, DType::F64).expect("ref");
    let xs = inputs(3);
    let samples = p.sample(&xs, 1.0, 1).expect("sample");
    // Old log-probs perturbed so ratios spread over both clip edges.
    let old: Vec<Vec<f32>> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.logprobs
                .iter()
                .enumerate()
                .map(|(j, &l)| l + 0.4 * (((i * 14 + j) as f32 * 1.7).sin()))
                .collect()
        })
        .collect();
    let tokens: Vec<Vec<u32>> = samples.iter().map(|s| s.tokens.clone()).collect();
    let mut mask = vec![vec![1.0f32; 14]; 3];
    mask[2][10..].iter_mut().for_each(|m| *m = 0.0);
    let batch = GrpoBatch::new(
        &p,
        p.prepare(&xs).expect("prep"),
        &tokens,
        &old,
        &[1.0, -0.5, 0.8],
        Some(&mask),
    )
    .expect("batch");
    let gcfg = GrpoConfig {
        clip_low: 0.2,
        clip_high: 0.28,
        kl_beta: 0.5,
        entropy_coef: 0.01,
        temperature: 1.0,
    };
    let (loss, stats) = grpo_loss(&p, Some(&reference), &batch, &gcfg).expect("loss");
    assert!(
        stats.clip_frac > 0.0 && stats.clip_frac < 1.0,
        "clip fraction {}",
        stats.clip_frac
    );
    assert!(stats.kl_ref > 0.0);
    let grads = loss.backward().expect("backward");
    let h = 1e-5;
    let mut checked = 0;
    for name in [
        "lm.head.weight",
        "lm.blocks.1.attn.q.weight",
        "lm.blocks.0.mlp.gate.weight",
        "vision.patch_embed.weight",
        "lm.action_embed",
        "lm.text_embed",
    ] {
        let var = &p.vars()[name];
        let g = grads
            .get(var.as_tensor())
            .expect("grad")
            .flatten_all()
            .expect("f")
            .to_vec1::<f64>()
            .expect("v");
        let base = var.as_tensor().copy().expect("copy");
        let flat = base.flatten_all().expect("f").to_vec1::<f64>().expect("v");
        // Largest-gradient entries plus a fixed one.
        let mut order: Vec<usize> = (0..g.len()).collect();
        order.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
        for &k in order.iter().take(3).chain([g.len() / 2].iter()) {
            let eval_at = |delta: f64| -> f64 {
                let mut v = flat.clone();
                v[k] += delta;
                var.set(&Tensor::from_vec(v, base.shape(), &Device::Cpu).expect("t"))
                    .expect("set");
                grpo_loss(&p, Some(&reference), &batch, &gcfg)
                    .expect("l")
                    .1
                    .loss
            };
            let fd = (eval_at(h) - eval_at(-h)) / (2.0 * h);
            var.set(&base).expect("restore");
            let tol = 1e-6 + 1e-4 * fd.abs().max(g[k].abs());
            assert!(
                (fd - g[k]).abs() < tol,
                "{name}[{k}]: analytic {} vs finite difference {fd}",
                g[k]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 24);
}

/// Two tasks: move a point on a line to x > 0.5 (task 0, "go right") or
/// x < -0.5 (task 1, "go left") with action[0]; the frame's colour shows x.
#[derive(Clone)]
pub(crate) struct LineEnv {
    spec: EnvSpec,
    task: usize,
    x: f32,
    t: usize,
}

impl LineEnv {
    pub(crate) fn new() -> Self {
        let task = |index, name: &str, instruction: &str| TaskSpec {
            index,
            name: name.into(),
            instruction: instruction.into(),
            n_init_states: 8,
            max_steps: 12,
        };
        Self {
            spec: EnvSpec {
                suite: "line".into(),
                action_dim: 7,
                action_low: -1.0,
                action_high: 1.0,
                control_hz: 10.0,
                cameras: vec![CameraSpec {
                    name: "agentview".into(),
                    width: 16,
                    height: 16,
                }],
                proprio_dim: 2,
                tasks: vec![task(0, "right", "go right"), task(1, "left", "go left")],
            },
            task: 0,
            x: 0.0,
            t: 0,
        }
    }

    fn obs(&self) -> Observation {
        let v = ((self.x + 1.0) * 120.0).clamp(0.0, 255.0) as u8;
        Observation {
            frames: vec![Frame {
                width: 16,
                height: 16,
                rgb: vec![v; 16 * 16 * 3],
            }],
            proprio: vec![self.x, self.t as f32 / 12.0],
            progress: None,
        }
    }

    pub(crate) fn expert(&self) -> Action {
        let dir = if self.task == 0 { 0.6 } else { -0.6 };
        vec![dir, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    }
}

impl Environment for LineEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, r: ResetRequest) -> wmrl_env::Result<Observation> {
        self.task = r.task;
        self.x = (r.init_state as f32 - 3.5) * 0.05;
        self.t = 0;
        Ok(self.obs())
    }
    fn step(&mut self, a: &Action) -> wmrl_env::Result<StepResult> {
        let a = self.spec.sanitize_action(a)?;
        self.x += 0.2 * a[0];
        self.t += 1;
        let success = if self.task == 0 {
            self.x > 0.5
        } else {
            self.x < -0.5
        };
        Ok(StepResult {
            obs: self.obs(),
            reward: f32::from(u8::from(success)),
            success,
            done: success,
            truncated: !success && self.t >= 12,
        })
    }
}

pub(crate) fn expert_episodes(n_per_task: usize) -> Vec<Episode> {
    let mut out = Vec::new();
    for task in 0..2 {
        for s in 0..n_per_task {
            let mut env = LineEnv::new();
            let mut obs = env
                .reset(ResetRequest {
                    task,
                    init_state: (2 * s) % 8,
                    seed: 0,
                })
                .expect("reset");
            let mut steps = Vec::new();
            loop {
                let a = env.expert();
                let r = env.step(&a).expect("step");
                steps.push(EpisodeStep {
                    frames: obs.frames.clone(),
                    proprio: obs.proprio.clone(),
                    action: a,
                    progress: None,
                });
                obs = r.obs;
                if r.done || r.truncated {
                    out.push(Episode {
                        suite: "line".into(),
                        task,
                        init_state: (2 * s) % 8,
                        seed: 0,
                        instruction: env.spec.tasks[task].instruction.clone(),
                        cameras: env.spec.cameras.clone(),
                        success: r.success,
                        final_progress: None,
                        source: "expert".into(),
                        steps,
                    });
                    break;
                }
            }
        }
    }
    out
}

/// `EvalConfig::episode_dir` writes every evaluated episode in the episode
/// format: one file per episode, the steps the environment took, the
/// actions the policy executed (bin centres), the outcome the report gives;
/// with `episode_successes_only` only the successes; and the files load as
/// SFT data (the self-imitation path: `wmrl eval --save-episodes`, then
/// `wmrl sft --init`).
#[test]
fn evaluation_writes_its_episodes_and_they_load_as_sft_data() {
    let cfg = tiny_cfg(Decoding::Parallel);
    let policy = Policy::new(cfg.clone(), &Device::Cpu, DType::F32).expect("policy");
    let envs: Vec<LineEnv> = (0..3).map(|_| LineEnv::new()).collect();
    let mut env = LocalVecEnv::new(envs).expect("env");
    let dir = tempfile::tempdir().expect("tmp");
    let ecfg = EvalConfig {
        init_states: vec![0, 1, 2, 3],
        temperature: 1.0,
        repeats: 2,
        episode_dir: Some(dir.path().to_path_buf()),
        ..EvalConfig::default()
    };
    let report = evaluate(&policy, &mut env, &ecfg).expect("eval");
    let files = wmrl_env::list_episodes(dir.path()).expect("list");
    assert_eq!(files.len(), report.episodes.len());
    let tok = ActionTokenizer::new(cfg.n_bins);
    let mut successes = 0;
    for (i, path) in files.iter().enumerate() {
        let ep = wmrl_env::read_episode(path).expect("read");
        let r = &report.episodes[i];
        assert_eq!(
            (ep.task, ep.init_state, ep.success),
            (r.task, r.init_state, r.success)
        );
        assert_eq!(ep.steps.len(), r.steps, "episode {i}");
        for st in &ep.steps {
            // Executed actions are bin centres: they tokenize back exactly.
            let back = tok.decode_all(&tok.encode_all(&st.action));
            let err = back
                .iter()
                .zip(&st.action)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(err < 1e-5, "episode {i}: {err}");
        }
        successes += usize::from(ep.success);
    }
    assert_eq!(successes, report.overall.successes);
    // The untrained policy's random walk at T 1 both succeeds and fails
    // here, so the loading and filtering below are exercised.
    assert!(
        successes > 0 && successes < files.len(),
        "{successes} of {}",
        files.len()
    );
    let data = SftDataset::from_dir(&cfg, dir.path(), None, false).expect("sft data");
    assert_eq!(data.n_episodes, successes);
    let only = tempfile::tempdir().expect("tmp");
    let report2 = evaluate(
        &policy,
        &mut env,
        &EvalConfig {
            episode_dir: Some(only.path().to_path_buf()),
            episode_successes_only: true,
            ..ecfg.clone()
        },
    )
    .expect("eval");
    let kept = wmrl_env::list_episodes(only.path()).expect("list");
    assert_eq!(kept.len(), report2.overall.successes);
}

/// The toy task's SFT data (8 expert episodes) and a policy normalised to it.
fn toy_sft() -> (SftDataset, Policy) {
    let cfg = tiny_cfg(Decoding::Parallel);
    let mut data = SftDataset::default();
    for ep in expert_episodes(4) {
        data.push_episode(&cfg, &ep).expect("push");
    }
    assert_eq!(data.n_episodes, 8);
    let (mean, std) = data.proprio_stats(2);
    let cfg = PolicyConfig {
        proprio_mean: mean,
        proprio_std: std,
        ..cfg
    };
    let policy = Policy::new(cfg, &Device::Cpu, DType::F32).expect("policy");
    (data, policy)
}

/// The `step` of every line of an SFT run's metrics.jsonl.
fn logged_steps(metrics: &std::path::Path) -> Vec<u64> {
    std::fs::read_to_string(metrics)
        .expect("metrics")
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("line")["step"]
                .as_u64()
                .expect("step")
        })
        .collect()
}

/// The SFT checkpoint in `out` succeeds on the toy task's episodes (with
/// GIFs written), and an untrained policy of its shape does much worse.
fn assert_trained_policy_succeeds(out: &std::path::Path, final_loss: f64) {
    let trained = Policy::load(out).expect("load");
    let envs: Vec<LineEnv> = (0..3).map(|_| LineEnv::new()).collect();
    let mut env = LocalVecEnv::new(envs).expect("env");
    let gifs = tempfile::tempdir().expect("tmp");
    let ecfg = EvalConfig {
        init_states: vec![1, 3, 5, 7],
        gif_dir: Some(gifs.path().to_path_buf()),
        n_gifs: 2,
        ..EvalConfig::default()
    };
    let report = evaluate(&trained, &mut env, &ecfg).expect("eval");
    assert_eq!(report.episodes.len(), 8);
    assert_eq!(report.per_task.len(), 2);
    assert_eq!(
        report.overall.successes,
        report.episodes.iter().filter(|e| e.success).count()
    );
    assert!(
        report.overall.rate >= 0.75,
        "{} loss {}",
        report.table(),
        final_loss
    );
    assert_eq!(report.gifs.len(), 2);
    assert!(report.gifs.iter().all(|g| g.exists()));

    // An untrained policy does much worse on the same episodes.
    let untrained =
        Policy::new(trained.config().clone(), &Device::Cpu, DType::F32).expect("policy");
    let base = evaluate(
        &untrained,
        &mut env,
        &EvalConfig {
            init_states: vec![1, 3, 5, 7],
            ..EvalConfig::default()
        },
    )
    .expect("eval");
    assert!(
        base.overall.rate < report.overall.rate,
        "untrained {} vs trained {}",
        base.overall.rate,
        report.overall.rate
    );
}

#[test]
fn sft_learns_the_toy_task_resumes_and_eval_reports_it() {
    let (data, policy) = toy_sft();
    let out = tempfile::tempdir().expect("tmp");
    let mut scfg = SftConfig {
        steps: 40,
        batch_size: 16,
        checkpoint_every: 10,
        ..SftConfig::default()
    };
    scfg.optim = OptimConfig {
        lr: 3e-3,
        warmup_steps: 5,
        total_steps: 150,
        ..OptimConfig::default()
    };
    let first = PolicySft {
        policy: &policy,
        data: &data,
    };
    let r1 = train_sft(&first, &scfg, out.path(), false, false).expect("sft");
    assert_eq!(r1.start_step, 0);
    assert!(can_resume(out.path()));
    // The resume state is one whole checkpoint beside the policy.
    let ck = out.path().join("checkpoint");
    for f in [
        "train_state.json",
        "optimizer.safetensors",
        "model.safetensors",
    ] {
        assert!(ck.join(f).exists(), "{f}");
    }
    assert!(!out.path().join("train_state.json").exists());
    // A directory of the older layout (the state files loose beside the
    // policy) resumes through its migration into checkpoint/.
    for f in ["train_state.json", "optimizer.safetensors"] {
        std::fs::rename(ck.join(f), out.path().join(f)).expect("old layout");
    }
    std::fs::remove_dir_all(&ck).expect("old layout");
    assert!(can_resume(out.path()));
    // A line logged after the last checkpoint (a run stopped between the
    // two) is cut away on resume, not kept beside its rewrite.
    let metrics = out.path().join("metrics.jsonl");
    let mut text = std::fs::read_to_string(&metrics).expect("metrics");
    text.push_str("{\"step\":999}\n");
    std::fs::write(&metrics, text).expect("write");
    // More steps, and a schedule as long (what `wmrl sft --steps` sets),
    // continue the run.
    scfg.steps = 150;
    scfg.optim.total_steps = 160;
    let fresh = Policy::new(policy.config().clone(), &Device::Cpu, DType::F32).expect("policy");
    // Other settings than the run's (bar steps) are refused, naming the key.
    let other = SftConfig {
        batch_size: 8,
        ..scfg.clone()
    };
    let sft = PolicySft {
        policy: &fresh,
        data: &data,
    };
    let e = train_sft(&sft, &other, out.path(), true, false).expect_err("other settings");
    assert!(e.to_string().contains("batch_size: 16 against 8"), "{e}");
    let r2 = train_sft(&sft, &scfg, out.path(), true, false).expect("resume");
    assert_eq!(r2.start_step, 40);
    assert!(ck.join("train_state.json").exists());
    assert!(!out.path().join("optimizer.safetensors").exists());
    let steps = logged_steps(&metrics);
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    assert_eq!(steps.last(), Some(&150));
    assert!(
        r2.final_loss < r1.final_loss,
        "{} -> {}",
        r1.final_loss,
        r2.final_loss
    );
    assert_trained_policy_succeeds(out.path(), r2.final_loss);
}

/// The `minivla` preset (Qwen2.5-0.5B LM dimensions) builds and runs one
/// forward pass. Slow (about half a billion parameters): run with
/// `cargo test --release -p wmrl-policy -- --ignored minivla`.
#[test]
#[ignore]
fn minivla_preset_constructs_and_runs_a_forward_pass() {
    let cfg = PolicyConfig::minivla();
    let p = Policy::new(cfg.clone(), &Device::Cpu, DType::F32).expect("policy");
    assert!(p.n_params() > 400_000_000, "{}", p.n_params());
    let xs = inputs(1);
    let prep = p.prepare(&xs).expect("prep");
    let toks = p
        .tokens_tensor(&[vec![3; cfg.tokens_per_call()]])
        .expect("t");
    let logits = p.chunk_logits(&prep, &toks).expect("logits");
    assert_eq!(logits.dims(), &[1, 56, 256]);
    let v = logits
        .flatten_all()
        .expect("f")
        .to_vec1::<f32>()
        .expect("v");
    assert!(v.iter().all(|x| x.is_finite()));
}

/// GRPO end to end at the policy level (sampling, frozen log-probs, the
/// clipped loss, AdamW) on a reward it can learn: the mean of the chunk's
/// first action dimension. Group-normalised advantages raise it; the same
/// advantages shuffled within each group (no information on which sample
/// was better) do not. A sign or alignment bug anywhere on that path fails
/// this.
#[test]
fn grpo_learns_a_synthetic_reward_that_shuffled_advantages_do_not() {
    fn reward(s: &Sample) -> f64 {
        s.actions.iter().map(|a| f64::from(a[0])).sum::<f64>() / s.actions.len() as f64
    }
    fn mean_reward(p: &Policy, xs: &[PolicyInput], seed: u64) -> f64 {
        let many: Vec<PolicyInput> = xs.iter().cycle().take(xs.len() * 32).cloned().collect();
        let s = p.sample(&many, 1.0, seed).expect("sample");
        s.iter().map(reward).sum::<f64>() / s.len() as f64
    }
    let base = inputs(4);
    let group = 8;
    let run = |shuffle: bool| -> (f64, f64) {
        let p = Policy::new(tiny_cfg(Decoding::Parallel), &Device::Cpu, DType::F32).expect("p");
        let before = mean_reward(&p, &base, 1000);
        let mut opt = PolicyOptimizer::new(
            &p,
            OptimConfig {
                lr: 3e-3,
                warmup_steps: 0,
                weight_decay: 0.0,
                ..OptimConfig::default()
            },
        )
        .expect("opt");
        let xs: Vec<PolicyInput> = base
            .iter()
            .flat_map(|x| std::iter::repeat_n(x.clone(), group))
            .collect();
        let mut lcg = 5u64;
        for step in 0..12u64 {
            let s = p.sample(&xs, 1.0, step).expect("sample");
            let mut adv = Vec::new();
            for g in s.chunks(group) {
                let r: Vec<f64> = g.iter().map(reward).collect();
                let m = r.iter().sum::<f64>() / r.len() as f64;
                let sd = (r.iter().map(|x| (x - m).powi(2)).sum::<f64>() / r.len() as f64).sqrt();
                let mut a: Vec<f32> = r.iter().map(|x| ((x - m) / (sd + 1e-4)) as f32).collect();
                if shuffle {
                    for i in (1..a.len()).rev() {
                        lcg = lcg
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        a.swap(i, (lcg >> 33) as usize % (i + 1));
                    }
                }
                adv.extend(a);
            }
            let tokens: Vec<Vec<u32>> = s.iter().map(|x| x.tokens.clone()).collect();
            let old: Vec<Vec<f32>> = s.iter().map(|x| x.logprobs.clone()).collect();
            let batch =
                GrpoBatch::new(&p, p.prepare(&xs).expect("prep"), &tokens, &old, &adv, None)
                    .expect("batch");
            for _ in 0..2 {
                let (l, _) = grpo_loss(&p, None, &batch, &GrpoConfig::default()).expect("loss");
                opt.step(&l).expect("step");
            }
        }
        (before, mean_reward(&p, &base, 1000))
    };
    let (b0, learned) = run(false);
    let (b1, shuffled) = run(true);
    eprintln!("mean first action: start {b0:.3}, GRPO {learned:.3}, shuffled {shuffled:.3}");
    assert_eq!(b0, b1, "both runs start from the same policy");
    assert!(
        learned - b0 > 0.15,
        "GRPO did not raise the reward: {b0:.3} -> {learned:.3}"
    );
    assert!(
        (shuffled - b1).abs() < 0.5 * (learned - b0),
        "shuffled advantages moved the reward as much: {b1:.3} -> {shuffled:.3} (learned {learned:.3})"
    );
}

/// The shared episode runner: greedy episodes do not depend on the slot
/// schedule (waves or refill), every episode is reset once and ends once,
/// and the actions the observer sees are the ones executed.
#[test]
fn the_episode_runner_gives_the_same_greedy_episodes_under_either_schedule() {
    use crate::episodes::{Dispatch, EpisodeObserver, RunOptions, run_episodes};
    #[derive(Default)]
    struct Log {
        started: Vec<usize>,
        actions: std::collections::BTreeMap<usize, Vec<[f32; ACTION_DIM]>>,
        ended: std::collections::BTreeMap<usize, (bool, usize)>,
    }
    impl EpisodeObserver for Log {
        fn started(&mut self, ep: usize, _: &wmrl_env::Observation) {
            self.started.push(ep);
        }
        fn stepped(
            &mut self,
            ep: usize,
            _: &wmrl_env::Observation,
            action: &[f32; ACTION_DIM],
            _: &wmrl_env::StepResult,
            step: usize,
        ) {
            let a = self.actions.entry(ep).or_default();
            a.push(*action);
            assert_eq!(a.len(), step);
        }
        fn ended(&mut self, ep: usize, last: &wmrl_env::StepResult, steps: usize) -> Result<()> {
            assert!(self.ended.insert(ep, (last.success, steps)).is_none());
            Ok(())
        }
    }
    let policy = Policy::new(tiny_cfg(Decoding::Parallel), &Device::Cpu, DType::F32).expect("p");
    let requests: Vec<ResetRequest> = (0..7)
        .map(|i| ResetRequest {
            task: 0,
            init_state: i % 4,
            seed: i as u64,
        })
        .collect();
    let run = |dispatch| {
        let envs: Vec<LineEnv> = (0..3).map(|_| LineEnv::new()).collect();
        let mut env = LocalVecEnv::new(envs).expect("env");
        let mut log = Log::default();
        let opts = RunOptions {
            dispatch,
            max_steps: 9,
            ..RunOptions::new(0.0, 5)
        };
        let stats = run_episodes(&policy, &mut env, &requests, &opts, &mut log).expect("run");
        (log, stats)
    };
    let (waves, ws) = run(Dispatch::Waves);
    let (refill, rs) = run(Dispatch::Refill);
    for log in [&waves, &refill] {
        let mut s = log.started.clone();
        s.sort_unstable();
        assert_eq!(s, (0..7).collect::<Vec<_>>());
        assert_eq!(log.ended.len(), 7);
        assert!(log.ended.values().all(|&(_, n)| (1..=9).contains(&n)));
    }
    assert_eq!(waves.actions, refill.actions);
    assert_eq!(waves.ended, refill.ended);
    assert_eq!(ws.env_steps, rs.env_steps);
    // Waves of 3, 3, 1 episodes wait for their slowest episode; refilling
    // never calls the policy more often than that.
    assert!(rs.policy_batches <= ws.policy_batches);
    assert_eq!(ws.policy_rows, rs.policy_rows);
}

#[test]
fn sft_settings_record_a_device_other_than_the_cpu() {
    let cpu = serde_json::to_value(SftConfig::default()).expect("json");
    assert!(
        cpu.get("device").is_none(),
        "the default stays out of run.toml"
    );
    let cuda = SftConfig {
        device: wmrl_run::DeviceChoice::Cuda,
        ..SftConfig::default()
    };
    let v = serde_json::to_value(&cuda).expect("json");
    assert_eq!(v["device"], "cuda");
    let back: SftConfig = serde_json::from_value(v).expect("read back");
    assert_eq!(back, cuda);
}

#[test]
fn resize_matches_the_image_crate_byte_for_byte() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    // Down by 2 (the simulator's 128 to the policy's 64), uneven shapes,
    // odd ratios and an upscale.
    for (w, h, size) in [
        (128, 128, 64),
        (256, 256, 64),
        (200, 150, 64),
        (97, 61, 32),
        (50, 50, 64),
        (17, 33, 16),
    ] {
        let rgb: Vec<u8> = (0..w * h * 3).map(|_| rng.random::<u8>()).collect();
        let frame = Frame {
            width: w as u32,
            height: h as u32,
            rgb: rgb.clone(),
        };
        let img = image::RgbImage::from_raw(w as u32, h as u32, rgb).expect("image");
        let want = image::imageops::resize(
            &img,
            size as u32,
            size as u32,
            image::imageops::FilterType::Triangle,
        )
        .into_raw();
        assert_eq!(
            input::resize_frame(&frame, size).expect("resize"),
            want,
            "{w}x{h} -> {size}"
        );
    }
    let short = Frame {
        width: 4,
        height: 4,
        rgb: vec![0; 47],
    };
    assert!(input::resize_frame(&short, 2).is_err());
}
