#!/usr/bin/env bash
# scripts/gpu-train-check at test sizes on CPU: the GPU check's every step
# (build, kernels, stand-in MiniVLA, `wmrl train` with MiniVLA and `tiny`,
# the figures it prints), so the script is ready when a GPU is lent.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/gpu-train-check --device cpu
