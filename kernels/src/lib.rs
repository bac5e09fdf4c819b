//! CUDA C kernels for wmrl's hot paths (`kernels/*.cu`), compiled at run time
//! with NVRTC through cudarc (loaded dynamically: nothing CUDA is needed to
//! build, and NVRTC compiles PTX without a GPU or driver), each with a CPU
//! reference in the crate that owns the CPU path:
//!
//! | kernel | entry point | CPU reference |
//! |---|---|---|
//! | `action_head.cu` | `sample_action_tokens`: temperature sampling over the action bins by inverse CDF, log-prob and entropy per token | `wmrl_policy::sample_row` (the policy's own sampling) |
//! | `raster.cu` | `raster_images`: a batch of images' screen-space triangles, background gradient, depth test | `wmrl_sim::raster::Raster::fill_screen_tri` |
//!
//! Tests: every kernel compiles to PTX (CI installs NVRTC from PyPI and sets
//! `WMRL_REQUIRE_NVRTC=1`, so a syntax or type error fails CI); the parity
//! tests launch the kernels when a CUDA driver and device are present and
//! print why they are skipped otherwise. `scripts/gpu-check` runs them on a
//! GPU machine.

#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};

/// A kernel source and its entry points.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    pub name: &'static str,
    pub source: &'static str,
    pub entry_points: &'static [&'static str],
}

/// Every kernel of `kernels/`.
pub const KERNELS: &[Kernel] = &[
    Kernel {
        name: "action_head",
        source: include_str!("../action_head.cu"),
        entry_points: &["sample_action_tokens"],
    },
    Kernel {
        name: "raster",
        source: include_str!("../raster.cu"),
        entry_points: &["raster_images"],
    },
];

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(
        "NVRTC is not available (install nvidia-cuda-nvrtc-cu12 and put its lib on LD_LIBRARY_PATH; scripts/setup does)"
    )]
    NoNvrtc,
    #[error("no CUDA driver or device: {0}")]
    NoDevice(String),
    #[error("kernel {name} does not compile: {message}")]
    Compile { name: String, message: String },
    #[error("CUDA: {0}")]
    Cuda(String),
}

pub type Result<T> = std::result::Result<T, KernelError>;

/// Whether the NVRTC library can be loaded.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to open the shared library by its usual names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compile one kernel to PTX. FMA contraction is off so that the GPU's
/// arithmetic follows the CPU references' operation by operation.
pub fn compile(k: &Kernel) -> Result<Ptx> {
    if !nvrtc_available() {
        return Err(KernelError::NoNvrtc);
    }
    let opts = CompileOptions {
        fmad: Some(false),
        name: Some(format!("{}.cu", k.name)),
        ..CompileOptions::default()
    };
    compile_ptx_with_opts(k.source, opts).map_err(|e| KernelError::Compile {
        name: k.name.into(),
        message: e.to_string(),
    })
}

/// A CUDA device with every kernel loaded.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    modules: Vec<(&'static str, Arc<CudaModule>)>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.ctx.ordinal())
            .finish()
    }
}

