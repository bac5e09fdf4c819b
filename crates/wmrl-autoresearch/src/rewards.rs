//! The reward service for LLM trainers (`wmrl autoresearch serve-rewards`,
//! protocol in docs/autoresearch.md): a trainer (TRL's GRPO trainer, verl)
//! sends groups of candidate solutions, code as text, for one competition
//! and gets one reward per candidate through wmrl-core's correction loop:
//! anchor groups are executed in the sandbox and graded, the others scored
//! by the code world model ([`crate::code_features`] into an ONNX
//! predictor) and calibrated against the anchors, anchor advantages
//! weighted by the inverse-variance weight.
//!
//! The reward returned is the candidate's GRPO advantage: standardised
//! within its group (`(score - mean) / (std + eps)`, wmrl-core's
//! `group_advantages` with the paper's settings), and for anchor groups
//! multiplied by the anchor weight. A trainer that standardises again per
//! group therefore changes nothing but the weight. The loop's state
//! (scheduler, calibrator, weight, ledger, and which world model the
//! calibration was fitted to) is saved after every request and reloaded on
//! start, so a restarted service continues where it stopped; while a
//! service runs, its state file is locked, so a second service on it is
//! refused rather than overwriting the first one's updates.
//!
//! This module must never let a request change the state unless the whole
//! request succeeded and was saved.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wmrl_core::{Arm, CoreConfig, CorrectionLoop, Ledger, ScorerError, Scorers};

use crate::Suite;
use crate::arm::{ar_name, check_ar_arm, serde_ar_arm};
use crate::code_features::code_input;
use crate::competition::Competition;
use crate::error::{Error, Result, io_err};
use crate::execute::Executor;
use crate::lock::FileLock;
use crate::onnx_predictor::OnnxPredictor;
use crate::train::{charge_real, charge_world_model, execute_codes};

/// Version of the request and reply shapes; a request of another version
/// is refused.
pub const PROTOCOL: u32 = 1;
/// Most candidates one request may carry.
pub const MAX_CANDIDATES: usize = 1024;
/// Layout of the state file; a state of another layout is refused (2: the
/// core's scheduler keeps the anchor fraction, the world model is recorded).
const STATE_FORMAT: u32 = 2;

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
    /// What to train on, one per candidate: its advantage, standardised
    /// within the group (0 for a candidate the loop left out, e.g. an
    /// ungradable one).
    pub rewards: Vec<Vec<f64>>,
    /// The score each candidate was graded with before standardising: the
    /// real reward-ladder value in anchor groups, the (calibrated)
    /// world-model score in the others; `None` where ungraded.
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

/// The service's settings (configs/autoresearch_rewards.toml holds the
/// defaults; `wmrl autoresearch serve-rewards --config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RewardConfig {
    /// `real` executes every group, `wm` none, `wmrl` the fraction
    /// `core.anchors.fraction` of all groups seen, kept over the stream of
    /// requests (a request of one group is executed every fourth time at
    /// 0.25; the per-step minimum `core.anchors.min_groups` does not apply).
    /// Written and read as `real`, `wm` or `wmrl` ([`crate::arm`]).
    #[serde(with = "serde_ar_arm")]
    pub arm: Arm,
    pub seed: u64,
    pub core: CoreConfig,
}

impl Default for RewardConfig {
    /// `wmrl` at a quarter of the groups executed, seed 0, the track's
    /// small-scale core settings.
    fn default() -> Self {
        let mut core = crate::train::small_scale_core();
        core.anchors.fraction = wmrl_core::AnchorFraction::new(0.25).expect("0.25 is in (0, 1]");
        Self {
            arm: Arm::Wmrl,
            seed: 0,
            core,
        }
    }
}

/// A reward service's settings have one layout so far (they are not
/// recorded as a run's settings).
impl wmrl_run::Versioned for RewardConfig {
    const FORMAT: u32 = 0;
}

impl RewardConfig {
    /// The settings in `path` (TOML with `extends`), with `sets`
    /// (`section.key=value`) applied, unknown keys refused; no file: the
    /// defaults with `sets` applied.
    pub fn load(path: Option<&std::path::Path>, sets: &[String]) -> Result<Self> {
        wmrl_run::load_over_defaults(path, sets).map_err(|e| Error::Config(e.to_string()))
    }
}

/// The world model a calibration was fitted to: a calibration maps one
/// model's scores and means nothing for another's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictorId {
    pub path: PathBuf,
    pub sha256: String,
}

