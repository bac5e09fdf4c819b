use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::{CONFIG_FILE, MiniVla, MiniVlaConfig, MiniVlaError, tensor_shapes};

/// Deterministic weights in [-0.1, 0.1] (splitmix64), norms near 1, bf16.
fn random_tensors(cfg: &MiniVlaConfig, seed: u64) -> HashMap<String, Tensor> {
    crate::stand_in::random_tensors(cfg, seed, DType::BF16).expect("tensors")
}

/// A word-level tokenizer in `tokenizer.json` form with Qwen's chat markers
/// as special tokens (ids below `tokenizer_len - 256`).
fn write_tokenizer(dir: &Path) {
    let mut words = crate::stand_in::PROMPT_WORDS.to_vec();
    words.extend(["put", "bowl", "on", "plate", "?"]);
    crate::stand_in::write_word_tokenizer(dir, &words).expect("tokenizer");
}

fn write_checkpoint(dir: &Path, cfg: &MiniVlaConfig, tensors: &HashMap<String, Tensor>) {
    crate::stand_in::write_checkpoint(dir, cfg, tensors).expect("checkpoint");
}

fn frame(w: u32, h: u32, seed: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| {
        let v = (x * 7 + y * 13 + seed * 31) % 256;
        image::Rgb([v as u8, (255 - v) as u8, ((v * 3) % 256) as u8])
    })
}

/// Names a Prismatic checkpoint converted by scripts/convert_minivla.py has.
const EXPECTED_KEYS: &[&str] = &[
    "vision_backbone.featurizer.patch_embed.proj.weight",
    "vision_backbone.featurizer.cls_token",
    "vision_backbone.featurizer.reg_token",
    "vision_backbone.featurizer.pos_embed",
    "vision_backbone.featurizer.blocks.0.attn.qkv.weight",
    "vision_backbone.featurizer.blocks.0.ls1.scale_factor",
    "vision_backbone.featurizer.blocks.1.mlp.fc2.bias",
    "vision_backbone.featurizer.norm.weight",
    "vision_backbone.fused_featurizer.pos_embed",
    "vision_backbone.fused_featurizer.blocks.1.attn.proj.weight",
    "vision_backbone.fused_featurizer.attn_pool.latent",
    "vision_backbone.fused_featurizer.attn_pool.kv.weight",
    "vision_backbone.fused_featurizer.attn_pool.mlp.fc1.weight",
    "projector.fc1.weight",
    "projector.fc3.bias",
    "language_model.model.embed_tokens.weight",
    "language_model.model.layers.0.self_attn.q_proj.bias",
    "language_model.model.layers.1.mlp.gate_proj.weight",
    "language_model.model.norm.weight",
];

#[test]
fn scaled_down_checkpoint_loads_and_predicts_bin_centre_actions() {
    let cfg = MiniVlaConfig::scaled_down();
    let shapes = tensor_shapes(&cfg).expect("shapes");
    for key in EXPECTED_KEYS {
        assert!(shapes.contains_key(*key), "{key} not in the key set");
    }
    // tied head: no lm_head tensor; no DINOv2 LayerScale under its timm name
    assert!(!shapes.contains_key("language_model.lm_head.weight"));
    assert!(!shapes.keys().any(|k| k.ends_with(".gamma")));
    // per ViT: patch_embed 2, pos 1, prefix, 12 per block (+2 LayerScale), norm 2,
    // attn_pool 13 (latent, q, kv, proj, norm, mlp.fc1/fc2); projector 6; LM: embed 1,
    // 12 per layer, norm 1
    let dino = 3 + 2 + 2 * 14 + 2;
    let siglip = 3 + 2 * 12 + 2 + 13;
    assert_eq!(shapes.len(), dino + siglip + 6 + 1 + 2 * 12 + 1);
    assert_eq!(shapes["projector.fc1.weight"], vec![4 * 80, 80]);

    let dir = tempfile::tempdir().expect("tmp");
    write_checkpoint(dir.path(), &cfg, &random_tensors(&cfg, 7));
    write_tokenizer(dir.path());
    let t0 = std::time::Instant::now();
    let vla = MiniVla::load(dir.path()).expect("load");
    assert_eq!(
        vla.n_params(),
        MiniVla::parameter_count(&cfg).expect("count")
    );
    let ids = vla.prompt_ids("Put the bowl on the plate").expect("ids");
    assert_eq!(ids[0], 0, "prompt starts with <|im_start|>: {ids:?}");
    assert_eq!(ids.iter().filter(|&&i| i == 0).count(), 3, "{ids:?}");
    assert!(
        ids.iter()
            .all(|&i| (i as usize) < cfg.tokenizer_len - cfg.n_bins)
    );

    let images = [frame(64, 48, 1)];
    let a = vla
        .predict_action(&images, "Put the bowl on the plate")
        .expect("predict");
    let (b, tokens) = vla.predict_action_ids(&images, &ids).expect("predict ids");
    assert_eq!(a, b, "greedy decoding is deterministic");
    let centre = |i: usize| -1.0 + (2 * i + 1) as f32 / 255.0;
    for (&v, &t) in a.iter().zip(&tokens) {
        assert!((-1.0..=1.0).contains(&v), "{v}");
        assert!(
            (0..255).any(|i| (centre(i) - v).abs() < 1e-6),
            "{v} is not a bin centre"
        );
        assert_eq!(v, vla.action_of_token(t));
    }
    // another frame changes the input the LM sees
    let other = vla
        .predict_action_ids(&[frame(64, 48, 9)], &ids)
        .expect("predict");
    assert_eq!(other.0.len(), 7);
    eprintln!("scaled-down load + 3 predictions: {:?}", t0.elapsed());

    let two = vla.predict_action_ids(&[frame(8, 8, 1), frame(8, 8, 2)], &ids);
    assert!(matches!(two, Err(MiniVlaError::Config(_))), "{two:?}");
}

