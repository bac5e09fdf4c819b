//! Beyond the paper: a world model that keeps up with the policy. Both
//! world models (the robot's progress model, AutoResearch's outcome
//! predictor) are fitted before the policy moves; as the policy moves, its
//! rollouts leave the data they were fitted on, and a monotone calibration
//! map cannot repair a world model that ranks a group's members wrongly,
//! which is all a group-relative advantage sees. With `wmrl.refit.every =
//! K`, every K steps the track fits a candidate world model on its data
//! plus the run's anchor rollouts, except the newest `holdout_groups`
//! anchor groups; the candidate replaces the incumbent only if it ranks
//! those held-out groups' members at least as well (within-group
//! concordance, [`crate::rank::within_group_concordance`]), and the
//! calibration then restarts on the new model's scores. The gate is what
//! keeps a refit from re-drawing the ranking among the solutions the policy
//! already prefers at random (issue 29: ungated AutoResearch refits
//! collapsed one seed of five to 0.388). Off (`every = 0`, the default) is
//! the paper's behaviour. [`crate::track::Run`] runs the schedule for both
//! tracks; a track supplies the fit ([`crate::track::Track::refit_candidate`]).

use serde::{Deserialize, Serialize};

use crate::rank::within_group_concordance;
use crate::{CoreError, Result};

/// `[wmrl.refit]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RefitConfig {
    /// Fit a candidate every this many steps (0: never, the paper).
    pub every: usize,
    /// The newest anchor groups held out of the candidate's data and used
    /// to judge it against the incumbent (out of sample for both when no
    /// larger than the anchor groups of `every` steps).
    pub holdout_groups: usize,
    /// Informative within-group pairs (different real outcomes) the
    /// held-out groups must hold for a verdict; with fewer the incumbent
    /// stays.
    pub min_pairs: usize,
    /// Accept a candidate only if its within-group concordance on the
    /// held-out groups is at least the incumbent's. Off accepts every
    /// candidate (the ungated refit, kept for comparison).
    pub gate: bool,
    /// On acceptance, restart the calibration from the held-out groups'
    /// pairs scored by the new model, rather than keep pairs scored by the
    /// old one.
    pub restart_calibration: bool,
}

impl Default for RefitConfig {
    fn default() -> Self {
        Self {
            every: 0,
            holdout_groups: 4,
            min_pairs: 6,
            gate: true,
            restart_calibration: true,
        }
    }
}

impl RefitConfig {
    pub fn validate(&self) -> Result<()> {
        if self.every > 0 && self.holdout_groups == 0 {
            return Err(CoreError::InvalidConfig {
                key: "refit.holdout_groups",
                value: "0".into(),
                reason: "a refit needs held-out anchor groups to judge it",
            });
        }
        Ok(())
    }

    /// Whether a refit is due after `done` steps.
    pub fn due(&self, done: usize) -> bool {
        self.every > 0 && done > 0 && done.is_multiple_of(self.every)
    }
}

/// One anchor group as the refit sees it: where it came from, the world
/// model's raw scores at the time, and the real outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnchorGroup {
    /// 0-based step and group index within the step.
    pub step: u64,
    pub group: usize,
    /// Raw scores of the model that was in use (the incumbent, for groups
    /// gathered since the last refit).
    pub wm: Vec<f64>,
    /// Real outcomes of the graded members (same order; ungraded members
    /// are left out of both).
    pub real: Vec<f64>,
}

impl AnchorGroup {
    /// (step, group): where the group came from, as both tracks key their
    /// kept rollouts.
    pub fn key(&self) -> (u64, usize) {
        (self.step, self.group)
    }

    /// The keys of `groups` (the held-out set a candidate is fitted without).
    pub fn keys(groups: &[AnchorGroup]) -> std::collections::BTreeSet<(u64, usize)> {
        groups.iter().map(AnchorGroup::key).collect()
    }
}

/// What a refit decided (one line of a run's refit record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefitDecision {
    /// Steps done when the refit ran.
    pub step: usize,
    pub accepted: bool,
    pub reason: String,
    /// Held-out anchor groups and their informative pairs.
    pub held_out_groups: usize,
    pub pairs: usize,
    /// Within-group concordance of the incumbent and the candidate on the
    /// held-out groups (with binary outcomes: AUROC within groups).
    pub incumbent: Option<f64>,
    pub candidate: Option<f64>,
    /// Pooled AUROC on the held-out groups before (incumbent) and after
    /// (the model in use from now on).
    pub auroc_before: Option<f64>,
    pub auroc_after: Option<f64>,
}

