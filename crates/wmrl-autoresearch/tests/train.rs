//! A tiny end-to-end run of each arm: policy samples, sandbox executions or
//! predictor scores through wmrl-core, GRPO updates, held-out evaluation.
#![allow(clippy::unwrap_used)]

use wmrl_autoresearch::collect::{collect, evaluate_predictor};
use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::execute::Executor;
use wmrl_autoresearch::onnx_predictor::{FILE_NAME, OnnxPredictor};
use wmrl_autoresearch::predictor::{Example, Predictor, PredictorConfig, PredictorWeights};
use wmrl_autoresearch::train::{
    Accounting, EvalPoint, PredictorRefit, RefitRecord, candidate_path, train_with_refit,
};
use wmrl_autoresearch::{
    AR_ARMS, Arm, Ladder, Sandbox, SandboxConfig, Split, Suite, TrainConfig, ar_name, train,
};

/// The shipped suite, and an executor with a replay cache under `dir`.
fn suite_and_executor(dir: &std::path::Path) -> (Suite, Executor) {
    let suite = Suite::load(&default_suite_dir()).unwrap();
    let ex = Executor::new(
        Sandbox::new(SandboxConfig::default()).unwrap(),
        Ladder::default(),
    )
    .with_cache(&dir.join("cache.jsonl"))
    .unwrap();
    (suite, ex)
}

