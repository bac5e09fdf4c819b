#!/usr/bin/env bash
# Python onnxruntime loads the world model's exported ONNX files and matches
# the candle outputs recorded beside them to 1e-4: the shipped
# models/progress-tiny and the fresh export the Rust parity test leaves in
# target/wm-parity (cargo test runs before the checks).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=".cache/onnxruntime${PYTHONPATH:+:$PYTHONPATH}"
dirs=()
for d in models/progress-tiny target/wm-parity; do
  [ -f "$d/model.onnx" ] && [ -f "$d/parity.json" ] && dirs+=("$d")
done
if [ ${#dirs[@]} -eq 0 ]; then
  echo "wm-parity: no exported model with parity.json found" >&2
  exit 1
fi
python3 crates/wmrl-worldmodel/python/parity.py "${dirs[@]}"
