//! Rendering on the GPU: once [`enable`]d, every renderer created afterwards
//! records its two cameras' triangles (the host part of drawing) and fills
//! both images in one launch of the batched rasteriser (kernels/raster.cu);
//! pixels agree with the CPU renderer except on exact triangle edges (the
//! kernel's parity test allows 0.5% of pixels). A launch that fails falls
//! back to the CPU for that renderer, with one warning, and the frame is
//! still drawn (from the same recording).

use std::sync::{Arc, OnceLock};

use wmrl_kernels::Gpu;

static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();

/// Render on CUDA device `ordinal` from now on, or say why not (no driver
/// or device, NVRTC missing, a kernel that does not compile).
pub fn enable(ordinal: usize) -> Result<(), String> {
    if GPU.get().is_some() {
        return Ok(());
    }
    let gpu = Gpu::new(ordinal).map_err(|e| e.to_string())?;
    let _ = GPU.set(Arc::new(gpu));
    Ok(())
}

/// Whether renderers are created on the GPU.
pub fn enabled() -> bool {
    GPU.get().is_some()
}

pub(crate) fn shared() -> Option<Arc<Gpu>> {
    GPU.get().cloned()
}
