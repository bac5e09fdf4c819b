//! The TOML config loader every command uses.
//!
//! ```text
//! extends = "grpo_sim.toml"     # read first, relative to this file; may chain
//! steps = 50                    # this file's keys are merged over it
//! [rollout]
//! n_groups = 16                 # tables merge key by key, other values replace
//! ```
//!
//! then `--set rollout.temperature=0.5` (the value is TOML: `0.5`, `true`,
//! `[16, 25]`, `"text"`; a bare word is a string), then one typed parse.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::format::{Absent, Versioned};

/// A config that cannot be read, parsed or overridden; `path` names the
/// file (with its overrides), `message` the key or the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config {path}: {message}")]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

/// Read `path` as a TOML table, resolving `extends` (a path relative to the
/// file): the parent is read first (itself possibly extending another) and
/// this file's keys are merged over it. A cycle is an error naming the
/// chain.
pub fn read_doc(path: &Path) -> Result<toml::Table, ConfigError> {
    read_chain(path, &mut Vec::new())
}

fn read_chain(path: &Path, chain: &mut Vec<PathBuf>) -> Result<toml::Table, ConfigError> {
    let origin = path.display().to_string();
    let err = |message: String| ConfigError {
        path: origin.clone(),
        message,
    };
    let canon = path.canonicalize().map_err(|e| err(e.to_string()))?;
    if chain.contains(&canon) {
        let names: Vec<String> = chain
            .iter()
            .chain(std::iter::once(&canon))
            .map(|p| p.display().to_string())
            .collect();
        return Err(err(format!("`extends` cycle: {}", names.join(" -> "))));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut doc: toml::Table = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    let Some(parent) = doc.remove("extends") else {
        return Ok(doc);
    };
    let parent = parent
        .as_str()
        .ok_or_else(|| err("`extends` must be a file name (a string)".into()))?;
    let parent_path = path.parent().unwrap_or(Path::new(".")).join(parent);
    chain.push(canon);
    let mut base = read_chain(&parent_path, chain)?;
    merge_tables(&mut base, doc);
    Ok(base)
}

fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Set `a.b.c=value` in a parsed document, creating tables on the way.
pub fn apply_set(doc: &mut toml::Table, set: &str) -> Result<(), ConfigError> {
    let bad = |message: String| ConfigError {
        path: "--set".into(),
        message,
    };
    let (key, raw) = set
        .split_once('=')
        .ok_or_else(|| bad(format!("`{set}`: expected section.key=value")))?;
    let key = key.trim();
    let raw = raw.trim();
    let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad(format!("`{key}`: empty key segment")));
    }
    let mut table = doc;
    for p in &parts[..parts.len() - 1] {
        let entry = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| bad(format!("`{key}`: `{p}` is not a section")))?;
    }
    table.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

/// Parse TOML text into `T`; `origin` names it in errors.
pub fn parse<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError {
        path: origin.to_string(),
        message: e.to_string(),
    })
}

/// Read `path` (with its `extends` chain), apply `sets` in order, and parse
/// the result into `T` once. Returns the value and the origin errors should
/// name (`path`, with its overrides when there are any).
pub fn load<T: DeserializeOwned>(path: &Path, sets: &[String]) -> Result<(T, String), ConfigError> {
    let origin = origin(Some(path), sets);
    Ok((parse_doc(read_doc(path)?, sets, &origin)?, origin))
}

/// What errors name: the file, with its overrides when there are any.
fn origin(path: Option<&Path>, sets: &[String]) -> String {
    match path {
        Some(p) if sets.is_empty() => p.display().to_string(),
        Some(p) => format!("{} with --set {}", p.display(), sets.join(" ")),
        None => format!("--set {}", sets.join(" ")),
    }
}

/// A run's recorded `.json` settings at `p`, parsed by `parse`; `--set`
/// is refused (what was recorded is what was run).
pub(crate) fn read_recorded_json<T>(
    p: &Path,
    sets: &[String],
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    let err = |message: String| ConfigError {
        path: p.display().to_string(),
        message,
    };
    if !sets.is_empty() {
        return Err(err(
            "--set applies to TOML configs, not a recorded .json".into()
        ));
    }
    let text = std::fs::read_to_string(p).map_err(|e| err(e.to_string()))?;
    parse(&text).map_err(err)
}

pub(crate) fn is_json(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "json")
}

/// [`crate::format::upgrade_toml`], its error naming `path`.
fn upgrade_doc<T: Versioned>(
    path: &Path,
    doc: &mut toml::Table,
    absent: Absent,
) -> Result<u32, ConfigError> {
    crate::format::upgrade_toml::<T>(doc, absent).map_err(|message| ConfigError {
        path: path.display().to_string(),
        message,
    })
}

