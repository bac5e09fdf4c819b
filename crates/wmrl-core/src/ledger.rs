//! What every run spent: real executions and their seconds, success labels,
//! world-model calls, policy samples, update time. Every report prints it.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Where the time and counts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Simulator episodes or sandbox executions.
    RealExecution,
    /// World-model forward passes.
    WorldModel,
    /// Policy sampling.
    PolicySample,
    /// Gradient updates.
    Update,
    /// Evaluation episodes (kept apart from training cost).
    Eval,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// Real executions (simulator episodes, sandbox runs).
    pub real_executions: u64,
    pub real_seconds: f64,
    /// CPU seconds of real execution where measured (sandbox rusage; the
    /// embedded simulator's process CPU time when it runs in-process).
    pub real_cpu_seconds: f64,
    /// Real success labels the learner was given.
    pub labels: u64,
    /// Batched world-model calls and the rollouts they scored.
    pub wm_calls: u64,
    pub wm_rollouts: u64,
    pub wm_seconds: f64,
    pub policy_samples: u64,
    pub policy_seconds: f64,
    pub updates: u64,
    pub update_seconds: f64,
    pub eval_episodes: u64,
    pub eval_seconds: f64,
    /// Simulator control steps (robot track).
    pub sim_steps: u64,
    /// Process CPU seconds of each stage where measured ([`Ledger::record_cpu`];
    /// absent in ledgers before 2026-12-03). The simulator's are
    /// `real_cpu_seconds`.
    #[serde(default)]
    pub wm_cpu_seconds: f64,
    #[serde(default)]
    pub policy_cpu_seconds: f64,
    #[serde(default)]
    pub update_cpu_seconds: f64,
    #[serde(default)]
    pub eval_cpu_seconds: f64,
    /// Groups dropped because their outcomes were all equal and drawn
    /// again (dynamic sampling, [`crate::Track::redraw_rounds`]). Their
    /// rollouts, labels and seconds are in the counts above: a dropped
    /// group is paid for like a kept one. Absent (0) when a run never
    /// redraws.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub redrawn_groups: u64,
    /// This run's share of its world model's up-front cost, in CPU
    /// seconds: collecting the world model's training data and fitting it,
    /// divided over the runs declared to share it (the AutoResearch
    /// bench's `predictor_runs`). Charged once, at the run's start. Absent
    /// (0) where a run pays nothing up front.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub predictor_cpu_seconds: f64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

impl Ledger {
    /// Add `count` items and `seconds` to a stage.
    pub fn record(&mut self, stage: Stage, count: u64, seconds: f64) {
        match stage {
            Stage::RealExecution => {
                self.real_executions += count;
                self.real_seconds += seconds;
            }
            Stage::WorldModel => {
                self.wm_calls += 1;
                self.wm_rollouts += count;
                self.wm_seconds += seconds;
            }
            Stage::PolicySample => {
                self.policy_samples += count;
                self.policy_seconds += seconds;
            }
            Stage::Update => {
                self.updates += count;
                self.update_seconds += seconds;
            }
            Stage::Eval => {
                self.eval_episodes += count;
                self.eval_seconds += seconds;
            }
        }
    }

    /// Add process CPU seconds to a stage (counted apart from its wall
    /// seconds: shared/BENCHMARKS.md reports CPU time).
    pub fn record_cpu(&mut self, stage: Stage, cpu_seconds: f64) {
        *match stage {
            Stage::RealExecution => &mut self.real_cpu_seconds,
            Stage::WorldModel => &mut self.wm_cpu_seconds,
            Stage::PolicySample => &mut self.policy_cpu_seconds,
            Stage::Update => &mut self.update_cpu_seconds,
            Stage::Eval => &mut self.eval_cpu_seconds,
        } += cpu_seconds;
    }

    /// Run `f`, recording its wall seconds and `count` against `stage`.
    pub fn timed<T>(&mut self, stage: Stage, count: u64, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.record(stage, count, t.elapsed().as_secs_f64());
        out
    }

    /// CPU seconds of training, every cost charged: real execution, the
    /// world model (inference, refits and its up-front share), policy
    /// sampling and updates. Evaluation is not training and is left out.
    pub fn train_cpu_seconds(&self) -> f64 {
        self.real_cpu_seconds
            + self.wm_cpu_seconds
            + self.predictor_cpu_seconds
            + self.policy_cpu_seconds
            + self.update_cpu_seconds
    }

    /// Sum of two ledgers (e.g. over seeds).
    pub fn merge(&mut self, o: &Ledger) {
        self.real_executions += o.real_executions;
        self.real_seconds += o.real_seconds;
        self.real_cpu_seconds += o.real_cpu_seconds;
        self.labels += o.labels;
        self.wm_calls += o.wm_calls;
        self.wm_rollouts += o.wm_rollouts;
        self.wm_seconds += o.wm_seconds;
        self.policy_samples += o.policy_samples;
        self.policy_seconds += o.policy_seconds;
        self.updates += o.updates;
        self.update_seconds += o.update_seconds;
        self.eval_episodes += o.eval_episodes;
        self.eval_seconds += o.eval_seconds;
        self.sim_steps += o.sim_steps;
        self.wm_cpu_seconds += o.wm_cpu_seconds;
        self.policy_cpu_seconds += o.policy_cpu_seconds;
        self.update_cpu_seconds += o.update_cpu_seconds;
        self.eval_cpu_seconds += o.eval_cpu_seconds;
        self.redrawn_groups += o.redrawn_groups;
        self.predictor_cpu_seconds += o.predictor_cpu_seconds;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_merges() {
        let mut a = Ledger::default();
        a.record(Stage::WorldModel, 64, 0.5);
        a.record(Stage::WorldModel, 64, 0.25);
        a.labels += 8;
        let x = a.timed(Stage::Update, 1, || 3);
        assert_eq!(x, 3);
        assert_eq!((a.wm_calls, a.wm_rollouts), (2, 128));
        assert!((a.wm_seconds - 0.75).abs() < 1e-12);
        let mut b = a.clone();
        b.merge(&a);
        assert_eq!((b.wm_rollouts, b.labels, b.updates), (256, 16, 2));
        b.record_cpu(Stage::PolicySample, 1.5);
        b.record_cpu(Stage::RealExecution, 0.5);
        let mut c = b.clone();
        c.merge(&b);
        assert_eq!((c.policy_cpu_seconds, c.real_cpu_seconds), (3.0, 1.0));
        assert_eq!(c.eval_cpu_seconds, 0.0);
        // Training CPU charges every stage but evaluation.
        c.record_cpu(Stage::Eval, 100.0);
        c.record_cpu(Stage::WorldModel, 0.25);
        c.record_cpu(Stage::Update, 0.5);
        c.predictor_cpu_seconds = 2.0;
        assert_eq!(c.train_cpu_seconds(), 3.0 + 1.0 + 0.25 + 0.5 + 2.0);
        let mut d = c.clone();
        d.merge(&c);
        assert_eq!(d.predictor_cpu_seconds, 4.0);
    }
}