#[test]
fn token_ids_map_to_openvla_bin_centres() {
    let cfg = MiniVlaConfig::scaled_down();
    let dir = tempfile::tempdir().expect("tmp");
    write_checkpoint(dir.path(), &cfg, &random_tensors(&cfg, 1));
    let vla = MiniVla::load(dir.path()).expect("load");
    let l = cfg.tokenizer_len as u32; // 600
    // digitize bin 1 (values in [-1, -1 + 2/255)) is token L - 1
    assert!((vla.action_of_token(l - 1) - (-1.0 + 1.0 / 255.0)).abs() < 1e-6);
    assert!((vla.action_of_token(l - 128) - 0.0).abs() < 1e-6);
    // bin 256 (exactly 1.0) and bin 255 share the last centre
    assert!((vla.action_of_token(l - 256) - (1.0 - 1.0 / 255.0)).abs() < 1e-6);
    assert_eq!(vla.action_of_token(l - 255), vla.action_of_token(l - 256));
    // ids outside the action range clip to the end bins
    assert_eq!(vla.action_of_token(0), vla.action_of_token(l - 256));
    assert_eq!(vla.action_of_token(l + 5), vla.action_of_token(l - 1));
    // without tokenizer.json only the id entry point works
    assert!(matches!(
        vla.prompt_ids("x"),
        Err(MiniVlaError::Tokenizer(_))
    ));
}

#[test]
fn a_missing_misshaped_or_unexpected_tensor_is_named() {
    let cfg = MiniVlaConfig::scaled_down();
    let good = random_tensors(&cfg, 3);
    let check = |tensors: HashMap<String, Tensor>, key: &str, what: &str| {
        let dir = tempfile::tempdir().expect("tmp");
        write_checkpoint(dir.path(), &cfg, &tensors);
        match MiniVla::load(dir.path()) {
            Err(MiniVlaError::Tensor {
                key: k, message, ..
            }) => {
                assert_eq!(k, key, "{message}");
                assert!(message.contains(what), "{message}");
            }
            other => panic!("expected a tensor error for {key}, got {other:?}"),
        }
    };
    let mut t = good.clone();
    t.remove("language_model.model.layers.1.mlp.up_proj.weight");
    check(
        t,
        "language_model.model.layers.1.mlp.up_proj.weight",
        "missing",
    );

    let mut t = good.clone();
    let key = "vision_backbone.fused_featurizer.blocks.0.attn.qkv.weight";
    t.insert(
        key.into(),
        Tensor::zeros((48, 48), DType::BF16, &Device::Cpu).expect("t"),
    );
    check(t, key, "expected [144, 48]");

    let mut t = good;
    let key = "vision_backbone.featurizer.blocks.0.ls1.gamma";
    t.insert(
        key.into(),
        Tensor::zeros(32, DType::BF16, &Device::Cpu).expect("t"),
    );
    check(t, key, "unexpected");
}

#[test]
fn full_configuration_has_the_published_parameter_count() {
    let cfg = MiniVlaConfig::full();
    let t0 = std::time::Instant::now();
    let shapes = tensor_shapes(&cfg).expect("shapes");
    let part = |prefix: &str| -> usize {
        shapes
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, s)| s.iter().product::<usize>())
            .sum()
    };
    // Qwen2.5-0.5B as published: 494,032,768 (0.49B; 0.36B without embeddings)
    let llm = part("language_model.");
    assert_eq!(llm, 494_032_768);
    assert_eq!(llm - 151_936 * 896, 357_898_112);
    // DINOv2 ViT-L/14 + 4 registers at 224 px (timm; "ViT-L 300M")
    let dino_block = 2 * 1024 * 2
        + (1024 * 3072 + 3072)
        + (1024 * 1024 + 1024)
        + 2 * 1024
        + (1024 * 4096 + 4096)
        + (4096 * 1024 + 1024);
    let dino = (3 * 14 * 14 * 1024 + 1024) + 1024 + 4 * 1024 + 256 * 1024 + 24 * dino_block + 2048;
    assert_eq!(part("vision_backbone.featurizer."), dino);
    // SigLIP SO400M/14 at 224 px with its MAP head (timm; "400M")
    let w = 1152;
    let mlp = (w * 4304 + 4304) + (4304 * w + w);
    let sig_block = 4 * w + (w * 3 * w + 3 * w) + (w * w + w) + mlp;
    let pool = w + (w * w + w) + (w * 2 * w + 2 * w) + (w * w + w) + 2 * w + mlp;
    let siglip = (3 * 14 * 14 * w + w) + 256 * w + 27 * sig_block + 2 * w + pool;
    assert_eq!(part("vision_backbone.fused_featurizer."), siglip);
    let f = 2176;
    let projector = (f * 4 * f + 4 * f) + (4 * f * 896 + 896) + (896 * 896 + 896);
    assert_eq!(part("projector."), projector);

    let total = MiniVla::parameter_count(&cfg).expect("count");
    assert_eq!(total, llm + dino + siglip + projector);
    assert_eq!(total, 1_252_496_448);
    eprintln!(
        "full MiniVLA: {total} parameters (dino {dino}, siglip {siglip}, projector {projector}, llm {llm}), counted in {:?}",
        t0.elapsed()
    );
}

