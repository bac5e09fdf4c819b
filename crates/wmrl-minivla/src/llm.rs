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

use candle_core::{D, DType, Device, Module, Result, Tensor};
use candle_nn::{Activation, Embedding, VarBuilder};
use candle_transformers::models::with_tracing::{Linear, RmsNorm, linear, linear_no_bias};
use candle_transformers::utils::repeat_kv;

use crate::config::LlmConfig;

#[derive(Debug, Clone)]
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn new(c: &LlmConfig, vb: VarBuilder) -> Result<Self> {
        let head_dim = c.hidden_size / c.num_attention_heads;
        let kv = c.num_key_value_heads * head_dim;
        Ok(Self {
            q_proj: linear(c.hidden_size, c.hidden_size, vb.pp("q_proj"))?,
            k_proj: linear(c.hidden_size, kv, vb.pp("k_proj"))?,
            v_proj: linear(c.hidden_size, kv, vb.pp("v_proj"))?,
            o_proj: linear_no_bias(c.hidden_size, c.hidden_size, vb.pp("o_proj"))?,
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
    ) -> Result<Tensor> {
        let (b, t, d) = xs.dims3()?;
        let split = |y: Tensor, h: usize| y.reshape((b, t, h, self.head_dim))?.transpose(1, 2);
        let q = split(self.q_proj.forward(xs)?, self.heads)?.contiguous()?;
        let k = split(self.k_proj.forward(xs)?, self.kv_heads)?.contiguous()?;
        let v = split(self.v_proj.forward(xs)?, self.kv_heads)?;
        let q = candle_nn::rotary_emb::rope(&q, &rope.cos, &rope.sin)?;
        let k = candle_nn::rotary_emb::rope(&k, &rope.cos, &rope.sin)?;
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
        let w = candle_nn::ops::softmax_last_dim(&w)?;
        w.matmul(&v)?
            .transpose(1, 2)?
            .reshape((b, t, d))?
            .apply(&self.o_proj)
    }
}

#[derive(Debug, Clone)]
struct DecoderLayer {
    self_attn: Attention,
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn new(c: &LlmConfig, vb: VarBuilder) -> Result<Self> {
        let mlp = vb.pp("mlp");
        let (h, i) = (c.hidden_size, c.intermediate_size);
        Ok(Self {
            self_attn: Attention::new(c, vb.pp("self_attn"))?,
            gate_proj: linear_no_bias(h, i, mlp.pp("gate_proj"))?,
            up_proj: linear_no_bias(h, i, mlp.pp("up_proj"))?,
            down_proj: linear_no_bias(i, h, mlp.pp("down_proj"))?,
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
    ) -> Result<Tensor> {
        let y = self
            .self_attn
            .forward(&self.input_layernorm.forward(xs)?, rope, mask, cache)?;
        let xs = (xs + y)?;
        let h = self.post_attention_layernorm.forward(&xs)?;
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
            xs = layer.forward(&xs, &rope, mask.as_ref(), kv)?;
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

    /// Greedy argmax of `[b, vocab]` logits, along the last axis.
    pub fn argmax(logits: &Tensor) -> Result<Vec<u32>> {
        logits.argmax(D::Minus1)?.to_vec1::<u32>()
    }
}
