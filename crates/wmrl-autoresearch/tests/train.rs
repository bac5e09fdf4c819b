//! A tiny end-to-end run of each arm: policy samples, sandbox executions or
//! predictor scores through wmrl-core, GRPO updates, held-out evaluation.
#![allow(clippy::unwrap_used)]

use wmrl_autoresearch::collect::{collect, evaluate_predictor};
use wmrl_autoresearch::competition::default_suite_dir;
use wmrl_autoresearch::execute::Executor;
use wmrl_autoresearch::onnx_predictor::{FILE_NAME, OnnxPredictor};
use wmrl_autoresearch::predictor::{Predictor, PredictorConfig};
use wmrl_autoresearch::{ArArm, Ladder, Sandbox, SandboxConfig, Split, Suite, TrainConfig, train};

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
    for arm in ArArm::ALL {
        // The run directory, laid out as the robot track's.
        let run = wmrl_autoresearch::RunDir::in_bench(cache.path(), arm.name(), 7);
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
        assert_eq!(read(run.summary()), serde_json::to_value(&r).unwrap());
        assert_eq!(read(run.config_json()), serde_json::to_value(&cfg).unwrap());
        assert_eq!(
            read(run.diagnostics())["steps"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(r.evals.len(), 2, "{arm:?}");
        // Evaluations before training and after the last step; step logs
        // count from 1.
        assert_eq!(r.evals.iter().map(|e| e.step).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(r.steps.iter().map(|s| s.step).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(r.steps.len(), 2);
        let l = &r.ledger;
        match arm {
            ArArm::Real => {
                assert_eq!(l.real_executions, 8);
                assert_eq!(l.wm_rollouts, 0);
                assert!(l.real_cpu_seconds > 0.0);
            }
            ArArm::Wm => {
                assert_eq!(l.real_executions, 0);
                assert_eq!(l.real_cpu_seconds, 0.0);
                assert_eq!(l.wm_rollouts, 8);
            }
            ArArm::Wmrl => {
                // anchor fraction 0.1 of 2 groups -> the minimum, 1 group of 2.
                assert_eq!(l.real_executions, 4);
                assert_eq!(l.wm_rollouts, 8);
            }
        }
        assert!(
            r.evals
                .iter()
                .all(|e| (0.0..=1.0).contains(&e.heldout_position))
        );
    }
    // Refitting the predictor on the run's anchors (beyond the paper):
    // refused without its data; with it, the refitted ONNX file is written
    // and scores the later steps, so `wmrl`'s world-model rewards differ.
    let refit_cfg = TrainConfig {
        refit_predictor_every: 1,
        ..cfg.clone()
    };
    assert!(train(&refit_cfg, ArArm::Wmrl, 7, &suite, &ex, Some(&onnx), None).is_err());
    let pcfg = PredictorConfig {
        epochs: 50,
        ..Default::default()
    };
    let refit = wmrl_autoresearch::train::PredictorRefit {
        data: &data,
        config: &pcfg,
        onnx_path: cache.path().join("refit.onnx"),
    };
    let plain = train(&cfg, ArArm::Wmrl, 7, &suite, &ex, Some(&onnx), None).unwrap();
    let refitted = wmrl_autoresearch::train::train_with_refit(
        &refit_cfg,
        ArArm::Wmrl,
        7,
        &suite,
        &ex,
        Some(&onnx),
        None,
        Some(&refit),
    )
    .unwrap();
    assert!(cache.path().join("refit.onnx").exists());
    assert_eq!(
        plain.steps[0], refitted.steps[0],
        "step 1 scores with the first fit"
    );
    assert_ne!(
        plain.steps[1].mean_reward_seen, refitted.steps[1].mean_reward_seen,
        "step 2 scores with the refitted predictor"
    );
}

#[test]
fn a_restarted_bench_reads_its_finished_runs_back_and_refuses_other_settings() {
    use wmrl_autoresearch::bench::{BenchConfig, run_bench};
    let dir = tempfile::tempdir().unwrap();
    let (suite, ex) = suite_and_executor(dir.path());
    let cfg = BenchConfig {
        seeds: 1,
        per_competition: 1,
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
    };
    let out = dir.path().join("bench");
    let first = run_bench(&cfg, &suite, &ex, &out).unwrap();
    assert_eq!(first.reports.len(), ArArm::ALL.len());
    // report.md: a row per arm, every pair of arms paired by seed.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for arm in ArArm::ALL {
        assert!(md.contains(&format!("| {} | 1 |", arm.name())), "{md}");
    }
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
    let wmrl = again.reports.iter().find(|r| r.arm == ArArm::Wmrl).unwrap();
    assert_eq!(wmrl.ledger.real_cpu_seconds, 12345.0);
    let real = |res: &wmrl_autoresearch::bench::BenchResult| {
        res.reports
            .iter()
            .find(|r| r.arm == ArArm::Real)
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
    std::fs::remove_file(out.join("bench_config.json")).unwrap();
    let err = run_bench(&cfg, &suite, &ex, &out).unwrap_err().to_string();
    assert!(err.contains("no bench_config.json"), "{err}");
    std::fs::write(
        out.join("bench_config.json"),
        serde_json::to_string(&cfg).unwrap(),
    )
    .unwrap();
    // A corrupt run file is an error that names it, not a silent rerun.
    std::fs::write(&done, "{ truncated").unwrap();
    let err = run_bench(&cfg, &suite, &ex, &out).unwrap_err().to_string();
    assert!(err.contains("wmrl/seed0/summary.json"), "{err}");
}

#[test]
fn an_interrupted_run_resumes_from_its_checkpoint_to_the_same_result() {
    use wmrl_autoresearch::RunDir;
    let dir = tempfile::tempdir().unwrap();
    let (suite, ex) = suite_and_executor(dir.path());
    let cfg = TrainConfig {
        steps: 3,
        groups_per_step: 2,
        group_size: 2,
        eval_every: 1,
        eval_samples: 1,
        ..Default::default()
    };
    let straight_dir = RunDir::new(dir.path().join("straight"));
    let straight = train(&cfg, ArArm::Real, 3, &suite, &ex, None, Some(&straight_dir)).unwrap();
    assert!(straight_dir.checkpoint().join("state.json").exists());
    // A run stopped after its first step: a one-step run whose summary is
    // gone, and a half line its process wrote after the checkpoint.
    let cut = RunDir::new(dir.path().join("cut"));
    let one = TrainConfig {
        steps: 1,
        ..cfg.clone()
    };
    train(&one, ArArm::Real, 3, &suite, &ex, None, Some(&cut)).unwrap();
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
    let resumed = train(&cfg, ArArm::Real, 3, &suite, &ex, None, Some(&cut)).unwrap();
    assert_eq!(resumed.steps, straight.steps);
    assert_eq!(resumed.evals, straight.evals);
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
    assert_eq!(text(cut.eval()), text(straight_dir.eval()));
    // An interrupted run is not continued under other settings.
    std::fs::remove_file(cut.summary()).unwrap();
    let other = TrainConfig {
        group_size: 3,
        ..cfg.clone()
    };
    let err = train(&other, ArArm::Real, 3, &suite, &ex, None, Some(&cut))
        .unwrap_err()
        .to_string();
    assert!(err.contains("other settings"), "{err}");
    assert!(err.contains("group_size: 2 then, 3 now"), "{err}");
}
