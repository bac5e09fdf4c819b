//! Behaviour of the tabletop simulator: task list, determinism, bad input,
//! predicates on hand-placed scenes, the expert, the vectorised form.

use rand::SeedableRng;
use rapier3d::math::Vec3;
use sha2::{Digest, Sha256};
use wmrl_env::{EnvError, Environment, ResetRequest, VecEnv};
use wmrl_sim::predicates::region_frame;
use wmrl_sim::{SimConfig, SimError, TabletopEnv, make_vec_env, tasks};

const LIBERO_10: [&str; 10] = [
    "put both the alphabet soup and the tomato sauce in the basket",
    "put both the cream cheese box and the butter in the basket",
    "turn on the stove and put the moka pot on it",
    "put the black bowl in the bottom drawer of the cabinet and close it",
    "put the white mug on the left plate and put the yellow and white mug on the right plate",
    "pick up the book and place it in the back compartment of the caddy",
    "put the white mug on the plate and put the chocolate pudding to the right of the plate",
    "put both the alphabet soup and the cream cheese box in the basket",
    "put both moka pots on the stove",
    "put the yellow and white mug in the microwave and close it",
];

fn req(task: usize, init_state: usize) -> ResetRequest {
    ResetRequest {
        task,
        init_state,
        seed: 0,
    }
}

fn small() -> SimConfig {
    SimConfig {
        image_size: 64,
        ..SimConfig::default()
    }
}

#[test]
fn ten_tasks_in_libero_order() {
    let ts = tasks().expect("tasks parse");
    let got: Vec<&str> = ts.iter().map(|t| t.instruction.as_str()).collect();
    assert_eq!(got, LIBERO_10);
    let env = TabletopEnv::new(SimConfig::default()).expect("env");
    let spec = env.spec();
    assert_eq!(spec.tasks.len(), 10);
    assert_eq!(spec.action_dim, 7);
    assert_eq!(spec.cameras.len(), 2);
    assert!(spec.tasks.iter().all(|t| t.n_init_states == 50));
}

fn run_hash(task: usize, init: usize, steps: usize) -> String {
    let mut env = TabletopEnv::new(small()).expect("env");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut h = Sha256::new();
    let obs = env.reset(req(task, init)).expect("reset");
    for f in &obs.frames {
        h.update(&f.rgb);
    }
    for _ in 0..steps {
        let a = env.expert_action(0.2, &mut rng).expect("expert");
        let r = env.step(&a).expect("step");
        for f in &r.obs.frames {
            h.update(&f.rgb);
        }
        for v in env.world().expect("world").state_vector() {
            h.update(v.to_le_bytes());
        }
        if r.done || r.truncated {
            break;
        }
    }
    format!("{:x}", h.finalize())
}

#[test]
fn same_inputs_give_bit_identical_states_and_frames() {
    let a = run_hash(3, 4, 40);
    assert_eq!(a, run_hash(3, 4, 40));
    assert_ne!(a, run_hash(3, 5, 40), "another initial state must differ");
}

#[test]
fn initial_states_differ_and_repeat() {
    let env = TabletopEnv::new(small()).expect("env");
    let a = env.init_state(0, 1).expect("init");
    assert_eq!(a, env.init_state(0, 1).expect("init"));
    assert_ne!(a, env.init_state(0, 2).expect("init"));
}

