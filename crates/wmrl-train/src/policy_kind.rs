//! The kinds of policy a run, an evaluation and an export load, by name.
//!
//! A run's config names its kind as `policy_type` (`tiny`, `minivla`, or a
//! kind a program registers); absent, the kind is the one whose checkpoint
//! the `policy` directory holds ([`PolicyKind::holds`]), and a directory
//! that two kinds both claim is refused until `policy_type` says which.
//! The trainer, `wmrl eval` and `wmrl export` know only [`PolicyKind`]:
//! a new kind implements it and is added to a [`PolicyKinds`] registry
//! (docs/policy.md, "Adding a policy kind").

use std::path::Path;
use std::sync::Arc;

use wmrl_policy::candle::DType;
use wmrl_policy::{ActionPolicy, Learner, TinyLearner};

use crate::sft::{SftDone, SftRequest};
use crate::{Placement, Result, TrainConfig, TrainError};

/// How an evaluation wants its actor: where and in which precision it
/// runs, and for MiniVLA the dataset whose statistics un-normalise the
/// actions.
#[derive(Debug, Clone)]
pub struct ActorOptions<'a> {
    pub placement: &'a Placement,
    pub dtype: DType,
    pub stats_key: Option<&'a str>,
}

/// One kind of policy: what a checkpoint directory of it looks like and
/// how it loads as an actor (evaluation) and as a learner (a run, its
/// resume and its export: [`Learner::save`], [`Learner::restore`],
/// [`Learner::export`]).
pub trait PolicyKind: Send + Sync {
    /// The name `policy_type` spells it with.
    fn name(&self) -> &'static str;
    /// Whether `dir` holds a checkpoint of this kind.
    fn holds(&self, dir: &Path) -> bool;
    /// The policy in `dir`, to act with.
    fn load_actor(&self, dir: &Path, opts: &ActorOptions<'_>) -> Result<Box<dyn ActionPolicy>>;
    /// The run's start (`cfg.policy`) as a learner on `placement`, with
    /// the run's update settings.
    fn load_learner(&self, cfg: &TrainConfig, placement: &Placement) -> Result<Box<dyn Learner>>;
    /// Behaviour cloning (`wmrl sft --policy-type NAME`): a network of
    /// this kind trained on demonstrations into `req.out`, fresh or
    /// resumed ([`wmrl_policy::train_sft`] over the kind's
    /// [`wmrl_policy::SftModel`]). A kind without one says so.
    fn sft(&self, req: SftRequest<'_>) -> Result<SftDone> {
        let _ = req;
        Err(config_err(
            "policy_type",
            format!(
                "the `{}` policy kind has no SFT (`wmrl sft`); train its checkpoint elsewhere",
                self.name()
            ),
        ))
    }
}

/// The policy kinds a program knows, by name.
#[derive(Clone)]
pub struct PolicyKinds {
    kinds: Vec<Arc<dyn PolicyKind>>,
}

impl std::fmt::Debug for PolicyKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Default for PolicyKinds {
    fn default() -> Self {
        Self::builtin()
    }
}

impl PolicyKinds {
    /// The kinds wmrl ships: `tiny` and `minivla`.
    pub fn builtin() -> Self {
        Self {
            kinds: vec![Arc::new(Tiny), Arc::new(MiniVla)],
        }
    }

    /// This registry with `kind` added; a name already taken is refused.
    pub fn with(mut self, kind: impl PolicyKind + 'static) -> Result<Self> {
        if self.names().contains(&kind.name()) {
            return Err(config_err(
                "policy_type",
                format!(
                    "a policy kind named `{}` is already registered",
                    kind.name()
                ),
            ));
        }
        self.kinds.push(Arc::new(kind));
        Ok(self)
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.kinds.iter().map(|k| k.name()).collect()
    }

