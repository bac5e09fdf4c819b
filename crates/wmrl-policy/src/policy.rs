//! [`Policy`]: parameters + network + config, with seeded sampling that
//! returns the log-probability of every sampled token, and the differentiable
//! recomputation of those log-probabilities that SFT and GRPO train through.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{D, DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::checkpoint::{self, CONFIG_FILE, WEIGHTS_FILE};
use crate::error::io_err;
use crate::input::{observation_images, prepare_rows};
use crate::model::{Network, PreparedInputs};
use crate::params::ParamBuilder;
use crate::{ACTION_DIM, ActionTokenizer, Decoding, PolicyConfig, PolicyInput, Result};

/// One sampled action chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// `chunk` actions, each 7-D in [-1, 1] (bin centres).
    pub actions: Vec<[f32; ACTION_DIM]>,
    /// `chunk * 7` action tokens, step-major (`step * 7 + dim`).
    pub tokens: Vec<u32>,
    /// Log-probability of each token under the sampling distribution
    /// (`softmax(logits / temperature)`; plain `softmax` when greedy).
    pub logprobs: Vec<f32>,
}

/// Differentiable per-token statistics of a batch of given tokens.
#[derive(Debug, Clone)]
pub struct TokenStats {
    /// `[B, T]` log-probabilities of the given tokens.
    pub logprobs: Tensor,
    /// `[B, T]` entropy of each token's distribution.
    pub entropy: Tensor,
}

/// A MiniVLA-style policy.
pub struct Policy {
    config: PolicyConfig,
    device: Device,
    dtype: DType,
    vars: BTreeMap<String, Var>,
    net: Network,
    tokenizer: ActionTokenizer,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("preset", &self.config.preset)
            .field("n_params", &self.n_params())
            .finish()
    }
}

impl Policy {
    /// A freshly initialised policy (seeded by `config.init_seed`).
    pub fn new(config: PolicyConfig, device: &Device, dtype: DType) -> Result<Self> {
        config.validate()?;
        let mut p = ParamBuilder::init(config.init_seed, device, dtype);
        let net = Network::new(&config, &mut p, dtype)?;
        let vars = p.finish()?;
        Ok(Self::assemble(config, device, dtype, vars, net))
    }

    fn assemble(
        config: PolicyConfig,
        device: &Device,
        dtype: DType,
        vars: BTreeMap<String, Var>,
        net: Network,
    ) -> Self {
        let tokenizer = ActionTokenizer::new(config.n_bins);
        Self {
            config,
            device: device.clone(),
            dtype,
            vars,
            net,
            tokenizer,
        }
    }

