"""Regenerate tests/fixtures/isotonic_sklearn.json: scikit-learn's
IsotonicRegression (increasing, out_of_bounds="clip") on seeded inputs, the
reference the exact calibration mode must match to 1e-9.

    python3 -m pip install scikit-learn numpy
    python3 crates/wmrl-core/scripts/make_isotonic_fixtures.py
"""
import json
import os

import numpy as np
import sklearn
from sklearn.isotonic import IsotonicRegression

rng = np.random.default_rng(20261130)
cases = []
for i in range(12):
    n = int(rng.integers(5, 400))
    kind = i % 4
    x = rng.uniform(-1, 1, n)
    if kind == 1:  # heavy ties in x
        x = np.round(x * 4) / 4
    if kind == 3:  # binary outcomes, like robot success
        y = (rng.uniform(0, 1, n) < (x + 1) / 2).astype(float)
    else:
        y = np.tanh(2 * x) + rng.normal(0, 0.4, n)
    w = rng.uniform(0.2, 3.0, n) if kind == 2 else np.ones(n)
    probes = np.concatenate([rng.uniform(-1.5, 1.5, 50), x[:10]])
    iso = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x, y, sample_weight=w)
    cases.append({
        "x": x.tolist(), "y": y.tolist(), "w": w.tolist(),
        "probes": probes.tolist(), "expected": iso.predict(probes).tolist(),
    })

out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "isotonic_sklearn.json")
with open(out, "w") as f:
    json.dump({"sklearn_version": sklearn.__version__, "cases": cases}, f)
print(f"wrote {len(cases)} cases to {out}")