    /// The kind named `name`.
    pub fn get(&self, name: &str) -> Result<&dyn PolicyKind> {
        self.kinds
            .iter()
            .find(|k| k.name() == name)
            .map(|k| k.as_ref())
            .ok_or_else(|| {
                config_err(
                    "policy_type",
                    format!(
                        "unknown policy kind `{name}`; known kinds: {}",
                        self.names().join(", ")
                    ),
                )
            })
    }

    /// The kind of the checkpoint in `dir`: `declared` (a config's
    /// `policy_type`), which must hold it, or else the one kind that does.
    pub fn resolve(&self, dir: &Path, declared: Option<&str>) -> Result<&dyn PolicyKind> {
        let path = dir.display().to_string();
        if !dir.join(wmrl_policy::CONFIG_FILE).exists() {
            return Err(TrainError::Missing {
                what: "SFT policy checkpoint",
                path,
                hint: "train one with `wmrl sft` (or run `wmrl quickstart`) and set `policy` in the config",
            });
        }
        if let Some(name) = declared {
            let kind = self.get(name)?;
            if !kind.holds(dir) {
                return Err(config_err(
                    &path,
                    format!(
                        "policy_type = \"{name}\", but this directory does not hold a `{name}` checkpoint"
                    ),
                ));
            }
            return Ok(kind);
        }
        let holding: Vec<&dyn PolicyKind> = self
            .kinds
            .iter()
            .filter(|k| k.holds(dir))
            .map(|k| k.as_ref())
            .collect();
        match holding.as_slice() {
            [one] => Ok(*one),
            [] => Err(config_err(
                &path,
                format!(
                    "its config.json is a checkpoint of none of the known policy kinds ({})",
                    self.names().join(", ")
                ),
            )),
            many => Err(config_err(
                &path,
                format!(
                    "held by more than one policy kind ({}): set policy_type",
                    many.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
                ),
            )),
        }
    }

    /// The run's start as a learner, of the kind `cfg` names or its
    /// directory holds.
    pub fn learner(&self, cfg: &TrainConfig, placement: &Placement) -> Result<Box<dyn Learner>> {
        self.resolve(&cfg.policy, cfg.policy_type.as_deref())?
            .load_learner(cfg, placement)
    }
}

fn config_err(path: &str, message: String) -> TrainError {
    TrainError::Config {
        path: path.to_string(),
        message,
    }
}

/// The `tiny` policy of wmrl-policy: the whole network (or its action
/// head, `update.trainable`) trained, a frozen copy as the KL reference.
struct Tiny;

impl PolicyKind for Tiny {
    fn name(&self) -> &'static str {
        "tiny"
    }
    fn holds(&self, dir: &Path) -> bool {
        std::fs::read_to_string(dir.join(wmrl_policy::CONFIG_FILE))
            .ok()
            .is_some_and(|s| serde_json::from_str::<wmrl_policy::PolicyConfig>(&s).is_ok())
    }
    fn load_actor(&self, dir: &Path, opts: &ActorOptions<'_>) -> Result<Box<dyn ActionPolicy>> {
        Ok(Box::new(crate::device::load_policy(dir, opts.placement)?))
    }
    fn load_learner(&self, cfg: &TrainConfig, placement: &Placement) -> Result<Box<dyn Learner>> {
        if cfg.minivla.is_some() {
            return Err(config_err(
                &cfg.policy.display().to_string(),
                "[minivla] is set but the policy is a `tiny` policy, not a MiniVLA directory"
                    .into(),
            ));
        }
        let policy = crate::device::load_policy(&cfg.policy, placement)?;
        let reference = crate::device::load_policy(&cfg.policy, placement)?;
        Ok(Box::new(TinyLearner::new(
            policy,
            reference,
            cfg.update.optim.clone(),
            &cfg.update.trainable,
        )?))
    }
    fn sft(&self, req: SftRequest<'_>) -> Result<SftDone> {
        crate::sft::tiny(req)
    }
}

