//! docs/architecture.md describes the workspace as built: every workspace
//! crate (each `crates/*`, `kernels`, `tests`, `examples`) has a row in its
//! layout table, each row names the crate's wmrl dependencies (from its
//! Cargo.toml) and sits below them, and the page's code fences are closed
//! (an unclosed fence once rendered most of the page as one code block).
#![allow(clippy::unwrap_used)]

use std::path::Path;

#[test]
fn architecture_md_names_every_workspace_crate_and_renders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut crates: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .map(|p| format!("`crates/{}`", p.file_name().unwrap().to_string_lossy()))
        .collect();
    crates.sort();
    assert!(crates.len() >= 12, "{crates:?}");
    crates.extend(["`kernels/`", "`tests/`", "`examples/`"].map(String::from));
    let table: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
    for c in &crates {
        assert!(
            table.iter().any(|row| row.starts_with(&format!("| {c}"))),
            "docs/architecture.md's layout table has no row for {c}"
        );
    }
    // Each row's last column names the crate's wmrl dependencies, and the
    // table is in dependency order: a crate's row below its dependencies'.
    let row_of = |c: &str| {
        table
            .iter()
            .position(|row| row.starts_with(&format!("| {c}")))
            .unwrap()
    };
    let dir_of = |c: &str| root.join(c.trim_matches('`').trim_end_matches('/'));
    for c in &crates {
        let toml = std::fs::read_to_string(dir_of(c).join("Cargo.toml")).unwrap();
        let deps = toml
            .split("[dependencies]")
            .nth(1)
            .map(|d| d.split("\n[").next().unwrap_or(""))
            .unwrap_or("");
        let row = table[row_of(c)];
        let named = row.trim_end_matches('|').rsplit('|').next().unwrap();
        for dep in deps
            .lines()
            .filter_map(|l| l.split(['.', ' ', '=']).next())
            .filter(|d| d.starts_with("wmrl-"))
        {
            let short = dep.trim_start_matches("wmrl-");
            assert!(
                named.contains("all of the above")
                    || named.contains(dep)
                    || named.split([',', ' ', ';']).any(|w| w == short),
                "docs/architecture.md: the row of {c} does not name its dependency {dep}"
            );
            let at = if dep == "wmrl-kernels" {
                "`kernels/`".to_string()
            } else {
                format!("`crates/{dep}`")
            };
            assert!(
                row_of(&at) < row_of(c),
                "docs/architecture.md: {c} is above its dependency {dep}"
            );
        }
    }
    let fences = doc
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count();
    assert!(
        fences.is_multiple_of(2),
        "docs/architecture.md has an unclosed code fence"
    );
    // Each fenced block is short: a long one is a fence closed too late.
    let mut open: Option<usize> = None;
    for (i, l) in doc.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            match open.take() {
                Some(start) => assert!(
                    i - start < 40,
                    "docs/architecture.md: a code block runs from line {} to {}",
                    start + 1,
                    i + 1
                ),
                None => open = Some(i),
            }
        }
    }
}

#[test]
fn the_label_guide_is_linked_and_its_screenshot_is_there() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains("(docs/labels.md)"),
        "README.md links docs/labels.md"
    );
    let doc = std::fs::read_to_string(root.join("docs/labels.md")).unwrap();
    let images: Vec<&str> = doc
        .split("](")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .filter(|t| t.ends_with(".png"))
        .collect();
    assert!(!images.is_empty(), "docs/labels.md shows the page");
    for img in images {
        let p = root.join("docs").join(img);
        let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(bytes.starts_with(b"\x89PNG"), "{} is a PNG", p.display());
    }
    for needle in ["wmrl label serve --run", "labels.source", "labels.wait"] {
        assert!(doc.contains(needle), "docs/labels.md names {needle}");
    }
}

/// README's quickstart table: (policy, greedy %, sampled %) per row, from
/// the indented block that starts with the quickstart's own heading line.
fn readme_quickstart_rows(readme: &str) -> Vec<(String, f64, f64)> {
    let start = readme
        .find("    Held-out success on the config's evaluation states")
        .expect("README shows the quickstart's table as the quickstart prints it");
    let mut rows = Vec::new();
    for line in readme[start..].lines().skip(2) {
        if !line.starts_with("    ") || line.trim().is_empty() {
            break;
        }
        // "sparse seed 0   58.8% [42.2, 73.6]   +8.8   63.2% [...]": the
        // name is what comes before the first percentage ("(25%" in
        // "wmrl (25% labels)" is not one).
        let pct = |w: &str| w.strip_suffix('%').and_then(|x| x.parse::<f64>().ok());
        let words: Vec<&str> = line.split_whitespace().collect();
        let first = words
            .iter()
            .position(|w| pct(w).is_some())
            .expect("a percentage");
        let name = words[..first].join(" ");
        let pcts: Vec<f64> = words.iter().filter_map(|w| pct(w)).collect();
        assert_eq!(pcts.len(), 2, "greedy and sampled in: {line}");
        rows.push((name, pcts[0], pcts[1]));
    }
    rows
}

