//! Stand-in checkpoints: a MiniVLA directory in the converted layout with
//! deterministic random weights and a small word-level tokenizer, for tests
//! and for measuring the full-size path on a machine that has no published
//! checkpoint (`scripts/convert_minivla.py --self-test` builds the same
//! layout from a random Prismatic state dict). Its actions mean nothing; its
//! arithmetic is the real model's.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::{
    CONFIG_FILE, MiniVlaConfig, MiniVlaError, Result, TOKENIZER_FILE, WEIGHTS_FILE, tensor_shapes,
};

fn io(path: &Path, e: impl std::fmt::Display) -> MiniVlaError {
    MiniVlaError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Every tensor of `cfg` with deterministic values in [-0.1, 0.1]
/// (splitmix64 of `seed`), norm weights near 1, in `dtype`.
pub fn random_tensors(
    cfg: &MiniVlaConfig,
    seed: u64,
    dtype: DType,
) -> Result<HashMap<String, Tensor>> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f32 / (1u64 << 53) as f32 * 0.2 - 0.1
    };
    tensor_shapes(cfg)?
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let norm = name.ends_with("norm.weight")
                || name.contains("norm1.weight")
                || name.contains("norm2.weight")
                || name.ends_with("layernorm.weight");
            let v: Vec<f32> = (0..n)
                .map(|_| next() + if norm { 1.0 } else { 0.0 })
                .collect();
            let t = Tensor::from_vec(v, shape, &Device::Cpu)?.to_dtype(dtype)?;
            Ok((name, t))
        })
        .collect()
}

/// A word-level `tokenizer.json` with Qwen's chat markers as special tokens
/// (ids 0 and 1), `[UNK]` at 2 for every word not in `words`, and `words`
/// from id 3 on: all below the action tokens of any MiniVLA config whose
/// `tokenizer_len - n_bins` exceeds `words.len() + 3`.
pub fn write_word_tokenizer(dir: &Path, words: &[&str]) -> Result<()> {
    let mut vocab: serde_json::Map<String, serde_json::Value> = serde_json::Map::new();
    vocab.insert("<|im_start|>".into(), serde_json::json!(0));
    vocab.insert("<|im_end|>".into(), serde_json::json!(1));
    vocab.insert("[UNK]".into(), serde_json::json!(2));
    for w in words {
        let id = vocab.len();
        vocab.entry(w.to_string()).or_insert(serde_json::json!(id));
    }
    let special = |id: usize, s: &str| {
        serde_json::json!({"id": id, "content": s, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true})
    };
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(0, "<|im_start|>"), special(1, "<|im_end|>")],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    let path = dir.join(TOKENIZER_FILE);
    std::fs::write(&path, tok.to_string()).map_err(|e| io(&path, e))
}

/// The words of MiniVLA's prompt template (the instruction's words come on
/// top).
pub const PROMPT_WORDS: [&str; 10] = [
    "system",
    "user",
    "assistant",
    "What",
    "action",
    "should",
    "the",
    "robot",
    "take",
    "to",
];

/// Write `config.json` and `model.safetensors` for `tensors`.
pub fn write_checkpoint(
    dir: &Path,
    cfg: &MiniVlaConfig,
    tensors: &HashMap<String, Tensor>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let path = dir.join(CONFIG_FILE);
    let json = serde_json::to_string_pretty(cfg).map_err(|e| io(&path, e))?;
    std::fs::write(&path, json).map_err(|e| io(&path, e))?;
    candle_core::safetensors::save(tensors, dir.join(WEIGHTS_FILE))?;
    Ok(())
}

/// A whole stand-in directory: random weights of `cfg` in `dtype` and a
/// word-level tokenizer knowing the prompt's words and `extra_words`.
pub fn write_stand_in(
    dir: &Path,
    cfg: &MiniVlaConfig,
    seed: u64,
    dtype: DType,
    extra_words: &[&str],
) -> Result<()> {
    write_checkpoint(dir, cfg, &random_tensors(cfg, seed, dtype)?)?;
    let mut words: Vec<&str> = PROMPT_WORDS.to_vec();
    words.extend_from_slice(extra_words);
    write_word_tokenizer(dir, &words)
}
