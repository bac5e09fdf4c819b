//! The object catalog: shapes, colours, grasp data, container regions and
//! articulations of every kind of object the task files may name.
//!
//! All objects are built from boxes and z-up cylinders, so the renderer stays
//! cheap and the physics forgiving. An object's origin is the centre of its
//! footprint on the table (z = 0 at its bottom). Colours are large and
//! distinct so a small policy and a progress model can tell objects apart.

use rapier3d::math::Vec3;

/// A primitive solid in an object's (or articulated part's) frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// Box with half extents.
    Box { half: [f32; 3] },
    /// Cylinder along z with radius and half height.
    Cyl { r: f32, hh: f32 },
}

/// One solid part: a collider and/or a visual.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    /// Centre of the primitive in the owner's frame.
    pub offset: [f32; 3],
    pub shape: Shape,
    pub color: [u8; 3],
    /// Colour of the top face (cylinder cap or box top), e.g. a bowl's inside.
    pub top: Option<[u8; 3]>,
    /// Takes part in physics (else visual only).
    pub collide: bool,
    /// Colour used instead of `color` while the owner's switch is on (stove
    /// burners glow).
    pub glow: Option<[u8; 3]>,
}

const fn part(offset: [f32; 3], shape: Shape, color: [u8; 3]) -> Part {
    Part {
        offset,
        shape,
        color,
        top: None,
        collide: true,
        glow: None,
    }
}

const fn bx(hx: f32, hy: f32, hz: f32) -> Shape {
    Shape::Box { half: [hx, hy, hz] }
}

const fn cyl(r: f32, hh: f32) -> Shape {
    Shape::Cyl { r, hh }
}

/// A named area of a container or support where goals put objects.
#[derive(Debug, Clone, PartialEq)]
pub struct Region {
    pub name: &'static str,
    /// Centre of the region's floor (or support surface), in the frame of
    /// the owner (or of its articulated part when `on_part`).
    pub centre: [f32; 3],
    /// Half extents in x and y.
    pub half: [f32; 2],
    /// Height of the region's top above its floor (walls, ceiling).
    pub height: f32,
    /// The region moves with the articulated part (a drawer's inside).
    pub on_part: bool,
    /// Where the expert puts the 1st, 2nd, ... object (xy in the region frame).
    pub slots: &'static [[f32; 2]],
    /// Objects enter from the front (-y of the region frame), not from above.
    pub front_entry: bool,
    /// Yaw (in the owner's frame) an object should have when placed here.
    pub place_yaw: Option<f32>,
}

/// What an articulated part does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JointKind {
    /// Slides along the axis; the joint value is the distance moved.
    Prismatic,
    /// Turns about the axis; the joint value is the angle.
    Revolute,
}

/// A moving part held to its owner by a real rapier joint.
#[derive(Debug, Clone, PartialEq)]
pub struct Articulation {
    /// `drawer`, `door` or `knob`.
    pub name: &'static str,
    pub joint: JointKind,
    /// Joint axis in the owner's frame.
    pub axis: [f32; 3],
    /// The part's origin (= joint anchor) in the owner's frame at value 0.
    pub anchor: [f32; 3],
    pub limits: [f32; 2],
    pub parts: Vec<Part>,
    /// The part is closed (off) when |value| < `closed_tol` and open (on)
    /// when |value| > `open_tol`; value 0 is fully closed for every part.
    pub closed_tol: f32,
    pub open_tol: f32,
    /// Default initial value when the task file does not set one.
    pub default_value: f32,
    pub mass: f32,
}

/// Everything about one kind of object.
#[derive(Debug, Clone, PartialEq)]
pub struct Kind {
    pub name: &'static str,
    pub parts: Vec<Part>,
    /// Fixed furniture (cabinet, microwave, stove) or a free body.
    pub fixed: bool,
    pub density: f32,
    /// Can be picked by the gripper.
    pub graspable: bool,
    /// Radius of the footprint, for layout spacing.
    pub footprint: f32,
    pub regions: Vec<Region>,
    pub articulation: Option<Articulation>,
}

