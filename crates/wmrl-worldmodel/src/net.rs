//! wmrl's own small progress model in candle: a strided conv encoder per
//! frame, a bag-of-bytes instruction embedding, first-frame context, and a
//! two-logit head (progress, success) per frame.
//!
//! Every op has a direct ONNX counterpart (Reshape, AveragePool, Conv, Relu,
//! Flatten, Gemm, Gather, ReduceMean, MatMul, Add, Sigmoid), so `export`
//! writes the same function as a graph; the parity tests hold the two to
//! 1e-4. Names of the variables here are the initializer names there.

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::{Conv2d, Conv2dConfig, Embedding, Linear, Module, VarBuilder, VarMap};
use serde::{Deserialize, Serialize};

use crate::{Result, WmError};

/// Shape and size of the network. Defaults are the `progress-tiny` preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetConfig {
    /// Frames per rollout the model sees (Robometer: up to 8).
    pub num_frames: usize,
    /// Instruction length in byte tokens (`wmrl_env::text::byte_tokens`).
    pub instruction_len: usize,
    /// Input frame height and width in pixels (the camera's size).
    pub height: usize,
    pub width: usize,
    /// Average-pool factor applied first (1 = none); must divide both sides.
    pub pool: usize,
    /// Output channels of the 3x3 stride-2 convolutions.
    pub channels: Vec<usize>,
    /// Width of the per-frame feature.
    pub hidden: usize,
    /// Width of the instruction byte embedding.
    pub text_dim: usize,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            num_frames: 8,
            instruction_len: 64,
            height: 128,
            width: 128,
            pool: 4,
            channels: vec![16, 32, 32],
            hidden: 64,
            text_dim: 32,
        }
    }
}

impl NetConfig {
    /// Pick the pool factor that brings frames of `height x width` to at
    /// most 32 pixels a side (the smallest divisor of both that does).
    pub fn with_frame_size(mut self, height: usize, width: usize) -> Self {
        self.height = height;
        self.width = width;
        let g = gcd(height, width).max(1);
        self.pool = (1..=g)
            .find(|p| g.is_multiple_of(*p) && height / p <= 32 && width / p <= 32)
            .unwrap_or(g);
        self
    }

