#!/usr/bin/env bash
# Ray (PyPI) in envs/ray/.venv for the simulator-worker launcher
# (envs/ray/launch.py) and its CI check (scripts/checks.d/50-ray.sh).
# Rebuilt only when envs/ray/requirements.txt changes, so CI can cache it.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=envs/ray/.venv
req=envs/ray/requirements.txt
source scripts/lib/venv.sh
stamp=.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
venv_current "$venv" "$stamp" "$want" && exit 0
venv_build "$venv" python3 "$req" "$stamp" "$want"
echo "ray venv: $venv ($("$venv/bin/python" -c 'import ray; print(ray.__version__)'))"
