#!/usr/bin/env bash
# The MLE-Dojo-vocabulary server (envs/mledojo/server.py) driven through every
# action by a client over ZeroMQ (ipc, loopback only), with wmrl's sandbox and
# grader behind it. Needs the venv of scripts/setup.d/40-python-ml.sh and the
# wmrl binary that `cargo test --workspace --all-targets` built.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
.venv/bin/python envs/mledojo/client_check.py --wmrl "$bin"
