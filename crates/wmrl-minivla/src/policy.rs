//! MiniVLA as a policy the episode runner drives
//! ([`wmrl_policy::ActionPolicy`]): `wmrl eval` runs a converted MiniVLA
//! directory on the embedded simulator, over the bridge or on real LIBERO
//! exactly as it runs the `tiny` policy.
//!
//! One policy call is one step: the prompt is built from the task's
//! instruction, the frames go through both vision backbones (resized by the
//! model to its image size), and the 7 action tokens are drawn one after
//! another at the call's temperature from row `i`'s ChaCha8 stream
//! `(seed, streams[i])`. The tokens map to bin centres in [-1, 1]; a
//! directory with `dataset_statistics.json` (a published run) is
//! un-normalised with it and given LIBERO's gripper convention, as
//! openvla-mini's LIBERO evaluation does; without it (a MiniVLA trained on
//! the embedded simulator's own actions) the bin centres are the actions.

use std::path::Path;

use candle_core::{DType, Device};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use wmrl_env::Frame;
use wmrl_policy::{ActionPolicy, PolicyError, PolicyInput, Sample};

use crate::libero::{ActionStats, libero_env_action};
use crate::rl::Prefix;
use crate::{ACTION_DIM, MiniVla, MiniVlaError, Result};

/// The statistics file of a published run (OpenVLA's name).
pub const STATS_FILE: &str = "dataset_statistics.json";

/// A MiniVLA checkpoint directory as a policy.
pub struct MiniVlaPolicy {
    model: MiniVla,
    stats: Option<ActionStats>,
}

impl std::fmt::Debug for MiniVlaPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniVlaPolicy")
            .field("preset", &self.model.config().preset)
            .field("unnormalised", &self.stats.is_some())
            .finish()
    }
}

/// Whether `dir` holds a MiniVLA checkpoint (its `config.json` is a
/// [`crate::MiniVlaConfig`]: it names the two vision backbones), rather
/// than a `tiny` policy.
pub fn is_minivla_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(crate::CONFIG_FILE))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .is_some_and(|v| v.get("dino").is_some() && v.get("siglip").is_some())
}

fn frame_image(f: &Frame) -> Result<image::RgbImage> {
    image::RgbImage::from_raw(f.width, f.height, f.rgb.clone()).ok_or_else(|| {
        MiniVlaError::Config(format!(
            "frame {}x{} has {} bytes, not {}",
            f.width,
            f.height,
            f.rgb.len(),
            f.width as usize * f.height as usize * 3
        ))
    })
}

/// The images of one observation in the model's order: the agent view,
/// then (for a two-image model) the wrist camera when the environment has
/// one, else the previous call's agent view `prev` (else the agent view).
pub(crate) fn observation_images(
    n_images: usize,
    frames: &[Frame],
    prev: Option<&Frame>,
) -> Result<Vec<image::RgbImage>> {
    let agent = frames
        .first()
        .ok_or_else(|| MiniVlaError::Config("the observation has no camera frame".into()))?;
    let mut out = vec![frame_image(agent)?];
    if n_images == 2 {
        out.push(frame_image(frames.get(1).or(prev).unwrap_or(agent))?);
    }
    Ok(out)
}

pub(crate) fn model_error(e: MiniVlaError) -> PolicyError {
    PolicyError::Model(format!("minivla: {e}"))
}

impl MiniVlaPolicy {
    /// Load `dir` (config.json, model.safetensors, tokenizer.json, and
    /// `dataset_statistics.json` when the actions are to be
    /// un-normalised; `stats_key` names its dataset when it holds several).
    pub fn load(
        dir: &Path,
        device: &Device,
        dtype: DType,
        stats_key: Option<&str>,
    ) -> Result<Self> {
        let model = MiniVla::load_on(dir, device, dtype)?;
        // Fail at load, not at the first step, when the prompt cannot be built.
        model.prompt_ids("pick up the object")?;
        let stats_path = dir.join(STATS_FILE);
        let stats = if stats_path.exists() {
            Some(ActionStats::from_file(&stats_path, stats_key)?)
        } else {
            None
        };
        Ok(Self { model, stats })
    }

    /// A loaded model as a policy (`stats`: see [`Self::load`]).
    pub fn new(model: MiniVla, stats: Option<ActionStats>) -> Self {
        Self { model, stats }
    }

    pub fn model(&self) -> &MiniVla {
        &self.model
    }

    pub fn model_mut(&mut self) -> &mut MiniVla {
        &mut self.model
    }

    /// What the language model reads before the action tokens for `input`:
    /// the prompt of its instruction and its frames' patches (no gradient:
    /// the vision side is frozen).
    pub fn prefix_of(&self, input: &PolicyInput) -> Result<Prefix> {
        let ids = self.model.prompt_ids(&input.instruction)?;
        self.model.prefix(&self.images(input)?, &ids)
    }

