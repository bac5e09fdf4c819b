//! The physical world of one episode: rapier3d bodies for the table, the
//! objects and their articulated parts (real prismatic and revolute joints),
//! and the end effector.
//!
//! The end effector is a kinematic body (palm and two fingers) driven like
//! LIBERO's OSC_POSE controller: each control step moves it by the commanded
//! delta, interpolated over the physics substeps. Grasping is a documented
//! simplification: when the closing fingers reach a graspable object between
//! them, the object is attached to the gripper (made kinematic and carried
//! rigidly) until the gripper opens; it then becomes dynamic again and falls,
//! stacks and collides as usual. The palm pushes free objects and
//! articulated parts; the fingers push articulated parts only (drawer fronts,
//! doors, switch levers), so an approach never knocks the target away.
//! This module must never read task goals: it is physics only.

use std::f32::consts::FRAC_PI_2;

use rapier3d::prelude::*;

use crate::catalog::{Articulation, JointKind, Kind, Part, Shape, v3};
use crate::config::SimConfig;
use crate::task::{InitState, Task};

const G_STATIC: Group = Group::GROUP_1;
const G_OBJ: Group = Group::GROUP_2;
const G_ARTIC: Group = Group::GROUP_3;
const G_PALM: Group = Group::GROUP_4;
const G_FINGER: Group = Group::GROUP_5;

/// Widest finger opening (m).
pub const MAX_APERTURE: f32 = 0.11;
/// Fingers span this far below the grasp point...
pub const FINGER_BELOW: f32 = 0.02;
/// ...and this far above it; the palm starts there.
pub const FINGER_ABOVE: f32 = 0.03;
const FINGER_HALF: [f32; 3] = [0.006, 0.012, 0.025];
const PALM_HALF: [f32; 3] = [0.045, 0.022, 0.012];
/// Gripper closing speed: fraction of the full stroke per control step.
const GRIP_RATE: f32 = 0.25;
/// Largest tilt of the gripper from pointing straight down (rad).
const MAX_TILT: f32 = 0.5;
/// Workspace of the grasp point (m).
pub const WORKSPACE_LO: [f32; 3] = [-0.42, -0.35, 0.022];
pub const WORKSPACE_HI: [f32; 3] = [0.42, 0.38, 0.45];
/// Where every episode starts the grasp point.
pub const HOME: [f32; 3] = [0.0, -0.34, 0.17];

/// One object of the scene in the physics world.
#[derive(Debug, Clone)]
pub struct SimObject {
    pub name: String,
    pub kind: Kind,
    pub body: RigidBodyHandle,
    pub colliders: Vec<ColliderHandle>,
    /// The articulated part (drawer, door, knob), when the kind has one.
    pub part: Option<RigidBodyHandle>,
}

/// The end effector's commanded state.
#[derive(Debug, Clone)]
pub struct Gripper {
    /// Grasp point: between the finger pads.
    pub pos: Vec3,
    /// Orientation; identity points the fingers down with the closing axis
    /// along world x.
    pub rot: Rot3,
    /// Closing command state in [0, 1] (0 open).
    pub closure: f32,
    /// Index of the held object.
    pub held: Option<usize>,
    /// Pose of the held object in the gripper frame.
    held_rel: Pose,
    /// Width of the held object across the fingers.
    held_width: f32,
    body: RigidBodyHandle,
    fingers: [ColliderHandle; 2],
}

impl Gripper {
    /// Inner gap between the fingers (m).
    pub fn aperture(&self) -> f32 {
        match self.held {
            Some(_) => self.held_width,
            None => MAX_APERTURE * (1.0 - self.closure),
        }
    }

    pub fn pose(&self) -> Pose {
        Pose::from_parts(self.pos, self.rot)
    }

    /// Heading of the closing axis in the table plane (rad).
    pub fn yaw(&self) -> f32 {
        let x = self.rot * Vec3::X;
        x.y.atan2(x.x)
    }
}