#[test]
fn each_arm_runs_end_to_end_and_spends_what_it_should() {
    let cache = tempfile::tempdir().unwrap();
    let (suite, ex) = suite_and_executor(cache.path());
    let data = collect(&suite, &ex, Split::Train, 1, 3).unwrap();
    assert_eq!(data.len(), suite.indices(Split::Train).len());
    assert!(
        data.iter()
            .all(|e| e.cpu_secs > 0.0 && (0.0..=1.0).contains(&e.reward))
    );
    let (pred, _) = Predictor::train(
        &PredictorConfig {
            epochs: 50,
            ..Default::default()
        },
        &data,
    )
    .unwrap();
    // The arms score through the exported ONNX file and ONNX Runtime.
    let onnx = OnnxPredictor::export_and_load(&pred, &cache.path().join(FILE_NAME)).unwrap();
    assert_eq!(evaluate_predictor(&onnx, &data).unwrap().n, data.len());
    let cfg = TrainConfig {
        steps: 2,
        groups_per_step: 2,
        group_size: 2,
        eval_every: 0,
        eval_samples: 1,
        ..Default::default()
    };
    for arm in AR_ARMS {
        // The run directory, laid out as the robot track's.
        let run = wmrl_run::RunDir::in_bench(cache.path(), ar_name(arm), 7);
        let r = train(&cfg, arm, 7, &suite, &ex, Some(&onnx), Some(&run)).unwrap();
        let lines = |p: std::path::PathBuf| -> Vec<serde_json::Value> {
            std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                .lines()
                .map(|l| serde_json::from_str(l).expect("json line"))
                .collect()
        };
        let read = |p: std::path::PathBuf| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(&p).expect("file")).expect("json")
        };
        assert_eq!(
            lines(run.metrics()),
            serde_json::to_value(&r.steps)
                .unwrap()
                .as_array()
                .unwrap()
                .clone()
        );
        assert_eq!(
            lines(run.eval()),
            serde_json::to_value(&r.evals)
                .unwrap()
                .as_array()
                .unwrap()
                .clone()
        );
        // The records carry their layout (`format`) beside the fields.
        assert_eq!(read(run.summary()), wmrl_run::format::to_json(&r).unwrap());
        let (recorded, at) = run.read_settings::<TrainConfig>().unwrap();
        assert_eq!((recorded, at), (cfg.clone(), run.settings()));
        assert!(
            std::fs::read_to_string(run.settings())
                .unwrap()
                .starts_with("format = 1\n")
        );
        assert_eq!(
            read(run.diagnostics())["steps"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(r.evals.len(), 2, "{}", ar_name(arm));
        // Evaluations before training and after the last step; step logs
        // count from 1.
        assert_eq!(r.evals.iter().map(|e| e.step).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(r.steps.iter().map(|s| s.step).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(r.steps.len(), 2);
        let l = &r.ledger;
        match arm {
            Arm::Sparse => {
                assert_eq!(l.real_executions, 8);
                assert_eq!(l.wm_rollouts, 0);
                assert!(l.real_cpu_seconds > 0.0);
            }
            Arm::DenseRaw => {
                assert_eq!(l.real_executions, 0);
                assert_eq!(l.real_cpu_seconds, 0.0);
                assert_eq!(l.wm_rollouts, 8);
            }
            Arm::Wmrl => {
                // anchor fraction 0.1 of 2 groups -> the minimum, 1 group of 2.
                assert_eq!(l.real_executions, 4);
                assert_eq!(l.wm_rollouts, 8);
            }
            other => unreachable!("{other:?} is not an AutoResearch arm"),
        }
        // Both evaluations are the run's ends: held-out competitions read,
        // and the training competitions for the curve.
        for e in &r.evals {
            let h = e.heldout().expect("held-out read at the ends");
            let t = e
                .train_competitions
                .expect("curve on training competitions");
            for v in [h.position, h.valid_fraction, t.position, t.valid_fraction] {
                assert!((0.0..=1.0).contains(&v), "{e:?}");
            }
        }
    }
    // The curve between the ends reads only the training competitions;
    // where it is drawn does not change what the run learns or its
    // held-out figures at the ends.
    let curve = TrainConfig {
        steps: 4,
        eval_every: 2,
        ..cfg.clone()
    };
    let on_train = train(&curve, Arm::Sparse, 3, &suite, &ex, None, None).unwrap();
    assert_eq!(
        on_train.evals.iter().map(|e| e.step).collect::<Vec<_>>(),
        [0, 2, 4]
    );
    assert!(
        on_train.evals[1].heldout().is_none(),
        "held-out not read mid-run"
    );
    assert!(
        on_train
            .evals
            .iter()
            .all(|e| e.train_competitions.is_some())
    );
    let legacy = TrainConfig {
        curve_on: wmrl_autoresearch::train::CurveOn::Heldout,
        ..curve.clone()
    };
    let on_heldout = train(&legacy, Arm::Sparse, 3, &suite, &ex, None, None).unwrap();
    assert!(on_heldout.evals.iter().all(|e| e.heldout().is_some()));
    assert!(
        on_heldout
            .evals
            .iter()
            .all(|e| e.train_competitions.is_none())
    );
    assert_eq!(on_train.steps, on_heldout.steps);
    for i in [0, 2] {
        assert_eq!(on_train.evals[i].heldout(), on_heldout.evals[i].heldout());
    }
    // A config recorded before layouts (format 0) without the key read
    // back as `heldout`; today's records write it, and their format.
    let mut old = serde_json::to_value(&legacy).unwrap();
    old.as_object_mut().unwrap().remove("curve_on");
    let back: TrainConfig =
        wmrl_run::format::from_json(&old.to_string(), wmrl_run::Absent::Recorded).unwrap();
    assert_eq!(back, legacy);
    let now = wmrl_run::format::to_json(&curve).unwrap();
    assert_eq!(now["curve_on"], serde_json::json!("train"));
    assert_eq!(now["format"], serde_json::json!(1));
    // ... and its `refit_predictor_every` (the ungated refit) reads as the
    // shared refit without the gate.
    old.as_object_mut()
        .unwrap()
        .insert("refit_predictor_every".into(), serde_json::json!(4));
    let back: TrainConfig =
        wmrl_run::format::from_json(&old.to_string(), wmrl_run::Absent::Recorded).unwrap();
    assert_eq!((back.core.refit.every, back.core.refit.gate), (4, false));
    // Refitting the predictor on the run's anchors (beyond the paper;
    // tests below) is refused without its data and weights.
    let mut refit_cfg = cfg.clone();
    refit_cfg.core.refit.every = 1;
    assert!(train(&refit_cfg, Arm::Wmrl, 7, &suite, &ex, Some(&onnx), None).is_err());
    // The track runs the core's arms it names real, wm and wmrl only.
    let err = train(&cfg, Arm::Mix, 7, &suite, &ex, Some(&onnx), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`mix` is not an AutoResearch arm (expected real, wm or wmrl)"),
        "{err}"
    );
    // ... and with weights other than those the run scores with.
    let other = Predictor::new(64, 99).unwrap();
    let pcfg = PredictorConfig::default();
    let refit = PredictorRefit {
        predictor: &other,
        data: &data,
        config: &pcfg,
        onnx_path: cache.path().join("refit.onnx"),
    };
    let err = train_with_refit(
        &refit_cfg,
        Arm::Wmrl,
        7,
        &suite,
        &ex,
        Some(&onnx),
        None,
        Some(&refit),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("not the ONNX predictor"), "{err}");
    let resolved = refit_cfg.resolved().unwrap();
    assert!(resolved.core.refit.gate, "the gate is on by default");
}

#[test]
fn a_restarted_bench_reads_its_finished_runs_back_and_refuses_other_settings() {
    use wmrl_autoresearch::bench::{BenchConfig, run_bench};
    let dir = tempfile::tempdir().unwrap();
    let (suite, ex) = suite_and_executor(dir.path());
    let cfg = BenchConfig {
        seeds: 1,
        per_competition: 1,
        // The predictor's cost divided over this bench's wm, wmrl and
        // wmrl_long runs.
        predictor_runs: 3,
        train: TrainConfig {
            steps: 1,
            groups_per_step: 2,
            group_size: 2,
            eval_every: 0,
            eval_samples: 1,
            ..Default::default()
        },
        predictor: PredictorConfig {
            epochs: 20,
            ..Default::default()
        },
        arms: BenchConfig::default().arms,
        targets: Vec::new(),
        // An equal-compute arm: wmrl with another step.
        variants: vec![wmrl_autoresearch::bench::ArVariant {
            name: "wmrl_long".into(),
            arm: Arm::Wmrl,
            set: vec!["steps=2".into()],
        }],
    };
    let out = dir.path().join("bench");
    // Dividing the cost over more runs than the bench has is refused
    // before anything runs.
    let thin = BenchConfig {
        predictor_runs: 4,
        ..cfg.clone()
    };
    let err = run_bench(&thin, &suite, &ex, &out).unwrap_err().to_string();
    assert!(err.contains("predictor_runs = 4"), "{err}");
    assert!(!out.exists(), "nothing was spent or written");
    let first = run_bench(&cfg, &suite, &ex, &out).unwrap();
    assert_eq!(first.reports.len(), AR_ARMS.len() + 1);
    // The variant ran as its own arm, with its own settings, recorded.
    let long = first
        .reports
        .iter()
        .find(|r| r.name() == "wmrl_long")
        .unwrap();
    assert_eq!((long.arm, long.steps.len()), (Arm::Wmrl, 2));
    let (recorded, _): (TrainConfig, _) = wmrl_run::RunDir::new(out.join("wmrl_long/seed0"))
        .read_settings()
        .unwrap();
    assert_eq!(
        (recorded.steps, recorded.variant.as_deref()),
        (2, Some("wmrl_long"))
    );
    // Every cost is in the ledgers: the predictor's data and fit, a third
    // each to the wm, wmrl and wmrl_long runs (paid before their first step, so their
    // curves start there), and the trainer's own CPU beside the sandbox's.
    let cost = first.predictor_cost.expect("the predictor's cost");
    assert!(
        cost.data_cpu_secs > 0.0 && cost.fit_cpu_secs > 0.0,
        "{cost:?}"
    );
    assert_eq!(
        cost,
        wmrl_autoresearch::predictor::PredictorCost::load(&out.join("predictor_cost.json"))
            .unwrap()
    );
    for r in &first.reports {
        let l = &r.ledger;
        let share = if r.arm == Arm::Sparse {
            0.0
        } else {
            cost.total() / 3.0
        };
        assert_eq!(l.predictor_cpu_seconds, share, "{}", ar_name(r.arm));
        assert_eq!(r.evals[0].train_cpu_secs, share, "{}", ar_name(r.arm));
        assert!(
            l.policy_cpu_seconds > 0.0 && l.update_cpu_seconds > 0.0,
            "{l:?}"
        );
        assert!(r.train_cpu() > l.real_cpu_seconds + share, "{l:?}");
        assert_eq!(r.evals.last().unwrap().train_cpu_secs, r.train_cpu());
        if r.arm != Arm::Sparse {
            assert!(
                l.wm_cpu_seconds > 0.0,
                "predictor inference is charged: {l:?}"
            );
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("training CPU-s, every cost charged"), "{md}");
    assert!(out.join("score_vs_train_cpu.png").exists());
    // report.md: a row per arm, every pair of arms paired by seed.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for name in AR_ARMS.map(ar_name).into_iter().chain(["wmrl_long"]) {
        assert!(md.contains(&format!("| {name} | 1 |")), "{md}");
    }
    assert!(md.contains("| `wmrl_long` - `real` | 1 |"), "{md}");
    assert!(
        md.contains("| `wmrl` - `real` | 1 |") && md.contains("one seed: not resolved"),
        "{md}"
    );
    // Mark one finished run: a restart must read it back, not redo it.
    let done = out.join("wmrl").join("seed0").join("summary.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&done).unwrap()).unwrap();
    v["ledger"]["real_cpu_seconds"] = serde_json::json!(12345.0);
    std::fs::write(&done, v.to_string()).unwrap();
    // And the predictor's data: drop one example; a resumed bench counts
    // the data it reads back, not data it collected again.
    let data = out.join("predictor_train.jsonl");
    let text = std::fs::read_to_string(&data).unwrap();
    let kept: Vec<&str> = text.lines().skip(1).collect();
    std::fs::write(&data, kept.join("\n")).unwrap();
    let kept_cpu: f64 = kept
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["cpu_secs"]
                .as_f64()
                .unwrap()
        })
        .sum();
    let again = run_bench(&cfg, &suite, &ex, &out).unwrap();
    assert!((again.predictor_data_cpu_secs - kept_cpu).abs() < 1e-9);
    assert!(again.predictor_data_cpu_secs < first.predictor_data_cpu_secs);
    let wmrl = again.reports.iter().find(|r| r.arm == Arm::Wmrl).unwrap();
    assert_eq!(wmrl.ledger.real_cpu_seconds, 12345.0);
    let real = |res: &wmrl_autoresearch::bench::BenchResult| {
        res.reports
            .iter()
            .find(|r| r.arm == Arm::Sparse)
            .unwrap()
            .clone()
    };
    assert_eq!(real(&again), real(&first));
    assert_eq!(again.predictor_heldout, first.predictor_heldout);
    // Other settings on the same folder are refused, naming the key.
    let other = BenchConfig {
        per_competition: 2,
        ..cfg.clone()
    };
    let err = run_bench(&other, &suite, &ex, &out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("per_competition"), "{err}");
    // Results without recorded settings are not resumed.
    std::fs::remove_file(out.join("run.toml")).unwrap();
    let err = run_bench(&cfg, &suite, &ex, &out).unwrap_err().to_string();
    assert!(err.contains("no recorded settings"), "{err}");
    // An older wmrl's record of them (bench_config.json) is read.
    std::fs::write(
        out.join("bench_config.json"),
        serde_json::to_string(&cfg).unwrap(),
    )
    .unwrap();
    // A finished run whose costs were counted otherwise is not compared:
    // sandbox CPU alone, or another share of the predictor.
    let summary = std::fs::read_to_string(&done).unwrap();
    for (key, value) in [
        ("accounting", serde_json::json!("sandbox")),
        ("predictor_cpu_seconds", serde_json::json!(0.0)),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&summary).unwrap();
        match key {
            "accounting" => v[key] = value,
            _ => v["ledger"][key] = value,
        }
        std::fs::write(&done, v.to_string()).unwrap();
        let err = run_bench(&cfg, &suite, &ex, &out).unwrap_err().to_string();
        assert!(err.contains("cost accounting differs"), "{key}: {err}");
    }
    // A corrupt run file is an error that names it, not a silent rerun.
    std::fs::write(&done, "{ truncated").unwrap();
    let err = run_bench(&cfg, &suite, &ex, &out).unwrap_err().to_string();
    assert!(err.contains("wmrl/seed0/summary.json"), "{err}");
}