#[test]
fn bad_actions_and_indices_are_refused_or_clipped() {
    let mut env = TabletopEnv::new(small()).expect("env");
    assert!(matches!(
        env.reset(req(10, 0)),
        Err(EnvError::UnknownTask {
            task: 10,
            n_tasks: 10
        })
    ));
    assert!(matches!(
        env.reset(req(0, 50)),
        Err(EnvError::UnknownInitState { init_state: 50, .. })
    ));
    assert!(
        matches!(env.step(&vec![0.0; 7]), Err(EnvError::Sim(_))),
        "step before reset"
    );
    env.reset(req(0, 0)).expect("reset");
    let nan = vec![0.0, f32::NAN, 0.0, 0.0, 0.0, 0.0, 0.0];
    assert!(matches!(env.step(&nan), Err(EnvError::InvalidAction(_))));
    let inf = vec![0.0, 0.0, f32::INFINITY, 0.0, 0.0, 0.0, 0.0];
    assert!(matches!(env.step(&inf), Err(EnvError::InvalidAction(_))));
    assert!(matches!(
        env.step(&vec![0.0; 6]),
        Err(EnvError::InvalidAction(_))
    ));
    // Out of range is clipped: the same as the saturated action.
    let big = env
        .step(&vec![5.0, -3.0, 2.0, 0.0, 0.0, 9.0, 4.0])
        .expect("step");
    let mut other = TabletopEnv::new(small()).expect("env");
    other.reset(req(0, 0)).expect("reset");
    let sat = other
        .step(&vec![1.0, -1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
        .expect("step");
    assert_eq!(big.obs, sat.obs);
    assert!(matches!(
        TabletopEnv::new(SimConfig {
            image_size: 300,
            ..SimConfig::default()
        }),
        Err(SimError::Config(_))
    ));
}

/// Reset `task` (initial state 0) with articulation values overridden.
fn scene(task: usize, joints: &[(&str, f32)]) -> TabletopEnv {
    let mut env = TabletopEnv::new(SimConfig {
        render: false,
        ..SimConfig::default()
    })
    .expect("env");
    let t = &tasks().expect("tasks")[task];
    let mut init = env.init_state(task, 0).expect("init");
    for (name, v) in joints {
        init.joints[t.object_index(name).expect("object")] = *v;
    }
    env.reset_to(task, &init).expect("reset");
    env
}

/// Put `obj` on slot `slot` of `target.region`, its bottom just above the floor.
fn put(env: &mut TabletopEnv, obj: &str, target: &str, region: &str, slot: usize) {
    let task = env.task().expect("task");
    let (i, t) = (
        task.object_index(obj).expect("obj"),
        task.object_index(target).expect("target"),
    );
    let r = task.kinds[t].region(region).expect("region");
    let w = env.world_mut().expect("world");
    let f = region_frame(w, t, r);
    let s = r.slots[slot];
    let p = f.transform_point(Vec3::new(s[0] - r.centre[0], s[1] - r.centre[1], 0.003));
    w.place(i, p, r.place_yaw.unwrap_or(0.0));
}

fn put_at(env: &mut TabletopEnv, obj: &str, x: f32, y: f32) {
    let i = env.task().expect("task").object_index(obj).expect("obj");
    env.world_mut()
        .expect("world")
        .place(i, Vec3::new(x, y, 0.001), 0.0);
}

/// Let the scene settle with the gripper open and away; return the status.
fn settle(env: &mut TabletopEnv) -> (Vec<bool>, bool, f32) {
    let cfg = env.config().clone();
    for _ in 0..15 {
        env.world_mut()
            .expect("world")
            .control(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0], &cfg);
    }
    let s = env.refresh().expect("status");
    (s.holds.clone(), s.success, s.progress)
}

#[test]
fn in_basket_holds_exactly_when_objects_are_inside() {
    let mut env = scene(0, &[]);
    assert_eq!(settle(&mut env), (vec![false, false], false, 0.0));
    put(&mut env, "alphabet_soup", "basket", "interior", 0);
    let (h, ok, p) = settle(&mut env);
    assert_eq!((h, ok), (vec![true, false], false));
    assert!((p - 0.5).abs() < 1e-6, "progress {p}");
    put(&mut env, "tomato_sauce", "basket", "interior", 1);
    assert_eq!(settle(&mut env), (vec![true, true], true, 1.0));
    // Next to the basket is not in it.
    put_at(&mut env, "tomato_sauce", 0.15 + 0.2, -0.1);
    assert!(!settle(&mut env).1);
}

#[test]
fn on_plates_checks_which_plate() {
    let mut env = scene(4, &[]);
    put(&mut env, "white_mug", "right_plate", "top", 0);
    put(&mut env, "yellow_white_mug", "left_plate", "top", 0);
    assert_eq!(settle(&mut env).0, vec![false, false]);
    put(&mut env, "white_mug", "left_plate", "top", 0);
    put(&mut env, "yellow_white_mug", "right_plate", "top", 0);
    assert_eq!(settle(&mut env), (vec![true, true], true, 1.0));
}

#[test]
fn right_of_plate_is_directional() {
    let mut env = scene(6, &[]);
    put(&mut env, "white_mug", "plate", "top", 0);
    let plate = env.task().expect("t").object_index("plate").expect("plate");
    let c = env.world().expect("w").pose(plate).translation;
    put_at(&mut env, "chocolate_pudding", c.x - 0.16, c.y);
    assert_eq!(settle(&mut env), (vec![true, false], false, 0.5));
    put_at(&mut env, "chocolate_pudding", c.x + 0.16, c.y);
    assert_eq!(settle(&mut env), (vec![true, true], true, 1.0));
    put_at(&mut env, "chocolate_pudding", c.x + 0.16, c.y + 0.2);
    assert!(!settle(&mut env).1, "far behind is not right of");
}

#[test]
fn caddy_back_compartment_only() {
    let mut env = scene(5, &[]);
    put(&mut env, "book", "caddy", "front", 0);
    assert!(!settle(&mut env).1);
    put(&mut env, "book", "caddy", "back", 0);
    assert_eq!(settle(&mut env), (vec![true], true, 1.0));
}

#[test]
fn drawer_needs_bowl_inside_and_drawer_closed() {
    let mut env = scene(3, &[]);
    put(&mut env, "black_bowl", "cabinet", "drawer", 0);
    let (h, ok, _) = settle(&mut env);
    assert_eq!((h, ok), (vec![true, false], false), "open drawer");
    let mut env = scene(3, &[("cabinet", 0.0)]);
    assert_eq!(settle(&mut env).0, vec![false, true], "closed, empty");
    let mut env = scene(3, &[("cabinet", 0.0)]);
    put(&mut env, "black_bowl", "cabinet", "drawer", 0);
    assert_eq!(settle(&mut env), (vec![true, true], true, 1.0));
}

#[test]
fn microwave_needs_mug_inside_and_door_closed() {
    let mut env = scene(9, &[]);
    put(&mut env, "yellow_white_mug", "microwave", "interior", 0);
    assert_eq!(settle(&mut env).0, vec![true, false]);
    let mut env = scene(9, &[("microwave", 0.0)]);
    put(&mut env, "yellow_white_mug", "microwave", "interior", 0);
    assert_eq!(settle(&mut env), (vec![true, true], true, 1.0));
}

#[test]
fn stove_must_be_on_and_pots_on_burners() {
    let mut env = scene(2, &[]);
    put(&mut env, "moka_pot", "stove", "top", 0);
    assert_eq!(settle(&mut env).0, vec![false, true]);
    let mut env = scene(2, &[("stove", 0.9)]);
    put(&mut env, "moka_pot", "stove", "top", 0);
    assert_eq!(settle(&mut env), (vec![true, true], true, 1.0));
    let mut env = scene(8, &[]);
    put(&mut env, "moka_pot_1", "stove", "top", 0);
    put(&mut env, "moka_pot_2", "stove", "top", 1);
    assert_eq!(settle(&mut env), (vec![true, true], true, 1.0));
}

#[test]
fn expert_solves_first_state_of_every_task() {
    let mut env = TabletopEnv::new(SimConfig {
        render: false,
        ..SimConfig::default()
    })
    .expect("env");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    for task in 0..10 {
        let obs = env.reset(req(task, 0)).expect("reset");
        let p0 = obs.progress.expect("progress");
        let mut last = None;
        let mut max_p = p0;
        for _ in 0..env.config().max_steps {
            let a = env.expert_action(0.0, &mut rng).expect("expert");
            let r = env.step(&a).expect("step");
            let p = r.obs.progress.expect("progress");
            assert!((0.0..=1.0).contains(&p));
            max_p = max_p.max(p);
            if r.done || r.truncated {
                last = Some(r);
                break;
            }
        }
        let r = last.expect("episode ends");
        assert!(
            r.success && r.done && !r.truncated,
            "task {task} not solved"
        );
        assert_eq!(r.reward, 1.0);
        assert!(
            p0 < 1.0 && r.obs.progress == Some(1.0),
            "task {task}: {p0} -> {max_p}"
        );
    }
}

#[test]
fn frames_and_proprio_have_the_spec_shapes() {
    let mut env = TabletopEnv::new(small()).expect("env");
    let obs = env.reset(req(7, 3)).expect("reset");
    assert_eq!(obs.frames.len(), 2);
    for f in &obs.frames {
        assert_eq!((f.width, f.height, f.rgb.len()), (64, 64, 64 * 64 * 3));
        let mut colours: Vec<[u8; 3]> = f.rgb.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
        colours.sort_unstable();
        colours.dedup();
        assert!(colours.len() > 8, "a frame shows a scene, not a blank");
    }
    assert_ne!(obs.frames[0], obs.frames[1], "two cameras, two views");
    assert_eq!(obs.proprio.len(), wmrl_sim::PROPRIO_DIM);
}

#[test]
fn vec_env_steps_slots_independently() {
    let mut venv = make_vec_env(&small(), 2, None).expect("venv");
    let obs = venv
        .reset(&[(0, req(1, 0)), (1, req(5, 2))])
        .expect("reset");
    assert_eq!(obs.len(), 2);
    let a = vec![0.5, 0.0, -0.5, 0.0, 0.0, 0.0, -1.0];
    let r = venv.step(&[(1, a.clone()), (0, a)]).expect("step");
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|s| !s.done && !s.truncated));
}

