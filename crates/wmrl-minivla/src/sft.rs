//! Whole-model behaviour cloning of a MiniVLA (`wmrl sft --minivla small`):
//! every step of a demonstration becomes one sample (the step's images at
//! the model's size, the prompt of the episode's instruction, and its
//! action as 7 action tokens, [`MiniVla::token_of_action`]), and the loss
//! is OpenVLA's: cross-entropy over the whole vocabulary of each action
//! token, teacher-forced after the prefix and the tokens before it. Every
//! tensor of the checkpoint is trained (vision backbones, projector and
//! language model, through their differentiable forms); the loop, its
//! optimiser, checkpoints and resume are wmrl-policy's [`train_sft`].
//!
//! [`train_sft`]: wmrl_policy::train_sft

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{D, DType, Device, Tensor, Var};
use wmrl_env::Episode;
use wmrl_policy::{PolicyError, SftModel};

use crate::model::resize_to;
use crate::policy::{model_error, observation_images};
use crate::{ACTION_DIM, MiniVla, MiniVlaError, Result, STATS_FILE, TOKENIZER_FILE, WEIGHTS_FILE};

/// A trainable MiniVLA and its demonstration samples.
pub struct MiniVlaSft {
    model: MiniVla,
    vars: Vec<(String, Var)>,
    /// The directory the model was loaded from (its tokenizer and
    /// statistics go with every save elsewhere).
    source: PathBuf,
    /// `n_images` per sample, already at the model's image size.
    images: Vec<image::RgbImage>,
    prompts: Vec<Vec<u32>>,
    prompt_of: Vec<usize>,
    tokens: Vec<[u32; ACTION_DIM]>,
    n_episodes: usize,
}

impl std::fmt::Debug for MiniVlaSft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniVlaSft")
            .field("preset", &self.model.config().preset)
            .field("samples", &self.tokens.len())
            .field("episodes", &self.n_episodes)
            .finish()
    }
}

