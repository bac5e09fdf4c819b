use thiserror::Error;

/// Everything the method refuses. Values are named so a user can find them.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    #[error("{what}[{index}] is {value}: scores must be finite")]
    NonFinite {
        what: &'static str,
        index: usize,
        value: f64,
    },
    #[error("invalid config value {key} = {value}: {reason}")]
    InvalidConfig {
        key: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("group {group} is empty")]
    EmptyGroup { group: usize },
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("scorer failed: {0}")]
    Scorer(String),
}

pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// Fail on the first NaN or infinite value.
pub(crate) fn check_finite(what: &'static str, xs: &[f64]) -> Result<()> {
    match xs.iter().position(|x| !x.is_finite()) {
        Some(index) => Err(CoreError::NonFinite {
            what,
            index,
            value: xs[index],
        }),
        None => Ok(()),
    }
}
