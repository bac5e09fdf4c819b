//! The scripted expert: a phase-based waypoint controller with privileged
//! state. It works down the task's goal list in order; for each goal it picks
//! the phase from the current state (approach, descend, close, lift, carry,
//! lower, release; or approach and push for drawers, doors and switches), so
//! it recovers from perturbations such as action noise. Its actions are
//! smooth (a proportional step towards the waypoint, saturated) and use the
//! same 7-D interface as any policy.

use std::f32::consts::{FRAC_PI_2, PI};

use rapier3d::math::{Pose, Vec3};

use crate::catalog::{JointKind, v3};
use crate::config::SimConfig;
use crate::predicates::{place_target, region_frame};
use crate::task::{Predicate, Task};
use crate::world::World;

/// Grasp-point height for moving over the scene with an empty hand (m).
const HOVER_Z: f32 = 0.22;
/// Height of a carried object's bottom while moving over the scene (m).
const CARRY_BOTTOM: f32 = 0.13;
/// Proportional gain of the waypoint tracker (fraction of the error per step).
const GAIN: f32 = 0.8;

/// Expert memory between steps (small: the phase comes from the state).
#[derive(Debug, Clone, Default)]
pub struct Expert {
    reopening: bool,
}

fn wrap_pi(a: f32) -> f32 {
    let mut a = a % (2.0 * PI);
    if a > PI {
        a -= 2.0 * PI;
    } else if a < -PI {
        a += 2.0 * PI;
    }
    a
}

/// `a` wrapped to [-pi/2, pi/2]: grasps are symmetric under a half turn.
fn wrap_half(a: f32) -> f32 {
    let mut a = wrap_pi(a);
    if a > FRAC_PI_2 {
        a -= PI;
    } else if a < -FRAC_PI_2 {
        a += PI;
    }
    a
}

fn yaw_of(p: &Pose) -> f32 {
    let x = p.rotation * Vec3::X;
    x.y.atan2(x.x)
}

fn dist_xy(a: Vec3, b: Vec3) -> f32 {
    (a.x - b.x).hypot(a.y - b.y)
}

impl Expert {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget the current episode.
    pub fn reset(&mut self) {
        self.reopening = false;
    }

    /// The expert's action for the current state (before noise).
    pub fn act(&mut self, world: &World, task: &Task, holds: &[bool], cfg: &SimConfig) -> [f32; 7] {
        let g = &world.gripper;
        let Some(goal) = holds.iter().position(|h| !h) else {
            return track(world, g.pos, g.yaw(), -1.0, cfg);
        };
        match &task.goal[goal] {
            Predicate::In { obj, .. }
            | Predicate::On { obj, .. }
            | Predicate::RightOf { obj, .. } => {
                let i = task.object_index(obj).unwrap_or(0);
                if g.held == Some(i) {
                    self.reopening = false;
                    self.carry(world, task, goal, i, cfg)
                } else {
                    self.pick(world, task, i, cfg)
                }
            }
            Predicate::Closed { target }
            | Predicate::Open { target }
            | Predicate::TurnedOn { target } => {
                let t = task.object_index(target).unwrap_or(0);
                self.push(world, task, t, cfg)
            }
        }
    }

    fn pick(&mut self, world: &World, task: &Task, i: usize, cfg: &SimConfig) -> [f32; 7] {
        let g = &world.gripper;
        if g.held.is_some() {
            return track(world, g.pos + Vec3::Z * 0.02, g.yaw(), -1.0, cfg);
        }
        if let Some(out) = exit_cavity(world, task, cfg) {
            return out;
        }
        let (lo, hi) = world.bounds(i);
        let c = (lo + hi) * 0.5;
        let grasp = Vec3::new(c.x, c.y, (hi.z - 0.025).max(0.022));
        let kind = &world.objects[i].kind;
        let (half, round) = kind.grasp_box();
        let want = if round {
            0.0
        } else {
            let oy = yaw_of(&world.pose(i));
            if half[0] <= half[1] {
                oy
            } else {
                oy + FRAC_PI_2
            }
        };
        let yaw = g.yaw() + wrap_half(want - g.yaw());
        let dxy = dist_xy(g.pos, grasp);
        if self.reopening {
            if g.closure <= 0.0 {
                self.reopening = false;
            }
            return track(world, grasp + Vec3::Z * 0.03, yaw, -1.0, cfg);
        }
        if g.closure >= 1.0 {
            self.reopening = true;
            return track(world, grasp + Vec3::Z * 0.03, yaw, -1.0, cfg);
        }
        if dxy > 0.012 || (g.pos.z > grasp.z + 0.05 && wrap_half(yaw - g.yaw()).abs() > 0.08) {
            let target = if g.pos.z < HOVER_Z - 0.03 && dxy > 0.03 {
                Vec3::new(g.pos.x, g.pos.y, HOVER_Z)
            } else {
                Vec3::new(grasp.x, grasp.y, HOVER_Z.max(g.pos.z.min(HOVER_Z + 0.05)))
            };
            return track(world, target, yaw, -1.0, cfg);
        }
        // Close when at the grasp point; once closing, keep closing while the
        // hand stays near it (hysteresis against noisy actions).
        let err = (g.pos - grasp).length();
        if g.closure > 0.0 && err < 0.025 {
            return track(world, grasp, yaw, 1.0, cfg);
        }
        if g.closure > 0.0 {
            return track(world, Vec3::new(grasp.x, grasp.y, g.pos.z), yaw, -1.0, cfg);
        }
        track(world, grasp, yaw, if err < 0.01 { 1.0 } else { -1.0 }, cfg)
    }

