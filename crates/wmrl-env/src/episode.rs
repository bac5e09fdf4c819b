//! The on-disk episode format that demonstrations and rollouts are written in,
//! and that the SFT and world-model trainers read (documented in
//! docs/episodes.md).
//!
//! One episode is one file `ep_NNNNNN.msgpack` in a directory: a msgpack map
//! with a `format` tag, the episode's metadata and its steps, each frame
//! PNG-encoded. Files are written to a temporary name and renamed into place,
//! so a reader never sees a half-written episode as whole.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Action, CameraSpec, EnvError, Frame, Result};

const FORMAT: &str = "wmrl-episode/1";

/// One step: what the policy saw, and what it did.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeStep {
    /// One frame per camera, in the order of [`Episode::cameras`].
    pub frames: Vec<Frame>,
    pub proprio: Vec<f32>,
    /// The action taken after seeing this observation.
    pub action: Action,
    /// Oracle progress of this observation, where the simulator knows it.
    pub progress: Option<f32>,
}

/// A whole episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub suite: String,
    pub task: usize,
    pub init_state: usize,
    pub seed: u64,
    pub instruction: String,
    pub cameras: Vec<CameraSpec>,
    /// The task's goal held at the end.
    pub success: bool,
    /// Oracle progress after the last action, where known.
    pub final_progress: Option<f32>,
    /// Free-form origin, e.g. `expert` or `expert+noise0.3`.
    pub source: String,
    pub steps: Vec<EpisodeStep>,
}

#[derive(Serialize, Deserialize)]
struct StepOnDisk {
    #[serde(with = "serde_bytes_vec")]
    png: Vec<Vec<u8>>,
    proprio: Vec<f32>,
    action: Vec<f32>,
    progress: Option<f32>,
}

