//! Goal predicates, the success check and the progress oracle.
//!
//! Progress is the fraction of goal sub-steps achieved: a placement goal
//! (In, On, RightOf) has three (object grasped, object carried to within
//! 6 cm of its target, goal holds), an articulation goal (Open, Closed,
//! TurnedOn) has two (moved half way, goal holds). A goal that holds counts
//! all its sub-steps. Success is every goal holding at once, as in LIBERO.

use rapier3d::math::{Pose, Vec3};

use crate::catalog::{Region, v3};
use crate::task::{Predicate, Task};
use crate::world::World;

/// The world-frame pose of `region` of object `i` (its floor centre frame).
pub fn region_frame(world: &World, i: usize, region: &Region) -> Pose {
    let owner = if region.on_part {
        world.part_pose(i).unwrap_or_else(|| world.pose(i))
    } else {
        world.pose(i)
    };
    owner * Pose::from_translation(v3(region.centre))
}

fn idx(task: &Task, name: &str) -> usize {
    // Names were checked when the task file was parsed.
    task.object_index(name).unwrap_or(0)
}

fn centre(world: &World, i: usize) -> Vec3 {
    let (lo, hi) = world.bounds(i);
    (lo + hi) * 0.5
}

fn held(world: &World, i: usize) -> bool {
    world.gripper.held == Some(i)
}

fn region_of<'a>(task: &'a Task, target: &str, region: &str) -> Option<(usize, &'a Region)> {
    let t = idx(task, target);
    task.kinds[t].region(region).map(|r| (t, r))
}

/// Where goal `g` wants its object: a world point on the target surface (for
/// In/On/RightOf) and the object yaw the region asks for.
pub fn place_target(world: &World, task: &Task, g: usize) -> Option<(Vec3, Option<f32>)> {
    match &task.goal[g] {
        Predicate::In { target, region, .. } | Predicate::On { target, region, .. } => {
            let (t, r) = region_of(task, target, region)?;
            let slot = task.goal[..g]
                .iter()
                .filter(|p| match p {
                    Predicate::In {
                        target: t2,
                        region: r2,
                        ..
                    }
                    | Predicate::On {
                        target: t2,
                        region: r2,
                        ..
                    } => t2 == target && r2 == region,
                    _ => false,
                })
                .count();
            let s = r.slots.get(slot.min(r.slots.len().saturating_sub(1)))?;
            let f = region_frame(world, t, r);
            let offset = Vec3::new(s[0] - r.centre[0], s[1] - r.centre[1], 0.0);
            let owner_yaw = {
                let x = world.pose(t).rotation * Vec3::X;
                x.y.atan2(x.x)
            };
            Some((
                f.transform_point(offset),
                r.place_yaw.map(|y| y + owner_yaw),
            ))
        }
        Predicate::RightOf { reference, .. } => {
            let r = idx(task, reference);
            let (lo, hi) = world.bounds(r);
            let c = (lo + hi) * 0.5;
            Some((Vec3::new(hi.x + 0.1, c.y, 0.0), None))
        }
        _ => None,
    }
}

fn in_region(world: &World, i: usize, t: usize, r: &Region, on: bool) -> bool {
    let f = region_frame(world, t, r);
    let c = f.inverse_transform_point(centre(world, i));
    let xy = c.x.abs() <= r.half[0] && c.y.abs() <= r.half[1];
    if on {
        let bottom = world.bounds(i).0.z;
        let d = bottom - f.translation.z;
        xy && (-0.015..=0.025).contains(&d)
    } else {
        xy && c.z >= -0.01 && c.z <= r.height
    }
}

/// Whether predicate `p` holds now.
pub fn holds(world: &World, task: &Task, p: &Predicate) -> bool {
    match p {
        Predicate::In {
            obj,
            target,
            region,
        }
        | Predicate::On {
            obj,
            target,
            region,
        } => {
            let i = idx(task, obj);
            let Some((t, r)) = region_of(task, target, region) else {
                return false;
            };
            !held(world, i) && in_region(world, i, t, r, matches!(p, Predicate::On { .. }))
        }
        Predicate::RightOf { obj, reference } => {
            let i = idx(task, obj);
            let r = idx(task, reference);
            let (rlo, rhi) = world.bounds(r);
            let rc = (rlo + rhi) * 0.5;
            let rh = 0.5 * (rhi.x - rlo.x);
            let c = centre(world, i);
            let dx = c.x - rc.x;
            !held(world, i)
                && dx > rh + 0.02
                && dx < rh + 0.2
                && (c.y - rc.y).abs() < 0.08
                && world.bounds(i).0.z < 0.01
        }
        Predicate::Open { target }
        | Predicate::Closed { target }
        | Predicate::TurnedOn { target } => {
            let t = idx(task, target);
            let (Some(v), Some(a)) = (world.joint_value(t), task.kinds[t].articulation.as_ref())
            else {
                return false;
            };
            match p {
                Predicate::Closed { .. } => v.abs() < a.closed_tol,
                Predicate::Open { .. } => v.abs() > a.open_tol,
                _ => v > a.open_tol,
            }
        }
    }
}

/// Achieved and total sub-steps of goal `g`, given the articulation values
/// at the start of the episode (`init_joints`, per object).
pub fn substeps(world: &World, task: &Task, g: usize, init_joints: &[f32]) -> (u32, u32) {
    let p = &task.goal[g];
    let sat = holds(world, task, p);
    match p {
        Predicate::In { obj, .. } | Predicate::On { obj, .. } | Predicate::RightOf { obj, .. } => {
            if sat {
                return (3, 3);
            }
            let i = idx(task, obj);
            if !held(world, i) {
                return (0, 3);
            }
            let near = place_target(world, task, g).is_some_and(|(pt, _)| {
                let c = centre(world, i);
                (c.x - pt.x).hypot(c.y - pt.y) < 0.06
            });
            (1 + u32::from(near), 3)
        }
        Predicate::Open { target }
        | Predicate::Closed { target }
        | Predicate::TurnedOn { target } => {
            if sat {
                return (2, 2);
            }
            let t = idx(task, target);
            let (Some(v), Some(a)) = (world.joint_value(t), task.kinds[t].articulation.as_ref())
            else {
                return (0, 2);
            };
            let v0 = init_joints.get(t).copied().unwrap_or(0.0);
            let half = match p {
                Predicate::Closed { .. } => v.abs() < 0.5 * v0.abs(),
                _ => v.abs() > 0.5 * a.open_tol,
            };
            (u32::from(half), 2)
        }
    }
}

/// Success and progress of the whole task.
#[derive(Debug, Clone, PartialEq)]
pub struct GoalStatus {
    /// Whether each goal predicate holds, in goal order.
    pub holds: Vec<bool>,
    pub success: bool,
    /// Oracle progress in [0, 1].
    pub progress: f32,
}

pub fn evaluate(world: &World, task: &Task, init_joints: &[f32]) -> GoalStatus {
    let holds: Vec<bool> = task.goal.iter().map(|p| holds(world, task, p)).collect();
    let (mut a, mut t) = (0u32, 0u32);
    for g in 0..task.goal.len() {
        let (x, y) = substeps(world, task, g, init_joints);
        a += x;
        t += y;
    }
    GoalStatus {
        success: holds.iter().all(|h| *h),
        holds,
        progress: if t == 0 { 0.0 } else { a as f32 / t as f32 },
    }
}
