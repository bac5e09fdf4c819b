//! The reward service for LLM trainers (`wmrl autoresearch serve-rewards`,
//! protocol in docs/autoresearch.md): a trainer (TRL's GRPO trainer, verl)
//! sends groups of candidate solutions, code as text, for one competition
//! and gets one reward per candidate through wmrl-core's correction loop:
//! anchor groups are executed in the sandbox and graded, the others scored
//! by the code world model ([`crate::code_features`] into an ONNX
//! predictor) and calibrated against the anchors, anchor advantages
//! weighted by the inverse-variance weight.
//!
//! The reward returned is the candidate's advantage (group-centred, and for
//! anchor groups multiplied by the anchor weight), so a trainer that
//! centres rewards per group changes nothing and one that also divides by
//! the group's spread loses only the weight. The loop's state (scheduler
//! credit, calibrator, weight, ledger) is saved after every request and
//! reloaded on start, so a restarted service continues where it stopped.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use wmrl_core::rng::SplitMix64;
use wmrl_core::{CoreConfig, CorrectionLoop, Ledger, ScorerError, Scorers};

use crate::Suite;
use crate::code_features::code_input;
use crate::competition::Competition;
use crate::error::{Error, Result, io_err};
use crate::execute::Executor;
use crate::onnx_predictor::OnnxPredictor;
use crate::train::{ArArm, charge_real, charge_world_model, execute_codes};

/// Version of the request and reply shapes; a request of another version
/// is refused.
pub const PROTOCOL: u32 = 1;
/// Most candidates one request may carry.
pub const MAX_CANDIDATES: usize = 1024;

/// One request: groups of candidates for one competition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardRequest {
    pub protocol: u32,
    /// A competition of the suite, by name.
    pub competition: String,
    /// Candidate solutions (Python source) grouped as GRPO groups: the
    /// completions of one prompt. Each group needs at least two.
    pub groups: Vec<Vec<String>>,
}

/// The reply, in the request's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardReply {
    pub protocol: u32,
    /// What to train on, one per candidate: its advantage (0 for a
    /// candidate the loop left out, e.g. an ungradable one).
    pub rewards: Vec<Vec<f64>>,
    /// The score each candidate was graded with before centring: the real
    /// reward-ladder value in anchor groups, the (calibrated) world-model
    /// score in the others; `None` where ungraded.
    pub scores: Vec<Vec<Option<f64>>>,
    /// Indices of the groups executed in the sandbox.
    pub anchors: Vec<usize>,
    /// Whether the calibration map was fitted when the groups were scored.
    pub calibrated: bool,
    /// The anchor weight applied to the anchor groups.
    pub weight: f64,
    /// Real outcomes used by this request and since the service's state
    /// began.
    pub labels_used: usize,
    pub labels_total: u64,
    /// Sandbox CPU-seconds this request spent, and in all.
    pub sandbox_cpu_secs: f64,
    pub sandbox_cpu_secs_total: f64,
    /// Requests answered so far, this one included.
    pub requests: u64,
}

/// The service's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardConfig {
    pub arm: ArArm,
    /// Fraction of groups executed (`wmrl`); `real` executes all, `wm` none.
    pub anchor_fraction: f64,
    pub seed: u64,
    pub core: CoreConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    config: RewardConfig,
    core: CorrectionLoop,
    ledger: Ledger,
    /// Groups answered and groups executed: a request executes as many
    /// groups as bring the executed count to `floor(anchor_fraction x
    /// groups seen)`, so the realised fraction tracks the setting over
    /// requests of any size.
    groups_seen: u64,
    groups_executed: u64,
    requests: u64,
}

/// The service: suite, sandbox, code world model and the correction loop.
pub struct RewardService {
    suite: Suite,
    executor: Executor,
    predictor: Option<OnnxPredictor>,
    state: State,
    state_path: Option<PathBuf>,
}

