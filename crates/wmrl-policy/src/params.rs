//! The parameter store: every trainable tensor of a policy by name, created
//! either from a seeded initialisation (deterministic, unlike the device RNG)
//! or from a checkpoint, where a missing tensor or a wrong shape is an error
//! naming the tensor.

use std::collections::{BTreeMap, HashMap};

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{PolicyError, Result};

enum Source {
    Init(Box<ChaCha8Rng>),
    Loaded {
        path: String,
        tensors: HashMap<String, Tensor>,
    },
}

/// Builds the named parameters of a network.
pub(crate) struct ParamBuilder {
    source: Source,
    device: Device,
    dtype: DType,
    vars: BTreeMap<String, Var>,
}

impl ParamBuilder {
    pub fn init(seed: u64, device: &Device, dtype: DType) -> Self {
        Self {
            source: Source::Init(Box::new(ChaCha8Rng::seed_from_u64(seed))),
            device: device.clone(),
            dtype,
            vars: BTreeMap::new(),
        }
    }

    pub fn loaded(
        path: String,
        tensors: HashMap<String, Tensor>,
        device: &Device,
        dtype: DType,
    ) -> Self {
        Self {
            source: Source::Loaded { path, tensors },
            device: device.clone(),
            dtype,
            vars: BTreeMap::new(),
        }
    }

    fn take_loaded(&mut self, name: &str, shape: &[usize]) -> Result<Option<Tensor>> {
        let Source::Loaded { path, tensors } = &mut self.source else {
            return Ok(None);
        };
        let t = tensors
            .remove(name)
            .ok_or_else(|| PolicyError::Checkpoint {
                path: path.clone(),
                tensor: name.to_string(),
                message: "missing from the checkpoint".into(),
            })?;
        if t.dims() != shape {
            return Err(PolicyError::Checkpoint {
                path: path.clone(),
                tensor: name.to_string(),
                message: format!(
                    "shape {:?} in the checkpoint, the config needs {:?}",
                    t.dims(),
                    shape
                ),
            });
        }
        let t = t.to_dtype(self.dtype)?.to_device(&self.device)?;
        let finite = t
            .to_dtype(DType::F64)?
            .flatten_all()?
            .to_vec1::<f64>()?
            .iter()
            .all(|v| v.is_finite());
        if !finite {
            return Err(PolicyError::Checkpoint {
                path: path.clone(),
                tensor: name.to_string(),
                message: "holds NaN or infinite values".into(),
            });
        }
        Ok(Some(t))
    }

    fn register(&mut self, name: &str, t: Tensor) -> Result<Tensor> {
        let var = Var::from_tensor(&t)?;
        let out = var.as_tensor().clone();
        if self.vars.insert(name.to_string(), var).is_some() {
            return Err(PolicyError::Config(format!(
                "parameter `{name}` defined twice"
            )));
        }
        Ok(out)
    }

    fn tensor_of(&mut self, shape: &[usize], values: Vec<f64>) -> Result<Tensor> {
        Ok(Tensor::from_vec(values, shape, &Device::Cpu)?
            .to_dtype(self.dtype)?
            .to_device(&self.device)?)
    }

    /// Normal(0, std) initialisation.
    pub fn normal(&mut self, name: &str, shape: &[usize], std: f64) -> Result<Tensor> {
        if let Some(t) = self.take_loaded(name, shape)? {
            return self.register(name, t);
        }
        let n: usize = shape.iter().product();
        let Source::Init(rng) = &mut self.source else {
            return Err(PolicyError::Config("unreachable parameter source".into()));
        };
        let mut values = Vec::with_capacity(n);
        while values.len() < n {
            // Box-Muller: two normals from two uniforms.
            let u1: f64 = rng.random::<f64>().max(1e-300);
            let u2: f64 = rng.random::<f64>();
            let r = (-2.0 * u1.ln()).sqrt() * std;
            let th = 2.0 * std::f64::consts::PI * u2;
            values.push(r * th.cos());
            if values.len() < n {
                values.push(r * th.sin());
            }
        }
        let t = self.tensor_of(shape, values)?;
        self.register(name, t)
    }

    pub fn constant(&mut self, name: &str, shape: &[usize], value: f64) -> Result<Tensor> {
        if let Some(t) = self.take_loaded(name, shape)? {
            return self.register(name, t);
        }
        let n: usize = shape.iter().product();
        let t = self.tensor_of(shape, vec![value; n])?;
        self.register(name, t)
    }

    /// Finish: every tensor of a checkpoint must have been used.
    pub fn finish(self) -> Result<BTreeMap<String, Var>> {
        if let Source::Loaded { path, tensors } = &self.source
            && let Some(name) = tensors.keys().min()
        {
            return Err(PolicyError::Checkpoint {
                path: path.clone(),
                tensor: name.clone(),
                message: "in the checkpoint but not in the network the config describes".into(),
            });
        }
        Ok(self.vars)
    }
}