/// Prismatic's own names for a converted key (the inverse of the script's map).
fn prismatic_name(key: &str) -> String {
    let mut k = key.to_string();
    for (new, old) in [
        (
            "vision_backbone.featurizer.",
            "vision_backbone.dino_featurizer.",
        ),
        (
            "vision_backbone.fused_featurizer.",
            "vision_backbone.siglip_featurizer.",
        ),
        ("projector.fc1.", "projector.0."),
        ("projector.fc2.", "projector.2."),
        ("projector.fc3.", "projector.4."),
        ("language_model.", "llm_backbone.llm."),
    ] {
        if let Some(rest) = k.strip_prefix(new) {
            k = format!("{old}{rest}");
        }
    }
    if k.starts_with("vision_backbone.dino_featurizer.") && k.ends_with(".scale_factor") {
        k = k.replace(".scale_factor", ".gamma");
    }
    k
}

#[test]
fn the_conversion_script_maps_prismatic_names_to_a_loadable_checkpoint() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/convert_minivla.py");
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no python3 on PATH");
        return;
    }
    let cfg = MiniVlaConfig::scaled_down();
    let tensors = random_tensors(&cfg, 11);
    let direct = tempfile::tempdir().expect("tmp");
    write_checkpoint(direct.path(), &cfg, &tensors);

    // the same weights under Prismatic's names, with the tied lm_head copy
    // a torch state dict carries
    let mut prismatic: HashMap<String, Tensor> = tensors
        .iter()
        .map(|(k, t)| (prismatic_name(k), t.clone()))
        .collect();
    let emb = prismatic["llm_backbone.llm.model.embed_tokens.weight"].clone();
    prismatic.insert("llm_backbone.llm.lm_head.weight".into(), emb);
    assert!(prismatic.contains_key("vision_backbone.dino_featurizer.blocks.0.ls1.gamma"));
    let src = tempfile::tempdir().expect("tmp");
    let src_file = src.path().join("prismatic.safetensors");
    candle_core::safetensors::save(&prismatic, &src_file).expect("save");
    let cfg_file = src.path().join("config.json");
    std::fs::write(&cfg_file, serde_json::to_string(&cfg).expect("json")).expect("cfg");
    let out = src.path().join("converted");
    let run = std::process::Command::new("python3")
        .arg(&script)
        .arg("--safetensors")
        .arg(&src_file)
        .arg("--config")
        .arg(&cfg_file)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run script");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let converted = MiniVla::load(&out).expect("load converted");
    let reference = MiniVla::load(direct.path()).expect("load direct");
    assert!(converted.config().llm.tie_word_embeddings);
    let ids = [0u32, 3, 1, 4, 5];
    let images = [frame(30, 30, 4)];
    assert_eq!(
        converted.predict_action_ids(&images, &ids).expect("a"),
        reference.predict_action_ids(&images, &ids).expect("b")
    );
}

