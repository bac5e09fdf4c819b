//! The outcome predictor as users run it: the trained candle
//! [`Predictor`] exported to an ONNX file (opset 17, one `Gemm` per layer,
//! built by `wmrl_onnx::mlp`) and scored through ONNX Runtime (`ort`),
//! exactly as the robot track's world model is. The candle model is for
//! training only; every score the `wm` and `wmrl` arms, the benchmark and
//! `fit-predictor` use comes from an [`OnnxPredictor`].
//!
//! The file takes `input` `[batch, N_INPUT]` float32 (meta-features then the
//! solution one-hot, [`crate::predictor::input`]) and gives `reward`
//! `[batch, 1]`, the predicted reward-ladder value in [0, 1].

use std::path::Path;

use rand::Rng;
use wmrl_onnx::{Activation, DenseLayer, MlpGraph, MlpSession, export_mlp_onnx};

use crate::competition::N_META;
use crate::error::{Error, Result};
use crate::nn::{Dense, seeded};
use crate::predictor::{InputKind, Predictor};
use crate::solution::N_OPTIONS;

/// Name of the model's input.
pub const INPUT: &str = "input";
/// Name of the model's output.
pub const OUTPUT: &str = "reward";
/// Metadata key naming what the file is.
pub const META_KIND: &str = "wmrl.kind";
/// Value of [`META_KIND`] in a predictor file.
pub const KIND: &str = "autoresearch_outcome_predictor";
/// Value of [`META_KIND`] in a code predictor file ([`InputKind::Code`]:
/// meta-features then [`crate::code_features::code_features`]).
pub const CODE_KIND: &str = "autoresearch_code_predictor";

fn kind_name(kind: InputKind) -> &'static str {
    match kind {
        InputKind::Template => KIND,
        InputKind::Code => CODE_KIND,
    }
}
/// File name of the ONNX predictor in a run or bench directory.
pub const FILE_NAME: &str = "predictor.onnx";

// One thread per call: a batch is a few dozen rows of a 64-wide MLP, and the
// sandbox already runs solutions on every core.
const INTRA_THREADS: usize = 1;

fn dense_layer(d: &Dense, activation: Activation) -> Result<DenseLayer> {
    let w = d.w.as_tensor();
    let (in_dim, out_dim) = w.dims2()?;
    Ok(DenseLayer {
        in_dim,
        out_dim,
        weight: w.flatten_all()?.to_vec1()?,
        bias: d.b.as_tensor().to_vec1()?,
        activation,
    })
}

impl Predictor {
    /// The network as a graph description for ONNX export; op for op the
    /// candle forward pass (relu, relu, sigmoid).
    pub fn mlp_graph(&self) -> Result<MlpGraph> {
        let [l0, l1, l2] = self.layers();
        Ok(MlpGraph {
            name: "wmrl_autoresearch_predictor".into(),
            input: INPUT.into(),
            output: OUTPUT.into(),
            layers: vec![
                dense_layer(l0, Activation::Relu)?,
                dense_layer(l1, Activation::Relu)?,
                dense_layer(l2, Activation::Sigmoid)?,
            ],
            metadata: vec![
                (META_KIND.into(), kind_name(self.kind()).into()),
                ("wmrl.n_meta".into(), N_META.to_string()),
                ("wmrl.n_options".into(), N_OPTIONS.to_string()),
            ],
        })
    }

    /// Write the predictor as an ONNX file (atomically).
    pub fn export_onnx(&self, path: &Path) -> Result<()> {
        Ok(export_mlp_onnx(&self.mlp_graph()?, path)?)
    }
}

/// A predictor loaded from its ONNX file, scored through ONNX Runtime.
#[derive(Debug)]
pub struct OnnxPredictor {
    session: MlpSession,
    kind: InputKind,
}

