//! The network: a patch-embedding ViT over the camera frames, a projector
//! into the language model's width, and a decoder-only transformer (pre-norm
//! RMSNorm, grouped-query attention, SwiGLU: the Qwen2 block) over
//! `[vision tokens, instruction tokens, proprio token, action tokens]`, with
//! a head over the `n_bins` action bins.
//!
//! Attention mask: the observation prefix attends to itself bidirectionally
//! (prefix-LM, as PaliGemma); action positions see the whole prefix and,
//! when decoding autoregressively, the action positions before them; when
//! decoding in parallel they see each other. Nothing here samples or owns
//! parameters' lifetimes: see `policy.rs`.

use candle_core::{D, DType, Device, Tensor};

use crate::params::ParamBuilder;
use crate::{Decoding, PolicyConfig, Result};

const INIT_STD: f64 = 0.02;
const MASKED: f64 = -1e9;

struct Linear {
    w: Tensor,
    b: Option<Tensor>,
}

impl Linear {
    fn new(
        p: &mut ParamBuilder,
        name: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
        std: f64,
    ) -> Result<Self> {
        let w = p.normal(&format!("{name}.weight"), &[d_out, d_in], std)?;
        let b = if bias {
            Some(p.constant(&format!("{name}.bias"), &[d_out], 0.0)?)
        } else {
            None
        };
        Ok(Self { w, b })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let d_in = dims[dims.len() - 1];
        let n: usize = dims[..dims.len() - 1].iter().product();
        let y = x.reshape((n, d_in))?.matmul(&self.w.t()?)?;
        let y = match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let mut out = dims;
        let last = out.len() - 1;
        out[last] = self.w.dim(0)?;
        Ok(y.reshape(out)?)
    }
}

fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let d = x.dim(D::Minus1)? as f64;
    let ms = (x.sqr()?.sum_keepdim(D::Minus1)? / d)?;
    Ok(x.broadcast_div(&(ms + eps)?.sqrt()?)?.broadcast_mul(w)?)
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    n_heads: usize,
    n_kv: usize,
    head_dim: usize,
}

