#!/usr/bin/env python3
"""Build the wmrl AutoResearch competition suite in MLE-Dojo's layout.

Every competition is a folder in MLE-Dojo's layout (its registry finds
utils/metric.py, its main.py reads <data_dir>/<name>/data, its grader reads
the leaderboards' second column):

    <name>/data/public/description.txt        what to predict, the metric, the files
    <name>/data/public/train.csv              id, f0..fN, target
    <name>/data/public/test.csv               id, f0..fN
    <name>/data/public/sample_submission.csv  id, target (a constant placeholder)
    <name>/data/private/test_answer.csv       id, target
    <name>/data/private/public_leaderboard.csv    rank, score, team (best first)
    <name>/data/private/private_leaderboard.csv   rank, score, team (best first)
    <name>/info/description.txt, public_leaderboard.csv, private_leaderboard.csv
                                              (copies, where MLE-Dojo's registry looks)
    <name>/utils/metric.py                    the metric as an MLE-Dojo CompetitionMetrics
    <name>/utils/prepare.py                   MLE-Dojo's prepare(raw, public, private)
    <name>/meta.json                          metric, task, split, meta-features

built offline and deterministically (fixed seeds, pinned scikit-learn from
envs/mledojo/requirements.txt) from datasets that scikit-learn ships inside its
wheel and from seeded synthetic generators. The leaderboards are NOT human
leaderboards: they hold the scores of a fixed population of reference
submissions of varied quality (constant and random baselines, linear models,
nearest neighbours, trees, forests, boosting, kernel machines at several
settings) that this script fits on train.csv. The public leaderboard scores
each reference on the first half of the test rows (in id order), the private
leaderboard on the second half. Grading (crates/wmrl-autoresearch) scores a
submission on all of private/test_answer.csv and places it on both.

Usage: build_suite.py OUT_DIR   (default: envs/mledojo/competitions)
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pandas as pd
from sklearn import datasets
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.ensemble import (HistGradientBoostingClassifier, HistGradientBoostingRegressor,
                              RandomForestClassifier, RandomForestRegressor)
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, f1_score, mean_absolute_error, mean_squared_error, r2_score
from sklearn.model_selection import cross_val_score, train_test_split
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

warnings.filterwarnings("ignore")

# The order of this list is the suite's order; "heldout" competitions are never
# used to train the outcome predictor or the policy.
META_FEATURE_NAMES = [
    "is_classification", "log10_n_train_over_4", "log10_n_features_over_2",
    "n_classes_over_10", "minority_class_fraction", "target_skew_over_5",
    "mean_abs_feature_target_corr", "log10_feature_scale_spread_over_4",
    "linear_landmark", "tree_landmark", "is_error_metric", "is_f1_metric",
]
ID0 = 1000  # ids start here so a submission with 0-based ids is malformed


def _scale_spread(rng, x, decades):
    return x * (10.0 ** rng.uniform(-decades / 2, decades / 2, size=x.shape[1]))


def _add_noise_features(rng, x, k):
    return np.hstack([x, rng.normal(size=(x.shape[0], k))])


def make_data(name):
    """(X, y, task, metric, split, blurb) for one competition; seeded."""
    rng = np.random.default_rng(sum(map(ord, name)))  # seeded per competition
    if name == "iris":
        d = datasets.load_iris(); return d.data, d.target, "classification", "accuracy", "train", "iris species from flower measurements (scikit-learn bundled iris)"
    if name == "wine":
        d = datasets.load_wine(); return d.data, d.target, "classification", "accuracy", "train", "wine cultivar from chemical analysis (scikit-learn bundled wine)"
    if name == "breast_cancer":
        d = datasets.load_breast_cancer(); return d.data, d.target, "classification", "accuracy", "train", "malignant vs benign tumours (scikit-learn bundled breast cancer)"
    if name == "synth_clf_linear":
        x, y = datasets.make_classification(1200, 20, n_informative=5, n_redundant=5, class_sep=0.8, flip_y=0.03, random_state=11)
        return x, y, "classification", "accuracy", "train", "a seeded synthetic binary problem with a mostly linear boundary"
    if name == "synth_clf_scales":
        x, y = datasets.make_classification(1000, 12, n_informative=6, n_classes=3, n_clusters_per_class=1, random_state=12)
        return _scale_spread(rng, x, 5), y, "classification", "f1_macro", "train", "a seeded synthetic 3-class problem whose features differ in scale by up to five decades"
    if name == "moons":
        x, y = datasets.make_moons(1000, noise=0.3, random_state=13)
        return _add_noise_features(rng, x, 6), y, "classification", "accuracy", "train", "two interleaved half-moons plus six noise features (seeded synthetic)"
    if name == "hastie":
        x, y = datasets.make_hastie_10_2(1500, random_state=14)
        return x, (y > 0).astype(int), "classification", "accuracy", "train", "Hastie et al. 10.2: a spherical boundary in ten Gaussian features (seeded synthetic)"
    if name == "diabetes":
        d = datasets.load_diabetes(); return d.data, d.target, "regression", "rmse", "train", "disease progression after one year (scikit-learn bundled diabetes)"
    if name == "friedman1":
        x, y = datasets.make_friedman1(1000, n_features=10, noise=1.0, random_state=15)
        return x, y, "regression", "rmse", "train", "Friedman #1: a smooth nonlinear target of five of ten uniform features (seeded synthetic)"
    if name == "synth_reg_linear":
        x, y = datasets.make_regression(800, 30, n_informative=10, noise=10.0, random_state=16)
        return x, y, "regression", "rmse", "train", "a seeded synthetic linear regression with 30 features, 10 informative"
    if name == "synth_reg_skewed":
        x, y = datasets.make_regression(900, 15, n_informative=6, noise=5.0, random_state=17)
        y = np.exp(y / np.std(y))  # positive, right-skewed
        return x, y, "regression", "mae", "train", "a seeded synthetic regression with a positive, strongly right-skewed target"
    if name == "digits":
        d = datasets.load_digits(); return d.data, d.target, "classification", "accuracy", "heldout", "handwritten digits as 8x8 grey images, 64 pixel columns (scikit-learn bundled digits)"
    if name == "circles":
        x, y = datasets.make_circles(1000, noise=0.1, factor=0.5, random_state=18)
        return _add_noise_features(rng, x, 4), y, "classification", "accuracy", "heldout", "two concentric circles plus four noise features (seeded synthetic)"
    if name == "synth_clf_multiclass":
        x, y = datasets.make_classification(1200, 15, n_informative=8, n_classes=5, n_clusters_per_class=1, class_sep=1.2, random_state=19)
        return _scale_spread(rng, x, 3), y, "classification", "f1_macro", "heldout", "a seeded synthetic 5-class problem with features of mixed scale"
    if name == "friedman2":
        x, y = datasets.make_friedman2(1000, noise=20.0, random_state=20)
        return x, y, "regression", "rmse", "heldout", "Friedman #2: impedance of an AC circuit, four inputs of very different ranges (seeded synthetic)"
    if name == "synth_reg_sparse":
        x, y = datasets.make_regression(600, 50, n_informative=5, noise=20.0, random_state=21)
        return x, y, "regression", "r2", "heldout", "a seeded synthetic regression with 50 features of which 5 matter"
    raise KeyError(name)


NAMES = ["iris", "wine", "breast_cancer", "synth_clf_linear", "synth_clf_scales", "moons", "hastie",
         "diabetes", "friedman1", "synth_reg_linear", "synth_reg_skewed",
         "digits", "circles", "synth_clf_multiclass", "friedman2", "synth_reg_sparse"]

HIGHER_IS_BETTER = {"accuracy": True, "f1_macro": True, "r2": True, "rmse": False, "mae": False}


def metric_value(metric, y_true, y_pred):
    if metric == "accuracy":
        return float(accuracy_score(y_true, y_pred))
    if metric == "f1_macro":
        return float(f1_score(y_true, y_pred, average="macro"))
    if metric == "rmse":
        return float(np.sqrt(mean_squared_error(y_true, y_pred)))
    if metric == "mae":
        return float(mean_absolute_error(y_true, y_pred))
    if metric == "r2":
        return float(r2_score(y_true, y_pred))
    raise KeyError(metric)


def reference_population(task, n_train):
    """The documented population of reference submissions: (team, estimator)."""
    sc = StandardScaler
    k_hi = max(1, min(75, n_train // 4))
    if task == "classification":
        return [
            ("baseline-majority", DummyClassifier(strategy="most_frequent")),
            ("baseline-stratified", DummyClassifier(strategy="stratified", random_state=0)),
            ("logreg-C0.001", make_pipeline(sc(), LogisticRegression(C=0.001, max_iter=500))),
            ("logreg-C0.1", make_pipeline(sc(), LogisticRegression(C=0.1, max_iter=500))),
            ("logreg-C10", make_pipeline(sc(), LogisticRegression(C=10, max_iter=1000))),
            ("logreg-raw", LogisticRegression(C=1.0, max_iter=100)),
            ("knn-1-raw", KNeighborsClassifier(1)),
            ("knn-k-raw", KNeighborsClassifier(k_hi)),
            ("knn-5", make_pipeline(sc(), KNeighborsClassifier(5))),
            ("knn-15", make_pipeline(sc(), KNeighborsClassifier(15))),
            ("tree-d1", DecisionTreeClassifier(max_depth=1, random_state=0)),
            ("tree-d3", DecisionTreeClassifier(max_depth=3, random_state=0)),
            ("tree-full", DecisionTreeClassifier(random_state=0)),
            ("forest-10-d3", RandomForestClassifier(10, max_depth=3, random_state=0)),
            ("forest-100", RandomForestClassifier(100, random_state=0)),
            ("hgb-30", HistGradientBoostingClassifier(max_iter=30, random_state=0)),
            ("hgb-200", HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, random_state=0)),
            ("svm-C0.1", make_pipeline(sc(), SVC(C=0.1))),
            ("svm-C3", make_pipeline(sc(), SVC(C=3.0))),
            ("svm-raw", SVC(C=1.0)),
        ]
    return [
        ("baseline-mean", DummyRegressor()),
        ("baseline-median", DummyRegressor(strategy="median")),
        ("ridge-a1000", make_pipeline(sc(), Ridge(alpha=1000.0))),
        ("ridge-a10", make_pipeline(sc(), Ridge(alpha=10.0))),
        ("ridge-a0.1", make_pipeline(sc(), Ridge(alpha=0.1))),
        ("knn-1-raw", KNeighborsRegressor(1)),
        ("knn-k-raw", KNeighborsRegressor(k_hi)),
        ("knn-5", make_pipeline(sc(), KNeighborsRegressor(5))),
        ("knn-15", make_pipeline(sc(), KNeighborsRegressor(15))),
        ("tree-d2", DecisionTreeRegressor(max_depth=2, random_state=0)),
        ("tree-d5", DecisionTreeRegressor(max_depth=5, random_state=0)),
        ("tree-full", DecisionTreeRegressor(random_state=0)),
        ("forest-10-d3", RandomForestRegressor(10, max_depth=3, random_state=0)),
        ("forest-100", RandomForestRegressor(100, random_state=0)),
        ("hgb-30", HistGradientBoostingRegressor(max_iter=30, random_state=0)),
        ("hgb-200", HistGradientBoostingRegressor(max_iter=200, learning_rate=0.05, random_state=0)),
        ("svr-C1", make_pipeline(sc(), SVR(C=1.0))),
        ("svr-C100", make_pipeline(sc(), SVR(C=100.0))),
    ]


def meta_features(x, y, task, metric):
    n, p = x.shape
    is_clf = task == "classification"
    classes, counts = np.unique(y, return_counts=True) if is_clf else (np.array([]), np.array([]))
    yc = y.astype(float)
    corr = []
    for j in range(p):
        s = np.std(x[:, j])
        corr.append(0.0 if s == 0 or np.std(yc) == 0 else abs(np.corrcoef(x[:, j], yc)[0, 1]))
    stds = np.std(x, axis=0)
    stds = stds[stds > 0]
    spread = np.log10(stds.max() / stds.min()) if len(stds) else 0.0
    skew = 0.0
    if not is_clf:
        skew = float(np.mean(((yc - yc.mean()) / (yc.std() + 1e-12)) ** 3))
    if is_clf:
        lin = cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)), x, y, cv=3).mean()
        tree = cross_val_score(DecisionTreeClassifier(max_depth=3, random_state=0), x, y, cv=3).mean()
    else:
        lin = max(0.0, cross_val_score(make_pipeline(StandardScaler(), Ridge()), x, y, cv=3, scoring="r2").mean())
        tree = max(0.0, cross_val_score(DecisionTreeRegressor(max_depth=3, random_state=0), x, y, cv=3, scoring="r2").mean())
    return [
        1.0 if is_clf else 0.0,
        float(np.log10(n) / 4),
        float(np.log10(p) / 2),
        float(len(classes) / 10),
        float(counts.min() / counts.sum()) if is_clf else 0.0,
        float(np.clip(skew / 5, -1, 1)),
        float(np.mean(corr)),
        float(min(spread, 8) / 4),
        float(lin),
        float(tree),
        0.0 if HIGHER_IS_BETTER[metric] else 1.0,
        1.0 if metric == "f1_macro" else 0.0,
    ]


# utils/metric.py of every competition: the metric as MLE-Dojo's grader calls
# it (the class is built with no arguments; validate_submission(submission,
# ground_truth) raises InvalidSubmissionError on a malformed submission;
# evaluate(y_true, y_pred) returns the raw score). Same rules as wmrl's grader
# (crates/wmrl-autoresearch/src/grade.rs): rows matched by id, every test id
# exactly once, class labels compared as numbers where both parse.
METRIC_PY = '''"""Metric of this competition for MLE-Dojo (generated by wmrl's envs/mledojo/build_suite.py)."""

import numpy as np
import pandas as pd
from mledojo.metrics.base import CompetitionMetrics, InvalidSubmissionError

METRIC = "__METRIC__"
TASK = "__TASK__"


def _label(v):
    try:
        return repr(float(v))
    except (TypeError, ValueError):
        return str(v)


class __CLASS__(CompetitionMetrics):
    def __init__(self, value: str = "target", higher_is_better: bool = __HIB__):
        super().__init__(higher_is_better)
        self.value = value

    def evaluate(self, y_true: pd.DataFrame, y_pred: pd.DataFrame) -> float:
        t = y_true.set_index("id")[self.value]
        p = y_pred.set_index("id")[self.value].reindex(t.index)
        if TASK == "classification":
            tl = np.array([_label(v) for v in t.values])
            pl = np.array([_label(v) for v in p.values])
            if METRIC == "accuracy":
                return float(np.mean(tl == pl))
            f1s = []
            for c in sorted(set(tl)):
                tp = np.sum((tl == c) & (pl == c))
                fp = np.sum((tl != c) & (pl == c))
                fn = np.sum((tl == c) & (pl != c))
                f1s.append(0.0 if tp == 0 else 2.0 * tp / (2.0 * tp + fp + fn))
            return float(np.mean(f1s))
        tv = t.values.astype(float)
        pv = pd.to_numeric(p, errors="raise").values.astype(float)
        r = tv - pv
        if METRIC == "rmse":
            return float(np.sqrt(np.mean(r * r)))
        if METRIC == "mae":
            return float(np.mean(np.abs(r)))
        ss_tot = float(np.sum((tv - tv.mean()) ** 2))
        return float(1.0 - np.sum(r * r) / max(ss_tot, 1e-300))

    def validate_submission(self, submission: pd.DataFrame, ground_truth: pd.DataFrame) -> str:
        for col in ("id", self.value):
            if col not in submission.columns:
                raise InvalidSubmissionError(f"submission lacks column {col!r}")
        if len(submission) != len(ground_truth):
            raise InvalidSubmissionError(f"{len(submission)} rows, want {len(ground_truth)}")
        sid = submission["id"].astype(str)
        if sid.duplicated().any():
            raise InvalidSubmissionError("duplicate ids")
        if set(sid) != set(ground_truth["id"].astype(str)):
            raise InvalidSubmissionError("ids differ from the test set")
        if TASK == "regression":
            v = pd.to_numeric(submission[self.value], errors="coerce")
            if v.isna().any() or not np.isfinite(v.values.astype(float)).all():
                raise InvalidSubmissionError("predictions are not finite numbers")
        return "submission is valid"
'''

# utils/prepare.py: MLE-Dojo's preparation entry point. wmrl's suite ships
# prepared; given raw/ holding train.csv, test.csv, sample_submission.csv,
# test_answer.csv and the two leaderboards (e.g. copied from data/), this
# rebuilds public/ and private/.
PREPARE_PY = '''"""MLE-Dojo prepare() for a wmrl competition (generated by envs/mledojo/build_suite.py)."""

import shutil
from pathlib import Path


def prepare(raw: Path, public: Path, private: Path):
    public.mkdir(parents=True, exist_ok=True)
    private.mkdir(parents=True, exist_ok=True)
    for name in ("train.csv", "test.csv", "sample_submission.csv", "description.txt"):
        if (raw / name).exists():
            shutil.copy(raw / name, public / name)
    for name in ("test_answer.csv", "public_leaderboard.csv", "private_leaderboard.csv"):
        shutil.copy(raw / name, private / name)
'''


def fmt(v):
    return repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)


def build(name, out):
    x, y, task, metric, split, blurb = make_data(name)
    x = np.asarray(x, dtype=float)
    cols = [f"f{j}" for j in range(x.shape[1])]
    strat = y if task == "classification" else None
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=strat)
    n_tr, n_te = len(ytr), len(yte)
    ids_tr = np.arange(ID0, ID0 + n_tr)
    ids_te = np.arange(ID0 + n_tr, ID0 + n_tr + n_te)
    pub, prv = os.path.join(out, name, "data", "public"), os.path.join(out, name, "data", "private")
    info, utils = os.path.join(out, name, "info"), os.path.join(out, name, "utils")
    for d in (pub, prv, info, utils):
        os.makedirs(d, exist_ok=True)
    r = lambda a: np.round(a, 6)
    train = pd.DataFrame(r(xtr), columns=cols); train.insert(0, "id", ids_tr); train["target"] = r(ytr) if task == "regression" else ytr
    test = pd.DataFrame(r(xte), columns=cols); test.insert(0, "id", ids_te)
    train.to_csv(os.path.join(pub, "train.csv"), index=False)
    test.to_csv(os.path.join(pub, "test.csv"), index=False)
    placeholder = int(np.bincount(ytr).argmax()) if task == "classification" else round(float(np.mean(ytr)), 6)
    pd.DataFrame({"id": ids_te, "target": placeholder}).to_csv(os.path.join(pub, "sample_submission.csv"), index=False)
    pd.DataFrame({"id": ids_te, "target": r(yte) if task == "regression" else yte}).to_csv(os.path.join(prv, "test_answer.csv"), index=False)
    # Reference population, fitted on exactly what a solution sees (rounded csv values).
    xtr_r, xte_r = r(xtr), r(xte)
    ytr_r = r(ytr) if task == "regression" else ytr
    yte_r = r(yte) if task == "regression" else yte
    half = n_te // 2
    rows = {"public": [], "private": []}
    for team, est in reference_population(task, n_tr):
        est.fit(xtr_r, ytr_r)
        pred = est.predict(xte_r)
        rows["public"].append((team, metric_value(metric, yte_r[:half], pred[:half])))
        rows["private"].append((team, metric_value(metric, yte_r[half:], pred[half:])))
    hib = HIGHER_IS_BETTER[metric]
    for which, entries in rows.items():
        entries.sort(key=lambda t: (-t[1] if hib else t[1], t[0]))
        # MLE-Dojo reads the score from the second column.
        lb = pd.DataFrame({"rank": np.arange(1, len(entries) + 1),
                           "score": [round(s, 6) for _, s in entries], "team": [t for t, _ in entries]})
        for d in (prv, info):
            lb.to_csv(os.path.join(d, f"{which}_leaderboard.csv"), index=False)
    mf = meta_features(xtr_r, ytr_r, task, metric)
    meta = {
        "name": name, "task": task, "metric": metric, "higher_is_better": hib, "split": split,
        "id_column": "id", "target_column": "target", "n_train": n_tr, "n_test": n_te,
        "n_features": x.shape[1], "n_classes": int(len(np.unique(y))) if task == "classification" else 0,
        "public_leaderboard_rows": "first half of test rows in id order",
        "meta_feature_names": META_FEATURE_NAMES, "meta_features": [round(v, 6) for v in mf],
        "reference_population": [t for t, _ in reference_population(task, n_tr)],
    }
    with open(os.path.join(out, name, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    kind = f"{meta['n_classes']}-class classification" if task == "classification" else "regression"
    desc = f"""# {name}

Task: {kind}. Predict `target` for every row of test.csv: {blurb}.

Files (in the public data directory, MLE-Dojo's `data_path`; `./public/` in
wmrl's sandbox): train.csv ({n_tr} rows: id, {len(cols)} numeric features f0..f{len(cols) - 1}, target),
test.csv ({n_te} rows: id and the same features), sample_submission.csv (the exact
format to write: columns id,target, one row per test id, in any order).

Metric: {metric} ({'higher' if hib else 'lower'} is better), computed on all test rows.

Leaderboards: these are NOT human leaderboards. They hold the scores of
{len(rows['public'])} reference submissions of varied quality (constant and random baselines,
linear models, nearest neighbours, trees, forests, gradient boosting, kernel
machines) produced by wmrl's envs/mledojo/build_suite.py. The public
leaderboard scores them on the first half of the test rows, the private
leaderboard on the second half.

Write your predictions to submission.csv in the output directory (MLE-Dojo's
`output_path`; in wmrl's sandbox the working directory, so ./submission.csv).
No network access.
"""
    for d in (pub, info):
        with open(os.path.join(d, "description.txt"), "w") as f:
            f.write(desc)
    with open(os.path.join(utils, "metric.py"), "w") as f:
        f.write(METRIC_PY.replace("__CLASS__", "".join(w.capitalize() for w in name.split("_")) + "Metrics")
                .replace("__METRIC__", metric).replace("__TASK__", task).replace("__HIB__", str(hib)))
    with open(os.path.join(utils, "prepare.py"), "w") as f:
        f.write(PREPARE_PY)
    return meta


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "competitions")
    os.makedirs(out, exist_ok=True)
    index = []
    for name in NAMES:
        m = build(name, out)
        index.append({"name": name, "split": m["split"], "task": m["task"], "metric": m["metric"]})
        print(f"{name:22s} {m['split']:8s} {m['task']:15s} {m['metric']:9s} n_train={m['n_train']}")
    with open(os.path.join(out, "suite.json"), "w") as f:
        json.dump({"competitions": index, "meta_feature_names": META_FEATURE_NAMES}, f, indent=1)


if __name__ == "__main__":
    main()