/// The rapier world plus the scene's bookkeeping.
pub struct World {
    pub phys: PhysicsWorld,
    pub objects: Vec<SimObject>,
    pub gripper: Gripper,
    substeps: usize,
}

fn shape_collider(p: &Part) -> ColliderBuilder {
    let b = match p.shape {
        Shape::Box { half } => ColliderBuilder::cuboid(half[0], half[1], half[2]),
        Shape::Cyl { r, hh } => ColliderBuilder::cylinder(hh, r),
    };
    let rot = match p.shape {
        Shape::Box { .. } => Rot3::IDENTITY,
        // rapier cylinders run along y; ours along z.
        Shape::Cyl { .. } => Rot3::from_rotation_x(FRAC_PI_2),
    };
    b.position(Pose::from_parts(v3(p.offset), rot))
        .friction(1.0)
        .restitution(0.0)
}

fn groups(member: Group, filter: Group) -> InteractionGroups {
    InteractionGroups::new(member, filter, InteractionTestMode::And)
}

/// Pose of an articulated part at joint value `v`, in the owner's frame.
pub fn part_local_pose(a: &Articulation, v: f32) -> Pose {
    let axis = v3(a.axis);
    match a.joint {
        JointKind::Prismatic => Pose::from_translation(v3(a.anchor) + axis * v),
        JointKind::Revolute => Pose::from_parts(v3(a.anchor), Rot3::from_axis_angle(axis, v)),
    }
}

fn yaw_pose(x: f32, y: f32, yaw: f32) -> Pose {
    Pose::from_parts(Vec3::new(x, y, 0.0), Rot3::from_rotation_z(yaw))
}

/// Insert one object of a task at its initial pose (and, when it has one,
/// its articulated part on a joint at `joint`): its bodies and colliders go
/// in, in the order the world's handles depend on.
fn insert_object(
    phys: &mut PhysicsWorld,
    name: &str,
    kind: &Kind,
    pose: &[f32; 3],
    joint: f32,
) -> SimObject {
    let world_pose = yaw_pose(pose[0], pose[1], pose[2]);
    let rb = if kind.fixed {
        RigidBodyBuilder::fixed()
    } else {
        RigidBodyBuilder::dynamic()
            .linear_damping(0.5)
            .angular_damping(1.0)
    };
    let body = phys.insert_body(rb.pose(world_pose));
    let grp = if kind.fixed {
        groups(G_STATIC, G_OBJ | G_ARTIC)
    } else {
        groups(G_OBJ, G_STATIC | G_OBJ | G_ARTIC | G_PALM)
    };
    let colliders = kind
        .parts
        .iter()
        .filter(|p| p.collide)
        .map(|p| {
            phys.insert_collider(
                shape_collider(p)
                    .density(kind.density)
                    .collision_groups(grp),
                Some(body),
            )
        })
        .collect();
    let part = kind.articulation.as_ref().map(|a| {
        let pb = phys.insert_body(
            RigidBodyBuilder::dynamic()
                .pose(world_pose * part_local_pose(a, joint))
                .linear_damping(4.0)
                .angular_damping(4.0)
                .can_sleep(true),
        );
        let n = a.parts.iter().filter(|p| p.collide).count().max(1) as f32;
        for p in a.parts.iter().filter(|p| p.collide) {
            phys.insert_collider(
                shape_collider(p)
                    .mass(a.mass / n)
                    .collision_groups(groups(G_ARTIC, G_STATIC | G_OBJ | G_PALM | G_FINGER)),
                Some(pb),
            );
        }
        let axis = v3(a.axis);
        let joint: GenericJoint = match a.joint {
            JointKind::Prismatic => PrismaticJointBuilder::new(axis)
                .local_anchor1(v3(a.anchor))
                .local_anchor2(Vec3::ZERO)
                .limits(a.limits)
                .motor_velocity(0.0, 2.0)
                .contacts_enabled(false)
                .build()
                .into(),
            JointKind::Revolute => RevoluteJointBuilder::new(axis)
                .local_anchor1(v3(a.anchor))
                .local_anchor2(Vec3::ZERO)
                .limits(a.limits)
                .motor_velocity(0.0, 0.05)
                .contacts_enabled(false)
                .build()
                .into(),
        };
        phys.insert_impulse_joint(body, pb, joint);
        pb
    });
    SimObject {
        name: name.to_string(),
        kind: kind.clone(),
        body,
        colliders,
        part,
    }
}

