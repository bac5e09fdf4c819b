//! One step of the method in the order METHOD.md fixes: score with the world
//! model, choose anchors, get their real outcomes, update the calibration
//! *before* measuring disagreement, update the anchor weight, calibrate the
//! rest, form advantages. A trainer supplies the two scorers and cannot get
//! the order wrong.

use serde::{Deserialize, Serialize};

use crate::advantage::group_advantages;
use crate::anchors::AnchorScheduler;
use crate::calibration::Calibrator;
use crate::config::{AnchorReward, Arm, CoreConfig};
use crate::diagnostics::{Diagnostics, PairRecord, RolloutRecord, StepRecord};
use crate::error::check_finite;
use crate::rng::SplitMix64;
use crate::weight::{AnchorWeight, group_disagreement, variance};
use crate::{CoreError, Result};

/// The scorer error type: whatever the caller's simulator, sandbox or model
/// raises.
pub type ScorerError = Box<dyn std::error::Error + Send + Sync>;

/// The two ways of scoring the rollouts of a step's groups.
pub trait Scorers {
    /// Raw world-model scores of every rollout of each named group, one
    /// batched pass. Called once per step, before anchors are chosen.
    fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError>;
    /// Real outcomes of every rollout of each named group (`None`: the
    /// rollout could not be graded). Called only for anchor groups.
    fn real(&mut self, groups: &[usize]) -> Result<Vec<Vec<Option<f64>>>, ScorerError>;
}

/// What one step produced, for the policy update and the metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepOutcome {
    pub step: u64,
    pub anchors: Vec<usize>,
    /// The reward each rollout was graded with (`None`: ungraded).
    pub rewards: Vec<Vec<Option<f64>>>,
    /// Advantages for the policy update (`None`: excluded).
    pub advantages: Vec<Vec<Option<f64>>>,
    /// Raw world-model scores, where the arm reads the world model.
    pub wm_raw: Option<Vec<Vec<f64>>>,
    /// Real outcomes of anchor groups (same order as `anchors`).
    pub real: Vec<Vec<Option<f64>>>,
    pub stats: StepStats,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    pub anchor_groups: usize,
    /// Real labels handed to the learner this step.
    pub labels_used: usize,
    /// Rollouts scored by the world model this step.
    pub wm_rollouts: usize,
    pub calibrated: bool,
    pub refit: bool,
    pub weight: f64,
    /// Mean normalised disagreement of anchor groups, as the arm sees them
    /// (after calibration where the arm calibrates).
    pub disagreement: Option<f64>,
    /// The same with the raw world-model scores.
    pub disagreement_raw: Option<f64>,
    /// `1 - mean|f(wm) - real| / mean|wm - real|` over this step's pairs.
    pub bias_reduction: Option<f64>,
    /// Anchor groups that took their ranking from the world model because
    /// their real outcomes were all equal.
    pub fallback_groups: usize,
    /// Groups with fewer than `min_graded` graded rollouts.
    pub groups_skipped: usize,
    pub adv_abs_mean: f64,
    pub adv_abs_max: f64,
}

impl StepOutcome {
    /// The groups that carry no policy-gradient signal
    /// ([`is_flat_group`]).
    pub fn flat_groups(&self) -> Vec<usize> {
        self.advantages
            .iter()
            .enumerate()
            .filter(|(_, g)| is_flat_group(g))
            .map(|(i, _)| i)
            .collect()
    }