impl Kind {
    /// Height of the object's top above its base.
    pub fn height(&self) -> f32 {
        self.parts
            .iter()
            .filter(|p| p.collide)
            .map(|p| p.offset[2] + half_z(p.shape))
            .fold(0.0, f32::max)
    }

    /// Half extents of the first collider, as a box (x, y, z), and whether it
    /// is round (cylinder): the grasp width comes from it.
    pub fn grasp_box(&self) -> ([f32; 3], bool) {
        match self.parts.first().map(|p| p.shape) {
            Some(Shape::Box { half }) => (half, false),
            Some(Shape::Cyl { r, hh }) => ([r, r, hh], true),
            None => ([0.0; 3], true),
        }
    }

    pub fn region(&self, name: &str) -> Option<&Region> {
        self.regions.iter().find(|r| r.name == name)
    }
}

pub fn half_z(s: Shape) -> f32 {
    match s {
        Shape::Box { half } => half[2],
        Shape::Cyl { hh, .. } => hh,
    }
}

/// Colours (RGB): chosen far apart so objects stay distinct at 64x64.
mod rgb {
    pub const SOUP: [u8; 3] = [205, 35, 35];
    pub const TOMATO: [u8; 3] = [245, 125, 20];
    pub const CHEESE: [u8; 3] = [60, 130, 235];
    pub const BUTTER: [u8; 3] = [245, 225, 55];
    pub const KETCHUP: [u8; 3] = [185, 25, 130];
    pub const MILK: [u8; 3] = [240, 240, 240];
    pub const JUICE: [u8; 3] = [80, 200, 70];
    pub const PUDDING: [u8; 3] = [115, 65, 25];
    pub const METAL: [u8; 3] = [165, 170, 180];
    pub const DARK: [u8; 3] = [35, 35, 38];
    pub const WHITE: [u8; 3] = [245, 245, 245];
    pub const YELLOW: [u8; 3] = [250, 205, 30];
    pub const RED: [u8; 3] = [210, 30, 30];
    pub const TEAL: [u8; 3] = [25, 165, 155];
    pub const PINK: [u8; 3] = [235, 120, 175];
    pub const WICKER: [u8; 3] = [185, 135, 75];
    pub const WOOD: [u8; 3] = [145, 90, 50];
    pub const FRONT: [u8; 3] = [210, 165, 105];
    pub const PLATE: [u8; 3] = [215, 215, 228];
}

fn can(r: f32, hh: f32, color: [u8; 3], top: [u8; 3]) -> Vec<Part> {
    vec![Part {
        top: Some(top),
        ..part([0.0, 0.0, hh], cyl(r, hh), color)
    }]
}

fn boxy(hx: f32, hy: f32, hz: f32, color: [u8; 3]) -> Vec<Part> {
    vec![part([0.0, 0.0, hz], bx(hx, hy, hz), color)]
}

fn mug(color: [u8; 3], handle: [u8; 3]) -> Vec<Part> {
    vec![
        Part {
            top: Some([90, 90, 95]),
            ..part([0.0, 0.0, 0.04], cyl(0.035, 0.04), color)
        },
        Part {
            collide: false,
            ..part([0.043, 0.0, 0.045], bx(0.008, 0.006, 0.022), handle)
        },
    ]
}

fn bowl(color: [u8; 3], inside: [u8; 3]) -> Vec<Part> {
    vec![Part {
        top: Some(inside),
        ..part([0.0, 0.0, 0.022], cyl(0.045, 0.022), color)
    }]
}

fn free(name: &'static str, parts: Vec<Part>, footprint: f32) -> Kind {
    Kind {
        name,
        parts,
        fixed: false,
        density: 400.0,
        graspable: true,
        footprint,
        regions: Vec::new(),
        articulation: None,
    }
}

