//! Data for the outcome predictor: uniformly random solutions executed in
//! the sandbox, per competition of one split. The predictor trains on the
//! training split only; held-out examples serve to measure its rank
//! correlation with real outcomes.

use std::io::Write;
use std::path::Path;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::code_features::code_input;
use crate::competition::{Split, Suite};
use crate::error::{Error, Result, io_err};
use crate::execute::Executor;
use crate::nn::seeded;
use crate::onnx_predictor::OnnxPredictor;
use crate::predictor::{Example, InputKind, spearman};
use crate::solution::{N_SLOTS, SLOTS, Solution};
use crate::train::execute_all;

/// A uniformly random point of the solution space.
pub fn random_solution(rng: &mut impl Rng) -> Solution {
    let mut choice = [0usize; N_SLOTS];
    for (s, (_, opts)) in SLOTS.iter().enumerate() {
        choice[s] = rng.random_range(0..opts.len());
    }
    Solution { choice }
}

/// Execute `per_competition` random solutions on every competition of
/// `split`. Returns the examples (failed executions dropped).
pub fn collect(
    suite: &Suite,
    executor: &Executor,
    split: Split,
    per_competition: usize,
    seed: u64,
) -> Result<Vec<Example>> {
    let mut rng = seeded(seed);
    let mut jobs = Vec::new();
    for c in suite.indices(split) {
        for _ in 0..per_competition {
            jobs.push((c, random_solution(&mut rng)));
        }
    }
    let outs = execute_all(executor, suite, &jobs);
    Ok(jobs
        .iter()
        .zip(outs)
        .filter_map(|((c, s), o)| {
            let comp = &suite.competitions[*c];
            o.map(|o| Example {
                competition: comp.name().to_string(),
                meta: comp.meta.meta_features.clone(),
                solution: *s,
                reward: o.grade.reward,
                cpu_secs: o.cpu_secs,
            })
        })
        .collect())
}

pub fn write_examples(path: &Path, examples: &[Example]) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(io_err(path))?;
    for e in examples {
        let line = serde_json::to_string(e).map_err(|source| Error::Json {
            path: path.into(),
            source,
        })?;
        writeln!(f, "{line}").map_err(io_err(path))?;
    }
    Ok(())
}

pub fn read_examples(path: &Path) -> Result<Vec<Example>> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|source| Error::Json {
                path: path.into(),
                source,
            })
        })
        .collect()
}

/// How well the predictor ranks real outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictorEval {
    pub n: usize,
    /// Spearman over all examples pooled.
    pub spearman_pooled: Option<f64>,
    /// Mean of per-competition Spearman (within-competition ranking, what
    /// GRPO's per-group standardisation uses).
    pub spearman_within_mean: Option<f64>,
    pub mae: f64,
}

/// The predictor inputs of `examples` for a predictor reading `kind`: the
/// template one-hot, or the features of the code each solution renders to
/// on its competition (looked up in `suite`).
pub fn example_inputs(
    kind: InputKind,
    examples: &[Example],
    suite: &Suite,
) -> Result<Vec<Vec<f32>>> {
    examples
        .iter()
        .map(|e| match kind {
            InputKind::Template => Ok(e.input()),
            InputKind::Code => {
                let comp = suite.by_name(&e.competition).ok_or_else(|| {
                    Error::Config(format!(
                        "example of unknown competition `{}`",
                        e.competition
                    ))
                })?;
                Ok(code_input(&e.meta, &e.solution.render(&comp.meta)))
            }
        })
        .collect()
}

/// Scores come from the ONNX file through ONNX Runtime, as in training.
pub fn evaluate_predictor(p: &OnnxPredictor, examples: &[Example]) -> Result<PredictorEval> {
    let inputs: Vec<Vec<f32>> = examples.iter().map(Example::input).collect();
    evaluate_predictor_on(p, &inputs, examples)
}

/// [`evaluate_predictor`] on inputs already built (`inputs[i]` is
/// `examples[i]`'s, [`example_inputs`]).
pub fn evaluate_predictor_on(
    p: &OnnxPredictor,
    inputs: &[Vec<f32>],
    examples: &[Example],
) -> Result<PredictorEval> {
    let pred = p.predict(inputs)?;
    let real: Vec<f64> = examples.iter().map(|e| e.reward).collect();
    let mut names: Vec<&str> = examples.iter().map(|e| e.competition.as_str()).collect();
    names.sort();
    names.dedup();
    let within: Vec<f64> = names
        .iter()
        .filter_map(|n| {
            let idx: Vec<usize> = (0..examples.len())
                .filter(|&i| examples[i].competition == *n)
                .collect();
            let a: Vec<f64> = idx.iter().map(|&i| pred[i]).collect();
            let b: Vec<f64> = idx.iter().map(|&i| real[i]).collect();
            spearman(&a, &b)
        })
        .collect();
    let n = examples.len();
    Ok(PredictorEval {
        n,
        spearman_pooled: spearman(&pred, &real),
        spearman_within_mean: (!within.is_empty())
            .then(|| within.iter().sum::<f64>() / within.len() as f64),
        mae: pred
            .iter()
            .zip(&real)
            .map(|(a, b)| (a - b).abs())
            .sum::<f64>()
            / n.max(1) as f64,
    })
}
