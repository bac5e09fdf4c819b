//! A small deterministic [`Environment`] for tests, the test server and the
//! benchmarks: no physics, but real frames of the requested size and a
//! controllable step cost, so the bridge can be exercised without a simulator.
//!
//! The state is a point moved by the action's first three dimensions; the
//! episode succeeds after `success_after(task, init_state)` steps. proprio is
//! `[t, task, init_state, seed as f32, x, y, z]`, so a test can tell a fresh
//! episode (t = 0) from a running one. Never used for training.

use std::time::{Duration, Instant};

use wmrl_env::{
    Action, CameraSpec, EnvError, EnvSpec, Environment, Frame, Observation, ResetRequest, Result,
    StepResult, TaskSpec,
};

/// How the test environment looks and how much each step costs.
#[derive(Debug, Clone, PartialEq)]
pub struct TestEnvConfig {
    pub n_tasks: usize,
    pub n_init_states: usize,
    /// Step limit per episode.
    pub max_steps: usize,
    /// Square cameras of this side (two cameras: `agentview`, `wrist`).
    pub image_size: u32,
    pub n_cameras: usize,
    /// CPU work per step (busy loop), to model a simulator's cost.
    pub work_us: u64,
    /// Sleep per step (not CPU), to make steps long enough to kill mid-step.
    pub sleep_ms: u64,
}

impl Default for TestEnvConfig {
    fn default() -> Self {
        Self {
            n_tasks: 3,
            n_init_states: 5,
            max_steps: 40,
            image_size: 16,
            n_cameras: 2,
            work_us: 0,
            sleep_ms: 0,
        }
    }
}

impl TestEnvConfig {
    pub fn spec(&self) -> EnvSpec {
        let names = ["agentview", "wrist", "cam2", "cam3"];
        EnvSpec {
            suite: "bridge_test".into(),
            action_dim: 7,
            action_low: -1.0,
            action_high: 1.0,
            control_hz: 20.0,
            cameras: (0..self.n_cameras)
                .map(|i| CameraSpec {
                    name: names
                        .get(i)
                        .map_or_else(|| format!("cam{i}"), |s| s.to_string()),
                    width: self.image_size,
                    height: self.image_size,
                })
                .collect(),
            proprio_dim: 7,
            tasks: (0..self.n_tasks)
                .map(|i| TaskSpec {
                    index: i,
                    name: format!("task_{i}"),
                    instruction: format!("do test task number {i}"),
                    n_init_states: self.n_init_states,
                    max_steps: self.max_steps,
                })
                .collect(),
        }
    }
}

/// Steps until success for a (task, init state): 5..=16, fixed.
pub fn success_after(task: usize, init_state: usize) -> usize {
    5 + (task * 7 + init_state * 3) % 12
}

/// The deterministic test environment.
#[derive(Debug, Clone)]
pub struct TestEnv {
    config: TestEnvConfig,
    spec: EnvSpec,
    episode: Option<(ResetRequest, usize, [f32; 3])>,
}

impl TestEnv {
    pub fn new(config: TestEnvConfig) -> Self {
        let spec = config.spec();
        Self {
            config,
            spec,
            episode: None,
        }
    }

    fn observe(&self) -> Observation {
        let Some((req, t, pos)) = self.episode else {
            return Observation {
                frames: Vec::new(),
                proprio: Vec::new(),
                progress: None,
            };
        };
        let frames = self
            .spec
            .cameras
            .iter()
            .enumerate()
            .map(|(c, cam)| {
                let base = (t as u64 * 31 + req.seed * 7 + c as u64 * 101 + req.task as u64) as u8;
                let n = cam.width as usize * cam.height as usize * 3;
                let rgb = (0..n).map(|i| base.wrapping_add((i % 251) as u8)).collect();
                Frame {
                    width: cam.width,
                    height: cam.height,
                    rgb,
                }
            })
            .collect();
        let goal = success_after(req.task, req.init_state);
        Observation {
            frames,
            proprio: vec![
                t as f32,
                req.task as f32,
                req.init_state as f32,
                req.seed as f32,
                pos[0],
                pos[1],
                pos[2],
            ],
            progress: Some((t as f32 / goal as f32).min(1.0)),
        }
    }
}

impl Environment for TestEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, request: ResetRequest) -> Result<Observation> {
        self.spec.check_reset(&request)?;
        self.episode = Some((request, 0, [0.0; 3]));
        Ok(self.observe())
    }

    fn step(&mut self, action: &Action) -> Result<StepResult> {
        let a = self.spec.sanitize_action(action)?;
        let Some((req, t, pos)) = self.episode.as_mut() else {
            return Err(EnvError::Sim("step before reset".into()));
        };
        *t += 1;
        for (p, v) in pos.iter_mut().zip(&a) {
            *p += 0.05 * v;
        }
        let (req, t) = (*req, *t);
        if self.config.work_us > 0 {
            let start = Instant::now();
            let budget = Duration::from_micros(self.config.work_us);
            let mut x = 0u64;
            while start.elapsed() < budget {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        if self.config.sleep_ms > 0 {
            std::thread::sleep(Duration::from_millis(self.config.sleep_ms));
        }
        let success = t >= success_after(req.task, req.init_state);
        let truncated = !success && t >= self.config.max_steps;
        Ok(StepResult {
            obs: self.observe(),
            reward: if success { 1.0 } else { 0.0 },
            success,
            done: success,
            truncated,
        })
    }
}
