#!/usr/bin/env bash
# Same seeds, same numbers: a short pipeline (demonstrations, world-model
# training and ONNX export, a `wmrl` GRPO run scored by that world model)
# runs twice in separate processes, and every output file must be the same,
# byte for byte, except the fields that hold wall-clock times (`*seconds*`,
# `created_at`, and the checkpoint's byte offsets into the JSONL files that
# hold them), which are compared after dropping them. Thread counts are
# as the quickstart uses them (RAYON_NUM_THREADS=1 per run).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
export RAYON_NUM_THREADS=1
# Both runs use the same paths (the run's run.toml names them), then move.
for k in a b; do
  d="$root/work"
  "$bin" demos --tasks 0,1 --per-task 2 --init-states 0-15 --noise 0.3 --image-size 128 \
    --seed 5 --out "$d/roll" >/dev/null 2>&1
  "$bin" wm train --rollouts "$d/roll" --out "$d/wm" --steps 30 >/dev/null 2>&1
  "$bin" wm export --model "$d/wm" >/dev/null 2>&1
  "$bin" train --quiet --config configs/grpo_sim.toml --arm wmrl --steps 2 --world-model "$d/wm/model.onnx" \
    --set rollout.n_groups=4 --set rollout.group_size=4 --set rollout.max_steps=40 \
    --set eval.every=0 --set eval.at_start=false --set 'eval.tasks=[0]' --set 'eval.init_states=[16,17]' \
    --set eval.in_domain=false --set wmrl.calibration.min_pairs=4 --set wmrl.calibration.refit_every=4 \
    --out "$d/run" >/dev/null 2>&1
  mv "$d" "$root/$k"
done
python3 - "$root/a" "$root/b" <<'PY'
import json, os, sys
a, b = sys.argv[1], sys.argv[2]

def strip(v):
    if isinstance(v, dict):
        # *_len in checkpoint/state.json: byte lengths of the JSONL files,
        # which hold the wall-clock fields.
        return {k: strip(x) for k, x in v.items()
                if "seconds" not in k and k != "created_at" and not k.endswith("_len")}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v

def parsed(path):
    text = open(path, encoding="utf-8").read()
    if path.endswith(".jsonl"):
        return [strip(json.loads(l)) for l in text.splitlines() if l.strip()]
    return strip(json.loads(text))

files = sorted(os.path.relpath(os.path.join(r, f), a) for r, _, fs in os.walk(a) for f in fs)
other = sorted(os.path.relpath(os.path.join(r, f), b) for r, _, fs in os.walk(b) for f in fs)
assert files == other, (set(files) ^ set(other))
same = timed = 0
for f in files:
    pa, pb = os.path.join(a, f), os.path.join(b, f)
    if open(pa, "rb").read() == open(pb, "rb").read():
        same += 1
        continue
    assert f.endswith((".json", ".jsonl")), f"{f} differs between two runs with the same seeds"
    assert parsed(pa) == parsed(pb), f"{f} differs beyond its wall-clock fields"
    timed += 1
print(f"determinism: {len(files)} files, {same} identical, {timed} identical but for wall-clock fields")
PY