impl Gpu {
    /// Device `ordinal`, or why there is none (no driver library, no
    /// device).
    pub fn new(ordinal: usize) -> Result<Self> {
        // SAFETY: only tries to open the driver library by its usual names.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(KernelError::NoDevice(
                "no libcuda (no NVIDIA driver)".into(),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| KernelError::NoDevice(e.to_string()))?;
        let mut modules = Vec::new();
        for k in KERNELS {
            let m = ctx
                .load_module(compile(k)?)
                .map_err(|e| KernelError::Cuda(e.to_string()))?;
            modules.push((k.name, m));
        }
        Ok(Self { ctx, modules })
    }

    fn function(&self, kernel: &str, entry: &str) -> Result<cudarc::driver::CudaFunction> {
        let m = self
            .modules
            .iter()
            .find(|(n, _)| *n == kernel)
            .map(|(_, m)| m)
            .ok_or_else(|| KernelError::Cuda(format!("no kernel {kernel}")))?;
        m.load_function(entry)
            .map_err(|e| KernelError::Cuda(e.to_string()))
    }

    /// `sample_action_tokens` over `rows` rows of `bins` logits: (token,
    /// log-prob, entropy) per row.
    pub fn sample_action_tokens(
        &self,
        logits: &[f32],
        uniforms: &[f64],
        bins: usize,
        temperature: f64,
    ) -> Result<(Vec<u32>, Vec<f32>, Vec<f32>)> {
        let rows = uniforms.len();
        if logits.len() != rows * bins {
            return Err(KernelError::Cuda(format!(
                "{} logits for {rows} rows of {bins}",
                logits.len()
            )));
        }
        let cuda = |e: cudarc::driver::DriverError| KernelError::Cuda(e.to_string());
        let s = self.ctx.default_stream();
        let d_logits = s.clone_htod(logits).map_err(cuda)?;
        let d_u = s.clone_htod(uniforms).map_err(cuda)?;
        let mut d_tok = s.alloc_zeros::<u32>(rows).map_err(cuda)?;
        let mut d_lp = s.alloc_zeros::<f32>(rows).map_err(cuda)?;
        let mut d_h = s.alloc_zeros::<f32>(rows).map_err(cuda)?;
        let f = self.function("action_head", "sample_action_tokens")?;
        let (rows_i, bins_i) = (rows as i32, bins as i32);
        let mut b = s.launch_builder(&f);
        b.arg(&d_logits)
            .arg(&d_u)
            .arg(&rows_i)
            .arg(&bins_i)
            .arg(&temperature)
            .arg(&mut d_tok)
            .arg(&mut d_lp)
            .arg(&mut d_h);
        let cfg = LaunchConfig {
            grid_dim: ((rows as u32).div_ceil(128).max(1), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's signature and every
        // buffer holds `rows` (or `rows * bins`) elements.
        unsafe { b.launch(cfg) }.map_err(cuda)?;
        Ok((
            s.clone_dtoh(&d_tok).map_err(cuda)?,
            s.clone_dtoh(&d_lp).map_err(cuda)?,
            s.clone_dtoh(&d_h).map_err(cuda)?,
        ))
    }

    /// `raster_images`: `first[k]..first[k + 1]` are image `k`'s triangles
    /// (9 floats each in `tris`, one colour each in `colors`), `bg[2k]` and
    /// `bg[2k + 1]` its gradient's top and bottom; returns RGB images.
    pub fn raster_images(
        &self,
        tris: &[f32],
        colors: &[u32],
        first: &[u32],
        bg: &[u32],
        width: usize,
        height: usize,
    ) -> Result<Vec<u8>> {
        let images = first.len().saturating_sub(1);
        if tris.len() != 9 * colors.len() || bg.len() != 2 * images {
            return Err(KernelError::Cuda(
                "raster buffers disagree in length".into(),
            ));
        }
        let cuda = |e: cudarc::driver::DriverError| KernelError::Cuda(e.to_string());
        let s = self.ctx.default_stream();
        // Empty device buffers are not allowed: pad with one unused entry.
        let pad_f = if tris.is_empty() {
            vec![0.0f32; 9]
        } else {
            tris.to_vec()
        };
        let pad_c = if colors.is_empty() {
            vec![0u32]
        } else {
            colors.to_vec()
        };
        let d_t = s.clone_htod(&pad_f).map_err(cuda)?;
        let d_c = s.clone_htod(&pad_c).map_err(cuda)?;
        let d_first = s.clone_htod(first).map_err(cuda)?;
        let d_bg = s.clone_htod(bg).map_err(cuda)?;
        let n = images * width * height;
        let mut d_out = s.alloc_zeros::<u8>(3 * n.max(1)).map_err(cuda)?;
        let f = self.function("raster", "raster_images")?;
        let (im, w, h) = (images as i32, width as i32, height as i32);
        let mut b = s.launch_builder(&f);
        b.arg(&d_t)
            .arg(&d_c)
            .arg(&d_first)
            .arg(&d_bg)
            .arg(&im)
            .arg(&w)
            .arg(&h)
            .arg(&mut d_out);
        let cfg = LaunchConfig::for_num_elems(n.max(1) as u32);
        // SAFETY: the arguments match the kernel's signature; the output
        // holds 3 bytes per pixel of every image.
        unsafe { b.launch(cfg) }.map_err(cuda)?;
        let mut out = s.clone_dtoh(&d_out).map_err(cuda)?;
        out.truncate(3 * n);
        Ok(out)
    }
}