/// A command's settings from an optional file, then `sets`: a `.json` file
/// (a run's recorded settings) is read as it is, strictly, and takes no
/// `sets`; a TOML file goes through [`load`]; no file is an empty document
/// (the type's defaults) with `sets` applied.
pub fn load_optional<T: DeserializeOwned>(
    path: Option<&Path>,
    sets: &[String],
) -> Result<T, ConfigError> {
    match path {
        Some(p) if is_json(p) => read_recorded_json(p, sets, |t| {
            serde_json::from_str(t).map_err(|e| e.to_string())
        }),
        Some(p) => Ok(load(p, sets)?.0),
        None => parse_doc(toml::Table::new(), sets, &origin(None, sets)),
    }
}

/// [`load`] for a recorded type ([`Versioned`]): the document, after its
/// `extends` chain and before `sets`, is migrated from its `format`
/// ([`crate::format::upgrade_toml`]); `absent` says what a document
/// without the key is (a run's recorded run.toml: [`Absent::Recorded`]; a
/// person's `--config`: [`Absent::Current`]).
pub fn load_versioned<T: DeserializeOwned + Versioned>(
    path: &Path,
    sets: &[String],
    absent: Absent,
) -> Result<(T, String), ConfigError> {
    let origin = origin(Some(path), sets);
    let mut doc = read_doc(path)?;
    upgrade_doc::<T>(path, &mut doc, absent)?;
    Ok((parse_doc(doc, sets, &origin)?, origin))
}

/// A command's settings for a recorded type ([`Versioned`]) whose command
/// has defaults of its own beyond each table type's (AutoResearch's
/// small-scale `[core]`, its curve drawn on the training competitions): a
/// TOML file, or none, is laid over `T::default()` key by key, so a table
/// given in part keeps the command's defaults for its other keys; then
/// `sets`. The file is a person's config, in today's layout unless it
/// names its `format`. A `.json` file is a run's recorded settings: read
/// strictly, migrated from its layout (none: format 0), and it takes no
/// `sets` (what was recorded is what was run).
pub fn load_over_defaults<T: Serialize + DeserializeOwned + Default + Versioned>(
    path: Option<&Path>,
    sets: &[String],
) -> Result<T, ConfigError> {
    if let Some(p) = path.filter(|p| is_json(p)) {
        return read_recorded_json(p, sets, |t| crate::format::from_json(t, Absent::Recorded));
    }
    let origin = origin(path, sets);
    let mut doc = toml::Table::try_from(T::default()).map_err(|e| ConfigError {
        path: origin.clone(),
        message: format!("the defaults as TOML: {e}"),
    })?;
    if let Some(p) = path {
        let mut file = read_doc(p)?;
        upgrade_doc::<T>(p, &mut file, Absent::Current)?;
        merge_tables(&mut doc, file);
    }
    parse_doc(doc, sets, &origin)
}

/// Apply `sets` to `doc` and parse it into `T`; `origin` names it in errors.
fn parse_doc<T: DeserializeOwned>(
    mut doc: toml::Table,
    sets: &[String],
    origin: &str,
) -> Result<T, ConfigError> {
    for s in sets {
        apply_set(&mut doc, s)?;
    }
    let text = toml::to_string(&doc).map_err(|e| ConfigError {
        path: origin.to_string(),
        message: e.to_string(),
    })?;
    parse(&text, origin)
}

/// The first dotted key whose value differs between two serialisable
/// values (configs), as `key: A against B` (`absent` where one side lacks
/// the key); `None` when they are equal. `prefix` names where `a` and `b`
/// sit (e.g. `wmrl`), prepended to the key.
pub fn first_difference<T: Serialize>(a: &T, b: &T, prefix: &str) -> Option<String> {
    first_difference_except(a, b, prefix, &[])
}

/// [`first_difference`], leaving out the keys in `ignore`, dotted for a
/// nested one (those that may change between starts of one run or bench: a
/// run's `steps`, a bench's seed count, `train.device`).
pub fn first_difference_except<T: Serialize>(
    a: &T,
    b: &T,
    prefix: &str,
    ignore: &[&str],
) -> Option<String> {
    let value = |c: &T| {
        let mut v = serde_json::to_value(c).ok()?;
        for k in ignore {
            let (parent, leaf) = k.rsplit_once('.').unwrap_or(("", k));
            let table = parent
                .split('.')
                .filter(|p| !p.is_empty())
                .try_fold(&mut v, |v, p| v.get_mut(p));
            if let Some(m) = table.and_then(|t| t.as_object_mut()) {
                m.remove(leaf);
            }
        }
        Some(v)
    };
    let (Some(x), Some(y)) = (value(a), value(b)) else {
        return Some(format!("{prefix}: not comparable"));
    };
    let key = differing_key(&x, &y)?;
    let named = match (prefix.is_empty(), key.is_empty()) {
        (true, _) => key.clone(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}.{key}"),
    };
    Some(format!(
        "{named}: {} against {}",
        value_at(&x, &key).unwrap_or_else(|| "absent".into()),
        value_at(&y, &key).unwrap_or_else(|| "absent".into())
    ))
}

