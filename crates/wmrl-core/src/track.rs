//! The training loop both tracks run (shared/METHOD.md): draw and roll out
//! a step's groups, score them through the [`CorrectionLoop`] (world model,
//! anchors, calibration, weight, advantages), update the policy, and
//! evaluate and checkpoint on a [`Schedule`]. A track (robot rollouts in a
//! simulator, AutoResearch solutions in a sandbox) implements [`Track`];
//! [`Run`] owns the loop, the method's state and the cost ledger, so the
//! order of the steps and what they charge is written once. Where a run's
//! records and checkpoints go is a [`Journal`] (wmrl-run's run directory),
//! so the loop writes them itself, for both tracks, in one order.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::correction::{CorrectionLoop, Scorers, StepOutcome};
use crate::{CoreError, Ledger};

/// What a track supplies to the shared loop.
pub trait Track: Sized {
    /// One step's groups, as rolled out (robot episodes, sampled solutions).
    type Batch;
    /// The real and world-model scorers over one batch.
    type Scorers<'a>: Scorers
    where
        Self: 'a;
    /// What the track's policy update reports.
    type Update;
    type Error: From<CoreError>;
    /// One step's record (a line of the run's metrics.jsonl).
    type Record: Serialize;
    /// What resuming needs of the track beyond the loop's own state (steps
    /// done, the method's state, the ledger): its sampler, its logs, the
    /// world model it refitted...
    type State: Serialize + DeserializeOwned;
    /// The run's settings, as its run directory records them (run.toml,
    /// for both tracks).
    type Config: Serialize;

    /// The settings this run was made with.
    fn config(&self) -> &Self::Config;

    /// Draw and roll out the groups of step `step` (0-based), charging
    /// their cost to `ledger`.
    fn rollouts(&mut self, step: usize, ledger: &mut Ledger) -> Result<Self::Batch, Self::Error>;

    /// Real outcomes that arrived since their step, for anchor groups
    /// graded late (labels from people when the trainer does not wait):
    /// each group with its raw world-model scores and real outcomes, taken
    /// once when step `step` (0-based) begins. None by default.
    fn late_labels(&mut self, _step: usize) -> Result<Vec<crate::AnchorGroup>, Self::Error> {
        Ok(Vec::new())
    }

    /// The number of rollouts in each of the batch's groups.
    fn group_sizes(&self, batch: &Self::Batch) -> Vec<usize>;

    /// Dynamic sampling (DAPO): how many times one step may drop the groups
    /// that carry no signal ([`StepOutcome::flat_groups`]: every graded
    /// outcome equal) and draw fresh groups in their place. 0 (the
    /// default): never.
    fn redraw_rounds(&self) -> usize {
        0
    }

    /// Draw and roll out `n` fresh groups for redraw round `round`
    /// (1-based) of step `step`, charging their cost to `ledger`. Called
    /// only when [`Track::redraw_rounds`] is above 0.
    fn redraw(
        &mut self,
        _step: usize,
        _round: usize,
        _n: usize,
        _ledger: &mut Ledger,
    ) -> Result<Self::Batch, Self::Error> {
        Err(CoreError::Shape("this track cannot redraw groups".into()).into())
    }

    /// Put the groups of `more` (from [`Track::redraw`]) in place of the
    /// batch's groups `slots`, in order.
    fn replace_groups(
        &mut self,
        _batch: &mut Self::Batch,
        _slots: &[usize],
        _more: Self::Batch,
    ) -> Result<(), Self::Error> {
        Err(CoreError::Shape("this track cannot redraw groups".into()).into())
    }

