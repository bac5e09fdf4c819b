//! The structured solution space and the Python/scikit-learn templates a
//! choice renders to. A solution is one option per slot: preprocessing
//! (scaler), features, model family, capacity (the family's hyperparameters),
//! target transform and how the submission is written. Some options are
//! mistakes a code-writing agent makes (a log target on negative values,
//! 0-based ids): they fail on the ladder exactly as such code would.

use serde::{Deserialize, Serialize};

use crate::competition::{CompetitionMeta, Task};

/// Slot names and their options, in order.
pub const SLOTS: [(&str, &[&str]); 6] = [
    ("scaler", &["none", "standard", "robust", "minmax"]),
    ("features", &["raw", "poly2", "pca", "select_half"]),
    (
        "model",
        &[
            "dummy", "linear", "knn", "tree", "forest", "boosting", "svm",
        ],
    ),
    ("capacity", &["low", "mid", "high"]),
    ("target", &["none", "log1p"]),
    ("output", &["sample_ids", "range_ids"]),
];

pub const N_SLOTS: usize = SLOTS.len();

/// Total options over all slots: the length of [`Solution::one_hot`].
pub const N_OPTIONS: usize = 4 + 4 + 7 + 3 + 2 + 2;

/// One point of the solution space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Solution {
    pub choice: [usize; N_SLOTS],
}

fn opt(slot: usize, i: usize) -> &'static str {
    SLOTS[slot].1[i]
}

impl Solution {
    /// `None` when an index is out of range.
    pub fn new(choice: [usize; N_SLOTS]) -> Option<Self> {
        choice
            .iter()
            .zip(SLOTS.iter())
            .all(|(&c, (_, o))| c < o.len())
            .then_some(Self { choice })
    }

    /// Concatenated one-hot of every slot's option.
    pub fn one_hot(&self) -> Vec<f32> {
        let mut v = Vec::with_capacity(N_OPTIONS);
        for (s, (_, opts)) in SLOTS.iter().enumerate() {
            v.extend((0..opts.len()).map(|i| if i == self.choice[s] { 1.0 } else { 0.0 }));
        }
        v
    }