/// A Python with torch and safetensors: `WMRL_TORCH_PYTHON`, else the
/// datasets venv that scripts/setup.d/70-datasets.sh builds.
fn torch_python() -> Option<std::path::PathBuf> {
    let candidate = std::env::var_os("WMRL_TORCH_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../envs/datasets/.venv/bin/python")
        });
    let ok = std::process::Command::new(&candidate)
        .args(["-c", "import torch, safetensors"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(candidate)
}

#[test]
fn matches_a_pytorch_reference_forward() {
    let Some(python) = torch_python() else {
        // ./scripts/test builds that venv and sets WMRL_REQUIRE_TORCH: there
        // the comparison must run, not skip.
        assert!(
            std::env::var_os("WMRL_REQUIRE_TORCH").is_none(),
            "WMRL_REQUIRE_TORCH is set but no Python with torch was found (envs/datasets/.venv or WMRL_TORCH_PYTHON)"
        );
        eprintln!("skipped: no Python with torch (set WMRL_TORCH_PYTHON)");
        return;
    };
    let cfg = MiniVlaConfig::scaled_down();
    let dir = tempfile::tempdir().expect("tmp");
    write_checkpoint(dir.path(), &cfg, &random_tensors(&cfg, 5));
    let vla = MiniVla::load(dir.path()).expect("load");
    let ids = [0u32, 3, 1, 4, 5, 6, 7, 0, 5];
    // 28x28 frames: the resize is the identity, so both sides see the same pixels
    let images = [frame(28, 28, 2)];
    let logits = vla.next_token_logits(&images, &ids).expect("logits");
    // (the reference decodes without a cache: this also checks the KV cache)
    let (_, tokens) = vla.predict_action_ids(&images, &ids).expect("predict");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torch_reference.py");
    let run = std::process::Command::new(&python)
        .arg(&script)
        .arg(dir.path())
        .arg("2")
        .arg(serde_json::to_string(&ids).expect("ids"))
        .output()
        .expect("run reference");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let out: serde_json::Value = serde_json::from_slice(&run.stdout).expect("json");
    let want: Vec<f32> = serde_json::from_value(out["logits"].clone()).expect("logits");
    let want_tokens: Vec<u32> = serde_json::from_value(out["tokens"].clone()).expect("tokens");
    assert_eq!(want.len(), logits.len());
    let max_diff = want
        .iter()
        .zip(&logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let scale = want.iter().map(|a| a.abs()).fold(0.0f32, f32::max);
    eprintln!("max |logit difference| {max_diff:e} (logits up to {scale})");
    assert!(
        max_diff < 1e-4 * scale.max(1.0),
        "max difference {max_diff}"
    );
    assert_eq!(tokens.to_vec(), want_tokens);
}

#[test]
fn kv_cache_decoding_equals_full_recomputation() {
    use crate::llm::{KvCache, Qwen2};
    let cfg = MiniVlaConfig::scaled_down();
    let tensors: HashMap<String, Tensor> = random_tensors(&cfg, 9)
        .into_iter()
        .map(|(k, t)| (k, t.to_dtype(DType::F32).expect("f32")))
        .collect();
    let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
    let llm = Qwen2::new(&cfg.llm, vb.pp("language_model")).expect("llm");
    let ids = Tensor::new(&[[3u32, 1, 4, 1, 5, 9, 2, 6]], &Device::Cpu).expect("ids");
    let all = llm.embed(&ids).expect("embed");
    let mut cache = KvCache::new(cfg.llm.num_hidden_layers);
    // 5 positions at once, then 3 one at a time
    let mut cached = vec![llm.last_logits_cached(&all.narrow(1, 0, 5).expect("n"), &mut cache)];
    for i in 5..8 {
        cached.push(llm.last_logits_cached(&all.narrow(1, i, 1).expect("n"), &mut cache));
    }
    for (n, c) in (5..=8).zip(cached) {
        let full = llm
            .last_logits(&all.narrow(1, 0, n).expect("n"))
            .expect("full");
        let diff = (full - c.expect("cached"))
            .expect("sub")
            .abs()
            .expect("abs")
            .max_all()
            .expect("max")
            .to_scalar::<f32>()
            .expect("scalar");
        assert!(diff < 1e-5, "{n} positions: cached logits differ by {diff}");
    }
}

/// A scaled-down checkpoint in f32 (so merged weights are exact enough to
/// compare), with its tokenizer, loaded.
fn rl_checkpoint(dir: &Path) -> (MiniVla, Vec<u32>, Vec<image::RgbImage>) {
    let cfg = MiniVlaConfig::scaled_down();
    let tensors: HashMap<String, Tensor> = random_tensors(&cfg, 5)
        .into_iter()
        .map(|(k, t)| (k, t.to_dtype(DType::F32).expect("f32")))
        .collect();
    write_checkpoint(dir, &cfg, &tensors);
    write_tokenizer(dir);
    let m = MiniVla::load(dir).expect("load");
    let ids = m.prompt_ids("put the bowl on the plate").expect("ids");
    (m, ids, vec![frame(40, 30, 2)])
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .and_then(|d| d.abs())
        .and_then(|d| d.max_all())
        .and_then(|d| d.to_scalar::<f32>())
        .expect("diff")
}

fn splitmix(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed;
    move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Give every `B` small non-zero values, as training would.
fn perturb_adapters(m: &MiniVla) {
    for (k, (name, v)) in m.adapters().iter().enumerate() {
        if name.ends_with("lora_b") {
            let n = v.elem_count();
            let vals: Vec<f32> = (0..n)
                .map(|i| ((i * 31 + k * 7) % 17) as f32 / 17.0 * 0.1 - 0.05)
                .collect();
            v.set(&Tensor::from_vec(vals, v.dims(), &Device::Cpu).expect("t"))
                .expect("set");
        }
    }
}

#[test]
fn lora_at_zero_gives_the_checkpoints_exact_logits() {
    use crate::rl::{LORA_TARGETS, LoraConfig};
    let dir = tempfile::tempdir().expect("dir");
    let (mut m, ids, imgs) = rl_checkpoint(dir.path());
    let before = m.next_token_logits(&imgs, &ids).expect("logits");
    m.attach_lora(&LoraConfig::default()).expect("lora");
    // Two layers, seven projections, A and B each.
    assert_eq!(m.adapters().len(), 2 * LORA_TARGETS.len() * 2);
    assert!(
        m.adapters()
            .iter()
            .all(|(n, _)| n.starts_with("language_model.model.layers."))
    );
    assert_eq!(m.next_token_logits(&imgs, &ids).expect("logits"), before);
    // Bad settings are refused, naming what is wrong.
    for (bad, what) in [
        (
            LoraConfig {
                rank: 0,
                ..Default::default()
            },
            "rank",
        ),
        (
            LoraConfig {
                targets: vec!["qkv".into()],
                ..Default::default()
            },
            "qkv",
        ),
        (
            LoraConfig {
                alpha: f64::NAN,
                ..Default::default()
            },
            "alpha",
        ),
    ] {
        let e = m.attach_lora(&bad).expect_err(what).to_string();
        assert!(e.contains(what), "{e}");
    }
}

#[test]
fn sampled_logprobs_equal_recomputed_ones_and_greedy_is_the_argmax() {
    use crate::rl::LoraConfig;
    let dir = tempfile::tempdir().expect("dir");
    let (mut m, ids, imgs) = rl_checkpoint(dir.path());
    m.attach_lora(&LoraConfig {
        targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
        ..Default::default()
    })
    .expect("lora");
    perturb_adapters(&m);
    let prefix = m.prefix(&imgs, &ids).expect("prefix");
    let (lo, n) = m.action_range();
    assert_eq!(n, m.config().n_bins - 1);
    let mut u = splitmix(3);
    for temperature in [1.0f32, 1.6, 0.4] {
        let s = m
            .sample_action_tokens(&prefix, temperature, &mut u)
            .expect("sample");
        assert!(
            s.tokens
                .iter()
                .all(|&t| t >= lo && (t as usize) < lo as usize + n)
        );
        let (lp, ent) = m
            .action_logprobs(&prefix, &s.tokens, temperature)
            .expect("recompute");
        let lp = lp.to_vec1::<f32>().expect("v");
        for (k, (r, d)) in lp.iter().zip(&s.logprobs).enumerate() {
            assert!(
                (r - d).abs() < 1e-5,
                "T {temperature} token {k}: sampled {d} recomputed {r}"
            );
        }
        let ent = ent.to_vec1::<f32>().expect("v");
        assert!(ent.iter().all(|&e| e > 0.0 && e <= (n as f32).ln() + 1e-4));
    }
    // Greedy: each token is the argmax of its teacher-forced row.
    let g = m
        .sample_action_tokens(&prefix, 0.0, &mut || panic!("greedy draws nothing"))
        .expect("greedy");
    let again = m
        .sample_action_tokens(&prefix, 0.0, &mut || 0.5)
        .expect("greedy");
    assert_eq!(g, again);
    let fed = Tensor::new(&g.tokens[..6], &Device::Cpu)
        .and_then(|t| t.unsqueeze(0))
        .expect("fed");
    let x = Tensor::cat(
        &[
            &m.prefix_embeds(&imgs, &ids).expect("p"),
            &m.llm.embed(&fed).expect("e"),
        ],
        1,
    )
    .expect("cat");
    let rows = m
        .llm
        .last_k_logits(&x, 7)
        .and_then(|l| l.squeeze(0))
        .and_then(|l| l.narrow(1, lo as usize, n))
        .and_then(|l| l.argmax(1))
        .and_then(|l| l.to_vec1::<u32>())
        .expect("rows");
    assert_eq!(
        rows.iter().map(|&j| lo + j).collect::<Vec<_>>(),
        g.tokens.to_vec()
    );
    // Bad input is refused.
    assert!(m.sample_action_tokens(&prefix, -1.0, &mut u).is_err());
    let mut outside = g.tokens;
    outside[3] = 0;
    let e = m
        .action_logprobs(&prefix, &outside, 1.0)
        .expect_err("outside");
    assert!(e.to_string().contains("not an action token"), "{e}");
}

#[test]
fn a_grpo_step_moves_the_adapters_towards_the_favoured_tokens_and_exports_merged() {
    use crate::rl::{ActionStep, LoraConfig};
    let dir = tempfile::tempdir().expect("dir");
    let (mut m, ids, imgs) = rl_checkpoint(dir.path());
    let checkpoint_logits = m.next_token_logits(&imgs, &ids).expect("logits");
    m.attach_lora(&LoraConfig::default()).expect("lora");
    let prefix = m.prefix(&imgs, &ids).expect("prefix");
    let temperature = 1.0;
    let mut u = splitmix(11);
    let (good, bad) = loop {
        let a = m
            .sample_action_tokens(&prefix, temperature, &mut u)
            .expect("a");
        let b = m
            .sample_action_tokens(&prefix, temperature, &mut u)
            .expect("b");
        if a.tokens != b.tokens {
            break (a, b);
        }
    };
    let steps = [
        ActionStep {
            prefix: prefix.clone(),
            sample: good,
            advantage: 1.0,
        },
        ActionStep {
            prefix: prefix.clone(),
            sample: bad,
            advantage: -1.0,
        },
    ];
    let objective = wmrl_grpo::Objective::default();
    let (loss, stats) = m
        .grpo_objective(&steps, temperature, &objective)
        .expect("objective");
    // At the parameters the tokens were sampled with, the ratio is 1.
    assert!((stats.ratio_mean - 1.0).abs() < 1e-5, "{stats:?}");
    assert!(stats.approx_kl_old.abs() < 1e-5, "{stats:?}");
    assert_eq!(stats.n_tokens, 14.0);
    let mut opt = wmrl_grpo::AdamW::new(
        m.adapters(),
        wmrl_grpo::OptimConfig {
            lr: 1e-2,
            warmup_steps: 0,
            ..Default::default()
        },
        &[],
    )
    .expect("optimiser");
    let before: Vec<Tensor> = m
        .adapters()
        .iter()
        .map(|(_, v)| v.as_tensor().copy().expect("c"))
        .collect();
    opt.step(&loss).expect("step");
    for _ in 0..4 {
        let (loss, _) = m
            .grpo_objective(&steps, temperature, &objective)
            .expect("o");
        opt.step(&loss).expect("step");
    }
    // Every B moved off zero (A moves too once B is non-zero).
    for ((name, v), b) in m.adapters().iter().zip(&before) {
        assert!(max_diff(v.as_tensor(), b) > 0.0, "{name} did not move");
    }
    let lp = |s: &crate::rl::ActionSample| {
        m.action_logprobs(&prefix, &s.tokens, temperature)
            .and_then(|(l, _)| Ok(l.sum_all()?.to_scalar::<f32>()?))
            .expect("lp")
    };
    let (g0, b0): (f32, f32) = (good.logprobs.iter().sum(), bad.logprobs.iter().sum());
    assert!(
        lp(&good) > g0,
        "favoured tokens more likely: {} -> {}",
        g0,
        lp(&good)
    );
    assert!(
        lp(&bad) < b0,
        "disfavoured tokens less likely: {} -> {}",
        b0,
        lp(&bad)
    );
    let adapted = m.next_token_logits(&imgs, &ids).expect("adapted");
    assert!(
        max_diff(
            &Tensor::new(adapted.as_slice(), &Device::Cpu).expect("t"),
            &Tensor::new(checkpoint_logits.as_slice(), &Device::Cpu).expect("t")
        ) > 1e-4
    );

    merged_export_gives_the_adapted_logits(
        &m,
        dir.path(),
        &imgs,
        &ids,
        &adapted,
        &checkpoint_logits,
    );
    adapters_round_trip_through_a_file(&m, dir.path(), &prefix, &good);
}

/// Merged into the converted layout, the export of `m` (adapted from the
/// checkpoint in `dir`) loads without LoRA and gives `adapted`; the source
/// is untouched and cannot be the destination.
fn merged_export_gives_the_adapted_logits(
    m: &MiniVla,
    dir: &std::path::Path,
    imgs: &[image::RgbImage],
    ids: &[u32],
    adapted: &[f32],
    checkpoint_logits: &[f32],
) {
    // Merged into the converted layout, the export loads without LoRA and
    // gives the adapted model's logits; the source is untouched.
    let out = dir.join("merged");
    m.export_merged(dir, &out).expect("export");
    let merged = MiniVla::load(&out).expect("load merged");
    let ml = merged.next_token_logits(imgs, ids).expect("logits");
    let d = ml
        .iter()
        .zip(adapted)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(d < 1e-4, "merged logits differ by {d}");
    let src = MiniVla::load(dir).expect("source");
    assert_eq!(
        src.next_token_logits(imgs, ids).expect("l"),
        checkpoint_logits
    );
    assert!(m.export_merged(dir, dir).is_err(), "onto its source");
}

/// Adapters saved and read back into a fresh model give the same
/// log-probabilities; a file of other adapters is refused by name.
fn adapters_round_trip_through_a_file(
    m: &MiniVla,
    dir: &std::path::Path,
    prefix: &crate::rl::Prefix,
    good: &crate::rl::ActionSample,
) {
    use crate::rl::LoraConfig;
    let file = dir.join("adapters.safetensors");
    m.save_adapters(&file).expect("save");
    let mut fresh = MiniVla::load(dir).expect("fresh");
    fresh.attach_lora(&LoraConfig::default()).expect("lora");
    fresh.load_adapters(&file).expect("read back");
    let (a, _) = m.action_logprobs(prefix, &good.tokens, 1.0).expect("a");
    let (b, _) = fresh.action_logprobs(prefix, &good.tokens, 1.0).expect("b");
    assert!(max_diff(&a, &b) < 1e-6);
    let mut narrow = MiniVla::load(dir).expect("narrow");
    narrow
        .attach_lora(&LoraConfig {
            rank: 4,
            ..Default::default()
        })
        .expect("lora");
    let e = narrow.load_adapters(&file).expect_err("rank 8 into rank 4");
    assert!(e.to_string().contains("lora_a"), "{e}");
}

/// MiniVLA through the episode runner's policy interface: one action per
/// call, seeded by row stream (a batch that keeps some rows samples them as
/// the full batch did), greedy tokens are the action tokens' argmax, the
/// actions are the tokens' bin centres, and `dataset_statistics.json`
/// un-normalises them with LIBERO's gripper convention.
#[test]
fn minivla_policy_samples_by_stream_and_greedy_is_the_action_argmax() {
    use wmrl_policy::{ActionPolicy, PolicyInput};
    let dir = tempfile::tempdir().expect("tmp");
    let (m, ids, images) = rl_checkpoint(dir.path());
    assert!(crate::is_minivla_dir(dir.path()));
    let policy =
        crate::MiniVlaPolicy::load(dir.path(), &Device::Cpu, DType::F32, None).expect("policy");
    assert_eq!((policy.kind(), policy.chunk()), ("minivla", 1));
    let input = |img: &image::RgbImage| PolicyInput {
        instruction: "put the bowl on the plate".into(),
        frames: vec![
            wmrl_env::Frame::new(img.width(), img.height(), img.as_raw().clone()).expect("f"),
        ],
        prev_frame: None,
        proprio: vec![0.0; 8],
    };
    let inputs = vec![
        input(&images[0]),
        input(&frame(24, 24, 7)),
        input(&images[0]),
    ];
    // greedy: the argmax over the action tokens (what GRPO samples from;
    // `predict_action_ids` takes OpenVLA's unconstrained argmax instead),
    // decoded to bin centres
    let greedy = policy
        .sample_streams(&inputs[..1], 0.0, 3, &[0])
        .expect("greedy");
    let prefix = m.prefix(&images, &ids).expect("prefix");
    let tokens = m
        .sample_action_tokens(&prefix, 0.0, &mut || 0.5)
        .expect("argmax")
        .tokens;
    let action = tokens.map(|t| m.action_of_token(t));
    assert_eq!(greedy[0].tokens, tokens.to_vec());
    assert_eq!(greedy[0].actions, vec![action]);
    // sampled: rows by stream, batched with the other rows or alone (the
    // batch's matrix products may round the last bit differently)
    let all = policy
        .sample_streams(&inputs, 1.5, 11, &[0, 1, 2])
        .expect("all");
    let kept = policy
        .sample_streams(&inputs[1..2], 1.5, 11, &[1])
        .expect("kept");
    assert_eq!(
        (&kept[0].tokens, &kept[0].actions),
        (&all[1].tokens, &all[1].actions)
    );
    for (a, b) in kept[0].logprobs.iter().zip(&all[1].logprobs) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    // rows 0 and 2 see the same observation from different streams
    let again = policy
        .sample_streams(&inputs, 1.5, 11, &[0, 1, 2])
        .expect("again");
    assert_eq!(again, all);
    assert!(all.iter().all(|s| s.tokens.len() == 7
        && s.logprobs.iter().all(|l| l.is_finite() && *l <= 0.0)
        && s.actions.len() == 1
        && s.actions[0].iter().all(|a| (-1.0..=1.0).contains(a))));
    let other_seed = policy
        .sample_streams(&inputs, 1.5, 12, &[0, 1, 2])
        .expect("s");
    assert_ne!(other_seed, all, "the seed moves the samples");
    assert!(
        policy
            .sample_streams(&inputs, 1.0, 0, &[0])
            .is_err_and(|e| e.to_string().contains("streams")),
        "one stream per row"
    );
    // published statistics: un-normalised, gripper binarised and inverted
    std::fs::write(
        dir.path().join(crate::STATS_FILE),
        r#"{"libero_10_no_noops": {"action": {"q01": [-1, -1, -1, -0.5, -0.5, -0.5, 0],
            "q99": [1, 1, 1, 0.5, 0.5, 0.5, 1],
            "mask": [true, true, true, true, true, true, false]}}}"#,
    )
    .expect("stats");
    let libero =
        crate::MiniVlaPolicy::load(dir.path(), &Device::Cpu, DType::F32, Some("libero_10"))
            .expect("policy");
    let l = libero
        .sample_streams(&inputs[..1], 0.0, 3, &[0])
        .expect("l");
    assert_eq!(l[0].tokens, tokens.to_vec());
    let a = l[0].actions[0];
    for d in 0..3 {
        assert!((a[d] - action[d]).abs() < 1e-6);
    }
    for d in 3..6 {
        assert!((a[d] - 0.5 * action[d]).abs() < 1e-6);
    }
    assert!(a[6] == 1.0 || a[6] == -1.0 || a[6] == 0.0);
    assert_eq!(
        a[6],
        -(2.0 * action[6] - 1.0).signum() * f32::from(action[6] != 0.5)
    );
    // a tiny policy's directory is not a MiniVLA one
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/policy-tiny");
    assert!(tiny.join(CONFIG_FILE).exists() && !crate::is_minivla_dir(&tiny));
}

