//! Small dense networks (multi-layer perceptrons) as ONNX files, and running
//! them through ONNX Runtime: the generic counterpart of the robot world
//! model's export and inference (`wmrl-worldmodel`) for models that are a
//! chain of `x @ W + b` layers with element-wise activations (e.g. the
//! AutoResearch outcome predictor).
//!
//! The graph is one `Gemm` (`transB = 0`, so `W` is stored `[in, out]`, the
//! layout of `x.matmul(w)` in candle) per layer followed by its activation,
//! opset [`OPSET`](crate::OPSET), input `[batch, in]` float32, output
//! `[batch, out]` float32. This module never trains.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};
use prost::Message;

use crate::onnx_proto::*;
use crate::{OnnxError, Result, runtime};

/// The element-wise function after a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity,
    Relu,
    Sigmoid,
    Tanh,
}

impl Activation {
    fn op(self) -> Option<&'static str> {
        match self {
            Self::Identity => None,
            Self::Relu => Some("Relu"),
            Self::Sigmoid => Some("Sigmoid"),
            Self::Tanh => Some("Tanh"),
        }
    }
}

/// One layer `activation(x @ weight + bias)`; `weight` is row-major
/// `[in_dim, out_dim]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseLayer {
    pub in_dim: usize,
    pub out_dim: usize,
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
    pub activation: Activation,
}

/// A whole network to export.
#[derive(Debug, Clone, PartialEq)]
pub struct MlpGraph {
    /// Graph name stored in the file.
    pub name: String,
    pub input: String,
    pub output: String,
    pub layers: Vec<DenseLayer>,
    /// Stored as the model's metadata properties.
    pub metadata: Vec<(String, String)>,
}

impl MlpGraph {
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(OnnxError::Config(format!("mlp `{}`: {m}", self.name)));
        if self.layers.is_empty() {
            return bad("no layers".into());
        }
        for (i, l) in self.layers.iter().enumerate() {
            if l.in_dim == 0 || l.out_dim == 0 {
                return bad(format!("layer {i} has a zero dimension"));
            }
            if l.weight.len() != l.in_dim * l.out_dim || l.bias.len() != l.out_dim {
                return bad(format!(
                    "layer {i}: {} weights and {} biases do not fit [{}, {}]",
                    l.weight.len(),
                    l.bias.len(),
                    l.in_dim,
                    l.out_dim
                ));
            }
            if i > 0 && self.layers[i - 1].out_dim != l.in_dim {
                return bad(format!(
                    "layer {i} takes {} inputs, layer {} gives {}",
                    l.in_dim,
                    i - 1,
                    self.layers[i - 1].out_dim
                ));
            }
        }
        if self.input.is_empty() || self.output.is_empty() || self.input == self.output {
            return bad("input and output need distinct, non-empty names".into());
        }
        Ok(())
    }
}

/// The ONNX model bytes of `g`.
pub fn mlp_onnx_bytes(g: &MlpGraph) -> Result<Vec<u8>> {
    g.validate()?;
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    let mut x = g.input.clone();
    let last = g.layers.len() - 1;
    for (i, l) in g.layers.iter().enumerate() {
        let (w, b) = (format!("layer{i}.weight"), format!("layer{i}.bias"));
        inits.push(TensorProto::from_f32(
            &w,
            &[l.in_dim as i64, l.out_dim as i64],
            &l.weight,
        ));
        inits.push(TensorProto::from_f32(&b, &[l.out_dim as i64], &l.bias));
        let act = l.activation.op();
        let gemm_out = if i == last && act.is_none() {
            g.output.clone()
        } else {
            format!("layer{i}.linear")
        };
        nodes.push(node("Gemm", &[&x, &w, &b], &gemm_out, i));
        x = gemm_out;
        if let Some(op) = act {
            let out = if i == last {
                g.output.clone()
            } else {
                format!("layer{i}.out")
            };
            nodes.push(node(op, &[&x], &out, i));
            x = out;
        }
    }
    let batch: std::result::Result<i64, &str> = Err("batch");
    let graph = GraphProto {
        node: nodes,
        name: g.name.clone(),
        initializer: inits,
        doc_string: format!("wmrl dense network `{}`", g.name),
        input: vec![ValueInfoProto::tensor(
            &g.input,
            DT_FLOAT,
            &[batch, Ok(g.layers[0].in_dim as i64)],
        )],
        output: vec![ValueInfoProto::tensor(
            &g.output,
            DT_FLOAT,
            &[batch, Ok(g.layers[last].out_dim as i64)],
        )],
        value_info: vec![],
    };
    let model = crate::model_proto(
        graph,
        format!("{} exported by wmrl", g.name),
        g.metadata.clone(),
    );
    Ok(model.encode_to_vec())
}