/// The kind named `name`, or `None`.
pub fn kind(name: &str) -> Option<Kind> {
    use rgb::*;
    let k = match name {
        "alphabet_soup" => free(name_of(name)?, can(0.033, 0.045, SOUP, METAL), 0.04),
        "tomato_sauce" => free(name_of(name)?, can(0.032, 0.04, TOMATO, RED), 0.04),
        "cream_cheese" => free(name_of(name)?, boxy(0.035, 0.025, 0.02, CHEESE), 0.045),
        "butter" => free(name_of(name)?, boxy(0.033, 0.022, 0.018, BUTTER), 0.042),
        "ketchup" => free(name_of(name)?, boxy(0.025, 0.02, 0.055, KETCHUP), 0.035),
        "milk" => free(
            name_of(name)?,
            vec![Part {
                top: Some([40, 90, 210]),
                ..boxy(0.025, 0.025, 0.055, MILK)[0]
            }],
            0.037,
        ),
        "orange_juice" => free(name_of(name)?, boxy(0.025, 0.025, 0.055, JUICE), 0.037),
        "chocolate_pudding" => free(name_of(name)?, boxy(0.032, 0.024, 0.02, PUDDING), 0.04),
        "white_mug" => free(name_of(name)?, mug(WHITE, [200, 200, 200]), 0.045),
        "yellow_white_mug" => free(name_of(name)?, mug(YELLOW, WHITE), 0.045),
        "red_mug" => free(name_of(name)?, mug(RED, [150, 20, 20]), 0.045),
        "black_bowl" => free(name_of(name)?, bowl(DARK, [75, 75, 80]), 0.05),
        "white_bowl" => free(name_of(name)?, bowl(WHITE, [185, 185, 190]), 0.05),
        "moka_pot" => free(
            name_of(name)?,
            vec![
                Part {
                    top: Some([120, 120, 128]),
                    ..part([0.0, 0.0, 0.04], cyl(0.032, 0.04), METAL)
                },
                part([0.0, 0.0, 0.092], cyl(0.02, 0.012), DARK),
                Part {
                    collide: false,
                    ..part([-0.04, 0.0, 0.05], bx(0.008, 0.006, 0.025), DARK)
                },
            ],
            0.04,
        ),
        "book" => free(name_of(name)?, boxy(0.05, 0.0325, 0.015, TEAL), 0.055),
        "wine_bottle" => free(
            name_of(name)?,
            vec![
                part([0.0, 0.0, 0.06], cyl(0.03, 0.06), [95, 20, 45]),
                part([0.0, 0.0, 0.14], cyl(0.012, 0.02), [95, 20, 45]),
            ],
            0.035,
        ),
        "plate" => plate(),
        "basket" => basket(),
        "caddy" => caddy(),
        "stove" => stove(),
        "cabinet" => cabinet(),
        "microwave" => microwave(),
        _ => return None,
    };
    Some(k)
}

/// The catalog's static name for a kind (kinds borrow `'static` names).
fn name_of(name: &str) -> Option<&'static str> {
    KIND_NAMES.iter().copied().find(|n| *n == name)
}

/// Every kind the catalog knows.
pub const KIND_NAMES: &[&str] = &[
    "alphabet_soup",
    "tomato_sauce",
    "cream_cheese",
    "butter",
    "ketchup",
    "milk",
    "orange_juice",
    "chocolate_pudding",
    "white_mug",
    "yellow_white_mug",
    "red_mug",
    "black_bowl",
    "white_bowl",
    "moka_pot",
    "book",
    "wine_bottle",
    "plate",
    "basket",
    "caddy",
    "stove",
    "cabinet",
    "microwave",
];

fn fixed(name: &'static str, parts: Vec<Part>, footprint: f32) -> Kind {
    Kind {
        name,
        parts,
        fixed: true,
        density: 1000.0,
        graspable: false,
        footprint,
        regions: Vec::new(),
        articulation: None,
    }
}

/// A flat stove with two burners and a red switch lever on its right side;
/// pushing the lever to the right (+x) turns it on and the burners glow.
fn plate() -> Kind {
    use rgb::*;
    Kind {
        density: 1500.0,
        graspable: false,
        regions: vec![Region {
            name: "top",
            centre: [0.0, 0.0, 0.016],
            half: [0.055, 0.055],
            height: 0.1,
            on_part: false,
            slots: &[[0.0, 0.0]],
            front_entry: false,
            place_yaw: None,
        }],
        ..free(
            "plate",
            vec![Part {
                top: Some([238, 238, 244]),
                ..part([0.0, 0.0, 0.008], cyl(0.075, 0.008), PLATE)
            }],
            0.08,
        )
    }
}

