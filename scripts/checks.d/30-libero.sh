#!/usr/bin/env bash
# The real LIBERO server through the wmrl-bridge pool: handshake, reset task 0
# at init state 0, 20 steps with non-blank 128x128 frames and no success, then
# kill -9 the server and check that the pool reports it; and two supervised
# LIBERO workers of one slot each (no spare slot), one killed mid-step: the
# step waits for it to start again and restarts its episode alone. Needs the
# venv that scripts/setup.d/30-libero.sh builds (envs/libero/.venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
export MUJOCO_GL="${MUJOCO_GL:-egl}"
cargo test -p wmrl-bridge --test libero -- --ignored --nocapture