/// An update in micro-batches of one step takes the same AdamW step as the
/// whole batch at once (the objective is a token mean, so the weighted sum
/// of the micro-batches' gradients is the batch's), with the same
/// statistics; an optimiser with nothing accumulated refuses to step.
#[test]
fn a_micro_batched_update_equals_the_whole_batch_update() {
    use crate::rl::{ActionStep, LoraConfig};
    let dir = tempfile::tempdir().expect("dir");
    let (mut m, ids, imgs) = rl_checkpoint(dir.path());
    m.attach_lora(&LoraConfig::default()).expect("lora");
    perturb_adapters(&m);
    let prefix = m.prefix(&imgs, &ids).expect("prefix");
    let mut u = splitmix(3);
    let steps: Vec<ActionStep> = (0..3)
        .map(|k| ActionStep {
            prefix: prefix.clone(),
            sample: m.sample_action_tokens(&prefix, 1.0, &mut u).expect("s"),
            advantage: [1.0, -0.5, -0.5][k],
        })
        .collect();
    let start: Vec<Tensor> = m
        .adapters()
        .iter()
        .map(|(_, v)| v.as_tensor().copy().expect("c"))
        .collect();
    let cfg = wmrl_grpo::OptimConfig {
        lr: 1e-2,
        warmup_steps: 0,
        ..Default::default()
    };
    let objective = wmrl_grpo::Objective::default();
    let mut after = Vec::new();
    let mut all_stats = Vec::new();
    for micro in [3, 1, 2] {
        for ((_, v), t) in m.adapters().iter().zip(&start) {
            v.set(t).expect("reset");
        }
        let mut opt = wmrl_grpo::AdamW::new(m.adapters(), cfg.clone(), &[]).expect("opt");
        let (step, stats) = m
            .grpo_update(&mut opt, &steps, 1.0, &objective, micro, None)
            .expect("update");
        assert!(step.grad_norm > 0.0);
        all_stats.push((step.grad_norm, stats));
        after.push(
            m.adapters()
                .iter()
                .map(|(_, v)| v.as_tensor().copy().expect("c"))
                .collect::<Vec<_>>(),
        );
    }
    let (norm, whole) = all_stats[0];
    for (n, st) in &all_stats[1..] {
        assert!((n - norm).abs() < 1e-5 * norm.max(1.0), "{n} vs {norm}");
        assert!((st.loss - whole.loss).abs() < 1e-6, "{st:?} vs {whole:?}");
        assert!((st.ratio_mean - whole.ratio_mean).abs() < 1e-6);
        assert_eq!(st.n_tokens, whole.n_tokens);
    }
    // AdamW's first step is about lr * g / |g| per element, so rounding in
    // near-zero gradient components shows at 1e-5 of lr 1e-2; the
    // gradient itself is compared through its norm above (a step is blind
    // to the gradient's scale, the norm is not).
    for other in &after[1..] {
        for (a, b) in after[0].iter().zip(other) {
            assert!(max_diff(a, b) < 1e-4, "{}", max_diff(a, b));
        }
    }
    assert!(
        max_diff(&after[0][1], &start[1]) > 0.0,
        "the step moved the adapters"
    );
    let mut opt = wmrl_grpo::AdamW::new(m.adapters(), cfg, &[]).expect("opt");
    assert!(
        opt.step_accumulated(wmrl_grpo::Gradients::default())
            .is_err()
    );
}

