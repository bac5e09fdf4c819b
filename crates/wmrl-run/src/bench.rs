//! What both tracks' benches share: every `(arm, seed)` run of a bench in
//! its own run directory `<out>/<arm>/seed<k>/`, taken seed-major and
//! resumed run by run; progress counted in training steps across the runs;
//! arms paired by seed; and the skeleton of `report.md`, which each track
//! fills with its own tables and plots.
//!
//! A run is finished when its `summary.json` exists (written last); a bench
//! started again redoes only the runs without one.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use wmrl_core::stats::MeanCi;

use crate::{Progress, RecordError, RunDir, atomic_write};

/// One run of a bench: arm `arm` (an index into the bench's arms) at `seed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub arm: usize,
    pub seed: u64,
    pub run: RunDir,
}

impl Slot {
    /// Whether the run has finished (its `summary.json` is written last).
    pub fn finished(&self) -> bool {
        self.run.summary().exists()
    }
}

/// Every run of a bench with arms named `arms`, seed-major: a bench
/// interrupted part-way has every arm of its first seeds finished (paired
/// comparisons), not every seed of its first arms.
pub fn fan_out(out: &Path, arms: &[&str], seeds: &[u64]) -> Vec<Slot> {
    seeds
        .iter()
        .flat_map(|&seed| {
            arms.iter().enumerate().map(move |(arm, name)| Slot {
                arm,
                seed,
                run: RunDir::in_bench(out, name, seed),
            })
        })
        .collect()
}

/// Training steps a run has finished so far: the lines of its
/// metrics.jsonl (one per step, both tracks), at most `steps`.
pub fn steps_done(run: &RunDir, steps: u64) -> u64 {
    let n = std::fs::read(run.metrics())
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0);
    n.min(steps)
}

/// Paired differences `a - b` by seed over the runs both arms finished, a
/// run's figure given by `figure` as `(seed, value)` (`None`: the run did
/// not take that measure), with a 95% t-interval.
pub fn paired<R>(a: &[R], b: &[R], figure: impl Fn(&R) -> Option<(u64, f64)>) -> Option<MeanCi> {
    let values = |rs: &[R]| rs.iter().filter_map(&figure).collect::<Vec<_>>();
    MeanCi::paired(&values(a), &values(b))
}

/// One run of a bench as progress counts it.
#[derive(Debug, Clone)]
pub struct BenchJob {
    /// Shown while the run works (`wmrl-seed0`, say).
    pub name: String,
    pub run: RunDir,
    /// Training steps the run takes in all.
    pub steps: u64,
    /// Resumed from a checkpoint: the steps its metrics.jsonl holds were
    /// finished before, not this session's work.
    pub resumed: bool,
}

struct Counts {
    n_runs: usize,
    runs_done: usize,
    finished_steps: u64,
    running: Vec<BenchJob>,
}

struct Shared {
    bar: Progress,
    counts: Mutex<Counts>,
}

impl Shared {
    /// Move the bar to the finished runs' steps plus the running runs'
    /// metrics lines, and name the running runs.
    fn refresh(&self) {
        let Ok(c) = self.counts.lock() else { return };
        let mut now = c.finished_steps;
        let mut names = Vec::new();
        for j in &c.running {
            let d = steps_done(&j.run, j.steps);
            now += d;
            names.push(format!("{} {d}/{}", j.name, j.steps));
        }
        self.bar.set_position(now);
        let mut msg = format!("{}/{} runs", c.runs_done, c.n_runs);
        if !names.is_empty() {
            msg += &format!("; running {}", names.join(", "));
        }
        self.bar.set_message(msg);
    }
}

/// Progress of a bench in training steps across its runs, so that the rate
/// and ETA move while a long run works. A running run's steps are read from
/// its metrics.jsonl every two seconds, whether it works in this process
/// (AutoResearch) or in a child (the robot track).
pub struct BenchProgress {
    shared: Arc<Shared>,
    poller: Option<(Sender<()>, JoinHandle<()>)>,
}

impl BenchProgress {
    /// Progress over the runs still to do, `todo`; what resumed runs
    /// finished before counts as done already (not toward the rate).
    pub fn new(label: &str, todo: &[BenchJob], enabled: bool) -> Self {
        let total = todo.iter().map(|j| j.steps).sum();
        let bar = Progress::new(label, total, "steps", enabled);
        bar.set_position(
            todo.iter()
                .filter(|j| j.resumed)
                .map(|j| steps_done(&j.run, j.steps))
                .sum(),
        );
        bar.set_message(format!("0/{} runs", todo.len()));
        let shared = Arc::new(Shared {
            bar,
            counts: Mutex::new(Counts {
                n_runs: todo.len(),
                runs_done: 0,
                finished_steps: 0,
                running: Vec::new(),
            }),
        });
        let (tx, rx) = channel::<()>();
        let polled = Arc::clone(&shared);
        let handle = std::thread::spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(2)) {
                polled.refresh();
            }
        });
        Self {
            shared,
            poller: Some((tx, handle)),
        }
    }

    /// `job` started working.
    pub fn started(&self, job: &BenchJob) {
        if let Ok(mut c) = self.shared.counts.lock() {
            c.running.push(job.clone());
        }
        self.shared.refresh();
    }

    /// `job` ended (finished, failed, or could not start): all its steps
    /// count as done from now on.
    pub fn ended(&self, job: &BenchJob) {
        if let Ok(mut c) = self.shared.counts.lock() {
            c.running.retain(|j| j.name != job.name);
            c.finished_steps += job.steps;
            c.runs_done += 1;
        }
        self.shared.refresh();
    }

    /// Stop polling and show the final position.
    pub fn finish(mut self) {
        self.stop();
        self.shared.refresh();
        self.shared.bar.finish();
    }

    fn stop(&mut self) {
        if let Some((tx, handle)) = self.poller.take() {
            let _ = tx.send(());
            let _ = handle.join();
        }
    }
}

