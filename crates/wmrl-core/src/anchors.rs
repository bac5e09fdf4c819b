//! Which groups of a step get real outcomes (METHOD.md step 1).

use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::config::AnchorFraction;
use crate::config::{AnchorConfig, AnchorMode};
use crate::error::check_finite;
use crate::rng::SplitMix64;
use crate::{CoreError, Result};

/// Chooses anchor groups each step and keeps the realised fraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnchorScheduler {
    cfg: AnchorConfig,
    rng: SplitMix64,
    groups_seen: usize,
    anchors_chosen: usize,
    /// Keep the fraction over all steps, not per step ([`Self::over_stream`]).
    #[serde(default)]
    over_stream: bool,
}

impl AnchorScheduler {
    pub fn new(cfg: AnchorConfig, seed: u64) -> Result<Self> {
        Ok(Self {
            cfg,
            rng: SplitMix64::new(seed ^ 0xA2C4_0000_0000_0001),
            groups_seen: 0,
            anchors_chosen: 0,
            over_stream: false,
        })
    }

    /// Keep the fraction over the whole stream of steps instead of per step:
    /// a step wants as many anchors as bring the count chosen so far to
    /// `floor(fraction * groups seen)`, with no per-step minimum. For a
    /// caller whose steps are small slices of one stream (the AutoResearch
    /// reward service answers requests of one group), where the per-step
    /// rule would make every one-group step an anchor.
    pub fn over_stream(mut self) -> Self {
        self.over_stream = true;
        self
    }

    /// How many anchors a step of `n_groups` wants, before the capacity cap:
    /// `max(min_groups, round(fraction * n_groups))`, at most `n_groups`
    /// ([`Self::over_stream`]: what brings the stream to its fraction).
    pub fn wanted(&self, n_groups: usize) -> usize {
        if self.over_stream {
            let seen = (self.groups_seen + n_groups) as f64;
            // The epsilon keeps 10 x 0.1 from flooring to 0.999...
            let due = (self.cfg.fraction.get() * seen + 1e-9).floor() as usize;
            return due.saturating_sub(self.anchors_chosen).min(n_groups);
        }
        let by_fraction = (self.cfg.fraction.get() * n_groups as f64).round() as usize;
        by_fraction.max(self.cfg.min_groups).min(n_groups)
    }

    /// Choose the anchor groups of one step, sorted.
    ///
    /// `capacity` caps the count by free real-execution capacity (`None`:
    /// unlimited). `group_scores` (one world-model score per group, e.g. its
    /// mean) is needed by the stratified mode and ignored by the uniform one.
    pub fn choose(
        &mut self,
        n_groups: usize,
        capacity: Option<usize>,
        group_scores: Option<&[f64]>,
    ) -> Result<Vec<usize>> {
        let k = capacity.map_or(self.wanted(n_groups), |c| c.min(self.wanted(n_groups)));
        let chosen = match (self.cfg.mode, group_scores) {
            (AnchorMode::Uniform, _) => self.rng.sample_without_replacement(n_groups, k),
            (AnchorMode::Stratified, Some(scores)) => {
                if scores.len() != n_groups {
                    return Err(CoreError::Shape(format!(
                        "{} group scores for {n_groups} groups",
                        scores.len()
                    )));
                }
                check_finite("group_scores", scores)?;
                self.stratified(scores, k)
            }
            (AnchorMode::Stratified, None) => {
                return Err(CoreError::Shape(
                    "stratified anchors need one world-model score per group".into(),
                ));
            }
        };
        self.groups_seen += n_groups;
        self.anchors_chosen += chosen.len();
        Ok(chosen)
    }