#[test]
fn action_tokens_and_actions_invert_each_other() {
    let dir = tempfile::tempdir().expect("tmp");
    let (m, _, _) = rl_checkpoint(dir.path());
    let (lo, n) = m.action_range();
    for t in lo..lo + n as u32 {
        assert_eq!(m.token_of_action(m.action_of_token(t)), t, "token {t}");
    }
    let half_bin = 1.0 / (m.config().n_bins - 1) as f32 + 1e-6;
    for i in 0..=400 {
        let a = -1.0 + i as f32 / 200.0;
        let t = m.token_of_action(a);
        assert!(t >= lo && t < lo + n as u32, "{a} -> {t}");
        assert!((m.action_of_token(t) - a).abs() <= half_bin, "{a} -> {t}");
    }
    // out of range and NaN land on action tokens too
    assert_eq!(m.token_of_action(7.0), m.token_of_action(1.0));
    assert_eq!(m.token_of_action(-7.0), lo + n as u32 - 1);
    assert!((lo..lo + n as u32).contains(&m.token_of_action(f32::NAN)));
}

/// A two-camera demonstration of `len` steps whose action depends on the
/// agent view (bright frames: +0.5, dark: -0.5 on every dimension).
fn demo(len: usize) -> wmrl_env::Episode {
    let cam = |name: &str| wmrl_env::CameraSpec {
        name: name.into(),
        width: 32,
        height: 32,
    };
    let steps = (0..len)
        .map(|t| {
            let bright = t % 2 == 0;
            let img = frame(32, 32, t as u32);
            let rgb: Vec<u8> = img
                .as_raw()
                .iter()
                .map(|&v| if bright { v / 2 + 128 } else { v / 2 })
                .collect();
            let f = wmrl_env::Frame::new(32, 32, rgb).expect("frame");
            wmrl_env::EpisodeStep {
                frames: vec![f.clone(), f],
                proprio: vec![0.0; 9],
                action: vec![if bright { 0.5 } else { -0.5 }; 7],
                progress: None,
            }
        })
        .collect();
    wmrl_env::Episode {
        suite: "test".into(),
        task: 0,
        init_state: 0,
        seed: 0,
        instruction: "put the bowl on the plate".into(),
        cameras: vec![cam("agentview"), cam("wrist")],
        success: true,
        final_progress: None,
        source: "test".into(),
        steps,
    }
}

