//! Policy configuration and the size presets (`tiny`, `small`, `minivla`).
//!
//! The config is written beside every checkpoint as `config.json`; loading a
//! checkpoint rebuilds the network from it, so it must describe the network
//! completely (including the proprio normalisation fitted on the demos).

use serde::{Deserialize, Serialize};

use crate::{PolicyError, Result};

/// Number of action dimensions (LIBERO OSC_POSE: delta xyz, delta rpy, gripper).
pub const ACTION_DIM: usize = 7;

/// How the action tokens of one chunk are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decoding {
    /// One token at a time, each conditioned on the ones before (OpenVLA,
    /// MiniVLA): `chunk * 7` forward passes per call.
    Autoregressive,
    /// All tokens of the chunk in one forward pass from learned query tokens
    /// (OpenVLA-OFT style); tokens are independent given the observation.
    Parallel,
}

/// The network and its input/output conventions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Preset this config came from (informational).
    pub preset: String,
    /// Frames are resized to `image_size x image_size`.
    pub image_size: usize,
    /// Square ViT patch; must divide `image_size`.
    pub patch_size: usize,
    /// Also encode the wrist camera (the second frame of an observation).
    pub use_wrist: bool,
    /// Also encode the previous agent-view frame (MiniVLA's history variant).
    pub use_prev_frame: bool,
    pub vision_width: usize,
    pub vision_layers: usize,
    pub vision_heads: usize,
    /// Language-model width.
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention as in Qwen2); divides `n_heads`.
    pub n_kv_heads: usize,
    /// SwiGLU hidden width.
    pub mlp_hidden: usize,
    /// Instruction length in byte tokens (`wmrl_env::text::byte_tokens`).
    pub text_len: usize,
    /// Byte tokens merged into one sequence token (concatenated embeddings
    /// of width `d_model / text_patch`, then a projection), like image
    /// patches; 1 keeps one token per byte.
    #[serde(default = "one")]
    pub text_patch: usize,
    /// Text vocabulary (257 for the byte tokenizer).
    pub text_vocab: usize,
    /// Proprio features; 0 drops the proprio token.
    pub proprio_dim: usize,
    /// Per-feature normalisation of proprio (fitted on the SFT demos); empty
    /// means none.
    #[serde(default)]
    pub proprio_mean: Vec<f32>,
    #[serde(default)]
    pub proprio_std: Vec<f32>,
    /// Must be 7 ([`ACTION_DIM`]).
    pub action_dim: usize,
    /// Bins per action dimension over [-1, 1] (OpenVLA / MiniVLA: 256).
    pub n_bins: usize,
    /// Actions per policy call (MiniVLA: 8).
    pub chunk: usize,
    pub decoding: Decoding,
    pub norm_eps: f64,
    /// Seed of the parameter initialisation.
    pub init_seed: u64,
}

fn one() -> usize {
    1
}

impl PolicyConfig {
    /// Trains in CPU minutes: 64x64 agent view and wrist camera, 16x16
    /// patches, width 128. (Without the wrist camera it cannot grasp
    /// precisely enough: docs/policy.md, "What SFT reaches".)
    pub fn tiny() -> Self {
        Self {
            preset: "tiny".into(),
            image_size: 64,
            patch_size: 16,
            use_wrist: true,
            use_prev_frame: false,
            vision_width: 128,
            vision_layers: 1,
            vision_heads: 4,
            d_model: 128,
            n_layers: 3,
            n_heads: 4,
            n_kv_heads: 4,
            mlp_hidden: 384,
            text_len: 64,
            text_patch: 4,
            text_vocab: wmrl_env::text::BYTE_VOCAB,
            proprio_dim: 8,
            proprio_mean: Vec::new(),
            proprio_std: Vec::new(),
            action_dim: ACTION_DIM,
            n_bins: 256,
            chunk: 8,
            decoding: Decoding::Parallel,
            norm_eps: 1e-6,
            init_seed: 0,
        }
    }

    /// A few times `tiny`: 128x128 agent view and wrist, width 256, 6 layers.
    pub fn small() -> Self {
        Self {
            preset: "small".into(),
            image_size: 128,
            patch_size: 16,
            use_wrist: true,
            vision_width: 256,
            vision_layers: 3,
            vision_heads: 8,
            d_model: 256,
            n_layers: 6,
            n_heads: 8,
            n_kv_heads: 4,
            mlp_hidden: 768,
            ..Self::tiny()
        }
    }

