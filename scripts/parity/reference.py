#!/usr/bin/env python3
"""An independent numpy implementation of the WMRL correction loop, written
from shared/METHOD.md (docs/method.md restates it), that writes the parity
fixture crates/wmrl-core/tests/fixtures/reference_parity.json.

    python3 scripts/parity/reference.py      # needs numpy (e.g. .venv/bin/python)

The fixture holds recorded anchor streams (world-model scores, real outcomes,
group boundaries and which groups are anchors) and, after every step, what
the method must produce: the calibration map's knots, how many fits ran, the
mean anchor disagreement, the anchor weight and every rollout's advantage.
`cargo test -p wmrl-core --test parity` replays the streams through
`CorrectionLoop::step_with_anchors` and compares.

The method as implemented here (the reference's behaviour):
- calibration: pairs enter a FIFO buffer (cap) one at a time; the first fit
  fires on the pair that brings the buffer to min_pairs, later ones on every
  refit_every-th new pair; a fit that finds fewer than two occupied bins keeps
  the previous map (identity before any) and, while no map exists, the next
  pair retries. Fit: `bins` equal-width bins over a fixed [lo, hi] (scores
  outside fall into the end bins), mean x and mean y per non-empty bin, PAV on
  the bin means weighted by counts, the map linear between bin-mean points
  and flat beyond (numpy.interp);
- order: anchor groups are pushed and measured group by group (in the order
  given); disagreement
  s2 = mean(((d - mean d) - (s - mean s))^2) / var(s) on the graded rollouts,
  d = f(r_wm) with the map after the group's own push; skipped when
  var(s) < min_var or fewer than two graded rollouts;
- weight: EMA of s2 with alpha = 1 - 0.5^(1/half_life), started at the first
  s2; once warmup groups have been observed and the EMA is above 1e-12,
  c = (target - 1) / ema is fixed; w = clip(1 + c * ema, 1, w_max), 1 before.
  The weight used for a step's anchor advantages is the one after that step's
  anchor groups were observed;
- advantages: per group over graded rollouts, (r - mean) / (std + eps) with
  the population std; fewer than min_graded graded rollouts: the group is
  skipped (no advantages); anchor groups use the real outcomes times w,
  other groups the calibrated world-model scores f(r_wm) with the map at the
  end of the step's pushes, weight 1.
"""

import json
import math
import os
import sys

import numpy as np

OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..", "..", "crates", "wmrl-core", "tests", "fixtures", "reference_parity.json",
)


class Calibration:
    def __init__(self, bins, min_pairs, refit_every, cap, lo, hi):
        self.bins, self.min_pairs, self.refit_every, self.cap = bins, min_pairs, refit_every, cap
        self.lo, self.hi = lo, hi
        self.xs, self.ys = [], []
        self.new = 0
        self.knots = None
        self.fits = 0

    def push_one(self, x, y):
        self.xs.append(x)
        self.ys.append(y)
        if len(self.xs) > self.cap:
            self.xs.pop(0)
            self.ys.pop(0)
        self.new += 1
        if len(self.xs) >= self.min_pairs and (self.knots is None or self.new >= self.refit_every):
            self.fit()

    def fit(self):
        self.new = 0
        x = np.asarray(self.xs)
        y = np.asarray(self.ys)
        width = (self.hi - self.lo) / self.bins
        b = np.clip(np.floor((x - self.lo) / width), 0, self.bins - 1).astype(int)
        cnt = np.bincount(b, minlength=self.bins)
        sx = np.bincount(b, weights=x, minlength=self.bins)
        sy = np.bincount(b, weights=y, minlength=self.bins)
        keep = cnt > 0
        if keep.sum() < 2:
            return
        bx = sx[keep] / cnt[keep]
        by = sy[keep] / cnt[keep]
        self.knots = (bx, pav(by, cnt[keep].astype(float)))
        self.fits += 1

    def apply(self, x):
        x = np.asarray(x, dtype=float)
        if self.knots is None:
            return x
        return np.interp(x, self.knots[0], self.knots[1])


def pav(y, w):
    """Weighted pool-adjacent-violators: the non-decreasing least-squares fit."""
    vals, wts, lens = [], [], []
    for yi, wi in zip(y, w):
        vals.append(float(yi))
        wts.append(float(wi))
        lens.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / (wts[-2] + wts[-1])
            wt, ln = wts[-2] + wts[-1], lens[-2] + lens[-1]
            del vals[-1], wts[-1], lens[-1]
            vals[-1], wts[-1], lens[-1] = v, wt, ln
    return np.repeat(vals, lens)


class Weight:
    def __init__(self, half_life, warmup, target, w_max):
        self.alpha = 1.0 - 0.5 ** (1.0 / half_life)
        self.warmup, self.target, self.w_max = warmup, target, w_max
        self.ema = None
        self.n = 0
        self.c = None

    def observe(self, s2):
        self.ema = s2 if self.ema is None else self.ema + self.alpha * (s2 - self.ema)
        self.n += 1
        if self.c is None and self.n >= self.warmup and self.ema > 1e-12:
            self.c = (self.target - 1.0) / self.ema

    def weight(self):
        if self.c is None:
            return 1.0
        return float(np.clip(1.0 + self.c * self.ema, 1.0, self.w_max))


def disagreement(d, s, min_var):
    d, s = np.asarray(d), np.asarray(s)
    vs = s.var()
    if vs < min_var:
        return None
    return float((((d - d.mean()) - (s - s.mean())) ** 2).mean() / vs)


def advantages(rewards, w, eps, min_graded):
    graded = np.array([r for r in rewards if r is not None], dtype=float)
    if len(graded) < max(min_graded, 1):
        return [None] * len(rewards)
    m, sd = graded.mean(), graded.std()
    return [None if r is None else float(w * (r - m) / (sd + eps)) for r in rewards]


