//! The GRPO objective over log-probabilities a track has computed.

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::Result;

/// The objective's weights. METHOD.md's defaults: clip 0.2 both ways,
/// `kl_beta = 0.04`, no entropy bonus.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Objective {
    /// Ratios below `1 - clip_low` stop pushing.
    pub clip_low: f64,
    /// Ratios above `1 + clip_high` stop pushing (DAPO's clip-higher: 0.28).
    pub clip_high: f64,
    /// Weight of the KL to the reference; 0 leaves it out of the loss (it
    /// is still measured when a reference is given).
    pub kl_beta: f64,
    /// Weight of the entropy bonus; 0 leaves it out of the loss.
    pub entropy_coef: f64,
}

impl Default for Objective {
    fn default() -> Self {
        Self {
            clip_low: 0.2,
            clip_high: 0.2,
            kl_beta: 0.04,
            entropy_coef: 0.0,
        }
    }
}

/// The tensors of one objective evaluation, all of one shape (`[B]` or
/// `[B, T]`) apart from `advantages`, which broadcasts (`[B, 1]` for
/// per-rollout advantages over `[B, T]` tokens).
#[derive(Debug, Clone, Copy)]
pub struct ObjectiveInputs<'a> {
    /// Log-probabilities under the policy being trained (with gradient).
    pub logprobs: &'a Tensor,
    /// Log-probabilities at sampling time (frozen).
    pub old_logprobs: &'a Tensor,
    pub advantages: &'a Tensor,
    /// Frozen reference log-probabilities, for the KL term.
    pub reference: Option<&'a Tensor>,
    /// Entropy of the policy at each unit (with gradient).
    pub entropy: &'a Tensor,
    /// 1 for units that count, 0 for ignored ones; `None`: all count.
    pub mask: Option<&'a Tensor>,
}

/// Scalars describing one evaluation (means over the counted units).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GrpoStats {
    pub loss: f64,
    pub policy_loss: f64,
    /// k3 estimate of KL(policy || reference); 0 without a reference.
    pub kl_ref: f64,
    pub entropy: f64,
    /// Fraction of units whose clipped branch was active.
    pub clip_frac: f64,
    /// Mean of `old_logprob - logprob` (how far the policy moved this step).
    pub approx_kl_old: f64,
    pub ratio_mean: f64,
    /// Units counted (tokens or solutions).
    pub n_tokens: f64,
}

