//! Scoring rollouts with a progress model through ONNX Runtime.
//!
//! One session per [`WorldModel`], built once at load; every call batches
//! rollouts up to `batch_size`. CPU execution provider by default, CUDA with
//! [`ExecutionProvider::Cuda`] and a CUDA build of ONNX Runtime. This module never
//! trains and never touches candle.

use std::path::{Path, PathBuf};

use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};
use serde::{Deserialize, Serialize};
use wmrl_env::Frame;

use crate::collapse::{DEFAULT_POTENTIAL_K, ScoreMode, collapse, push_frame_chw, uniform_indices};
use crate::contract::{
    self, Elem, INPUT_FRAMES, INPUT_INSTRUCTION, IoDesc, ModelShape, OUTPUT_PROGRESS,
    OUTPUT_SUCCESS,
};
use crate::{Result, WmError};
use wmrl_onnx::OnnxError;
use wmrl_onnx::runtime;

/// Where ONNX Runtime runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionProvider {
    #[default]
    Cpu,
    /// Needs a CUDA build of ONNX Runtime (the `onnxruntime-gpu` wheel's
    /// library, pointed at by `ORT_DYLIB_PATH`) and a GPU; loading fails
    /// with the reason otherwise ([`cuda_provider_status`] tells first).
    Cuda,
}

/// Inference settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorldModelConfig {
    /// Rollouts per ONNX Runtime call (default 64).
    pub batch_size: usize,
    /// Window of the `potential` score (METHOD.md: 3).
    pub potential_k: usize,
    /// Threads inside one operator; `None` lets ONNX Runtime decide.
    pub intra_threads: Option<usize>,
    pub execution_provider: ExecutionProvider,
}

impl Default for WorldModelConfig {
    fn default() -> Self {
        Self {
            batch_size: 64,
            potential_k: DEFAULT_POTENTIAL_K,
            intra_threads: None,
            execution_provider: ExecutionProvider::Cpu,
        }
    }
}

/// The frames of one rollout (one camera), oldest first, and its task.
#[derive(Debug, Clone)]
pub struct RolloutFrames<'a> {
    pub instruction: &'a str,
    pub frames: Vec<&'a Frame>,
}

/// The world model's verdict on one rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutScore {
    /// Progress in [0, 1] at each of the model's T sub-sampled frames.
    pub per_frame_progress: Vec<f32>,
    /// Success probability at each sub-sampled frame.
    pub per_frame_success: Vec<f32>,
    /// The collapsed score ([`ScoreMode`]).
    pub score: f32,
}

/// A loaded progress model.
#[derive(Debug)]
pub struct WorldModel {
    session: Session,
    shape: ModelShape,
    path: PathBuf,
    config: WorldModelConfig,
}

fn elem_of(t: TensorElementType) -> Elem {
    match t {
        TensorElementType::Float32 => Elem::F32,
        TensorElementType::Int64 => Elem::I64,
        _ => Elem::Other,
    }
}

fn describe(name: &str, ty: &ValueType) -> IoDesc {
    match ty {
        ValueType::Tensor { ty, shape, .. } => IoDesc {
            name: name.to_string(),
            elem: elem_of(*ty),
            shape: Some(shape.to_vec()),
        },
        _ => IoDesc {
            name: name.to_string(),
            elem: Elem::Other,
            shape: None,
        },
    }
}