    /// Load `dir/config.json` and `dir/model.safetensors` (F32, CPU).
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_on(dir, &Device::Cpu, DType::F32)
    }

    pub fn load_on(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let config = checkpoint::read_config(dir)?;
        let path = dir.join(WEIGHTS_FILE);
        let tensors = checkpoint::read_tensors(&path, device)?;
        let mut p = ParamBuilder::loaded(path.display().to_string(), tensors, device, dtype);
        let net = Network::new(&config, &mut p, dtype)?;
        let vars = p.finish()?;
        Ok(Self::assemble(config, device, dtype, vars, net))
    }

    /// Write `dir/config.json` and `dir/model.safetensors` (atomically each).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let tensors: HashMap<String, Tensor> = self
            .vars
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        checkpoint::write_tensors(&dir.join(WEIGHTS_FILE), &tensors)?;
        checkpoint::write_json(&dir.join(CONFIG_FILE), &self.config)
    }

    /// An independent copy (e.g. the frozen reference or old policy).
    pub fn deep_clone(&self) -> Result<Self> {
        let tensors: HashMap<String, Tensor> = self
            .vars
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_tensor().copy()?)))
            .collect::<Result<_>>()?;
        let mut p = ParamBuilder::loaded("<clone>".into(), tensors, &self.device, self.dtype);
        let net = Network::new(&self.config, &mut p, self.dtype)?;
        let vars = p.finish()?;
        Ok(Self::assemble(
            self.config.clone(),
            &self.device,
            self.dtype,
            vars,
            net,
        ))
    }

    /// Copy all parameter values from `other` (same config).
    pub fn copy_from(&self, other: &Policy) -> Result<()> {
        for (name, var) in &self.vars {
            let src = other
                .vars
                .get(name)
                .ok_or_else(|| crate::PolicyError::Checkpoint {
                    path: "<policy>".into(),
                    tensor: name.clone(),
                    message: "missing in the source policy".into(),
                })?;
            var.set(src.as_tensor())?;
        }
        Ok(())
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn tokenizer(&self) -> &ActionTokenizer {
        &self.tokenizer
    }

    /// The trainable parameters by name.
    pub fn vars(&self) -> &BTreeMap<String, Var> {
        &self.vars
    }

    pub fn n_params(&self) -> usize {
        self.vars.values().map(|v| v.elem_count()).sum()
    }

    /// Turn observations into model inputs (resize, patchify, tokenise).
    pub fn prepare(&self, inputs: &[PolicyInput]) -> Result<PreparedInputs> {
        let images: Vec<Vec<Vec<u8>>> = inputs
            .iter()
            .map(|i| observation_images(&self.config, i))
            .collect::<Result<_>>()?;
        let img_refs: Vec<&[Vec<u8>]> = images.iter().map(|v| v.as_slice()).collect();
        let ins: Vec<&str> = inputs.iter().map(|i| i.instruction.as_str()).collect();
        let pro: Vec<&[f32]> = inputs.iter().map(|i| i.proprio.as_slice()).collect();
        prepare_rows(
            &self.config,
            &img_refs,
            &ins,
            &pro,
            &self.device,
            self.dtype,
        )
    }

    /// Raw logits for a full chunk of given tokens (teacher forcing when
    /// autoregressive): `[B, T, n_bins]`.
    pub fn chunk_logits(&self, inputs: &PreparedInputs, tokens: &Tensor) -> Result<Tensor> {
        match self.config.decoding {
            Decoding::Parallel => self.net.logits(inputs, None),
            Decoding::Autoregressive => {
                let t = self.config.tokens_per_call();
                let prev = tokens.narrow(1, 0, t - 1)?;
                self.net.logits(inputs, Some(&prev))
            }
        }
    }

    /// Differentiable log-probabilities (and entropies) of `tokens`
    /// (`[B, T]` u32) under `softmax(logits / temperature)`; a temperature
    /// `<= 0` means 1 (greedy decoding scores under the plain softmax).
    pub fn token_stats(
        &self,
        inputs: &PreparedInputs,
        tokens: &Tensor,
        temperature: f32,
    ) -> Result<TokenStats> {
        let logits = self.chunk_logits(inputs, tokens)?;
        Self::stats_of_logits(logits, tokens, temperature)
    }

    /// What the action head reads for these inputs and tokens (the
    /// final-normed hidden state at every action position, `[B, n,
    /// d_model]`), detached: everything before `lm.head` computed once.
    /// An update that trains only `lm.head` (`update.trainable =
    /// ["lm.head"]`) computes these once per step and then needs only
    /// [`Policy::token_stats_from_features`], a single matrix product.
    pub fn head_features(&self, inputs: &PreparedInputs, tokens: &Tensor) -> Result<Tensor> {
        let h = match self.config.decoding {
            Decoding::Parallel => self.net.features(inputs, None)?,
            Decoding::Autoregressive => {
                let t = self.config.tokens_per_call();
                let prev = tokens.narrow(1, 0, t - 1)?;
                self.net.features(inputs, Some(&prev))?
            }
        };
        Ok(h.detach())
    }

    /// [`Policy::token_stats`] from [`Policy::head_features`]: equal to it
    /// when the features came from a policy whose parameters before
    /// `lm.head` are this one's; differentiable in `lm.head` only.
    pub fn token_stats_from_features(
        &self,
        features: &Tensor,
        tokens: &Tensor,
        temperature: f32,
    ) -> Result<TokenStats> {
        let logits = self.net.head_logits(features)?;
        Self::stats_of_logits(logits, tokens, temperature)
    }

    fn stats_of_logits(logits: Tensor, tokens: &Tensor, temperature: f32) -> Result<TokenStats> {
        let logits = if temperature > 0.0 && temperature != 1.0 {
            (logits / f64::from(temperature))?
        } else {
            logits
        };
        let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
        let lp = logp
            .gather(&tokens.unsqueeze(2)?.contiguous()?, 2)?
            .squeeze(2)?;
        let entropy = (logp.exp()? * &logp)?.sum(D::Minus1)?.neg()?;
        Ok(TokenStats {
            logprobs: lp,
            entropy,
        })
    }

    /// Tokens of many samples as a `[B, T]` u32 tensor.
    pub fn tokens_tensor(&self, tokens: &[Vec<u32>]) -> Result<Tensor> {
        let t = self.config.tokens_per_call();
        if let Some(bad) = tokens.iter().find(|r| r.len() != t) {
            return Err(crate::PolicyError::Input(format!(
                "a sample has {} tokens, the config needs {t}",
                bad.len()
            )));
        }
        let flat: Vec<u32> = tokens.iter().flatten().copied().collect();
        Ok(Tensor::from_vec(flat, (tokens.len(), t), &self.device)?)
    }

    /// Sample one action chunk per input. Row `i` draws from its own
    /// ChaCha8 stream `(seed, i)`, so results do not depend on the batch
    /// size or on threads. `temperature <= 0` is greedy (argmax).
    pub fn sample(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
    ) -> Result<Vec<Sample>> {
        let prepared = self.prepare(inputs)?;
        self.sample_prepared(&prepared, temperature, seed)
    }

    pub fn sample_prepared(
        &self,
        inputs: &PreparedInputs,
        temperature: f32,
        seed: u64,
    ) -> Result<Vec<Sample>> {
        Ok(self.sample_inner(inputs, temperature, seed, None, false)?.0)
    }

    /// [`Policy::sample`] with row `i` drawing from stream
    /// `(seed, streams[i])` instead of `(seed, i)`: a batch that leaves out
    /// some rows of a larger one (a resumed evaluation runs only the
    /// episodes its record lacks) samples the rows it keeps as the larger
    /// batch did.
    pub fn sample_streams(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
        streams: &[u64],
    ) -> Result<Vec<Sample>> {
        if streams.len() != inputs.len() {
            return Err(crate::PolicyError::Input(format!(
                "{} streams for {} inputs",
                streams.len(),
                inputs.len()
            )));
        }
        let prepared = self.prepare(inputs)?;
        Ok(self
            .sample_inner(&prepared, temperature, seed, Some(streams), false)?
            .0)
    }

    /// [`Policy::sample`] that also returns each row's head inputs
    /// ([`Policy::head_features`] of the sampled tokens, flattened `n *
    /// d_model` floats per row). With parallel decoding they are the very
    /// activations the sampling computed (no extra work); autoregressive
    /// decoding spends one more forward pass on them. A head-only update
    /// (`update.trainable = ["lm.head"]`) reuses them instead of running the
    /// frozen network again.
    pub fn sample_with_features(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
    ) -> Result<(Vec<Sample>, Vec<Vec<f32>>)> {
        let prepared = self.prepare(inputs)?;
        let (samples, features) = self.sample_inner(&prepared, temperature, seed, None, true)?;
        let rows = match features {
            Some(f) => f.flatten_from(1)?.to_dtype(DType::F32)?.to_vec2::<f32>()?,
            None => Vec::new(),
        };
        Ok((samples, rows))
    }

    fn sample_inner(
        &self,
        inputs: &PreparedInputs,
        temperature: f32,
        seed: u64,
        streams: Option<&[u64]>,
        keep_features: bool,
    ) -> Result<(Vec<Sample>, Option<Tensor>)> {
        let b = inputs.batch_size();
        let t = self.config.tokens_per_call();
        let mut rngs: Vec<ChaCha8Rng> = (0..b)
            .map(|i| {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(streams.and_then(|s| s.get(i).copied()).unwrap_or(i as u64));
                r
            })
            .collect();
        let mut tokens: Vec<Vec<u32>> = vec![Vec::with_capacity(t); b];
        let mut logprobs: Vec<Vec<f32>> = vec![Vec::with_capacity(t); b];
        let mut features = None;
        match self.config.decoding {
            Decoding::Parallel => {
                let h = self.net.features(inputs, None)?;
                let logits = self
                    .net
                    .head_logits(&h)?
                    .to_dtype(DType::F32)?
                    .to_vec3::<f32>()?;
                for (row, rng) in rngs.iter_mut().enumerate() {
                    for tok_logits in &logits[row] {
                        let (k, lp) = draw(tok_logits, temperature, rng);
                        tokens[row].push(k);
                        logprobs[row].push(lp);
                    }
                }
                if keep_features {
                    features = Some(h);
                }
            }
            Decoding::Autoregressive => {
                for j in 0..t {
                    let prev = if j == 0 {
                        None
                    } else {
                        Some(self.tokens_tensor_partial(&tokens, j)?)
                    };
                    let logits = self.net.logits(inputs, prev.as_ref())?;
                    let last = logits
                        .narrow(1, j, 1)?
                        .squeeze(1)?
                        .to_dtype(DType::F32)?
                        .to_vec2::<f32>()?;
                    for (row, rng) in rngs.iter_mut().enumerate() {
                        let (k, lp) = draw(&last[row], temperature, rng);
                        tokens[row].push(k);
                        logprobs[row].push(lp);
                    }
                }
                if keep_features {
                    features = Some(self.head_features(inputs, &self.tokens_tensor(&tokens)?)?);
                }
            }
        }
        let samples = tokens
            .into_iter()
            .zip(logprobs)
            .map(|(tok, lp)| Sample {
                actions: self.decode_actions(&tok),
                tokens: tok,
                logprobs: lp,
            })
            .collect();
        Ok((samples, features))
    }

    fn tokens_tensor_partial(&self, tokens: &[Vec<u32>], j: usize) -> Result<Tensor> {
        let flat: Vec<u32> = tokens.iter().flat_map(|r| r[..j].iter().copied()).collect();
        Ok(Tensor::from_vec(flat, (tokens.len(), j), &self.device)?)
    }

    /// Actions of a token chunk (bin centres).
    pub fn decode_actions(&self, tokens: &[u32]) -> Vec<[f32; ACTION_DIM]> {
        tokens
            .chunks(ACTION_DIM)
            .map(|c| {
                let mut a = [0f32; ACTION_DIM];
                for (slot, &tok) in a.iter_mut().zip(c) {
                    *slot = self.tokenizer.decode(tok);
                }
                a
            })
            .collect()
    }

    /// Tokens of an action chunk (`chunk` actions of 7).
    pub fn encode_actions(&self, actions: &[[f32; ACTION_DIM]]) -> Vec<u32> {
        actions
            .iter()
            .flat_map(|a| self.tokenizer.encode_all(a))
            .collect()
    }
}

