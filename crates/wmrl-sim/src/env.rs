//! [`TabletopEnv`]: one simulator instance behind the project's
//! [`wmrl_env::Environment`] interface, and its vectorised form.

use std::sync::Arc;
use std::sync::OnceLock;

use rand::Rng;
use rand_distr::{Distribution, Normal};
use wmrl_env::{
    Action, CameraSpec, EnvSpec, Environment, Frame, LocalVecEnv, Observation, ResetRequest,
    StepResult, TaskSpec,
};

use crate::config::SimConfig;
use crate::expert::Expert;
use crate::predicates::{GoalStatus, evaluate};
use crate::render::Renderer;
use crate::task::{InitState, Task, init_state, tasks};
use crate::world::World;
use crate::{Result, SimError};

/// Suite name in [`EnvSpec::suite`].
pub const SUITE: &str = "tabletop_libero_10";
/// Proprioception: grasp-point position (3), orientation quaternion xyzw (4),
/// finger positions (2, +-half the aperture, as LIBERO's gripper qpos).
pub const PROPRIO_DIM: usize = 9;

fn all_tasks() -> Result<&'static [Task]> {
    static TASKS: OnceLock<Result<Vec<Task>>> = OnceLock::new();
    match TASKS.get_or_init(tasks) {
        Ok(t) => Ok(t),
        Err(e) => Err(e.clone()),
    }
}

