//! MiniVLA's configuration: the two timm ViTs, the fused projector and the
//! Qwen2 language model, with the published sizes (`full`) and a scaled-down
//! twin (`scaled_down`) that has the same structure and the same tensor names
//! so tests run in seconds.
//!
//! Written beside the weights as `config.json`; it must describe the network
//! completely, because loading builds the network from it alone.

use serde::{Deserialize, Serialize};

use crate::{MiniVlaError, Result};

/// Action dimensions (LIBERO / Bridge end-effector deltas + gripper).
pub const ACTION_DIM: usize = 7;

/// One timm `VisionTransformer` as Prismatic builds it (`num_classes = 0`,
/// features from the second-to-last block, no final norm applied).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitConfig {
    pub image_size: usize,
    pub patch_size: usize,
    pub width: usize,
    pub depth: usize,
    pub heads: usize,
    pub mlp_hidden: usize,
    /// Prefix tokens before the patches: a class token.
    pub class_token: bool,
    /// Register tokens (DINOv2-reg: 4).
    pub reg_tokens: usize,
    /// LayerScale (`ls1`/`ls2`) in every block (DINOv2).
    pub layer_scale: bool,
    /// timm's attention-pooling head `attn_pool` (SigLIP's `global_pool =
    /// "map"`): present in the checkpoint, not used by Prismatic's forward.
    pub attn_pool: bool,
    /// Blocks run before the patch features are read: `depth - 1` (Prismatic
    /// calls `get_intermediate_layers(n = {depth - 2})`, 0-based).
    pub feature_blocks: usize,
    pub norm_eps: f64,
    /// Per-channel normalisation of [0, 1] pixels.
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl VitConfig {
    /// `vit_large_patch14_reg4_dinov2.lvd142m` at `img_size = 224`.
    pub fn dinov2_vit_l14_reg4() -> Self {
        Self {
            image_size: 224,
            patch_size: 14,
            width: 1024,
            depth: 24,
            heads: 16,
            mlp_hidden: 4096,
            class_token: true,
            reg_tokens: 4,
            layer_scale: true,
            attn_pool: false,
            feature_blocks: 23,
            norm_eps: 1e-6,
            // timm's data config for the DINOv2 weights (ImageNet statistics)
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
        }
    }

    /// `vit_so400m_patch14_siglip_224` (width 1152, 27 blocks, MLP 4304 =
    /// `int(1152 * 3.7362)`, MAP head).
    pub fn siglip_so400m_p14_224() -> Self {
        Self {
            image_size: 224,
            patch_size: 14,
            width: 1152,
            depth: 27,
            heads: 16,
            mlp_hidden: 4304,
            class_token: false,
            reg_tokens: 0,
            layer_scale: false,
            attn_pool: true,
            feature_blocks: 26,
            norm_eps: 1e-6,
            mean: [0.5, 0.5, 0.5],
            std: [0.5, 0.5, 0.5],
        }
    }

    pub fn patches(&self) -> usize {
        let n = self.image_size / self.patch_size.max(1);
        n * n
    }

    pub fn prefix_tokens(&self) -> usize {
        usize::from(self.class_token) + self.reg_tokens
    }

    fn validate(&self, name: &str) -> Result<()> {
        let bad = |m: &str| Err(MiniVlaError::Config(format!("{name}: {m}")));
        if self.patch_size == 0 || !self.image_size.is_multiple_of(self.patch_size) {
            return bad("patch_size must divide image_size");
        }
        if self.heads == 0 || !self.width.is_multiple_of(self.heads) {
            return bad("heads must divide width");
        }
        if self.feature_blocks == 0 || self.feature_blocks > self.depth {
            return bad("feature_blocks must be in 1..=depth");
        }
        Ok(())
    }
}

/// The language model: the fields of candle-transformers'
/// `qwen2::Config` this crate uses (Qwen2.5-0.5B's `config.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Rows of `embed_tokens` (and `lm_head`): Prismatic resizes to the
    /// tokenizer length rounded up to a multiple of 64.
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    /// `lm_head` shares `embed_tokens`' weights (Qwen2.5-0.5B: true).
    pub tie_word_embeddings: bool,
}

impl LlmConfig {
    /// Qwen/Qwen2.5-0.5B, with the embedding resized as MiniVLA's
    /// `qwen25-0_5b-extra` backbone does: 151,665 tokens + 256 `<|extra_i|>`
    /// = 151,921, padded to a multiple of 64 = 151,936 rows.
    pub fn qwen25_0_5b() -> Self {
        Self {
            vocab_size: 151_936,
            hidden_size: 896,
            intermediate_size: 4864,
            num_hidden_layers: 24,
            num_attention_heads: 14,
            num_key_value_heads: 2,
            rope_theta: 1_000_000.0,
            rms_norm_eps: 1e-6,
            tie_word_embeddings: true,
        }
    }
}

