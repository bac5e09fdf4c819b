//! The trainer's side of human labels: queue a step's anchor rollouts with
//! their frames, then wait until a person has labelled all of them
//! (`labels.wait = true`), or take what is there and go on
//! (`labels.wait = false`: an unlabelled rollout counts as ungraded).
//!
//! It must never read a label from anywhere but `labels.jsonl` through
//! [`LabelStore::take`]; the simulator's flag goes to `sim_flags.jsonl`
//! for tests and labeller scoring, and nothing here reads it back.

use std::path::Path;
use std::time::{Duration, Instant};

use wmrl_env::Frame;

use super::{LabelError, LabelStore, QueueItem, SIM_FLAGS_FILE, SimFlag, Verdict, now_secs};
use crate::rollout::Rollout;

/// The trainer's handle on the run's label files.
#[derive(Debug, Clone)]
pub struct HumanLabels {
    store: LabelStore,
    wait: bool,
    poll: Duration,
}

/// The id of member `member` of group `group` at step `step`.
pub fn rollout_id(step: usize, group: usize, member: usize) -> String {
    format!("s{step}-g{group}-m{member}")
}

impl HumanLabels {
    pub fn new(run_dir: &Path, wait: bool, poll: Duration) -> Self {
        Self {
            store: LabelStore::new(run_dir),
            wait,
            poll,
        }
    }

    /// The real outcomes of the anchor groups `groups` of step `step`
    /// (`rollouts` in group order, `group_size` each; `wm` the raw
    /// world-model score of every rollout, when the arm has one), as people
    /// label them. Blocks until all are labelled when waiting; otherwise
    /// returns at once, with `None` for each rollout without a label (all
    /// of a group's labels are taken together or not at all).
    pub fn real(
        &self,
        step: usize,
        groups: &[usize],
        group_size: usize,
        rollouts: &[Rollout],
        wm: Option<&[f64]>,
    ) -> Result<Vec<Vec<Option<f64>>>, LabelError> {
        let mut items = Vec::new();
        let mut flags = Vec::new();
        for &g in groups {
            for m in 0..group_size {
                let i = g * group_size + m;
                let r = &rollouts[i];
                let first = r.frames.first();
                items.push(QueueItem {
                    id: rollout_id(step, g, m),
                    step,
                    group: g,
                    member: m,
                    task: r.spec.task,
                    init_state: r.spec.init_state,
                    instruction: r.instruction.clone(),
                    wm_score: wm.map(|w| w[i]),
                    frames: r.frames.len(),
                    width: first.map_or(0, |f| f.width),
                    height: first.map_or(0, |f| f.height),
                    wrist: !r.wrist.is_empty(),
                    queued_at: now_secs(),
                });
                flags.push(SimFlag {
                    id: rollout_id(step, g, m),
                    success: r.success,
                });
            }
        }
        let by_id = |id: &str| {
            items
                .iter()
                .position(|q| q.id == id)
                .map(|k| &rollouts[groups[k / group_size] * group_size + k % group_size])
        };
        let store = &self.store;
        // The flags first (those not written yet), so that every queued
        // rollout has one even after a crash between the two.
        let known: std::collections::BTreeSet<String> = read_sim_flags_in(store.dir())
            .into_iter()
            .map(|f| f.id)
            .collect();
        flags.retain(|f| !known.contains(&f.id));
        write_sim_flags(store.dir(), &flags)?;
        store.enqueue(&items, |q| {
            let r = by_id(&q.id).ok_or_else(|| LabelError::Unknown(q.id.clone()))?;
            write_strip(&store.frames_path(&q.id, false), &r.frames)?;
            if !r.wrist.is_empty() {
                write_strip(&store.frames_path(&q.id, true), &r.wrist)?;
            }
            Ok(())
        })?;
        let started = Instant::now();
        let mut told = None::<Instant>;
        let mut out: Vec<Vec<Option<f64>>> = vec![vec![None; group_size]; groups.len()];
        for (k, _) in groups.iter().enumerate() {
            let ids: Vec<String> = items[k * group_size..(k + 1) * group_size]
                .iter()
                .map(|q| q.id.clone())
                .collect();
            loop {
                if let Some(v) = store.take(&ids, step)? {
                    out[k] = v.iter().map(|v| Some(v.outcome())).collect();
                    break;
                }
                if !self.wait {
                    break;
                }
                if told.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    let pending = store.snapshot()?.pending().count();
                    tracing::info!(
                        "step {step}: waiting for people's labels ({pending} rollouts pending, {:.0} s so far): wmrl label serve --run {}",
                        started.elapsed().as_secs_f64(),
                        store.dir().parent().unwrap_or(store.dir()).display()
                    );
                    told = Some(Instant::now());
                }
                std::thread::sleep(self.poll);
            }
        }
        Ok(out)
    }
}