impl World {
    /// Build the world of `task` in initial state `init`.
    pub fn build(task: &Task, init: &InitState, cfg: &SimConfig) -> Self {
        let mut phys = PhysicsWorld::new();
        phys.gravity = Vec3::new(0.0, 0.0, -9.81);
        phys.integration_parameters.dt = 1.0 / (cfg.control_hz * cfg.substeps as f32);
        // Forgiving contacts: an object released while it overlaps another
        // (a held object is carried kinematically and may be pushed into a
        // wall) is pushed out slowly instead of being launched.
        phys.integration_parameters
            .normalized_max_corrective_velocity = 0.3;
        phys.integration_parameters.normalized_max_linear_velocity = 3.0;
        let table = phys.insert_body(RigidBodyBuilder::fixed());
        phys.insert_collider(
            ColliderBuilder::cuboid(0.5, 0.4, 0.025)
                .translation(Vec3::new(0.0, 0.0, -0.025))
                .friction(1.0)
                .collision_groups(groups(G_STATIC, G_OBJ | G_ARTIC)),
            Some(table),
        );
        let mut objects = Vec::with_capacity(task.objects.len());
        for ((def, kind), (pose, joint)) in task
            .objects
            .iter()
            .zip(&task.kinds)
            .zip(init.poses.iter().zip(&init.joints))
        {
            objects.push(insert_object(&mut phys, &def.name, kind, pose, *joint));
        }
        let home = Pose::from_translation(v3(HOME));
        let gbody = phys.insert_body(RigidBodyBuilder::kinematic_position_based().pose(home));
        phys.insert_collider(
            ColliderBuilder::cuboid(PALM_HALF[0], PALM_HALF[1], PALM_HALF[2])
                .translation(Vec3::new(0.0, 0.0, FINGER_ABOVE + PALM_HALF[2]))
                .collision_groups(groups(G_PALM, G_OBJ | G_ARTIC)),
            Some(gbody),
        );
        let finger = |phys: &mut PhysicsWorld, sign: f32| {
            phys.insert_collider(
                ColliderBuilder::cuboid(FINGER_HALF[0], FINGER_HALF[1], FINGER_HALF[2])
                    .translation(finger_offset(MAX_APERTURE, sign))
                    .collision_groups(groups(G_FINGER, G_ARTIC)),
                Some(gbody),
            )
        };
        let fingers = [finger(&mut phys, -1.0), finger(&mut phys, 1.0)];
        let gripper = Gripper {
            pos: v3(HOME),
            rot: Rot3::IDENTITY,
            closure: 0.0,
            held: None,
            held_rel: Pose::IDENTITY,
            held_width: 0.0,
            body: gbody,
            fingers,
        };
        Self {
            phys,
            objects,
            gripper,
            substeps: cfg.substeps,
        }
    }