#[test]
fn an_interrupted_run_resumes_from_its_checkpoint_to_the_same_result() {
    use wmrl_run::RunDir;
    let dir = tempfile::tempdir().unwrap();
    let (suite, ex) = suite_and_executor(dir.path());
    // The stand-in for a stop is a shorter run, whose last step reads the
    // held-out competitions; with the curve drawn there as well, the
    // evaluations of both runs match point for point.
    let cfg = TrainConfig {
        steps: 3,
        groups_per_step: 2,
        group_size: 2,
        eval_every: 1,
        eval_samples: 1,
        curve_on: wmrl_autoresearch::train::CurveOn::Heldout,
        ..Default::default()
    };
    let straight_dir = RunDir::new(dir.path().join("straight"));
    let straight = train(&cfg, Arm::Sparse, 3, &suite, &ex, None, Some(&straight_dir)).unwrap();
    assert!(straight_dir.checkpoint().join("state.json").exists());
    // A run stopped after its first step: a one-step run whose summary is
    // gone, and a half line its process wrote after the checkpoint.
    let cut = RunDir::new(dir.path().join("cut"));
    let one = TrainConfig {
        steps: 1,
        ..cfg.clone()
    };
    train(&one, Arm::Sparse, 3, &suite, &ex, None, Some(&cut)).unwrap();
    std::fs::remove_file(cut.summary()).unwrap();
    let mut m = std::fs::OpenOptions::new()
        .append(true)
        .open(cut.metrics())
        .unwrap();
    std::io::Write::write_all(&mut m, b"{\"step\": 2, \"half").unwrap();
    drop(m);
    // Mark the checkpoint (a wall-clock total no figure depends on), so the
    // result shows it was read back rather than the run redone.
    let state = cut.checkpoint().join("state.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(v["step"], 1);
    v["ledger"]["eval_seconds"] = serde_json::json!(12345.0);
    std::fs::write(&state, v.to_string()).unwrap();
    // Continued to three steps, it ends where the uninterrupted run did
    // (the executor's replay cache gives both the same sandbox CPU-s).
    let resumed = train(&cfg, Arm::Sparse, 3, &suite, &ex, None, Some(&cut)).unwrap();
    assert_eq!(resumed.steps, straight.steps);
    assert_eq!(learned(&resumed.evals), learned(&straight.evals));
    assert_cpu_grows(&resumed.evals);
    assert_eq!(resumed.evals.len(), 4);
    assert_eq!(
        resumed.ledger.real_executions,
        straight.ledger.real_executions
    );
    assert_eq!(resumed.ledger.labels, straight.ledger.labels);
    assert!(
        resumed.ledger.eval_seconds > 12345.0,
        "the checkpoint was not resumed"
    );
    let text = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(text(cut.metrics()), text(straight_dir.metrics()));
    assert_eq!(learned(&eval_lines(&cut)), learned(&straight.evals));
    assert_eq!(eval_lines(&cut), resumed.evals);
    // An interrupted run is not continued under other settings.
    std::fs::remove_file(cut.summary()).unwrap();
    let other = TrainConfig {
        group_size: 3,
        ..cfg.clone()
    };
    let err = train(&other, Arm::Sparse, 3, &suite, &ex, None, Some(&cut))
        .unwrap_err()
        .to_string();
    assert!(err.contains("other settings"), "{err}");
    assert!(err.contains("group_size: 2 against 3"), "{err}");
}

/// Settings for the refit tests: 3 groups of 4 a step, 2 of them anchors;
/// the predictor refit every step, judged on the newest anchor group.
fn refit_settings(steps: usize, gate: bool) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps,
        groups_per_step: 3,
        group_size: 4,
        eval_every: 0,
        eval_samples: 1,
        ..Default::default()
    };
    cfg.core.anchors.min_groups = 2;
    cfg.core.refit.every = 1;
    cfg.core.refit.holdout_groups = 1;
    cfg.core.refit.min_pairs = 1;
    cfg.core.refit.gate = gate;
    cfg
}