    /// `scaler=standard features=raw ...`.
    pub fn describe(&self) -> String {
        SLOTS
            .iter()
            .enumerate()
            .map(|(s, (name, _))| format!("{name}={}", opt(s, self.choice[s])))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A complete Python program for `meta`'s competition: reads `public/`,
    /// writes `submission.csv`. Deterministic (fixed seeds).
    pub fn render(&self, meta: &CompetitionMeta) -> String {
        let clf = meta.task == Task::Classification;
        let [scaler, features, model, capacity, target, output] = self.choice;
        let mut imports = vec![
            "import numpy as np".to_string(),
            "import pandas as pd".to_string(),
            "from sklearn.pipeline import make_pipeline".to_string(),
        ];
        let mut steps: Vec<String> = Vec::new();
        push_preprocessing(scaler, features, clf, &mut imports, &mut steps);
        let (import, est) = estimator(model, capacity, clf);
        imports.push(import.to_string());
        steps.push(est);
        let mut code = imports.join("\n");
        code += &program_body(meta, &steps, clf, target, output);
        code
    }
}

/// Push the imports and pipeline steps of the preprocessing slots: the
/// scaler's, then the features'.
fn push_preprocessing(
    scaler: usize,
    features: usize,
    clf: bool,
    imports: &mut Vec<String>,
    steps: &mut Vec<String>,
) {
    match opt(0, scaler) {
        "standard" => {
            imports.push("from sklearn.preprocessing import StandardScaler".into());
            steps.push("StandardScaler()".into());
        }
        "robust" => {
            imports.push("from sklearn.preprocessing import RobustScaler".into());
            steps.push("RobustScaler()".into());
        }
        "minmax" => {
            imports.push("from sklearn.preprocessing import MinMaxScaler".into());
            steps.push("MinMaxScaler()".into());
        }
        _ => {}
    }
    match opt(1, features) {
        "poly2" => {
            imports.push("from sklearn.preprocessing import PolynomialFeatures".into());
            steps.push("PolynomialFeatures(degree=2, include_bias=False)".into());
        }
        "pca" => {
            imports.push("from sklearn.decomposition import PCA".into());
            steps.push("PCA(n_components=0.95, random_state=0)".into());
        }
        "select_half" => {
            let f = if clf { "f_classif" } else { "f_regression" };
            imports.push(format!(
                "from sklearn.feature_selection import SelectKBest, {f}"
            ));
            steps.push(format!("SelectKBest({f}, k=max(1, X.shape[1] // 2))"));
        }
        _ => {}
    }
}

/// The model slot's import line and estimator expression, its
/// hyperparameters picked by the capacity slot (`low`, `mid`, `high`).
fn estimator(model: usize, capacity: usize, clf: bool) -> (&'static str, String) {
    let cap = capacity;
    let pick = |xs: [&str; 3]| xs[cap].to_string();
    match (opt(2, model), clf) {
        ("dummy", true) => (
            "from sklearn.dummy import DummyClassifier",
            "DummyClassifier(strategy='most_frequent')".to_string(),
        ),
        ("dummy", false) => (
            "from sklearn.dummy import DummyRegressor",
            "DummyRegressor()".to_string(),
        ),
        ("linear", true) => (
            "from sklearn.linear_model import LogisticRegression",
            format!(
                "LogisticRegression(C={}, max_iter=300)",
                pick(["0.01", "1.0", "100.0"])
            ),
        ),
        ("linear", false) => (
            "from sklearn.linear_model import Ridge",
            format!("Ridge(alpha={})", pick(["100.0", "1.0", "0.01"])),
        ),
        ("knn", true) => (
            "from sklearn.neighbors import KNeighborsClassifier",
            format!(
                "KNeighborsClassifier(n_neighbors=min({}, len(y)))",
                pick(["50", "15", "3"])
            ),
        ),
        ("knn", false) => (
            "from sklearn.neighbors import KNeighborsRegressor",
            format!(
                "KNeighborsRegressor(n_neighbors=min({}, len(y)))",
                pick(["50", "15", "3"])
            ),
        ),
        ("tree", true) => (
            "from sklearn.tree import DecisionTreeClassifier",
            format!(
                "DecisionTreeClassifier(max_depth={}, random_state=0)",
                pick(["2", "6", "None"])
            ),
        ),
        ("tree", false) => (
            "from sklearn.tree import DecisionTreeRegressor",
            format!(
                "DecisionTreeRegressor(max_depth={}, random_state=0)",
                pick(["2", "6", "None"])
            ),
        ),
        ("forest", true) => (
            "from sklearn.ensemble import RandomForestClassifier",
            format!(
                "RandomForestClassifier(n_estimators={}, random_state=0)",
                pick(["10, max_depth=4", "60", "150"])
            ),
        ),
        ("forest", false) => (
            "from sklearn.ensemble import RandomForestRegressor",
            format!(
                "RandomForestRegressor(n_estimators={}, random_state=0)",
                pick(["10, max_depth=4", "60", "150"])
            ),
        ),
        ("boosting", true) => (
            "from sklearn.ensemble import HistGradientBoostingClassifier",
            format!(
                "HistGradientBoostingClassifier(max_iter={}, random_state=0)",
                pick(["15", "100", "300"])
            ),
        ),
        ("boosting", false) => (
            "from sklearn.ensemble import HistGradientBoostingRegressor",
            format!(
                "HistGradientBoostingRegressor(max_iter={}, random_state=0)",
                pick(["15", "100", "300"])
            ),
        ),
        ("svm", true) => (
            "from sklearn.svm import SVC",
            format!("SVC(C={})", pick(["0.1", "1.0", "10.0"])),
        ),
        (_, _) => (
            "from sklearn.svm import SVR",
            format!("SVR(C={})", pick(["0.1", "1.0", "10.0"])),
        ),
    }
}

/// The program after its imports: read the public files, build and fit the
/// pipeline of `steps` (on `log1p` of the target when the target slot asks
/// for it on a regression), and write the submission with the output slot's
/// ids.
fn program_body(
    meta: &CompetitionMeta,
    steps: &[String],
    clf: bool,
    target: usize,
    output: usize,
) -> String {
    let id = &meta.id_column;
    let tg = &meta.target_column;
    let mut code = format!(
        "\n\ntrain = pd.read_csv('public/train.csv')\ntest = pd.read_csv('public/test.csv')\nsample = pd.read_csv('public/sample_submission.csv')\n\
         X = train.drop(columns=['{id}', '{tg}']).to_numpy(dtype=float)\ny = train['{tg}'].to_numpy()\n\
         X_test = test[train.drop(columns=['{id}', '{tg}']).columns].to_numpy(dtype=float)\n\n\
         model = make_pipeline(\n    {},\n)\n",
        steps.join(",\n    ")
    );
    if !clf && opt(4, target) == "log1p" {
        code += "model.fit(X, np.log1p(y))\npred = np.expm1(model.predict(X_test))\n";
    } else {
        code += "model.fit(X, y)\npred = model.predict(X_test)\n";
    }
    if opt(5, output) == "range_ids" {
        code += &format!("sub = pd.DataFrame({{'{id}': np.arange(len(pred)), '{tg}': pred}})\n");
    } else {
        code += &format!("sub = pd.DataFrame({{'{id}': test['{id}'], '{tg}': pred}})\n");
    }
    code += "sub.to_csv('submission.csv', index=False)\nprint('wrote', len(sub), 'rows')\n";
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hot_has_one_per_slot_and_rejects_bad_indices() {
        let s = Solution::new([1, 2, 5, 0, 1, 0]).unwrap();
        let v = s.one_hot();
        assert_eq!(v.len(), N_OPTIONS);
        assert_eq!(v.iter().sum::<f32>(), N_SLOTS as f32);
        assert!(Solution::new([4, 0, 0, 0, 0, 0]).is_none());
        assert_eq!(SLOTS.iter().map(|(_, o)| o.len()).sum::<usize>(), N_OPTIONS);
    }
}