    /// Sort groups by score, cut into `k` equal quantile strata, and draw one
    /// group uniformly from each, so low, middle and high scores all get real
    /// outcomes.
    fn stratified(&mut self, scores: &[f64], k: usize) -> Vec<usize> {
        let n = scores.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
        let mut out: Vec<usize> = (0..k)
            .map(|s| {
                let lo = s * n / k;
                let hi = ((s + 1) * n / k).max(lo + 1);
                order[lo + self.rng.below(hi - lo)]
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Anchor groups over all groups seen so far (0 before any step).
    pub fn realised_fraction(&self) -> f64 {
        if self.groups_seen == 0 {
            0.0
        } else {
            self.anchors_chosen as f64 / self.groups_seen as f64
        }
    }

    pub fn groups_seen(&self) -> usize {
        self.groups_seen
    }

    pub fn anchors_chosen(&self) -> usize {
        self.anchors_chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(fraction: f64, mode: AnchorMode) -> AnchorScheduler {
        AnchorScheduler::new(
            AnchorConfig {
                fraction: AnchorFraction::new(fraction).expect("valid fraction"),
                min_groups: 1,
                mode,
            },
            7,
        )
        .expect("valid")
    }

    #[test]
    fn count_follows_fraction_minimum_and_capacity() {
        let mut s = sched(0.1, AnchorMode::Uniform);
        assert_eq!(s.choose(8, None, None).expect("ok").len(), 1); // round(0.8)=1
        assert_eq!(s.choose(64, None, None).expect("ok").len(), 6);
        assert_eq!(s.choose(64, Some(2), None).expect("ok").len(), 2);
        assert_eq!(s.choose(3, None, None).expect("ok").len(), 1); // min_groups
        let f = s.realised_fraction();
        assert!((f - 10.0 / 139.0).abs() < 1e-12, "{f}");
    }

    #[test]
    fn over_stream_keeps_the_fraction_across_small_steps() {
        // One-group steps at 0.25: the per-step rule (min_groups 1) makes
        // every step an anchor; over the stream every fourth one is.
        let mut s = sched(0.25, AnchorMode::Uniform).over_stream();
        let counts: Vec<usize> = (0..12)
            .map(|_| s.choose(1, None, None).expect("ok").len())
            .collect();
        assert_eq!(counts, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1]);
        // Mixed step sizes and a capacity cap: the deficit is made up later.
        let mut s = sched(0.1, AnchorMode::Uniform).over_stream();
        assert_eq!(s.choose(3, None, None).expect("ok").len(), 0);
        assert_eq!(s.choose(20, Some(1), None).expect("ok").len(), 1); // due 2
        assert_eq!(s.choose(7, None, None).expect("ok").len(), 2); // due 3
        assert!((s.realised_fraction() - 0.1).abs() < 1e-12);
        // The stratified mode draws its anchors the same way.
        let mut s = sched(0.5, AnchorMode::Stratified).over_stream();
        assert!(s.choose(1, None, Some(&[0.3])).expect("ok").is_empty());
        assert_eq!(s.choose(1, None, Some(&[0.3])).expect("ok"), [0]);
    }

    #[test]
    fn seeded_choice_is_reproducible_and_distinct() {
        let a = sched(0.25, AnchorMode::Uniform).choose(40, None, None);
        let b = sched(0.25, AnchorMode::Uniform).choose(40, None, None);
        assert_eq!(a, b);
        let a = a.expect("ok");
        assert_eq!(a.len(), 10);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn stratified_covers_every_quantile() {
        let mut s = sched(0.25, AnchorMode::Stratified);
        let scores: Vec<f64> = (0..40).map(|i| ((i * 17) % 40) as f64).collect();
        for _ in 0..20 {
            let chosen = s.choose(40, None, Some(&scores)).expect("ok");
            let mut ranks: Vec<usize> = chosen.iter().map(|&g| scores[g] as usize).collect();
            ranks.sort_unstable();
            for (stratum, r) in ranks.iter().enumerate() {
                assert_eq!(r / 4, stratum, "one anchor per score quartile: {ranks:?}");
            }
        }
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        // A fraction outside (0, 1] cannot be made, parsed or deserialised.
        for f in [0.0, -0.1, 1.5, f64::NAN] {
            assert!(matches!(
                AnchorFraction::new(f),
                Err(CoreError::InvalidConfig {
                    key: "anchors.fraction",
                    ..
                })
            ));
            assert!(f.to_string().parse::<AnchorFraction>().is_err());
            if f.is_finite() {
                let err = serde_json::from_str::<AnchorConfig>(&format!(r#"{{"fraction": {f}}}"#))
                    .expect_err("out of range");
                assert!(err.to_string().contains("anchors.fraction"), "{err}");
            }
        }
        assert_eq!("0.25".parse::<AnchorFraction>().expect("valid").get(), 0.25);
        assert!(AnchorFraction::ALL.is_all());
        let mut s = sched(0.5, AnchorMode::Stratified);
        assert!(matches!(
            s.choose(2, None, Some(&[0.0, f64::NAN])),
            Err(CoreError::NonFinite { index: 1, .. })
        ));
        assert!(s.choose(2, None, None).is_err());
    }
}
