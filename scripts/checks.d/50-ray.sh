#!/usr/bin/env bash
# Ray, run for real: a local Ray instance (two CPUs), embedded-simulator
# workers as Ray actors, a short `wmrl train` through the endpoints they
# publish, one actor killed mid-run and restarted by Ray, every rollout
# counted once; then a real LIBERO worker as a Ray actor serving a short
# evaluation (envs/ray/check.py). Loopback only: every TCP listener of the
# processes the check starts must be bound to 127.0.0.1, or it fails.
# Needs envs/ray/.venv (scripts/setup.d/50-ray.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export MUJOCO_GL="${MUJOCO_GL:-egl}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
# Without it Ray binds the machine's network address even when told
# 127.0.0.1 (envs/ray/README.md); check.py sets it too.
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
envs/ray/.venv/bin/python envs/ray/check.py --wmrl "$bin"