fn basket() -> Kind {
    use rgb::*;
    Kind {
        density: 1500.0,
        graspable: false,
        regions: vec![Region {
            name: "interior",
            centre: [0.0, 0.0, 0.01],
            half: [0.088, 0.063],
            height: 0.07,
            on_part: false,
            slots: &[[-0.045, 0.0], [0.045, 0.0]],
            front_entry: false,
            place_yaw: None,
        }],
        ..free(
            "basket",
            vec![
                part([0.0, 0.0, 0.005], bx(0.1, 0.075, 0.005), [150, 105, 55]),
                part([0.0, 0.07, 0.04], bx(0.1, 0.005, 0.04), WICKER),
                part([0.0, -0.07, 0.04], bx(0.1, 0.005, 0.04), WICKER),
                part([0.095, 0.0, 0.04], bx(0.005, 0.075, 0.04), WICKER),
                part([-0.095, 0.0, 0.04], bx(0.005, 0.075, 0.04), WICKER),
            ],
            0.12,
        )
    }
}

fn caddy() -> Kind {
    use rgb::*;
    Kind {
        density: 1500.0,
        graspable: false,
        regions: vec![
            Region {
                name: "back",
                centre: [0.0, 0.048, 0.01],
                half: [0.095, 0.04],
                height: 0.06,
                on_part: false,
                slots: &[[0.0, 0.048]],
                front_entry: false,
                place_yaw: Some(0.0),
            },
            Region {
                name: "front",
                centre: [0.0, -0.048, 0.01],
                half: [0.095, 0.04],
                height: 0.06,
                on_part: false,
                slots: &[[0.0, -0.048]],
                front_entry: false,
                place_yaw: Some(0.0),
            },
        ],
        ..free(
            "caddy",
            vec![
                part([0.0, 0.0, 0.005], bx(0.11, 0.1, 0.005), [200, 95, 145]),
                part([0.0, 0.095, 0.03], bx(0.11, 0.005, 0.03), PINK),
                part([0.0, -0.095, 0.03], bx(0.11, 0.005, 0.03), PINK),
                part([0.105, 0.0, 0.03], bx(0.005, 0.1, 0.03), PINK),
                part([-0.105, 0.0, 0.03], bx(0.005, 0.1, 0.03), PINK),
                part([0.0, 0.0, 0.025], bx(0.1, 0.004, 0.025), PINK),
            ],
            0.14,
        )
    }
}

fn stove() -> Kind {
    let burner = |x: f32| Part {
        glow: Some([250, 95, 20]),
        top: None,
        collide: false,
        ..part([x, 0.0, 0.032], cyl(0.052, 0.002), [20, 20, 22])
    };
    Kind {
        regions: vec![Region {
            name: "top",
            centre: [0.0, 0.0, 0.03],
            half: [0.12, 0.08],
            height: 0.15,
            on_part: false,
            slots: &[[-0.065, 0.0], [0.065, 0.0]],
            front_entry: false,
            place_yaw: None,
        }],
        articulation: Some(Articulation {
            name: "knob",
            joint: JointKind::Revolute,
            axis: [0.0, 1.0, 0.0],
            anchor: [0.175, -0.05, 0.05],
            limits: [-0.05, 1.2],
            parts: vec![part(
                [0.0, 0.0, 0.03],
                bx(0.008, 0.008, 0.03),
                [230, 25, 25],
            )],
            closed_tol: 0.1,
            open_tol: 0.5,
            default_value: 0.0,
            mass: 0.05,
        }),
        ..fixed(
            "stove",
            vec![
                part([0.0, 0.0, 0.015], bx(0.14, 0.1, 0.015), [70, 70, 76]),
                burner(-0.065),
                burner(0.065),
                part([0.175, -0.05, 0.025], bx(0.03, 0.025, 0.025), [95, 95, 100]),
            ],
            0.2,
        )
    }
}