impl OnnxPredictor {
    /// Load an exported predictor. A missing, empty or truncated file, or a
    /// model of another shape, is an [`Error::Onnx`] naming `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_kind(path, InputKind::Template)
    }

    /// Load an exported predictor that reads inputs of `kind` (a file of the
    /// other kind, or of another shape, is an [`Error::Onnx`] naming `path`).
    pub fn load_kind(path: impl AsRef<Path>, kind: InputKind) -> Result<Self> {
        let path = path.as_ref();
        let session = MlpSession::load(path, Some(INTRA_THREADS), &[META_KIND])?;
        let width = kind.width();
        if session.in_dim() != width || session.out_dim() != 1 {
            return Err(Error::Onnx(wmrl_onnx::OnnxError::Contract {
                path: path.display().to_string(),
                message: format!(
                    "maps {} inputs to {} outputs; a {} maps {width} to 1",
                    session.in_dim(),
                    session.out_dim(),
                    kind_name(kind)
                ),
            }));
        }
        if let Some(k) = session
            .metadata(META_KIND)
            .filter(|k| *k != kind_name(kind))
        {
            return Err(Error::Onnx(wmrl_onnx::OnnxError::Contract {
                path: path.display().to_string(),
                message: format!("is a `{k}`, not a `{}`", kind_name(kind)),
            }));
        }
        Ok(Self { session, kind })
    }

    /// Export `predictor` to `path` and load it back: what training code
    /// calls after fitting.
    pub fn export_and_load(predictor: &Predictor, path: &Path) -> Result<Self> {
        predictor.export_onnx(path)?;
        Self::load_kind(path, predictor.kind())
    }

    pub fn path(&self) -> &Path {
        self.session.path()
    }

    /// What the predictor reads after the meta-features.
    pub fn kind(&self) -> InputKind {
        self.kind
    }

    /// Predicted ladder values for a batch of inputs (one ONNX Runtime call).
    pub fn predict(&self, inputs: &[Vec<f32>]) -> Result<Vec<f64>> {
        let width = self.kind.width();
        if let Some(bad) = inputs.iter().find(|r| r.len() != width) {
            return Err(Error::Config(format!(
                "predictor input of width {}, expected {width}",
                bad.len()
            )));
        }
        let flat: Vec<f32> = inputs.iter().flatten().copied().collect();
        Ok(self
            .session
            .run(&flat, inputs.len())?
            .into_iter()
            .map(f64::from)
            .collect())
    }
}