#[test]
fn expert_episode_round_trips_through_the_episode_format() {
    let mut env = TabletopEnv::new(small()).expect("env");
    let ep = wmrl_sim::record_expert_episode(&mut env, 5, 1, 0.0, 9).expect("episode");
    assert!(ep.success && ep.final_progress == Some(1.0));
    assert_eq!(ep.instruction, LIBERO_10[5]);
    assert!(ep.steps.len() > 10 && ep.steps.len() < env.config().max_steps);
    assert_eq!(ep.steps[0].progress, Some(0.0));
    assert!(
        ep.steps
            .iter()
            .all(|s| s.frames.len() == 2 && s.action.len() == 7)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = wmrl_env::write_episode(dir.path(), 0, &ep).expect("write");
    assert_eq!(wmrl_env::read_episode(&path).expect("read"), ep);
}

#[test]
fn dart_episodes_record_the_clean_expert_action_while_executing_noise() {
    let mut env = TabletopEnv::new(small()).expect("env");
    let clean = wmrl_sim::record_expert_episode(&mut env, 5, 1, 0.0, 9).expect("clean");
    // No noise: DART is the clean expert, step for step.
    let zero = wmrl_sim::record_dart_episode(&mut env, 5, 1, 0.0, 9).expect("dart 0");
    assert_eq!(zero, clean);
    let noisy = wmrl_sim::record_expert_episode(&mut env, 5, 1, 0.3, 9).expect("noisy");
    let dart = wmrl_sim::record_dart_episode(&mut env, 5, 1, 0.3, 9).expect("dart");
    assert_eq!(dart.source, "expert+dart0.3");
    // The executed noise perturbs the visited states...
    assert_ne!(dart.steps[5].proprio, clean.steps[5].proprio);
    // ...but the recorded gripper command stays the expert's clean open/close
    // value, where label noise records the perturbed one.
    let grip_clean = |ep: &wmrl_env::Episode| ep.steps.iter().all(|s| s.action[6].abs() == 1.0);
    assert!(grip_clean(&clean));
    assert!(grip_clean(&dart));
    assert!(!grip_clean(&noisy));
}

#[test]
fn unobserved_steps_skip_frames_but_not_physics() {
    // Two slots, same task, state and actions: slot 0 observes every step,
    // slot 1 only every fourth. Physics, proprio and flags agree at every
    // step; frames are present exactly where asked and at the episode's end,
    // and equal the always-observed slot's there.
    let cfg = SimConfig {
        max_steps: 30,
        ..small()
    };
    let mut venv = make_vec_env(&cfg, 2, None).expect("venv");
    venv.reset(&[(0, req(2, 1)), (1, req(2, 1))])
        .expect("reset");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut ended = false;
    for t in 0..cfg.max_steps {
        let a = venv
            .env_mut(0)
            .expect("slot")
            .expert_action(0.3, &mut rng)
            .expect("expert");
        let full = venv.step_observing(&[(0, a.clone())], true).expect("step");
        let observe = t % 4 == 3;
        let part = venv.step_observing(&[(1, a)], observe).expect("step");
        let (f, p) = (&full[0], &part[0]);
        assert_eq!(f.obs.proprio, p.obs.proprio, "step {t}");
        assert_eq!(f.obs.progress, p.obs.progress, "step {t}");
        assert_eq!(
            (f.success, f.done, f.truncated),
            (p.success, p.done, p.truncated)
        );
        assert_eq!(f.obs.frames.len(), 2);
        if observe || p.done || p.truncated {
            assert_eq!(f.obs.frames, p.obs.frames, "step {t}: frames where asked");
        } else {
            assert!(p.obs.frames.is_empty(), "step {t}: no frames were asked");
        }
        if p.done || p.truncated {
            ended = true;
            break;
        }
    }
    assert!(ended, "the episode ends within max_steps");
}