/// The dotted path of the first key (in sorted order, depth first) whose
/// values differ between `a` and `b`, a key present on one side only
/// included; `""` when they differ at the top; `None` when equal. Both
/// tracks' settings comparisons walk configs with this.
pub fn differing_key(a: &serde_json::Value, b: &serde_json::Value) -> Option<String> {
    fn walk(a: &serde_json::Value, b: &serde_json::Value, at: &str) -> Option<String> {
        use serde_json::Value::Object;
        match (a, b) {
            (Object(x), Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|k| {
                    let sub = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    match (x.get(k), y.get(k)) {
                        (Some(p), Some(q)) => walk(p, q, &sub),
                        _ => Some(sub),
                    }
                })
            }
            _ => (a != b).then(|| at.to_string()),
        }
    }
    walk(a, b, "")
}

/// The value at dotted `key` of `v` (`""`: `v` itself), as JSON text.
pub fn value_at(v: &serde_json::Value, key: &str) -> Option<String> {
    if key.is_empty() {
        return Some(v.to_string());
    }
    key.split('.')
        .try_fold(v, |v, k| v.get(k))
        .map(|v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Cfg {
        steps: usize,
        #[serde(default)]
        name: String,
        inner: Inner,
    }
    #[derive(Debug, PartialEq, serde::Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: f64,
        b: Vec<usize>,
    }

    #[test]
    fn extends_merges_tables_key_by_key_and_sets_come_last() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(
            tmp.path().join("base.toml"),
            "steps = 1\nname = \"base\"\n[inner]\na = 0.5\nb = [1, 2]\n",
        )
        .expect("base");
        std::fs::write(
            tmp.path().join("child.toml"),
            "extends = \"base.toml\"\nsteps = 3\n[inner]\nb = [7]\n",
        )
        .expect("child");
        let (c, origin): (Cfg, String) = load(
            &tmp.path().join("child.toml"),
            &["inner.a=2".into(), "name=x".into()],
        )
        .expect("load");
        assert_eq!(
            c,
            Cfg {
                steps: 3,
                name: "x".into(),
                inner: Inner { a: 2.0, b: vec![7] }
            }
        );
        assert!(origin.contains("--set inner.a=2 name=x"), "{origin}");
    }

    #[test]
    fn unknown_keys_cycles_and_bad_sets_are_named() {
        let tmp = tempfile::tempdir().expect("tmp");
        let p = tmp.path().join("c.toml");
        std::fs::write(&p, "steps = 1\nstepz = 2\n[inner]\na = 1.0\nb = []\n").expect("c");
        let err = load::<Cfg>(&p, &[]).expect_err("unknown");
        assert!(err.to_string().contains("stepz"), "{err}");
        std::fs::write(tmp.path().join("x.toml"), "extends = \"y.toml\"\n").expect("x");
        std::fs::write(tmp.path().join("y.toml"), "extends = \"x.toml\"\n").expect("y");
        let err = read_doc(&tmp.path().join("x.toml")).expect_err("cycle");
        assert!(err.to_string().contains("cycle"), "{err}");
        let mut doc = toml::Table::new();
        assert!(apply_set(&mut doc, "no_equals").is_err());
        assert!(apply_set(&mut doc, "a..b=1").is_err());
        apply_set(&mut doc, "a=1").expect("a");
        let err = apply_set(&mut doc, "a.b=1").expect_err("not a section");
        assert!(err.to_string().contains("not a section"), "{err}");
    }

    #[test]
    fn the_first_difference_names_the_dotted_key() {
        let a = Cfg {
            steps: 1,
            name: String::new(),
            inner: Inner { a: 1.0, b: vec![1] },
        };
        let mut b = Cfg {
            steps: 1,
            name: String::new(),
            inner: Inner { a: 1.0, b: vec![1] },
        };
        assert_eq!(first_difference(&a, &b, ""), None);
        b.inner.a = 2.0;
        let d = first_difference(&a, &b, "").expect("differs");
        assert!(d.starts_with("inner.a: 1.0 against 2.0"), "{d}");
        // A key left out is not compared; the next difference is named.
        b.steps = 3;
        let d = first_difference_except(&a, &b, "run", &["steps"]).expect("differs");
        assert_eq!(d, "run.inner.a: 1.0 against 2.0");
        b.inner.a = 1.0;
        assert_eq!(first_difference_except(&a, &b, "", &["steps"]), None);
        let nested = |device: &str| serde_json::json!({"train": {"device": device, "lr": 1}});
        assert_eq!(
            first_difference_except(&nested("cpu"), &nested("cuda"), "", &["train.device"]),
            None
        );
        assert_eq!(
            first_difference_except(&nested("cpu"), &nested("cuda"), "", &["device"]).as_deref(),
            Some("train.device: \"cpu\" against \"cuda\"")
        );
        assert_eq!(
            first_difference(&a, &b, "").as_deref(),
            Some("steps: 1 against 3")
        );
    }
}
