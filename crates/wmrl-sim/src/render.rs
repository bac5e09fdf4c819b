//! The two cameras of the tabletop scene: `agentview` (a fixed camera behind
//! and above the robot, looking over the table) and `wrist` (on the gripper,
//! looking down past the fingers), drawn with the software rasteriser.

use rapier3d::math::{Rot3, Vec3};

use crate::catalog::{Part, Shape, v3};
use std::sync::Arc;

use crate::raster::{Camera, Mesh, Raster, Recording};
use crate::world::{FINGER_ABOVE, FINGER_BELOW, World};

const TABLE: [u8; 3] = [112, 122, 138];
const TABLE_EDGE: [u8; 3] = [80, 88, 100];
const ARM: [u8; 3] = [228, 228, 234];
const HAND: [u8; 3] = [60, 60, 66];
const SKY_TOP: [u8; 3] = [150, 160, 175];
const SKY_BOTTOM: [u8; 3] = [70, 72, 80];
/// Top of the drawn forearm above the grasp point (m).
const FOREARM_TOP: f32 = 0.13;

#[derive(Debug, Clone, Copy)]
enum Owner {
    Fixed,
    Body(usize),
    Part(usize),
}

#[derive(Debug, Clone)]
struct Item {
    owner: Owner,
    offset: Vec3,
    mesh: usize,
    color: [u8; 3],
    top: [u8; 3],
    glow: Option<[u8; 3]>,
}

/// Meshes and draw items of one scene, plus the image buffers.
#[derive(Debug, Clone)]
pub struct Renderer {
    size: usize,
    meshes: Vec<Mesh>,
    items: Vec<Item>,
    unit_box: usize,
    finger_mesh: usize,
    palm_mesh: usize,
    agent: Raster,
    wrist: Raster,
    agent_cam: Camera,
    /// The GPU rasteriser this renderer was built on, until a launch fails.
    gpu: Option<Arc<wmrl_kernels::Gpu>>,
}

fn mesh_of(shape: Shape) -> Mesh {
    match shape {
        Shape::Box { half } => Mesh::cuboid(half),
        Shape::Cyl { r, hh } => Mesh::cylinder(r, hh, if r > 0.04 { 14 } else { 10 }),
    }
}

