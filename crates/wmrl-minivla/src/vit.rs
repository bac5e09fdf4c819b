//! timm's `VisionTransformer` as Prismatic uses it for DINOv2 and SigLIP:
//! fused `qkv`, GELU (erf) MLP, optional LayerScale, register tokens and the
//! MAP head, with timm's tensor names. The forward returns the patch tokens
//! after `feature_blocks` blocks, before the final norm (Prismatic's
//! `get_intermediate_layers(n = {depth - 2})`).
//!
//! Why not candle-transformers' `dinov2reg4` / `siglip` whole: `dinov2reg4`
//! fixes the input at 518 px with a 7,806-class head (it panics otherwise) and
//! `siglip::VisionModel` returns the last block through `post_layernorm`;
//! neither exposes an intermediate block. The layers here are built from the
//! same candle-transformers pieces (`with_tracing::{linear, layer_norm}`).
//! Blocks past `feature_blocks`, `norm` and `attn_pool` are loaded (they are
//! in the checkpoint and counted) but never run.
//!
//! `diff = true` takes differentiable forms of layer norm and softmax
//! (candle's fused kernels record no backward) for training the whole model
//! (`crate::sft`); the arithmetic is the same.

use candle_core::{D, Module, Result, Tensor};
use candle_nn::{LayerNorm, VarBuilder};
use candle_transformers::models::with_tracing::{Linear, linear};

use crate::config::VitConfig;

#[derive(Debug, Clone)]
struct Attention {
    qkv: Linear,
    proj: Linear,
    heads: usize,
}

impl Attention {
    fn new(c: &VitConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            qkv: linear(c.width, 3 * c.width, vb.pp("qkv"))?,
            proj: linear(c.width, c.width, vb.pp("proj"))?,
            heads: c.heads,
        })
    }

    fn forward(&self, xs: &Tensor, diff: bool) -> Result<Tensor> {
        let (b, n, c) = xs.dims3()?;
        let hd = c / self.heads;
        // [b, n, 3, h, hd] -> [3, b, h, n, hd]
        let qkv = self
            .qkv
            .forward(xs)?
            .reshape((b, n, 3, self.heads, hd))?
            .permute((2, 0, 3, 1, 4))?;
        let q = (qkv.get(0)?.contiguous()? * (1.0 / (hd as f64).sqrt()))?;
        let k = qkv.get(1)?.contiguous()?;
        let v = qkv.get(2)?.contiguous()?;
        let w = q.matmul(&k.t()?)?;
        let attn = if diff {
            candle_nn::ops::softmax(&w, D::Minus1)?
        } else {
            candle_nn::ops::softmax_last_dim(&w)?
        };
        let out = attn.matmul(&v)?.transpose(1, 2)?.reshape((b, n, c))?;
        self.proj.forward(&out)
    }
}

#[derive(Debug, Clone)]
struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    fn new(width: usize, hidden: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            fc1: linear(width, hidden, vb.pp("fc1"))?,
            fc2: linear(hidden, width, vb.pp("fc2"))?,
        })
    }

    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        // timm's default `nn.GELU` is the exact (erf) form
        self.fc2.forward(&self.fc1.forward(xs)?.gelu_erf()?)
    }
}

#[derive(Debug, Clone)]
struct Block {
    norm1: LayerNorm,
    attn: Attention,
    ls1: Option<Tensor>,
    norm2: LayerNorm,
    mlp: Mlp,
    ls2: Option<Tensor>,
}

impl Block {
    fn new(c: &VitConfig, vb: VarBuilder) -> Result<Self> {
        // LayerScale's `gamma` is stored as `scale_factor` (the HF OpenVLA
        // layout: transformers renames parameters containing `gamma`).
        let ls = |name: &str| -> Result<Option<Tensor>> {
            c.layer_scale
                .then(|| vb.pp(name).get(c.width, "scale_factor"))
                .transpose()
        };
        Ok(Self {
            norm1: layer_norm(c.width, c.norm_eps, vb.pp("norm1"))?,
            attn: Attention::new(c, vb.pp("attn"))?,
            ls1: ls("ls1")?,
            norm2: layer_norm(c.width, c.norm_eps, vb.pp("norm2"))?,
            mlp: Mlp::new(c.width, c.mlp_hidden, vb.pp("mlp"))?,
            ls2: ls("ls2")?,
        })
    }

    fn forward(&self, xs: &Tensor, diff: bool) -> Result<Tensor> {
        let scale = |y: Tensor, ls: &Option<Tensor>| match ls {
            Some(g) => y.broadcast_mul(g),
            None => Ok(y),
        };
        let y = self.attn.forward(&norm(&self.norm1, xs, diff)?, diff)?;
        let xs = (xs + scale(y, &self.ls1)?)?;
        let y = self.mlp.forward(&norm(&self.norm2, &xs, diff)?)?;
        xs + scale(y, &self.ls2)?
    }
}

