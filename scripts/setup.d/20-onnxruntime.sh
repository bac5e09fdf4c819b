#!/usr/bin/env bash
# The ONNX Runtime shared library for the world model (crates/wmrl-worldmodel)
# and the Python onnxruntime used by the parity check, both from the PyPI
# wheel (Debian has no onnxruntime package; ort's own download needs a CDN).
# Installs into .cache/onnxruntime (git-ignored); the crate finds the library
# there on its own. numpy goes beside it for the Python parity script.
set -euo pipefail
cd "$(dirname "$0")/../.."
ORT_VERSION=1.31.1
dest=.cache/onnxruntime
lib="$dest/onnxruntime/capi/libonnxruntime.so.$ORT_VERSION"
if [ ! -f "$lib" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$dest" "onnxruntime==$ORT_VERSION"
fi
# numpy for the Python side of the parity check (onnxruntime's one hard need).
if ! PYTHONPATH="$dest" python3 -c "import numpy" >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$dest" "numpy>=1.26,<3"
fi
test -f "$lib"
echo "onnxruntime $ORT_VERSION: $lib"