impl RewardService {
    /// A service over `suite`. `predictor` (a code predictor,
    /// [`crate::predictor::InputKind::Code`]) is required by `wm` and
    /// `wmrl`. With `state_path`, the loop's state is loaded from it when it
    /// exists (its settings must equal `cfg`) and written after every
    /// request.
    pub fn new(
        suite: Suite,
        executor: Executor,
        predictor: Option<OnnxPredictor>,
        cfg: RewardConfig,
        state_path: Option<&Path>,
    ) -> Result<Self> {
        if !(0.0..=1.0).contains(&cfg.anchor_fraction) {
            return Err(Error::Config(format!(
                "anchor fraction {} is not in [0, 1]",
                cfg.anchor_fraction
            )));
        }
        if cfg.arm != ArArm::Real && predictor.is_none() {
            return Err(Error::Config(format!(
                "arm `{}` scores with the world model: give a code predictor",
                cfg.arm.name()
            )));
        }
        let loaded = match state_path {
            Some(p) if p.exists() => {
                let text = std::fs::read_to_string(p).map_err(io_err(p))?;
                let s: State = serde_json::from_str(&text).map_err(|source| Error::Json {
                    path: p.into(),
                    source,
                })?;
                if s.config != cfg {
                    return Err(Error::Config(format!(
                        "{}: saved by a service with other settings ({:?}); pass another state file or the same settings",
                        p.display(),
                        s.config
                    )));
                }
                Some(s)
            }
            _ => None,
        };
        let state = match loaded {
            Some(s) => s,
            None => {
                let core = CorrectionLoop::new(cfg.core.clone(), cfg.arm.core(), cfg.seed)
                    .map_err(|e| Error::Config(e.to_string()))?;
                // A request is a slice of one scarce stream: one whose groups
                // are all executed keeps its real grades and the weight
                // (free labels only when everything is executed).
                let core = if cfg.anchor_fraction < 1.0 {
                    core.in_scarce_regime()
                } else {
                    core
                };
                State {
                    core,
                    config: cfg,
                    ledger: Ledger::default(),
                    groups_seen: 0,
                    groups_executed: 0,
                    requests: 0,
                }
            }
        };
        Ok(Self {
            suite,
            executor,
            predictor,
            state,
            state_path: state_path.map(Path::to_path_buf),
        })
    }

    pub fn requests(&self) -> u64 {
        self.state.requests
    }

    pub fn ledger(&self) -> &Ledger {
        &self.state.ledger
    }

