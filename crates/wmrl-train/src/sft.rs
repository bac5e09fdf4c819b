//! Behaviour cloning (`wmrl sft`) for the built-in policy kinds, behind
//! [`crate::PolicyKind::sft`]: the command knows only the request and the
//! kind's name; what a kind builds, reads and trains is here.

use std::path::Path;
use std::time::Instant;

use wmrl_policy::candle::{DType, Device};
use wmrl_policy::{Policy, RunConfig, SftConfig, SftDataset, SftModel, SftReport};

use crate::{Result, TrainError};

/// What `wmrl sft` asks of a policy kind: a network of it trained on the
/// demonstrations in `demos` into `out` (the run directory, which then
/// holds the policy), fresh or, with `resume`, continued from the
/// checkpoint there.
#[derive(Debug)]
pub struct SftRequest<'a> {
    pub demos: &'a Path,
    pub out: &'a Path,
    /// The run config: the `tiny` family's preset and overrides
    /// (`[policy]`), and the SFT settings (`[sft]`) every kind trains with.
    pub run: RunConfig,
    /// A preset of the kind's own where it has them (MiniVLA: `small`).
    pub preset: Option<&'a str>,
    /// Start from the policy in this directory instead of a fresh one.
    pub init: Option<&'a Path>,
    /// Continue the run in `out` (its checkpoint holds the network).
    pub resume: bool,
    /// Use at most this many (usable) episodes, in file order.
    pub max_episodes: Option<usize>,
    pub device: &'a Device,
}

/// A finished SFT: the training report, the trained network's parameter
/// count, and the settings it trained with.
#[derive(Debug)]
pub struct SftDone {
    pub report: SftReport,
    pub params: usize,
    pub sft: SftConfig,
}

fn refused(what: &str, message: impl std::fmt::Display) -> TrainError {
    TrainError::Config {
        path: what.to_string(),
        message: message.to_string(),
    }
}

/// The `tiny` kind: a preset (or `--init`'s policy, or on resume the one
/// `out` holds) trained on the demos' action tokens, its proprio
/// normalisation taken from the demos when fresh.
pub(crate) fn tiny(req: SftRequest<'_>) -> Result<SftDone> {
    if req.preset.is_some() {
        return Err(refused(
            "policy_type",
            "the `tiny` kind's presets are `--preset` / `[policy] preset`",
        ));
    }
    let SftRequest {
        demos,
        out,
        run: mut rc,
        init,
        resume,
        max_episodes,
        device,
        ..
    } = req;
    let init = match init {
        Some(p) if !resume => Some(
            Policy::load_on(p, device, DType::F32)
                .map_err(|e| refused(&p.display().to_string(), format!("loading --init: {e}")))?,
        ),
        _ => None,
    };
    if resume {
        // The network must be the one the run started with.
        rc.policy = Policy::load(out)?.config().clone();
    } else if let Some(p) = &init {
        rc.policy = p.config().clone();
    } else {
        let first = wmrl_env::list_episodes(demos)?
            .first()
            .map(|p| wmrl_env::read_episode(p))
            .transpose()?
            .ok_or_else(|| refused(&demos.display().to_string(), "no episodes in --demos"))?;
        rc.policy.proprio_dim = first.steps.first().map(|s| s.proprio.len()).unwrap_or(0);
        rc.policy.proprio_mean.clear();
        rc.policy.proprio_std.clear();
    }
    let t_load = Instant::now();
    let data = SftDataset::from_dir(&rc.policy, demos, max_episodes, rc.sft.include_failures)
        .map_err(|e| refused(&demos.display().to_string(), format!("loading demos: {e}")))?;
    tracing::info!(
        episodes = data.n_episodes,
        samples = data.len(),
        secs = t_load.elapsed().as_secs_f64(),
        "loaded demonstrations"
    );
    if !resume && init.is_none() {
        let (mean, std) = data.proprio_stats(rc.policy.proprio_dim);
        rc.policy.proprio_mean = mean;
        rc.policy.proprio_std = std;
    }
    let policy = match init {
        Some(p) => p,
        None => Policy::new(rc.policy.clone(), device, DType::F32)?,
    };
    tracing::info!(preset = %rc.policy.preset, params = policy.n_params(), "policy");
    let model = wmrl_policy::PolicySft {
        policy: &policy,
        data: &data,
    };
    let report = wmrl_policy::train_sft(&model, &rc.sft, out, resume, true)?;
    Ok(SftDone {
        report,
        params: policy.n_params(),
        sft: rc.sft,
    })
}

/// The `minivla` kind: a fresh MiniVLA of `preset` written into `out`
/// (random weights from the SFT seed, a word-level tokenizer of the
/// embedded suite's and the demos' instructions) unless resuming, then
/// trained whole on the demos' actions as action tokens.
pub(crate) fn minivla(req: SftRequest<'_>) -> Result<SftDone> {
    let SftRequest {
        demos,
        out,
        run,
        preset,
        init,
        resume,
        max_episodes,
        device,
    } = req;
    let sft = run.sft;
    if init.is_some() {
        return Err(refused(
            "--init",
            "a MiniVLA SFT starts from a fresh preset or resumes its own run",
        ));
    }
    let episodes = wmrl_env::list_episodes(demos)?;
    if !resume {
        let cfg = match preset.unwrap_or("small") {
            "small" => wmrl_minivla::MiniVlaConfig::small(),
            other => {
                return Err(refused(
                    "--minivla",
                    format!("unknown MiniVLA preset `{other}` (small)"),
                ));
            }
        };
        let mut instructions: Vec<String> = wmrl_sim::tasks()?
            .into_iter()
            .map(|t| t.instruction)
            .collect();
        for p in &episodes {
            instructions.push(wmrl_env::read_episode(p)?.instruction);
        }
        let lower: Vec<String> = instructions.iter().map(|s| s.to_lowercase()).collect();
        let mut words: Vec<&str> = lower.iter().flat_map(|s| s.split_whitespace()).collect();
        words.sort_unstable();
        words.dedup();
        wmrl_minivla::stand_in::write_stand_in(out, &cfg, sft.seed, DType::F32, &words)
            .map_err(|e| refused(&out.display().to_string(), format!("a fresh MiniVLA: {e}")))?;
    }
    let minivla_err = |e: wmrl_minivla::MiniVlaError| refused(&out.display().to_string(), e);
    let mut model = wmrl_minivla::MiniVlaSft::load(out, device).map_err(minivla_err)?;
    for p in &episodes {
        if max_episodes.is_some_and(|m| model.n_episodes() >= m) {
            break;
        }
        let ep = wmrl_env::read_episode(p)?;
        if ep.success || sft.include_failures {
            model
                .push_episode(&ep)
                .map_err(|e| refused(&p.display().to_string(), e))?;
        }
    }
    if model.n_samples() == 0 {
        return Err(refused(&demos.display().to_string(), "no usable episodes"));
    }
    let params = model.model().n_params();
    tracing::info!(params, samples = model.n_samples(), "minivla");
    let report = wmrl_policy::train_sft(&model, &sft, out, resume, true)?;
    Ok(SftDone {
        report,
        params,
        sft,
    })
}