    fn images(&self, input: &PolicyInput) -> Result<Vec<image::RgbImage>> {
        observation_images(
            self.model.config().n_images,
            &input.frames,
            input.prev_frame.as_ref(),
        )
    }

    /// The environment action of 7 action tokens.
    fn action(&self, tokens: &[u32; ACTION_DIM]) -> [f32; ACTION_DIM] {
        let a = tokens.map(|t| self.model.action_of_token(t));
        match &self.stats {
            Some(s) => libero_env_action(s.unnormalize(a)),
            None => a,
        }
    }

    /// Each row's sample and the prefix it was drawn after. Rows with the
    /// same instruction go through the model together (one vision pass,
    /// one language-model pass per token); row `i` draws from ChaCha8
    /// `(seed, streams[i])` alone, so its sample does not depend on the
    /// other rows.
    fn sample_rows(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
        streams: &[u64],
    ) -> wmrl_policy::Result<Vec<(Sample, Prefix)>> {
        if streams.len() != inputs.len() {
            return Err(PolicyError::Input(format!(
                "{} streams for {} inputs",
                streams.len(),
                inputs.len()
            )));
        }
        let mut groups: Vec<(Vec<u32>, Vec<usize>)> = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            let ids = self
                .model
                .prompt_ids(&input.instruction)
                .map_err(model_error)?;
            match groups.iter_mut().find(|(g, _)| *g == ids) {
                Some((_, rows)) => rows.push(i),
                None => groups.push((ids, vec![i])),
            }
        }
        let mut out: Vec<Option<(Sample, Prefix)>> = vec![None; inputs.len()];
        for (ids, rows) in &groups {
            let drawn = self
                .sample_group(inputs, rows, ids, temperature, seed, streams)
                .map_err(model_error)?;
            for (&i, row) in rows.iter().zip(drawn) {
                out[i] = Some(row);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The rows `rows` of `inputs`, all with prompt `ids`, in one batch.
    fn sample_group(
        &self,
        inputs: &[PolicyInput],
        rows: &[usize],
        ids: &[u32],
        temperature: f32,
        seed: u64,
        streams: &[u64],
    ) -> Result<Vec<(Sample, Prefix)>> {
        let mut images = Vec::with_capacity(rows.len() * self.model.config().n_images);
        for &i in rows {
            images.extend(self.images(&inputs[i])?);
        }
        let embeds = self
            .model
            .splice(&self.model.vision_tokens(&images, false)?, ids)?
            .detach();
        let mut rngs: Vec<ChaCha8Rng> = rows
            .iter()
            .map(|&i| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(streams[i]);
                rng
            })
            .collect();
        let mut draws: Vec<Box<dyn FnMut() -> f64 + '_>> = rngs
            .iter_mut()
            .map(|r| Box::new(move || r.random::<f64>()) as Box<dyn FnMut() -> f64>)
            .collect();
        let mut uniforms: Vec<&mut dyn FnMut() -> f64> =
            draws.iter_mut().map(|d| d.as_mut() as _).collect();
        let samples =
            self.model
                .sample_action_tokens_batch(&embeds, temperature.max(0.0), &mut uniforms)?;
        samples
            .into_iter()
            .enumerate()
            .map(|(r, s)| {
                let sample = Sample {
                    actions: vec![self.action(&s.tokens)],
                    tokens: s.tokens.to_vec(),
                    logprobs: s.logprobs.to_vec(),
                };
                let prefix = Prefix {
                    embeds: embeds.narrow(0, r, 1)?,
                };
                Ok((sample, prefix))
            })
            .collect()
    }
}

impl ActionPolicy for MiniVlaPolicy {
    fn kind(&self) -> &'static str {
        "minivla"
    }
    fn chunk(&self) -> usize {
        1
    }
    fn sample_streams(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
        streams: &[u64],
    ) -> wmrl_policy::Result<Vec<Sample>> {
        Ok(self
            .sample_rows(inputs, temperature, seed, streams)?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }
    /// The features are each row's prefix (`[L, hidden]` as f32, row-major):
    /// the update reads them back ([`Prefix::from_features`]) instead of
    /// running the frozen vision backbones again.
    fn sample_with_features(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
    ) -> wmrl_policy::Result<(Vec<Sample>, Vec<Vec<f32>>)> {
        let streams: Vec<u64> = (0..inputs.len() as u64).collect();
        let rows = self.sample_rows(inputs, temperature, seed, &streams)?;
        let mut samples = Vec::with_capacity(rows.len());
        let mut features = Vec::with_capacity(rows.len());
        for (s, p) in rows {
            samples.push(s);
            features.push(p.to_features().map_err(model_error)?);
        }
        Ok((samples, features))
    }
}