impl Attention {
    fn forward(&self, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let (b, s, d) = x.dims3()?;
        let heads = |t: Tensor, h: usize| -> Result<Tensor> {
            Ok(t.reshape((b, s, h, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let q = heads(self.q.forward(x)?, self.n_heads)?;
        let mut k = heads(self.k.forward(x)?, self.n_kv)?;
        let mut v = heads(self.v.forward(x)?, self.n_kv)?;
        if self.n_kv != self.n_heads {
            let rep = self.n_heads / self.n_kv;
            let expand = |t: Tensor| -> Result<Tensor> {
                Ok(t.unsqueeze(2)?
                    .broadcast_as((b, self.n_kv, rep, s, self.head_dim))?
                    .contiguous()?
                    .reshape((b, self.n_heads, s, self.head_dim))?)
            };
            k = expand(k)?;
            v = expand(v)?;
        }
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let mut att = (q.matmul(&k.t()?.contiguous()?)? * scale)?;
        if let Some(m) = mask {
            att = att.broadcast_add(m)?;
        }
        let att = candle_nn::ops::softmax(&att, D::Minus1)?;
        let y = att.matmul(&v)?.transpose(1, 2)?.reshape((b, s, d))?;
        self.o.forward(&y)
    }
}

struct Block {
    norm1: Tensor,
    attn: Attention,
    norm2: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
    eps: f64,
}

impl Block {
    #[allow(clippy::too_many_arguments)]
    fn new(
        p: &mut ParamBuilder,
        name: &str,
        d: usize,
        n_heads: usize,
        n_kv: usize,
        hidden: usize,
        n_layers_total: usize,
        eps: f64,
    ) -> Result<Self> {
        let head_dim = d / n_heads;
        // GPT-2 style: residual projections scaled by depth.
        let out_std = INIT_STD / (2.0 * n_layers_total as f64).sqrt();
        Ok(Self {
            norm1: p.constant(&format!("{name}.norm1.weight"), &[d], 1.0)?,
            attn: Attention {
                q: Linear::new(
                    p,
                    &format!("{name}.attn.q"),
                    d,
                    n_heads * head_dim,
                    true,
                    INIT_STD,
                )?,
                k: Linear::new(
                    p,
                    &format!("{name}.attn.k"),
                    d,
                    n_kv * head_dim,
                    true,
                    INIT_STD,
                )?,
                v: Linear::new(
                    p,
                    &format!("{name}.attn.v"),
                    d,
                    n_kv * head_dim,
                    true,
                    INIT_STD,
                )?,
                o: Linear::new(
                    p,
                    &format!("{name}.attn.o"),
                    n_heads * head_dim,
                    d,
                    false,
                    out_std,
                )?,
                n_heads,
                n_kv,
                head_dim,
            },
            norm2: p.constant(&format!("{name}.norm2.weight"), &[d], 1.0)?,
            gate: Linear::new(p, &format!("{name}.mlp.gate"), d, hidden, false, INIT_STD)?,
            up: Linear::new(p, &format!("{name}.mlp.up"), d, hidden, false, INIT_STD)?,
            down: Linear::new(p, &format!("{name}.mlp.down"), hidden, d, false, out_std)?,
            eps,
        })
    }

    fn forward(&self, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let h = (x + self
            .attn
            .forward(&rms_norm(x, &self.norm1, self.eps)?, mask)?)?;
        let n = rms_norm(&h, &self.norm2, self.eps)?;
        let m = (self.gate.forward(&n)?.silu()? * self.up.forward(&n)?)?;
        Ok((h + self.down.forward(&m)?)?)
    }
}

/// The tensors one batch of observations becomes.
#[derive(Debug, Clone)]
pub struct PreparedInputs {
    /// `[B, n_images * patches, 3 * patch * patch]`, values in [-1, 1].
    pub(crate) patches: Tensor,
    /// `[B, text_len]` u32 byte tokens.
    pub(crate) text: Tensor,
    /// `[B, proprio_dim]`, normalised; `None` when the config has no proprio.
    pub(crate) proprio: Option<Tensor>,
}

impl PreparedInputs {
    pub fn batch_size(&self) -> usize {
        self.text.dims().first().copied().unwrap_or(0)
    }

    /// The rows named by `idx`, in that order (for minibatches).
    pub fn select(&self, idx: &[usize]) -> Result<Self> {
        let dev = self.text.device();
        let ids = Tensor::from_vec(
            idx.iter().map(|&i| i as u32).collect::<Vec<_>>(),
            idx.len(),
            dev,
        )?;
        Ok(Self {
            patches: self.patches.index_select(&ids, 0)?,
            text: self.text.index_select(&ids, 0)?,
            proprio: match &self.proprio {
                Some(p) => Some(p.index_select(&ids, 0)?),
                None => None,
            },
        })
    }
}

/// The whole network; holds tensors that share storage with the policy's vars.
pub(crate) struct Network {
    cfg: PolicyConfig,
    patch_embed: Linear,
    vision_pos: Tensor,
    image_type: Tensor,
    vision_blocks: Vec<Block>,
    vision_norm: Tensor,
    proj1: Linear,
    proj2: Linear,
    text_embed: Tensor,
    text_proj: Option<Linear>,
    proprio_embed: Option<Linear>,
    action_embed: Tensor,
    action_query: Tensor,
    pos: Tensor,
    blocks: Vec<Block>,
    final_norm: Tensor,
    head: Linear,
    dtype: DType,
}

impl Network {
    pub fn new(cfg: &PolicyConfig, p: &mut ParamBuilder, dtype: DType) -> Result<Self> {
        let vw = cfg.vision_width;
        let d = cfg.d_model;
        let patch_dim = 3 * cfg.patch_size * cfg.patch_size;
        let n_patch = cfg.patches_per_image();
        let mut vision_blocks = Vec::new();
        for i in 0..cfg.vision_layers {
            vision_blocks.push(Block::new(
                p,
                &format!("vision.blocks.{i}"),
                vw,
                cfg.vision_heads,
                cfg.vision_heads,
                4 * vw,
                cfg.vision_layers,
                cfg.norm_eps,
            )?);
        }
        let mut blocks = Vec::new();
        for i in 0..cfg.n_layers {
            blocks.push(Block::new(
                p,
                &format!("lm.blocks.{i}"),
                d,
                cfg.n_heads,
                cfg.n_kv_heads,
                cfg.mlp_hidden,
                cfg.n_layers,
                cfg.norm_eps,
            )?);
        }
        // Parallel decoding: one position per step emits all 7 dimensions.
        let head_out = match cfg.decoding {
            Decoding::Parallel => cfg.action_dim * cfg.n_bins,
            Decoding::Autoregressive => cfg.n_bins,
        };
        Ok(Self {
            cfg: cfg.clone(),
            patch_embed: Linear::new(p, "vision.patch_embed", patch_dim, vw, true, INIT_STD)?,
            vision_pos: p.normal("vision.pos", &[n_patch, vw], INIT_STD)?,
            image_type: p.normal("vision.image_type", &[cfg.n_images(), vw], INIT_STD)?,
            vision_blocks,
            vision_norm: p.constant("vision.norm.weight", &[vw], 1.0)?,
            proj1: Linear::new(p, "projector.fc1", vw, d, true, INIT_STD)?,
            proj2: Linear::new(p, "projector.fc2", d, d, true, INIT_STD)?,
            text_embed: p.normal(
                "lm.text_embed",
                &[cfg.text_vocab, d / cfg.text_patch],
                INIT_STD,
            )?,
            text_proj: if cfg.text_patch > 1 {
                Some(Linear::new(p, "lm.text_proj", d, d, true, INIT_STD)?)
            } else {
                None
            },
            proprio_embed: if cfg.proprio_dim > 0 {
                Some(Linear::new(
                    p,
                    "lm.proprio_embed",
                    cfg.proprio_dim,
                    d,
                    true,
                    INIT_STD,
                )?)
            } else {
                None
            },
            action_embed: p.normal("lm.action_embed", &[cfg.n_bins + 1, d], INIT_STD)?,
            action_query: p.normal("lm.action_query", &[cfg.chunk, d], INIT_STD)?,
            pos: p.normal("lm.pos", &[cfg.seq_len(), d], INIT_STD)?,
            blocks,
            final_norm: p.constant("lm.final_norm.weight", &[d], 1.0)?,
            head: Linear::new(p, "lm.head", d, head_out, false, INIT_STD)?,
            dtype,
        })
    }

    fn encode_prefix(&self, x: &PreparedInputs) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (b, n_tok, pd) = x.patches.dims3()?;
        let n_img = cfg.n_images();
        let n_patch = n_tok / n_img;
        let vw = cfg.vision_width;
        let v = self
            .patch_embed
            .forward(&x.patches.reshape((b * n_img, n_patch, pd))?)?;
        let v = v.broadcast_add(&self.vision_pos.unsqueeze(0)?)?;
        let v = v
            .reshape((b, n_img, n_patch, vw))?
            .broadcast_add(&self.image_type.reshape((1, n_img, 1, vw))?)?
            .reshape((b * n_img, n_patch, vw))?;
        let mut v = v;
        for blk in &self.vision_blocks {
            v = blk.forward(&v, None)?;
        }
        let v = rms_norm(&v, &self.vision_norm, cfg.norm_eps)?;
        let v = self.proj2.forward(&self.proj1.forward(&v)?.gelu()?)?;
        let v = v.reshape((b, n_img * n_patch, cfg.d_model))?;
        let (_, l) = x.text.dims2()?;
        let t = self
            .text_embed
            .index_select(&x.text.flatten_all()?, 0)?
            .reshape((b, l / cfg.text_patch, cfg.d_model))?;
        let t = match &self.text_proj {
            Some(proj) => proj.forward(&t)?,
            None => t,
        };
        let mut parts = vec![v, t];
        if let (Some(e), Some(p)) = (&self.proprio_embed, &x.proprio) {
            parts.push(e.forward(p)?.unsqueeze(1)?);
        }
        Ok(Tensor::cat(&parts, 1)?)
    }

    fn mask(&self, prefix: usize, n_act: usize, device: &Device) -> Result<Tensor> {
        let s = prefix + n_act;
        let parallel = self.cfg.decoding == Decoding::Parallel;
        let mut m = vec![0f64; s * s];
        for i in 0..s {
            for j in 0..s {
                let ok = j < prefix || (i >= prefix && (parallel || j <= i));
                if !ok {
                    m[i * s + j] = MASKED;
                }
            }
        }
        Ok(Tensor::from_vec(m, (s, s), device)?.to_dtype(self.dtype)?)
    }

    /// Action-bin logits `[B, n, n_bins]`.
    ///
    /// Parallel decoding: `prev` is ignored and `n = tokens_per_call`.
    /// Autoregressive: `prev` holds the first `k` tokens of the chunk
    /// (`[B, k]`, u32, or `None` for `k = 0`) and `n = k + 1`: logits for
    /// tokens `0..=k`, each conditioned on the tokens before it.
    pub fn logits(&self, x: &PreparedInputs, prev: Option<&Tensor>) -> Result<Tensor> {
        self.head_logits(&self.features(x, prev)?)
    }

    /// What the action head reads: the final-normed hidden state at every
    /// action position, `[B, n, d_model]` (`n` as in [`Network::logits`]).
    pub fn features(&self, x: &PreparedInputs, prev: Option<&Tensor>) -> Result<Tensor> {
        let cfg = &self.cfg;
        let prefix = self.encode_prefix(x)?;
        let (b, p_len, d) = prefix.dims3()?;
        let act_in = match cfg.decoding {
            Decoding::Parallel => self
                .action_query
                .unsqueeze(0)?
                .broadcast_as((b, cfg.chunk, d))?
                .contiguous()?,
            Decoding::Autoregressive => {
                let bos = Tensor::full(cfg.n_bins as u32, (b, 1), prefix.device())?;
                let ids = match prev {
                    Some(t) if t.dim(1)? > 0 => Tensor::cat(&[&bos, t], 1)?,
                    _ => bos,
                };
                let n = ids.dim(1)?;
                self.action_embed
                    .index_select(&ids.flatten_all()?, 0)?
                    .reshape((b, n, d))?
            }
        };
        let n_act = act_in.dim(1)?;
        let s = p_len + n_act;
        let mut h = Tensor::cat(&[prefix, act_in], 1)?
            .broadcast_add(&self.pos.narrow(0, 0, s)?.unsqueeze(0)?)?;
        let mask = self.mask(p_len, n_act, h.device())?;
        for blk in &self.blocks {
            h = blk.forward(&h, Some(&mask))?;
        }
        let h = h.narrow(1, p_len, n_act)?;
        rms_norm(&h, &self.final_norm, cfg.norm_eps)
    }

    /// Action-bin logits from [`Network::features`].
    pub fn head_logits(&self, features: &Tensor) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (b, n_act, _) = features.dims3()?;
        let logits = self.head.forward(features)?;
        match cfg.decoding {
            Decoding::Parallel => Ok(logits.reshape((b, n_act * cfg.action_dim, cfg.n_bins))?),
            Decoding::Autoregressive => Ok(logits),
        }
    }
}
