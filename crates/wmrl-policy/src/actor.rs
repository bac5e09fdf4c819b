//! What the episode runner and evaluation need of a policy, so that one
//! runner drives every kind of policy wmrl ships: the `tiny` policy of this
//! crate ([`crate::Policy`]) and the MiniVLA of `wmrl-minivla`
//! (`wmrl_minivla::MiniVlaPolicy`).

use crate::{Policy, PolicyInput, Result, Sample};

/// A policy the episode runner ([`crate::episodes::run_episodes`]) and
/// [`crate::evaluate`] can act with.
///
/// Sampling is seeded: row `i` of a call draws from the stream
/// `(seed, streams[i])`, so a batch that leaves out rows of a larger one
/// samples the rows it keeps as the larger batch did (a resumed evaluation
/// relies on it).
pub trait ActionPolicy {
    /// Which kind of policy this is (`tiny`, `minivla`), for logs and errors.
    fn kind(&self) -> &'static str;
    /// Actions per policy call (the chunk; 1 for one action per call).
    fn chunk(&self) -> usize;
    /// One action chunk per input at `temperature` (`<= 0`: greedy), with
    /// the log-probability of every sampled token.
    fn sample_streams(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
        streams: &[u64],
    ) -> Result<Vec<Sample>>;
    /// [`Self::sample_streams`] on streams `0..n` that also returns each
    /// row's action-head inputs where the policy has a head an update can
    /// train on them alone (an empty list otherwise). The samples are the
    /// same either way.
    fn sample_with_features(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
    ) -> Result<(Vec<Sample>, Vec<Vec<f32>>)> {
        let streams: Vec<u64> = (0..inputs.len() as u64).collect();
        Ok((
            self.sample_streams(inputs, temperature, seed, &streams)?,
            Vec::new(),
        ))
    }
}

impl ActionPolicy for Policy {
    fn kind(&self) -> &'static str {
        "tiny"
    }
    fn chunk(&self) -> usize {
        self.config().chunk
    }
    fn sample_streams(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
        streams: &[u64],
    ) -> Result<Vec<Sample>> {
        Policy::sample_streams(self, inputs, temperature, seed, streams)
    }
    fn sample_with_features(
        &self,
        inputs: &[PolicyInput],
        temperature: f32,
        seed: u64,
    ) -> Result<(Vec<Sample>, Vec<Vec<f32>>)> {
        Policy::sample_with_features(self, inputs, temperature, seed)
    }
}