/// MiniVLA (wmrl-minivla): LoRA adapters (`[minivla]`) trained on the
/// frozen checkpoint, which has no KL reference.
struct MiniVla;

impl PolicyKind for MiniVla {
    fn name(&self) -> &'static str {
        "minivla"
    }
    fn holds(&self, dir: &Path) -> bool {
        wmrl_minivla::is_minivla_dir(dir)
    }
    fn load_actor(&self, dir: &Path, opts: &ActorOptions<'_>) -> Result<Box<dyn ActionPolicy>> {
        let device = &opts.placement.policy;
        if device.is_cpu() && opts.dtype == DType::BF16 {
            return Err(config_err(
                &dir.display().to_string(),
                "--dtype bf16 needs the GPU (--device cuda): candle's CPU backend has no bf16 \
                 matrix product; on the CPU use --dtype f32"
                    .into(),
            ));
        }
        let p = wmrl_minivla::MiniVlaPolicy::load(dir, device, opts.dtype, opts.stats_key)
            .map_err(minivla_err(dir))?;
        tracing::info!(
            "MiniVLA ({}) in {:?}",
            p.model().config().preset,
            opts.dtype
        );
        Ok(Box::new(p))
    }
    fn load_learner(&self, cfg: &TrainConfig, placement: &Placement) -> Result<Box<dyn Learner>> {
        let path = &cfg.policy;
        if cfg.update.loss.kl_beta > 0.0 {
            return Err(config_err(
                &path.display().to_string(),
                "a MiniVLA policy trains LoRA adapters from the checkpoint and has no KL-to-reference term: set update.loss.kl_beta = 0".into(),
            ));
        }
        let m = cfg.minivla.clone().unwrap_or_default();
        let policy = wmrl_minivla::MiniVlaPolicy::load(
            path,
            &placement.policy,
            DType::F32,
            m.stats_key.as_deref(),
        )
        .map_err(minivla_err(path))?;
        let learner = wmrl_minivla::MiniVlaLearner::new(
            policy,
            &m.lora,
            cfg.update.optim.clone(),
            m.micro_batch,
        )
        .map_err(minivla_err(path))?;
        Ok(Box::new(learner))
    }
    fn sft(&self, req: SftRequest<'_>) -> Result<SftDone> {
        crate::sft::minivla(req)
    }
}

fn minivla_err(path: &Path) -> impl FnOnce(wmrl_minivla::MiniVlaError) -> TrainError + '_ {
    move |e| config_err(&path.display().to_string(), format!("minivla: {e}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_unknown_kinds_are_refused_with_the_known_ones() {
        let kinds = PolicyKinds::builtin();
        assert_eq!(kinds.names(), ["tiny", "minivla"]);
        assert!(kinds.clone().with(Tiny).is_err());
        let err = kinds
            .get("openvla")
            .err()
            .expect("not registered")
            .to_string();
        assert!(
            err.contains("unknown policy kind `openvla`") && err.contains("tiny, minivla"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_resolves_to_the_kind_that_holds_it_or_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let kinds = PolicyKinds::builtin();
        let err = kinds.resolve(dir.path(), None).err().unwrap().to_string();
        assert!(err.contains("SFT policy checkpoint not found"), "{err}");
        std::fs::write(
            dir.path().join(wmrl_policy::CONFIG_FILE),
            r#"{"dino": {}, "siglip": {}}"#,
        )
        .unwrap();
        assert_eq!(kinds.resolve(dir.path(), None).unwrap().name(), "minivla");
        let err = kinds
            .resolve(dir.path(), Some("tiny"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("does not hold a `tiny` checkpoint"), "{err}");
        std::fs::write(
            dir.path().join(wmrl_policy::CONFIG_FILE),
            r#"{"preset": 3}"#,
        )
        .unwrap();
        let err = kinds.resolve(dir.path(), None).err().unwrap().to_string();
        assert!(
            err.contains("none of the known policy kinds (tiny, minivla)"),
            "{err}"
        );
    }
}