    /// MiniVLA's language-model dimensions (Qwen2.5-0.5B: width 896, 24
    /// layers, 14 query and 2 key/value heads, SwiGLU 4864) over a ViT-B/14
    /// at 224x224, autoregressive decoding of 8-step chunks. The text
    /// vocabulary stays the byte tokenizer's (see docs/policy.md).
    pub fn minivla() -> Self {
        Self {
            preset: "minivla".into(),
            image_size: 224,
            patch_size: 14,
            use_wrist: false,
            vision_width: 768,
            vision_layers: 12,
            vision_heads: 12,
            d_model: 896,
            n_layers: 24,
            n_heads: 14,
            n_kv_heads: 2,
            mlp_hidden: 4864,
            decoding: Decoding::Autoregressive,
            text_patch: 1,
            ..Self::tiny()
        }
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "tiny" => Ok(Self::tiny()),
            "small" => Ok(Self::small()),
            "minivla" => Ok(Self::minivla()),
            other => Err(PolicyError::Config(format!(
                "unknown preset `{other}` (tiny, small, minivla)"
            ))),
        }
    }

    /// Action tokens per call: `chunk * action_dim`.
    pub fn tokens_per_call(&self) -> usize {
        self.chunk * self.action_dim
    }

    /// Images encoded per observation.
    pub fn n_images(&self) -> usize {
        1 + usize::from(self.use_wrist) + usize::from(self.use_prev_frame)
    }

    pub fn patches_per_image(&self) -> usize {
        let n = self.image_size / self.patch_size.max(1);
        n * n
    }

    /// Sequence positions the action chunk takes: one per token when
    /// autoregressive; one per step (a head emits its 7 tokens) when parallel.
    pub fn action_positions(&self) -> usize {
        match self.decoding {
            Decoding::Autoregressive => self.tokens_per_call(),
            Decoding::Parallel => self.chunk,
        }
    }

    /// Length of the observation prefix: vision, text, proprio tokens.
    pub fn prefix_len(&self) -> usize {
        self.n_images() * self.patches_per_image()
            + self.text_len / self.text_patch.max(1)
            + usize::from(self.proprio_dim > 0)
    }

    /// Full sequence length of one call.
    pub fn seq_len(&self) -> usize {
        self.prefix_len() + self.action_positions()
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(PolicyError::Config(m));
        if self.action_dim != ACTION_DIM {
            return bad(format!(
                "action_dim must be {ACTION_DIM}, got {}",
                self.action_dim
            ));
        }
        if self.patch_size == 0 || !self.image_size.is_multiple_of(self.patch_size) {
            return bad(format!(
                "patch_size {} must divide image_size {}",
                self.patch_size, self.image_size
            ));
        }
        if self.vision_heads == 0 || !self.vision_width.is_multiple_of(self.vision_heads) {
            return bad("vision_heads must divide vision_width".into());
        }
        if self.n_heads == 0 || !self.d_model.is_multiple_of(self.n_heads) {
            return bad("n_heads must divide d_model".into());
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("n_kv_heads must divide n_heads".into());
        }
        if self.text_patch == 0
            || !self.text_len.is_multiple_of(self.text_patch)
            || !self.d_model.is_multiple_of(self.text_patch)
        {
            return bad("text_patch must divide text_len and d_model".into());
        }
        if self.chunk == 0 || self.n_bins < 2 || self.text_len == 0 {
            return bad("chunk, text_len must be >= 1 and n_bins >= 2".into());
        }
        for (name, v) in [
            ("proprio_mean", &self.proprio_mean),
            ("proprio_std", &self.proprio_std),
        ] {
            if !v.is_empty() && v.len() != self.proprio_dim {
                return bad(format!(
                    "{name} has {} entries, proprio_dim is {}",
                    v.len(),
                    self.proprio_dim
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_round_trip_json() {
        for name in ["tiny", "small", "minivla"] {
            let c = PolicyConfig::preset(name).expect("preset");
            c.validate().expect("valid");
            let s = serde_json::to_string(&c).expect("json");
            let back: PolicyConfig = serde_json::from_str(&s).expect("parse");
            assert_eq!(back, c);
        }
        assert!(PolicyConfig::preset("huge").is_err());
        let mut c = PolicyConfig::tiny();
        c.patch_size = 7;
        assert!(c.validate().is_err());
        assert_eq!(PolicyConfig::tiny().seq_len(), 2 * 16 + 16 + 1 + 8);
    }
}