#[test]
fn readme_quickstart_figures_lie_in_the_range_the_quickstart_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let rows = readme_quickstart_rows(&readme);
    assert_eq!(rows.len(), 3, "start, sparse, wmrl: {rows:?}");
    // The range `wmrl quickstart` prints under its table, from the same
    // committed seed bench and the same function.
    let spread = wmrl_train::spread::bench_spread(
        &root.join("results/quickstart_seeds"),
        &["sparse", "wmrl"],
    )
    .unwrap();
    for (name, greedy, sampled) in rows {
        let policy = if name.starts_with("SFT") {
            "start"
        } else {
            name.split_whitespace().next().unwrap()
        };
        let s = spread
            .iter()
            .find(|s| s.policy == policy)
            .unwrap_or_else(|| panic!("no range for `{policy}`"));
        let ((glo, ghi), samp) = s.expected();
        let (slo, shi) = samp.expect("the quickstart takes the sampled measure");
        assert!(
            (glo..=ghi).contains(&greedy),
            "README's {name} greedy {greedy}% is outside the printed range {glo:.1}-{ghi:.1}"
        );
        assert!(
            (slo..=shi).contains(&sampled),
            "README's {name} sampled {sampled}% is outside the printed range {slo:.1}-{shi:.1}"
        );
        // README quotes the range too: its digits must be the printed ones.
        for (lo, hi) in [(glo, ghi), (slo, shi)] {
            let quoted = format!("{lo:.1}-{hi:.1}");
            assert!(
                readme.contains(&quoted),
                "README quotes {policy}'s range {quoted}"
            );
        }
    }
}

#[test]
fn readme_is_a_front_door_not_a_history() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(
        n < 150,
        "README.md has {n} lines; the history goes to CHANGELOG.md"
    );
    for needle in [
        "./scripts/quickstart",
        "./scripts/test",
        "## Results",
        "## Bring your own",
        "## Docs",
    ] {
        assert!(readme.contains(needle), "README.md has {needle}");
    }
}

/// The layering issue 44 asks for, checked on the Cargo manifests: the
/// CLI is argument parsing (no HTTP stack of its own: each service lives
/// with its domain, over the one shared `wmrl-http`), the command-line
/// parser is the CLI's alone, and the policy kinds are chosen in one place
/// (`wmrl_train::policy_kind`), not by sniffing a directory elsewhere;
/// the candle device resolver is wmrl-device's, beside the models.
#[test]
fn services_live_with_their_domains_and_the_cli_parses_arguments() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let deps = |krate: &str| {
        let toml =
            std::fs::read_to_string(root.join("crates").join(krate).join("Cargo.toml")).unwrap();
        let section = toml
            .split("[dependencies]")
            .nth(1)
            .unwrap_or("")
            .split("\n[")
            .next()
            .unwrap_or("")
            .to_string();
        section
            .lines()
            .filter_map(|l| l.split(['.', ' ', '=']).next())
            .filter(|d| !d.is_empty() && !d.starts_with('#'))
            .map(String::from)
            .collect::<Vec<String>>()
    };
    let cli = deps("wmrl-cli");
    for http in [
        "hyper",
        "hyper-util",
        "http-body-util",
        "tokio",
        "wmrl-http",
    ] {
        assert!(
            !cli.contains(&http.to_string()),
            "wmrl-cli depends on {http}: an HTTP service belongs with its domain"
        );
    }
    for domain in ["wmrl-train", "wmrl-autoresearch"] {
        assert!(
            deps(domain).contains(&"wmrl-http".to_string()),
            "{domain} serves over wmrl-http"
        );
    }
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name != "wmrl-cli" && root.join("crates").join(&name).join("Cargo.toml").is_file() {
            assert!(
                !deps(&name).contains(&"clap".to_string()),
                "{name} parses command lines (clap)"
            );
        }
    }
    // The candle device resolver sits beside the models (wmrl-device, over
    // wmrl-run's recorded choice), not in the RL objective: the update
    // runs on whatever device its tensors are on.
    assert!(
        !deps("wmrl-grpo").contains(&"wmrl-run".to_string()),
        "wmrl-grpo reads run settings: the device choice belongs to wmrl-device"
    );
    let device_deps: Vec<String> = deps("wmrl-device")
        .into_iter()
        .filter(|d| d.starts_with("wmrl-"))
        .collect();
    assert_eq!(
        device_deps,
        ["wmrl-run"],
        "wmrl-device sits on wmrl-run alone"
    );
    for model in ["wmrl-train", "wmrl-autoresearch", "wmrl-cli"] {
        assert!(
            deps(model).contains(&"wmrl-device".to_string()),
            "{model} places a candle model without wmrl-device"
        );
    }
    // `is_minivla_dir` is the minivla kind's test of a directory; outside
    // wmrl-minivla only the policy registry calls it.
    let mut callers = Vec::new();
    let mut stack = vec![root.join("crates")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs")
                && !p.starts_with(root.join("crates/wmrl-minivla"))
                && std::fs::read_to_string(&p)
                    .unwrap()
                    .contains("is_minivla_dir(")
            {
                callers.push(p.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert_eq!(
        callers,
        ["crates/wmrl-train/src/policy_kind.rs"],
        "policy kinds chosen outside the registry"
    );
}
