//! Task definitions: the ten LIBERO-10 tasks, read from the TOML files in
//! `envs/tabletop/` (embedded with `include_str!` so the binary runs from
//! anywhere), their goal predicates, and their seeded initial states.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::catalog::{self, Kind};
use crate::{Result, SimError};

/// The task files in LIBERO-10 index order.
const TASK_FILES: [(&str, &str); 10] = [
    (
        "00_soup_sauce_basket.toml",
        include_str!("../../../envs/tabletop/00_soup_sauce_basket.toml"),
    ),
    (
        "01_cheese_butter_basket.toml",
        include_str!("../../../envs/tabletop/01_cheese_butter_basket.toml"),
    ),
    (
        "02_stove_moka.toml",
        include_str!("../../../envs/tabletop/02_stove_moka.toml"),
    ),
    (
        "03_bowl_drawer.toml",
        include_str!("../../../envs/tabletop/03_bowl_drawer.toml"),
    ),
    (
        "04_mugs_plates.toml",
        include_str!("../../../envs/tabletop/04_mugs_plates.toml"),
    ),
    (
        "05_book_caddy.toml",
        include_str!("../../../envs/tabletop/05_book_caddy.toml"),
    ),
    (
        "06_mug_pudding_plate.toml",
        include_str!("../../../envs/tabletop/06_mug_pudding_plate.toml"),
    ),
    (
        "07_soup_cheese_basket.toml",
        include_str!("../../../envs/tabletop/07_soup_cheese_basket.toml"),
    ),
    (
        "08_two_moka_stove.toml",
        include_str!("../../../envs/tabletop/08_two_moka_stove.toml"),
    ),
    (
        "09_mug_microwave.toml",
        include_str!("../../../envs/tabletop/09_mug_microwave.toml"),
    ),
];

/// One object of a task's scene, as written in the task file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectDef {
    /// Name the goals refer to.
    pub name: String,
    /// Catalog kind; defaults to `name`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Nominal position of the footprint centre on the table (m).
    pub xy: [f32; 2],
    #[serde(default)]
    pub yaw: f32,
    /// Uniform jitter of x and y per initial state (m). Default 0.03 for
    /// free objects, 0.015 for furniture.
    #[serde(default)]
    pub jitter: Option<f32>,
    /// Uniform yaw jitter (rad). Default 0.35 for free objects, 0 for furniture.
    #[serde(default)]
    pub yaw_jitter: Option<f32>,
    /// Initial value of the object's articulation (drawer opening in m, door
    /// or knob angle in rad); the catalog default when absent.
    #[serde(default)]
    pub joint: Option<f32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    index: usize,
    name: String,
    instruction: String,
    goal: Vec<String>,
    objects: Vec<ObjectDef>,
    /// Rectangles `[x0, y0, x1, y1]` where no free object may start
    /// (a door's swing, an open drawer).
    #[serde(default)]
    keep_out: Vec<[f32; 4]>,
}

/// A goal predicate over named objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Predicate {
    /// `obj` rests inside `region` of `target` (released).
    In {
        obj: String,
        target: String,
        region: String,
    },
    /// `obj` rests on `region` of `target` (released).
    On {
        obj: String,
        target: String,
        region: String,
    },
    /// `obj` rests on the table right of `reference` (+x), roughly level.
    RightOf { obj: String, reference: String },
    /// The articulation of `target` is open.
    Open { target: String },
    /// The articulation of `target` is closed.
    Closed { target: String },
    /// The switch of `target` is on.
    TurnedOn { target: String },
}

impl std::fmt::Display for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::In {
                obj,
                target,
                region,
            } => write!(f, "In({obj}, {target}.{region})"),
            Self::On {
                obj,
                target,
                region,
            } => write!(f, "On({obj}, {target}.{region})"),
            Self::RightOf { obj, reference } => write!(f, "RightOf({obj}, {reference})"),
            Self::Open { target } => write!(f, "Open({target})"),
            Self::Closed { target } => write!(f, "Closed({target})"),
            Self::TurnedOn { target } => write!(f, "TurnedOn({target})"),
        }
    }
}