    /// Spatial size after pooling and every convolution.
    pub fn feature_hw(&self) -> (usize, usize) {
        let (mut h, mut w) = (self.height / self.pool, self.width / self.pool);
        for _ in &self.channels {
            h = h.div_ceil(2);
            w = w.div_ceil(2);
        }
        (h, w)
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(WmError::Config(m));
        if self.num_frames == 0 || self.instruction_len == 0 || self.channels.is_empty() {
            return bad("num_frames, instruction_len and channels must be non-empty".into());
        }
        if self.pool == 0
            || !self.height.is_multiple_of(self.pool)
            || !self.width.is_multiple_of(self.pool)
        {
            return bad(format!(
                "pool {} must divide the frame size {}x{}",
                self.pool, self.height, self.width
            ));
        }
        Ok(())
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Conv settings shared with the exporter: 3x3, stride 2, padding 1.
pub(crate) const CONV_K: usize = 3;
pub(crate) const CONV_STRIDE: usize = 2;
pub(crate) const CONV_PAD: usize = 1;

/// The progress network.
#[derive(Debug)]
pub struct ProgressNet {
    pub config: NetConfig,
    convs: Vec<Conv2d>,
    fc: Linear,
    emb: Embedding,
    text: Linear,
    first: Linear,
    frame: Linear,
    head: Linear,
}

impl ProgressNet {
    pub fn new(config: NetConfig, vb: VarBuilder) -> Result<Self> {
        config.validate()?;
        let conv_cfg = Conv2dConfig {
            padding: CONV_PAD,
            stride: CONV_STRIDE,
            dilation: 1,
            groups: 1,
            cudnn_fwd_algo: None,
        };
        let mut convs = Vec::new();
        let mut c_in = 3;
        for (i, &c) in config.channels.iter().enumerate() {
            convs.push(candle_nn::conv2d(
                c_in,
                c,
                CONV_K,
                conv_cfg,
                vb.pp(format!("conv{i}")),
            )?);
            c_in = c;
        }
        let (fh, fw) = config.feature_hw();
        let d = config.hidden;
        let fc = candle_nn::linear(c_in * fh * fw, d, vb.pp("fc"))?;
        let emb = candle_nn::embedding(wmrl_env::text::BYTE_VOCAB, config.text_dim, vb.pp("emb"))?;
        let text = candle_nn::linear(config.text_dim, d, vb.pp("text"))?;
        let first = candle_nn::linear_no_bias(d, d, vb.pp("first"))?;
        let frame = candle_nn::linear(d, d, vb.pp("frame"))?;
        let head = candle_nn::linear(d, 2, vb.pp("head"))?;
        Ok(Self {
            config,
            convs,
            fc,
            emb,
            text,
            first,
            frame,
            head,
        })
    }

    /// A fresh network with its variables in a new [`VarMap`] (seeded).
    /// candle's CPU generator cannot be seeded, so every variable is
    /// re-drawn here from a seeded ChaCha stream in name order: weights
    /// uniform in +-1/sqrt(fan_in), biases in +-0.1, embeddings in +-1.
    pub fn init(config: NetConfig, device: &Device, seed: u64) -> Result<(Self, VarMap)> {
        use rand::{Rng, SeedableRng};
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, device);
        let net = Self::new(config, vb)?;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let data = varmap
            .data()
            .lock()
            .map_err(|_| WmError::Config("weight map lock poisoned".into()))?;
        let mut names: Vec<&String> = data.keys().collect();
        names.sort();
        for name in names {
            let var = &data[name];
            let dims = var.dims().to_vec();
            let bound = if name.starts_with("emb.") {
                1.0
            } else if name.ends_with(".bias") {
                0.1
            } else {
                1.0 / (dims[1..].iter().product::<usize>().max(1) as f32).sqrt()
            };
            let n: usize = dims.iter().product();
            let v: Vec<f32> = (0..n).map(|_| rng.random_range(-bound..bound)).collect();
            var.set(&Tensor::from_vec(v, dims, device)?)?;
        }
        drop(data);
        Ok((net, varmap))
    }

    /// Logits `[B, T, 2]` (progress, success) for frames `[B, T, 3, H, W]`
    /// and instruction tokens `[B, L]` (i64).
    pub fn logits(&self, frames: &Tensor, tokens: &Tensor) -> Result<Tensor> {
        let (b, t, c, h, w) = frames.dims5()?;
        let mut x = frames.reshape((b * t, c, h, w))?;
        if self.config.pool > 1 {
            x = x.avg_pool2d(self.config.pool)?;
        }
        for conv in &self.convs {
            x = conv.forward(&x)?.relu()?;
        }
        let x = x.flatten_from(1)?;
        let f = self.fc.forward(&x)?.relu()?;
        let d = self.config.hidden;
        let f = f.reshape((b, t, d))?;
        let e = self.emb.forward(tokens)?.mean(1)?;
        let te = self.text.forward(&e)?;
        let f0 = f.i((.., 0, ..))?.contiguous()?;
        let ctx = (te + self.first.forward(&f0)?)?.unsqueeze(1)?;
        let hdn = self.frame.forward(&f)?.broadcast_add(&ctx)?.relu()?;
        Ok(self.head.forward(&hdn)?)
    }

    /// `(progress, success)`, each `[B, T]` in [0, 1].
    pub fn predict(&self, frames: &Tensor, tokens: &Tensor) -> Result<(Tensor, Tensor)> {
        let p = candle_nn::ops::sigmoid(&self.logits(frames, tokens)?)?;
        let progress = p.i((.., .., 0))?.contiguous()?;
        let success = p.i((.., .., 1))?.contiguous()?;
        Ok((progress, success))
    }
}

/// Numerically stable binary cross-entropy on logits with soft targets.
pub fn bce_with_logits(logits: &Tensor, target: &Tensor) -> Result<Tensor> {
    // max(z,0) - z*y + log(1 + exp(-|z|))
    let relu = logits.relu()?;
    let zy = (logits * target)?;
    let softplus = (logits.abs()?.neg()?.exp()? + 1.0)?.log()?;
    Ok(((relu - zy)? + softplus)?.mean_all()?)
}
