//! Every parameter of the method, with the published defaults of
//! "Scaling Automatic Research Agents via World Models" (arXiv 2608.12564),
//! as restated in shared/METHOD.md. Nothing in the algorithm is a literal.

use serde::{Deserialize, Serialize};

use crate::{CoreError, Result};

/// The share of a step's groups that get real outcomes: a number in (0, 1],
/// checked wherever one is made (parsing a config, [`AnchorFraction::new`],
/// a command-line value), so code that holds one never checks it again.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct AnchorFraction(f64);

impl AnchorFraction {
    /// Every group is an anchor (the free-label regime).
    pub const ALL: Self = Self(1.0);

    pub fn new(f: f64) -> Result<Self> {
        if f > 0.0 && f <= 1.0 {
            Ok(Self(f))
        } else {
            Err(invalid("anchors.fraction", f, "must be in (0, 1]"))
        }
    }

    pub fn get(self) -> f64 {
        self.0
    }

    /// Whether every group is an anchor.
    pub fn is_all(self) -> bool {
        self.0 >= 1.0
    }
}

impl<'de> Deserialize<'de> for AnchorFraction {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let f = f64::deserialize(d)?;
        Self::new(f).map_err(|_| {
            serde::de::Error::custom(format!("anchors.fraction must be in (0, 1], got {f}"))
        })
    }
}

impl std::str::FromStr for AnchorFraction {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self> {
        let f: f64 = s
            .trim()
            .parse()
            .map_err(|_| invalid("anchors.fraction", s, "must be a number in (0, 1]"))?;
        Self::new(f)
    }
}

impl std::fmt::Display for AnchorFraction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How anchor groups are picked among a step's groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AnchorMode {
    /// Uniform choice without replacement (the paper).
    #[default]
    Uniform,
    /// Beyond the paper: spread anchors across quantiles of the groups' mean
    /// world-model score so every score level keeps anchor coverage.
    Stratified,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnchorConfig {
    /// Fraction of groups that get real outcomes. Paper: 0.10.
    pub fraction: AnchorFraction,
    /// Minimum anchor groups per step. Paper: `max(min, round(f * n))`; 1 here.
    pub min_groups: usize,
    pub mode: AnchorMode,
}

impl Default for AnchorConfig {
    fn default() -> Self {
        Self {
            fraction: AnchorFraction(0.10),
            min_groups: 1,
            mode: AnchorMode::Uniform,
        }
    }
}

/// Which isotonic fit the calibrator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CalibrationMode {
    /// The paper's fit: equal-width bins, PAV on bin means weighted by counts.
    #[default]
    Binned,
    /// Exact weighted PAV over all pairs (scikit-learn's IsotonicRegression).
    Exact,
}

/// The score range the binned fit's equal-width bins cover.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScoreRange {
    /// A fixed `[lo, hi]` (the reference: `[0, 1]`). Scores outside fall into
    /// the end bins; the map is flat beyond its end knots (the end bins'
    /// mean scores).
    Fixed([f64; 2]),
    /// `"observed"`: the buffer's own minimum and maximum at each fit.
    Auto(AutoRange),
}

/// The non-fixed [`ScoreRange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoRange {
    Observed,
}

impl ScoreRange {
    /// The reference's range: `[0, 1]`.
    pub const UNIT: Self = Self::Fixed([0.0, 1.0]);
}