/// Draw one token from logits; returns (token, log-prob under the sampling
/// distribution). Sums in f64 so the log-prob matches the tensor path.
fn draw(logits: &[f32], temperature: f32, rng: &mut ChaCha8Rng) -> (u32, f32) {
    // A uniform is drawn only when sampling (greedy consumes none).
    let u = if temperature > 0.0 {
        rng.random::<f64>()
    } else {
        0.0
    };
    let (k, lp, _) = pick(logits, temperature, u, false);
    (k, lp)
}

/// One action token from its row of logits with the uniform `u` in [0, 1):
/// (token, its log-prob under `softmax(logits / T)`, the row's entropy).
/// Inverse-CDF sampling in f64, exactly what [`Policy::sample`] does with
/// its ChaCha8 uniforms; `temperature <= 0` is greedy (first maximum, plain
/// softmax). The CPU reference of the GPU kernel `sample_action_tokens`
/// (kernels/action_head.cu).
pub fn sample_row(logits: &[f32], temperature: f32, u: f64) -> (u32, f32, f32) {
    pick(logits, temperature, u, true)
}

fn pick(logits: &[f32], temperature: f32, u: f64, with_entropy: bool) -> (u32, f32, f32) {
    let t = if temperature > 0.0 {
        f64::from(temperature)
    } else {
        1.0
    };
    let z: Vec<f64> = logits.iter().map(|&l| f64::from(l) / t).collect();
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = z.iter().map(|v| (v - max).exp()).sum();
    let lse = max + sum.ln();
    let k = if temperature > 0.0 {
        let u: f64 = u * sum;
        let mut acc = 0.0;
        let mut pick = z.len() - 1;
        for (i, v) in z.iter().enumerate() {
            acc += (v - max).exp();
            if u < acc {
                pick = i;
                break;
            }
        }
        pick
    } else {
        z.iter()
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv { (i, v) } else { (bi, bv) }
            })
            .0
    };
    let entropy = if with_entropy {
        -z.iter()
            .map(|v| {
                let lp = v - lse;
                lp.exp() * lp
            })
            .sum::<f64>()
    } else {
        0.0
    };
    (k as u32, (z[k] - lse) as f32, entropy as f32)
}