    /// Put the groups of `more` (scored on their own, `slots.len()` of
    /// them, in order) in place of this step's groups `slots`: their
    /// rewards, advantages and world-model scores, their anchors (those of
    /// the replaced groups dropped), and the counts of what was spent on
    /// them added to [`StepStats`] (labels, world-model rollouts, anchor
    /// groups, fallbacks, skipped groups); the advantage summaries are
    /// those of the result.
    pub fn replace_groups(&mut self, slots: &[usize], more: StepOutcome) -> Result<()> {
        if more.advantages.len() != slots.len() || more.rewards.len() != slots.len() {
            return Err(CoreError::Shape(format!(
                "replacing {} groups with {} scored ones",
                slots.len(),
                more.advantages.len()
            )));
        }
        if let Some(&s) = slots.iter().find(|&&s| s >= self.advantages.len()) {
            return Err(CoreError::Shape(format!(
                "group {s} is not in a step of {} groups",
                self.advantages.len()
            )));
        }
        for (k, &s) in slots.iter().enumerate() {
            self.rewards[s] = more.rewards[k].clone();
            self.advantages[s] = more.advantages[k].clone();
            if let (Some(w), Some(mw)) = (self.wm_raw.as_mut(), more.wm_raw.as_ref()) {
                w[s] = mw[k].clone();
            }
        }
        let mut anchors: Vec<(usize, Vec<Option<f64>>)> = self
            .anchors
            .iter()
            .copied()
            .zip(std::mem::take(&mut self.real))
            .filter(|(a, _)| !slots.contains(a))
            .chain(more.anchors.iter().map(|&a| slots[a]).zip(more.real))
            .collect();
        anchors.sort_by_key(|(a, _)| *a);
        (self.anchors, self.real) = anchors.into_iter().unzip();
        let (st, m) = (&mut self.stats, &more.stats);
        st.labels_used += m.labels_used;
        st.wm_rollouts += m.wm_rollouts;
        st.anchor_groups += m.anchor_groups;
        st.fallback_groups += m.fallback_groups;
        st.groups_skipped += m.groups_skipped;
        (st.adv_abs_mean, st.adv_abs_max) = abs_advantage_summary(&self.advantages);
        Ok(())
    }
}

/// The method's state across a run (serialisable for checkpoints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrectionLoop {
    cfg: CoreConfig,
    arm: Arm,
    scheduler: AnchorScheduler,
    calibrator: Calibrator,
    weight: AnchorWeight,
    diagnostics: Diagnostics,
    step: u64,
    /// Seed of the within-group permutations of the shuffled control arm.
    #[serde(default)]
    shuffle_seed: u64,
    /// Every step is in the scarce-label regime, even one whose groups are
    /// all anchors ([`CorrectionLoop::in_scarce_regime`]).
    #[serde(default)]
    scarce_regime: bool,
    /// Anchor groups gathered since the last world-model refit (kept only
    /// with `refit.every > 0`; [`crate::refit`]).
    #[serde(default)]
    refit_anchors: Vec<crate::refit::AnchorGroup>,
}

/// A group that carries no policy-gradient signal: at least one rollout
/// graded and every graded advantage zero (up to rounding: equal rewards
/// give advantages of about 1e-17). A group with no graded rollout is not
/// flat: nothing was learnt about it.
pub fn is_flat_group(advantages: &[Option<f64>]) -> bool {
    advantages.iter().any(Option::is_some) && advantages.iter().flatten().all(|a| a.abs() < 1e-9)
}

