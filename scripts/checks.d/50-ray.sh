#!/usr/bin/env bash
# Ray, run for real: a local Ray instance (two CPUs), embedded-simulator
# workers as Ray actors, a short `wmrl train` through the endpoints they
# publish, one actor killed mid-run and restarted by Ray, every rollout
# counted once; then a real LIBERO worker as a Ray actor serving a short
# evaluation (envs/ray/check.py). Needs envs/ray/.venv (scripts/setup.d/50-ray.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export MUJOCO_GL="${MUJOCO_GL:-egl}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
envs/ray/.venv/bin/python envs/ray/check.py --wmrl "$bin"
