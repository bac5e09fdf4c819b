//! Simulator configuration: camera size, episode limit, control and physics
//! rates. Every field has a documented default; the struct round-trips
//! through serde so run configs can carry it.

use serde::{Deserialize, Serialize};

use crate::{Result, SimError};

/// How the tabletop simulator runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Square camera size in pixels for both cameras (64..=256). Default 128,
    /// the size LIBERO-Long policies are commonly trained on.
    pub image_size: u32,
    /// Render the cameras at all. `false` gives empty frame lists (physics
    /// and oracle only), for benchmarks and expert checks. Default `true`.
    pub render: bool,
    /// Episode limit in control steps. Default 300: the scripted expert
    /// finishes every task in under 200 steps; LIBERO uses 520 for its
    /// slower human demonstrations.
    pub max_steps: usize,
    /// Control rate in Hz. Default 20, as LIBERO.
    pub control_hz: f32,
    /// Physics substeps per control step. Default 5 (a 100 Hz physics step).
    pub substeps: usize,
    /// End-effector translation at |action| = 1, in metres per control step.
    /// Default 0.02 (0.4 m/s at 20 Hz).
    pub max_delta_pos_m: f32,
    /// End-effector rotation at |action| = 1, in radians per control step.
    /// Default 0.2.
    pub max_delta_rot_rad: f32,
    /// Initial states per task. Default 50, as LIBERO.
    pub n_init_states: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            image_size: 128,
            render: true,
            max_steps: 300,
            control_hz: 20.0,
            substeps: 5,
            max_delta_pos_m: 0.02,
            max_delta_rot_rad: 0.2,
            n_init_states: 50,
        }
    }
}

impl SimConfig {
    /// Reject values the simulator cannot run with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(SimError::Config(m));
        if !(64..=256).contains(&self.image_size) {
            return bad(format!("image_size {} not in 64..=256", self.image_size));
        }
        if self.max_steps == 0 {
            return bad("max_steps must be positive".into());
        }
        if !(self.control_hz > 0.0 && self.control_hz.is_finite()) {
            return bad(format!("control_hz {} must be positive", self.control_hz));
        }
        if self.substeps == 0 || self.substeps > 100 {
            return bad(format!("substeps {} not in 1..=100", self.substeps));
        }
        if !(self.max_delta_pos_m > 0.0 && self.max_delta_rot_rad > 0.0) {
            return bad("max_delta_pos_m and max_delta_rot_rad must be positive".into());
        }
        if self.n_init_states == 0 {
            return bad("n_init_states must be positive".into());
        }
        Ok(())
    }
}