#[derive(Serialize, Deserialize)]
struct EpisodeOnDisk {
    format: String,
    suite: String,
    task: usize,
    init_state: usize,
    seed: u64,
    instruction: String,
    cameras: Vec<CameraSpec>,
    success: bool,
    final_progress: Option<f32>,
    source: String,
    steps: Vec<StepOnDisk>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> EnvError {
    EnvError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> EnvError {
    EnvError::CorruptEpisode {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn encode_png(frame: &Frame) -> Result<Vec<u8>> {
    use image::ImageEncoder;
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new_with_quality(
        &mut out,
        image::codecs::png::CompressionType::Fast,
        image::codecs::png::FilterType::Sub,
    )
    .write_image(
        &frame.rgb,
        frame.width,
        frame.height,
        image::ExtendedColorType::Rgb8,
    )
    .map_err(|e| EnvError::Sim(format!("png encode: {e}")))?;
    Ok(out)
}

fn decode_png(path: &Path, bytes: &[u8]) -> Result<Frame> {
    let img = image::load_from_memory_with_format(bytes, image::ImageFormat::Png)
        .map_err(|e| corrupt(path, format!("frame: {e}")))?
        .into_rgb8();
    let (w, h) = img.dimensions();
    Frame::new(w, h, img.into_raw())
}

/// The file name of episode `index` inside a directory.
pub fn episode_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("ep_{index:06}.msgpack"))
}

/// Write an episode atomically as `dir/ep_NNNNNN.msgpack`.
pub fn write_episode(dir: &Path, index: usize, ep: &Episode) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let steps = ep
        .steps
        .iter()
        .map(|s| {
            Ok(StepOnDisk {
                png: s.frames.iter().map(encode_png).collect::<Result<_>>()?,
                proprio: s.proprio.clone(),
                action: s.action.clone(),
                progress: s.progress,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let disk = EpisodeOnDisk {
        format: FORMAT.into(),
        suite: ep.suite.clone(),
        task: ep.task,
        init_state: ep.init_state,
        seed: ep.seed,
        instruction: ep.instruction.clone(),
        cameras: ep.cameras.clone(),
        success: ep.success,
        final_progress: ep.final_progress,
        source: ep.source.clone(),
        steps,
    };
    let bytes = rmp_serde::to_vec_named(&disk).map_err(|e| EnvError::Sim(e.to_string()))?;
    let path = episode_path(dir, index);
    let tmp = path.with_extension("msgpack.partial");
    {
        let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        f.write_all(&bytes).map_err(|e| io_err(&tmp, e))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
    Ok(path)
}

/// Read one episode file, checking its format tag and frame sizes.
pub fn read_episode(path: &Path) -> Result<Episode> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let disk: EpisodeOnDisk = rmp_serde::from_slice(&bytes).map_err(|e| corrupt(path, e))?;
    if disk.format != FORMAT {
        return Err(corrupt(
            path,
            format!("format tag {:?}, expected {FORMAT:?}", disk.format),
        ));
    }
    let steps = disk
        .steps
        .into_iter()
        .enumerate()
        .map(|(t, s)| {
            if s.png.len() != disk.cameras.len() {
                return Err(corrupt(
                    path,
                    format!(
                        "step {t} has {} frames for {} cameras",
                        s.png.len(),
                        disk.cameras.len()
                    ),
                ));
            }
            let frames = s
                .png
                .iter()
                .map(|b| decode_png(path, b))
                .collect::<Result<Vec<_>>>()?;
            for (f, c) in frames.iter().zip(&disk.cameras) {
                if f.width != c.width || f.height != c.height {
                    return Err(corrupt(
                        path,
                        format!(
                            "step {t} camera {} is {}x{}, header says {}x{}",
                            c.name, f.width, f.height, c.width, c.height
                        ),
                    ));
                }
            }
            Ok(EpisodeStep {
                frames,
                proprio: s.proprio,
                action: s.action,
                progress: s.progress,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Episode {
        suite: disk.suite,
        task: disk.task,
        init_state: disk.init_state,
        seed: disk.seed,
        instruction: disk.instruction,
        cameras: disk.cameras,
        success: disk.success,
        final_progress: disk.final_progress,
        source: disk.source,
        steps,
    })
}

/// The complete episode files in a directory, sorted by name. Partial files
/// left by an interrupted writer are ignored.
pub fn list_episodes(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ep_") && n.ends_with(".msgpack"))
        })
        .collect();
    out.sort();
    Ok(out)
}

mod serde_bytes_vec {
    use serde::ser::SerializeSeq;
    use serde::{Deserializer, Serializer};

    struct Bytes<'a>(&'a [u8]);
    impl serde::Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(&Bytes(b))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        struct ByteBuf(Vec<u8>);
        impl<'de> serde::Deserialize<'de> for ByteBuf {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Vec<u8>;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("bytes")
                    }
                    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                        Ok(v.to_vec())
                    }
                    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                        Ok(v)
                    }
                }
                d.deserialize_bytes(V).map(ByteBuf)
            }
        }
        struct SeqV;
        impl<'de> serde::de::Visitor<'de> for SeqV {
            type Value = Vec<Vec<u8>>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of byte strings")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Vec<Vec<u8>>, A::Error> {
                let mut out = Vec::new();
                while let Some(ByteBuf(b)) = seq.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_seq(SeqV)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Episode {
        let cams = vec![CameraSpec {
            name: "agentview".into(),
            width: 4,
            height: 3,
        }];
        let frame = Frame::new(4, 3, (0..36).map(|i| (i * 7) as u8).collect()).expect("frame");
        Episode {
            suite: "test".into(),
            task: 2,
            init_state: 5,
            seed: 9,
            instruction: "do it".into(),
            cameras: cams,
            success: true,
            final_progress: Some(1.0),
            source: "expert".into(),
            steps: vec![
                EpisodeStep {
                    frames: vec![frame.clone()],
                    proprio: vec![0.1, 0.2],
                    action: vec![0.5; 7],
                    progress: Some(0.25),
                };
                3
            ],
        }
    }

    #[test]
    fn round_trip_is_exact() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ep = sample();
        let path = write_episode(dir.path(), 3, &ep).expect("write");
        assert_eq!(read_episode(&path).expect("read"), ep);
        assert_eq!(list_episodes(dir.path()).expect("list"), vec![path]);
    }

    #[test]
    fn partial_and_truncated_files_are_not_taken_as_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_episode(dir.path(), 0, &sample()).expect("write");
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(dir.path().join("ep_000001.msgpack.partial"), &bytes).expect("w");
        assert_eq!(list_episodes(dir.path()).expect("list").len(), 1);
        std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
        let err = read_episode(&path).expect_err("truncated must fail");
        assert!(matches!(err, EnvError::CorruptEpisode { .. }), "{err}");
    }
}