/// The suite's spec for a config: 7-D actions in [-1, 1], 20 Hz, the
/// `agentview` and `wrist` cameras (none when rendering is off), 9-D
/// proprio, the ten tasks.
pub fn suite_spec(cfg: &SimConfig) -> Result<EnvSpec> {
    cfg.validate()?;
    let tasks = all_tasks()?;
    let cameras = if cfg.render {
        ["agentview", "wrist"]
            .iter()
            .map(|n| CameraSpec {
                name: (*n).into(),
                width: cfg.image_size,
                height: cfg.image_size,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(EnvSpec {
        suite: SUITE.into(),
        action_dim: 7,
        action_low: -1.0,
        action_high: 1.0,
        control_hz: cfg.control_hz,
        cameras,
        proprio_dim: PROPRIO_DIM,
        tasks: tasks
            .iter()
            .map(|t| TaskSpec {
                index: t.index,
                name: t.name.clone(),
                instruction: t.instruction.clone(),
                n_init_states: cfg.n_init_states,
                max_steps: cfg.max_steps,
            })
            .collect(),
    })
}

struct Running {
    task: &'static Task,
    world: World,
    renderer: Option<Renderer>,
    init_joints: Vec<f32>,
    status: GoalStatus,
    t: usize,
    ended: bool,
}

/// One tabletop simulator instance.
pub struct TabletopEnv {
    cfg: SimConfig,
    spec: EnvSpec,
    run: Option<Running>,
    expert: Expert,
    /// Where this environment's renderers fill their images
    /// ([`TabletopEnv::on`]): the CPU when `None`.
    gpu: Option<Arc<crate::gpu::Gpu>>,
}

impl std::fmt::Debug for TabletopEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TabletopEnv")
            .field("cfg", &self.cfg)
            .field("task", &self.run.as_ref().map(|r| r.task.index))
            .field("t", &self.run.as_ref().map(|r| r.t))
            .finish()
    }
}

impl TabletopEnv {
    pub fn new(cfg: SimConfig) -> Result<Self> {
        let spec = suite_spec(&cfg)?;
        Ok(Self {
            cfg,
            spec,
            run: None,
            expert: Expert::new(),
            gpu: None,
        })
    }

    /// Render on `gpu` (the CPU when `None`): each scene's renderer records
    /// both cameras and fills them in one launch of the batched rasteriser
    /// ([`crate::gpu`]). The device is this environment's, passed in as
    /// candle passes a `&Device`; nothing is set for the process.
    pub fn on(mut self, gpu: Option<Arc<crate::gpu::Gpu>>) -> Self {
        self.gpu = gpu;
        self
    }

    /// Whether the current scene renders on the GPU: one was given and no
    /// launch has failed (a failed launch falls back to the CPU).
    pub fn renders_on_gpu(&self) -> bool {
        self.run
            .as_ref()
            .and_then(|r| r.renderer.as_ref())
            .is_some_and(Renderer::on_gpu)
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Start task `task` from an explicit initial state (hand-placed scenes
    /// in tests and tools); `reset` uses the task's seeded states.
    pub fn reset_to(&mut self, task: usize, init: &InitState) -> Result<Observation> {
        let tasks = all_tasks()?;
        let t = tasks.get(task).ok_or(SimError::UnknownTask {
            task,
            n_tasks: tasks.len(),
        })?;
        if init.poses.len() != t.objects.len() || init.joints.len() != t.objects.len() {
            return Err(SimError::Config(format!(
                "initial state has {} poses for {} objects",
                init.poses.len(),
                t.objects.len()
            )));
        }
        let world = World::build(t, init, &self.cfg);
        let renderer = self
            .cfg
            .render
            .then(|| Renderer::new(&world, self.cfg.image_size as usize, self.gpu.clone()));
        let status = evaluate(&world, t, &init.joints);
        self.expert.reset();
        self.run = Some(Running {
            task: t,
            world,
            renderer,
            init_joints: init.joints.clone(),
            status,
            t: 0,
            ended: false,
        });
        self.observe()
    }

    /// The seeded initial state `init` of task `task`.
    pub fn init_state(&self, task: usize, init: usize) -> Result<InitState> {
        let tasks = all_tasks()?;
        let t = tasks.get(task).ok_or(SimError::UnknownTask {
            task,
            n_tasks: tasks.len(),
        })?;
        if init >= self.cfg.n_init_states {
            return Err(SimError::UnknownInitState {
                task,
                init_state: init,
                n_init_states: self.cfg.n_init_states,
            });
        }
        Ok(init_state(t, init))
    }

    fn running(&self) -> Result<&Running> {
        self.run.as_ref().ok_or(SimError::NotReset)
    }

    /// The current observation (renders the cameras).
    pub fn observe(&mut self) -> Result<Observation> {
        self.observation(true)
    }

    /// The current observation without camera frames (proprio and progress).
    pub fn observe_blind(&mut self) -> Result<Observation> {
        self.observation(false)
    }

    fn observation(&mut self, render: bool) -> Result<Observation> {
        let run = self.run.as_mut().ok_or(SimError::NotReset)?;
        let g = &run.world.gripper;
        let q = g.rot.to_array();
        let half = 0.5 * g.aperture();
        let proprio = vec![
            g.pos.x, g.pos.y, g.pos.z, q[0], q[1], q[2], q[3], half, -half,
        ];
        let frames = match run.renderer.as_mut() {
            Some(r) if render => {
                let on = switched_on(&run.world);
                let s = r.size() as u32;
                let (a, w) = r.render(&run.world, &on);
                let frames = vec![Frame::new(s, s, a.to_vec())?, Frame::new(s, s, w.to_vec())?];
                if !r.on_gpu() {
                    // A failed launch: later scenes render on the CPU too.
                    self.gpu = None;
                }
                frames
            }
            _ => Vec::new(),
        };
        Ok(Observation {
            frames,
            proprio,
            progress: Some(run.status.progress),
        })
    }

    /// The scripted expert's action for the current state, with Gaussian
    /// noise of standard deviation `noise_std` added to every dimension
    /// (then clipped to [-1, 1]).
    pub fn expert_action<R: Rng + ?Sized>(
        &mut self,
        noise_std: f32,
        rng: &mut R,
    ) -> Result<Action> {
        let run = self.run.as_ref().ok_or(SimError::NotReset)?;
        let a = self
            .expert
            .act(&run.world, run.task, &run.status.holds, &self.cfg);
        add_noise(&a, noise_std, rng)
    }

    /// Goal status after the last reset or step.
    pub fn status(&self) -> Result<&GoalStatus> {
        Ok(&self.running()?.status)
    }

    /// The running task.
    pub fn task(&self) -> Result<&'static Task> {
        Ok(self.running()?.task)
    }

    /// The physics world (privileged state).
    pub fn world(&self) -> Result<&World> {
        Ok(&self.running()?.world)
    }

    /// Mutable physics world, for hand-placed scenes: call
    /// [`TabletopEnv::refresh`] after moving things.
    pub fn world_mut(&mut self) -> Result<&mut World> {
        Ok(&mut self.run.as_mut().ok_or(SimError::NotReset)?.world)
    }

    /// Re-evaluate the goals after the world was changed by hand.
    pub fn refresh(&mut self) -> Result<&GoalStatus> {
        let run = self.run.as_mut().ok_or(SimError::NotReset)?;
        run.status = evaluate(&run.world, run.task, &run.init_joints);
        Ok(&run.status)
    }

    /// Control steps taken since the reset.
    pub fn steps(&self) -> Result<usize> {
        Ok(self.running()?.t)
    }
}

/// Per object: whether its switch is on (stove burners glow).
fn switched_on(world: &World) -> Vec<bool> {
    world
        .objects
        .iter()
        .enumerate()
        .map(
            |(i, o)| match (&o.kind.articulation, world.joint_value(i)) {
                (Some(a), Some(v)) if a.name == "knob" => v > a.open_tol,
                _ => false,
            },
        )
        .collect()
}

impl Environment for TabletopEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, request: ResetRequest) -> wmrl_env::Result<Observation> {
        self.spec.check_reset(&request)?;
        let init = self.init_state(request.task, request.init_state)?;
        Ok(self.reset_to(request.task, &init)?)
    }

    fn step(&mut self, action: &Action) -> wmrl_env::Result<StepResult> {
        self.step_with(action, true)
    }

    /// Renders the cameras only when `observe` is true or the episode ends
    /// here; the physics is the same either way.
    fn step_with(&mut self, action: &Action, observe: bool) -> wmrl_env::Result<StepResult> {
        let a = self.spec.sanitize_action(action)?;
        let cfg = self.cfg.clone();
        let run = self.run.as_mut().ok_or(SimError::NotReset)?;
        if run.ended {
            return Err(SimError::NotReset.into());
        }
        run.world.control(&a, &cfg);
        run.t += 1;
        run.status = evaluate(&run.world, run.task, &run.init_joints);
        let success = run.status.success;
        let truncated = !success && run.t >= cfg.max_steps;
        run.ended = success || truncated;
        let obs = if observe || run.ended {
            self.observe()?
        } else {
            self.observe_blind()?
        };
        Ok(StepResult {
            obs,
            reward: if success { 1.0 } else { 0.0 },
            success,
            done: success,
            truncated,
        })
    }
}

/// `n` instances stepped in parallel with rayon, rendering on `gpu` (the
/// CPU when `None`; [`TabletopEnv::on`]).
pub fn make_vec_env(
    cfg: &SimConfig,
    n: usize,
    gpu: Option<&Arc<crate::gpu::Gpu>>,
) -> Result<LocalVecEnv<TabletopEnv>> {
    let envs = (0..n)
        .map(|_| TabletopEnv::new(cfg.clone()).map(|e| e.on(gpu.cloned())))
        .collect::<Result<Vec<_>>>()?;
    Ok(LocalVecEnv::new(envs)?)
}

/// `action` plus N(0, std) per dimension, clipped to [-1, 1] (unchanged when
/// `std <= 0`): the expert's action noise and the DART perturbation.
pub(crate) fn add_noise<R: Rng + ?Sized>(action: &[f32], std: f32, rng: &mut R) -> Result<Action> {
    let mut out: Action = action.to_vec();
    if std > 0.0 {
        let n = Normal::new(0.0f32, std)
            .map_err(|e| SimError::Config(format!("noise_std {std}: {e}")))?;
        for v in &mut out {
            *v = (*v + n.sample(rng)).clamp(-1.0, 1.0);
        }
    }
    Ok(out)
}
