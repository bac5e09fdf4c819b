#!/usr/bin/env python3
"""Compare two wmrl run directories (robot or AutoResearch) for replay.

    python3 scripts/compare-runs.py RUN_A RUN_B

Every file under checkpoint/ but state.json (policy and optimiser
weights) must be byte-identical. The record files (metrics.jsonl,
eval.jsonl, calibration.jsonl, refits.jsonl) and summary.json must hold
the same values line by line once clock readings are left out: every key
ending in `seconds` or `secs` (the ledger's timings among them), `elapsed`
and `wall`. A key present on one side only (a field one binary writes and
the other does not) is listed apart and does not fail the comparison.
Not compared: checkpoint/state.json (the ledger's clocks beside the
method's state; an AutoResearch run keeps its policy there) and
diagnostics.json. Exit status: 0 when the runs replay each other, 1
otherwise.
"""
import hashlib
import json
import re
import sys
from pathlib import Path

RECORDS = ["metrics.jsonl", "eval.jsonl", "calibration.jsonl", "refits.jsonl"]


def is_clock(key):
    k = key.lower()
    return k.endswith("seconds") or k.endswith("secs") or k in {"elapsed", "wall"}


def strip(v, only, path=""):
    """v without clock readings; keys present on one side go to `only`."""
    if isinstance(v, dict):
        return {k: strip(x, only, f"{path}.{k}") for k, x in v.items() if not is_clock(k)}
    if isinstance(v, list):
        return [strip(x, only, f"{path}[{i}]") for i, x in enumerate(v)]
    return v


def diff(a, b, path, out, only):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                only.add(f"{path}.{k}".lstrip(".") + (" (A only)" if k in a else " (B only)"))
            else:
                diff(a[k], b[k], f"{path}.{k}", out, only)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out, only)
    elif a != b:
        out.append(f"{path.lstrip('.')}: {json.dumps(a)[:80]} against {json.dumps(b)[:80]}")


def digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main(a, b):
    a, b = Path(a), Path(b)
    bad, only, same = [], set(), []
    for ck in sorted({p.relative_to(a) for p in (a / "checkpoint").rglob("*") if p.is_file()}
                     | {p.relative_to(b) for p in (b / "checkpoint").rglob("*") if p.is_file()}):
        if ck.name == "state.json":
            continue
        pa, pb = a / ck, b / ck
        if not pa.exists() or not pb.exists():
            bad.append(f"{ck}: on one side only")
        elif digest(pa) != digest(pb):
            bad.append(f"{ck}: bytes differ")
        else:
            same.append(str(ck))
    for name in RECORDS + ["summary.json"]:
        pa, pb = a / name, b / name
        if not pa.exists() and not pb.exists():
            continue
        if not pa.exists() or not pb.exists():
            bad.append(f"{name}: on one side only")
            continue
        if name.endswith(".jsonl"):
            la = [json.loads(l) for l in pa.read_text().splitlines() if l.strip()]
            lb = [json.loads(l) for l in pb.read_text().splitlines() if l.strip()]
            if len(la) != len(lb):
                bad.append(f"{name}: {len(la)} lines against {len(lb)}")
                continue
            out = []
            for i, (x, y) in enumerate(zip(la, lb)):
                diff(strip(x, only), strip(y, only), f"{name}:{i + 1}", out, only)
        else:
            out = []
            diff(strip(json.loads(pa.read_text()), only), strip(json.loads(pb.read_text()), only),
                 name, out, only)
        bad.extend(out)
        if not out:
            same.append(name)
    print(f"same: {', '.join(same)}")
    for o in sorted({re.sub(r"(:\d+|\[\d+\])", "", o) for o in only}):
        print(f"key on one side only (not compared): {o}")
    for x in bad[:40]:
        print(f"DIFFERS {x}")
    if len(bad) > 40:
        print(f"... {len(bad) - 40} more")
    print("replay: identical" if not bad else f"replay: {len(bad)} differences")
    return 0 if not bad else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