    /// The scorers the correction loop calls for `batch`; what they spend
    /// goes to `ledger`.
    fn scorers<'a>(
        &'a mut self,
        batch: &'a Self::Batch,
        ledger: &'a mut Ledger,
    ) -> Self::Scorers<'a>;

    /// After scoring, before the update (e.g. charge batched scoring time,
    /// or refit the world model on the step's anchors). Nothing by default.
    fn scored(
        &mut self,
        _step: usize,
        _batch: &Self::Batch,
        _outcome: &StepOutcome,
        _ledger: &mut Ledger,
    ) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Beyond the paper (`wmrl.refit`, [`crate::refit`]): fit a candidate
    /// world model on the track's world-model data plus every anchor group
    /// the run gathered except `held_out` (the newest), and return the
    /// candidate's raw scores of the `held_out` groups' members (same
    /// shapes as their `real`), charging the fit to `ledger`. The candidate
    /// is kept aside until [`Track::refit_done`]. `None`: this track cannot
    /// refit (the default).
    fn refit_candidate(
        &mut self,
        _step: usize,
        _held_out: &[crate::refit::AnchorGroup],
        _ledger: &mut Ledger,
    ) -> Result<Option<Vec<Vec<f64>>>, Self::Error> {
        Ok(None)
    }

    /// The verdict on the candidate of [`Track::refit_candidate`]: install
    /// it when accepted (from the next scoring on), drop it otherwise, and
    /// record the decision.
    fn refit_done(
        &mut self,
        _decision: &crate::refit::RefitDecision,
        _ledger: &mut Ledger,
    ) -> Result<(), Self::Error> {
        Ok(())
    }

    /// The policy's GRPO update from the step's advantages.
    fn update(
        &mut self,
        step: usize,
        batch: &Self::Batch,
        outcome: &StepOutcome,
        ledger: &mut Ledger,
    ) -> Result<Self::Update, Self::Error>;

    /// The periodic evaluation of the current policy (after `run.step`
    /// steps), recorded where the track keeps its results.
    fn evaluate(run: &mut Run<Self>) -> Result<(), Self::Error>;

    /// The record of `step`, just taken by `run`.
    fn record(run: &Run<Self>, step: &Step<Self>) -> Result<Self::Record, Self::Error>;

    /// The track's part of a checkpoint after `run.step` steps.
    fn state(&self) -> Result<Self::State, Self::Error>;

    /// Write the track's model files into `dir`, the checkpoint being
    /// written. Nothing by default.
    fn save(&self, _dir: &std::path::Path) -> Result<(), Self::Error> {
        Ok(())
    }

    /// After a checkpoint is whole on disk (e.g. drop what no resume can
    /// need any more). Nothing by default.
    fn checkpointed(&self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Where a run's records and checkpoints go: wmrl-run's run directory
/// (`wmrl_run::RunJournal`), or [`NoJournal`] for a run kept in memory.
pub trait Journal<T: Track> {
    /// Keep one step's record.
    fn record(&mut self, record: &T::Record) -> Result<(), T::Error>;
    /// Keep what resuming after `run.step` steps needs.
    fn checkpoint(&mut self, run: &Run<T>) -> Result<(), T::Error>;
}

/// A run without a directory: records and checkpoints go nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoJournal;

impl<T: Track> Journal<T> for NoJournal {
    fn record(&mut self, _: &T::Record) -> Result<(), T::Error> {
        Ok(())
    }
    fn checkpoint(&mut self, _: &Run<T>) -> Result<(), T::Error> {
        Ok(())
    }
}

/// When [`Run::run`] evaluates and checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Train until this many steps are done.
    pub steps: usize,
    /// Evaluate after every this many steps (0: never, apart from the
    /// start and the end below).
    pub eval_every: usize,
    /// Evaluate (and checkpoint) before the first step of a fresh run.
    pub eval_at_start: bool,
    /// At the last step, evaluate if and only if this is set (`eval_every`
    /// is not consulted there).
    pub eval_at_end: bool,
    /// Checkpoint after every this many steps and after the last (0: only
    /// after the last).
    pub checkpoint_every: usize,
}

impl Schedule {
    /// Whether the periodic evaluation runs after `done` steps.
    pub fn eval_due(&self, done: usize) -> bool {
        if done == self.steps {
            self.eval_at_end
        } else {
            self.eval_every > 0 && done.is_multiple_of(self.eval_every)
        }
    }

    /// Whether a checkpoint is written after `done` steps.
    pub fn checkpoint_due(&self, done: usize) -> bool {
        done == self.steps
            || (self.checkpoint_every > 0 && done.is_multiple_of(self.checkpoint_every))
    }
}

/// One finished step: what was rolled out, how the correction loop scored
/// it, and what the update did.
#[derive(Debug)]
pub struct Step<T: Track> {
    /// The step's 0-based index (the run has done `index + 1` steps).
    pub index: usize,
    pub batch: T::Batch,
    pub outcome: StepOutcome,
    pub update: T::Update,
    /// Groups dropped and drawn again this step (dynamic sampling).
    pub redrawn: usize,
}