    /// Apply one clipped 7-D action (delta xyz, delta rotation as a scaled
    /// axis in the world frame, gripper: > 0 closes) and advance the physics
    /// by one control period.
    pub fn control(&mut self, a: &[f32], cfg: &SimConfig) {
        let g = &mut self.gripper;
        let start = g.pose();
        let d = Vec3::new(a[0], a[1], a[2]) * cfg.max_delta_pos_m;
        let lo = v3(WORKSPACE_LO);
        let hi = v3(WORKSPACE_HI);
        g.pos = (g.pos + d).clamp(lo, hi);
        let dr = Vec3::new(a[3], a[4], a[5]) * cfg.max_delta_rot_rad;
        g.rot = clamp_tilt((Rot3::from_scaled_axis(dr) * g.rot).normalize());
        let closing = a[6] > 0.0;
        let before = g.aperture();
        if closing {
            g.closure = (g.closure + GRIP_RATE).min(1.0);
        } else {
            g.closure = (g.closure - GRIP_RATE).max(0.0);
            if let Some(i) = g.held.take() {
                let obj = &self.objects[i];
                if let Some(b) = self.phys.bodies.get_mut(obj.body) {
                    b.set_body_type(RigidBodyType::Dynamic, true);
                    b.set_linvel(Vec3::ZERO, true);
                    b.set_angvel(Vec3::ZERO, true);
                }
            }
        }
        if closing && self.gripper.held.is_none() {
            self.try_attach(before);
        }
        let g = &self.gripper;
        let ap = g.aperture();
        for (h, sign) in g.fingers.iter().zip([-1.0, 1.0]) {
            if let Some(c) = self.phys.colliders.get_mut(*h) {
                c.set_position_wrt_parent(Pose::from_translation(finger_offset(ap, sign)));
            }
        }
        let end = g.pose();
        let held = g.held.map(|i| (self.objects[i].body, g.held_rel));
        let gbody = g.body;
        for k in 1..=self.substeps {
            let t = k as f32 / self.substeps as f32;
            let p = Pose::from_parts(
                start.translation.lerp(end.translation, t),
                start.rotation.slerp(end.rotation, t),
            );
            if let Some(b) = self.phys.bodies.get_mut(gbody) {
                b.set_next_kinematic_position(p);
            }
            if let Some((hb, rel)) = held
                && let Some(b) = self.phys.bodies.get_mut(hb)
            {
                b.set_next_kinematic_position(p * rel);
            }
            self.phys.step();
        }
    }

    /// The free graspable object between the closing fingers, if any; attach
    /// it when the fingers have reached it.
    fn try_attach(&mut self, aperture_before: f32) {
        let g = &self.gripper;
        let gp = g.pose();
        let ap = g.aperture();
        let mut best: Option<(usize, f32, f32)> = None;
        for (i, o) in self.objects.iter().enumerate() {
            if !o.kind.graspable {
                continue;
            }
            let Some(b) = self.phys.bodies.get(o.body) else {
                continue;
            };
            let op = *b.position();
            let (half, round) = o.kind.grasp_box();
            let centre = op.transform_point(Vec3::new(0.0, 0.0, half[2]));
            let local = gp.inverse_transform_point(centre);
            // Width of the object along the closing axis.
            let width = if round {
                2.0 * half[0]
            } else {
                let ax = gp.rotation * Vec3::X;
                let ox = op.rotation * Vec3::X;
                let oy = op.rotation * Vec3::Y;
                2.0 * (ax.dot(ox).abs() * half[0] + ax.dot(oy).abs() * half[1])
            };
            let overlap =
                (local.z + half[2]).min(FINGER_ABOVE) - (local.z - half[2]).max(-FINGER_BELOW);
            let inside = local.x.abs() < 0.5 * aperture_before.max(width)
                && local.y.abs() < 0.03
                && overlap > 0.01;
            let reached = ap <= width + 0.004 && aperture_before >= width - 0.01;
            if inside && reached && best.is_none_or(|(_, d, _)| local.x.abs() < d) {
                best = Some((i, local.x.abs(), width));
            }
        }
        if let Some((i, _, width)) = best {
            let body = self.objects[i].body;
            if let Some(b) = self.phys.bodies.get_mut(body) {
                let mut rel = gp.inverse() * *b.position();
                // Closing fingers centre the object between them.
                rel.translation.x = 0.0;
                b.set_body_type(RigidBodyType::KinematicPositionBased, true);
                let g = &mut self.gripper;
                g.held = Some(i);
                g.held_rel = rel;
                g.held_width = width.min(MAX_APERTURE);
            }
        }
    }

