//! Rendering on the GPU: once a GPU is [`install`]ed (or [`enable`]d),
//! every renderer created afterwards records its two cameras' triangles
//! (the host part of drawing) and fills both images in one launch of the
//! batched rasteriser (kernels/raster.cu); pixels agree with the CPU
//! renderer except on exact triangle edges (the kernel's parity test allows
//! 0.5% of pixels). The first launch that fails turns GPU rendering off for
//! the process, with one warning; that frame is still drawn, on the CPU
//! from the same recording, and so is every later one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub use wmrl_kernels::Gpu;

static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
static FAILED: AtomicBool = AtomicBool::new(false);

/// CUDA device `ordinal` with the kernels loaded, or why not (no driver or
/// device, NVRTC missing, a kernel that does not compile). Changes nothing.
pub fn open(ordinal: usize) -> Result<Arc<Gpu>, String> {
    Gpu::new(ordinal).map(Arc::new).map_err(|e| e.to_string())
}

/// Render on `gpu` from now on (the first installed GPU stays).
pub fn install(gpu: Arc<Gpu>) {
    let _ = GPU.set(gpu);
}

/// [`open`] then [`install`].
pub fn enable(ordinal: usize) -> Result<(), String> {
    if GPU.get().is_none() {
        install(open(ordinal)?);
    }
    Ok(())
}

/// Whether renderers are created on the GPU: one is installed and no launch
/// has failed.
pub fn enabled() -> bool {
    GPU.get().is_some() && !FAILED.load(Ordering::Relaxed)
}

pub(crate) fn shared() -> Option<Arc<Gpu>> {
    if FAILED.load(Ordering::Relaxed) {
        return None;
    }
    GPU.get().cloned()
}

/// A launch failed: render on the CPU from now on (warns the first time).
pub(crate) fn failed(why: &str) {
    if !FAILED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "GPU rasteriser failed ({why}); the simulator renders on the CPU from now on"
        );
    }
}