/// A task: scene, instruction, goal.
#[derive(Debug, Clone)]
pub struct Task {
    pub index: usize,
    pub name: String,
    pub instruction: String,
    /// Goal predicates, all of which must hold at once; their order is also
    /// the scripted expert's plan.
    pub goal: Vec<Predicate>,
    pub objects: Vec<ObjectDef>,
    /// Catalog kinds of `objects`, same order.
    pub kinds: Vec<Kind>,
    pub keep_out: Vec<[f32; 4]>,
}

impl Task {
    /// Index of the object called `name`.
    pub fn object_index(&self, name: &str) -> Option<usize> {
        self.objects.iter().position(|o| o.name == name)
    }
}

/// Where every object of a task starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitState {
    /// `(x, y, yaw)` per object, in task-file order.
    pub poses: Vec<[f32; 3]>,
    /// Articulation value per object (0 where it has none).
    pub joints: Vec<f32>,
}

fn parse_predicate(
    file: &str,
    text: &str,
    objects: &[ObjectDef],
    kinds: &[Kind],
) -> Result<Predicate> {
    let err = |m: String| SimError::TaskFile {
        file: file.into(),
        message: format!("goal {text:?}: {m}"),
    };
    let text = text.trim();
    let open = text
        .find('(')
        .ok_or_else(|| err("expected Name(args)".into()))?;
    if !text.ends_with(')') {
        return Err(err("expected a closing parenthesis".into()));
    }
    let head = text[..open].trim();
    let args: Vec<&str> = text[open + 1..text.len() - 1]
        .split(',')
        .map(str::trim)
        .collect();
    let lookup = |name: &str| -> Result<usize> {
        objects
            .iter()
            .position(|o| o.name == name)
            .ok_or_else(|| err(format!("no object called {name:?}")))
    };
    let want = |n: usize| -> Result<()> {
        if args.len() == n && args.iter().all(|a| !a.is_empty()) {
            Ok(())
        } else {
            Err(err(format!("{head} takes {n} arguments")))
        }
    };
    let target_region = |arg: &str| -> Result<(String, String)> {
        let (t, r) = match arg.split_once('.') {
            Some((t, r)) => (t, Some(r)),
            None => (arg, None),
        };
        let k = &kinds[lookup(t)?];
        let region = match r {
            Some(r) => k
                .region(r)
                .ok_or_else(|| err(format!("{t} has no region {r:?}")))?,
            None => k
                .regions
                .first()
                .ok_or_else(|| err(format!("{t} has no region")))?,
        };
        Ok((t.to_string(), region.name.to_string()))
    };
    let articulated = |t: &str| -> Result<String> {
        if kinds[lookup(t)?].articulation.is_none() {
            return Err(err(format!("{t} has no articulation")));
        }
        Ok(t.to_string())
    };
    let graspable = |o: &str| -> Result<String> {
        if !kinds[lookup(o)?].graspable {
            return Err(err(format!("{o} cannot be picked up")));
        }
        Ok(o.to_string())
    };
    Ok(match head {
        "In" | "On" => {
            want(2)?;
            let obj = graspable(args[0])?;
            let (target, region) = target_region(args[1])?;
            if head == "In" {
                Predicate::In {
                    obj,
                    target,
                    region,
                }
            } else {
                Predicate::On {
                    obj,
                    target,
                    region,
                }
            }
        }
        "RightOf" => {
            want(2)?;
            lookup(args[1])?;
            Predicate::RightOf {
                obj: graspable(args[0])?,
                reference: args[1].to_string(),
            }
        }
        "Open" => {
            want(1)?;
            Predicate::Open {
                target: articulated(args[0])?,
            }
        }
        "Closed" => {
            want(1)?;
            Predicate::Closed {
                target: articulated(args[0])?,
            }
        }
        "TurnedOn" => {
            want(1)?;
            Predicate::TurnedOn {
                target: articulated(args[0])?,
            }
        }
        other => return Err(err(format!("unknown predicate {other:?}"))),
    })
}

