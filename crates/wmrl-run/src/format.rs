//! Layout versions of what wmrl records, and the one migration per type.
//!
//! A recorded settings or summary file carries its layout as a top-level
//! key, `format = N` (`"format": N` in JSON). A file that wmrl recorded
//! before the key existed is format 0. Reading a record goes through
//! [`upgrade`]: the key is taken out, and [`Versioned::migrate`] brings an
//! older document up to the current layout, in place, before the one typed
//! parse. So live types hold only the keys this wmrl writes, and the
//! history of a layout sits in one function per type.
//!
//! A config a person wrote (a `--config` file) is in the current layout
//! unless it says otherwise: it is read with [`Absent::Current`]. A copy of
//! a run's recorded settings used as a config keeps its `format` and is
//! migrated like the record.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The top-level key that holds a record's layout version.
pub const KEY: &str = "format";

/// A recorded type with a layout version.
pub trait Versioned {
    /// The layout this wmrl writes.
    const FORMAT: u32;

    /// For a run's settings type: the name an older wmrl gave the file
    /// that records them, before every run directory recorded its settings
    /// in `run.toml` ([`crate::RunDir::settings`]). It is read when
    /// `run.toml` is not there, through [`Versioned::migrate`] like any
    /// older layout, and removed when `run.toml` is written; never written.
    const LEGACY_FILE: Option<&'static str> = None;

    /// Bring `doc`, recorded at layout `from` (below [`Self::FORMAT`]; 0
    /// for a record without the key), to the current layout, in place. An
    /// older record that cannot be expressed in the current layout is an
    /// error that says so. A type with one layout so far (`FORMAT = 0`) is
    /// never migrated and keeps this default, which refuses.
    fn migrate(from: u32, doc: &mut Map<String, Value>) -> Result<(), String> {
        let _ = doc;
        Err(format!("no migration from layout {KEY} = {from}"))
    }
}

/// What a document without a `format` key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// A record wmrl wrote before it recorded layouts: format 0.
    Recorded,
    /// A config a person wrote: the current layout.
    Current,
}

/// Take the `format` key out of `doc` and migrate the rest to
/// `T::FORMAT`; returns the layout it was recorded at. A layout newer than
/// this wmrl's, or a `format` that is not a whole number, is refused.
pub fn upgrade<T: Versioned>(doc: &mut Map<String, Value>, absent: Absent) -> Result<u32, String> {
    let from = match doc.remove(KEY) {
        None => match absent {
            Absent::Recorded => 0,
            Absent::Current => T::FORMAT,
        },
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("`{KEY} = {v}`: expected a whole number"))?,
    };
    if from > T::FORMAT {
        return Err(format!(
            "recorded in layout {KEY} = {from}, newer than this wmrl's ({}): read it with the wmrl that wrote it",
            T::FORMAT
        ));
    }
    if from < T::FORMAT {
        T::migrate(from, doc)?;
    }
    Ok(from)
}

/// [`upgrade`] for a TOML table (a run's run.toml, a `--config` file).
pub fn upgrade_toml<T: Versioned>(doc: &mut toml::Table, absent: Absent) -> Result<u32, String> {
    if doc.get(KEY).is_none() && absent == Absent::Current {
        return Ok(T::FORMAT);
    }
    let Value::Object(mut map) = serde_json::to_value(&*doc).map_err(|e| e.to_string())? else {
        return Err("a TOML document that is not a table".into());
    };
    let from = upgrade::<T>(&mut map, absent)?;
    *doc = toml::Table::try_from(Value::Object(map)).map_err(|e| e.to_string())?;
    Ok(from)
}

/// Parse a recorded JSON document into `T`, migrated from its layout.
pub fn from_json<T: Versioned + DeserializeOwned>(text: &str, absent: Absent) -> Result<T, String> {
    let mut v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let map = v
        .as_object_mut()
        .ok_or_else(|| "expected a JSON object".to_string())?;
    upgrade::<T>(map, absent)?;
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// `t` as the JSON document wmrl records: its fields and `format`.
pub fn to_json<T: Versioned + Serialize>(t: &T) -> Result<Value, String> {
    let mut v = serde_json::to_value(t).map_err(|e| e.to_string())?;
    let map = v
        .as_object_mut()
        .ok_or_else(|| "a record must serialise to a JSON object".to_string())?;
    map.insert(KEY.into(), Value::from(T::FORMAT));
    Ok(v)
}

/// `t` as the TOML document wmrl records, `format` first.
pub fn to_toml<T: Versioned + Serialize>(t: &T) -> Result<String, String> {
    let body = toml::to_string_pretty(t).map_err(|e| e.to_string())?;
    Ok(format!("{KEY} = {}\n{body}", T::FORMAT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Two {
        every: usize,
        on: String,
    }

    impl Versioned for Two {
        const FORMAT: u32 = 2;
        fn migrate(from: u32, doc: &mut Map<String, Value>) -> Result<(), String> {
            if from < 1 {
                let old = doc.remove("old_every").unwrap_or(Value::from(0));
                doc.insert("every".into(), old);
            }
            if from < 2 {
                doc.entry("on").or_insert(Value::from("heldout"));
            }
            Ok(())
        }
    }

    #[test]
    fn each_layout_reads_as_the_current_one() {
        let now = Two {
            every: 4,
            on: "heldout".into(),
        };
        // Format 0 (no key), 1 and 2 read the same.
        for text in [
            r#"{"old_every": 4}"#,
            r#"{"format": 1, "every": 4}"#,
            r#"{"format": 2, "every": 4, "on": "heldout"}"#,
        ] {
            assert_eq!(
                from_json::<Two>(text, Absent::Recorded).expect("ok"),
                now,
                "{text}"
            );
        }
        // What is written reads back, with its format.
        let v = to_json(&now).expect("ok");
        assert_eq!(v[KEY], 2);
        assert_eq!(
            from_json::<Two>(&v.to_string(), Absent::Recorded).expect("ok"),
            now
        );
        // A person's config without the key is today's layout: the old key is
        // unknown, not migrated.
        let e = from_json::<Two>(r#"{"old_every": 4}"#, Absent::Current).expect_err("refused");
        assert!(e.contains("old_every"), "{e}");
    }

    #[test]
    fn a_newer_or_malformed_layout_is_refused() {
        let e = from_json::<Two>(r#"{"format": 3, "every": 1, "on": "x"}"#, Absent::Recorded)
            .expect_err("refused");
        assert!(e.contains("newer than this wmrl's (2)"), "{e}");
        let e = from_json::<Two>(
            r#"{"format": "2", "every": 1, "on": "x"}"#,
            Absent::Recorded,
        )
        .expect_err("refused");
        assert!(e.contains("whole number"), "{e}");
    }

    #[test]
    fn toml_records_migrate_and_write_their_format_first() {
        let mut doc: toml::Table = toml::from_str("old_every = 3").expect("ok");
        assert_eq!(
            upgrade_toml::<Two>(&mut doc, Absent::Recorded).expect("ok"),
            0
        );
        let two: Two = doc.try_into().expect("ok");
        assert_eq!(two.every, 3);
        let text = to_toml(&two).expect("ok");
        assert!(text.starts_with("format = 2\n"), "{text}");
        let mut back: toml::Table = toml::from_str(&text).expect("ok");
        // A person's copy of a recorded config keeps its format.
        assert_eq!(
            upgrade_toml::<Two>(&mut back, Absent::Current).expect("ok"),
            2
        );
        assert_eq!(back.try_into::<Two>().expect("ok"), two);
    }
}