/// (mean, max) of |advantage| over every graded rollout; (0, 0) when none.
fn abs_advantage_summary(advantages: &[Vec<Option<f64>>]) -> (f64, f64) {
    let abs: Vec<f64> = advantages
        .iter()
        .flatten()
        .flatten()
        .map(|a| a.abs())
        .collect();
    (
        mean(&abs).unwrap_or(0.0),
        abs.iter().copied().fold(0.0, f64::max),
    )
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

impl CorrectionLoop {
    pub fn new(cfg: CoreConfig, arm: Arm, seed: u64) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            scheduler: AnchorScheduler::new(cfg.anchors.clone(), seed)?,
            calibrator: Calibrator::new(cfg.calibration.clone())?,
            weight: AnchorWeight::new(cfg.weight.clone())?,
            diagnostics: Diagnostics::default(),
            cfg,
            arm,
            step: 0,
            shuffle_seed: seed ^ 0x54AF_F1E5,
            scarce_regime: false,
            refit_anchors: Vec::new(),
        })
    }

    /// Treat every step as the scarce-label regime. By default a step whose
    /// groups are all anchors is the free-label regime (the anchor weight
    /// off, anchors rewarded by `anchor_reward`); a caller whose steps are
    /// small slices of a scarce stream (the AutoResearch reward service
    /// answers one request of one group at a time) sets this so that an
    /// executed slice keeps its real outcomes and its weight.
    pub fn in_scarce_regime(mut self) -> Self {
        self.scarce_regime = true;
        self
    }

    /// Keep the anchor fraction over the whole stream of steps rather than
    /// per step ([`AnchorScheduler::over_stream`]): for a caller whose steps
    /// are small slices of one stream.
    pub fn with_anchors_over_stream(mut self) -> Self {
        self.scheduler = self.scheduler.over_stream();
        self
    }

    /// Hand over what was recorded so far, leaving the record empty (a
    /// long-lived caller keeps its state small).
    pub fn take_diagnostics(&mut self) -> Diagnostics {
        std::mem::take(&mut self.diagnostics)
    }

    pub fn arm(&self) -> Arm {
        self.arm
    }
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }
    pub fn calibrator(&self) -> &Calibrator {
        &self.calibrator
    }
    pub fn anchor_weight(&self) -> &AnchorWeight {
        &self.weight
    }
    pub fn scheduler(&self) -> &AnchorScheduler {
        &self.scheduler
    }
    pub fn diagnostics(&self) -> &Diagnostics {
        &self.diagnostics
    }
    pub fn steps_done(&self) -> u64 {
        self.step
    }

    /// The newest `refit.holdout_groups` anchor groups gathered since the
    /// last refit, oldest first: what a world-model refit is judged on.
    pub fn refit_holdout(&self) -> &[crate::refit::AnchorGroup] {
        let k = self.cfg.refit.holdout_groups.min(self.refit_anchors.len());
        &self.refit_anchors[self.refit_anchors.len() - k..]
    }

    /// Anchor groups whose real outcomes arrived after their step (labels
    /// from people when the trainer does not wait for them): each group's
    /// raw world-model scores and real outcomes go into the calibration
    /// and, measured on the calibrated residual, into the anchor weight,
    /// as a group graded in its own step would; its rewards and advantages
    /// are long used. Returns the labels taken.
    pub fn late_labels(&mut self, groups: &[crate::refit::AnchorGroup]) -> Result<usize> {
        // Checked whole before any is taken.
        for crate::refit::AnchorGroup {
            wm: xs, real: ys, ..
        } in groups
        {
            if xs.len() != ys.len() {
                return Err(CoreError::Shape(format!(
                    "late labels: {} world-model scores for {} real outcomes",
                    xs.len(),
                    ys.len()
                )));
            }
            check_finite("late world_model", xs)?;
            check_finite("late real", ys)?;
        }
        let mut used = 0;
        for crate::refit::AnchorGroup {
            wm: xs, real: ys, ..
        } in groups
        {
            used += xs.len();
            if !self.arm.uses_world_model() || xs.is_empty() {
                continue;
            }
            if self.arm.calibrates() {
                self.calibrator.push(xs, ys)?;
            }
            if xs.len() >= 2 && self.arm.weights() {
                let d = if self.arm.calibrates() {
                    self.calibrator.apply(xs)?
                } else {
                    xs.clone()
                };
                if let Some(s2) = group_disagreement(&d, ys, self.cfg.weight.min_var)? {
                    self.weight.observe(s2)?;
                }
            }
        }
        Ok(used)
    }

    /// After a refit: forget the gathered groups and, if the candidate was
    /// accepted (and `refit.restart_calibration`), restart the calibration
    /// from the held-out groups' real outcomes paired with the new model's
    /// scores of them (`candidate`, as given to [`crate::refit::decide`]).
    pub fn refitted(
        &mut self,
        decision: &crate::refit::RefitDecision,
        candidate: &[Vec<f64>],
    ) -> Result<()> {
        if decision.accepted && self.cfg.refit.restart_calibration {
            let held = self.refit_holdout();
            let wm: Vec<f64> = candidate.iter().flatten().copied().collect();
            let real: Vec<f64> = held.iter().flat_map(|g| g.real.clone()).collect();
            self.calibrator.restart(&wm, &real)?;
        }
        self.refit_anchors.clear();
        Ok(())
    }

    /// Run one step over `group_sizes.len()` groups. `capacity` caps anchor
    /// groups by free real-execution capacity.
    pub fn step(
        &mut self,
        group_sizes: &[usize],
        capacity: Option<usize>,
        scorers: &mut dyn Scorers,
    ) -> Result<StepOutcome> {
        let n = group_sizes.len();
        let arm = self.arm;

        // World-model scores (raw) for every group: one batched pass.
        let wm_raw = self.world_model_scores(group_sizes, scorers)?;

        // 1. Choose anchors.
        let anchors: Vec<usize> = if arm.all_real() {
            (0..n).collect()
        } else if !arm.uses_real() {
            Vec::new()
        } else {
            let means: Option<Vec<f64>> = wm_raw
                .as_ref()
                .map(|s| s.iter().map(|g| mean(g).unwrap_or(0.0)).collect());
            self.scheduler.choose(n, capacity, means.as_deref())?
        };
        self.run_step(group_sizes, wm_raw, anchors, scorers)
    }

    /// [`CorrectionLoop::step`] over groups drawn again within the step
    /// just run (dynamic sampling: they replace that step's flat groups):
    /// the same step index, so the step count, the shuffle of the shuffled
    /// control and the diagnostics' step stay those of the one training
    /// step. Anchor pairs and labels are gathered and counted as in any
    /// step.
    pub fn step_again(
        &mut self,
        group_sizes: &[usize],
        capacity: Option<usize>,
        scorers: &mut dyn Scorers,
    ) -> Result<StepOutcome> {
        let Some(index) = self.step.checked_sub(1) else {
            return Err(CoreError::Shape("no step to draw groups again in".into()));
        };
        self.step = index;
        let out = self.step(group_sizes, capacity, scorers);
        self.step = index + 1;
        out
    }

    /// One step with anchors chosen by the caller (ascending group
    /// indices, each at most once), e.g. to replay a recorded stream; the
    /// arm must read real outcomes for any anchor to be given. Anchor pairs
    /// are pushed and measured group by group in the order given.
    pub fn step_with_anchors(
        &mut self,
        group_sizes: &[usize],
        anchors: &[usize],
        scorers: &mut dyn Scorers,
    ) -> Result<StepOutcome> {
        let n = group_sizes.len();
        if anchors.windows(2).any(|w| w[0] >= w[1]) || anchors.iter().any(|&g| g >= n) {
            return Err(CoreError::Shape(format!(
                "anchors {anchors:?} must be ascending, distinct group indices below {n}"
            )));
        }
        if !anchors.is_empty() && !self.arm.uses_real() {
            return Err(CoreError::Shape(format!(
                "arm {} reads no real outcomes: no anchors allowed",
                self.arm.name()
            )));
        }
        let wm_raw = self.world_model_scores(group_sizes, scorers)?;
        self.run_step(group_sizes, wm_raw, anchors.to_vec(), scorers)
    }

    /// Check the group sizes, then the raw world-model scores of every
    /// group (arms that read the world model).
    fn world_model_scores(
        &self,
        group_sizes: &[usize],
        scorers: &mut dyn Scorers,
    ) -> Result<Option<Vec<Vec<f64>>>> {
        if let Some(g) = group_sizes.iter().position(|&s| s == 0) {
            return Err(CoreError::EmptyGroup { group: g });
        }
        if !self.arm.uses_world_model() {
            return Ok(None);
        }
        let all: Vec<usize> = (0..group_sizes.len()).collect();
        let s = scorers
            .world_model(&all)
            .map_err(|e| CoreError::Scorer(e.to_string()))?;
        check_shape("world model", &s, group_sizes)?;
        for g in &s {
            check_finite("world_model", g)?;
        }
        Ok(Some(s))
    }

    fn run_step(
        &mut self,
        group_sizes: &[usize],
        wm_raw: Option<Vec<Vec<f64>>>,
        anchors: Vec<usize>,
        scorers: &mut dyn Scorers,
    ) -> Result<StepOutcome> {
        let n = group_sizes.len();
        let arm = self.arm;
        // 2. Real outcomes for the anchors.
        let real = real_outcomes(group_sizes, &anchors, scorers)?;
        let labels_used = real.iter().flatten().filter(|r| r.is_some()).count();

        // Anchor pairs (world model, real) of graded anchor rollouts.
        let pairs: Vec<(f64, f64)> = match &wm_raw {
            Some(wm) => anchors
                .iter()
                .zip(&real)
                .flat_map(|(&g, r)| wm[g].iter().zip(r).filter_map(|(&x, y)| y.map(|y| (x, y))))
                .collect(),
            None => Vec::new(),
        };

        // 3-4. Calibration, disagreement and the weight's observations.
        let (dis, dis_raw, refit) = match &wm_raw {
            Some(wm) => self.observe_anchors(wm, &anchors, &real)?,
            None => (Vec::new(), Vec::new(), false),
        };
        // The weight fuses two streams; with every group an anchor there is
        // one stream and the weight is off (METHOD.md, free labels).
        let all_anchors = anchors.len() == n && !self.scarce_regime;
        let weight = if arm.weights() && !all_anchors {
            self.weight.weight()
        } else {
            1.0
        };
        let bias_reduction = self.bias_reduction(&pairs)?;

        // 5-6. Rewards and advantages, group by group.
        let mut real_of = vec![None; n];
        for (&g, r) in anchors.iter().zip(&real) {
            real_of[g] = Some(r);
        }
        let groups = self.group_rewards(
            group_sizes,
            wm_raw.as_deref(),
            &real_of,
            weight,
            all_anchors,
        )?;

        let (adv_abs_mean, adv_abs_max) = abs_advantage_summary(&groups.advantages);
        let stats = StepStats {
            anchor_groups: anchors.len(),
            labels_used,
            wm_rollouts: wm_raw.as_ref().map_or(0, |s| s.iter().map(Vec::len).sum()),
            calibrated: arm.calibrates() && self.calibrator.is_fitted(),
            refit,
            weight,
            disagreement: mean(&dis),
            disagreement_raw: mean(&dis_raw),
            bias_reduction,
            fallback_groups: groups.fallback_groups,
            groups_skipped: groups.groups_skipped,
            adv_abs_mean,
            adv_abs_max,
        };
        let step = self.step;
        self.record_diagnostics(&pairs, wm_raw.as_deref(), &anchors, &stats);
        self.step += 1;

        Ok(StepOutcome {
            step,
            anchors,
            rewards: groups.rewards,
            advantages: groups.advantages,
            wm_raw,
            real,
            stats,
        })
    }

    /// The arm's calibration of raw scores (identity when it does not
    /// calibrate).
    fn calibrated(&self, xs: &[f64]) -> Result<Vec<f64>> {
        if self.arm.calibrates() {
            self.calibrator.apply(xs)
        } else {
            Ok(xs.to_vec())
        }
    }

    /// Group by group, as the reference: push the group's pairs into the
    /// calibration (and the refit's store) first, then measure its
    /// disagreement on the calibrated residual and update the weight.
    /// Returns the calibrated and raw disagreements and whether the map was
    /// refitted.
    fn observe_anchors(
        &mut self,
        wm: &[Vec<f64>],
        anchors: &[usize],
        real: &[Vec<Option<f64>>],
    ) -> Result<(Vec<f64>, Vec<f64>, bool)> {
        let arm = self.arm;
        let (mut dis, mut dis_raw) = (Vec::new(), Vec::new());
        let mut refit = false;
        for (&g, r) in anchors.iter().zip(real) {
            let (xs, ys): (Vec<f64>, Vec<f64>) = wm[g]
                .iter()
                .zip(r)
                .filter_map(|(&x, y)| y.map(|y| (x, y)))
                .unzip();
            if self.cfg.refit.every > 0 && !xs.is_empty() {
                self.refit_anchors.push(crate::refit::AnchorGroup {
                    step: self.step,
                    group: g,
                    wm: xs.clone(),
                    real: ys.clone(),
                });
            }
            if arm.calibrates() && !xs.is_empty() {
                refit |= self.calibrator.push(&xs, &ys)?;
            }
            if xs.len() < 2 {
                continue;
            }
            let d = self.calibrated(&xs)?;
            let min_var = self.cfg.weight.min_var;
            if let Some(s2) = group_disagreement(&d, &ys, min_var)? {
                dis.push(s2);
                if arm.weights() {
                    self.weight.observe(s2)?;
                }
            }
            if let Some(s2) = group_disagreement(&xs, &ys, min_var)? {
                dis_raw.push(s2);
            }
        }
        Ok((dis, dis_raw, refit))
    }

    /// How much the fitted map shrinks the anchors' absolute error (1 - after
    /// / before); `None` when the arm does not calibrate or nothing is fitted.
    fn bias_reduction(&self, pairs: &[(f64, f64)]) -> Result<Option<f64>> {
        if !(self.arm.calibrates() && self.calibrator.is_fitted() && !pairs.is_empty()) {
            return Ok(None);
        }
        let (xs, ys): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        let f = self.calibrator.apply(&xs)?;
        let before: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - y).abs()).sum();
        let after: f64 = f.iter().zip(&ys).map(|(x, y)| (x - y).abs()).sum();
        Ok((before > 0.0).then(|| 1.0 - after / before))
    }

    /// Every group's rewards and advantages: real outcomes (at the anchor
    /// weight) for anchors, calibrated scores for the rest; in the free
    /// regime of a calibrating arm the anchor reward mode combines them.
    fn group_rewards(
        &self,
        group_sizes: &[usize],
        wm_raw: Option<&[Vec<f64>]>,
        real_of: &[Option<&Vec<Option<f64>>>],
        weight: f64,
        all_anchors: bool,
    ) -> Result<GroupRewards> {
        let arm = self.arm;
        let n = group_sizes.len();
        let mut out = GroupRewards {
            rewards: Vec::with_capacity(n),
            advantages: Vec::with_capacity(n),
            fallback_groups: 0,
            groups_skipped: 0,
        };
        // Free labels (every group an anchor) in an arm that calibrates: the
        // anchor reward mode decides how success and f(dense) combine.
        let free_reward = (arm.calibrates() && all_anchors && wm_raw.is_some())
            .then_some(self.cfg.anchor_reward)
            .filter(|m| *m != AnchorReward::Sparse);
        let mut shuffle = SplitMix64::new(self.shuffle_seed ^ self.step.wrapping_mul(0x9E37_79B9));
        for g in 0..n {
            let dense = match wm_raw {
                Some(wm) => Some(self.calibrated(&wm[g])?),
                None => None,
            };
            let (r, w): (Vec<Option<f64>>, f64) = match (real_of[g], dense) {
                (Some(real), Some(d)) if free_reward.is_some() => {
                    let w_mix = self.cfg.mix_weight;
                    let r = real
                        .iter()
                        .zip(d)
                        .map(|(y, d)| match free_reward {
                            Some(AnchorReward::Mix) => y.map(|y| (w_mix * y + d) / (1.0 + w_mix)),
                            _ => Some(d),
                        })
                        .collect();
                    (r, 1.0)
                }
                (Some(real), dense) => {
                    let graded: Vec<f64> = real.iter().flatten().copied().collect();
                    let flat = graded.len() >= 2 && variance(&graded) < self.cfg.weight.min_var;
                    match dense {
                        Some(d) if flat && self.cfg.dense_fallback_on_flat_anchors => {
                            out.fallback_groups += 1;
                            (d.into_iter().map(Some).collect(), 1.0)
                        }
                        _ => (real.clone(), weight),
                    }
                }
                (None, Some(d)) => (d.into_iter().map(Some).collect(), 1.0),
                (None, None) => (vec![None; group_sizes[g]], 1.0),
            };
            let mut a = group_advantages(&r, w, &self.cfg.advantage)?;
            if arm.shuffles() {
                permute_graded(&mut a, &mut shuffle);
            }
            if a.iter().all(Option::is_none) {
                out.groups_skipped += 1;
            }
            out.rewards.push(r);
            out.advantages.push(a);
        }
        Ok(out)
    }

    /// The step's pairs, every scored rollout (anchor or not) and the
    /// step's weight, for the run's diagnostics.
    fn record_diagnostics(
        &mut self,
        pairs: &[(f64, f64)],
        wm_raw: Option<&[Vec<f64>]>,
        anchors: &[usize],
        stats: &StepStats,
    ) {
        let step = self.step;
        self.diagnostics
            .pairs
            .extend(
                pairs
                    .iter()
                    .map(|&(wm, real)| PairRecord { step, wm, real }),
            );
        if let Some(wm) = wm_raw {
            for (g, scores) in wm.iter().enumerate() {
                let anchor = anchors.contains(&g);
                self.diagnostics
                    .rollouts
                    .extend(scores.iter().map(|&s| RolloutRecord {
                        step,
                        wm: s as f32,
                        anchor,
                    }));
            }
        }
        self.diagnostics.steps.push(StepRecord {
            step,
            disagreement: stats.disagreement,
            weight: stats.weight,
            at_max: self.arm.weights() && self.weight.at_max(),
        });
    }
}

