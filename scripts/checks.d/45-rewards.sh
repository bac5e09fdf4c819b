#!/usr/bin/env bash
# The reward service for LLM trainers end to end: `wmrl autoresearch
# collect` and `fit-predictor --code` (the code world model from wmrl's own
# sandbox results), `serve-rewards` over HTTP on loopback, and the Python
# client with TRL's reward-function signature (envs/mledojo/wmrl_rewards.py).
# Needs the venv of scripts/setup.d/40-python-ml.sh and the wmrl binary that
# `cargo test --workspace --all-targets` built.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
.venv/bin/python envs/mledojo/rewards_check.py --wmrl "$bin"