impl Default for ScoreRange {
    fn default() -> Self {
        Self::UNIT
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CalibrationConfig {
    pub mode: CalibrationMode,
    /// Equal-width bins over the score range. Paper: 10.
    pub bins: usize,
    /// Pairs needed before the first fit (it fires on exactly the
    /// `min_pairs`-th pair); identity before. Paper: 200.
    pub min_pairs: usize,
    /// Refit on every `refit_every`-th new pair after a fit, counted pair
    /// by pair across pushes. Paper: 64.
    pub refit_every: usize,
    /// FIFO buffer capacity. Paper: 5000.
    pub cap: usize,
    /// Score range of the bins: `[lo, hi]` (default `[0, 1]`, the
    /// reference's), e.g. `[-1, 1]` for potential scores, or `"observed"`
    /// for the buffer's own range at each fit.
    pub range: ScoreRange,
}

impl Default for CalibrationConfig {
    fn default() -> Self {
        Self {
            mode: CalibrationMode::Binned,
            bins: 10,
            min_pairs: 200,
            refit_every: 64,
            cap: 5000,
            range: ScoreRange::UNIT,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WeightConfig {
    /// EMA half-life in anchor groups. Paper: 64.
    pub half_life_groups: f64,
    /// Groups observed before the scale constant is frozen. Paper: 32.
    pub warmup_groups: usize,
    /// Weight at the warm-up disagreement level. Paper: 2.
    pub target_weight: f64,
    /// Upper clip of the weight. Paper: 4.
    pub w_max: f64,
    /// Groups whose real-score variance is below this carry no ranking
    /// information and are skipped. Paper: 1e-9.
    pub min_var: f64,
}

impl Default for WeightConfig {
    fn default() -> Self {
        Self {
            half_life_groups: 64.0,
            warmup_groups: 32,
            target_weight: 2.0,
            w_max: 4.0,
            min_var: 1e-9,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdvantageConfig {
    /// Divide by the group's standard deviation (GRPO). `false` is Dr. GRPO.
    pub scale_by_std: bool,
    /// Added to the standard deviation. Paper: 1e-4.
    pub eps: f64,
    /// Groups with fewer graded rollouts are skipped. Paper: 2.
    pub min_graded: usize,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            scale_by_std: true,
            eps: 1e-4,
            min_graded: 2,
        }
    }
}

/// The reward arms every benchmark compares (shared/METHOD.md, robot track).
/// AutoResearch's `real`, `wm` and `wmrl` are `Sparse`, `DenseRaw`, `Wmrl`:
/// that track runs these three only and keeps its own names for them on the
/// command line and in its files (`wmrl_autoresearch::arm`: `AR_ARMS`,
/// `ar_name`, `parse_ar_arm`, `serde_ar_arm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// Every rollout labelled with its real outcome.
    Sparse,
    /// Only anchor groups labelled; the rest ungraded and excluded.
    SparseScarce,
    /// Raw world-model score for every rollout; no real labels.
    DenseRaw,
    /// Anchors real, the rest raw world model; no correction.
    Mix,
    /// Anchors real, the rest calibrated world model; weight 1.
    Debias,
    /// Anchors real and weighted, the rest raw world model.
    Denoise,
    /// Both corrections.
    Wmrl,
    /// Control: `sparse` with the advantages shuffled within each group, so
    /// the update has GRPO's magnitudes and no information. What noise alone
    /// does to success; a gain must beat it.
    SparseShuffled,
}

impl std::str::FromStr for Arm {
    type Err = String;
    /// [`Arm::from_name`], with an error that lists the arms.
    fn from_str(s: &str) -> Result<Self, String> {
        Arm::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = Arm::ALL.iter().map(|a| a.name()).collect();
            format!("unknown arm `{s}` (expected one of {})", names.join(", "))
        })
    }
}

impl Arm {
    pub const ALL: [Arm; 8] = [
        Arm::Sparse,
        Arm::SparseScarce,
        Arm::DenseRaw,
        Arm::Mix,
        Arm::Debias,
        Arm::Denoise,
        Arm::Wmrl,
        Arm::SparseShuffled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arm::Sparse => "sparse",
            Arm::SparseScarce => "sparse_scarce",
            Arm::DenseRaw => "dense_raw",
            Arm::Mix => "mix",
            Arm::Debias => "debias",
            Arm::Denoise => "denoise",
            Arm::Wmrl => "wmrl",
            Arm::SparseShuffled => "sparse_shuffled",
        }
    }

    /// Parse a name as written in configs and on the command line; the
    /// AutoResearch names `real` and `wm` are accepted too.
    pub fn from_name(s: &str) -> Option<Arm> {
        Some(match s {
            "sparse" | "real" => Arm::Sparse,
            "sparse_scarce" => Arm::SparseScarce,
            "dense_raw" | "wm" => Arm::DenseRaw,
            "mix" => Arm::Mix,
            "debias" => Arm::Debias,
            "denoise" => Arm::Denoise,
            "wmrl" => Arm::Wmrl,
            "sparse_shuffled" => Arm::SparseShuffled,
            _ => return None,
        })
    }

    /// Does the arm read the world model at all?
    pub fn uses_world_model(self) -> bool {
        !matches!(self, Arm::Sparse | Arm::SparseScarce | Arm::SparseShuffled)
    }
    /// Does the arm ask for any real label?
    pub fn uses_real(self) -> bool {
        !matches!(self, Arm::DenseRaw)
    }
    /// Are all groups anchors regardless of the anchor fraction?
    pub fn all_real(self) -> bool {
        matches!(self, Arm::Sparse | Arm::SparseShuffled)
    }
    /// Are advantages permuted within each group (the noise control)?
    pub fn shuffles(self) -> bool {
        matches!(self, Arm::SparseShuffled)
    }
    pub fn calibrates(self) -> bool {
        matches!(self, Arm::Debias | Arm::Wmrl)
    }
    pub fn weights(self) -> bool {
        matches!(self, Arm::Denoise | Arm::Wmrl)
    }
}

/// What an anchor rollout is rewarded with in the free-label regime (every
/// group an anchor) by an arm that calibrates (METHOD.md, "free labels"; the
/// reference implementation's embodied trainer). In the scarce regime anchor
/// groups always train on the real outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AnchorReward {
    /// `f(dense)`: the calibrated world-model score; the success enters only
    /// through the map `f` (the reference's default).
    #[default]
    Calib,
    /// `(w_mix * success + f(dense)) / (1 + w_mix)`.
    Mix,
    /// The 0/1 outcome only (the arm then equals `sparse`).
    Sparse,
}

/// Everything wmrl-core needs for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoreConfig {
    pub anchors: AnchorConfig,
    pub calibration: CalibrationConfig,
    pub weight: WeightConfig,
    pub advantage: AdvantageConfig,
    /// Beyond the paper: an anchor group whose real outcomes are all equal
    /// (no ranking information, e.g. 8 failures) takes its ranking from the
    /// (calibrated) world-model stream instead of being skipped, in arms that
    /// read the world model. This is what lets the dense signal help in the
    /// free-label regime, where every group is an anchor, with
    /// `anchor_reward = "sparse"` (`calib` and `mix` rank every free-label
    /// group by f(dense) already). Off reproduces the paper exactly.
    pub dense_fallback_on_flat_anchors: bool,
    /// Free-label regime only: what anchor rollouts of a calibrating arm are
    /// rewarded with. Reference default: `calib`.
    pub anchor_reward: AnchorReward,
    /// `w_mix` of `anchor_reward = "mix"`. Reference: 2.
    pub mix_weight: f64,
    /// Beyond the paper: refit the world model on the run's anchors
    /// (`[wmrl.refit]`, off by default; [`crate::refit`]).
    pub refit: crate::refit::RefitConfig,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            anchors: AnchorConfig::default(),
            calibration: CalibrationConfig::default(),
            weight: WeightConfig::default(),
            advantage: AdvantageConfig::default(),
            dense_fallback_on_flat_anchors: false,
            anchor_reward: AnchorReward::Calib,
            mix_weight: 2.0,
            refit: crate::refit::RefitConfig::default(),
        }
    }
}

