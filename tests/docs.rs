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
