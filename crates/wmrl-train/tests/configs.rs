//! Every shipped run config parses and validates (unknown keys included).

use wmrl_train::TrainConfig;

#[test]
fn shipped_configs_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    // Every run config in configs/ (policy_*.toml are SFT configs,
    // autoresearch_*.toml the AutoResearch track's, tested there).
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("configs/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.ends_with(".toml") && !n.starts_with("policy_") && !n.starts_with("autoresearch_")
        })
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for name in &names {
        let cfg = TrainConfig::load(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        cfg.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(cfg.steps > 0, "{name}");
    }
}

#[test]
fn extends_merges_over_the_parent_and_rejects_cycles() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let base = TrainConfig::load(&dir.join("bench_sim.toml")).expect("base");
    let free = TrainConfig::load(&dir.join("bench_sim_free.toml")).expect("free");
    // The child's keys win, section by section; the rest is the parent's.
    assert!(free.wmrl.anchors.fraction.is_all());
    assert!(free.wmrl.dense_fallback_on_flat_anchors);
    assert_eq!(free.steps, base.steps);
    assert_eq!(free.rollout, base.rollout);
    assert_eq!(free.update, base.update);
    assert_eq!(free.wmrl.calibration, base.wmrl.calibration);

    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(
        tmp.path().join("a.toml"),
        "extends = \"b.toml\"\nsteps = 3\n",
    )
    .expect("a");
    std::fs::write(tmp.path().join("b.toml"), "extends = \"a.toml\"\n").expect("b");
    let err = TrainConfig::load(&tmp.path().join("a.toml")).expect_err("cycle");
    assert!(err.to_string().contains("cycle"), "{err}");
    std::fs::write(tmp.path().join("c.toml"), "extends = \"missing.toml\"\n").expect("c");
    let err = TrainConfig::load(&tmp.path().join("c.toml")).expect_err("missing parent");
    assert!(err.to_string().contains("missing.toml"), "{err}");
    // Overrides apply after the merge.
    let c = TrainConfig::load_with(
        &dir.join("bench_sim_free.toml"),
        &["wmrl.anchors.fraction=0.5".into()],
    )
    .expect("override");
    assert_eq!(c.wmrl.anchors.fraction.get(), 0.5);
    // A fraction outside (0, 1] fails where it is parsed, naming the key.
    let err = TrainConfig::load_with(
        &dir.join("bench_sim_free.toml"),
        &["wmrl.anchors.fraction=1.5".into()],
    )
    .expect_err("fraction above 1");
    assert!(err.to_string().contains("anchors.fraction"), "{err}");
    // Two configs' first difference is named by its dotted key.
    let mut d = c.clone();
    assert_eq!(c.first_difference(&d), None);
    d.rollout.group_size += 1;
    let diff = c.first_difference(&d).expect("differs");
    assert!(diff.starts_with("rollout.group_size: "), "{diff}");
}

#[test]
fn chunk_credit_settings_are_checked() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let one = TrainConfig::load(&dir.join("grpo_one_task.toml")).expect("one task");
    assert_eq!(one.rollout.tasks, vec![0]);
    assert_eq!(one.update.credit.source, wmrl_train::CreditSource::None);
    let tmp = tempfile::tempdir().expect("tmp");
    let write = |name: &str, body: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, body).expect("write");
        p
    };
    let ok = write(
        "ok.toml",
        "[update.credit]\nsource = \"oracle\"\nweight = 0.5\nlambda = 0.9\n",
    );
    let c = TrainConfig::load(&ok).expect("valid credit");
    assert_eq!(c.update.credit.source, wmrl_train::CreditSource::Oracle);
    for (name, body, key) in [
        (
            "lambda.toml",
            "[update.credit]\nlambda = 1.5\n",
            "update.credit.lambda",
        ),
        (
            "weight.toml",
            "[update.credit]\nweight = -1.0\n",
            "update.credit.weight",
        ),
        (
            "source.toml",
            "[update.credit]\nsource = \"magic\"\n",
            "magic",
        ),
    ] {
        let err = TrainConfig::load(&write(name, body)).expect_err(name);
        assert!(err.to_string().contains(key), "{name}: {err}");
    }
}