fn invalid(key: &'static str, value: impl ToString, reason: &'static str) -> CoreError {
    CoreError::InvalidConfig {
        key,
        value: value.to_string(),
        reason,
    }
}

impl CoreConfig {
    /// Reject values the method cannot run with, naming the key.
    pub fn validate(&self) -> Result<()> {
        self.refit.validate()?;
        let c = &self.calibration;
        if c.bins < 2 {
            return Err(invalid("calibration.bins", c.bins, "must be at least 2"));
        }
        if c.refit_every == 0 {
            return Err(invalid("calibration.refit_every", 0, "must be positive"));
        }
        if c.cap < c.min_pairs.max(2) {
            return Err(invalid(
                "calibration.cap",
                c.cap,
                "must be at least min_pairs (and 2)",
            ));
        }
        if let ScoreRange::Fixed([lo, hi]) = c.range
            && !(lo.is_finite() && hi.is_finite() && lo < hi)
        {
            return Err(invalid(
                "calibration.range",
                format!("[{lo}, {hi}]"),
                "must be finite with lo < hi",
            ));
        }
        let w = &self.weight;
        if !(w.w_max.is_finite() && w.w_max >= 1.0) {
            return Err(invalid("weight.w_max", w.w_max, "must be >= 1"));
        }
        if !(w.target_weight >= 1.0 && w.target_weight <= w.w_max) {
            return Err(invalid(
                "weight.target_weight",
                w.target_weight,
                "must be in [1, w_max]",
            ));
        }
        if !(w.half_life_groups.is_finite() && w.half_life_groups > 0.0) {
            return Err(invalid(
                "weight.half_life_groups",
                w.half_life_groups,
                "must be positive",
            ));
        }
        if !(w.min_var.is_finite() && w.min_var >= 0.0) {
            return Err(invalid("weight.min_var", w.min_var, "must be >= 0"));
        }
        let v = &self.advantage;
        if !(v.eps.is_finite() && v.eps >= 0.0) {
            return Err(invalid("advantage.eps", v.eps, "must be >= 0"));
        }
        if !(self.mix_weight.is_finite() && self.mix_weight >= 0.0) {
            return Err(invalid("mix_weight", self.mix_weight, "must be >= 0"));
        }
        if v.min_graded < 1 {
            return Err(invalid("advantage.min_graded", 0, "must be at least 1"));
        }
        Ok(())
    }
}
