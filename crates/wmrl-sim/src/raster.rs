//! A small software rasteriser: triangles with a depth buffer and flat
//! Lambert shading, into an RGB u8 image. Deterministic (plain f32 math, no
//! threads) and allocation-free per frame once its buffers exist.

use rapier3d::math::Vec3;

/// A triangle mesh in its own frame: outward faces wound counter-clockwise.
#[derive(Debug, Clone, Default)]
pub struct Mesh {
    pub verts: Vec<Vec3>,
    /// Vertex indices and whether the face is a top face (uses the top colour).
    pub tris: Vec<([u16; 3], bool)>,
}

impl Mesh {
    /// A box with half extents `h`, centred on the origin.
    pub fn cuboid(h: [f32; 3]) -> Self {
        let mut verts = Vec::with_capacity(8);
        for i in 0..8u8 {
            let s = |bit: u8, v: f32| if i & bit != 0 { v } else { -v };
            verts.push(Vec3::new(s(1, h[0]), s(2, h[1]), s(4, h[2])));
        }
        // Faces as quads (CCW from outside): -x, +x, -y, +y, -z, +z.
        let quads: [([u16; 4], bool); 6] = [
            ([0, 4, 6, 2], false),
            ([1, 3, 7, 5], false),
            ([0, 1, 5, 4], false),
            ([2, 6, 7, 3], false),
            ([0, 2, 3, 1], false),
            ([4, 5, 7, 6], true),
        ];
        let mut tris = Vec::with_capacity(12);
        for (q, top) in quads {
            tris.push(([q[0], q[1], q[2]], top));
            tris.push(([q[0], q[2], q[3]], top));
        }
        Self { verts, tris }
    }

    /// A z-axis cylinder of radius `r` and half height `hh` with `n` sides.
    pub fn cylinder(r: f32, hh: f32, n: u16) -> Self {
        let mut verts = Vec::with_capacity(2 * n as usize);
        for k in 0..n {
            let a = std::f32::consts::TAU * k as f32 / n as f32;
            let (s, c) = a.sin_cos();
            verts.push(Vec3::new(r * c, r * s, -hh));
            verts.push(Vec3::new(r * c, r * s, hh));
        }
        let mut tris = Vec::new();
        for k in 0..n {
            let b0 = 2 * k;
            let t0 = b0 + 1;
            let b1 = 2 * ((k + 1) % n);
            let t1 = b1 + 1;
            tris.push(([b0, b1, t1], false));
            tris.push(([b0, t1, t0], false));
        }
        for k in 1..n - 1 {
            tris.push(([1, 2 * k + 1, 2 * (k + 1) + 1], true));
            tris.push(([0, 2 * (k + 1), 2 * k], false));
        }
        Self { verts, tris }
    }
}

/// A pinhole camera: world point -> pixel.
#[derive(Debug, Clone, Copy)]
pub struct Camera {
    pub eye: Vec3,
    pub right: Vec3,
    pub up: Vec3,
    pub fwd: Vec3,
    /// Focal length in pixels.
    pub focal: f32,
}

impl Camera {
    pub fn look_at(eye: Vec3, target: Vec3, up: Vec3, fov_y_rad: f32, height_px: u32) -> Self {
        Self::looking(eye, target - eye, up, fov_y_rad, height_px)
    }

    pub fn looking(eye: Vec3, dir: Vec3, up: Vec3, fov_y_rad: f32, height_px: u32) -> Self {
        let fwd = dir.normalize();
        let right = fwd.cross(up).normalize();
        let up = right.cross(fwd);
        let focal = 0.5 * height_px as f32 / (0.5 * fov_y_rad).tan();
        Self {
            eye,
            right,
            up,
            fwd,
            focal,
        }
    }

    /// Camera coordinates: (right, up, depth along the view direction).
    #[inline]
    fn cam_coords(&self, p: Vec3) -> Vec3 {
        let d = p - self.eye;
        Vec3::new(d.dot(self.right), d.dot(self.up), d.dot(self.fwd))
    }
}

const NEAR: f32 = 0.01;

