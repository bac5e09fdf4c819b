//! What openvla-mini's LIBERO evaluation does around `predict_action`
//! (experiments/robot/libero/run_libero_eval.py): un-normalising with the
//! run's `dataset_statistics.json` (q01/q99 where `mask`), the gripper from
//! [0, 1] to a binarised, sign-inverted [-1, 1], and the 0.9-area centre crop
//! for runs trained with image augmentation. Pure functions; this module
//! never talks to a simulator.

use std::path::Path;

use crate::{ACTION_DIM, MiniVlaError, Result};

/// Per-dimension action statistics of one dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionStats {
    pub q01: [f32; ACTION_DIM],
    pub q99: [f32; ACTION_DIM],
    /// Dimensions that are un-normalised (the gripper is not, in OpenVLA's
    /// LIBERO statistics).
    pub mask: [bool; ACTION_DIM],
}

fn io(path: &Path, m: impl std::fmt::Display) -> MiniVlaError {
    MiniVlaError::Io {
        path: path.display().to_string(),
        message: m.to_string(),
    }
}

impl ActionStats {
    /// `dataset_statistics.json` -> `[key]["action"]`. `key = None` takes
    /// the only dataset; `key` missing falls back to `{key}_no_noops`, as
    /// the evaluation script does.
    pub fn from_file(path: &Path, key: Option<&str>) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
        let all: serde_json::Value = serde_json::from_str(&text).map_err(|e| io(path, e))?;
        let obj = all
            .as_object()
            .ok_or_else(|| io(path, "not a JSON object"))?;
        let entry = match key {
            Some(k) => obj
                .get(k)
                .or_else(|| obj.get(&format!("{k}_no_noops")))
                .ok_or_else(|| {
                    let keys: Vec<&String> = obj.keys().collect();
                    io(path, format!("no statistics for `{k}` (has {keys:?})"))
                })?,
            None if obj.len() == 1 => obj.values().next().unwrap_or(&serde_json::Value::Null),
            None => return Err(io(path, "several datasets: name one")),
        };
        let action = &entry["action"];
        let arr = |name: &str| -> Result<[f32; ACTION_DIM]> {
            let v: Vec<f32> = serde_json::from_value(action[name].clone())
                .map_err(|e| io(path, format!("action.{name}: {e}")))?;
            v.try_into()
                .map_err(|v: Vec<f32>| io(path, format!("action.{name} has {} values", v.len())))
        };
        let mask = match action.get("mask") {
            Some(m) => {
                let v: Vec<bool> = serde_json::from_value(m.clone())
                    .map_err(|e| io(path, format!("action.mask: {e}")))?;
                v.try_into().map_err(|v: Vec<bool>| {
                    io(path, format!("action.mask has {} values", v.len()))
                })?
            }
            None => [true; ACTION_DIM],
        };
        Ok(Self {
            q01: arr("q01")?,
            q99: arr("q99")?,
            mask,
        })
    }

    /// `0.5 * (a + 1) * (q99 - q01) + q01` where `mask`, `a` elsewhere.
    pub fn unnormalize(&self, a: [f32; ACTION_DIM]) -> [f32; ACTION_DIM] {
        std::array::from_fn(|i| {
            if self.mask[i] {
                0.5 * (a[i] + 1.0) * (self.q99[i] - self.q01[i]) + self.q01[i]
            } else {
                a[i]
            }
        })
    }
}

/// The action LIBERO's controller takes from an un-normalised one: gripper
/// `[0, 1] -> sign(2 g - 1)`, then inverted (the RLDS loader has 1 = open;
/// LIBERO has -1 = open).
pub fn libero_env_action(a: [f32; ACTION_DIM]) -> [f32; ACTION_DIM] {
    let mut out = a;
    let g = 2.0 * a[ACTION_DIM - 1] - 1.0;
    let sign = if g > 0.0 {
        1.0
    } else if g < 0.0 {
        -1.0
    } else {
        0.0
    };
    out[ACTION_DIM - 1] = -sign;
    out
}

/// Centre crop of `area` times the image area (sides scaled by
/// `sqrt(area)`), resized back to the original size: the evaluation's
/// `center_crop = True` (area 0.9) for runs trained with random crops.
pub fn center_crop(img: &image::RgbImage, area: f32) -> image::RgbImage {
    let (w, h) = img.dimensions();
    let s = area.clamp(0.0, 1.0).sqrt();
    let (cw, ch) = (
        ((w as f32 * s).round() as u32).max(1),
        ((h as f32 * s).round() as u32).max(1),
    );
    let crop = image::imageops::crop_imm(img, (w - cw) / 2, (h - ch) / 2, cw, ch).to_image();
    image::imageops::resize(&crop, w, h, image::imageops::FilterType::CatmullRom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_unnormalise_and_the_gripper_follows_libero() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("dataset_statistics.json");
        let stats = serde_json::json!({"libero_90_no_noops": {"action": {
            "q01": [-0.5, -1.0, -0.2, 0.0, 0.0, -0.1, 0.0],
            "q99": [0.5, 1.0, 0.6, 0.2, 0.4, 0.1, 1.0],
            "mask": [true, true, true, true, true, true, false]}}});
        std::fs::write(&path, stats.to_string()).expect("write");
        let s = ActionStats::from_file(&path, Some("libero_90")).expect("stats");
        let a = s.unnormalize([-1.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.3]);
        let want = [-0.5, 0.0, 0.6, 0.1, 0.3, 0.1, 0.3];
        for (x, y) in a.iter().zip(want) {
            assert!((x - y).abs() < 1e-6, "{a:?}");
        }
        assert!(ActionStats::from_file(&path, Some("bridge")).is_err());
        assert_eq!(ActionStats::from_file(&path, None).expect("only one"), s);
        // gripper 0.3 (closing in RLDS terms) -> sign(-0.4) = -1 -> inverted +1 (close)
        assert_eq!(libero_env_action(a)[6], 1.0);
        assert_eq!(
            libero_env_action([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.9])[6],
            -1.0
        );
        assert_eq!(libero_env_action(a)[..6], a[..6]);
    }

    #[test]
    fn centre_crop_keeps_the_size_and_zooms_in() {
        // a 4-pixel red band at the left, blue elsewhere
        let img = image::RgbImage::from_fn(40, 40, |x, _| {
            if x < 4 {
                image::Rgb([255, 0, 0])
            } else {
                image::Rgb([0, 0, 255])
            }
        });
        let c = center_crop(&img, 0.9);
        assert_eq!(c.dimensions(), (40, 40));
        // crop side round(40 * sqrt(0.9)) = 38 from x = 1: 3 red columns
        // remain, stretched to the new left edge
        assert!(c.get_pixel(0, 20).0[0] > 128);
        assert!(c.get_pixel(20, 20).0[2] > 200);
        assert_eq!(center_crop(&img, 1.0), img);
    }
}
