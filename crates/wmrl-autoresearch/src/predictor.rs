//! The world model of the AutoResearch track: an outcome predictor that maps
//! (competition meta-features, solution choice) to the reward ladder's value
//! without running the code. A candle MLP (meta ++ one-hot -> hidden ->
//! hidden -> sigmoid), trained by mean squared error on executed solutions of
//! TRAINING competitions only. Its weights are saved as JSON; for scoring it
//! is exported to ONNX and run through ONNX Runtime
//! ([`crate::onnx_predictor`]). [`Predictor::predict`] is the candle
//! reference the export is checked against, not the scoring path.

use std::path::Path;

use candle_core::{Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use serde::{Deserialize, Serialize};

use crate::code_features::N_CODE_INPUT;
use crate::competition::N_META;
use crate::error::{Error, Result, io_err};
use crate::nn::{Dense, matrix, seeded};
use crate::solution::{N_OPTIONS, Solution};

/// Input width: meta-features then the solution one-hot.
pub const N_INPUT: usize = N_META + N_OPTIONS;

/// What a predictor reads after the meta-features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputKind {
    /// The agent's template choice as a one-hot ([`input`], [`N_INPUT`]).
    Template,
    /// Static features of arbitrary code
    /// ([`crate::code_features::code_input`], [`N_CODE_INPUT`]).
    Code,
}

impl InputKind {
    pub fn width(self) -> usize {
        match self {
            Self::Template => N_INPUT,
            Self::Code => N_CODE_INPUT,
        }
    }

    fn of_width(w: usize) -> Option<Self> {
        [Self::Template, Self::Code]
            .into_iter()
            .find(|k| k.width() == w)
    }
}

/// One executed example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    pub competition: String,
    pub meta: Vec<f32>,
    pub solution: Solution,
    pub reward: f64,
    pub cpu_secs: f64,
}

impl Example {
    pub fn input(&self) -> Vec<f32> {
        input(&self.meta, &self.solution)
    }
}

pub fn input(meta: &[f32], s: &Solution) -> Vec<f32> {
    let mut v = meta.to_vec();
    v.extend(s.one_hot());
    v
}

/// What a fitted predictor cost before any run used it: the CPU of its
/// training data's executions and of its fit. Written beside the weights
/// ([`PredictorCost::path_beside`]); a run that reads the predictor is
/// charged its share ([`crate::TrainConfig::predictor_charge_cpu_secs`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictorCost {
    /// Training rows the predictor was fitted on.
    pub rows: usize,
    /// CPU seconds of collecting them: the sandbox's CPU of every execution
    /// (`Example::cpu_secs`), plus the collecting process's own where it
    /// was measured (the bench measures it; `collect` files do not hold it).
    pub data_cpu_secs: f64,
    /// Process CPU seconds of the fit and the ONNX export.
    pub fit_cpu_secs: f64,
}

impl PredictorCost {
    /// Data and fit together.
    pub fn total(&self) -> f64 {
        self.data_cpu_secs + self.fit_cpu_secs
    }

    /// The cost file beside a predictor file (`predictor.onnx` or its
    /// weights): `predictor.cost.json`.
    pub fn path_beside(predictor: &Path) -> std::path::PathBuf {
        predictor.with_extension("cost.json")
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        crate::rundir::write_json(path, self)
    }

    /// Read a cost file, refusing one whose figures are not finite and
    /// non-negative.
    pub fn load(path: &Path) -> Result<Self> {
        let c: Self = crate::rundir::read_json(path)?;
        for (name, v) in [
            ("data_cpu_secs", c.data_cpu_secs),
            ("fit_cpu_secs", c.fit_cpu_secs),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::Config(format!(
                    "{}: {name} = {v}, expected a finite number >= 0",
                    path.display()
                )));
            }
        }
        Ok(c)
    }
}

/// Training settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PredictorConfig {
    pub hidden: usize,
    pub lr: f64,
    pub epochs: usize,
    pub weight_decay: f64,
    pub seed: u64,
    /// A world-model refit during training (`wmrl.refit`, beyond the
    /// paper) continues from the weights in use ([`Predictor::fine_tuned`])
    /// for this many full-batch epochs...
    pub refit_epochs: usize,
    /// ... at this learning rate (fresh AdamW moments).
    pub refit_lr: f64,
}

impl Default for PredictorConfig {
    fn default() -> Self {
        Self {
            hidden: 64,
            lr: 0.01,
            epochs: 600,
            weight_decay: 1e-3,
            seed: 0,
            refit_epochs: 150,
            refit_lr: 0.003,
        }
    }
}

/// A predictor's weights as plain numbers: the JSON weight file's content,
/// and what a training checkpoint keeps of a refitted predictor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictorWeights {
    shapes: Vec<Vec<usize>>,
    values: Vec<Vec<f32>>,
}

/// The predictor network.
#[derive(Debug, Clone)]
pub struct Predictor {
    layers: [Dense; 3],
    kind: InputKind,
    dev: Device,
}

