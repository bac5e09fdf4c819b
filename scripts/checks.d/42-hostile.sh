#!/usr/bin/env bash
# Hostile solutions through `wmrl autoresearch run`, the MLE-Dojo server and
# `serve-rewards`: a submission left as a symbolic link to the answer key or
# to a host file scores no more than a runtime error on every competition, no
# reason quotes a host file, and a submission at the size limit keeps the
# grader's memory within a few times that limit (envs/mledojo/hostile_check.py).
# Needs the venv of scripts/setup.d/40-python-ml.sh and the wmrl binary that
# `cargo test --workspace --all-targets` built.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
.venv/bin/python envs/mledojo/hostile_check.py --wmrl "$bin"