impl WorldModel {
    /// Load with default settings (CPU, batch 64).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_with(path, WorldModelConfig::default())
    }

    /// Load a model file, build its session once, and check the contract.
    pub fn load_with(path: impl AsRef<Path>, config: WorldModelConfig) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let file_err = |message: String| -> WmError {
            OnnxError::ModelFile {
                path: shown.clone(),
                message,
            }
            .into()
        };
        if config.batch_size == 0 {
            return Err(WmError::Config("batch_size must be at least 1".into()));
        }
        let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => file_err(
                "does not exist (train and export one with `wmrl wm train` and `wmrl wm export`, \
                 or use the shipped models/progress-tiny/model.onnx)"
                    .into(),
            ),
            _ => file_err(e.to_string()),
        })?;
        if bytes.is_empty() {
            return Err(file_err("is empty".into()));
        }
        let env = runtime::environment()?;
        let load_err = |e: &dyn std::fmt::Display| OnnxError::ModelLoad {
            path: shown.clone(),
            message: e.to_string(),
        };
        let mut builder = Session::builder(env).map_err(|e| load_err(&e))?;
        if let Some(n) = config.intra_threads {
            builder = builder.with_intra_threads(n).map_err(|e| load_err(&e))?;
        }
        builder = with_provider(builder, config.execution_provider).map_err(|e| load_err(&e))?;
        let session = builder
            .commit_from_memory(&bytes)
            .map_err(|e| load_err(&e))?;
        let inputs: Vec<IoDesc> = session
            .inputs()
            .iter()
            .map(|o| describe(o.name(), o.dtype()))
            .collect();
        let outputs: Vec<IoDesc> = session
            .outputs()
            .iter()
            .map(|o| describe(o.name(), o.dtype()))
            .collect();
        let meta = session.metadata().ok();
        let lookup = |k: &str| meta.as_ref().and_then(|m| m.custom(k));
        let shape =
            contract::check(&inputs, &outputs, &lookup).map_err(|message| WmError::Contract {
                path: shown.clone(),
                message,
            })?;
        drop(meta);
        Ok(Self {
            session,
            shape,
            path,
            config,
        })
    }

    /// T, L, frame size and batch constraints read from the file.
    pub fn shape(&self) -> ModelShape {
        self.shape
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn config(&self) -> &WorldModelConfig {
        &self.config
    }

    /// Run the model on ready tensors: `frames` is `[b, T, 3, H, W]`
    /// float32 (flattened), `tokens` is `[b, L]`. Returns `(progress,
    /// success)`, each `b * T` values.
    pub fn run_raw(
        &mut self,
        frames: &[f32],
        tokens: &[i64],
        b: usize,
        (h, w): (usize, usize),
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let (t, l) = (self.shape.num_frames, self.shape.instruction_len);
        if frames.len() != b * t * 3 * h * w || tokens.len() != b * l {
            return Err(WmError::Config(format!(
                "run_raw: {} frame values and {} tokens do not fit [{b}, {t}, 3, {h}, {w}] and [{b}, {l}]",
                frames.len(),
                tokens.len()
            )));
        }
        let inf = |e: ort::Error| OnnxError::Inference(e.to_string());
        let fshape = [b, t, 3, h, w];
        // Views, not copies: ONNX Runtime reads the caller's buffers.
        let frames_t = TensorRef::from_array_view((fshape, frames)).map_err(inf)?;
        let tokens_t = TensorRef::from_array_view(([b, l], tokens)).map_err(inf)?;
        let outputs = self
            .session
            .run(ort::inputs![INPUT_FRAMES => frames_t, INPUT_INSTRUCTION => tokens_t])
            .map_err(inf)?;
        let take = |name: &str| -> Result<Vec<f32>> {
            let v = outputs
                .get(name)
                .ok_or_else(|| OnnxError::Inference(format!("no output `{name}`")))?;
            let (shape, data) = v.try_extract_tensor::<f32>().map_err(inf)?;
            if shape.len() != 2 || shape[0] as usize != b || shape[1] as usize != t {
                return Err(OnnxError::Inference(format!(
                    "output `{name}` has shape {:?}, expected [{b}, {t}]",
                    &shape[..]
                ))
                .into());
            }
            if let Some(bad) = data.iter().find(|v| !v.is_finite()) {
                return Err(OnnxError::Inference(format!("output `{name}` holds {bad}")).into());
            }
            Ok(data.iter().map(|v| v.clamp(0.0, 1.0)).collect())
        };
        let p = take(OUTPUT_PROGRESS)?;
        let s = take(OUTPUT_SUCCESS)?;
        Ok((p, s))
    }

    /// Score rollouts: sub-sample each to T frames, run in batches, collapse.
    /// Errors (no panic) on an empty rollout, frames of the wrong size, or
    /// frames of mixed sizes.
    pub fn score(
        &mut self,
        rollouts: &[RolloutFrames<'_>],
        mode: ScoreMode,
    ) -> Result<Vec<RolloutScore>> {
        if rollouts.is_empty() {
            return Ok(Vec::new());
        }
        let hw = self.check_rollouts(rollouts)?;
        let (t, l) = (self.shape.num_frames, self.shape.instruction_len);
        let batch = self.shape.fixed_batch.unwrap_or(self.config.batch_size);
        let mut out = Vec::with_capacity(rollouts.len());
        for chunk in rollouts.chunks(batch) {
            // A file with a fixed batch needs full batches: pad by repeating.
            let b = if self.shape.fixed_batch.is_some() {
                batch
            } else {
                chunk.len()
            };
            let mut frames = Vec::with_capacity(b * t * 3 * hw.0 * hw.1);
            let mut tokens = Vec::with_capacity(b * l);
            for i in 0..b {
                let r = &chunk[i.min(chunk.len() - 1)];
                for idx in uniform_indices(r.frames.len(), t) {
                    push_frame_chw(r.frames[idx], &mut frames);
                }
                tokens.extend(wmrl_env::text::byte_tokens(r.instruction, l));
            }
            let (p, s) = self.run_raw(&frames, &tokens, b, hw)?;
            for i in 0..chunk.len() {
                let pp = p[i * t..(i + 1) * t].to_vec();
                let ss = s[i * t..(i + 1) * t].to_vec();
                let score = collapse(&pp, &ss, mode, self.config.potential_k);
                out.push(RolloutScore {
                    per_frame_progress: pp,
                    per_frame_success: ss,
                    score,
                });
            }
        }
        Ok(out)
    }

    fn check_rollouts(&self, rollouts: &[RolloutFrames<'_>]) -> Result<(usize, usize)> {
        let mut hw = self.shape.frame_hw;
        for (index, r) in rollouts.iter().enumerate() {
            let bad = |message: String| WmError::BadRollout { index, message };
            if r.frames.is_empty() {
                return Err(bad("has no frames".into()));
            }
            for (j, f) in r.frames.iter().enumerate() {
                let got = (f.height as usize, f.width as usize);
                if f.rgb.len() != got.0 * got.1 * 3 {
                    return Err(bad(format!(
                        "frame {j} of {}x{} holds {} bytes, not {}",
                        got.1,
                        got.0,
                        f.rgb.len(),
                        got.0 * got.1 * 3
                    )));
                }
                match hw {
                    None => hw = Some(got),
                    Some(want) if want != got => {
                        return Err(bad(format!(
                            "frame {j} is {}x{} (WxH), the model takes {}x{}",
                            got.1, got.0, want.1, want.0
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        hw.ok_or_else(|| WmError::BadRollout {
            index: 0,
            message: "no rollouts to score".into(),
        })
    }
}

fn with_provider(
    builder: ort::session::builder::SessionBuilder,
    ep: ExecutionProvider,
) -> std::result::Result<ort::session::builder::SessionBuilder, String> {
    match ep {
        ExecutionProvider::Cpu => Ok(builder),
        ExecutionProvider::Cuda => {
            cuda_provider_status()?;
            builder
                .with_execution_providers([ort::ep::CUDA::default().build().error_on_failure()])
                .map_err(|e| e.to_string())
        }
    }
}

/// Whether the loaded ONNX Runtime library can run models on CUDA: `Err`
/// says why not (the library cannot be loaded, or it is a CPU-only build
/// such as the `onnxruntime` wheel `scripts/setup` installs). A session can
/// still fail to start on CUDA (no driver or GPU); loading then reports it.
pub fn cuda_provider_status() -> std::result::Result<(), String> {
    use ort::ep::ExecutionProvider as _;
    runtime::environment().map_err(|e| e.to_string())?;
    match ort::ep::CUDA::is_available() {
        Ok(true) => Ok(()),
        Ok(false) => Err(
            "the loaded ONNX Runtime library has no CUDA execution provider (a CPU build; \
             point ORT_DYLIB_PATH at the `onnxruntime-gpu` wheel's libonnxruntime.so)"
                .into(),
        ),
        Err(e) => Err(format!("ONNX Runtime cannot list its providers: {e}")),
    }
}