impl HumanLabels {
    /// With `labels.wait = false`, at the start of step `step`: the anchor
    /// groups of earlier steps that were not fully labelled in their step
    /// and are now, with their raw world-model scores and outcomes, taken
    /// (recorded as used at `step`, so a replay of `step` after a crash
    /// takes the same groups again and no other step takes them). Groups
    /// without world-model scores (arms that read none) are left alone.
    /// Nothing when the trainer waits (every group was taken in its step).
    pub fn late(
        &self,
        step: usize,
        group_size: usize,
    ) -> Result<Vec<wmrl_core::AnchorGroup>, LabelError> {
        if self.wait {
            return Ok(Vec::new());
        }
        let s = self.store.snapshot()?;
        let mut groups: std::collections::BTreeMap<(usize, usize), Vec<&QueueItem>> =
            std::collections::BTreeMap::new();
        for q in s.queue.iter().filter(|q| q.step < step) {
            groups.entry((q.step, q.group)).or_default().push(q);
        }
        let mut out = Vec::new();
        for ((st, g), mut members) in groups {
            members.sort_by_key(|q| q.member);
            if members.len() != group_size {
                continue;
            }
            let taken_elsewhere = members
                .iter()
                .any(|q| s.consumed.get(&q.id).is_some_and(|&(_, t)| t != step));
            let xs: Option<Vec<f64>> = members.iter().map(|q| q.wm_score).collect();
            let (false, Some(xs)) = (taken_elsewhere, xs) else {
                continue;
            };
            let ids: Vec<String> = members.iter().map(|q| q.id.clone()).collect();
            if let Some(v) = self.store.take(&ids, step)? {
                out.push(wmrl_core::AnchorGroup {
                    step: st as u64,
                    group: g,
                    wm: xs,
                    real: v.iter().map(|v| v.outcome()).collect(),
                });
            }
        }
        if !out.is_empty() {
            tracing::info!(
                "step {step}: {} anchor groups labelled after their step go into the calibration",
                out.len()
            );
        }
        Ok(out)
    }
}

/// The simulator's flags of newly queued rollouts: tests and labeller
/// scoring only (the page server never opens this file).
pub fn write_sim_flags(dir: &Path, flags: &[SimFlag]) -> Result<(), LabelError> {
    use std::io::Write;
    if flags.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|source| LabelError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let p = dir.join(SIM_FLAGS_FILE);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .map_err(|source| LabelError::Io {
            path: p.display().to_string(),
            source,
        })?;
    let mut text = String::new();
    for fl in flags {
        text.push_str(&serde_json::to_string(fl).unwrap_or_default());
        text.push('\n');
    }
    f.write_all(text.as_bytes())
        .map_err(|source| LabelError::Io {
            path: p.display().to_string(),
            source,
        })
}

