#!/usr/bin/env python3
"""Grade submissions on wmrl's competitions exactly as MLE-Dojo's own code
does, and write the fixture crates/wmrl-autoresearch/tests/fixtures/
mledojo_grading.json that wmrl's grader is tested against
(`cargo test -p wmrl-autoresearch --test mledojo_parity`).

    .venv/bin/python envs/mledojo/mledojo_rules.py

MLE-Dojo is not on PyPI, so its grading path is restated here from its source
(MLE-Dojo/MLE-Dojo, mledojo/gym/interface.py and competitions/registry.py):
- the metric class is the CompetitionMetrics subclass found in the
  competition's utils/metric.py, loaded by file path and built with no
  arguments (a minimal `mledojo.metrics.base` stands in for the package);
- a submission is checked with `validate_submission(submission, ground_truth)`
  (an exception makes it invalid) and scored with
  `evaluate(ground_truth, submission)` against data/private/test_answer.csv;
- each of data/private/{private,public}_leaderboard.csv is read with pandas,
  its scores taken from the second column (`iloc[:, 1]`), sorted best first
  (`sorted(scores, reverse=higher_is_better)`), and the position is the first
  entry the score reaches, ties included (`score >= s`, `<=` when lower is
  better), else total + 1; position score `(total - position + 1) / total`;
  the reported score is the mean over the boards.
"""

import importlib.util
import json
import os
import sys
import types

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "competitions")
OUT = os.path.join(HERE, "..", "..", "crates", "wmrl-autoresearch", "tests", "fixtures", "mledojo_grading.json")


def install_base_shim():
    """mledojo.metrics.base as MLE-Dojo defines it (the parts metric.py uses)."""
    base = types.ModuleType("mledojo.metrics.base")

    class InvalidSubmissionError(Exception):
        pass

    class CompetitionMetrics:
        def __init__(self, higher_is_better: bool = True):
            self.higher_is_better = higher_is_better

        def evaluate(self, y_true, y_pred):
            raise NotImplementedError

        def validate_submission(self, submission, ground_truth):
            raise NotImplementedError

    base.InvalidSubmissionError = InvalidSubmissionError
    base.CompetitionMetrics = CompetitionMetrics
    for name in ("mledojo", "mledojo.metrics"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["mledojo.metrics.base"] = base
    return base


def load_metric(comp_dir, base):
    path = os.path.join(comp_dir, "utils", "metric.py")
    name = f"mledojo._loaded_competitions.{os.path.basename(comp_dir)}.utils.metric"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for obj in vars(mod).values():
        if isinstance(obj, type) and issubclass(obj, base.CompetitionMetrics) and obj is not base.CompetitionMetrics:
            return obj()
    raise SystemExit(f"{path}: no CompetitionMetrics subclass")


def position(score, board_path, higher_is_better):
    lb = pd.read_csv(board_path)
    scores = lb.iloc[:, 1].values
    ranked = sorted(scores, reverse=higher_is_better)
    total = len(ranked)
    pos = next((i + 1 for i, s in enumerate(ranked)
                if (score >= s if higher_is_better else score <= s)), total + 1)
    return (total - pos + 1) / total


def grade(comp_dir, metric, text):
    from io import StringIO
    truth = pd.read_csv(os.path.join(comp_dir, "data", "private", "test_answer.csv"))
    try:
        sub = pd.read_csv(StringIO(text))
        metric.validate_submission(sub, truth)
        raw = float(metric.evaluate(truth, sub))
    except Exception as e:  # MLE-Dojo reports the submission as failed
        return {"valid": False, "error": f"{type(e).__name__}: {e}"}
    priv = os.path.join(comp_dir, "data", "private")
    ps = [position(raw, os.path.join(priv, f"{b}_leaderboard.csv"), metric.higher_is_better)
          for b in ("private", "public")]
    return {"valid": True, "raw": raw, "position_score": float(np.mean(ps))}


def submissions(comp_dir, rng):
    """Known submissions: the sample, the answer itself (ties the best
    entries), perturbed answers, and malformed files."""
    pub = os.path.join(comp_dir, "data", "public")
    meta = json.load(open(os.path.join(comp_dir, "meta.json")))
    truth = pd.read_csv(os.path.join(comp_dir, "data", "private", "test_answer.csv"))
    out = {"sample": open(os.path.join(pub, "sample_submission.csv")).read(),
           "perfect": truth.to_csv(index=False)}
    for k, frac in enumerate((0.05, 0.2, 0.5)):
        s = truth.copy()
        if meta["task"] == "classification":
            classes = np.unique(truth["target"])
            flip = rng.uniform(size=len(s)) < frac
            s.loc[flip, "target"] = rng.choice(classes, size=int(flip.sum()))
        else:
            s["target"] = np.round(s["target"] + frac * truth["target"].std() * rng.normal(size=len(s)), 6)
        out[f"perturbed_{k}"] = s.sample(frac=1.0, random_state=k).to_csv(index=False)
    out["missing_row"] = truth.iloc[1:].to_csv(index=False)
    out["wrong_column"] = truth.rename(columns={"target": "prediction"}).to_csv(index=False)
    return out


def main():
    base = install_base_shim()
    rng = np.random.default_rng(7)
    cases = []
    names = sorted(d for d in os.listdir(SUITE) if os.path.isfile(os.path.join(SUITE, d, "meta.json")))
    for name in names:
        comp_dir = os.path.join(SUITE, name)
        metric = load_metric(comp_dir, base)
        for label, text in submissions(comp_dir, rng).items():
            cases.append({"competition": name, "submission": label, "csv": text,
                          "expected": grade(comp_dir, metric, text)})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "envs/mledojo/mledojo_rules.py", "cases": cases}, f)
        f.write("\n")
    n_valid = sum(c["expected"]["valid"] for c in cases)
    print(f"wrote {os.path.normpath(OUT)}: {len(cases)} cases ({n_valid} valid) over {len(names)} competitions")


if __name__ == "__main__":
    main()