impl Predictor {
    /// A template predictor ([`InputKind::Template`]).
    pub fn new(hidden: usize, seed: u64) -> Result<Self> {
        Self::new_for(InputKind::Template, hidden, seed)
    }

    pub fn new_for(kind: InputKind, hidden: usize, seed: u64) -> Result<Self> {
        let dev = Device::Cpu;
        let mut rng = seeded(seed);
        Ok(Self {
            kind,
            layers: [
                Dense::new(kind.width(), hidden, 1.0, &mut rng, &dev)?,
                Dense::new(hidden, hidden, 1.0, &mut rng, &dev)?,
                Dense::new(hidden, 1, 1.0, &mut rng, &dev)?,
            ],
            dev,
        })
    }

    pub(crate) fn layers(&self) -> &[Dense; 3] {
        &self.layers
    }

    pub fn kind(&self) -> InputKind {
        self.kind
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.layers[0].forward(x)?.relu()?;
        let h = self.layers[1].forward(&h)?.relu()?;
        Ok(candle_nn::ops::sigmoid(&self.layers[2].forward(&h)?)?.squeeze(1)?)
    }

    /// Fit on `examples`; returns the final training MSE.
    pub fn train(cfg: &PredictorConfig, examples: &[Example]) -> Result<(Self, f64)> {
        let inputs: Vec<Vec<f32>> = examples.iter().map(Example::input).collect();
        let targets: Vec<f64> = examples.iter().map(|e| e.reward).collect();
        Self::train_on(cfg, InputKind::Template, &inputs, &targets)
    }

    /// Fit on (input row, ladder value) pairs of `kind`'s width; returns
    /// the final training MSE.
    pub fn train_on(
        cfg: &PredictorConfig,
        kind: InputKind,
        inputs: &[Vec<f32>],
        targets: &[f64],
    ) -> Result<(Self, f64)> {
        check_rows(kind, inputs, targets)?;
        let p = Self::new_for(kind, cfg.hidden, cfg.seed)?;
        let mse = p.fit(inputs, targets, cfg.epochs, cfg.lr, cfg.weight_decay)?;
        Ok((p, mse))
    }

    /// A copy of this predictor trained further on `examples` for
    /// `cfg.refit_epochs` epochs at `cfg.refit_lr` (a warm start: the
    /// copy begins where this one is, so where the new rows say nothing
    /// it keeps this one's ranking); `self` is left as it was. Returns the
    /// copy and its final training MSE.
    pub fn fine_tuned(&self, cfg: &PredictorConfig, examples: &[Example]) -> Result<(Self, f64)> {
        if self.kind != InputKind::Template {
            return Err(Error::Config(
                "only a template predictor is fine-tuned on examples".into(),
            ));
        }
        let inputs: Vec<Vec<f32>> = examples.iter().map(Example::input).collect();
        let targets: Vec<f64> = examples.iter().map(|e| e.reward).collect();
        check_rows(self.kind, &inputs, &targets)?;
        // Through plain numbers: a clone of a `Var` shares its storage, and
        // training it would move `self` too.
        let p = Self::from_weights(&self.weights()?)?;
        let mse = p.fit(
            &inputs,
            &targets,
            cfg.refit_epochs,
            cfg.refit_lr,
            cfg.weight_decay,
        )?;
        Ok((p, mse))
    }

    /// Full-batch AdamW on mean squared error; the final training MSE.
    fn fit(
        &self,
        inputs: &[Vec<f32>],
        targets: &[f64],
        epochs: usize,
        lr: f64,
        weight_decay: f64,
    ) -> Result<f64> {
        let x = matrix(inputs, &self.dev)?;
        let y = Tensor::from_vec(
            targets.iter().map(|&t| t as f32).collect::<Vec<_>>(),
            targets.len(),
            &self.dev,
        )?;
        let vars: Vec<Var> = self.layers.iter().flat_map(Dense::vars).collect();
        let mut opt = AdamW::new(
            vars,
            ParamsAdamW {
                lr,
                weight_decay,
                ..Default::default()
            },
        )?;
        let mut mse = f64::NAN;
        for _ in 0..epochs {
            let loss = (self.forward(&x)? - &y)?.sqr()?.mean_all()?;
            opt.backward_step(&loss)?;
            mse = loss.to_scalar::<f32>()? as f64;
        }
        Ok(mse)
    }