/// Every group's rewards and advantages ([`CorrectionLoop::group_rewards`]).
struct GroupRewards {
    rewards: Vec<Vec<Option<f64>>>,
    advantages: Vec<Vec<Option<f64>>>,
    fallback_groups: usize,
    groups_skipped: usize,
}

/// The anchors' real outcomes, checked against the group sizes and for
/// finite values.
fn real_outcomes(
    group_sizes: &[usize],
    anchors: &[usize],
    scorers: &mut dyn Scorers,
) -> Result<Vec<Vec<Option<f64>>>> {
    if anchors.is_empty() {
        return Ok(Vec::new());
    }
    let r = scorers
        .real(anchors)
        .map_err(|e| CoreError::Scorer(e.to_string()))?;
    let sizes: Vec<usize> = anchors.iter().map(|&g| group_sizes[g]).collect();
    check_shape("real", &r, &sizes)?;
    for g in &r {
        let graded: Vec<f64> = g.iter().flatten().copied().collect();
        check_finite("real", &graded)?;
    }
    Ok(r)
}

/// Permute the graded entries of a group's advantages among themselves
/// (Fisher-Yates), leaving ungraded ones in place.
fn permute_graded(a: &mut [Option<f64>], rng: &mut SplitMix64) {
    let idx: Vec<usize> = (0..a.len()).filter(|&i| a[i].is_some()).collect();
    for k in (1..idx.len()).rev() {
        let j = rng.below(k + 1);
        a.swap(idx[k], idx[j]);
    }
}

fn check_shape<T>(what: &str, got: &[Vec<T>], sizes: &[usize]) -> Result<()> {
    if got.len() != sizes.len() {
        return Err(CoreError::Shape(format!(
            "{what} scorer returned {} groups, expected {}",
            got.len(),
            sizes.len()
        )));
    }
    for (i, (g, &s)) in got.iter().zip(sizes).enumerate() {
        if g.len() != s {
            return Err(CoreError::Shape(format!(
                "{what} scorer returned {} rollouts for group {i}, expected {s}",
                g.len()
            )));
        }
    }
    Ok(())
}
