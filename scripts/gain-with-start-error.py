#!/usr/bin/env python3
"""An arm's gain over the start with the start's own sampling error counted.

`wmrl bench` pairs every seed of an arm with the start (the shared SFT
policy, evaluated once) and gives the gain a Student-t interval over seeds.
That interval treats the start's rate as exact; it is itself a binomial
estimate from one evaluation. This script reads a bench directory's
summaries (`start/summary.json`, `<arm>/seed<k>/summary.json`) and prints
both intervals: over seeds only, and widened by the start's error (the two
95% half-widths added in quadrature: the seeds' t half-width and the start's
normal half-width 1.96 * sqrt(p (1 - p) / n)).

    python3 scripts/gain-with-start-error.py results/bench_minivla sparse
    python3 scripts/gain-with-start-error.py DIR ARM --measure heldout
"""

import argparse
import json
import math
import pathlib
import sys

# Student-t 97.5% quantiles, df 1..30 (beyond: 1.96).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def rate(summary, measure, where):
    m = summary.get(measure)
    if not m or not m.get("episodes"):
        sys.exit(f"{where}: no `{measure}` measure with episodes")
    return m["rate"], m["episodes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", type=pathlib.Path)
    ap.add_argument("arm")
    ap.add_argument("--measure", default="heldout_sampled",
                    choices=["heldout_sampled", "heldout"])
    a = ap.parse_args()
    start_file = a.bench / "start" / "summary.json"
    if not start_file.exists():
        sys.exit(f"{start_file}: missing (the bench's start was not evaluated)")
    p0, n0 = rate(json.loads(start_file.read_text()), a.measure, start_file)
    seeds = sorted((a.bench / a.arm).glob("seed*/summary.json"),
                   key=lambda f: int(f.parent.name[4:]))
    if len(seeds) < 2:
        sys.exit(f"{a.bench / a.arm}: {len(seeds)} finished seeds; an interval needs 2")
    gains = [rate(json.loads(f.read_text()), a.measure, f)[0] - p0 for f in seeds]
    k = len(gains)
    mean = sum(gains) / k
    sd = math.sqrt(sum((g - mean) ** 2 for g in gains) / (k - 1))
    t = T975[k - 2] if k - 1 <= len(T975) else 1.96
    h_seeds = t * sd / math.sqrt(k)
    h_start = 1.96 * math.sqrt(p0 * (1 - p0) / n0)
    h_both = math.hypot(h_seeds, h_start)
    pts = lambda x: f"{100 * x:+.1f}"
    print(f"{a.arm} - start, {a.measure}, {k} seeds; start {100 * p0:.1f}% of {n0} episodes")
    print(f"gain {pts(mean)} points")
    print(f"  over seeds only (start exact):    [{pts(mean - h_seeds)}, {pts(mean + h_seeds)}]")
    print(f"  with the start's sampling error:  [{pts(mean - h_both)}, {pts(mean + h_both)}]")
    print("  resolved" if mean - h_both > 0 or mean + h_both < 0 else "  not resolved once the start's error is counted")


if __name__ == "__main__":
    main()