/// A run of the shared loop: the track, the method's state, the ledger and
/// the number of steps done.
#[derive(Debug)]
pub struct Run<T> {
    pub track: T,
    pub core: CorrectionLoop,
    pub ledger: Ledger,
    /// Steps done.
    pub step: usize,
}

impl<T: Track> Run<T> {
    pub fn new(track: T, core: CorrectionLoop) -> Self {
        Self::resumed(track, core, Ledger::default(), 0)
    }

    /// A run continued after `step` steps with its saved state.
    pub fn resumed(track: T, core: CorrectionLoop, ledger: Ledger, step: usize) -> Self {
        Self {
            track,
            core,
            ledger,
            step,
        }
    }

    /// One step: rollouts, the correction loop over both scorers, the
    /// labels it used charged to the ledger, [`Track::scored`], the update.
    pub fn train_step(&mut self) -> Result<Step<T>, T::Error> {
        let index = self.step;
        let late = self.track.late_labels(index)?;
        if !late.is_empty() {
            self.ledger.labels += self.core.late_labels(&late)? as u64;
        }
        let mut batch = self.track.rollouts(index, &mut self.ledger)?;
        let mut outcome = self.score(&batch, false)?;
        let mut redrawn = 0;
        for round in 1..=self.track.redraw_rounds() {
            let flat = outcome.flat_groups();
            if flat.is_empty() {
                break;
            }
            let more = self
                .track
                .redraw(index, round, flat.len(), &mut self.ledger)?;
            let scored = self.score(&more, true)?;
            outcome.replace_groups(&flat, scored)?;
            self.track.replace_groups(&mut batch, &flat, more)?;
            redrawn += flat.len();
            self.ledger.redrawn_groups += flat.len() as u64;
        }
        self.track
            .scored(index, &batch, &outcome, &mut self.ledger)?;
        self.refit_if_due(index + 1)?;
        let update = self
            .track
            .update(index, &batch, &outcome, &mut self.ledger)?;
        self.step += 1;
        Ok(Step {
            index,
            batch,
            outcome,
            update,
            redrawn,
        })
    }

    /// The correction loop over `batch`, its labels charged to the ledger;
    /// `again`: groups redrawn within the step just scored.
    fn score(&mut self, batch: &T::Batch, again: bool) -> Result<StepOutcome, T::Error> {
        let sizes = self.track.group_sizes(batch);
        let outcome = {
            let mut scorers = self.track.scorers(batch, &mut self.ledger);
            if again {
                self.core.step_again(&sizes, None, &mut scorers)?
            } else {
                self.core.step(&sizes, None, &mut scorers)?
            }
        };
        self.ledger.labels += outcome.stats.labels_used as u64;
        Ok(outcome)
    }

    /// The world-model refit of `wmrl.refit` after `done` steps, when due:
    /// the track fits a candidate without the newest anchor groups, the
    /// gate judges it on them ([`crate::refit::decide`]), the calibration
    /// restarts on an accepted model's scores, and the track installs or
    /// drops it. Written once for both tracks.
    fn refit_if_due(&mut self, done: usize) -> Result<(), T::Error> {
        let cfg = self.core.config().refit.clone();
        if !cfg.due(done) || !self.core.arm().uses_world_model() {
            return Ok(());
        }
        let held = self.core.refit_holdout().to_vec();
        let Some(candidate) = self.track.refit_candidate(done, &held, &mut self.ledger)? else {
            return Ok(());
        };
        let decision = crate::refit::decide(&cfg, done, &held, &candidate)?;
        self.core.refitted(&decision, &candidate)?;
        self.track.refit_done(&decision, &mut self.ledger)
    }