impl Renderer {
    /// Build the draw list of `world`'s scene for square images of `size`,
    /// filled on `gpu` when given (else on the CPU).
    pub fn new(world: &World, size: usize, gpu: Option<Arc<wmrl_kernels::Gpu>>) -> Self {
        let mut meshes = vec![Mesh::cuboid([0.5, 0.4, 0.025])];
        let mut items = vec![Item {
            owner: Owner::Fixed,
            offset: Vec3::new(0.0, 0.0, -0.025),
            mesh: 0,
            color: TABLE_EDGE,
            top: TABLE,
            glow: None,
        }];
        let mut add = |owner: Owner, p: &Part, glow: bool| {
            meshes.push(mesh_of(p.shape));
            items.push(Item {
                owner,
                offset: v3(p.offset),
                mesh: meshes.len() - 1,
                color: p.color,
                top: p.top.unwrap_or(p.color),
                glow: if glow { p.glow } else { None },
            });
        };
        for (i, o) in world.objects.iter().enumerate() {
            for p in &o.kind.parts {
                add(Owner::Body(i), p, true);
            }
            if let Some(a) = &o.kind.articulation {
                for p in &a.parts {
                    add(Owner::Part(i), p, false);
                }
            }
        }
        meshes.push(Mesh::cuboid([0.5, 0.5, 0.5]));
        let unit_box = meshes.len() - 1;
        meshes.push(Mesh::cuboid([
            0.006,
            0.012,
            0.5 * (FINGER_ABOVE + FINGER_BELOW),
        ]));
        let finger_mesh = meshes.len() - 1;
        meshes.push(Mesh::cuboid([0.045, 0.022, 0.012]));
        let palm_mesh = meshes.len() - 1;
        let agent_cam = Camera::look_at(
            Vec3::new(0.0, -0.48, 0.52),
            Vec3::new(0.0, 0.07, 0.0),
            Vec3::Z,
            54f32.to_radians(),
            size as u32,
        );
        Self {
            size,
            meshes,
            items,
            unit_box,
            finger_mesh,
            palm_mesh,
            agent: Raster::new(size, size),
            wrist: Raster::new(size, size),
            agent_cam,
            gpu,
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this renderer fills its images on the GPU (given one, and no
    /// launch has failed).
    pub fn on_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    /// Render both cameras; returns (agentview, wrist) RGB buffers. On the
    /// GPU, this is [`Self::render_recorded`].
    pub fn render(&mut self, world: &World, switched_on: &[bool]) -> (&[u8], &[u8]) {
        if self.gpu.is_some() {
            return self.render_recorded(world, switched_on);
        }
        self.draw(world, switched_on);
        (&self.agent.rgb, &self.wrist.rgb)
    }

    /// Render by recording both cameras' triangles and filling the two
    /// images from the recording: in one GPU launch when the renderer is on
    /// the GPU, otherwise on the CPU (the same pixels as [`Self::render`]).
    pub fn render_recorded(&mut self, world: &World, switched_on: &[bool]) -> (&[u8], &[u8]) {
        self.agent.start_recording();
        self.wrist.start_recording();
        self.draw(world, switched_on);
        let a = self.agent.take_recording().unwrap_or_default();
        let w = self.wrist.take_recording().unwrap_or_default();
        let filled = self.gpu.as_ref().map(|g| fill_on_gpu(g, &a, &w, self.size));
        match filled {
            Some(Ok(px)) => {
                let n = self.agent.rgb.len();
                self.agent.rgb.copy_from_slice(&px[..n]);
                self.wrist.rgb.copy_from_slice(&px[n..]);
            }
            other => {
                if let Some(Err(e)) = other {
                    tracing::warn!(
                        "GPU rasteriser failed ({e}); this scene renders on the CPU from now on"
                    );
                    self.gpu = None;
                }
                self.agent.replay(&a);
                self.wrist.replay(&w);
            }
        }
        (&self.agent.rgb, &self.wrist.rgb)
    }

    /// Draw every item into both rasters (filling or recording).
    fn draw(&mut self, world: &World, switched_on: &[bool]) {
        let g = &world.gripper;
        let gp = g.pose();
        let eye = gp.transform_point(Vec3::new(0.0, -0.07, 0.08));
        let dir = gp.rotation * Vec3::new(0.0, 0.32, -1.0);
        let wrist_cam = Camera::looking(
            eye,
            dir,
            gp.rotation * Vec3::Y,
            80f32.to_radians(),
            self.size as u32,
        );
        let mut agent = std::mem::replace(&mut self.agent, Raster::new(0, 0));
        let mut wrist = std::mem::replace(&mut self.wrist, Raster::new(0, 0));
        agent.clear(SKY_TOP, SKY_BOTTOM);
        wrist.clear(SKY_TOP, SKY_BOTTOM);
        let agent_cam = self.agent_cam;
        for it in &self.items {
            let (rot, trans) = match it.owner {
                Owner::Fixed => (Rot3::IDENTITY, it.offset),
                Owner::Body(i) => {
                    let p = world.pose(i);
                    (p.rotation, p.transform_point(it.offset))
                }
                Owner::Part(i) => match world.part_pose(i) {
                    Some(p) => (p.rotation, p.transform_point(it.offset)),
                    None => continue,
                },
            };
            let on = match it.owner {
                Owner::Body(i) => switched_on.get(i).copied().unwrap_or(false),
                _ => false,
            };
            let (c, t) = match (it.glow, on) {
                (Some(gc), true) => (gc, gc),
                _ => (it.color, it.top),
            };
            let m = &self.meshes[it.mesh];
            agent.draw(&agent_cam, m, rot, trans, c, t);
            wrist.draw(&wrist_cam, m, rot, trans, c, t);
        }
        // The hand: palm and fingers, and a forearm on the agent view.
        let ap = g.aperture();
        let palm = gp.transform_point(Vec3::new(0.0, 0.0, FINGER_ABOVE + 0.012));
        let pm = &self.meshes[self.palm_mesh];
        // The wrist camera is mounted on the palm: it sees the fingers only.
        agent.draw(&agent_cam, pm, gp.rotation, palm, HAND, HAND);
        for s in [-1.0f32, 1.0] {
            let f = gp.transform_point(Vec3::new(
                s * (0.5 * ap + 0.006),
                0.0,
                0.5 * (FINGER_ABOVE - FINGER_BELOW),
            ));
            let fm = &self.meshes[self.finger_mesh];
            agent.draw(&agent_cam, fm, gp.rotation, f, HAND, HAND);
            wrist.draw(&wrist_cam, fm, gp.rotation, f, HAND, HAND);
        }
        // A short forearm above the hand; the rest of the arm is left out so
        // it never hides the table from the agent view.
        let wrist_top = gp.transform_point(Vec3::new(0.0, 0.0, FINGER_ABOVE + 0.024));
        let elbow = gp.transform_point(Vec3::new(0.0, 0.0, FOREARM_TOP));
        let (rot, mid, len) = segment(wrist_top, elbow);
        let fore = scale_box(&self.meshes[self.unit_box], Vec3::new(0.024, 0.024, len));
        agent.draw(&agent_cam, &fore, rot, mid, ARM, ARM);
        self.agent = agent;
        self.wrist = wrist;
    }
}

/// Both images of one step in one launch: agent view first, then wrist.
fn fill_on_gpu(
    gpu: &wmrl_kernels::Gpu,
    a: &Recording,
    w: &Recording,
    size: usize,
) -> Result<Vec<u8>, wmrl_kernels::KernelError> {
    let tris: Vec<f32> = a.tris.iter().chain(&w.tris).copied().collect();
    let colors: Vec<u32> = a.colors.iter().chain(&w.colors).copied().collect();
    let first = [0, a.colors.len() as u32, colors.len() as u32];
    let bg = [a.bg[0], a.bg[1], w.bg[0], w.bg[1]];
    gpu.raster_images(&tris, &colors, &first, &bg, size, size)
}

/// Rotation taking z to the segment a->b, its midpoint and length.
fn segment(a: Vec3, b: Vec3) -> (Rot3, Vec3, f32) {
    let d = b - a;
    let len = d.length().max(1e-6);
    (
        Rot3::from_rotation_arc(Vec3::Z, d / len),
        (a + b) * 0.5,
        len,
    )
}

fn scale_box(unit: &Mesh, s: Vec3) -> Mesh {
    Mesh {
        verts: unit.verts.iter().map(|v| *v * s).collect(),
        tris: unit.tris.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_from_a_recording_gives_the_same_pixels_as_drawing_directly() {
        let tasks = crate::task::tasks().expect("tasks");
        let cfg = crate::SimConfig::default();
        for (k, task) in tasks.iter().enumerate().take(3) {
            let init = crate::task::init_state(task, k);
            let world = World::build(task, &init, &cfg);
            let on = vec![false; world.objects.len()];
            let mut direct = Renderer::new(&world, 96, None);
            assert!(direct.gpu.is_none(), "no test enables the GPU renderer");
            let (a, w) = direct.render(&world, &on);
            let (a, w) = (a.to_vec(), w.to_vec());
            let mut recorded = Renderer::new(&world, 96, None);
            let (ra, rw) = recorded.render_recorded(&world, &on);
            assert_eq!(a, ra, "task {k}: agent view");
            assert_eq!(w, rw, "task {k}: wrist");
            // Not a blank frame: the table and objects were drawn.
            assert!(a.chunks(3).any(|p| p != &a[..3]));
            // A recording holds the triangles in drawing order.
            let mut r = Raster::new(8, 8);
            r.start_recording();
            r.clear([1, 2, 3], [4, 5, 6]);
            r.fill_screen_tri([0.0, 0.0, 1.0, 8.0, 0.0, 1.0, 0.0, 8.0, 1.0], [9, 8, 7]);
            let rec = r.take_recording().expect("recording");
            assert_eq!(rec.colors, [0x0009_0807]);
            assert_eq!(rec.bg, [0x0001_0203, 0x0004_0506]);
            assert!(r.rgb.iter().all(|&b| b == 0), "recording fills nothing");
        }
    }
}
