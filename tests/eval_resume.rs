//! An evaluation records each finished episode as it ends; one that fails
//! part-way reports what it finished, and resuming it from its record gives
//! the report an uninterrupted evaluation gives, greedy or sampled (the
//! episodes still to run get the same slots, call seeds and batch rows).

use std::path::Path;

use candle_core::{DType, Device};
use wmrl_env::{Action, EnvSpec, Observation, ResetRequest, StepResult, VecEnv};
use wmrl_policy::eval_record::recorded_episodes;
use wmrl_policy::{EvalConfig, EvalReport, Policy, PolicyConfig, PolicyError};

/// The simulator with episodes of different lengths (so that slots fall
/// out of step and a resumed run's remaining episodes share calls with
/// recorded ones), failing (a dead simulator) at its `fail_at`-th step
/// call; counts its calls.
struct FailsAt {
    inner: Box<dyn VecEnv>,
    fail_at: Option<usize>,
    steps: usize,
    resets: usize,
    /// Per slot: (steps taken, the episode's length).
    episode: Vec<(usize, usize)>,
}

fn length(r: &ResetRequest) -> usize {
    18 - 5 * ((2 * r.task + r.init_state) % 4)
}

impl VecEnv for FailsAt {
    fn spec(&self) -> &EnvSpec {
        self.inner.spec()
    }
    fn num_envs(&self) -> usize {
        self.inner.num_envs()
    }
    fn reset(&mut self, r: &[(usize, ResetRequest)]) -> wmrl_env::Result<Vec<Observation>> {
        self.resets += 1;
        for (slot, req) in r {
            self.episode[*slot] = (0, length(req));
        }
        self.inner.reset(r)
    }
    fn step(&mut self, a: &[(usize, Action)]) -> wmrl_env::Result<Vec<StepResult>> {
        self.steps += 1;
        if Some(self.steps) == self.fail_at {
            return Err(wmrl_env::EnvError::NoWorkers("test: simulator gone".into()));
        }
        let mut out = self.inner.step(a)?;
        for ((slot, _), r) in a.iter().zip(&mut out) {
            let (t, len) = &mut self.episode[*slot];
            *t += 1;
            r.truncated |= *t >= *len;
        }
        Ok(out)
    }
}

fn policy() -> Policy {
    let mut pc = PolicyConfig::tiny();
    pc.proprio_dim = wmrl_sim::PROPRIO_DIM;
    pc.n_layers = 1;
    Policy::new(pc, &Device::Cpu, DType::F32).expect("policy")
}

fn env(fail_at: Option<usize>) -> FailsAt {
    let sim = wmrl_sim::SimConfig {
        image_size: 64,
        max_steps: 20,
        ..wmrl_sim::SimConfig::default()
    };
    FailsAt {
        inner: Box::new(wmrl_sim::make_vec_env(&sim, 3, None).expect("venv")),
        fail_at,
        steps: 0,
        resets: 0,
        episode: vec![(0, 0); 3],
    }
}

fn config(dir: &Path, temperature: f32) -> EvalConfig {
    EvalConfig {
        tasks: vec![0, 3, 5],
        init_states: vec![1, 2, 3],
        temperature,
        seed: 4,
        repeats: 1,
        gif_dir: Some(dir.join("gifs")),
        n_gifs: 2,
        record: Some(dir.join("episodes.jsonl")),
        episode_dir: Some(dir.join("episodes")),
        policy_id: "tiny".into(),
        ..EvalConfig::default()
    }
}

/// Everything but the wall time, with GIF paths relative to their folder.
fn comparable(r: &EvalReport) -> EvalReport {
    let mut r = r.clone();
    r.wall_secs = 0.0;
    for g in &mut r.gifs {
        *g = g.file_name().map(Into::into).unwrap_or_default();
    }
    r
}

#[test]
fn an_interrupted_evaluation_resumes_to_the_uninterrupted_report() {
    let policy = policy();
    for temperature in [0.0, 1.0] {
        let whole_dir = tempfile::tempdir().expect("tmp");
        let whole = wmrl_policy::evaluate(
            &policy,
            &mut env(None),
            &config(whole_dir.path(), temperature),
        )
        .expect("eval");
        assert_eq!(whole.episodes.len(), 9);
        assert_eq!(
            recorded_episodes(&whole_dir.path().join("episodes.jsonl"))
                .expect("record")
                .len(),
            9,
            "every episode recorded"
        );

        // The simulator dies part-way: the error says what was finished,
        // and the record holds exactly that.
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = config(dir.path(), temperature);
        let err = wmrl_policy::evaluate(&policy, &mut env(Some(22)), &cfg).expect_err("fails");
        let PolicyError::EvalStopped {
            finished, total, ..
        } = &err
        else {
            panic!("not an EvalStopped: {err}");
        };
        let record = dir.path().join("episodes.jsonl");
        let kept = recorded_episodes(&record).expect("record");
        assert_eq!(kept.len(), *finished, "{err}");
        assert!(*finished > 0 && *finished < 9, "{err}");
        assert_eq!(*total, 9);
        assert!(err.to_string().contains("recorded in"), "{err}");

        // Without resume the record is not overwritten.
        let again = wmrl_policy::evaluate(&policy, &mut env(None), &cfg).expect_err("refused");
        assert!(matches!(again, PolicyError::RecordExists { .. }), "{again}");
        assert_eq!(recorded_episodes(&record).expect("record").len(), *finished);

        // Other settings are refused, naming the setting.
        let other = EvalConfig {
            resume: true,
            seed: 5,
            ..cfg.clone()
        };
        let refused = wmrl_policy::evaluate(&policy, &mut env(None), &other).expect_err("seed");
        assert!(
            refused.to_string().contains("seed: 4 against 5"),
            "{refused}"
        );

        // A line cut off by the interruption is dropped and run again.
        let mut text = std::fs::read_to_string(&record).expect("read");
        text.push_str("{\"index\": 8, \"seed\"");
        std::fs::write(&record, text).expect("write");

        let resume = EvalConfig {
            resume: true,
            // Only the episodes run after the resume are written here.
            episode_dir: Some(dir.path().join("resumed_episodes")),
            ..cfg.clone()
        };
        let mut fresh = env(None);
        let resumed = wmrl_policy::evaluate(&policy, &mut fresh, &resume).expect("resume");
        assert_eq!(
            comparable(&resumed),
            comparable(&whole),
            "temperature {temperature}: the resumed report is the uninterrupted one"
        );
        // Step by step (frames, proprio, the actions sampled), the episodes
        // run after the resume are the uninterrupted run's.
        let mut rerun = 0;
        for f in std::fs::read_dir(dir.path().join("resumed_episodes")).expect("dir") {
            let f = f.expect("entry").path();
            let name = f.file_name().expect("name");
            let want = std::fs::read(whole_dir.path().join("episodes").join(name)).expect("whole");
            assert!(std::fs::read(&f).expect("read") == want, "{name:?} differs");
            rerun += 1;
        }
        assert_eq!(rerun, 9 - finished, "the rest were run again, no more");
        let full = recorded_episodes(&record).expect("record");
        let mut indices: Vec<usize> = full.iter().map(|e| e.index).collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..9).collect::<Vec<_>>(), "each episode once");

        // A finished evaluation resumed runs nothing and reports the same.
        let mut idle = env(None);
        let again = wmrl_policy::evaluate(&policy, &mut idle, &resume).expect("resume");
        assert_eq!((idle.steps, idle.resets), (0, 0));
        assert_eq!(comparable(&again), comparable(&whole));
    }
}
