//! Qwen2 decoder with the structure and tensor names of candle-transformers'
//! `qwen2` (`model.embed_tokens`, `model.layers.N.{self_attn.{q,k,v,o}_proj,
//! mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm}`,
//! `model.norm`, `lm_head`), built from its pieces (`with_tracing::{linear,
//! linear_no_bias, RmsNorm}`, `utils::repeat_kv`, candle-nn's `rope`).
//!
//! Why not `qwen2::ModelForCausalLM` itself: its forward takes token ids and
//! embeds them internally, and MiniVLA must insert projected image patches
//! between text embeddings. This module never changes the arithmetic of that
//! model: same RoPE (half rotation), causal mask, GQA and SwiGLU.

use candle_core::{D, DType, Device, Module, Result, Tensor, Var};
use candle_nn::{Activation, Embedding, VarBuilder};
use candle_transformers::models::with_tracing::{Linear, RmsNorm, linear, linear_no_bias};
use candle_transformers::utils::repeat_kv;

use crate::config::LlmConfig;

/// A LoRA adapter on one projection: `y = W x + scale * B (A x)`, `A`
/// `[rank, in]`, `B` `[out, rank]` (zero at the start, so the adapted model
/// starts as the checkpoint).
#[derive(Debug, Clone)]
pub(crate) struct Lora {
    pub a: Var,
    pub b: Var,
    pub scale: f64,
}

/// A checkpoint projection, frozen, with an optional LoRA adapter.
#[derive(Debug, Clone)]
pub(crate) struct Proj {
    base: Linear,
    pub in_dim: usize,
    pub out_dim: usize,
    pub lora: Option<Lora>,
}

impl Proj {
    fn new(base: Linear, in_dim: usize, out_dim: usize) -> Self {
        Self {
            base,
            in_dim,
            out_dim,
            lora: None,
        }
    }
}

impl Module for Proj {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let y = self.base.forward(xs)?;
        match &self.lora {
            None => Ok(y),
            Some(l) => {
                let h = xs.broadcast_matmul(&l.a.as_tensor().t()?)?;
                let d = h.broadcast_matmul(&l.b.as_tensor().t()?)?;
                y + (d * l.scale)?
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Attention {
    q_proj: Proj,
    k_proj: Proj,
    v_proj: Proj,
    o_proj: Proj,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn new(c: &LlmConfig, vb: VarBuilder) -> Result<Self> {
        let head_dim = c.hidden_size / c.num_attention_heads;
        let kv = c.num_key_value_heads * head_dim;
        let h = c.hidden_size;
        Ok(Self {
            q_proj: Proj::new(linear(h, h, vb.pp("q_proj"))?, h, h),
            k_proj: Proj::new(linear(h, kv, vb.pp("k_proj"))?, h, kv),
            v_proj: Proj::new(linear(h, kv, vb.pp("v_proj"))?, h, kv),
            o_proj: Proj::new(linear_no_bias(h, h, vb.pp("o_proj"))?, h, h),
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim,
        })
    }

    fn forward(
        &self,
        xs: &Tensor,
        rope: &Rope,
        mask: Option<&Tensor>,
        cache: &mut Option<(Tensor, Tensor)>,
        diff: bool,
    ) -> Result<Tensor> {
        let (b, t, d) = xs.dims3()?;
        let split = |y: Tensor, h: usize| y.reshape((b, t, h, self.head_dim))?.transpose(1, 2);
        let q = split(self.q_proj.forward(xs)?, self.heads)?.contiguous()?;
        let k = split(self.k_proj.forward(xs)?, self.kv_heads)?.contiguous()?;
        let v = split(self.v_proj.forward(xs)?, self.kv_heads)?;
        // candle's fused rope, softmax and RMS-norm kernels record no
        // backward; `diff` takes their differentiable forms.
        let rope_fn = if diff {
            candle_nn::rotary_emb::rope_slow
        } else {
            candle_nn::rotary_emb::rope
        };
        let q = rope_fn(&q, &rope.cos, &rope.sin)?;
        let k = rope_fn(&k, &rope.cos, &rope.sin)?;
        let (k, v) = match cache.take() {
            Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 2)?, Tensor::cat(&[&pv, &v], 2)?),
            None => (k, v),
        };
        *cache = Some((k.clone(), v.clone()));
        let groups = self.heads / self.kv_heads;
        let k = repeat_kv(k, groups)?.contiguous()?;
        let v = repeat_kv(v, groups)?.contiguous()?;
        let w = (q.matmul(&k.transpose(2, 3)?)? * (1.0 / (self.head_dim as f64).sqrt()))?;
        let w = match mask {
            Some(m) => w.broadcast_add(m)?,
            None => w,
        };
        let w = if diff {
            candle_nn::ops::softmax(&w, D::Minus1)?
        } else {
            candle_nn::ops::softmax_last_dim(&w)?
        };
        w.matmul(&v)?
            .transpose(1, 2)?
            .reshape((b, t, d))?
            .apply(&self.o_proj)
    }
}

#[derive(Debug, Clone)]
struct DecoderLayer {
    self_attn: Attention,
    gate_proj: Proj,
    up_proj: Proj,
    down_proj: Proj,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn new(c: &LlmConfig, vb: VarBuilder) -> Result<Self> {
        let mlp = vb.pp("mlp");
        let (h, i) = (c.hidden_size, c.intermediate_size);
        Ok(Self {
            self_attn: Attention::new(c, vb.pp("self_attn"))?,
            gate_proj: Proj::new(linear_no_bias(h, i, mlp.pp("gate_proj"))?, h, i),
            up_proj: Proj::new(linear_no_bias(h, i, mlp.pp("up_proj"))?, h, i),
            down_proj: Proj::new(linear_no_bias(i, h, mlp.pp("down_proj"))?, i, h),
            input_layernorm: RmsNorm::new(h, c.rms_norm_eps, vb.pp("input_layernorm"))?,
            post_attention_layernorm: RmsNorm::new(
                h,
                c.rms_norm_eps,
                vb.pp("post_attention_layernorm"),
            )?,
        })
    }

