//! The `--device` choice every command that runs a model takes, recorded
//! in the run's settings (`device = "cpu" | "cuda" | "auto"`). What each
//! choice places where is the track's (the robot track's `Placement`);
//! this is the recorded word, free of any framework.

use serde::{Deserialize, Serialize};

/// The `--device` choice (a config's `device = "cpu" | "cuda" | "auto"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// Everything on the CPU (the default; what the tests run).
    #[default]
    Cpu,
    /// The GPU where each part can use it; a part that cannot falls back to
    /// the CPU with a warning.
    Cuda,
    /// Like `cuda`, but the fallback is expected and logged as information.
    Auto,
}

impl std::str::FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda),
            "auto" => Ok(Self::Auto),
            _ => Err(format!("unknown device `{s}`: expected cpu, cuda or auto")),
        }
    }
}

impl std::fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Auto => "auto",
        })
    }
}

impl DeviceChoice {
    /// Whether this is the CPU (the default, which settings files leave
    /// out: `#[serde(skip_serializing_if = "DeviceChoice::is_cpu")]`).
    pub fn is_cpu(&self) -> bool {
        *self == Self::Cpu
    }
}
