//! The assembled MiniVLA: loading a converted directory (`config.json`,
//! `model.safetensors`, `tokenizer.json`) with every tensor checked by name
//! and shape, the prompt, greedy decoding of the 7 action tokens, and the
//! parameter count (from shapes alone, nothing large allocated).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Module, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};

use crate::config::{MiniVlaConfig, VitConfig};
use crate::llm::{KvCache, Qwen2};
use crate::vit::{Projector, Vit, fuse};
use crate::{MiniVlaError, Result};

pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Where each part lives in the converted checkpoint.
const DINO: &str = "vision_backbone.featurizer";
const SIGLIP: &str = "vision_backbone.fused_featurizer";
const PROJECTOR: &str = "projector";
pub(crate) const LLM: &str = "language_model";

/// What a backend saw: the first bad tensor, every name asked for, shapes.
#[derive(Default)]
struct Seen {
    first_error: Option<(String, String)>,
    shapes: BTreeMap<String, Vec<usize>>,
}

/// Serves tensors from a loaded file, checking shape, or (with no file)
/// zero-stride zeros of the asked shape, so a full-size model can be built
/// to count its parameters without allocating them.
struct CheckedBackend {
    tensors: Option<HashMap<String, Tensor>>,
    seen: Arc<Mutex<Seen>>,
}

impl CheckedBackend {
    fn fail(&self, name: &str, message: String) -> candle_core::Error {
        if let Ok(mut s) = self.seen.lock()
            && s.first_error.is_none()
        {
            s.first_error = Some((name.to_string(), message.clone()));
        }
        candle_core::Error::Msg(format!("tensor `{name}`: {message}"))
    }
}

impl SimpleBackend for CheckedBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.shapes.insert(name.to_string(), s.dims().to_vec());
        }
        let Some(tensors) = &self.tensors else {
            return Tensor::zeros((), dtype, dev)?.broadcast_as(s);
        };
        let t = tensors
            .get(name)
            .ok_or_else(|| self.fail(name, format!("missing (expected shape {:?})", s.dims())))?;
        if t.dims() != s.dims() {
            return Err(self.fail(
                name,
                format!("shape {:?}, expected {:?}", t.dims(), s.dims()),
            ));
        }
        t.to_dtype(dtype)?.to_device(dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        match self.tensors.as_ref().and_then(|t| t.get(name)) {
            Some(t) => t.to_dtype(dtype)?.to_device(dev),
            None => Err(self.fail(name, "missing".into())),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.as_ref().is_none_or(|t| t.contains_key(name))
    }
}

/// MiniVLA for inference.
#[derive(Debug)]
pub struct MiniVla {
    pub(crate) cfg: MiniVlaConfig,
    dino: Vit,
    siglip: Vit,
    projector: Projector,
    pub(crate) llm: Qwen2,
    tokenizer: Option<tokenizers::Tokenizer>,
    n_params: usize,
    pub(crate) device: Device,
    pub(crate) dtype: DType,
    /// LoRA adapters on the language model (crate::rl), in projection order.
    pub(crate) adapters: Vec<(String, candle_core::Var)>,
    pub(crate) lora: Option<crate::rl::LoraConfig>,
}

struct Built {
    dino: Vit,
    siglip: Vit,
    projector: Projector,
    llm: Qwen2,
}

fn build(cfg: &MiniVlaConfig, vb: &VarBuilder) -> candle_core::Result<Built> {
    Ok(Built {
        dino: Vit::new(&cfg.dino, vb.pp(DINO))?,
        siglip: Vit::new(&cfg.siglip, vb.pp(SIGLIP))?,
        projector: Projector::new(cfg.fused_width(), cfg.llm.hidden_size, vb.pp(PROJECTOR))?,
        llm: Qwen2::new(&cfg.llm, vb.pp(LLM))?,
    })
}

/// Build over a backend; returns the parts and every tensor name with its
/// shape, or the first bad tensor as [`MiniVlaError::Tensor`].
fn build_checked(
    cfg: &MiniVlaConfig,
    tensors: Option<HashMap<String, Tensor>>,
    path: &str,
    dtype: DType,
    device: &Device,
) -> Result<(Built, BTreeMap<String, Vec<usize>>)> {
    cfg.validate()?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let backend = CheckedBackend {
        tensors,
        seen: seen.clone(),
    };
    let vb = VarBuilder::from_backend(Box::new(backend), dtype, device.clone());
    let built = build(cfg, &vb);
    let seen = std::mem::take(
        &mut *seen
            .lock()
            .map_err(|_| MiniVlaError::Config("tensor bookkeeping poisoned".into()))?,
    );
    match (built, seen.first_error) {
        (_, Some((key, message))) => Err(MiniVlaError::Tensor {
            path: path.into(),
            key,
            message,
        }),
        (Err(e), None) => Err(e.into()),
        (Ok(b), None) => Ok((b, seen.shapes)),
    }
}