/// Largest |candle - ONNX Runtime| over `n` random inputs (uniform in
/// [-2, 2] on every coordinate, seeded): the export's parity check.
pub fn max_abs_diff(candle: &Predictor, onnx: &OnnxPredictor, n: usize, seed: u64) -> Result<f64> {
    let mut rng = seeded(seed);
    let xs: Vec<Vec<f32>> = (0..n)
        .map(|_| {
            (0..candle.kind().width())
                .map(|_| rng.random_range(-2.0..2.0))
                .collect()
        })
        .collect();
    let (a, b) = (candle.predict(&xs)?, onnx.predict(&xs)?);
    Ok(a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code_features::{N_CODE_INPUT, code_input};
    use crate::predictor::{Example, N_INPUT, PredictorConfig};
    use crate::solution::Solution;

    fn runtime() -> bool {
        let ok = wmrl_onnx::runtime_available();
        if !ok {
            eprintln!("skipped: no ONNX Runtime library (scripts/setup installs it)");
        }
        ok
    }

    fn trained() -> Predictor {
        let ex: Vec<Example> = (0..48)
            .map(|i| Example {
                competition: "t".into(),
                meta: (0..N_META)
                    .map(|k| ((i * 7 + k) % 5) as f32 * 0.2)
                    .collect(),
                solution: Solution::new([i % 4, (i / 4) % 4, i % 7, i % 3, 0, 0]).unwrap(),
                reward: if i % 7 == 4 {
                    0.9
                } else {
                    0.2 + 0.01 * i as f64
                },
                cpu_secs: 1.0,
            })
            .collect();
        let cfg = PredictorConfig {
            epochs: 80,
            seed: 3,
            ..Default::default()
        };
        Predictor::train(&cfg, &ex).unwrap().0
    }

    #[test]
    fn onnx_runtime_matches_candle_on_random_inputs() {
        if !runtime() {
            return;
        }
        let p = trained();
        let d = tempfile::tempdir().unwrap();
        let o = OnnxPredictor::export_and_load(&p, &d.path().join(FILE_NAME)).unwrap();
        let diff = max_abs_diff(&p, &o, 512, 11).unwrap();
        eprintln!("candle vs ONNX Runtime, 512 random inputs: max |diff| = {diff:e}");
        assert!(diff < 1e-5, "max abs diff {diff}");
        // Outputs actually vary, so the comparison is not trivially met.
        let xs: Vec<Vec<f32>> = (0..8)
            .map(|i| (0..N_INPUT).map(|k| ((i * k) % 3) as f32 - 1.0).collect())
            .collect();
        let ys = o.predict(&xs).unwrap();
        assert!(ys.iter().any(|y| (y - ys[0]).abs() > 1e-3), "{ys:?}");
        assert!(o.predict(&[vec![0.0; N_INPUT - 1]]).is_err());
        assert!(o.predict(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_code_predictor_scores_code_and_is_not_taken_for_a_template_one() {
        if !runtime() {
            return;
        }
        let meta = vec![0.3; N_META];
        let good = "import pandas as pd\nfrom sklearn.linear_model import Ridge\nm = Ridge().fit(x, y)\npd.DataFrame(p).to_csv('submission.csv')\n";
        let bad = "import pandas as pd\nx = (\n";
        let inputs: Vec<Vec<f32>> = (0..24)
            .map(|i| code_input(&meta, if i % 2 == 0 { good } else { bad }))
            .collect();
        let targets: Vec<f64> = (0..24)
            .map(|i| if i % 2 == 0 { 0.8 } else { 0.1 })
            .collect();
        let cfg = PredictorConfig {
            epochs: 200,
            ..Default::default()
        };
        let (p, _) = Predictor::train_on(&cfg, InputKind::Code, &inputs, &targets).unwrap();
        assert_eq!(p.kind(), InputKind::Code);
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("code.onnx");
        let o = OnnxPredictor::export_and_load(&p, &path).unwrap();
        assert_eq!(o.kind(), InputKind::Code);
        let ys = o
            .predict(&[code_input(&meta, good), code_input(&meta, bad)])
            .unwrap();
        assert!(
            ys[0] > ys[1] + 0.3,
            "working code scored above broken code: {ys:?}"
        );
        assert!(max_abs_diff(&p, &o, 64, 1).unwrap() < 1e-5);
        // Each kind refuses the other's file and rows of the other width.
        let err = OnnxPredictor::load(&path).unwrap_err().to_string();
        assert!(err.contains("code.onnx"), "{err}");
        assert!(o.predict(&[vec![0.0; N_INPUT]]).is_err());
        let t = d.path().join("template.onnx");
        trained().export_onnx(&t).unwrap();
        assert!(OnnxPredictor::load_kind(&t, InputKind::Code).is_err());
        assert_eq!(inputs[0].len(), N_CODE_INPUT);
        // The JSON weights round-trip with their kind.
        let w = d.path().join("code.json");
        p.save(&w).unwrap();
        assert_eq!(Predictor::load(&w).unwrap().kind(), InputKind::Code);
    }

    #[test]
    fn truncated_or_missing_file_names_the_path() {
        if !runtime() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(FILE_NAME);
        trained().export_onnx(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() * 2 / 3]).unwrap();
        let e = OnnxPredictor::load(&path).unwrap_err();
        assert!(matches!(e, Error::Onnx(_)), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let missing = d.path().join("absent.onnx");
        let e = OnnxPredictor::load(&missing).unwrap_err();
        assert!(
            e.to_string().contains(&missing.display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_model_of_another_width_is_refused() {
        if !runtime() {
            return;
        }
        let mut g = trained().mlp_graph().unwrap();
        let l0 = &mut g.layers[0];
        l0.in_dim -= 1;
        l0.weight.truncate(l0.in_dim * l0.out_dim);
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("narrow.onnx");
        export_mlp_onnx(&g, &path).unwrap();
        let e = OnnxPredictor::load(&path).unwrap_err();
        assert!(e.to_string().contains("narrow.onnx"), "{e}");
    }
}