/// One image's drawing as the GPU rasteriser takes it (kernels/raster.cu):
/// the background gradient and every screen-space triangle in drawing
/// order, with its colour.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    /// `[x0, y0, z0, x1, y1, z1, x2, y2, z2]` per triangle (pixels, inverse
    /// depth).
    pub tris: Vec<f32>,
    /// `0x00RRGGBB` per triangle.
    pub colors: Vec<u32>,
    /// Top and bottom of the background gradient, `0x00RRGGBB`.
    pub bg: [u32; 2],
}

/// `0x00RRGGBB`.
pub fn pack_rgb(c: [u8; 3]) -> u32 {
    (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2])
}

fn unpack_rgb(c: u32) -> [u8; 3] {
    [(c >> 16) as u8, (c >> 8) as u8, c as u8]
}

/// Colour and depth buffers of one image.
#[derive(Debug, Clone)]
pub struct Raster {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
    depth: Vec<f32>,
    light: Vec3,
    cam_cache: Vec<Vec3>,
    /// While recording, `clear` and `fill_screen_tri` append here instead
    /// of touching the buffers.
    recording: Option<Recording>,
}

impl Raster {
    pub fn new(width: usize, height: usize) -> Self {
        Self {
            width,
            height,
            rgb: vec![0; width * height * 3],
            depth: vec![0.0; width * height],
            light: Vec3::new(0.35, -0.45, 0.82).normalize(),
            cam_cache: Vec::new(),
            recording: None,
        }
    }

    /// From now on record the drawing (everything up to the per-pixel
    /// stage: transform, culling, shading, clipping, projection) instead of
    /// filling pixels.
    pub fn start_recording(&mut self) {
        self.recording = Some(Recording::default());
    }

    /// Stop recording and return what was drawn since [`Self::start_recording`].
    pub fn take_recording(&mut self) -> Option<Recording> {
        self.recording.take()
    }

    /// Fill the buffers from a recording on the CPU: the same pixels as
    /// drawing directly.
    pub fn replay(&mut self, rec: &Recording) {
        self.clear(unpack_rgb(rec.bg[0]), unpack_rgb(rec.bg[1]));
        for (t, &c) in rec.tris.chunks_exact(9).zip(&rec.colors) {
            let t: [f32; 9] = std::array::from_fn(|k| t[k]);
            self.fill_screen_tri(t, unpack_rgb(c));
        }
    }

    /// Fill with a vertical gradient from `top` to `bottom` and clear depth.
    pub fn clear(&mut self, top: [u8; 3], bottom: [u8; 3]) {
        if let Some(r) = self.recording.as_mut() {
            *r = Recording {
                bg: [pack_rgb(top), pack_rgb(bottom)],
                ..Recording::default()
            };
            return;
        }
        self.depth.fill(0.0);
        let h = self.height.max(2) as f32 - 1.0;
        for y in 0..self.height {
            let t = y as f32 / h;
            let c: [u8; 3] = std::array::from_fn(|k| {
                (top[k] as f32 + (bottom[k] as f32 - top[k] as f32) * t) as u8
            });
            let row = &mut self.rgb[y * self.width * 3..(y + 1) * self.width * 3];
            for px in row.chunks_exact_mut(3) {
                px.copy_from_slice(&c);
            }
        }
    }

    /// Draw `mesh` placed by the world transform `(rot, trans)`.
    pub fn draw(
        &mut self,
        cam: &Camera,
        mesh: &Mesh,
        rot: rapier3d::math::Rot3,
        trans: Vec3,
        color: [u8; 3],
        top: [u8; 3],
    ) {
        let mut world = std::mem::take(&mut self.cam_cache);
        world.clear();
        world.extend(mesh.verts.iter().map(|v| rot * *v + trans));
        for &(t, is_top) in &mesh.tris {
            let w0 = world[t[0] as usize];
            let w1 = world[t[1] as usize];
            let w2 = world[t[2] as usize];
            let n = (w1 - w0).cross(w2 - w0);
            if n.dot(w0 - cam.eye) >= 0.0 {
                continue;
            }
            let shade = 0.5 + 0.5 * n.normalize_or_zero().dot(self.light).max(0.0);
            let base = if is_top { top } else { color };
            let c = [
                (base[0] as f32 * shade) as u8,
                (base[1] as f32 * shade) as u8,
                (base[2] as f32 * shade) as u8,
            ];
            let v = [cam.cam_coords(w0), cam.cam_coords(w1), cam.cam_coords(w2)];
            if v.iter().all(|p| p.z >= NEAR) {
                self.tri(cam, v[0], v[1], v[2], c);
            } else if v.iter().any(|p| p.z >= NEAR) {
                // Clip against the near plane: a triangle becomes 1 or 2.
                let mut poly: [Vec3; 4] = [Vec3::ZERO; 4];
                let mut n = 0;
                for k in 0..3 {
                    let a = v[k];
                    let b = v[(k + 1) % 3];
                    if a.z >= NEAR {
                        poly[n] = a;
                        n += 1;
                    }
                    if (a.z >= NEAR) != (b.z >= NEAR) {
                        let s = (NEAR - a.z) / (b.z - a.z);
                        poly[n] = a + (b - a) * s;
                        n += 1;
                    }
                }
                for k in 1..n.saturating_sub(1) {
                    self.tri(cam, poly[0], poly[k], poly[k + 1], c);
                }
            }
        }
        self.cam_cache = world;
    }