/// What a run learned at each evaluation, its CPU figure left out: process
/// CPU time differs between two runs of the same computation.
fn learned(evals: &[EvalPoint]) -> Vec<EvalPoint> {
    evals
        .iter()
        .map(|e| EvalPoint {
            train_cpu_secs: 0.0,
            ..e.clone()
        })
        .collect()
}

/// A run directory's eval.jsonl.
fn eval_lines(run: &wmrl_run::RunDir) -> Vec<EvalPoint> {
    std::fs::read_to_string(run.eval())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A resumed run's CPU carries on from its checkpoint's: it only grows.
fn assert_cpu_grows(evals: &[EvalPoint]) {
    let cpu: Vec<f64> = evals.iter().map(|e| e.train_cpu_secs).collect();
    assert!(cpu.windows(2).all(|w| w[1] > w[0]), "{cpu:?}");
}

fn json(p: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn refit_lines(run: &wmrl_run::RunDir) -> Vec<RefitRecord> {
    std::fs::read_to_string(run.refits())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The gate refuses a candidate that ranks the held-out anchors worse, the
/// run then goes on exactly as without refits, the refused fit is still
/// paid for, and no held-out row was fitted on. The case is constructed:
/// step 0's anchor groups do not depend on the predictor (the policy has
/// not moved and anchors are drawn uniformly), so a probe run reads the
/// held-out group's rows, the incumbent is fitted on them, and the
/// candidate's data holds them with reversed outcomes. Without the gate
/// the same candidate goes in: exported, reloaded through ONNX Runtime,
/// and scoring the next step.
#[test]
fn a_refit_that_ranks_the_held_out_anchors_worse_is_refused_and_paid_for() {
    let dir = tempfile::tempdir().unwrap();
    let (suite, ex) = suite_and_executor(dir.path());
    let seed = 5;
    let data = collect(&suite, &ex, Split::Train, 1, 3).unwrap();
    let pcfg = PredictorConfig {
        epochs: 50,
        ..Default::default()
    };
    let (first, _) = Predictor::train(&pcfg, &data).unwrap();
    let first_onnx =
        OnnxPredictor::export_and_load(&first, &dir.path().join("first.onnx")).unwrap();
    let probe_run = wmrl_run::RunDir::new(dir.path().join("probe"));
    let probe_data = PredictorRefit {
        predictor: &first,
        data: &data,
        config: &pcfg,
        onnx_path: dir.path().join("probe.onnx"),
    };
    // One step: the refit after the last step is skipped (nothing would
    // score with it), but the anchor rows are kept.
    let probe = train_with_refit(
        &refit_settings(1, true),
        Arm::Wmrl,
        seed,
        &suite,
        &ex,
        Some(&first_onnx),
        Some(&probe_run),
        Some(&probe_data),
    )
    .unwrap();
    assert!(probe.refits.is_empty());
    assert!(!probe_run.dir.join("probe.onnx").exists());
    let kept = json(&probe_run.state())["track"]["kept"].clone();
    let kept = kept.as_array().unwrap();
    assert_eq!(kept.len(), 2, "two anchor groups in step 0");
    let rows = |k: &serde_json::Value| -> Vec<Example> {
        serde_json::from_value(k["rows"].clone()).unwrap()
    };
    let (trained_key, held_key) = (
        (
            kept[0]["step"].as_u64().unwrap(),
            kept[0]["group"].as_u64().unwrap() as usize,
        ),
        (
            kept[1]["step"].as_u64().unwrap(),
            kept[1]["group"].as_u64().unwrap() as usize,
        ),
    );
    let (trained_rows, held_rows) = (rows(&kept[0]), rows(&kept[1]));
    let rewards: Vec<f64> = held_rows.iter().map(|e| e.reward).collect();
    assert!(
        rewards.iter().any(|&r| r != rewards[0]),
        "the held-out group must rank something: {rewards:?}"
    );
    // The incumbent knows the held-out rows; the candidate's data says the
    // opposite of them.
    let repeat = |rows: &[Example], flip: bool| -> Vec<Example> {
        (0..8)
            .flat_map(|_| rows.iter().cloned())
            .map(|mut e| {
                if flip {
                    e.reward = 1.0 - e.reward;
                }
                e
            })
            .collect()
    };
    let (incumbent, _) = Predictor::train(
        &PredictorConfig::default(),
        &[data.clone(), repeat(&held_rows, false)].concat(),
    )
    .unwrap();
    let incumbent_onnx =
        OnnxPredictor::export_and_load(&incumbent, &dir.path().join("incumbent.onnx")).unwrap();
    let poisoned = repeat(&held_rows, true);
    let fit = PredictorConfig {
        refit_epochs: 400,
        refit_lr: 0.01,
        ..Default::default()
    };
    let run_with = |name: &str, cfg: &TrainConfig| {
        let run = wmrl_run::RunDir::new(dir.path().join(name));
        let refit = PredictorRefit {
            predictor: &incumbent,
            data: &poisoned,
            config: &fit,
            onnx_path: run.dir.join("predictor.onnx"),
        };
        let r = train_with_refit(
            cfg,
            Arm::Wmrl,
            seed,
            &suite,
            &ex,
            Some(&incumbent_onnx),
            Some(&run),
            Some(&refit),
        )
        .unwrap();
        (r, run)
    };
    let (gated, gated_run) = run_with("gated", &refit_settings(2, true));
    let mut no_refit = refit_settings(2, true);
    no_refit.core.refit.every = 0;
    let (plain, plain_run) = run_with("plain", &no_refit);
    assert!(!plain_run.refits().exists());

    // Refused, on the held-out group's ranking, and recorded.
    assert_eq!(gated.refits.len(), 1);
    let rec = &gated.refits[0];
    let d = &rec.decision;
    assert_eq!(d.step, 1);
    assert!(!d.accepted && d.reason.starts_with("refused"), "{d:?}");
    assert!(d.candidate.unwrap() < d.incumbent.unwrap(), "{d:?}");
    assert_eq!(refit_lines(&gated_run), gated.refits);
    // The held-out group was never fitted on: the candidate's rows are its
    // data and the other anchor group's rows, counted.
    assert_eq!(rec.held_out, [held_key]);
    assert_eq!(rec.trained_on, [trained_key]);
    assert_eq!(rec.held_out_rows, held_rows.len());
    assert_eq!(rec.anchor_rows, trained_rows.len());
    assert_eq!(rec.training_rows, poisoned.len() + trained_rows.len());
    // Dropped: exported beside the predictor path, never installed, and the
    // run went on exactly as without refits.
    let path = gated_run.dir.join("predictor.onnx");
    assert!(candidate_path(&path).exists() && !path.exists());
    assert_eq!(gated.steps, plain.steps);
    assert_eq!(learned(&gated.evals), learned(&plain.evals));
    // Its cost is in the ledger: one more world-model call scoring the
    // held-out rows, and the fit's wall and process CPU seconds.
    let (g, p) = (&gated.ledger, &plain.ledger);
    assert_eq!(g.wm_calls, p.wm_calls + 1);
    assert_eq!(g.wm_rollouts, p.wm_rollouts + held_rows.len() as u64);
    assert!(
        rec.fit_seconds > 0.0 && rec.fit_cpu_seconds > 0.0,
        "{rec:?}"
    );
    assert!(g.wm_seconds >= rec.fit_seconds);
    assert!(p.wm_cpu_seconds > 0.0, "predictor inference is charged");
    assert!(g.wm_cpu_seconds >= rec.fit_cpu_seconds);
    assert_eq!(g.real_executions, p.real_executions);

    // Without the gate the same candidate is installed.
    let (ungated, ungated_run) = run_with("ungated", &refit_settings(2, false));
    let rec = &ungated.refits[0];
    assert!(rec.decision.accepted);
    assert_eq!(
        (rec.trained_on.clone(), rec.held_out.clone()),
        ([trained_key].to_vec(), [held_key].to_vec())
    );
    let path = ungated_run.dir.join("predictor.onnx");
    assert!(path.exists() && !candidate_path(&path).exists());
    // Reloaded through ONNX Runtime, the installed file is the candidate
    // the checkpoint keeps, and it ranks the held-out rows reversed.
    let installed = OnnxPredictor::load(&path).unwrap();
    let w: PredictorWeights =
        serde_json::from_value(json(&ungated_run.state())["track"]["installed"].clone()).unwrap();
    let candle = Predictor::from_weights(&w).unwrap();
    assert!(
        wmrl_autoresearch::onnx_predictor::max_abs_diff(&candle, &installed, 64, 1).unwrap() < 1e-5
    );
    let xs: Vec<Vec<f32>> = held_rows.iter().map(Example::input).collect();
    let (before, after) = (
        incumbent_onnx.predict(&xs).unwrap(),
        installed.predict(&xs).unwrap(),
    );
    let sp = wmrl_autoresearch::predictor::spearman(&before, &after).unwrap();
    assert!(
        sp < 0.0,
        "the candidate reverses the held-out ranking: {sp}"
    );
    // Step 1 was scored before the refit, step 2 with the new predictor.
    assert_eq!(ungated.steps[0], plain.steps[0]);
    assert_ne!(
        ungated.steps[1].mean_reward_seen, plain.steps[1].mean_reward_seen,
        "step 2 scores with the refitted predictor"
    );
}

/// A run with refits stopped between them and resumed ends where the
/// uninterrupted run does: the installed predictor comes back from the
/// checkpoint (the second refit warm-starts from it), refits.jsonl is cut
/// back to the checkpoint's length.
#[test]
fn an_interrupted_run_with_refits_resumes_to_the_same_result() {
    use wmrl_run::RunDir;
    let dir = tempfile::tempdir().unwrap();
    let (suite, ex) = suite_and_executor(dir.path());
    let data = collect(&suite, &ex, Split::Train, 1, 3).unwrap();
    let pcfg = PredictorConfig {
        epochs: 50,
        refit_epochs: 30,
        ..Default::default()
    };
    let (pred, _) = Predictor::train(&pcfg, &data).unwrap();
    let onnx = OnnxPredictor::export_and_load(&pred, &dir.path().join(FILE_NAME)).unwrap();
    // Refits after steps 2 and 4 of 5, one anchor group a step, ungated so
    // that both install.
    // Evaluations at 0, 3 (where the stopped run ends too) and 5.
    // (The curve on the held-out competitions: see the test above.)
    let mut cfg = TrainConfig {
        steps: 5,
        groups_per_step: 2,
        group_size: 3,
        eval_every: 3,
        eval_samples: 1,
        curve_on: wmrl_autoresearch::train::CurveOn::Heldout,
        ..Default::default()
    };
    cfg.core.refit.every = 2;
    cfg.core.refit.holdout_groups = 1;
    cfg.core.refit.gate = false;
    let go = |cfg: &TrainConfig, run: &RunDir| {
        let refit = PredictorRefit {
            predictor: &pred,
            data: &data,
            config: &pcfg,
            onnx_path: run.dir.join("predictor.onnx"),
        };
        train_with_refit(
            cfg,
            Arm::Wmrl,
            11,
            &suite,
            &ex,
            Some(&onnx),
            Some(run),
            Some(&refit),
        )
        .unwrap()
    };
    let straight_dir = RunDir::new(dir.path().join("straight"));
    let straight = go(&cfg, &straight_dir);
    assert_eq!(
        straight
            .refits
            .iter()
            .map(|r| (r.decision.step, r.decision.accepted))
            .collect::<Vec<_>>(),
        [(2, true), (4, true)]
    );
    // Stopped after step 3, between the refits, with a refit line its
    // process wrote after the checkpoint.
    let cut = RunDir::new(dir.path().join("cut"));
    go(
        &TrainConfig {
            steps: 3,
            ..cfg.clone()
        },
        &cut,
    );
    std::fs::remove_file(cut.summary()).unwrap();
    let state = cut.checkpoint().join("state.json");
    let mut v = json(&state);
    assert_eq!(v["step"], 3);
    assert!(
        v["track"]["installed"].is_object(),
        "the refit of step 2 is kept"
    );
    v["ledger"]["eval_seconds"] = serde_json::json!(12345.0);
    std::fs::write(&state, v.to_string()).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(cut.refits())
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"step\": 4, \"acc").unwrap();
    drop(f);
    // And the installed file overwritten, as a later refit would: the
    // checkpoint's weights are what comes back.
    std::fs::copy(dir.path().join(FILE_NAME), cut.dir.join("predictor.onnx")).unwrap();
    let resumed = go(&cfg, &cut);
    assert!(resumed.ledger.eval_seconds > 12345.0, "not resumed");
    assert_eq!(resumed.steps, straight.steps);
    assert_eq!(learned(&resumed.evals), learned(&straight.evals));
    assert_cpu_grows(&resumed.evals);
    assert_eq!(resumed.ledger.labels, straight.ledger.labels);
    assert_eq!(resumed.ledger.wm_rollouts, straight.ledger.wm_rollouts);
    // The refits agree but for their timings.
    let untimed = |rs: &[RefitRecord]| -> Vec<RefitRecord> {
        rs.iter()
            .map(|r| RefitRecord {
                fit_seconds: 0.0,
                fit_cpu_seconds: 0.0,
                ..r.clone()
            })
            .collect()
    };
    assert_eq!(untimed(&resumed.refits), untimed(&straight.refits));
    assert_eq!(untimed(&refit_lines(&cut)), untimed(&straight.refits));
    let text = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(text(cut.metrics()), text(straight_dir.metrics()));
    assert_eq!(learned(&eval_lines(&cut)), learned(&straight.evals));
    assert_eq!(eval_lines(&cut), resumed.evals);
}

/// Every committed AutoResearch bench reads through today's types, each
/// record migrated from its layout (`wmrl_run::format`): its settings, each
/// run's settings and summary, and its bench.json, from which its report.md
/// renders again: byte for byte where today's renderer wrote it, its tables
/// (every figure and verdict) where an older one did. Benches that counted sandbox CPU alone read
/// back as such, and their settings are refused as a new run's.
#[test]
fn committed_autoresearch_benches_read_and_report_unchanged() {
    use wmrl_autoresearch::TrainReport;
    use wmrl_autoresearch::bench::{BenchConfig, BenchResult};
    use wmrl_run::{Absent, format::from_json};
    fn read<T: serde::de::DeserializeOwned + wmrl_run::Versioned>(p: &std::path::Path) -> T {
        from_json(&std::fs::read_to_string(p).unwrap(), Absent::Recorded)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
    let results = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results");
    let (mut benches, mut runs, mut whole) = (0, 0, Vec::new());
    for e in std::fs::read_dir(&results).unwrap().flatten() {
        let Some(cfg) = wmrl_run::RunDir::new(e.path()).recorded_settings::<BenchConfig>() else {
            continue;
        };
        benches += 1;
        let (b, _) = wmrl_run::RunDir::new(e.path())
            .read_settings::<BenchConfig>()
            .unwrap_or_else(|e| panic!("{}: {e}", cfg.display()));
        let sandbox = b.train.accounting == Accounting::Sandbox;
        let arms = b
            .arms()
            .unwrap_or_else(|e| panic!("{}: {e}", cfg.display()));
        if sandbox {
            let e = b.train.resolved().unwrap_err().to_string();
            assert!(e.contains("accounting"), "{e}");
        } else {
            assert_eq!(b.train.resolved().unwrap(), b.train, "{}", cfg.display());
        }
        for arm in e.path().read_dir().unwrap().flatten() {
            for seed in arm.path().read_dir().into_iter().flatten().flatten() {
                let run = seed.path();
                if !run.join("summary.json").exists() {
                    continue;
                }
                runs += 1;
                let (t, _) = wmrl_run::RunDir::new(&run)
                    .read_settings::<TrainConfig>()
                    .unwrap_or_else(|e| panic!("{}: {e}", run.display()));
                let r: TrainReport = read(&run.join("summary.json"));
                assert_eq!(t.accounting, b.train.accounting, "{}", run.display());
                assert_eq!(r.accounting, t.accounting, "{}", run.display());
                assert_eq!(t.curve_on, b.train.curve_on, "{}", run.display());
                // Only `wmrl` refits; the `real` and `wm` runs of
                // results/autoresearch_bench_refit4_gated recorded the older
                // spelling, which their arms never read.
                if r.arm == Arm::Wmrl {
                    let arm = arms.iter().find(|a| a.name == r.name()).expect("its arm");
                    assert_eq!(t.core.refit, arm.train.core.refit, "{}", run.display());
                }
            }
        }
        let res: BenchResult = read(&e.path().join("bench.json"));
        let committed = std::fs::read_to_string(e.path().join("report.md")).unwrap();
        let now = res.report().markdown().to_string();
        if now == committed {
            whole.push(e.file_name().to_string_lossy().into_owned());
        } else {
            // A report written by an older renderer: its tables (every
            // figure and verdict) render the same; the plain-text details
            // below them were worded otherwise then.
            let tables = |t: &str| t.split("## Details").next().unwrap().to_string();
            assert_eq!(tables(&now), tables(&committed), "{}", e.path().display());
        }
    }
    assert!(
        benches >= 5 && runs >= 60,
        "{benches} benches, {runs} runs in {}",
        results.display()
    );
    // The bench that resumes under this version renders whole.
    assert!(
        whole.iter().any(|n| n == "autoresearch_bench_costed"),
        "{whole:?}"
    );
}
