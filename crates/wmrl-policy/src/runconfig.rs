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

use crate::error::io_err;
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
        let file: RunFile = match path {
            Some(p) => {
                let s = std::fs::read_to_string(p).map_err(|e| io_err(p, e))?;
                toml::from_str(&s)
                    .map_err(|e| PolicyError::Config(format!("{}: {e}", p.display())))?
            }
            None => RunFile::default(),
        };
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