    /// Teleport object `i`'s base body (hand-placed scenes in tests and
    /// tools); its articulated part, if any, is not moved.
    pub fn place(&mut self, i: usize, pos: Vec3, yaw: f32) {
        if let Some(b) = self.phys.bodies.get_mut(self.objects[i].body) {
            b.set_position(Pose::from_parts(pos, Rot3::from_rotation_z(yaw)), true);
            b.set_linvel(Vec3::ZERO, true);
            b.set_angvel(Vec3::ZERO, true);
        }
    }

    /// Pose of object `i`'s base body.
    pub fn pose(&self, i: usize) -> Pose {
        self.phys
            .bodies
            .get(self.objects[i].body)
            .map(|b| *b.position())
            .unwrap_or(Pose::IDENTITY)
    }

    /// Pose of object `i`'s articulated part, if any.
    pub fn part_pose(&self, i: usize) -> Option<Pose> {
        let h = self.objects[i].part?;
        self.phys.bodies.get(h).map(|b| *b.position())
    }

    /// Axis-aligned bounds of object `i`'s colliders (min, max).
    pub fn bounds(&self, i: usize) -> (Vec3, Vec3) {
        let mut lo = Vec3::splat(f32::INFINITY);
        let mut hi = Vec3::splat(f32::NEG_INFINITY);
        for h in &self.objects[i].colliders {
            if let Some(c) = self.phys.colliders.get(*h) {
                let bb = c.compute_aabb();
                lo = lo.min(bb.mins);
                hi = hi.max(bb.maxs);
            }
        }
        (lo, hi)
    }

    /// Current value of object `i`'s articulation (drawer opening in m,
    /// door or knob angle in rad), `None` if it has none.
    pub fn joint_value(&self, i: usize) -> Option<f32> {
        let a = self.objects[i].kind.articulation.as_ref()?;
        let base = self.pose(i);
        let part = self.part_pose(i)?;
        let axis = v3(a.axis);
        Some(match a.joint {
            JointKind::Prismatic => {
                let d = part.translation - base.transform_point(v3(a.anchor));
                d.dot(base.rotation * axis)
            }
            JointKind::Revolute => {
                let rel = base.rotation.inverse() * part.rotation;
                let s = Vec3::new(rel.x, rel.y, rel.z).dot(axis);
                let mut ang = 2.0 * s.atan2(rel.w);
                if ang > std::f32::consts::PI {
                    ang -= std::f32::consts::TAU;
                } else if ang < -std::f32::consts::PI {
                    ang += std::f32::consts::TAU;
                }
                ang
            }
        })
    }

    /// Every body's pose and the gripper state, flattened: what the
    /// determinism test hashes.
    pub fn state_vector(&self) -> Vec<f32> {
        let mut out = Vec::new();
        for (_, b) in self.phys.bodies.iter() {
            let p = b.position();
            out.extend_from_slice(&p.translation.to_array());
            out.extend_from_slice(&p.rotation.to_array());
        }
        let g = &self.gripper;
        out.extend_from_slice(&g.pos.to_array());
        out.extend_from_slice(&g.rot.to_array());
        out.push(g.closure);
        out.push(g.held.map_or(-1.0, |i| i as f32));
        out
    }
}

fn finger_offset(aperture: f32, sign: f32) -> Vec3 {
    Vec3::new(
        sign * (0.5 * aperture + FINGER_HALF[0]),
        0.0,
        (FINGER_ABOVE - FINGER_BELOW) * 0.5,
    )
}

/// Limit the gripper's tilt from straight down to [`MAX_TILT`], keeping its
/// heading.
fn clamp_tilt(q: Rot3) -> Rot3 {
    let down = q * Vec3::NEG_Z;
    let tilt = down.dot(Vec3::NEG_Z).clamp(-1.0, 1.0).acos();
    if tilt <= MAX_TILT {
        return q;
    }
    let x = q * Vec3::X;
    let level = Rot3::from_rotation_z(x.y.atan2(x.x));
    level.slerp(q, MAX_TILT / tilt).normalize()
}