fn layer_norm(width: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    candle_nn::layer_norm(width, eps, vb)
}

/// Layer norm, by candle's fused kernel or (`diff`) its differentiable form.
fn norm(n: &LayerNorm, xs: &Tensor, diff: bool) -> Result<Tensor> {
    match (diff, n.bias()) {
        (true, Some(b)) => candle_nn::ops::layer_norm_slow(xs, n.weight(), b, n.eps() as f32),
        _ => n.forward(xs),
    }
}

/// Loads timm's `AttentionPoolLatent` tensors (`latent`, `q`, `kv`, `proj`,
/// `norm`, `mlp`) so they are checked and counted; Prismatic never runs it.
fn load_attn_pool(c: &VitConfig, vb: VarBuilder) -> Result<()> {
    vb.get((1, 1, c.width), "latent")?;
    linear(c.width, c.width, vb.pp("q"))?;
    linear(c.width, 2 * c.width, vb.pp("kv"))?;
    linear(c.width, c.width, vb.pp("proj"))?;
    layer_norm(c.width, c.norm_eps, vb.pp("norm"))?;
    Mlp::new(c.width, c.mlp_hidden, vb.pp("mlp"))?;
    Ok(())
}

/// One featurizer.
#[derive(Debug, Clone)]
pub struct Vit {
    patch_embed: candle_nn::Conv2d,
    prefix: Option<Tensor>,
    pos_embed: Tensor,
    blocks: Vec<Block>,
    n_prefix: usize,
}

impl Vit {
    pub fn new(c: &VitConfig, vb: VarBuilder) -> Result<Self> {
        let conv = candle_nn::Conv2dConfig {
            stride: c.patch_size,
            ..Default::default()
        };
        let patch_embed = candle_nn::conv2d(
            3,
            c.width,
            c.patch_size,
            conv,
            vb.pp("patch_embed").pp("proj"),
        )?;
        let mut prefix = Vec::new();
        if c.class_token {
            prefix.push(vb.get((1, 1, c.width), "cls_token")?);
        }
        if c.reg_tokens > 0 {
            prefix.push(vb.get((1, c.reg_tokens, c.width), "reg_token")?);
        }
        let prefix = if prefix.is_empty() {
            None
        } else {
            Some(Tensor::cat(&prefix, 1)?)
        };
        // timm `no_embed_class = True` (DINOv2-reg) or no prefix at all
        // (SigLIP): positions are added to the patches only.
        let pos_embed = vb.get((1, c.patches(), c.width), "pos_embed")?;
        let blocks = (0..c.depth)
            .map(|i| Block::new(c, vb.pp("blocks").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        layer_norm(c.width, c.norm_eps, vb.pp("norm"))?;
        if c.attn_pool {
            load_attn_pool(c, vb.pp("attn_pool"))?;
        }
        Ok(Self {
            patch_embed,
            prefix,
            pos_embed,
            blocks: blocks.into_iter().take(c.feature_blocks).collect(),
            n_prefix: c.prefix_tokens(),
        })
    }

    /// `[b, 3, h, w]` normalised pixels -> `[b, patches, width]`.
    pub fn forward_features(&self, pixels: &Tensor, diff: bool) -> Result<Tensor> {
        let xs = self.patch_embed.forward(pixels)?;
        let (b, c, h, w) = xs.dims4()?;
        let xs = xs.reshape((b, c, h * w))?.transpose(1, 2)?;
        let xs = xs.broadcast_add(&self.pos_embed)?;
        let mut xs = match &self.prefix {
            Some(p) => Tensor::cat(&[&p.broadcast_as((b, self.n_prefix, c))?, &xs], 1)?,
            None => xs,
        };
        for blk in &self.blocks {
            xs = blk.forward(&xs, diff)?;
        }
        xs.narrow(1, self.n_prefix, h * w)?.contiguous()
    }
}

/// Prismatic's `FusedMLPProjector` (`fused-gelu-mlp`): fused width -> 4x ->
/// LM width -> LM width, exact GELU between.
#[derive(Debug, Clone)]
pub struct Projector {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
}

impl Projector {
    pub fn new(fused: usize, llm: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            fc1: linear(fused, 4 * fused, vb.pp("fc1"))?,
            fc2: linear(4 * fused, llm, vb.pp("fc2"))?,
            fc3: linear(llm, llm, vb.pp("fc3"))?,
        })
    }
}

impl Module for Projector {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let xs = self.fc1.forward(xs)?.gelu_erf()?;
        let xs = self.fc2.forward(&xs)?.gelu_erf()?;
        self.fc3.forward(&xs)
    }
}

/// Concatenate the two featurizers' patches along the feature axis.
pub fn fuse(dino: &Tensor, siglip: &Tensor) -> Result<Tensor> {
    Tensor::cat(&[dino, siglip], D::Minus1)
}