/// The whole MiniVLA (Prismatic `prism-qwen25-extra-dinosiglip-224px+0_5b`
/// with the bin action tokenizer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiniVlaConfig {
    /// `full`, `small` or `scaled_down` (informational).
    pub preset: String,
    /// `vision_backbone.featurizer`: DINOv2.
    pub dino: VitConfig,
    /// `vision_backbone.fused_featurizer`: SigLIP.
    pub siglip: VitConfig,
    pub llm: LlmConfig,
    /// Images per observation, encoded one after the other (1; MiniVLA's
    /// wrist and history variants use 2: `image_sequence_len`).
    pub n_images: usize,
    /// Length of the tokenizer the action tokenizer counts from
    /// (`len(tokenizer)` with `use_extra`: 151,921). Action token of bin
    /// index `b` (1..=256, `np.digitize` over 256 edges) is `tokenizer_len - b`.
    pub tokenizer_len: usize,
    /// Bin edges over [-1, 1] (256: 255 bin centres).
    pub n_bins: usize,
    pub action_dim: usize,
    /// Prepended to the prompt (`QwenPromptBuilder`, model family `openvla`).
    pub system_prompt: String,
}

impl MiniVlaConfig {
    /// The published MiniVLA sizes (github:Stanford-ILIAD/openvla-mini,
    /// `prism-qwen25-dinosiglip-224px+0_5b+mx-libero-90`).
    pub fn full() -> Self {
        Self {
            preset: "full".into(),
            dino: VitConfig::dinov2_vit_l14_reg4(),
            siglip: VitConfig::siglip_so400m_p14_224(),
            llm: LlmConfig::qwen25_0_5b(),
            n_images: 1,
            tokenizer_len: 151_921,
            n_bins: 256,
            action_dim: ACTION_DIM,
            system_prompt: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                .into(),
        }
    }

    /// Same structure and tensor names, tiny sizes: 28x28 images of 14-pixel
    /// patches (4 patches), widths 32-48, two blocks per ViT, two LM layers.
    pub fn scaled_down() -> Self {
        let full = Self::full();
        Self {
            preset: "scaled_down".into(),
            dino: VitConfig {
                image_size: 28,
                width: 32,
                depth: 2,
                heads: 2,
                mlp_hidden: 64,
                feature_blocks: 1,
                ..full.dino
            },
            siglip: VitConfig {
                image_size: 28,
                width: 48,
                depth: 2,
                heads: 2,
                mlp_hidden: 80,
                feature_blocks: 1,
                ..full.siglip
            },
            llm: LlmConfig {
                vocab_size: 640,
                hidden_size: 64,
                intermediate_size: 128,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                ..full.llm
            },
            tokenizer_len: 600,
            ..full
        }
    }

    /// The same structure and tensor names at a size that trains on two CPU
    /// cores (`wmrl sft --minivla small`, models/minivla-small): 56-pixel
    /// images (16 patches of 14 pixels) from two cameras, ViTs of width 64
    /// with features after 2 of 3 blocks, a 3-layer Qwen2 of width 128 and
    /// a 384-token vocabulary (word-level prompt tokens, then the 255
    /// action tokens). About 0.96M parameters.
    pub fn small() -> Self {
        let full = Self::full();
        let vit = |v: VitConfig| VitConfig {
            image_size: 56,
            width: 64,
            depth: 3,
            heads: 4,
            mlp_hidden: 128,
            feature_blocks: 2,
            ..v
        };
        Self {
            preset: "small".into(),
            dino: vit(full.dino.clone()),
            siglip: vit(full.siglip.clone()),
            llm: LlmConfig {
                vocab_size: 384,
                hidden_size: 128,
                intermediate_size: 384,
                num_hidden_layers: 3,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                ..full.llm
            },
            n_images: 2,
            tokenizer_len: 384,
            ..full
        }
    }

    /// Width of the fused patch features (DINOv2 + SigLIP).
    pub fn fused_width(&self) -> usize {
        self.dino.width + self.siglip.width
    }

    /// Vision tokens inserted into the prompt.
    pub fn vision_tokens(&self) -> usize {
        self.n_images * self.dino.patches()
    }

    pub fn validate(&self) -> Result<()> {
        self.dino.validate("dino")?;
        self.siglip.validate("siglip")?;
        let bad = |m: String| Err(MiniVlaError::Config(m));
        if self.dino.image_size != self.siglip.image_size
            || self.dino.patches() != self.siglip.patches()
        {
            return bad("dino and siglip must see the same image size and patch grid".into());
        }
        let l = &self.llm;
        if l.num_attention_heads == 0
            || !l.hidden_size.is_multiple_of(l.num_attention_heads)
            || l.num_key_value_heads == 0
            || !l.num_attention_heads.is_multiple_of(l.num_key_value_heads)
        {
            return bad("llm heads must divide hidden_size and be a multiple of kv heads".into());
        }
        if self.action_dim != ACTION_DIM || self.n_images == 0 || self.n_bins < 2 {
            return bad(format!(
                "action_dim must be {ACTION_DIM}, n_images >= 1, n_bins >= 2"
            ));
        }
        if self.tokenizer_len < self.n_bins || self.tokenizer_len > l.vocab_size {
            return bad(format!(
                "tokenizer_len {} must be in n_bins..=vocab_size ({}..={})",
                self.tokenizer_len, self.n_bins, l.vocab_size
            ));
        }
        Ok(())
    }
}
