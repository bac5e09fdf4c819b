//! Small dense layers over candle `Var`s with seeded initialisation (candle's
//! own initialisers draw from an unseeded generator on CPU).

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;

/// A dense layer `x @ w + b`.
#[derive(Debug, Clone)]
pub struct Dense {
    pub w: Var,
    pub b: Var,
}

impl Dense {
    /// Uniform(-1/sqrt(in), 1/sqrt(in)) weights scaled by `gain`, zero bias.
    pub fn new(
        inp: usize,
        out: usize,
        gain: f32,
        rng: &mut ChaCha8Rng,
        dev: &Device,
    ) -> Result<Self> {
        let bound = gain / (inp as f32).sqrt();
        let w: Vec<f32> = (0..inp * out)
            .map(|_| rng.random_range(-bound..bound))
            .collect();
        Ok(Self {
            w: Var::from_tensor(&Tensor::from_vec(w, (inp, out), dev)?)?,
            b: Var::from_tensor(&Tensor::zeros(out, DType::F32, dev)?)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(self.w.as_tensor())?
            .broadcast_add(self.b.as_tensor())?)
    }

    /// Forward with frozen copies of the parameters.
    pub fn forward_with(w: &Tensor, b: &Tensor, x: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(w)?.broadcast_add(b)?)
    }

    pub fn vars(&self) -> Vec<Var> {
        vec![self.w.clone(), self.b.clone()]
    }
}

pub fn seeded(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Rows of equal-length f32 vectors as a `[n, d]` tensor.
pub fn matrix(rows: &[Vec<f32>], dev: &Device) -> Result<Tensor> {
    let d = rows.first().map_or(0, Vec::len);
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Ok(Tensor::from_vec(flat, (rows.len(), d), dev)?)
}