/// Every tensor the configuration needs, with its shape, in name order:
/// the exact key set `scripts/convert_minivla.py` must write.
pub fn tensor_shapes(cfg: &MiniVlaConfig) -> Result<BTreeMap<String, Vec<usize>>> {
    Ok(build_checked(cfg, None, "<shapes>", DType::F32, &Device::Cpu)?.1)
}

/// `img` resized to `n` x `n` (bicubic, "resize-naive"), or itself when it
/// has that size already (demonstrations resized once at load).
pub(crate) fn resize_to(img: &image::RgbImage, n: usize) -> std::borrow::Cow<'_, image::RgbImage> {
    if img.width() as usize == n && img.height() as usize == n {
        return std::borrow::Cow::Borrowed(img);
    }
    std::borrow::Cow::Owned(image::imageops::resize(
        img,
        n as u32,
        n as u32,
        image::imageops::FilterType::CatmullRom,
    ))
}

/// The prompt MiniVLA was trained on (`QwenPromptBuilder`, one human turn,
/// instruction lower-cased as `predict_action` does).
pub fn prompt(system: &str, instruction: &str) -> String {
    format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n\
         What action should the robot take to {}?<|im_end|>\n<|im_start|>assistant\n",
        instruction.trim().to_lowercase()
    )
}