fn scalar(t: &Tensor) -> Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// The loss to minimise, `-surrogate + kl_beta * KL - entropy_coef * H`,
/// and its statistics.
pub fn objective(x: &ObjectiveInputs<'_>, w: &Objective) -> Result<(Tensor, GrpoStats)> {
    let lp = x.logprobs;
    let n_tok = match x.mask {
        Some(m) => scalar(&m.sum_all()?)?.max(1.0),
        None => (lp.elem_count() as f64).max(1.0),
    };
    let mean = |t: &Tensor| -> Result<Tensor> {
        Ok(match x.mask {
            Some(m) => ((t * m)?.sum_all()? / n_tok)?,
            None => (t.sum_all()? / n_tok)?,
        })
    };

    let log_ratio = (lp - x.old_logprobs)?;
    let ratio = log_ratio.exp()?;
    let adv = x.advantages.broadcast_as(ratio.shape())?;
    let s1 = (&ratio * &adv)?;
    let s2 = (ratio.clamp(1.0 - w.clip_low, 1.0 + w.clip_high)? * &adv)?;
    let surr = s1.minimum(&s2)?;
    let policy_loss = mean(&surr)?.neg()?;
    let mut loss = policy_loss.clone();

    let mut kl_v = 0.0;
    if let Some(r) = x.reference {
        let d = (r - lp)?;
        let k3 = ((d.exp()? - &d)? - 1.0)?;
        let kl = mean(&k3)?;
        kl_v = scalar(&kl)?;
        if w.kl_beta != 0.0 {
            loss = (loss + (kl * w.kl_beta)?)?;
        }
    }
    let ent = mean(x.entropy)?;
    let ent_v = scalar(&ent)?;
    if w.entropy_coef != 0.0 {
        loss = (loss - (ent * w.entropy_coef)?)?;
    }

    let clipped = s2
        .lt(&s1)?
        .to_dtype(x.mask.map_or(lp.dtype(), Tensor::dtype))?;
    let out = GrpoStats {
        loss: scalar(&loss)?,
        policy_loss: scalar(&policy_loss)?,
        kl_ref: kl_v,
        entropy: ent_v,
        clip_frac: scalar(&mean(&clipped)?)?,
        approx_kl_old: scalar(&mean(&log_ratio.neg()?)?)?,
        ratio_mean: scalar(&mean(&ratio)?)?,
        n_tokens: n_tok,
    };
    Ok((loss, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn t(v: &[f32]) -> Tensor {
        Tensor::new(v, &Device::Cpu).expect("ok")
    }

    #[test]
    fn the_surrogate_clips_and_the_mask_drops_units() {
        // Ratios e^0.5 (above 1 + 0.2) with a positive advantage: clipped;
        // e^-0.5 with a positive advantage: the unclipped branch is lower.
        let lp = t(&[0.5, -0.5, 3.0]);
        let old = t(&[0.0, 0.0, 0.0]);
        let adv = t(&[1.0, 1.0, 1.0]);
        let ent = t(&[1.0, 2.0, 9.0]);
        let mask = t(&[1.0, 1.0, 0.0]);
        let x = ObjectiveInputs {
            logprobs: &lp,
            old_logprobs: &old,
            advantages: &adv,
            reference: None,
            entropy: &ent,
            mask: Some(&mask),
        };
        let (loss, s) = objective(&x, &Objective::default()).expect("ok");
        let want = -(1.2 + (-0.5f64).exp()) / 2.0;
        assert!((scalar(&loss).expect("ok") - want).abs() < 1e-6, "{s:?}");
        assert_eq!(s.n_tokens, 2.0);
        assert!((s.clip_frac - 0.5).abs() < 1e-9);
        assert!((s.entropy - 1.5).abs() < 1e-9);
        // Without a mask the third unit counts.
        let (_, all) =
            objective(&ObjectiveInputs { mask: None, ..x }, &Objective::default()).expect("ok");
        assert_eq!(all.n_tokens, 3.0);
        assert!((all.entropy - 4.0).abs() < 1e-9);
    }

    #[test]
    fn clip_higher_bounds_are_asymmetric() {
        // DAPO's clip-higher: [1 - 0.2, 1 + 0.28]. A ratio of 1.25 with a
        // positive advantage still pushes (symmetric 0.2 would clip it),
        // 1.35 is clipped at 1.28; on the low side 0.75 with a negative
        // advantage is clipped at 0.8, and 0.85 is not.
        let ratios = [1.25f64, 1.35, 0.75, 0.85];
        let lp = t(&ratios.map(|r| r.ln() as f32));
        let old = t(&[0.0; 4]);
        let adv = t(&[1.0, 1.0, -1.0, -1.0]);
        let ent = t(&[0.0; 4]);
        let x = ObjectiveInputs {
            logprobs: &lp,
            old_logprobs: &old,
            advantages: &adv,
            reference: None,
            entropy: &ent,
            mask: None,
        };
        let per_unit = |w: &Objective| -> Vec<f64> {
            (0..4)
                .map(|i| {
                    let m: Vec<f32> = (0..4).map(|j| f32::from(i == j)).collect();
                    let m = t(&m);
                    let (l, _) = objective(
                        &ObjectiveInputs {
                            mask: Some(&m),
                            ..x
                        },
                        w,
                    )
                    .expect("ok");
                    -scalar(&l).expect("ok")
                })
                .collect()
        };
        let higher = Objective {
            clip_low: 0.2,
            clip_high: 0.28,
            ..Objective::default()
        };
        let got = per_unit(&higher);
        let want = [1.25, 1.28, -0.8, -0.85];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
        }
        let (_, s) = objective(&x, &higher).expect("ok");
        assert!((s.clip_frac - 0.5).abs() < 1e-9, "{s:?}");
        // Symmetric bounds clip the 1.25 too.
        let symmetric = Objective {
            clip_low: 0.2,
            clip_high: 0.2,
            ..Objective::default()
        };
        assert!((per_unit(&symmetric)[0] - 1.2).abs() < 1e-5);
        let (_, s) = objective(&x, &symmetric).expect("ok");
        assert!((s.clip_frac - 0.75).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn the_kl_term_is_zero_at_the_reference_and_pulls_back_towards_it() {
        let v = Var::new(&[0.3f32, -0.2], &Device::Cpu).expect("ok");
        let zero = t(&[0.0, 0.0]);
        let reference = t(&[0.0, 0.0]);
        let w = Objective {
            kl_beta: 1.0,
            ..Objective::default()
        };
        let x = ObjectiveInputs {
            logprobs: v.as_tensor(),
            old_logprobs: v.as_tensor(),
            advantages: &zero,
            reference: Some(&reference),
            entropy: &zero,
            mask: None,
        };
        let (loss, s) = objective(&x, &w).expect("ok");
        assert!(s.kl_ref > 0.0);
        let g = loss.backward().expect("ok");
        let g: Vec<f32> = g.get(v.as_tensor()).expect("ok").to_vec1().expect("ok");
        // Gradient descent moves each log-prob towards the reference's 0.
        assert!(g[0] > 0.0 && g[1] < 0.0, "{g:?}");
        let at_ref = ObjectiveInputs {
            logprobs: &reference,
            ..x
        };
        assert!(objective(&at_ref, &w).expect("ok").1.kl_ref.abs() < 1e-12);
    }
}