    /// Train to `schedule.steps` from wherever the run is: each step's
    /// record goes to `journal`, then `on_step` sees the step and its
    /// record (progress, logs), then the evaluation and the checkpoint
    /// (to `journal`) when the schedule says so.
    pub fn run(
        &mut self,
        schedule: &Schedule,
        journal: &mut dyn Journal<T>,
        mut on_step: impl FnMut(&mut Self, Step<T>, T::Record) -> Result<(), T::Error>,
    ) -> Result<(), T::Error> {
        if self.step == 0 && schedule.eval_at_start {
            T::evaluate(self)?;
            journal.checkpoint(self)?;
        }
        while self.step < schedule.steps {
            let step = self.train_step()?;
            let record = T::record(self, &step)?;
            journal.record(&record)?;
            on_step(self, step, record)?;
            if schedule.eval_due(self.step) {
                T::evaluate(self)?;
            }
            if schedule.checkpoint_due(self.step) {
                journal.checkpoint(self)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correction::ScorerError;
    use crate::{Arm, CoreConfig, Stage};

    /// Groups of two rollouts whose real outcome is 1 for the first member;
    /// the world model scores it a little higher. Records what the loop
    /// called, in order.
    struct Toy {
        calls: Vec<String>,
        evals: Vec<usize>,
        /// Candidate scores of a held-out (1, 0) group; `None`: no refit.
        candidate: Option<[f64; 2]>,
        refits: Vec<(usize, bool)>,
        /// Groups (counted over every scoring) whose real outcomes come
        /// back (0, 0), all equal, before the rest come back (1, 0).
        flat_left: usize,
        redraw_rounds: usize,
    }

    struct ToyScorers<'a> {
        groups: usize,
        ledger: &'a mut Ledger,
        flat_left: &'a mut usize,
    }

    impl Scorers for ToyScorers<'_> {
        fn world_model(&mut self, groups: &[usize]) -> Result<Vec<Vec<f64>>, ScorerError> {
            assert!(groups.iter().all(|&g| g < self.groups));
            Ok(groups.iter().map(|_| vec![0.6, 0.4]).collect())
        }
        fn real(&mut self, groups: &[usize]) -> Result<Vec<Vec<Option<f64>>>, ScorerError> {
            self.ledger
                .record(Stage::RealExecution, 2 * groups.len() as u64, 0.0);
            Ok(groups
                .iter()
                .map(|_| {
                    if *self.flat_left > 0 {
                        *self.flat_left -= 1;
                        vec![Some(0.0), Some(0.0)]
                    } else {
                        vec![Some(1.0), Some(0.0)]
                    }
                })
                .collect())
        }
    }

    impl Track for Toy {
        type Batch = usize;
        type Scorers<'a> = ToyScorers<'a>;
        type Update = f64;
        type Error = CoreError;
        type Record = usize;
        type State = usize;
        type Config = ();

        fn config(&self) -> &() {
            &()
        }

        fn rollouts(&mut self, step: usize, _: &mut Ledger) -> Result<usize, CoreError> {
            self.calls.push(format!("rollouts {step}"));
            Ok(3)
        }
        fn group_sizes(&self, batch: &usize) -> Vec<usize> {
            vec![2; *batch]
        }
        fn scorers<'a>(&'a mut self, batch: &'a usize, ledger: &'a mut Ledger) -> ToyScorers<'a> {
            ToyScorers {
                groups: *batch,
                ledger,
                flat_left: &mut self.flat_left,
            }
        }
        fn redraw_rounds(&self) -> usize {
            self.redraw_rounds
        }
        fn redraw(
            &mut self,
            step: usize,
            round: usize,
            n: usize,
            _: &mut Ledger,
        ) -> Result<usize, CoreError> {
            self.calls.push(format!("redraw {step}.{round}: {n}"));
            Ok(n)
        }
        fn replace_groups(
            &mut self,
            _: &mut usize,
            slots: &[usize],
            more: usize,
        ) -> Result<(), CoreError> {
            assert_eq!(slots.len(), more);
            self.calls.push(format!("replace {slots:?}"));
            Ok(())
        }
        fn scored(
            &mut self,
            step: usize,
            _: &usize,
            _: &StepOutcome,
            _: &mut Ledger,
        ) -> Result<(), CoreError> {
            self.calls.push(format!("scored {step}"));
            Ok(())
        }
        fn update(
            &mut self,
            step: usize,
            _: &usize,
            outcome: &StepOutcome,
            _: &mut Ledger,
        ) -> Result<f64, CoreError> {
            self.calls.push(format!("update {step}"));
            Ok(outcome.advantages.iter().flatten().flatten().sum())
        }
        fn refit_candidate(
            &mut self,
            step: usize,
            held_out: &[crate::refit::AnchorGroup],
            _: &mut Ledger,
        ) -> Result<Option<Vec<Vec<f64>>>, CoreError> {
            self.calls.push(format!("refit {step}"));
            Ok(self
                .candidate
                .map(|c| held_out.iter().map(|_| c.to_vec()).collect()))
        }
        fn refit_done(
            &mut self,
            d: &crate::refit::RefitDecision,
            _: &mut Ledger,
        ) -> Result<(), CoreError> {
            self.refits.push((d.step, d.accepted));
            Ok(())
        }
        fn evaluate(run: &mut Run<Self>) -> Result<(), CoreError> {
            let s = run.step;
            run.track.evals.push(s);
            Ok(())
        }
        fn record(_: &Run<Self>, step: &Step<Self>) -> Result<usize, CoreError> {
            Ok(step.index)
        }
        fn state(&self) -> Result<usize, CoreError> {
            Ok(self.evals.len())
        }
    }

    /// Keeps what the loop hands it.
    #[derive(Default)]
    struct Kept {
        records: Vec<usize>,
        checkpoints: Vec<(usize, usize)>,
    }

    impl Journal<Toy> for Kept {
        fn record(&mut self, r: &usize) -> Result<(), CoreError> {
            self.records.push(*r);
            Ok(())
        }
        fn checkpoint(&mut self, run: &Run<Toy>) -> Result<(), CoreError> {
            self.checkpoints.push((run.step, run.track.state()?));
            Ok(())
        }
    }

    fn toy() -> Toy {
        Toy {
            calls: Vec::new(),
            evals: Vec::new(),
            candidate: None,
            refits: Vec::new(),
            flat_left: 0,
            redraw_rounds: 0,
        }
    }

    #[test]
    fn flat_groups_are_redrawn_up_to_the_cap_and_paid_for() {
        // Three groups, all flat, then the first of the three redrawn in
        // round 1, then none: two rounds replace [0, 1, 2] then [0].
        let core = CorrectionLoop::new(CoreConfig::default(), Arm::Sparse, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        run.track.flat_left = 4;
        run.track.redraw_rounds = 2;
        let s = run.train_step().expect("ok");
        assert_eq!(
            run.track.calls,
            [
                "rollouts 0",
                "redraw 0.1: 3",
                "replace [0, 1, 2]",
                "redraw 0.2: 1",
                "replace [0]",
                "scored 0",
                "update 0"
            ]
        );
        assert_eq!(s.redrawn, 4);
        assert_eq!(run.ledger.redrawn_groups, 4);
        // Every scored group's labels are paid for, the dropped ones too:
        // 3 + 3 + 1 groups of 2.
        assert_eq!(run.ledger.labels, 14);
        assert_eq!(s.outcome.stats.labels_used, 14);
        assert!(s.outcome.flat_groups().is_empty());
        assert_eq!(s.outcome.anchors, [0, 1, 2]);
        // Redrawn groups are scored within the step: the method counts one.
        assert_eq!((s.outcome.step, run.core.steps_done()), (0, 1));
        assert_eq!(s.outcome.real.len(), 3);
        assert!(s.outcome.real.iter().all(|r| r == &[Some(1.0), Some(0.0)]));
        // At the cap the step goes on with what it has: one round, and
        // the group still flat stays (the update leaves it out).
        let core = CorrectionLoop::new(CoreConfig::default(), Arm::Sparse, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        run.track.flat_left = 4;
        run.track.redraw_rounds = 1;
        let s = run.train_step().expect("ok");
        assert_eq!(s.redrawn, 3);
        assert_eq!(s.outcome.flat_groups(), [0]);
        // Off (the default): nothing is redrawn.
        let core = CorrectionLoop::new(CoreConfig::default(), Arm::Sparse, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        run.track.flat_left = 3;
        let s = run.train_step().expect("ok");
        assert_eq!((s.redrawn, run.ledger.redrawn_groups), (0, 0));
        assert_eq!(s.outcome.flat_groups(), [0, 1, 2]);
    }

    #[test]
    fn refits_run_on_schedule_through_the_gate_and_restart_calibration() {
        let mut cfg = CoreConfig::default();
        cfg.refit.every = 2;
        cfg.refit.holdout_groups = 3;
        cfg.refit.min_pairs = 2;
        cfg.calibration.min_pairs = 2;
        cfg.calibration.refit_every = 2;
        // The toy world model ranks (1, 0) groups right (0.6 > 0.4): a
        // candidate that reverses them is refused, one that agrees passes.
        let core = CorrectionLoop::new(cfg.clone(), Arm::Wmrl, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        run.track.candidate = Some([0.1, 0.9]);
        for _ in 0..4 {
            run.train_step().expect("ok");
        }
        assert_eq!(run.track.refits, [(2, false), (4, false)]);
        assert!(run.track.calls.contains(&"refit 2".to_string()));
        assert!(!run.track.calls.contains(&"refit 3".to_string()));
        let pairs_before = run.core.calibrator().n_pairs();
        let core = CorrectionLoop::new(cfg, Arm::Wmrl, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        run.track.candidate = Some([0.95, 0.05]);
        for _ in 0..2 {
            run.train_step().expect("ok");
        }
        assert_eq!(run.track.refits, [(2, true)]);
        // The calibration restarted from the held-out groups only, scored
        // by the new model.
        let pairs: Vec<(f64, f64)> = run.core.calibrator().pairs().collect();
        assert!(
            !pairs.is_empty() && pairs.len() <= 6 && pairs.len().is_multiple_of(2),
            "at most 3 held-out groups of 2: {pairs:?}"
        );
        assert!(
            pairs.iter().all(|p| p.0 == 0.95 || p.0 == 0.05),
            "{pairs:?}"
        );
        assert!(pairs_before > pairs.len());
        // The paper's arms never refit.
        let core = CorrectionLoop::new(CoreConfig::default(), Arm::Wmrl, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        run.track.candidate = Some([0.95, 0.05]);
        run.train_step().expect("ok");
        run.train_step().expect("ok");
        assert!(run.track.refits.is_empty());
    }

    #[test]
    fn a_step_calls_the_track_in_order_and_charges_real_labels() {
        let core = CorrectionLoop::new(CoreConfig::default(), Arm::Sparse, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        let s = run.train_step().expect("ok");
        assert_eq!(s.index, 0);
        assert_eq!(run.step, 1);
        assert_eq!(run.track.calls, ["rollouts 0", "scored 0", "update 0"]);
        // Sparse: every group is real, so every rollout's label is used.
        assert_eq!(s.outcome.stats.labels_used, 6);
        assert_eq!(run.ledger.labels, 6);
        assert_eq!(run.ledger.real_executions, 6);
        // Each group is (1, 0): advantages sum to zero within a group.
        assert!(s.update.abs() < 1e-12);
    }

    #[test]
    fn the_schedule_evaluates_at_start_every_k_and_at_the_end() {
        let sched = Schedule {
            steps: 5,
            eval_every: 2,
            eval_at_start: true,
            eval_at_end: true,
            checkpoint_every: 3,
        };
        let core = CorrectionLoop::new(CoreConfig::default(), Arm::Sparse, 0).expect("ok");
        let mut run = Run::new(toy(), core);
        let mut seen = Vec::new();
        let mut kept = Kept::default();
        run.run(&sched, &mut kept, |r, s, rec| {
            seen.push((s.index, r.step, rec));
            Ok(())
        })
        .expect("ok");
        assert_eq!(run.track.evals, [0, 2, 4, 5]);
        // Records in step order; each checkpoint after its evaluation.
        assert_eq!(kept.records, [0, 1, 2, 3, 4]);
        assert_eq!(kept.checkpoints, [(0, 1), (3, 2), (5, 4)]);
        assert_eq!(
            seen,
            [(0, 1, 0), (1, 2, 1), (2, 3, 2), (3, 4, 3), (4, 5, 4)]
        );
        // Without the end evaluation the last step follows nothing but
        // the start and the period; a finished run does not step again.
        let mut s = sched;
        s.eval_at_end = false;
        s.steps = 4;
        s.checkpoint_every = 0;
        assert!(!s.eval_due(4) && s.eval_due(2) && !s.eval_due(3));
        assert!(s.checkpoint_due(4) && !s.checkpoint_due(3));
        run.run(&s, &mut NoJournal, |_, _, _| {
            panic!("no step after the end")
        })
        .expect("ok");
    }
}