/// Parse one task file's text.
pub fn parse_task(file: &str, text: &str) -> Result<Task> {
    let tf: TaskFile = toml::from_str(text).map_err(|e| SimError::TaskFile {
        file: file.into(),
        message: e.to_string(),
    })?;
    let mut kinds = Vec::with_capacity(tf.objects.len());
    for (i, o) in tf.objects.iter().enumerate() {
        let kname = o.kind.as_deref().unwrap_or(&o.name);
        let k = catalog::kind(kname).ok_or_else(|| SimError::TaskFile {
            file: file.into(),
            message: format!("object {:?}: unknown kind {kname:?}", o.name),
        })?;
        if tf.objects[..i].iter().any(|p| p.name == o.name) {
            return Err(SimError::TaskFile {
                file: file.into(),
                message: format!("object name {:?} used twice", o.name),
            });
        }
        kinds.push(k);
    }
    let goal = tf
        .goal
        .iter()
        .map(|g| parse_predicate(file, g, &tf.objects, &kinds))
        .collect::<Result<Vec<_>>>()?;
    if goal.is_empty() {
        return Err(SimError::TaskFile {
            file: file.into(),
            message: "a task needs at least one goal predicate".into(),
        });
    }
    Ok(Task {
        index: tf.index,
        name: tf.name,
        instruction: tf.instruction,
        goal,
        objects: tf.objects,
        kinds,
        keep_out: tf.keep_out,
    })
}

/// The ten LIBERO-10 tasks, in index order, parsed from the embedded files.
pub fn tasks() -> Result<Vec<Task>> {
    let mut out = Vec::with_capacity(TASK_FILES.len());
    for (i, (file, text)) in TASK_FILES.iter().enumerate() {
        let t = parse_task(file, text)?;
        if t.index != i {
            return Err(SimError::TaskFile {
                file: (*file).into(),
                message: format!("index {} but listed at position {i}", t.index),
            });
        }
        out.push(t);
    }
    Ok(out)
}

/// The deterministic initial state `init` of `task`: nominal layout plus a
/// seeded jitter, resampled until free objects keep clear of each other and
/// of the task's keep-out areas (falling back to the nominal pose).
pub fn init_state(task: &Task, init: usize) -> InitState {
    let seed = 0x7AB1_E700_u64 ^ ((task.index as u64) << 32) ^ init as u64;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut poses: Vec<[f32; 3]> = Vec::with_capacity(task.objects.len());
    for (o, k) in task.objects.iter().zip(&task.kinds) {
        let (dj, dyaw) = if k.fixed || !k.graspable {
            (o.jitter.unwrap_or(0.015), o.yaw_jitter.unwrap_or(0.0))
        } else {
            (o.jitter.unwrap_or(0.03), o.yaw_jitter.unwrap_or(0.35))
        };
        let nominal = [o.xy[0], o.xy[1], o.yaw];
        let mut chosen = nominal;
        for _ in 0..64 {
            let cand = [
                o.xy[0] + rng.random_range(-1.0f32..=1.0) * dj,
                o.xy[1] + rng.random_range(-1.0f32..=1.0) * dj,
                o.yaw + rng.random_range(-1.0f32..=1.0) * dyaw,
            ];
            if clear(task, &poses, k, &cand) {
                chosen = cand;
                break;
            }
        }
        poses.push(chosen);
    }
    let joints = task
        .objects
        .iter()
        .zip(&task.kinds)
        .map(|(o, k)| match &k.articulation {
            Some(a) => o.joint.unwrap_or(a.default_value),
            None => 0.0,
        })
        .collect();
    InitState { poses, joints }
}

fn clear(task: &Task, placed: &[[f32; 3]], k: &Kind, p: &[f32; 3]) -> bool {
    let apart = placed.iter().zip(&task.kinds).all(|(q, kq)| {
        let d = ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)).sqrt();
        d >= k.footprint + kq.footprint + 0.01
    });
    let outside = !k.graspable
        || task.keep_out.iter().all(|r| {
            let m = k.footprint;
            p[0] + m < r[0] || p[0] - m > r[2] || p[1] + m < r[1] || p[1] - m > r[3]
        });
    let on_table = p[0].abs() < 0.42 && p[1].abs() < 0.32;
    apart && outside && on_table
}