/// A wooden cabinet; its bottom drawer slides out towards the robot (-y).
fn cabinet() -> Kind {
    Kind {
        regions: vec![Region {
            name: "drawer",
            centre: [0.0, 0.0, 0.01],
            half: [0.085, 0.09],
            height: 0.06,
            on_part: true,
            slots: &[[0.0, -0.04]],
            front_entry: false,
            place_yaw: None,
        }],
        articulation: Some(Articulation {
            name: "drawer",
            joint: JointKind::Prismatic,
            axis: [0.0, -1.0, 0.0],
            anchor: [0.0, 0.0, 0.02],
            limits: [0.0, 0.17],
            parts: vec![
                part([0.0, 0.0, 0.005], bx(0.1, 0.1, 0.005), [120, 75, 40]),
                part([0.095, 0.0, 0.035], bx(0.005, 0.1, 0.035), rgb::WOOD),
                part([-0.095, 0.0, 0.035], bx(0.005, 0.1, 0.035), rgb::WOOD),
                part([0.0, 0.095, 0.035], bx(0.1, 0.005, 0.035), rgb::WOOD),
                part([0.0, -0.106, 0.042], bx(0.112, 0.008, 0.042), rgb::FRONT),
                Part {
                    collide: false,
                    ..part([0.0, -0.118, 0.06], bx(0.04, 0.006, 0.007), rgb::DARK)
                },
            ],
            closed_tol: 0.02,
            open_tol: 0.05,
            default_value: 0.0,
            mass: 1.0,
        }),
        ..fixed(
            "cabinet",
            vec![
                part([0.0, 0.0, 0.01], bx(0.13, 0.11, 0.01), rgb::WOOD),
                part([0.12, 0.0, 0.14], bx(0.01, 0.11, 0.14), rgb::WOOD),
                part([-0.12, 0.0, 0.14], bx(0.01, 0.11, 0.14), rgb::WOOD),
                part([0.0, 0.105, 0.14], bx(0.11, 0.005, 0.14), rgb::WOOD),
                part([0.0, 0.0, 0.2], bx(0.11, 0.1, 0.08), rgb::WOOD),
                Part {
                    collide: false,
                    ..part([0.0, -0.104, 0.2], bx(0.108, 0.004, 0.075), rgb::FRONT)
                },
                Part {
                    collide: false,
                    ..part([0.0, -0.11, 0.22], bx(0.04, 0.006, 0.007), rgb::DARK)
                },
            ],
            0.17,
        )
    }
}

/// A microwave opening towards the robot (-y); its door hinges on the left
/// front edge and swings out to -y when opened (negative angles).
fn microwave() -> Kind {
    let body = [200, 200, 208];
    Kind {
        regions: vec![Region {
            name: "interior",
            centre: [-0.02, 0.0, 0.02],
            half: [0.09, 0.09],
            height: 0.17,
            on_part: false,
            slots: &[[-0.02, 0.0]],
            front_entry: true,
            place_yaw: None,
        }],
        articulation: Some(Articulation {
            name: "door",
            joint: JointKind::Revolute,
            axis: [0.0, 0.0, 1.0],
            anchor: [-0.15, -0.12, 0.02],
            limits: [-1.9, 0.0],
            parts: vec![
                part([0.12, -0.008, 0.095], bx(0.12, 0.008, 0.095), [45, 45, 55]),
                Part {
                    collide: false,
                    ..part([0.11, -0.017, 0.1], bx(0.085, 0.002, 0.07), [20, 25, 35])
                },
            ],
            closed_tol: 0.1,
            open_tol: 0.5,
            default_value: -1.65,
            mass: 0.5,
        }),
        ..fixed(
            "microwave",
            vec![
                Part {
                    top: Some([150, 150, 155]),
                    ..part([0.0, 0.0, 0.01], bx(0.15, 0.12, 0.01), [150, 150, 155])
                },
                part([0.0, 0.0, 0.21], bx(0.15, 0.12, 0.01), body),
                part([-0.14, 0.0, 0.11], bx(0.01, 0.12, 0.09), body),
                part([0.12, 0.0, 0.11], bx(0.03, 0.12, 0.09), [60, 60, 68]),
                part([0.0, 0.11, 0.11], bx(0.15, 0.01, 0.09), body),
            ],
            0.2,
        )
    }
}

/// An `[f32; 3]` as a vector.
pub fn v3(a: [f32; 3]) -> Vec3 {
    Vec3::new(a[0], a[1], a[2])
}
