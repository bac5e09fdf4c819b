//! The AutoResearch track's names for wmrl-core's reward arms.
//!
//! The track runs three of the core's arms, [`AR_ARMS`]: `real` (every
//! group executed in the sandbox: [`Arm::Sparse`]), `wm` (the outcome
//! predictor only: [`Arm::DenseRaw`]) and `wmrl` ([`Arm::Wmrl`]). Its run
//! directories, recorded settings and reports, its command line and its
//! messages spell them with these names ([`ar_name`], [`parse_ar_arm`]),
//! and its files hold them through [`serde_ar_arm`]; any other core arm is
//! refused.

use wmrl_core::Arm;

/// The three arms of the AutoResearch benchmark, in the order its runs and
/// reports take them: `real`, `wm`, `wmrl`.
pub const AR_ARMS: [Arm; 3] = [Arm::Sparse, Arm::DenseRaw, Arm::Wmrl];

/// The accepted names, for messages.
const EXPECTED: &str = "expected real, wm or wmrl";

/// The AutoResearch name of `arm`: `real`, `wm` or `wmrl` for
/// [`AR_ARMS`]; any other arm (which the track refuses) by its core name.
pub fn ar_name(arm: Arm) -> &'static str {
    match arm {
        Arm::Sparse => "real",
        Arm::DenseRaw => "wm",
        Arm::Wmrl => "wmrl",
        other => other.name(),
    }
}

/// Whether the track runs `arm` (one of [`AR_ARMS`]).
pub fn is_ar_arm(arm: Arm) -> bool {
    AR_ARMS.contains(&arm)
}

/// The arm an AutoResearch name names: exactly `real`, `wm` or `wmrl`.
pub fn ar_arm_from_name(s: &str) -> Option<Arm> {
    AR_ARMS.into_iter().find(|&a| ar_name(a) == s)
}

/// [`ar_arm_from_name`], with an error that lists the names (the command
/// line's parser for `--arm`).
pub fn parse_ar_arm(s: &str) -> std::result::Result<Arm, String> {
    ar_arm_from_name(s).ok_or_else(|| format!("unknown arm `{s}` ({EXPECTED})"))
}

/// `Err` naming `arm` unless the track runs it.
pub fn check_ar_arm(arm: Arm) -> std::result::Result<(), String> {
    if is_ar_arm(arm) {
        Ok(())
    } else {
        Err(format!(
            "arm `{}` is not an AutoResearch arm ({EXPECTED})",
            arm.name()
        ))
    }
}

/// `#[serde(with = "crate::arm::serde_ar_arm")]` for an [`Arm`] field:
/// written and read as `real`, `wm` or `wmrl` (as the track's files have
/// always held them), any other arm refused.
pub mod serde_ar_arm {
    use serde::{Deserializer, Serializer, de, ser};
    use wmrl_core::Arm;

    use super::{AR_ARMS, ar_arm_from_name, ar_name, check_ar_arm};

    pub fn serialize<S: Serializer>(arm: &Arm, s: S) -> Result<S::Ok, S::Error> {
        check_ar_arm(*arm).map_err(ser::Error::custom)?;
        s.serialize_str(ar_name(*arm))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arm, D::Error> {
        d.deserialize_str(Name)
    }

    /// The names, for serde's "unknown variant" error.
    const NAMES: [&str; 3] = ["real", "wm", "wmrl"];

    struct Name;

    impl de::Visitor<'_> for Name {
        type Value = Arm;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an AutoResearch arm: real, wm or wmrl")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Arm, E> {
            debug_assert!(AR_ARMS.iter().map(|&a| ar_name(a)).eq(NAMES));
            ar_arm_from_name(v).ok_or_else(|| E::unknown_variant(v, &NAMES))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Holder {
        #[serde(with = "serde_ar_arm")]
        arm: Arm,
    }

    #[test]
    fn names_round_trip_and_others_are_refused() {
        let names: Vec<&str> = AR_ARMS.iter().map(|&a| ar_name(a)).collect();
        assert_eq!(names, ["real", "wm", "wmrl"]);
        for a in AR_ARMS {
            assert_eq!(parse_ar_arm(ar_name(a)), Ok(a));
            let json = serde_json::to_string(&Holder { arm: a }).unwrap_or_default();
            assert_eq!(json, format!("{{\"arm\":\"{}\"}}", ar_name(a)));
            let back: Holder = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.arm, a);
            let toml_text = toml::to_string(&Holder { arm: a }).unwrap_or_default();
            assert_eq!(toml_text, format!("arm = \"{}\"\n", ar_name(a)));
            let back: Holder = toml::from_str(&toml_text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.arm, a);
        }
        // The core's names are not the track's (bar `wmrl`, the same arm).
        for s in ["sparse", "dense_raw", "mix", "Real", "x", ""] {
            assert_eq!(
                parse_ar_arm(s),
                Err(format!("unknown arm `{s}` (expected real, wm or wmrl)"))
            );
            let err = serde_json::from_str::<Holder>(&format!("{{\"arm\":\"{s}\"}}"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.starts_with(&format!(
                    "unknown variant `{s}`, expected one of `real`, `wm`, `wmrl`"
                )),
                "{err}"
            );
        }
        for a in Arm::ALL.into_iter().filter(|a| !is_ar_arm(*a)) {
            assert_eq!(ar_name(a), a.name());
            let err = serde_json::to_string(&Holder { arm: a })
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("expected real, wm or wmrl"), "{err}");
            assert!(err.contains(a.name()), "{err}");
        }
    }
}
