//! Synthetic episodes whose frames encode their progress: a bright square
//! moves from the left edge to the right edge as progress goes 0 -> 1 on a
//! background whose tint names the task. Used by the tests (and usable for
//! smoke runs) so the world model's pipeline is checked without a simulator.
//! Never a substitute for simulator data in reported figures.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use wmrl_env::{CameraSpec, Episode, EpisodeStep, Frame};

/// Instructions of the synthetic tasks.
pub const TASKS: [&str; 2] = ["put the red block in the bowl", "open the top drawer"];

/// Render one frame at `progress` for `task`.
pub fn frame(size: u32, task: usize, progress: f32) -> Frame {
    let s = size as usize;
    let tint = if task.is_multiple_of(2) {
        [60u8, 20, 20]
    } else {
        [20, 20, 60]
    };
    let mut rgb = Vec::with_capacity(s * s * 3);
    let side = (s / 4).max(1);
    let x0 = ((s - side) as f32 * progress.clamp(0.0, 1.0)).round() as usize;
    let y0 = s / 2 - side / 2;
    for y in 0..s {
        for x in 0..s {
            let inside = x >= x0 && x < x0 + side && y >= y0 && y < y0 + side;
            if inside {
                rgb.extend_from_slice(&[230, 230, 80]);
            } else {
                rgb.extend_from_slice(&tint);
            }
        }
    }
    Frame {
        width: size,
        height: size,
        rgb,
    }
}

/// One episode: an expert reaches progress 1 and succeeds; a failed one
/// stalls at a random level below 0.8.
pub fn episode(seed: u64, size: u32, steps: usize, succeed: bool) -> Episode {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let task = rng.random_range(0..TASKS.len());
    let top: f32 = if succeed {
        1.0
    } else {
        rng.random_range(0.05..0.8)
    };
    let steps = steps.max(2);
    let progress_at = |i: usize| -> f32 {
        let x = i as f32 / (steps - 1) as f32;
        (top * (x * 1.25).min(1.0)).min(1.0)
    };
    let ep_steps = (0..steps)
        .map(|i| {
            let p = progress_at(i);
            EpisodeStep {
                frames: vec![frame(size, task, p)],
                proprio: vec![0.0; 8],
                action: vec![0.0; 7],
                progress: Some(p),
            }
        })
        .collect();
    Episode {
        suite: "synthetic".into(),
        task,
        init_state: 0,
        seed,
        instruction: TASKS[task].into(),
        cameras: vec![CameraSpec {
            name: "agentview".into(),
            width: size,
            height: size,
        }],
        success: succeed,
        final_progress: Some(progress_at(steps - 1)),
        source: if succeed {
            "synthetic-expert".into()
        } else {
            "synthetic-failed".into()
        },
        steps: ep_steps,
    }
}
