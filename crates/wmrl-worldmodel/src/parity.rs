//! A deterministic parity fixture: inputs both Rust and Python can rebuild
//! exactly (integer hash for pixels, the byte tokenizer for text), and the
//! candle model's outputs on them. `wmrl wm export` writes it beside the
//! `.onnx`; `python/parity.py` runs the file through Python's onnxruntime and
//! compares.

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::{NetConfig, ProgressNet, Result};

/// Instructions of the fixture batch (one per rollout, cycled).
pub const INSTRUCTIONS: [&str; 3] = ["put the red block in the bowl", "open the top drawer", ""];

/// Pixel value `i` of the flattened frames tensor: an exact integer hash / 255.
pub fn pixel(i: usize) -> f32 {
    let h = (i as u64).wrapping_mul(2_654_435_761) & 0xffff_ffff;
    (h >> 24) as f32 / 255.0
}

/// The fixture file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParityFixture {
    pub batch: usize,
    pub num_frames: usize,
    pub height: usize,
    pub width: usize,
    pub instruction_len: usize,
    pub instructions: Vec<String>,
    /// Candle outputs, `[batch * num_frames]` each.
    pub progress: Vec<f32>,
    pub success: Vec<f32>,
}

/// Fixture inputs: flattened frames and tokens.
pub fn inputs(cfg: &NetConfig, batch: usize) -> (Vec<f32>, Vec<i64>, Vec<String>) {
    let n = batch * cfg.num_frames * 3 * cfg.height * cfg.width;
    let frames = (0..n).map(pixel).collect();
    let instr: Vec<String> = (0..batch)
        .map(|i| INSTRUCTIONS[i % INSTRUCTIONS.len()].to_string())
        .collect();
    let tokens = instr
        .iter()
        .flat_map(|s| wmrl_env::text::byte_tokens(s, cfg.instruction_len))
        .collect();
    (frames, tokens, instr)
}

/// Run the candle model on the fixture inputs.
pub fn fixture(net: &ProgressNet, batch: usize) -> Result<ParityFixture> {
    let cfg = &net.config;
    let (frames, tokens, instructions) = inputs(cfg, batch);
    let dev = Device::Cpu;
    let f = Tensor::from_vec(
        frames,
        (batch, cfg.num_frames, 3, cfg.height, cfg.width),
        &dev,
    )?;
    let t = Tensor::from_vec(tokens, (batch, cfg.instruction_len), &dev)?;
    let (p, s) = net.predict(&f, &t)?;
    Ok(ParityFixture {
        batch,
        num_frames: cfg.num_frames,
        height: cfg.height,
        width: cfg.width,
        instruction_len: cfg.instruction_len,
        instructions,
        progress: p.flatten_all()?.to_vec1()?,
        success: s.flatten_all()?.to_vec1()?,
    })
}