    fn forward(
        &self,
        xs: &Tensor,
        rope: &Rope,
        mask: Option<&Tensor>,
        cache: &mut Option<(Tensor, Tensor)>,
        diff: bool,
    ) -> Result<Tensor> {
        let norm = |n: &RmsNorm, x: &Tensor| {
            if diff {
                n.forward_diff(x)
            } else {
                n.forward(x)
            }
        };
        let y =
            self.self_attn
                .forward(&norm(&self.input_layernorm, xs)?, rope, mask, cache, diff)?;
        let xs = (xs + y)?;
        let h = norm(&self.post_attention_layernorm, &xs)?;
        let g = self.gate_proj.forward(&h)?.apply(&Activation::Silu)?;
        let y = (g * self.up_proj.forward(&h)?)?.apply(&self.down_proj)?;
        xs + y
    }
}

/// Keys and values of the positions seen so far, per layer.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    pub fn new(n_layers: usize) -> Self {
        Self {
            layers: vec![None; n_layers],
            len: 0,
        }
    }
}

struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    /// Positions `offset..offset + t`.
    fn new(c: &LlmConfig, offset: usize, t: usize, dtype: DType, dev: &Device) -> Result<Self> {
        let dim = c.hidden_size / c.num_attention_heads;
        let inv: Vec<f32> = (0..dim)
            .step_by(2)
            .map(|i| 1.0 / c.rope_theta.powf(i as f64 / dim as f64) as f32)
            .collect();
        let inv = Tensor::from_vec(inv, (1, dim / 2), dev)?;
        let pos = Tensor::arange(offset as u32, (offset + t) as u32, dev)?
            .to_dtype(DType::F32)?
            .reshape((t, 1))?;
        let f = pos.matmul(&inv)?;
        Ok(Self {
            cos: f.cos()?.to_dtype(dtype)?,
            sin: f.sin()?.to_dtype(dtype)?,
        })
    }
}

/// `Qwen2ForCausalLM` over input embeddings.
#[derive(Debug, Clone)]
pub struct Qwen2 {
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    cfg: LlmConfig,
}

impl Qwen2 {
    pub fn new(c: &LlmConfig, vb: VarBuilder) -> Result<Self> {
        let m = vb.pp("model");
        let embed_tokens = candle_nn::embedding(c.vocab_size, c.hidden_size, m.pp("embed_tokens"))?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| DecoderLayer::new(c, m.pp("layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(c.hidden_size, c.rms_norm_eps, m.pp("norm"))?;
        let lm_head = if c.tie_word_embeddings {
            Linear::from_weights(embed_tokens.embeddings().clone(), None)
        } else {
            linear_no_bias(c.hidden_size, c.vocab_size, vb.pp("lm_head"))?
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
            cfg: c.clone(),
        })
    }

    /// `[b, t]` ids -> `[b, t, hidden]`.
    pub fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        self.embed_tokens.forward(ids)
    }