fn io(path: &Path, e: impl std::fmt::Display) -> MiniVlaError {
    MiniVlaError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl MiniVla {
    /// Parameters of the configuration (unique tensors; a tied `lm_head`
    /// counts once), computed from shapes with zero-stride tensors.
    pub fn parameter_count(cfg: &MiniVlaConfig) -> Result<usize> {
        Ok(tensor_shapes(cfg)?
            .values()
            .map(|s| s.iter().product::<usize>())
            .sum())
    }

    /// Load a converted directory on the CPU in f32.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_on(dir, &Device::Cpu, DType::F32)
    }

    /// Load on `device` in `dtype` (the checkpoint's dtype, bf16 for
    /// converted Prismatic runs, is cast). `tokenizer.json` is optional:
    /// without it only [`MiniVla::predict_action_ids`] works.
    pub fn load_on(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        Ok(Self::load_with(dir, device, dtype, false)?.0)
    }

    /// As [`MiniVla::load_on`] in f32 with every tensor of the checkpoint a
    /// [`Var`], returned by name: the model that whole-model training
    /// (`wmrl sft`, [`crate::MiniVlaSft`]) differentiates and updates.
    pub fn load_trainable(dir: &Path, device: &Device) -> Result<(Self, Vec<(String, Var)>)> {
        Self::load_with(dir, device, DType::F32, true)
    }

    fn load_with(
        dir: &Path,
        device: &Device,
        dtype: DType,
        trainable: bool,
    ) -> Result<(Self, Vec<(String, Var)>)> {
        let cfg_path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| io(&cfg_path, e))?;
        let cfg: MiniVlaConfig = serde_json::from_str(&text).map_err(|e| io(&cfg_path, e))?;
        let w_path = dir.join(WEIGHTS_FILE);
        let mut tensors =
            candle_core::safetensors::load(&w_path, &Device::Cpu).map_err(|e| io(&w_path, e))?;
        let mut vars = Vec::new();
        if trainable {
            for (name, t) in tensors.iter_mut() {
                let v = Var::from_tensor(&t.to_dtype(dtype)?.to_device(device)?)?;
                *t = v.as_tensor().clone();
                vars.push((name.clone(), v));
            }
            vars.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let tok_path = dir.join(TOKENIZER_FILE);
        let tokenizer = if tok_path.exists() {
            Some(
                tokenizers::Tokenizer::from_file(&tok_path)
                    .map_err(|e| MiniVlaError::Tokenizer(format!("{}: {e}", tok_path.display())))?,
            )
        } else {
            None
        };
        let mut m = Self::build_from(&cfg, tensors, &w_path.display().to_string(), device, dtype)?;
        m.tokenizer = tokenizer;
        Ok((m, vars))
    }

    /// Build from tensors held in memory under the converted names (every
    /// one of the configuration, no others), without a tokenizer: what
    /// [`MiniVla::load_on`] does after reading the file. For timing a
    /// size without writing its checkpoint (examples/minivla_cost.rs).
    pub fn from_tensors(
        cfg: &MiniVlaConfig,
        tensors: HashMap<String, Tensor>,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        Self::build_from(cfg, tensors, "<memory>", device, dtype)
    }

    fn build_from(
        cfg: &MiniVlaConfig,
        tensors: HashMap<String, Tensor>,
        path: &str,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let names: HashSet<String> = tensors.keys().cloned().collect();
        let path = path.to_string();
        let (built, shapes) = build_checked(cfg, Some(tensors), &path, dtype, device)?;
        let mut extra: Vec<&String> = names.iter().filter(|n| !shapes.contains_key(*n)).collect();
        extra.sort();
        if let Some(key) = extra.first() {
            return Err(MiniVlaError::Tensor {
                path,
                key: (*key).clone(),
                message: format!(
                    "unexpected: not part of this configuration ({} such tensors)",
                    extra.len()
                ),
            });
        }
        let n_params = shapes.values().map(|s| s.iter().product::<usize>()).sum();
        Ok(Self {
            cfg: cfg.clone(),
            dino: built.dino,
            siglip: built.siglip,
            projector: built.projector,
            llm: built.llm,
            tokenizer: None,
            n_params,
            device: device.clone(),
            dtype,
            adapters: Vec::new(),
            lora: None,
        })
    }

    pub fn config(&self) -> &MiniVlaConfig {
        &self.cfg
    }

    /// The device its weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Parameters loaded.
    pub fn n_params(&self) -> usize {
        self.n_params
    }

    /// Token ids of the prompt for `instruction` (needs `tokenizer.json`).
    pub fn prompt_ids(&self, instruction: &str) -> Result<Vec<u32>> {
        let tok = self.tokenizer.as_ref().ok_or_else(|| {
            MiniVlaError::Tokenizer(format!("no {TOKENIZER_FILE} in the checkpoint directory"))
        })?;
        let enc = tok
            .encode(prompt(&self.cfg.system_prompt, instruction), true)
            .map_err(|e| MiniVlaError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Greedy action for `images` (agent view, then wrist or history frame
    /// when `n_images = 2`) and an instruction: 7 values in [-1, 1], the
    /// normalised actions (un-normalise with the run's
    /// `dataset_statistics.json` q01/q99 as OpenVLA does).
    pub fn predict_action(
        &self,
        images: &[image::RgbImage],
        instruction: &str,
    ) -> Result<[f32; 7]> {
        let ids = self.prompt_ids(instruction)?;
        Ok(self.predict_action_ids(images, &ids)?.0)
    }

    /// As [`MiniVla::predict_action`] from prompt token ids; also returns
    /// the 7 generated token ids.
    pub fn predict_action_ids(
        &self,
        images: &[image::RgbImage],
        prompt_ids: &[u32],
    ) -> Result<([f32; 7], [u32; 7])> {
        // the prompt once, then one position per token (KV cache)
        let mut cache = KvCache::new(self.llm.n_layers());
        let mut input = self.prefix_embeds(images, prompt_ids)?;
        let mut tokens = [0u32; 7];
        for slot in tokens.iter_mut() {
            // OpenVLA's `generate` is an unconstrained greedy argmax; the
            // decode below clips ids outside the action range.
            let id = Qwen2::argmax(&self.llm.last_logits_cached(&input, &mut cache)?)?[0];
            *slot = id;
            input = self.llm.embed(&Tensor::new(&[[id]], &self.device)?)?;
        }
        Ok((tokens.map(|t| self.action_of_token(t)), tokens))
    }

    /// Logits `[vocab]` of the first action token after the prompt (what
    /// the first greedy step takes the argmax of).
    pub fn next_token_logits(
        &self,
        images: &[image::RgbImage],
        prompt_ids: &[u32],
    ) -> Result<Vec<f32>> {
        let embeds = self.prefix_embeds(images, prompt_ids)?;
        Ok(self.llm.last_logits(&embeds)?.squeeze(0)?.to_vec1()?)
    }

    /// `[1, prompt + vision tokens, hidden]`: Prismatic inserts the patches
    /// after the first prompt token.
    pub(crate) fn prefix_embeds(
        &self,
        images: &[image::RgbImage],
        prompt_ids: &[u32],
    ) -> Result<Tensor> {
        if images.len() != self.cfg.n_images {
            return Err(MiniVlaError::Config(format!(
                "{} images given, the model takes {}",
                images.len(),
                self.cfg.n_images
            )));
        }
        self.splice(&self.vision_tokens(images, false)?, prompt_ids)
    }

    /// `[b, prompt + vision tokens, hidden]`: the prompt's embeddings with
    /// `patches` (`[b, vision tokens, hidden]`) after its first token.
    pub(crate) fn splice(&self, patches: &Tensor, prompt_ids: &[u32]) -> Result<Tensor> {
        if prompt_ids.is_empty() {
            return Err(MiniVlaError::Tokenizer("empty prompt".into()));
        }
        let (b, _, h) = patches.dims3()?;
        let ids = Tensor::new(prompt_ids, &self.device)?.unsqueeze(0)?;
        let text = self
            .llm
            .embed(&ids)?
            .broadcast_as((b, prompt_ids.len(), h))?;
        Ok(Tensor::cat(
            &[
                &text.narrow(1, 0, 1)?,
                patches,
                &text.narrow(1, 1, prompt_ids.len() - 1)?,
            ],
            1,
        )?)
    }

    /// OpenVLA's `decode_token_ids_to_actions`: bin index
    /// `clip(tokenizer_len - id - 1, 0, n_bins - 2)`, value = that bin's
    /// centre over `linspace(-1, 1, n_bins)` edges.
    pub fn action_of_token(&self, token: u32) -> f32 {
        let n = self.cfg.n_bins as i64;
        let idx = (self.cfg.tokenizer_len as i64 - token as i64 - 1).clamp(0, n - 2);
        -1.0 + (2 * idx + 1) as f32 / (n - 1) as f32
    }

    /// The action token whose bin centre is nearest `a` (clipped to
    /// [-1, 1]): the inverse of [`MiniVla::action_of_token`] on the action
    /// tokens, and OpenVLA's `np.digitize` encoding except that 1.0 maps
    /// into the last bin that decodes (as every value there decodes).
    pub fn token_of_action(&self, a: f32) -> u32 {
        let n = self.cfg.n_bins as i64;
        let a = if a.is_nan() { 0.0 } else { a.clamp(-1.0, 1.0) };
        let idx = (((a + 1.0) / 2.0 * (n - 1) as f32).floor() as i64).clamp(0, n - 2);
        (self.cfg.tokenizer_len as i64 - idx - 1) as u32
    }

    /// Projected patch tokens `[b, n_images * patches, hidden]` of `b`
    /// observations of `n_images` images each, one observation after the
    /// other (`diff`: differentiable forms, for training the whole model).
    pub(crate) fn vision_tokens(&self, images: &[image::RgbImage], diff: bool) -> Result<Tensor> {
        let n = self.cfg.n_images;
        if images.is_empty() || !images.len().is_multiple_of(n) {
            return Err(MiniVlaError::Config(format!(
                "{} images is not a whole number of {n}-image observations",
                images.len()
            )));
        }
        let d = self
            .dino
            .forward_features(&self.pixels(images, &self.cfg.dino)?, diff)?;
        let s = self
            .siglip
            .forward_features(&self.pixels(images, &self.cfg.siglip)?, diff)?;
        // [b * n, p, w] -> [b, n * p, w], images one after the other
        let flat = |t: Tensor| -> candle_core::Result<Tensor> {
            let (_, p, w) = t.dims3()?;
            t.reshape((images.len() / n, n * p, w))
        };
        Ok(self.projector.forward(&fuse(&flat(d)?, &flat(s)?)?)?)
    }

    /// Resize (bicubic, "resize-naive") and normalise for one featurizer.
    fn pixels(&self, images: &[image::RgbImage], c: &VitConfig) -> Result<Tensor> {
        let n = c.image_size;
        let mut data = Vec::with_capacity(images.len() * 3 * n * n);
        for img in images {
            let r = resize_to(img, n);
            for ch in 0..3 {
                data.extend(
                    r.pixels()
                        .map(|p| (p.0[ch] as f32 / 255.0 - c.mean[ch]) / c.std[ch]),
                );
            }
        }
        Ok(Tensor::from_vec(data, (images.len(), 3, n, n), &self.device)?.to_dtype(self.dtype)?)
    }
}
