//! Features of arbitrary solution code, for a world model that scores code
//! it did not write (the reward service, `wmrl autoresearch serve-rewards`):
//! static facts about the text, no execution. A fixed-width vector of
//!
//! - [`N_HASHED`] buckets of hashed tokens (identifiers, keywords, numbers
//!   and operators; FNV-1a of the token, `ln(1 + count)` scaled by 1/4),
//!   the bag-of-words view of the code;
//! - [`N_FLAGS`] named facts ([`FLAGS`]): which libraries are imported,
//!   which model families and calls appear, whether it reads the data and
//!   writes `submission.csv`, and its size and shape (lines, functions,
//!   loops, brackets that do not balance).
//!
//! The predictor's input is the competition's meta-features followed by
//! these ([`code_input`]); it is trained by `wmrl autoresearch
//! fit-predictor --code` on the project's own sandbox results.

use crate::competition::N_META;

/// Hashed-token buckets.
pub const N_HASHED: usize = 64;
/// Named features, in [`FLAGS`] order.
pub const N_FLAGS: usize = FLAGS.len();
/// Width of [`code_features`].
pub const N_CODE: usize = N_HASHED + N_FLAGS;
/// Width of [`code_input`]: meta-features then code features.
pub const N_CODE_INPUT: usize = N_META + N_CODE;

/// The named features after the hashed buckets: each is 1.0 when the
/// substring occurs in the code (outside comments), except the last five,
/// which are counts scaled as documented in [`code_features`].
pub const FLAGS: [&str; 32] = [
    "import numpy",
    "import pandas",
    "sklearn",
    "lightgbm",
    "xgboost",
    "catboost",
    "torch",
    "scipy",
    "LogisticRegression",
    "Ridge",
    "LinearRegression",
    "RandomForest",
    "GradientBoosting",
    "HistGradientBoosting",
    "KNeighbors",
    "DecisionTree",
    "SVC",
    "MLP",
    "StandardScaler",
    "fillna",
    ".fit(",
    ".predict(",
    "predict_proba",
    "train.csv",
    "test.csv",
    "submission.csv",
    "to_csv",
    // Counts: lines, `def`s, loops, `try:` blocks, unbalanced brackets.
    "#lines",
    "#defs",
    "#loops",
    "#try",
    "#unbalanced",
];

const N_SUBSTRINGS: usize = 27;

/// The code's static features ([`N_CODE`] floats, each in `[0, ~2]`).
pub fn code_features(code: &str) -> Vec<f32> {
    // Comments carry no behaviour: drop `#` to end of line (a `#` inside
    // a string literal is rare in solution code and only costs a token).
    let text: String = code
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = vec![0f32; N_CODE];
    let mut counts = [0u32; N_HASHED];
    for tok in tokens(&text) {
        counts[(fnv1a(tok.as_bytes()) % N_HASHED as u64) as usize] += 1;
    }
    for (o, &c) in out.iter_mut().zip(&counts) {
        *o = (c as f32).ln_1p() / 4.0;
    }
    let flags = &mut out[N_HASHED..];
    for (f, pat) in flags.iter_mut().zip(&FLAGS[..N_SUBSTRINGS]) {
        *f = f32::from(u8::from(text.contains(pat)));
    }
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    let defs = text
        .lines()
        .filter(|l| l.trim_start().starts_with("def "))
        .count();
    let loops = text
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("for ") || t.starts_with("while ")
        })
        .count();
    let tries = text.lines().filter(|l| l.trim() == "try:").count();
    let balance = |open: char, close: char| {
        let o = text.matches(open).count() as i64;
        let c = text.matches(close).count() as i64;
        (o - c).unsigned_abs()
    };
    let unbalanced = balance('(', ')') + balance('[', ']') + balance('{', '}');
    let counts = [
        (lines as f32).ln_1p() / 5.0,
        (defs as f32).ln_1p() / 2.0,
        (loops as f32).ln_1p() / 2.0,
        (tries as f32).ln_1p(),
        (unbalanced as f32).min(4.0) / 4.0,
    ];
    flags[N_SUBSTRINGS..].copy_from_slice(&counts);
    out
}

/// The code predictor's input: `meta` (the competition's meta-features)
/// followed by [`code_features`].
pub fn code_input(meta: &[f32], code: &str) -> Vec<f32> {
    let mut v = meta.to_vec();
    v.extend(code_features(code));
    v
}

/// Identifiers, numbers, and single punctuation characters.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        rest = rest.trim_start();
        let c = rest.chars().next()?;
        let len = if c.is_alphanumeric() || c == '_' {
            rest.find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '.'))
                .unwrap_or(rest.len())
        } else {
            c.len_utf8()
        };
        let (tok, tail) = rest.split_at(len);
        rest = tail;
        Some(tok)
    })
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "import pandas as pd\nfrom sklearn.linear_model import Ridge\n\
        train = pd.read_csv('train.csv')\ntest = pd.read_csv('test.csv')\n\
        m = Ridge().fit(train.drop(columns=['y']), train['y'])\n\
        pd.DataFrame({'y': m.predict(test)}).to_csv('submission.csv', index=False)\n";

    fn flag(f: &[f32], name: &str) -> f32 {
        f[N_HASHED + FLAGS.iter().position(|x| *x == name).expect("flag")]
    }

    #[test]
    fn features_name_what_the_code_does() {
        let f = code_features(GOOD);
        assert_eq!(f.len(), N_CODE);
        assert_eq!(flag(&f, "Ridge"), 1.0);
        assert_eq!(flag(&f, "submission.csv"), 1.0);
        assert_eq!(flag(&f, "lightgbm"), 0.0);
        assert_eq!(flag(&f, "#unbalanced"), 0.0);
        assert!(f[..N_HASHED].iter().any(|&x| x > 0.0));
        // Broken code differs: an unclosed bracket, no submission written.
        let broken = code_features("import pandas as pd\nx = pd.read_csv('train.csv'\n");
        assert!(flag(&broken, "#unbalanced") > 0.0);
        assert_eq!(flag(&broken, "submission.csv"), 0.0);
        // Comments are not code.
        let commented = code_features("# import lightgbm\nx = 1\n");
        assert_eq!(flag(&commented, "lightgbm"), 0.0);
        // Deterministic, and the input puts the meta-features first.
        assert_eq!(code_features(GOOD), f);
        let meta = vec![0.5; N_META];
        let x = code_input(&meta, GOOD);
        assert_eq!(x.len(), N_CODE_INPUT);
        assert_eq!(&x[..N_META], meta.as_slice());
        assert_eq!(&x[N_META..], f.as_slice());
    }

    #[test]
    fn empty_and_odd_text_give_finite_features() {
        for code in ["", "\n\n", "é∂ƒ(((", "#"] {
            let f = code_features(code);
            assert_eq!(f.len(), N_CODE);
            assert!(f.iter().all(|x| x.is_finite()), "{code:?}");
        }
    }
}