#[test]
fn whole_model_sft_trains_every_part_and_saves_a_loadable_checkpoint() {
    use wmrl_policy::{SftConfig, SftModel};
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = MiniVlaConfig {
        n_images: 2,
        ..MiniVlaConfig::scaled_down()
    };
    let words = ["put", "the", "bowl", "on", "plate"];
    crate::stand_in::write_stand_in(dir.path(), &cfg, 3, DType::F32, &words).expect("init");
    let mut sft = crate::MiniVlaSft::load(dir.path(), &Device::Cpu).expect("load");
    sft.push_episode(&demo(8)).expect("demo");
    assert_eq!((sft.n_samples(), sft.n_episodes()), (8, 1));
    let mut bad = demo(1);
    bad.steps[0].action.pop();
    assert!(sft.push_episode(&bad).is_err(), "a 6-D action is refused");

    // the gradient reaches both backbones, the projector and the LM
    let all: Vec<usize> = (0..8).collect();
    let (loss, _) = sft.loss(&all).expect("loss");
    let grads = loss.backward().expect("backward");
    let vars = sft.vars();
    let touched = |prefix: &str| {
        vars.iter().any(|(k, v)| {
            k.starts_with(prefix)
                && grads
                    .get(v.as_tensor())
                    .and_then(|g| g.abs().ok()?.sum_all().ok()?.to_scalar::<f32>().ok())
                    .is_some_and(|s| s > 0.0)
        })
    };
    for part in [
        "vision_backbone.featurizer.patch_embed",
        "vision_backbone.featurizer.blocks.0",
        "vision_backbone.fused_featurizer.blocks.0",
        "projector.fc1",
        "language_model.model.layers.1",
        "language_model.model.embed_tokens",
    ] {
        assert!(touched(part), "no gradient reaches {part}");
    }

    let out = tempfile::tempdir().expect("out");
    let mut scfg = SftConfig {
        steps: 30,
        batch_size: 8,
        checkpoint_every: 10,
        log_every: 10,
        ..SftConfig::default()
    };
    scfg.optim.lr = 3e-3;
    scfg.optim.warmup_steps = 2;
    scfg.optim.total_steps = 30;
    let first = sft
        .loss(&all)
        .expect("loss")
        .0
        .to_scalar::<f32>()
        .expect("s");
    let report = wmrl_policy::train_sft(&sft, &scfg, out.path(), false, false).expect("sft");
    let (last, acc) = sft.loss(&all).expect("loss");
    let last = last.to_scalar::<f32>().expect("s");
    assert!(
        last < 0.5 * first && acc > 0.9,
        "loss {first} -> {last}, accuracy {acc} ({report:?})"
    );

    // the saved directory is a MiniVLA (tokenizer copied) acting as trained
    assert!(crate::is_minivla_dir(out.path()));
    let saved = MiniVla::load(out.path()).expect("saved");
    let ep = demo(2);
    for (t, step) in ep.steps.iter().enumerate() {
        let images = crate::policy::observation_images(2, &step.frames, None).expect("images");
        let action = saved
            .predict_action(&images, &ep.instruction)
            .expect("predict");
        let want = if t % 2 == 0 { 0.5 } else { -0.5 };
        assert!(
            action.iter().all(|a| (a - want).abs() < 0.01),
            "step {t}: {action:?}"
        );
    }
    // resume restores the saved parameters over a fresh start
    let mut fresh = crate::MiniVlaSft::load(dir.path(), &Device::Cpu).expect("fresh");
    fresh.push_episode(&demo(8)).expect("demo");
    fresh.restore(out.path()).expect("restore");
    let restored = fresh
        .loss(&all)
        .expect("loss")
        .0
        .to_scalar::<f32>()
        .expect("s");
    assert!((restored - last).abs() < 1e-5, "{restored} vs {last}");
}
