//! What the policy sees, and how it becomes tensors: frames resized to the
//! configured square, cut into patches and scaled to [-1, 1]; the
//! instruction as byte tokens; proprio normalised with the config's stats.

use candle_core::{DType, Device, Tensor};
use wmrl_env::Frame;

use crate::{PolicyConfig, PolicyError, Result};

/// One observation to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyInput {
    pub instruction: String,
    /// Frames in the environment's camera order: agent view first, then wrist.
    pub frames: Vec<Frame>,
    /// The agent-view frame of the previous policy call, for the history
    /// variant (`use_prev_frame`); the current one is used when absent.
    pub prev_frame: Option<Frame>,
    pub proprio: Vec<f32>,
}

impl PolicyInput {
    pub fn from_observation(
        instruction: &str,
        obs: &wmrl_env::Observation,
        prev_frame: Option<Frame>,
    ) -> Self {
        Self {
            instruction: instruction.to_string(),
            frames: obs.frames.clone(),
            prev_frame,
            proprio: obs.proprio.clone(),
        }
    }
}

/// A frame resized to `size x size` RGB bytes (bilinear; unchanged when it
/// already has that size).
///
/// The same bytes as `image::imageops::resize` with `FilterType::Triangle`
/// (a vertical pass into f32, then a horizontal pass rounded to u8, the
/// weights and the order of every sum as the `image` crate computes them;
/// a test compares the two), without its per-pixel four-channel views and
/// the copy of the frame. The crate's resize was 6-8% of a training run's
/// CPU (docs/results.md, "Speed (point 3)").
pub fn resize_frame(frame: &Frame, size: usize) -> Result<Vec<u8>> {
    let (w, h) = (frame.width as usize, frame.height as usize);
    if frame.rgb.len() != w * h * 3 || w == 0 || h == 0 {
        return Err(PolicyError::Input(format!(
            "frame {}x{} has {} bytes",
            frame.width,
            frame.height,
            frame.rgb.len()
        )));
    }
    if w == size && h == size {
        return Ok(frame.rgb.clone());
    }
    // Vertical pass: `size` rows of `w` pixels, f32 as `image` keeps them.
    let mut tmp = vec![0f32; size * w * 3];
    for (outy, (left, ws)) in triangle_weights(h, size).into_iter().enumerate() {
        let row = &mut tmp[outy * w * 3..(outy + 1) * w * 3];
        for (i, wt) in ws.iter().enumerate() {
            let src = &frame.rgb[(left + i) * w * 3..(left + i + 1) * w * 3];
            for (t, &v) in row.iter_mut().zip(src) {
                *t += f32::from(v) * wt;
            }
        }
    }
    // Horizontal pass, clamped to [0, 255] and rounded to nearest.
    let mut out = vec![0u8; size * size * 3];
    let cols = triangle_weights(w, size);
    for y in 0..size {
        let src = &tmp[y * w * 3..(y + 1) * w * 3];
        for (outx, (left, ws)) in cols.iter().enumerate() {
            let mut t = [0f32; 3];
            for (i, wt) in ws.iter().enumerate() {
                let p = &src[(left + i) * 3..(left + i) * 3 + 3];
                for c in 0..3 {
                    t[c] += p[c] * wt;
                }
            }
            let o = &mut out[(y * size + outx) * 3..(y * size + outx) * 3 + 3];
            for c in 0..3 {
                o[c] = t[c].clamp(0.0, 255.0).round() as u8;
            }
        }
    }
    Ok(out)
}

/// For each output position of a `from -> to` resample, the first input
/// index and the normalised triangle-filter weights from there on: the
/// `image` crate's `vertical_sample`/`horizontal_sample` arithmetic.
fn triangle_weights(from: usize, to: usize) -> Vec<(usize, Vec<f32>)> {
    let ratio = from as f32 / to as f32;
    let sratio = if ratio < 1.0 { 1.0 } else { ratio };
    let support = sratio;
    (0..to)
        .map(|out| {
            let input = (out as f32 + 0.5) * ratio;
            let left = ((input - support).floor() as i64).clamp(0, from as i64 - 1);
            let right = ((input + support).ceil() as i64).clamp(left + 1, from as i64);
            let input = input - 0.5;
            let mut ws: Vec<f32> = (left..right)
                .map(|i| {
                    let x = ((i as f32 - input) / sratio).abs();
                    if x < 1.0 { 1.0 - x } else { 0.0 }
                })
                .collect();
            let mut sum = 0.0f32;
            for w in &ws {
                sum += w;
            }
            for w in ws.iter_mut() {
                *w /= sum;
            }
            (left as usize, ws)
        })
        .collect()
}

