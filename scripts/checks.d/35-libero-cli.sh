#!/usr/bin/env bash
# The real LIBERO simulator from the CLI, with workers wmrl starts and
# supervises itself (env.backend = "libero"): a one-step GRPO run
# (configs/libero_ci.toml: two workers, 2 groups x 2 rollouts of 30 steps,
# world-model scoring of the real frames, a two-episode evaluation) and a
# two-episode `wmrl eval --backend libero`; then the same two with a worker
# killed (SIGKILL) while busy: both complete, the worker is started again,
# every episode counts once and the evaluation's results are unchanged
# (crates/wmrl-cli/tests/worker_faults.rs); and the shipped small MiniVLA
# (models/minivla-small) trained one step there, exported and evaluated. Needs envs/libero/.venv
# (scripts/setup.d/30-libero.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export MUJOCO_GL="${MUJOCO_GL:-egl}"
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" train --quiet --config configs/libero_ci.toml --out "$out/train"
python3 - "$out/train/metrics.jsonl" "$out/train/eval.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
assert len(m) == 1, m
l = m[0]["ledger"]
assert m[0]["labels_used"] == 2 and l["wm_rollouts"] >= 2 and l["sim_steps"] > 0, m[0]
assert m[0]["wm_score_mean"] is not None
e = [json.loads(l) for l in open(sys.argv[2])]
assert e[-1]["episodes"] == 2, e
print(f"libero train: 1 step, {l['sim_steps']} real LIBERO steps, {l['wm_rollouts']} world-model scores, "
      f"{m[0]['labels_used']} labels, a {e[-1]['episodes']}-episode evaluation")
PY
"$bin" eval --policy models/policy-tiny --backend libero --libero-workers 2 --num-envs 2 \
  --tasks 0 --init-states 0-1 --max-steps 30 --gifs 0 --out "$out/eval"
python3 -c "
import json,sys
r=json.load(open('$out/eval/eval.json'))
eps=r['episodes']
assert len(eps)==2 and all(e['steps']==30 or e['success'] for e in eps), eps
print('libero eval: 2 episodes,', sum(e['steps'] for e in eps), 'steps')
"
# MiniVLA on real LIBERO (configs/libero_minivla_ci.toml): the shipped small
# MiniVLA, one GRPO step of its LoRA adapters and a two-episode evaluation
# through the same workers.
"$bin" train --quiet --config configs/libero_minivla_ci.toml --out "$out/minivla-train"
python3 - "$out/minivla-train" <<'PY'
import json, os, sys
d = sys.argv[1]
m = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
assert len(m) == 1 and m[0]["labels_used"] == 2 and m[0]["ledger"]["sim_steps"] > 0, m
assert os.path.exists(os.path.join(d, "checkpoint", "adapters.safetensors"))
e = [json.loads(l) for l in open(os.path.join(d, "eval.jsonl"))]
assert e[-1]["episodes"] == 2, e
print(f"libero minivla train: 1 step, {m[0]['ledger']['sim_steps']} real LIBERO steps, "
      f"{m[0]['samples_updated']} steps in the update, grad norm {m[0]['grad_norm']:.3g}")
PY
"$bin" export --run "$out/minivla-train" --out "$out/minivla-merged"
"$bin" eval --policy "$out/minivla-merged" --backend libero --libero-workers 2 --num-envs 2 \
  --tasks 0 --init-states 0-1 --max-steps 10 --gifs 0 --out "$out/minivla-eval"
python3 -c "
import json
r=json.load(open('$out/minivla-eval/eval.json'))
assert len(r['episodes'])==2, r['episodes']
print('libero minivla eval of the merged export: 2 episodes,', sum(e['steps'] for e in r['episodes']), 'steps')
"
cargo test -p wmrl-cli --test worker_faults -- --ignored --nocapture