/// `frames` side by side in one PNG (what the page plays), written through
/// a temporary file and a rename.
pub fn write_strip(path: &Path, frames: &[Frame]) -> Result<(), LabelError> {
    use image::ImageEncoder;
    let err = |source: std::io::Error| LabelError::Io {
        path: path.display().to_string(),
        source,
    };
    let (w, h) = frames.first().map_or((1, 1), |f| (f.width, f.height));
    let n = frames.len().max(1) as u32;
    let mut rgb = vec![0u8; (w * n * h * 3) as usize];
    let row = (w * n * 3) as usize;
    for (k, f) in frames.iter().enumerate() {
        if f.width != w || f.height != h {
            continue;
        }
        for y in 0..h as usize {
            let src = &f.rgb[y * w as usize * 3..(y + 1) * w as usize * 3];
            let at = y * row + k * w as usize * 3;
            rgb[at..at + src.len()].copy_from_slice(src);
        }
    }
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new_with_quality(
        &mut png,
        image::codecs::png::CompressionType::Fast,
        image::codecs::png::FilterType::Sub,
    )
    .write_image(&rgb, w * n, h, image::ExtendedColorType::Rgb8)
    .map_err(|e| err(std::io::Error::other(e)))?;
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(err)?;
    }
    let tmp = path.with_extension("png.tmp");
    std::fs::write(&tmp, &png).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// The verdicts of `sim_flags.jsonl` by id (tests and labeller scoring).
pub fn read_sim_flags(run_dir: &Path) -> Vec<SimFlag> {
    read_sim_flags_in(&run_dir.join(super::DIR))
}

fn read_sim_flags_in(dir: &Path) -> Vec<SimFlag> {
    super::read_lines(&dir.join(SIM_FLAGS_FILE)).unwrap_or_default()
}

impl From<bool> for Verdict {
    fn from(success: bool) -> Self {
        if success {
            Self::Success
        } else {
            Self::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(step: usize, group: usize, member: usize, wm: f64) -> QueueItem {
        QueueItem {
            id: rollout_id(step, group, member),
            step,
            group,
            member,
            task: 0,
            init_state: 0,
            instruction: "turn on the stove".into(),
            wm_score: Some(wm),
            frames: 1,
            width: 1,
            height: 1,
            wrist: false,
            queued_at: 0.0,
        }
    }

    #[test]
    fn late_groups_are_taken_once_whole_and_again_only_by_a_replay_of_their_step() {
        let tmp = tempfile::tempdir().expect("tmp");
        let h = HumanLabels::new(tmp.path(), false, Duration::from_millis(1));
        let st = &h.store;
        let items = [
            item(0, 0, 0, 0.9),
            item(0, 0, 1, 0.2),
            item(0, 3, 0, 0.5),
            item(0, 3, 1, 0.4),
        ];
        st.enqueue(&items, |_| Ok(())).expect("enqueue");
        assert!(h.late(1, 2).expect("late").is_empty(), "nothing labelled");
        st.submit("s0-g0-m0", Verdict::Success, "ann", 1.0)
            .expect("label");
        st.submit("s0-g3-m0", Verdict::Success, "ann", 1.0)
            .expect("label");
        assert!(h.late(1, 2).expect("late").is_empty(), "no group whole yet");
        st.submit("s0-g0-m1", Verdict::Failure, "ann", 1.0)
            .expect("label");
        let got = h.late(1, 2).expect("late");
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].step, got[0].group), (0, 0));
        assert_eq!(
            (&got[0].wm[..], &got[0].real[..]),
            (&[0.9, 0.2][..], &[1.0, 0.0][..])
        );
        // Step 1 replayed after a crash: the same group; a later step: none.
        assert_eq!(h.late(1, 2).expect("replay"), got);
        assert!(h.late(2, 2).expect("later").is_empty());
        // Not before their own step, and never when the trainer waits.
        assert!(h.late(0, 2).expect("own step").is_empty());
        let waits = HumanLabels::new(tmp.path(), true, Duration::from_millis(1));
        st.submit("s0-g3-m1", Verdict::Failure, "ann", 1.0)
            .expect("label");
        assert!(waits.late(3, 2).expect("waiting").is_empty());
        assert_eq!(h.late(3, 2).expect("late").len(), 1);
    }
}