impl Drop for BenchProgress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A table of paired differences, one row per pair of arms: `| difference
/// | seeds | <columns> |`.
#[derive(Debug, Clone, Default)]
pub struct PairedTable {
    rows: String,
}

impl PairedTable {
    /// A row for `a - b` over `n` seeds; `cells` fill the columns.
    pub fn row(&mut self, a: &str, b: &str, n: usize, cells: &[String]) {
        self.rows += &format!("| `{a}` - `{b}` | {n} | {} |\n", cells.join(" | "));
    }

    /// The table under a header naming `columns`.
    pub fn markdown(&self, columns: &[&str]) -> String {
        format!(
            "| difference | seeds | {} |\n|---|---|{}\n{}",
            columns.join(" | "),
            "---|".repeat(columns.len()),
            self.rows
        )
    }
}

/// The skeleton of a bench's `report.md`: a title, a preface saying which
/// command produced every number from which runs, then the track's own
/// sections.
#[derive(Debug, Clone)]
pub struct Report {
    md: String,
}

impl Report {
    /// `# title`, then `preface` paragraphs.
    pub fn new(title: &str, preface: &[&str]) -> Self {
        let mut md = format!("# {title}\n\n");
        for p in preface {
            md += p;
            md += "\n\n";
        }
        Self { md }
    }

    /// `## heading`, a blank line, `body`, and one newline after it.
    pub fn section(&mut self, heading: &str, body: &str) {
        self.md += &format!("## {heading}\n\n{body}\n");
    }

    pub fn markdown(&self) -> &str {
        &self.md
    }

    /// Write it to `<dir>/report.md` (atomically); returns the path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, RecordError> {
        let path = dir.join("report.md");
        atomic_write(&path, self.md.as_bytes())?;
        Ok(path)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fan_out_is_seed_major_and_finished_runs_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let slots = fan_out(dir.path(), &["a", "b"], &[0, 1]);
        let order: Vec<(usize, u64)> = slots.iter().map(|s| (s.arm, s.seed)).collect();
        assert_eq!(order, [(0, 0), (1, 0), (0, 1), (1, 1)]);
        assert_eq!(slots[1].run.dir, dir.path().join("b").join("seed0"));
        assert!(!slots[1].finished());
        std::fs::create_dir_all(&slots[1].run.dir).unwrap();
        std::fs::write(slots[1].run.summary(), "{}").unwrap();
        assert!(slots[1].finished());
        assert!(!slots[0].finished());
    }

    #[test]
    fn steps_done_counts_metrics_lines_up_to_the_run_length() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        assert_eq!(steps_done(&run, 5), 0);
        std::fs::write(run.metrics(), "{}\n{}\n{}\n{\"partial").unwrap();
        assert_eq!(steps_done(&run, 5), 3, "a line being written is not a step");
        assert_eq!(steps_done(&run, 2), 2);
    }

    #[test]
    fn pairing_uses_only_seeds_both_arms_finished() {
        let a = [(0u64, 0.5), (1, 0.7), (2, 0.9)];
        let b = [(0u64, 0.4), (2, 0.6)];
        let d = paired(&a, &b, |&(s, v)| Some((s, v))).unwrap();
        assert_eq!(d.n, 2);
        assert!((d.mean - 0.2).abs() < 1e-12);
        // A measure a run did not take leaves that seed out.
        let d = paired(&a, &b, |&(s, v)| (s != 0).then_some((s, v))).unwrap();
        assert_eq!(d.n, 1);
    }

    #[test]
    fn the_report_is_title_preface_then_sections() {
        let mut t = PairedTable::default();
        t.row("x", "y", 3, &["+1.0".into(), "resolved".into()]);
        let mut r = Report::new("T", &["Every number."]);
        r.section("Pairs", &t.markdown(&["points", "verdict"]));
        assert_eq!(
            r.markdown(),
            "# T\n\nEvery number.\n\n## Pairs\n\n| difference | seeds | points | verdict |\n|---|---|---|---|\n| `x` - `y` | 3 | +1.0 | resolved |\n\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = r.write(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(path).unwrap(), r.markdown());
    }
}
