#!/usr/bin/env python3
"""Why GRPO stops early: per-step training statistics and per-task learning
curves of a bench's runs, averaged over seeds (issue 41, point 1).

    scripts/plateau-diagnosis.py results/bench_paper/sparse [results/recipe_trials/nokl_const ...]
    scripts/plateau-diagnosis.py --eval OUT/eval.json   # after `wmrl eval ... --out OUT`

For each arm directory (holding seed*/metrics.jsonl and seed*/eval.jsonl,
as `wmrl bench` leaves them) it prints, at every `--every`th step and the
last: the batch's success rate, the share of groups whose outcomes are all
equal (flat: no advantage), the policy entropy, the KL to the reference,
the clip fraction, and the mean |advantage|; then the curve (greedy success
on the curve's validation states, per task) at each evaluation step. Only
files the runs wrote are read: nothing here runs a policy.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import tomllib


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else float("nan")


def arm_table(arm_dir, every):
    seeds = sorted(glob.glob(os.path.join(arm_dir, "seed*")))
    runs = []
    for s in seeds:
        m = os.path.join(s, "metrics.jsonl")
        if os.path.exists(m):
            # A run directory's settings are resolved: no `extends`
            # (run.toml; config.toml where an older wmrl wrote the run).
            rec = os.path.join(s, "run.toml")
            if not os.path.exists(rec):
                rec = os.path.join(s, "config.toml")
            with open(rec, "rb") as f:
                n_groups = tomllib.load(f)["rollout"]["n_groups"]
            runs.append((s, read_jsonl(m), n_groups))
    if not runs:
        print(f"{arm_dir}: no seed*/metrics.jsonl", file=sys.stderr)
        return
    n_steps = min(len(r) for _, r, _ in runs)
    print(f"## {arm_dir} ({len(runs)} seeds, {n_steps} steps)\n")
    print("| step | batch success | flat groups | entropy | KL to ref | clip frac | mean abs adv |")
    print("|---|---|---|---|---|---|---|")
    steps = sorted(set(list(range(0, n_steps, every)) + [n_steps - 1]))
    for k in steps:
        rows = [r[k] for _, r, _ in runs]
        flat = mean([row.get("flat_groups", 0) / n for row, (_, _, n) in zip(rows, runs)])
        print(
            f"| {k} | {mean([x.get('batch_success') for x in rows]):.3f} | {flat:.2f} "
            f"| {mean([x.get('entropy') for x in rows]):.3f} | {mean([x.get('kl_ref') for x in rows]):.4f} "
            f"| {mean([x.get('clip_frac') for x in rows]):.4f} | {mean([x.get('adv_abs_mean') for x in rows]):.3f} |"
        )
    print()
    curves = {}
    states = []
    for s, _, _ in runs:
        e = os.path.join(s, "eval.jsonl")
        if not os.path.exists(e):
            continue
        for rec in read_jsonl(e):
            if rec.get("split") == "curve" and rec.get("per_task"):
                curves.setdefault(rec["step"], []).append(rec["per_task"])
                states = rec.get("states", [])
    if curves:
        n_tasks = len(next(iter(curves.values()))[0])
        print(
            "Curve (greedy, validation states "
            + "-".join(str(x) for x in states)
            + "), success per task, mean over seeds:\n"
        )
        print("| step | " + " | ".join(f"task {t}" for t in range(n_tasks)) + " | all |")
        print("|---|" + "---|" * (n_tasks + 1))
        for step in sorted(curves):
            per = curves[step]
            cols = [mean([p[t] for p in per]) for t in range(n_tasks)]
            print(
                f"| {step} ({len(per)}) | "
                + " | ".join(f"{c:.2f}" for c in cols)
                + f" | {mean(cols):.3f} |"
            )
        print()


def failures(eval_json):
    """Where the failed episodes of a `wmrl eval` stop: the share of each
    task's failures by the oracle progress they end at (docs/sim.md: a
    placement goal counts 3 sub-steps, grasped, carried near, holds; an
    articulation goal 2; 0 is nothing achieved)."""
    d = json.load(open(eval_json))
    by_task = {}
    for e in d["episodes"]:
        by_task.setdefault(e["task"], []).append(e)
    print(f"## {eval_json}: failures by final progress\n")
    print("| task | success | failures | progress 0 | (0, 0.5) | [0.5, 1) |")
    print("|---|---|---|---|---|---|")
    for t in sorted(by_task):
        eps = by_task[t]
        fail = [e["final_progress"] for e in eps if not e["success"]]
        n = max(1, len(fail))
        zero = sum(1 for p in fail if p == 0) / n
        low = sum(1 for p in fail if 0 < p < 0.5) / n
        high = sum(1 for p in fail if p >= 0.5) / n
        ok = sum(e["success"] for e in eps) / len(eps)
        print(f"| {t} | {ok:.2f} | {len(fail)} | {zero:.2f} | {low:.2f} | {high:.2f} |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("arms", nargs="*", help="arm directories with seed*/ runs")
    ap.add_argument(
        "--eval",
        action="append",
        default=[],
        help="a `wmrl eval` eval.json: tabulate its failures by final progress",
    )
    ap.add_argument("--every", type=int, default=10, help="print every Nth step")
    a = ap.parse_args()
    for arm in a.arms:
        arm_table(arm, a.every)
    for e in a.eval:
        failures(e)


if __name__ == "__main__":
    main()
