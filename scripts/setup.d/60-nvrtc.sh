#!/usr/bin/env bash
# NVRTC (CUDA's runtime compiler) from PyPI into .cache/nvrtc, so the tests
# compile every CUDA kernel (kernels/*.cu) to PTX on this CPU-only machine;
# scripts/test puts its lib on LD_LIBRARY_PATH. No GPU or driver is needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.cache/nvrtc
want="nvidia-cuda-nvrtc-cu12==12.9.86"
if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$want" ]; then
  exit 0
fi
rm -rf "$dir"
python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir" "$want"
echo "$want" > "$dir/.installed"
ls "$dir"/nvidia/cuda_nvrtc/lib/