def run_stream(cfg, steps):
    cal = Calibration(cfg["bins"], cfg["min_pairs"], cfg["refit_every"], cfg["cap"], *cfg["range"])
    wt = Weight(cfg["half_life_groups"], cfg["warmup_groups"], cfg["target_weight"], cfg["w_max"])
    out = []
    for st in steps:
        wm, real, anchors = st["wm"], st["real"], st["anchors"]
        dis = []
        for g, r in zip(anchors, real):
            pairs = [(x, y) for x, y in zip(wm[g], r) if y is not None]
            for x, y in pairs:
                cal.push_one(x, y)
            if len(pairs) < 2:
                continue
            xs = [p[0] for p in pairs]
            ys = [p[1] for p in pairs]
            s2 = disagreement(cal.apply(xs), ys, cfg["min_var"])
            if s2 is not None:
                dis.append(s2)
                wt.observe(s2)
        w = wt.weight() if len(anchors) < len(wm) else 1.0
        real_of = dict(zip(anchors, real))
        adv = []
        for g, scores in enumerate(wm):
            if g in real_of:
                adv.append(advantages(real_of[g], w, cfg["adv_eps"], cfg["min_graded"]))
            else:
                f = cal.apply(scores)
                adv.append(advantages(list(map(float, f)), 1.0, cfg["adv_eps"], cfg["min_graded"]))
        knots = cal.knots
        out.append({
            "advantages": adv,
            "weight": w,
            "disagreement": float(np.mean(dis)) if dis else None,
            "n_fits": cal.fits,
            "knots_x": [] if knots is None else [float(v) for v in knots[0]],
            "knots_y": [] if knots is None else [float(v) for v in knots[1]],
        })
    return out


def config(**kw):
    c = dict(bins=10, min_pairs=200, refit_every=64, cap=5000, range=[0.0, 1.0],
             half_life_groups=64.0, warmup_groups=32, target_weight=2.0, w_max=4.0,
             min_var=1e-9, adv_eps=1e-4, min_graded=2)
    c.update(kw)
    return c


def make_steps(rng, n_steps, n_groups, group_size, n_anchor, draw):
    steps = []
    for t in range(n_steps):
        anchors = sorted(rng.choice(n_groups, size=n_anchor, replace=False).tolist())
        wm, real = [], []
        for g in range(n_groups):
            x, y = draw(rng, t, group_size)
            wm.append([float(v) for v in x])
            real.append(y)
        steps.append({
            "group_sizes": [group_size] * n_groups,
            "anchors": anchors,
            "wm": wm,
            "real": [real[g] for g in anchors],
        })
    return steps


def robot(rng, t, n):
    # 0/1 outcomes; potential-like scores in [-1, 1], some below 0 (they all
    # fall into the first of the bins over [0, 1]).
    p = rng.uniform(0.05, 0.7)
    y = (rng.uniform(size=n) < p).astype(float)
    x = np.clip(0.45 * y + rng.normal(0.05, 0.3, size=n), -1.0, 1.0)
    real = [float(v) for v in y]
    if rng.uniform() < 0.1:
        real[int(rng.integers(n))] = None  # an ungraded rollout
    return x, real


def ladder(rng, t, n):
    # AutoResearch rewards: 0 / 0.1 / 0.2 / 0.5 + 0.5 * position, the world
    # model's bias drifting over the run.
    kind = rng.choice(4, size=n, p=[0.05, 0.1, 0.25, 0.6])
    pos = rng.uniform(size=n)
    y = np.where(kind == 0, 0.0, np.where(kind == 1, 0.1, np.where(kind == 2, 0.2, 0.5 + 0.5 * pos)))
    bias = 0.15 * math.sin(t / 3.0) - 0.2 * (y - 0.5) ** 2
    x = np.clip(y + bias + rng.normal(0, 0.08, size=n), 0.0, 1.0)
    return x, [float(v) for v in y]


def narrow(rng, t, n):
    # A narrow band of scores, rounded to 0.01: few occupied bins and ties.
    y = rng.uniform(size=n)
    x = np.round(0.45 + 0.1 * y + rng.normal(0, 0.01, size=n), 2)
    if rng.uniform() < 0.15:
        y = np.full(n, 0.5)  # a flat anchor group: no ranking information
    return x, [float(v) for v in y]


def main():
    rng = np.random.default_rng(20261201)
    streams = []
    specs = [
        ("robot_paper_defaults", config(), (20, 16, 8, 4, robot)),
        ("robot_small_scale", config(min_pairs=24, refit_every=8, warmup_groups=4,
                                     half_life_groups=16.0, range=[-1.0, 1.0]),
         (12, 8, 8, 2, robot)),
        ("autoresearch_ladder_drift", config(min_pairs=24, refit_every=8, warmup_groups=4,
                                             half_life_groups=16.0, cap=64),
         (16, 8, 4, 2, ladder)),
        ("narrow_rounded_band", config(min_pairs=16, refit_every=5, warmup_groups=3,
                                       half_life_groups=8.0), (10, 6, 6, 2, narrow)),
    ]
    for name, cfg, (n_steps, n_groups, size, n_anchor, draw) in specs:
        steps = make_steps(rng, n_steps, n_groups, size, n_anchor, draw)
        expected = run_stream(cfg, steps)
        for st, ex in zip(steps, expected):
            st["expected"] = ex
        streams.append({"name": name, "config": cfg, "steps": steps})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "scripts/parity/reference.py", "streams": streams}, f)
        f.write("\n")
    print(f"wrote {os.path.normpath(OUT)}: {len(streams)} streams", file=sys.stderr)


if __name__ == "__main__":
    main()