    fn tri(&mut self, cam: &Camera, a: Vec3, b: Vec3, c: Vec3, col: [u8; 3]) {
        let (cx, cy) = (0.5 * self.width as f32, 0.5 * self.height as f32);
        let proj = |p: Vec3| {
            let iz = 1.0 / p.z;
            (cx + cam.focal * p.x * iz, cy - cam.focal * p.y * iz, iz)
        };
        let (x0, y0, z0) = proj(a);
        let (x1, y1, z1) = proj(b);
        let (x2, y2, z2) = proj(c);
        self.fill_screen_tri([x0, y0, z0, x1, y1, z1, x2, y2, z2], col);
    }

    /// The per-pixel stage of drawing one triangle, given in screen space
    /// (`[x0, y0, z0, x1, y1, z1, x2, y2, z2]`, pixels and inverse depth):
    /// pixel centres inside all three edge functions pass the depth test
    /// `z > depth` and take `col`. The GPU rasteriser (kernels/raster.cu)
    /// mirrors this.
    pub fn fill_screen_tri(&mut self, t: [f32; 9], col: [u8; 3]) {
        if let Some(r) = self.recording.as_mut() {
            r.tris.extend_from_slice(&t);
            r.colors.push(pack_rgb(col));
            return;
        }
        let [x0, y0, z0, x1, y1, z1, x2, y2, z2] = t;
        let area = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0);
        if area.abs() < 1e-9 {
            return;
        }
        let inv = 1.0 / area;
        let minx = x0.min(x1).min(x2).floor().max(0.0) as usize;
        let maxx = (x0.max(x1).max(x2).ceil().min(self.width as f32)) as usize;
        let miny = y0.min(y1).min(y2).floor().max(0.0) as usize;
        let maxy = (y0.max(y1).max(y2).ceil().min(self.height as f32)) as usize;
        if minx >= maxx || miny >= maxy {
            return;
        }
        // Barycentric weights as affine functions of the pixel centre,
        // normalised by the signed area so inside means all >= 0.
        let e = |xa: f32, ya: f32, xb: f32, yb: f32| {
            let dx = (yb - ya) * inv;
            let dy = -(xb - xa) * inv;
            let c0 = -(xa * (yb - ya) - ya * (xb - xa)) * inv;
            (-dx, -dy, -c0)
        };
        let (a0x, a0y, a0c) = e(x1, y1, x2, y2);
        let (a1x, a1y, a1c) = e(x2, y2, x0, y0);
        let (a2x, a2y, a2c) = e(x0, y0, x1, y1);
        let w = self.width;
        for py in miny..maxy {
            let fy = py as f32 + 0.5;
            let fx0 = minx as f32 + 0.5;
            let mut l0 = a0x * fx0 + a0y * fy + a0c;
            let mut l1 = a1x * fx0 + a1y * fy + a1c;
            let mut l2 = a2x * fx0 + a2y * fy + a2c;
            let row = py * w;
            for px in minx..maxx {
                if l0 >= 0.0 && l1 >= 0.0 && l2 >= 0.0 {
                    let z = l0 * z0 + l1 * z1 + l2 * z2;
                    let i = row + px;
                    if z > self.depth[i] {
                        self.depth[i] = z;
                        self.rgb[3 * i..3 * i + 3].copy_from_slice(&col);
                    }
                }
                l0 += a0x;
                l1 += a1x;
                l2 += a2x;
            }
        }
    }
}