fn node(op: &str, inputs: &[&str], output: &str, layer: usize) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        name: format!("{op}_{layer}"),
        op_type: op.to_string(),
        ..Default::default()
    }
}

/// Write `g` as an ONNX file atomically (temporary name, then rename).
pub fn export_mlp_onnx(g: &MlpGraph, path: &Path) -> Result<()> {
    crate::write_atomic(path, &mlp_onnx_bytes(g)?)
}

/// A loaded one-input, one-output float32 network `[batch, in] -> [batch,
/// out]`. The session sits behind a mutex so a shared `&MlpSession` can run.
#[derive(Debug)]
pub struct MlpSession {
    session: Mutex<Session>,
    path: PathBuf,
    input: String,
    output: String,
    in_dim: usize,
    out_dim: usize,
    metadata: Vec<(String, String)>,
}

fn fixed_2d(ty: &ValueType) -> Option<usize> {
    match ty {
        ValueType::Tensor {
            ty: TensorElementType::Float32,
            shape,
            ..
        } if shape.len() == 2 && shape[1] > 0 => Some(shape[1] as usize),
        _ => None,
    }
}

impl MlpSession {
    /// Load `path` and build its session once. `metadata_keys` are read from
    /// the file's metadata (missing keys are left out). Errors name the
    /// path: [`OnnxError::ModelFile`] when it cannot be read or is empty,
    /// [`OnnxError::ModelLoad`] when ONNX Runtime rejects it (truncated, not
    /// ONNX), [`OnnxError::Contract`] when it is not `[batch, in] -> [batch,
    /// out]` float32.
    pub fn load(
        path: impl AsRef<Path>,
        intra_threads: Option<usize>,
        metadata_keys: &[&str],
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let bytes = std::fs::read(&path).map_err(|e| OnnxError::ModelFile {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        if bytes.is_empty() {
            return Err(OnnxError::ModelFile {
                path: shown,
                message: "is empty".into(),
            });
        }
        let env = runtime::environment()?;
        let load_err = |e: &dyn std::fmt::Display| OnnxError::ModelLoad {
            path: shown.clone(),
            message: e.to_string(),
        };
        let mut builder = Session::builder(env).map_err(|e| load_err(&e))?;
        if let Some(n) = intra_threads {
            builder = builder.with_intra_threads(n).map_err(|e| load_err(&e))?;
        }
        let session = builder
            .commit_from_memory(&bytes)
            .map_err(|e| load_err(&e))?;
        let contract = |message: String| OnnxError::Contract {
            path: shown.clone(),
            message,
        };
        let (ins, outs) = (session.inputs(), session.outputs());
        if ins.len() != 1 || outs.len() != 1 {
            return Err(contract(format!(
                "expected one input and one output, found {} and {}",
                ins.len(),
                outs.len()
            )));
        }
        let in_dim = fixed_2d(ins[0].dtype())
            .ok_or_else(|| contract("input is not float32 [batch, n]".into()))?;
        let out_dim = fixed_2d(outs[0].dtype())
            .ok_or_else(|| contract("output is not float32 [batch, n]".into()))?;
        let (input, output) = (ins[0].name().to_string(), outs[0].name().to_string());
        let metadata = match session.metadata() {
            Ok(m) => metadata_keys
                .iter()
                .filter_map(|k| m.custom(k).map(|v| (k.to_string(), v)))
                .collect(),
            Err(_) => Vec::new(),
        };
        Ok(Self {
            session: Mutex::new(session),
            path,
            input,
            output,
            in_dim,
            out_dim,
            metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn in_dim(&self) -> usize {
        self.in_dim
    }

    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// A metadata value asked for at load.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Run on `rows` inputs given row-major (`rows * in_dim` values);
    /// returns `rows * out_dim` values. Non-finite outputs are an error.
    pub fn run(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        if x.len() != rows * self.in_dim {
            return Err(OnnxError::Config(format!(
                "{}: {} values do not fit [{rows}, {}]",
                self.path.display(),
                x.len(),
                self.in_dim
            )));
        }
        if rows == 0 {
            return Ok(Vec::new());
        }
        let inf = |e: ort::Error| OnnxError::Inference(e.to_string());
        let t = TensorRef::from_array_view(([rows, self.in_dim], x)).map_err(inf)?;
        let mut session = self
            .session
            .lock()
            .map_err(|_| OnnxError::Inference("session lock poisoned".into()))?;
        let outputs = session
            .run(ort::inputs![self.input.as_str() => t])
            .map_err(inf)?;
        let v = outputs
            .get(&self.output)
            .ok_or_else(|| OnnxError::Inference(format!("no output `{}`", self.output)))?;
        let (shape, data) = v.try_extract_tensor::<f32>().map_err(inf)?;
        if shape.len() != 2 || shape[0] as usize != rows || shape[1] as usize != self.out_dim {
            return Err(OnnxError::Inference(format!(
                "output has shape {:?}, expected [{rows}, {}]",
                &shape[..],
                self.out_dim
            )));
        }
        if let Some(bad) = data.iter().find(|v| !v.is_finite()) {
            return Err(OnnxError::Inference(format!("output holds {bad}")));
        }
        Ok(data.to_vec())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn layer(i: usize, o: usize, act: Activation, seed: f32) -> DenseLayer {
        DenseLayer {
            in_dim: i,
            out_dim: o,
            weight: (0..i * o)
                .map(|k| ((k as f32 + seed) * 0.37).sin() * 0.5)
                .collect(),
            bias: (0..o)
                .map(|k| (k as f32 * 0.11 + seed).cos() * 0.1)
                .collect(),
            activation: act,
        }
    }

    fn graph() -> MlpGraph {
        MlpGraph {
            name: "t".into(),
            input: "x".into(),
            output: "y".into(),
            layers: vec![
                layer(5, 7, Activation::Relu, 1.0),
                layer(7, 3, Activation::Tanh, 2.0),
                layer(3, 2, Activation::Sigmoid, 3.0),
            ],
            metadata: vec![("kind".into(), "test".into())],
        }
    }

    /// The same network evaluated by hand.
    fn reference(g: &MlpGraph, x: &[f32]) -> Vec<f32> {
        let mut h = x.to_vec();
        for l in &g.layers {
            let mut y = l.bias.clone();
            for (j, yj) in y.iter_mut().enumerate() {
                for (i, hi) in h.iter().enumerate() {
                    *yj += hi * l.weight[i * l.out_dim + j];
                }
                *yj = match l.activation {
                    Activation::Identity => *yj,
                    Activation::Relu => yj.max(0.0),
                    Activation::Sigmoid => 1.0 / (1.0 + (-*yj).exp()),
                    Activation::Tanh => yj.tanh(),
                };
            }
            h = y;
        }
        h
    }

    #[test]
    fn rejects_mismatched_layers() {
        let mut g = graph();
        g.layers[1].in_dim = 6;
        assert!(mlp_onnx_bytes(&g).is_err());
        let mut g = graph();
        g.layers[0].bias.pop();
        assert!(mlp_onnx_bytes(&g).is_err());
    }

    #[test]
    fn runs_through_onnx_runtime_like_the_reference() {
        if !runtime::runtime_available() {
            eprintln!("skipped: no ONNX Runtime library (scripts/setup installs it)");
            return;
        }
        let g = graph();
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("m.onnx");
        export_mlp_onnx(&g, &path).unwrap();
        let s = MlpSession::load(&path, Some(1), &["kind", "absent"]).unwrap();
        assert_eq!((s.in_dim(), s.out_dim()), (5, 2));
        assert_eq!(s.metadata("kind"), Some("test"));
        assert_eq!(s.metadata("absent"), None);
        let x: Vec<f32> = (0..15).map(|k| (k as f32 * 0.7).sin() * 2.0).collect();
        let y = s.run(&x, 3).unwrap();
        for r in 0..3 {
            let want = reference(&g, &x[r * 5..(r + 1) * 5]);
            for (a, b) in y[r * 2..(r + 1) * 2].iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{a} vs {b}");
            }
        }
        assert!(s.run(&x[..14], 3).is_err());
        assert!(s.run(&[], 0).unwrap().is_empty());
    }

    #[test]
    fn truncated_file_is_an_error_naming_the_path() {
        if !runtime::runtime_available() {
            eprintln!("skipped: no ONNX Runtime library (scripts/setup installs it)");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("cut.onnx");
        let bytes = mlp_onnx_bytes(&graph()).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = MlpSession::load(&path, None, &[]).unwrap_err();
        assert!(matches!(e, OnnxError::ModelLoad { .. }), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let missing = d.path().join("none.onnx");
        let e = MlpSession::load(&missing, None, &[]).unwrap_err();
        assert!(matches!(e, OnnxError::ModelFile { .. }), "{e}");
        assert!(e.to_string().contains("none.onnx"));
    }
}