    /// Causal forward over `[b, t, hidden]` embeddings; logits of the last
    /// position, `[b, vocab]`.
    pub fn last_logits(&self, embeds: &Tensor) -> Result<Tensor> {
        self.last_logits_cached(embeds, &mut KvCache::new(self.cfg.num_hidden_layers))
    }

    /// As [`Qwen2::last_logits`] for positions after those already in
    /// `cache` (candle-transformers' `qwen2` KV cache, held by the caller so
    /// the model stays shared); appends this call's keys and values.
    pub fn last_logits_cached(&self, embeds: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (_, t, _) = embeds.dims3()?;
        let (dtype, dev) = (embeds.dtype(), embeds.device());
        let offset = cache.len;
        let rope = Rope::new(&self.cfg, offset, t, dtype, dev)?;
        let mask = if t > 1 {
            let m: Vec<f32> = (0..t)
                .flat_map(|i| {
                    (0..offset + t).map(move |j| {
                        if j > i + offset {
                            f32::NEG_INFINITY
                        } else {
                            0.0
                        }
                    })
                })
                .collect();
            Some(Tensor::from_vec(m, (1, 1, t, offset + t), dev)?.to_dtype(dtype)?)
        } else {
            None
        };
        let mut xs = embeds.clone();
        for (layer, kv) in self.layers.iter().zip(cache.layers.iter_mut()) {
            xs = layer.forward(&xs, &rope, mask.as_ref(), kv, false)?;
        }
        cache.len += t;
        let last = xs.narrow(1, t - 1, 1)?.squeeze(1)?;
        self.norm
            .forward(&last)?
            .apply(&self.lm_head)?
            .to_dtype(DType::F32)
    }

    pub fn n_layers(&self) -> usize {
        self.cfg.num_hidden_layers
    }

    /// Causal forward over `[b, t, hidden]` embeddings without a cache,
    /// differentiable (gradient reaches the LoRA adapters); logits
    /// `[b, k, vocab]` (f32) of the last `k` positions.
    pub fn last_k_logits(&self, embeds: &Tensor, k: usize) -> Result<Tensor> {
        let (_, t, _) = embeds.dims3()?;
        if k == 0 || k > t {
            candle_core::bail!("last_k_logits: k = {k} of {t} positions");
        }
        let (dtype, dev) = (embeds.dtype(), embeds.device());
        let rope = Rope::new(&self.cfg, 0, t, dtype, dev)?;
        let m: Vec<f32> = (0..t)
            .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(m, (1, 1, t, t), dev)?.to_dtype(dtype)?;
        let mut xs = embeds.clone();
        for layer in &self.layers {
            xs = layer.forward(&xs, &rope, Some(&mask), &mut None, true)?;
        }
        self.norm
            .forward_diff(&xs.narrow(1, t - k, k)?)?
            .apply(&self.lm_head)?
            .to_dtype(DType::F32)
    }

    /// Every adaptable projection, named as in the checkpoint under
    /// `model.` (`model.layers.N.self_attn.q_proj`, `...mlp.gate_proj`),
    /// with its short name (`q_proj`, ..., `down_proj`).
    pub(crate) fn projections_mut(&mut self) -> Vec<(String, &'static str, &mut Proj)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            let at = format!("model.layers.{i}.self_attn");
            let ml = format!("model.layers.{i}.mlp");
            let a = &mut l.self_attn;
            out.push((format!("{at}.q_proj"), "q_proj", &mut a.q_proj));
            out.push((format!("{at}.k_proj"), "k_proj", &mut a.k_proj));
            out.push((format!("{at}.v_proj"), "v_proj", &mut a.v_proj));
            out.push((format!("{at}.o_proj"), "o_proj", &mut a.o_proj));
            out.push((format!("{ml}.gate_proj"), "gate_proj", &mut l.gate_proj));
            out.push((format!("{ml}.up_proj"), "up_proj", &mut l.up_proj));
            out.push((format!("{ml}.down_proj"), "down_proj", &mut l.down_proj));
        }
        out
    }

    /// Greedy argmax of `[b, vocab]` logits, along the last axis.
    pub fn argmax(logits: &Tensor) -> Result<Vec<u32>> {
        logits.argmax(D::Minus1)?.to_vec1::<u32>()
    }
}