impl PredictorId {
    /// The SHA-256 of the ONNX file `p` was loaded from.
    pub fn of(p: &OnnxPredictor) -> Result<Self> {
        let bytes = std::fs::read(p.path()).map_err(io_err(p.path()))?;
        let sha256 = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Self {
            path: p.path().to_path_buf(),
            sha256,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    format: u32,
    config: RewardConfig,
    /// `None` for the `real` arm, which reads no world model.
    predictor: Option<PredictorId>,
    core: CorrectionLoop,
    ledger: Ledger,
    requests: u64,
}

/// The service: suite, sandbox, code world model and the correction loop.
pub struct RewardService {
    suite: Suite,
    executor: Executor,
    predictor: Option<OnnxPredictor>,
    state: State,
    state_path: Option<PathBuf>,
    /// Held while the service lives, so no other service writes the state.
    _lock: Option<FileLock>,
}

impl RewardService {
    /// A service over `suite`. `predictor` (a code predictor,
    /// [`crate::predictor::InputKind::Code`]) is required by `wm` and
    /// `wmrl`. With `state_path`, the state file is locked (another live
    /// service on it is [`Error::InUse`]), its state is loaded when it
    /// exists (its settings must equal `cfg` and its world model
    /// `predictor`'s file, byte for byte), and the state is written now and
    /// after every request.
    pub fn new(
        suite: Suite,
        executor: Executor,
        predictor: Option<OnnxPredictor>,
        cfg: RewardConfig,
        state_path: Option<&Path>,
    ) -> Result<Self> {
        check_ar_arm(cfg.arm).map_err(Error::Config)?;
        if cfg.arm != Arm::Sparse && predictor.is_none() {
            return Err(Error::Config(format!(
                "arm `{}` scores with the world model: give a code predictor",
                ar_name(cfg.arm)
            )));
        }
        let predictor_id = match (&predictor, cfg.arm) {
            (_, Arm::Sparse) | (None, _) => None,
            (Some(p), _) => Some(PredictorId::of(p)?),
        };
        let lock = state_path.map(lock_state).transpose()?;
        let state = match state_path.filter(|p| p.exists()) {
            Some(p) => load_state(p, &cfg, predictor_id.as_ref())?,
            None => new_state(cfg, predictor_id)?,
        };
        let service = Self {
            suite,
            executor,
            predictor,
            state,
            state_path: state_path.map(Path::to_path_buf),
            _lock: lock,
        };
        service.save(&service.state)?;
        Ok(service)
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
        // Work on a copy; it replaces the state only once saved.
        let mut st = self.state.clone();
        let cpu_before = st.ledger.real_cpu_seconds;
        let sizes: Vec<usize> = req.groups.iter().map(Vec::len).collect();
        let mut scorers = RequestScorers {
            comp,
            executor: &self.executor,
            predictor: self.predictor.as_ref(),
            groups: &req.groups,
            ledger: &mut st.ledger,
        };
        // The core's scheduler picks the anchors (`real`: all, `wm`: none).
        let out = st.core.step(&sizes, None, &mut scorers)?;
        // The per-pair and per-rollout records would grow the state file
        // with every request; the reply carries what a trainer needs.
        st.core.take_diagnostics();
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
        Ok(wmrl_run::atomic_write(p, text.as_bytes())?)
    }
}

/// Lock `<state>.lock` (the state file itself is replaced by a rename at
/// every save, so a lock on it would not survive the first request).
fn lock_state(state: &Path) -> Result<FileLock> {
    let mut name = state.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    FileLock::try_take(&path)?.ok_or_else(|| {
        Error::InUse(format!(
            "{}: another reward service ({}) keeps its state there (lock {}); stop it or pass another --state",
            state.display(),
            FileLock::holder(&path),
            path.display()
        ))
    })
}

fn new_state(cfg: RewardConfig, predictor: Option<PredictorId>) -> Result<State> {
    let core = CorrectionLoop::new(cfg.core.clone(), cfg.arm, cfg.seed)
        .map_err(|e| Error::Config(e.to_string()))?
        .with_anchors_over_stream();
    // A request is a slice of one scarce stream: one whose groups are all
    // executed keeps its real grades and the weight (free labels only when
    // everything is executed).
    let core = if cfg.core.anchors.fraction.is_all() {
        core
    } else {
        core.in_scarce_regime()
    };
    Ok(State {
        format: STATE_FORMAT,
        config: cfg,
        predictor,
        core,
        ledger: Ledger::default(),
        requests: 0,
    })
}

/// Load a saved state, refusing one of another layout, other settings, or
/// a calibration fitted to another world model.
fn load_state(p: &Path, cfg: &RewardConfig, predictor: Option<&PredictorId>) -> Result<State> {
    let text = std::fs::read_to_string(p).map_err(io_err(p))?;
    let json_err = |source| Error::Json {
        path: p.into(),
        source,
    };
    #[derive(Deserialize)]
    struct Format {
        #[serde(default)]
        format: u32,
    }
    let format = serde_json::from_str::<Format>(&text)
        .map_err(json_err)?
        .format;
    if format != STATE_FORMAT {
        return Err(Error::Config(format!(
            "{}: a state of format {format} (this wmrl reads format {STATE_FORMAT}); pass another --state or remove it to start over",
            p.display()
        )));
    }
    let s: State = serde_json::from_str(&text).map_err(json_err)?;
    if let Some(d) = wmrl_run::first_difference(&s.config, cfg, "") {
        return Err(Error::Config(format!(
            "{}: saved by a service with other settings (saved against now: {d}); pass another state file or the same settings",
            p.display(),
        )));
    }
    let sha = |id: Option<&PredictorId>| id.map(|i| i.sha256.clone());
    if sha(s.predictor.as_ref()) != sha(predictor) {
        let name = |id: Option<&PredictorId>| {
            id.map_or("no world model".into(), |i| {
                format!(
                    "{} (sha256 {})",
                    i.path.display(),
                    i.sha256.get(..12).unwrap_or(&i.sha256)
                )
            })
        };
        return Err(Error::Config(format!(
            "{}: its calibration was fitted to the world model {}, and this service scores with {}; a calibration maps one model's scores, so pass another --state (or remove this one) to start over with this model",
            p.display(),
            name(s.predictor.as_ref()),
            name(predictor)
        )));
    }
    Ok(s)
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
        let t = wmrl_run::clock::Stopwatch::start();
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
        let t = wmrl_run::clock::Stopwatch::start();
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