#[test]
fn the_label_source_is_absent_by_default_and_old_configs_compare_equal() {
    // A run directory's config.toml written before `[labels]` existed (no
    // such section) reads as a fresh default and compares equal to it.
    let default = TrainConfig::default();
    let old = default.to_toml().expect("toml");
    assert!(!old.contains("labels"), "the default writes no [labels]");
    let read = TrainConfig::from_toml(&old, "old config.toml").expect("reads");
    assert_eq!(read, default);
    assert_eq!(read.first_difference(&default), None);
    assert_eq!(read.labels.source, wmrl_train::LabelSource::Sim);
    // A human-label run names its section, differs by that key, and
    // round-trips; unknown keys in it are refused.
    let mut human = default.clone();
    human.labels.source = wmrl_train::LabelSource::Human;
    human.labels.wait = false;
    let text = human.to_toml().expect("toml");
    assert!(
        text.contains("[labels]") && text.contains("source = \"human\""),
        "{text}"
    );
    assert_eq!(
        TrainConfig::from_toml(&text, "human").expect("reads"),
        human
    );
    let d = human.first_difference(&default).expect("differs");
    assert!(d.contains("labels"), "{d}");
    let bad = "[labels]\nsource = \"human\"\nsorce = 1\n";
    let e = TrainConfig::from_toml(bad, "bad").expect_err("unknown key");
    assert!(e.to_string().contains("sorce"), "{e}");
    let e =
        TrainConfig::from_toml("[labels]\nsource = \"crowd\"\n", "bad").expect_err("bad source");
    assert!(e.to_string().contains("crowd"), "{e}");
    let e = TrainConfig::from_toml("[labels]\npoll_ms = 0\n", "bad").expect_err("bad poll");
    assert!(e.to_string().contains("labels.poll_ms"), "{e}");
}

#[test]
fn the_device_is_recorded_when_not_the_cpu_and_refused_when_unknown() {
    let cpu = TrainConfig::from_toml("", "t.toml").expect("default");
    assert_eq!(cpu.device, wmrl_run::DeviceChoice::Cpu);
    assert!(!cpu.to_toml().expect("toml").contains("device"));
    let cuda = TrainConfig::from_toml("device = \"cuda\"\n", "t.toml").expect("cuda");
    assert_eq!(cuda.device, wmrl_run::DeviceChoice::Cuda);
    let back = TrainConfig::from_toml(&cuda.to_toml().expect("toml"), "t.toml").expect("back");
    assert_eq!(back, cuda);
    let err = TrainConfig::from_toml("device = \"gpu\"\n", "t.toml").expect_err("unknown");
    assert!(err.to_string().contains("gpu"), "{err}");
}

/// Every committed robot run directory's recorded settings (run.toml, or
/// config.toml as older wmrl wrote them) read through today's config,
/// migrated from their layout (`wmrl_run::format`; the oldest carry
/// `update.loss.temperature`), and write back as today's layout that reads
/// to the same settings.
#[test]
fn committed_run_configs_read_through_their_migration() {
    fn walk(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("dir").flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n == "checkpoint") {
                continue;
            }
            if p.is_dir() {
                let run = wmrl_run::RunDir::new(&p);
                if run.recorded_settings::<TrainConfig>().is_some() {
                    found.push(p.clone());
                }
                walk(&p, found);
            }
        }
    }
    let results = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results");
    let mut found = Vec::new();
    for e in std::fs::read_dir(&results).expect("results").flatten() {
        // AutoResearch's run directories hold that track's settings.
        if !e.file_name().to_string_lossy().starts_with("autoresearch") {
            walk(&e.path(), &mut found);
        }
    }
    let mut old = 0;
    for dir in &found {
        let (cfg, p) = TrainConfig::recorded_in(&wmrl_run::RunDir::new(dir))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let text = std::fs::read_to_string(&p).expect("read");
        old += usize::from(!text.starts_with("format = "));
        let now = cfg.to_toml().expect("toml");
        assert!(now.starts_with("format = 1\n"), "{}", p.display());
        let back = TrainConfig::from_toml(&now, "rewritten").expect("reads back");
        assert_eq!(back, cfg, "{}", p.display());
    }
    assert!(found.len() >= 150, "{} run configs", found.len());
    assert!(old >= 114, "{old} of layout 0");
}