    /// Predicted ladder values for a batch of inputs (one candle forward
    /// pass): the reference for the ONNX export's parity check. Scoring
    /// during training and benchmarks goes through
    /// [`OnnxPredictor`](crate::onnx_predictor::OnnxPredictor).
    pub fn predict(&self, inputs: &[Vec<f32>]) -> Result<Vec<f64>> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let x = matrix(inputs, &self.dev)?;
        Ok(self
            .forward(&x)?
            .to_vec1::<f32>()?
            .into_iter()
            .map(f64::from)
            .collect())
    }

    /// The weights as plain numbers.
    pub fn weights(&self) -> Result<PredictorWeights> {
        let mut w = PredictorWeights {
            shapes: Vec::new(),
            values: Vec::new(),
        };
        for v in self.layers.iter().flat_map(Dense::vars) {
            w.shapes.push(v.as_tensor().dims().to_vec());
            w.values.push(v.as_tensor().flatten_all()?.to_vec1()?);
        }
        Ok(w)
    }

    /// A predictor with these weights (its input kind read off the first
    /// layer's width).
    pub fn from_weights(w: &PredictorWeights) -> Result<Self> {
        let kind = w
            .shapes
            .first()
            .and_then(|s| s.first())
            .and_then(|&d| InputKind::of_width(d));
        let Some(kind) = kind.filter(|_| w.shapes.len() == 6 && w.values.len() == 6) else {
            return Err(Error::Config(format!(
                "not a predictor for {N_INPUT} (template) or {N_CODE_INPUT} (code) inputs"
            )));
        };
        let dev = Device::Cpu;
        let t = |i: usize| -> Result<Var> {
            Ok(Var::from_tensor(&Tensor::from_vec(
                w.values[i].clone(),
                w.shapes[i].as_slice(),
                &dev,
            )?)?)
        };
        Ok(Self {
            kind,
            layers: [
                Dense { w: t(0)?, b: t(1)? },
                Dense { w: t(2)?, b: t(3)? },
                Dense { w: t(4)?, b: t(5)? },
            ],
            dev,
        })
    }

    /// The weights as JSON, written atomically ([`wmrl_run::atomic_write`]).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string(&self.weights()?).map_err(|source| Error::Json {
            path: path.into(),
            source,
        })?;
        Ok(wmrl_run::atomic_write(path, text.as_bytes())?)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        let w: PredictorWeights = serde_json::from_str(&text).map_err(|source| Error::Json {
            path: path.into(),
            source,
        })?;
        match Self::from_weights(&w) {
            Err(Error::Config(m)) => Err(Error::Config(format!("{}: {m}", path.display()))),
            r => r,
        }
    }
}

/// Inputs and targets a fit can use: as many of each, at least one, every
/// row of `kind`'s width.
fn check_rows(kind: InputKind, inputs: &[Vec<f32>], targets: &[f64]) -> Result<()> {
    if inputs.is_empty() || inputs.len() != targets.len() {
        return Err(Error::Config(format!(
            "the predictor needs examples ({} inputs, {} targets)",
            inputs.len(),
            targets.len()
        )));
    }
    if let Some(bad) = inputs.iter().find(|r| r.len() != kind.width()) {
        return Err(Error::Config(format!(
            "predictor input of width {}, expected {}",
            bad.len(),
            kind.width()
        )));
    }
    Ok(())
}

fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && xs[idx[j + 1]] == xs[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman rank correlation (average ranks for ties); `None` when either
/// side is constant or the lengths differ.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_handles_ties_and_order() {
        assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
        assert!(spearman(&[1.0, 1.0], &[1.0, 2.0]).is_none());
        let r = spearman(&[1.0, 2.0, 2.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!(r > 0.9 && r < 1.0);
    }

    #[test]
    fn predictor_learns_a_rule_and_round_trips() {
        // Reward high when the model slot is "forest" (one-hot index 8+4).
        let ex: Vec<Example> = (0..64)
            .map(|i| {
                let s = Solution::new([i % 4, (i / 4) % 4, i % 7, i % 3, 0, 0]).unwrap();
                Example {
                    competition: "t".into(),
                    meta: vec![0.3; N_META],
                    solution: s,
                    reward: if i % 7 == 4 { 0.9 } else { 0.3 },
                    cpu_secs: 1.0,
                }
            })
            .collect();
        let (p, mse) = Predictor::train(
            &PredictorConfig {
                epochs: 300,
                ..Default::default()
            },
            &ex,
        )
        .unwrap();
        assert!(mse < 0.01, "mse {mse}");
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("p.json");
        p.save(&path).unwrap();
        let q = Predictor::load(&path).unwrap();
        let xs: Vec<Vec<f32>> = ex.iter().map(Example::input).collect();
        assert_eq!(p.predict(&xs).unwrap(), q.predict(&xs).unwrap());
        // A warm start moves a copy only: taught the opposite rule, the
        // copy changes its ranking while the original keeps its scores.
        let flipped: Vec<Example> = ex
            .iter()
            .map(|e| Example {
                reward: 1.2 - e.reward,
                ..e.clone()
            })
            .collect();
        let before = p.predict(&xs).unwrap();
        let cfg = PredictorConfig {
            refit_epochs: 200,
            refit_lr: 0.01,
            ..Default::default()
        };
        let (warm, _) = p.fine_tuned(&cfg, &flipped).unwrap();
        assert_eq!(p.predict(&xs).unwrap(), before, "the original moved");
        let after = warm.predict(&xs).unwrap();
        assert!(spearman(&before, &after).unwrap() < 0.0);
        assert!(warm.fine_tuned(&cfg, &[]).is_err());
    }
}