    /// Answer one request. A malformed request is an [`Error::Config`]
    /// that names what is wrong; any failure (a refused request, the loop,
    /// or saving the state) leaves the state as it was, so a retry counts
    /// nothing twice.
    pub fn score(&mut self, req: &RewardRequest) -> Result<RewardReply> {
        if req.protocol != PROTOCOL {
            return Err(Error::Config(format!(
                "protocol {} requested; this service speaks protocol {PROTOCOL}",
                req.protocol
            )));
        }
        let comp = self
            .suite
            .by_name(&req.competition)
            .ok_or_else(|| Error::Config(format!("no competition `{}`", req.competition)))?;
        if req.groups.is_empty() {
            return Err(Error::Config("no groups".into()));
        }
        if let Some(g) = req.groups.iter().position(|g| g.len() < 2) {
            return Err(Error::Config(format!(
                "group {g} has {} candidates; GRPO needs at least two",
                req.groups[g].len()
            )));
        }
        let total: usize = req.groups.iter().map(Vec::len).sum();
        if total > MAX_CANDIDATES {
            return Err(Error::Config(format!(
                "{total} candidates; at most {MAX_CANDIDATES} per request"
            )));
        }
        let n = req.groups.len();
        // Work on a copy; it replaces the state only once saved.
        let mut st = self.state.clone();
        let anchors: Vec<usize> = match st.config.arm {
            ArArm::Real => (0..n).collect(),
            ArArm::Wm => Vec::new(),
            ArArm::Wmrl => {
                let seen = st.groups_seen + n as u64;
                // The epsilon keeps 10 x 0.1 from flooring to 0.999...
                let due = (st.config.anchor_fraction * seen as f64 + 1e-9).floor() as u64;
                let k = (due.saturating_sub(st.groups_executed) as usize).min(n);
                let mut rng = SplitMix64::new(
                    st.config.seed ^ st.requests.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                let mut a = rng.sample_without_replacement(n, k);
                a.sort_unstable();
                a
            }
        };
        let cpu_before = st.ledger.real_cpu_seconds;
        let sizes: Vec<usize> = req.groups.iter().map(Vec::len).collect();
        let mut scorers = RequestScorers {
            comp,
            executor: &self.executor,
            predictor: self.predictor.as_ref(),
            groups: &req.groups,
            ledger: &mut st.ledger,
        };
        let out = st.core.step_with_anchors(&sizes, &anchors, &mut scorers)?;
        // The per-pair and per-rollout records would grow the state file
        // with every request; the reply carries what a trainer needs.
        st.core.take_diagnostics();
        st.groups_seen += n as u64;
        st.groups_executed += anchors.len() as u64;
        st.ledger.labels += out.stats.labels_used as u64;
        st.requests += 1;
        let reply = RewardReply {
            protocol: PROTOCOL,
            rewards: out
                .advantages
                .iter()
                .map(|g| g.iter().map(|a| a.unwrap_or(0.0)).collect())
                .collect(),
            scores: out.rewards.clone(),
            anchors: out.anchors.clone(),
            calibrated: out.stats.calibrated,
            weight: out.stats.weight,
            labels_used: out.stats.labels_used,
            labels_total: st.ledger.labels,
            sandbox_cpu_secs: st.ledger.real_cpu_seconds - cpu_before,
            sandbox_cpu_secs_total: st.ledger.real_cpu_seconds,
            requests: st.requests,
        };
        self.save(&st)?;
        self.state = st;
        Ok(reply)
    }

    /// Write `state` (atomically) where the service was told to keep it.
    fn save(&self, state: &State) -> Result<()> {
        let Some(p) = &self.state_path else {
            return Ok(());
        };
        let text = serde_json::to_string(state).map_err(|source| Error::Json {
            path: p.clone(),
            source,
        })?;
        let tmp = p.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, p).map_err(io_err(p))
    }
}

struct RequestScorers<'a> {
    comp: &'a Competition,
    executor: &'a Executor,
    predictor: Option<&'a OnnxPredictor>,
    groups: &'a [Vec<String>],
    ledger: &'a mut Ledger,
}

impl Scorers for RequestScorers<'_> {
    fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError> {
        let p = self.predictor.ok_or("this arm has no world model")?;
        let t = Instant::now();
        let meta = &self.comp.meta.meta_features;
        let inputs: Vec<Vec<f32>> = groups
            .iter()
            .flat_map(|&g| self.groups[g].iter().map(|code| code_input(meta, code)))
            .collect();
        let flat = p.predict(&inputs)?;
        Ok(charge_world_model(
            self.ledger,
            t,
            flat,
            &self.sizes(groups),
        ))
    }

    fn real(&mut self, groups: &[usize]) -> Result<Vec<Vec<Option<f64>>>, ScorerError> {
        let t = Instant::now();
        let jobs: Vec<(&Competition, String)> = groups
            .iter()
            .flat_map(|&g| self.groups[g].iter().map(|code| (self.comp, code.clone())))
            .collect();
        let outs = execute_codes(self.executor, &jobs);
        Ok(charge_real(self.ledger, t, outs, &self.sizes(groups)))
    }
}

impl RequestScorers<'_> {
    fn sizes(&self, groups: &[usize]) -> Vec<usize> {
        groups.iter().map(|&g| self.groups[g].len()).collect()
    }
}