impl MiniVlaSft {
    /// The checkpoint in `dir` with every tensor trainable, no samples yet.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let (model, vars) = MiniVla::load_trainable(dir, device)?;
        model.prompt_ids("pick up the object")?;
        Ok(Self {
            model,
            vars,
            source: dir.to_path_buf(),
            images: Vec::new(),
            prompts: Vec::new(),
            prompt_of: Vec::new(),
            tokens: Vec::new(),
            n_episodes: 0,
        })
    }

    pub fn model(&self) -> &MiniVla {
        &self.model
    }

    /// Add every step of `ep` as a sample: the images the policy would see
    /// at that step ([`crate::MiniVlaPolicy`]'s order), the action encoded
    /// as action tokens (the bin centres are the actions: no statistics).
    pub fn push_episode(&mut self, ep: &Episode) -> Result<()> {
        let ids = self.model.prompt_ids(&ep.instruction)?;
        let p = match self.prompts.iter().position(|q| q == &ids) {
            Some(p) => p,
            None => {
                self.prompts.push(ids);
                self.prompts.len() - 1
            }
        };
        let cfg = self.model.config();
        let size = cfg.dino.image_size;
        for (t, step) in ep.steps.iter().enumerate() {
            let a = &step.action;
            if a.len() != ACTION_DIM {
                return Err(MiniVlaError::Config(format!(
                    "demo action has {} dims, need {ACTION_DIM}",
                    a.len()
                )));
            }
            let prev = t.checked_sub(1).and_then(|u| ep.steps[u].frames.first());
            for img in observation_images(cfg.n_images, &step.frames, prev)? {
                self.images.push(resize_to(&img, size).into_owned());
            }
            self.prompt_of.push(p);
            self.tokens
                .push(std::array::from_fn(|k| self.model.token_of_action(a[k])));
        }
        self.n_episodes += 1;
        Ok(())
    }

    /// Negative log-likelihood summed over the 7 tokens of samples `rows`
    /// (one prompt), and how many tokens the argmax got right.
    fn nll_group(&self, prompt: &[u32], rows: &[usize]) -> Result<(Tensor, usize)> {
        let n = self.model.config().n_images;
        let images: Vec<image::RgbImage> = rows
            .iter()
            .flat_map(|&i| self.images[i * n..(i + 1) * n].iter().cloned())
            .collect();
        let dev = self.model.device();
        let prefix = self
            .model
            .splice(&self.model.vision_tokens(&images, true)?, prompt)?;
        let fed: Vec<u32> = rows
            .iter()
            .flat_map(|&i| self.tokens[i][..ACTION_DIM - 1].iter().copied())
            .collect();
        let fed = Tensor::from_vec(fed, (rows.len(), ACTION_DIM - 1), dev)?;
        let x = Tensor::cat(&[&prefix, &self.model.llm.embed(&fed)?], 1)?;
        let logits = self.model.llm.last_k_logits(&x, ACTION_DIM)?;
        let target: Vec<u32> = rows.iter().flat_map(|&i| self.tokens[i]).collect();
        let target = Tensor::from_vec(target, (rows.len(), ACTION_DIM), dev)?;
        let lp = candle_nn::ops::log_softmax(&logits, D::Minus1)?
            .gather(&target.unsqueeze(2)?, 2)?
            .sum_all()?;
        let hits = logits
            .argmax(D::Minus1)?
            .eq(&target)?
            .to_dtype(DType::F32)?
            .sum_all()?
            .to_scalar::<f32>()?;
        Ok((lp.neg()?, hits as usize))
    }

    fn loss_of(&self, idx: &[usize]) -> Result<(Tensor, f64)> {
        let mut by_prompt: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &i in idx {
            by_prompt.entry(self.prompt_of[i]).or_default().push(i);
        }
        let mut total: Option<Tensor> = None;
        let mut hits = 0;
        for (p, rows) in &by_prompt {
            let (nll, h) = self.nll_group(&self.prompts[*p], rows)?;
            hits += h;
            total = Some(match total {
                None => nll,
                Some(t) => (t + nll)?,
            });
        }
        let n = (idx.len() * ACTION_DIM).max(1);
        let total = total.ok_or_else(|| MiniVlaError::Config("empty batch".into()))?;
        Ok(((total / n as f64)?, hits as f64 / n as f64))
    }

    fn save_to(&self, out: &Path) -> Result<()> {
        let map: HashMap<String, Tensor> = self
            .vars
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        crate::stand_in::write_checkpoint(out, self.model.config(), &map)?;
        if out != self.source {
            for file in [TOKENIZER_FILE, STATS_FILE] {
                let from = self.source.join(file);
                if from.exists() {
                    std::fs::copy(&from, out.join(file)).map_err(|e| io(&from, e))?;
                }
            }
        }
        Ok(())
    }

    fn restore_from(&self, dir: &Path) -> Result<()> {
        let path = dir.join(WEIGHTS_FILE);
        let map =
            candle_core::safetensors::load(&path, self.model.device()).map_err(|e| io(&path, e))?;
        for (name, var) in &self.vars {
            let t = map.get(name).ok_or_else(|| MiniVlaError::Tensor {
                path: path.display().to_string(),
                key: name.clone(),
                message: "missing".into(),
            })?;
            if t.dims() != var.dims() {
                return Err(MiniVlaError::Tensor {
                    path: path.display().to_string(),
                    key: name.clone(),
                    message: format!("shape {:?}, expected {:?}", t.dims(), var.dims()),
                });
            }
            var.set(&t.to_dtype(var.dtype())?)?;
        }
        Ok(())
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> MiniVlaError {
    MiniVlaError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl SftModel for MiniVlaSft {
    fn vars(&self) -> Vec<(String, Var)> {
        self.vars.clone()
    }
    fn n_samples(&self) -> usize {
        self.tokens.len()
    }
    fn n_episodes(&self) -> usize {
        self.n_episodes
    }
    fn loss(&self, idx: &[usize]) -> wmrl_policy::Result<(Tensor, f64)> {
        self.loss_of(idx).map_err(model_error)
    }
    fn save(&self, out: &Path) -> wmrl_policy::Result<()> {
        self.save_to(out).map_err(model_error)
    }
    fn restore(&self, out: &Path) -> wmrl_policy::Result<()> {
        self.restore_from(out).map_err(|e| match e {
            MiniVlaError::Tensor { path, key, message } => PolicyError::Checkpoint {
                path,
                tensor: key,
                message,
            },
            e => model_error(e),
        })
    }
}