/// Judge a candidate on the held-out groups, given its raw scores of them
/// (same shapes as the groups' `wm`).
pub fn decide(
    cfg: &RefitConfig,
    step: usize,
    held_out: &[AnchorGroup],
    candidate: &[Vec<f64>],
) -> Result<RefitDecision> {
    if candidate.len() != held_out.len()
        || candidate
            .iter()
            .zip(held_out)
            .any(|(c, g)| c.len() != g.real.len())
    {
        return Err(CoreError::Shape(
            "candidate scores do not match the held-out anchor groups".into(),
        ));
    }
    let groups = |scores: &dyn Fn(usize) -> Vec<f64>| -> Vec<(Vec<f64>, Vec<f64>)> {
        held_out
            .iter()
            .enumerate()
            .map(|(i, g)| (scores(i), g.real.clone()))
            .collect()
    };
    let inc = groups(&|i| held_out[i].wm.clone());
    let cand = groups(&|i| candidate[i].clone());
    let (incumbent, pairs) = within_group_concordance(&inc);
    let (cand_c, _) = within_group_concordance(&cand);
    let pooled = |gs: &[(Vec<f64>, Vec<f64>)]| {
        let p: Vec<(f64, f64)> = gs
            .iter()
            .flat_map(|(s, r)| r.iter().copied().zip(s.iter().copied()))
            .collect();
        crate::rank::concordance(&p).0
    };
    let (accepted, reason) = if !cfg.gate {
        (true, "accepted: the gate is off".to_string())
    } else if pairs < cfg.min_pairs {
        (
            false,
            format!(
                "kept the incumbent: {pairs} informative pairs in the held-out groups, fewer than {}",
                cfg.min_pairs
            ),
        )
    } else {
        match (incumbent, cand_c) {
            (Some(a), Some(b)) if b >= a => (
                true,
                format!("accepted: ranks the held-out groups {b:.3} against {a:.3}"),
            ),
            (Some(a), Some(b)) => (
                false,
                format!("refused: ranks the held-out groups {b:.3} against the incumbent's {a:.3}"),
            ),
            _ => (false, "kept the incumbent: no informative pair".into()),
        }
    };
    let auroc_before = pooled(&inc);
    Ok(RefitDecision {
        step,
        accepted,
        reason,
        held_out_groups: held_out.len(),
        pairs,
        incumbent,
        candidate: cand_c,
        auroc_before,
        auroc_after: if accepted {
            pooled(&cand)
        } else {
            auroc_before
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(step: u64, wm: &[f64], real: &[f64]) -> AnchorGroup {
        AnchorGroup {
            step,
            group: 0,
            wm: wm.to_vec(),
            real: real.to_vec(),
        }
    }

    fn held() -> Vec<AnchorGroup> {
        // The incumbent ranks half of each group's pairs right.
        (0..3)
            .map(|s| group(s, &[0.2, 0.8, 0.3, 0.6], &[1.0, 1.0, 0.0, 0.0]))
            .collect()
    }

    #[test]
    fn a_candidate_that_ranks_better_is_accepted_and_a_worse_one_refused() {
        let cfg = RefitConfig {
            every: 4,
            ..RefitConfig::default()
        };
        let better = vec![vec![0.9, 0.8, 0.1, 0.2]; 3];
        let d = decide(&cfg, 4, &held(), &better).expect("shapes");
        assert!(d.accepted, "{d:?}");
        assert_eq!(d.pairs, 12);
        assert_eq!((d.incumbent, d.candidate), (Some(0.5), Some(1.0)));
        assert_eq!(d.auroc_after, Some(1.0));
        let reversed = vec![vec![0.1, 0.2, 0.9, 0.8]; 3];
        let d = decide(&cfg, 4, &held(), &reversed).expect("shapes");
        assert!(!d.accepted, "{d:?}");
        assert_eq!(d.candidate, Some(0.0));
        assert_eq!(d.auroc_after, d.auroc_before, "the incumbent stays in use");
        // Without the gate the reversed candidate goes in.
        let ungated = RefitConfig {
            gate: false,
            ..cfg.clone()
        };
        assert!(
            decide(&ungated, 4, &held(), &reversed)
                .expect("ok")
                .accepted
        );
    }

    #[test]
    fn too_few_informative_pairs_keep_the_incumbent() {
        let cfg = RefitConfig::default();
        // All-success groups carry no within-group pair.
        let flat = vec![group(0, &[0.1, 0.9], &[1.0, 1.0]); 4];
        let d = decide(&cfg, 4, &flat, &vec![vec![0.9, 0.1]; 4]).expect("shapes");
        assert!(!d.accepted);
        assert_eq!(d.pairs, 0);
        assert!(decide(&cfg, 4, &held(), &[vec![0.0; 3]]).is_err(), "shape");
    }

    #[test]
    fn schedule_and_validation() {
        let cfg = RefitConfig {
            every: 4,
            ..RefitConfig::default()
        };
        assert!(!cfg.due(0) && !cfg.due(3) && cfg.due(4) && cfg.due(8));
        assert!(!RefitConfig::default().due(4), "off by default");
        assert!(
            RefitConfig {
                every: 2,
                holdout_groups: 0,
                ..RefitConfig::default()
            }
            .validate()
            .is_err()
        );
    }
}