/// The images one observation contributes, already resized, in encoder order
/// (agent view, wrist if used, previous agent view if used).
pub fn observation_images(cfg: &PolicyConfig, input: &PolicyInput) -> Result<Vec<Vec<u8>>> {
    let agent = input
        .frames
        .first()
        .ok_or_else(|| PolicyError::Input("observation has no frames".into()))?;
    let mut out = vec![resize_frame(agent, cfg.image_size)?];
    if cfg.use_wrist {
        let wrist = input.frames.get(1).ok_or_else(|| {
            PolicyError::Input(
                "config uses the wrist camera but the observation has one frame".into(),
            )
        })?;
        out.push(resize_frame(wrist, cfg.image_size)?);
    }
    if cfg.use_prev_frame {
        out.push(resize_frame(
            input.prev_frame.as_ref().unwrap_or(agent),
            cfg.image_size,
        )?);
    }
    Ok(out)
}

/// Append one resized image as patches (`[n_patch, 3 * p * p]`, values in [-1, 1]).
fn push_patches(cfg: &PolicyConfig, rgb: &[u8], out: &mut Vec<f32>) {
    let s = cfg.image_size;
    let p = cfg.patch_size;
    let n = s / p;
    for py in 0..n {
        for px in 0..n {
            for c in 0..3 {
                for y in 0..p {
                    let row = (py * p + y) * s;
                    for x in 0..p {
                        let v = rgb[(row + px * p + x) * 3 + c];
                        out.push(f32::from(v) / 127.5 - 1.0);
                    }
                }
            }
        }
    }
}

/// Normalised proprio of one observation (padded or truncated to `proprio_dim`).
pub fn normalize_proprio(cfg: &PolicyConfig, proprio: &[f32]) -> Vec<f32> {
    (0..cfg.proprio_dim)
        .map(|i| {
            let v = proprio.get(i).copied().unwrap_or(0.0);
            let m = cfg.proprio_mean.get(i).copied().unwrap_or(0.0);
            let s = cfg.proprio_std.get(i).copied().unwrap_or(1.0).max(1e-6);
            ((v - m) / s).clamp(-10.0, 10.0)
        })
        .collect()
}

/// Build model inputs from pre-resized images (`images[row]` as returned by
/// [`observation_images`]), instructions and raw proprio.
pub fn prepare_rows(
    cfg: &PolicyConfig,
    images: &[&[Vec<u8>]],
    instructions: &[&str],
    proprio: &[&[f32]],
    device: &Device,
    dtype: DType,
) -> Result<crate::PreparedInputs> {
    let b = images.len();
    if instructions.len() != b || proprio.len() != b {
        return Err(PolicyError::Input("rows disagree in length".into()));
    }
    let n_img = cfg.n_images();
    let want = cfg.image_size * cfg.image_size * 3;
    let patch_dim = 3 * cfg.patch_size * cfg.patch_size;
    let n_tok = n_img * cfg.patches_per_image();
    let mut pix = Vec::with_capacity(b * n_tok * patch_dim);
    for imgs in images {
        if imgs.len() != n_img || imgs.iter().any(|i| i.len() != want) {
            return Err(PolicyError::Input(format!(
                "expected {n_img} images of {want} bytes per row"
            )));
        }
        for img in imgs.iter() {
            push_patches(cfg, img, &mut pix);
        }
    }
    let patches = Tensor::from_vec(pix, (b, n_tok, patch_dim), device)?.to_dtype(dtype)?;
    let mut text = Vec::with_capacity(b * cfg.text_len);
    for ins in instructions {
        text.extend(
            wmrl_env::text::byte_tokens(ins, cfg.text_len)
                .into_iter()
                .map(|t| t.clamp(0, cfg.text_vocab as i64 - 1) as u32),
        );
    }
    let text = Tensor::from_vec(text, (b, cfg.text_len), device)?;
    let proprio = if cfg.proprio_dim > 0 {
        let v: Vec<f32> = proprio
            .iter()
            .flat_map(|p| normalize_proprio(cfg, p))
            .collect();
        Some(Tensor::from_vec(v, (b, cfg.proprio_dim), device)?.to_dtype(dtype)?)
    } else {
        None
    };
    Ok(crate::PreparedInputs {
        patches,
        text,
        proprio,
    })
}