    fn carry(
        &mut self,
        world: &World,
        task: &Task,
        goal: usize,
        i: usize,
        cfg: &SimConfig,
    ) -> [f32; 7] {
        let g = &world.gripper;
        let Some((p, place_yaw)) = place_target(world, task, goal) else {
            return track(world, g.pos, g.yaw(), -1.0, cfg);
        };
        let (lo, hi) = world.bounds(i);
        let oc = (lo + hi) * 0.5;
        let bottom = lo.z;
        let off = Vec3::new(g.pos.x - oc.x, g.pos.y - oc.y, 0.0);
        let drop = g.pos.z - bottom;
        let yaw = match place_yaw {
            Some(y) => g.yaw() + wrap_half(y - yaw_of(&world.pose(i))),
            None => g.yaw(),
        };
        let place_bottom = match &task.goal[goal] {
            Predicate::In { .. } => p.z + 0.012,
            _ => p.z + 0.006,
        };
        let carry = CARRY_BOTTOM.max(p.z + 0.1);
        let front = match &task.goal[goal] {
            Predicate::In { target, region, .. } => {
                let t = task.object_index(target).unwrap_or(0);
                task.kinds[t]
                    .region(region)
                    .filter(|r| r.front_entry)
                    .map(|r| region_frame(world, t, r))
            }
            _ => None,
        };
        let lift_or_go = |dest: Vec3| {
            let d = dist_xy(oc, dest);
            if bottom < carry - 0.03 && d > 0.03 {
                Vec3::new(g.pos.x, g.pos.y, carry + drop)
            } else {
                Vec3::new(dest.x + off.x, dest.y + off.y, carry + drop)
            }
        };
        if let Some(f) = front {
            // Enter through the front opening at placing height.
            let pl = f.inverse_transform_point(p);
            let ol = f.inverse_transform_point(oc);
            let level = (bottom - place_bottom).abs() < 0.012;
            if level && (ol.x - pl.x).abs() < 0.02 && ol.y > pl.y - 0.35 {
                if ol.y < pl.y - 0.008 {
                    let t = Vec3::new(p.x + off.x, p.y + off.y, place_bottom + drop);
                    return track(world, t, yaw, 1.0, cfg);
                }
                return track(world, g.pos, yaw, -1.0, cfg);
            }
            let entry = f.transform_point(Vec3::new(pl.x, pl.y - 0.3, 0.0));
            if dist_xy(oc, entry) > 0.012 {
                return track(world, lift_or_go(entry), yaw, 1.0, cfg);
            }
            let t = Vec3::new(entry.x + off.x, entry.y + off.y, place_bottom + drop);
            return track(world, t, yaw, 1.0, cfg);
        }
        if dist_xy(oc, p) > 0.012 || wrap_half(yaw - g.yaw()).abs() > 0.08 {
            return track(world, lift_or_go(p), yaw, 1.0, cfg);
        }
        let t = Vec3::new(p.x + off.x, p.y + off.y, place_bottom + drop);
        let release = (bottom - place_bottom).abs() < 0.01;
        track(world, t, yaw, if release { -1.0 } else { 1.0 }, cfg)
    }

