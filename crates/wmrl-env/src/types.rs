use serde::{Deserialize, Serialize};

use crate::{EnvError, Result};

/// A camera an environment renders every step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CameraSpec {
    /// `agentview` or `wrist` for the robot suites.
    pub name: String,
    pub width: u32,
    pub height: u32,
}

/// One task: an instruction and a fixed set of initial states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub index: usize,
    pub name: String,
    pub instruction: String,
    pub n_init_states: usize,
    /// Episode limit in control steps (LIBERO-Long uses 520).
    pub max_steps: usize,
}

/// What every slot of an environment looks like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// Suite name, e.g. `libero_10` or `tabletop_libero_10`.
    pub suite: String,
    /// 7 for LIBERO's OSC_POSE: delta xyz, delta rotation, gripper.
    pub action_dim: usize,
    /// Actions are clipped to `[action_low, action_high]`.
    pub action_low: f32,
    pub action_high: f32,
    pub control_hz: f32,
    pub cameras: Vec<CameraSpec>,
    pub proprio_dim: usize,
    pub tasks: Vec<TaskSpec>,
}

impl EnvSpec {
    /// Check a reset request against the task list.
    pub fn check_reset(&self, req: &ResetRequest) -> Result<()> {
        let task = self.tasks.get(req.task).ok_or(EnvError::UnknownTask {
            task: req.task,
            n_tasks: self.tasks.len(),
        })?;
        if req.init_state >= task.n_init_states {
            return Err(EnvError::UnknownInitState {
                task: req.task,
                init_state: req.init_state,
                n_init_states: task.n_init_states,
            });
        }
        Ok(())
    }

    /// Check an action's length and finiteness, and clip it to the range.
    /// Out-of-range values are clipped (documented behaviour); NaN or
    /// infinite values are an error.
    pub fn sanitize_action(&self, action: &Action) -> Result<Action> {
        if action.len() != self.action_dim {
            return Err(EnvError::InvalidAction(format!(
                "expected {} dimensions, got {}",
                self.action_dim,
                action.len()
            )));
        }
        if let Some((i, v)) = action.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(EnvError::InvalidAction(format!(
                "dimension {i} is {v}: actions must be finite"
            )));
        }
        Ok(action
            .iter()
            .map(|v| v.clamp(self.action_low, self.action_high))
            .collect())
    }
}

/// A 7-D (for the robot suites) continuous action.
pub type Action = Vec<f32>;

/// Which episode to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResetRequest {
    pub task: usize,
    pub init_state: usize,
    /// Seeds any randomness the environment has (none for LIBERO's physics).
    pub seed: u64,
}

/// A slot whose episode was restarted from its reset request by the
/// environment itself (see [`crate::VecEnv::take_restarts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRestart {
    pub slot: usize,
    /// The reset the episode was restarted from (the caller's own request).
    pub request: ResetRequest,
    /// Steps of the abandoned attempt that the caller had already received.
    pub steps_lost: u64,
    /// Why, e.g. `worker tcp://10.0.0.2:5555 down: timeout after 30000 ms`.
    pub reason: String,
}

/// An RGB image, row-major, 3 bytes a pixel, top row first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub width: u32,
    pub height: u32,
    #[serde(with = "serde_bytes_compat")]
    pub rgb: Vec<u8>,
}

impl Frame {
    pub fn new(width: u32, height: u32, rgb: Vec<u8>) -> Result<Self> {
        let want = width as usize * height as usize * 3;
        if rgb.len() != want {
            return Err(EnvError::Protocol(format!(
                "frame of {width}x{height} needs {want} bytes, got {}",
                rgb.len()
            )));
        }
        Ok(Self { width, height, rgb })
    }

    pub fn blank(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            rgb: vec![0; width as usize * height as usize * 3],
        }
    }
}

/// What a slot sees after a reset or a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// One frame per camera, in the order of [`EnvSpec::cameras`].
    pub frames: Vec<Frame>,
    /// End-effector position, orientation and gripper state.
    pub proprio: Vec<f32>,
    /// Privileged task progress in [0, 1] where the simulator knows it (the
    /// embedded simulator's oracle); `None` for the real LIBERO simulator.
    pub progress: Option<f32>,
}

/// The result of one step of one slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub obs: Observation,
    /// Sparse reward: 1.0 on success, else 0.0.
    pub reward: f32,
    /// The task's goal holds now.
    pub success: bool,
    /// The episode ended by success (LIBERO: `done` only on success).
    pub done: bool,
    /// The episode ended by the step limit.
    pub truncated: bool,
}

/// Frames are large; keep them as a msgpack `bin` rather than an array of ints.
mod serde_bytes_compat {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_bytes(V)
    }
}
