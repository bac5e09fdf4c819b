//! Run-config files (`configs/policy_*.toml`): a preset name, overrides of
//! any [`PolicyConfig`] field, and the SFT and evaluation settings.
//!
//! ```toml
//! preset = "tiny"
//! [policy]        # any PolicyConfig field, e.g.
//! image_size = 64
//! [sft]           # SftConfig
//! steps = 1500
//! [eval]          # EvalConfig
//! temperature = 0.0
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{EvalConfig, PolicyConfig, PolicyError, Result, SftConfig};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunFile {
    preset: Option<String>,
    policy: Option<toml::Table>,
    sft: Option<SftConfig>,
    eval: Option<EvalConfig>,
}

/// A resolved run config.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub policy: PolicyConfig,
    pub sft: SftConfig,
    pub eval: EvalConfig,
}

/// Policy config of a preset with a table of field overrides applied.
pub fn apply_overrides(base: PolicyConfig, overrides: &toml::Table) -> Result<PolicyConfig> {
    let mut v = toml::Table::try_from(&base).map_err(|e| PolicyError::Config(e.to_string()))?;
    for (k, val) in overrides {
        if !v.contains_key(k) {
            return Err(PolicyError::Config(format!("unknown policy field `{k}`")));
        }
        v.insert(k.clone(), val.clone());
    }
    let cfg: PolicyConfig = toml::Value::Table(v)
        .try_into()
        .map_err(|e: toml::de::Error| PolicyError::Config(e.to_string()))?;
    cfg.validate()?;
    Ok(cfg)
}

impl RunConfig {
    /// Read a run-config file; `preset` (when given) overrides the file's.
    pub fn load(path: Option<&Path>, preset: Option<&str>) -> Result<Self> {
        Self::load_with(path, preset, &[])
    }

    /// [`Self::load`] through the loader every command shares
    /// (`wmrl_run::config`): the file's `extends` chain, then `sets`
    /// (`sft.steps=200`, `policy.image_size=64`), then one parse in which an
    /// unknown key is an error naming it.
    pub fn load_with(path: Option<&Path>, preset: Option<&str>, sets: &[String]) -> Result<Self> {
        let file: RunFile =
            wmrl_run::load_optional(path, sets).map_err(|e| PolicyError::Config(e.to_string()))?;
        let name = preset
            .map(str::to_string)
            .or(file.preset)
            .unwrap_or_else(|| "tiny".into());
        let base = PolicyConfig::preset(&name)?;
        let policy = match &file.policy {
            Some(t) => apply_overrides(base, t)?,
            None => base,
        };
        Ok(Self {
            policy,
            sft: file.sft.unwrap_or_default(),
            eval: file.eval.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sft_configs_extend_take_sets_and_refuse_unknown_keys() {
        let tmp = tempfile::tempdir().expect("tmp");
        let base = tmp.path().join("base.toml");
        std::fs::write(&base, "preset = \"tiny\"\n[sft]\nsteps = 7\n").expect("base");
        let child = tmp.path().join("child.toml");
        std::fs::write(
            &child,
            "extends = \"base.toml\"\n[policy]\nimage_size = 32\n",
        )
        .expect("child");
        let rc = RunConfig::load_with(Some(&child), None, &["sft.steps=9".into()]).expect("load");
        assert_eq!(rc.sft.steps, 9);
        assert_eq!(rc.policy.image_size, 32);
        let err = RunConfig::load_with(Some(&child), None, &["sft.stepz=1".into()])
            .expect_err("unknown key");
        assert!(err.to_string().contains("stepz"), "{err}");
    }
}