    /// Drive an articulation: push a drawer shut, swing a door shut, or push
    /// a switch lever to the right.
    fn push(&mut self, world: &World, task: &Task, t: usize, cfg: &SimConfig) -> [f32; 7] {
        let g = &world.gripper;
        let Some(a) = world.objects[t].kind.articulation.as_ref() else {
            return track(world, g.pos, g.yaw(), -1.0, cfg);
        };
        if let Some(out) = exit_cavity(world, task, cfg) {
            return out;
        }
        let base = world.pose(t);
        let v = world.joint_value(t).unwrap_or(0.0);
        let byaw = yaw_of(&base);
        let (pre, push_to, in_corridor, yaw) = match (a.joint, a.name) {
            (JointKind::Prismatic, _) => {
                // Drawer: push its front face back to the closed position.
                let face_local = v3(a.anchor) + Vec3::new(0.0, -0.114, 0.0);
                let face = base.transform_point(face_local + v3(a.axis) * v);
                let closed = base.transform_point(face_local);
                let back = base.rotation * Vec3::Y;
                let z = 0.06;
                let pre = Vec3::new(face.x, face.y, z) - back * 0.055;
                let to = Vec3::new(closed.x, closed.y, z) - back * 0.027;
                let rel = g.pos - face;
                let across = rel - back * rel.dot(back);
                let inside = across.x.hypot(across.y) < 0.015
                    && (g.pos.z - z).abs() < 0.012
                    && rel.dot(back) <= -0.015
                    && rel.dot(back) > -0.08;
                (pre, to, inside, byaw)
            }
            (JointKind::Revolute, "door") => {
                let hinge = base.transform_point(v3(a.anchor));
                let dir = |th: f32| base.rotation * Vec3::new(th.cos(), th.sin(), 0.0);
                let nrm = |th: f32| base.rotation * Vec3::new(-th.sin(), th.cos(), 0.0);
                let (r, z) = (0.17, 0.11);
                let at = |th: f32, gap: f32| {
                    let p = hinge + dir(th) * r - nrm(th) * gap;
                    Vec3::new(p.x, p.y, z)
                };
                let pre = at(v, 0.07);
                let ahead = (v + 0.3).min(0.02);
                let to = at(ahead, 0.035);
                let rel = g.pos - hinge;
                let s = rel.dot(dir(v));
                let m = rel.dot(nrm(v));
                let inside = (0.08..0.27).contains(&s)
                    && (-0.095..-0.02).contains(&m)
                    && (g.pos.z - z).abs() < 0.015;
                let d = dir(ahead);
                (pre, to, inside, d.y.atan2(d.x))
            }
            _ => {
                // Switch lever: push it towards +x of its owner.
                let pivot = base.transform_point(v3(a.anchor));
                let x = base.rotation * Vec3::X;
                let z = pivot.z + 0.045;
                let pre = Vec3::new(pivot.x, pivot.y, z) - x * 0.045;
                let to = Vec3::new(pivot.x, pivot.y, z) + x * 0.06;
                let rel = g.pos - pivot;
                let along = rel.dot(x);
                let across = (rel - x * along).truncate_z();
                let inside =
                    across < 0.012 && (g.pos.z - z).abs() < 0.012 && (-0.06..0.08).contains(&along);
                (pre, to, inside, byaw)
            }
        };
        let yaw = g.yaw() + wrap_half(yaw - g.yaw());
        if in_corridor {
            return track(world, push_to, yaw, 1.0, cfg);
        }
        let d = dist_xy(g.pos, pre);
        let target = if d > 0.012 {
            if g.pos.z < HOVER_Z - 0.03 && d > 0.03 {
                Vec3::new(g.pos.x, g.pos.y, HOVER_Z)
            } else {
                Vec3::new(pre.x, pre.y, HOVER_Z.max(g.pos.z.min(HOVER_Z + 0.05)))
            }
        } else {
            pre
        };
        track(world, target, yaw, 1.0, cfg)
    }
}

trait TruncZ {
    fn truncate_z(self) -> f32;
}

impl TruncZ for Vec3 {
    /// Length of the horizontal part.
    fn truncate_z(self) -> f32 {
        self.x.hypot(self.y)
    }
}

/// If the grasp point is inside a front-entry cavity (a microwave), back out.
fn exit_cavity(world: &World, task: &Task, cfg: &SimConfig) -> Option<[f32; 7]> {
    let g = &world.gripper;
    for (t, k) in task.kinds.iter().enumerate() {
        for r in k.regions.iter().filter(|r| r.front_entry) {
            let f = region_frame(world, t, r);
            let l = f.inverse_transform_point(g.pos);
            if l.x.abs() < r.half[0] + 0.05
                && l.y > -r.half[1] - 0.06
                && l.y < r.half[1]
                && l.z < r.height
            {
                let out = f.transform_point(Vec3::new(l.x, -r.half[1] - 0.15, l.z));
                return Some(track(world, out, g.yaw(), -1.0, cfg));
            }
        }
    }
    None
}

/// A saturated proportional step towards `target` with heading `yaw`,
/// keeping the gripper pointing down.
fn track(world: &World, target: Vec3, yaw: f32, grip: f32, cfg: &SimConfig) -> [f32; 7] {
    let g = &world.gripper;
    let mut dp = (target - g.pos) * (GAIN / cfg.max_delta_pos_m);
    let m = dp.abs().max_element();
    if m > 1.0 {
        dp /= m;
    }
    let down = g.rot * Vec3::NEG_Z;
    let axis = down.cross(Vec3::NEG_Z);
    let tilt = down.dot(Vec3::NEG_Z).clamp(-1.0, 1.0).acos();
    let rv = if axis.length() > 1e-6 {
        axis.normalize() * tilt
    } else {
        Vec3::ZERO
    };
    let k = GAIN / cfg.max_delta_rot_rad;
    let dyaw = wrap_pi(yaw - g.yaw());
    let r = [
        (rv.x * k).clamp(-1.0, 1.0),
        (rv.y * k).clamp(-1.0, 1.0),
        (dyaw * k).clamp(-1.0, 1.0),
    ];
    [dp.x, dp.y, dp.z, r[0], r[1], r[2], grip]
}
