//! Rendering on the GPU: a renderer given a [`Gpu`] (through
//! [`crate::TabletopEnv::on`] or [`crate::make_vec_env`]) records its two
//! cameras' triangles (the host part of drawing) and fills both images in
//! one launch of the batched rasteriser (kernels/raster.cu); pixels agree
//! with the CPU renderer except on exact triangle edges (the kernel's
//! parity test allows 0.5% of pixels). The GPU is a parameter, as candle's
//! `&Device` is: nothing is installed for the process. A renderer whose
//! launch fails warns once and draws that frame, and every later one, on
//! the CPU from the same recording.

use std::sync::Arc;

pub use wmrl_kernels::Gpu;

/// CUDA device `ordinal` with the kernels loaded, or why not (no driver or
/// device, NVRTC missing, a kernel that does not compile). Changes nothing.
pub fn open(ordinal: usize) -> Result<Arc<Gpu>, String> {
    Gpu::new(ordinal).map(Arc::new).map_err(|e| e.to_string())
}
