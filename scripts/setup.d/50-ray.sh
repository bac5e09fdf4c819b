#!/usr/bin/env bash
# Ray (PyPI) in envs/ray/.venv for the simulator-worker launcher
# (envs/ray/launch.py) and its CI check (scripts/checks.d/50-ray.sh).
# Rebuilt only when envs/ray/requirements.txt changes, so CI can cache it.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=envs/ray/.venv
req=envs/ray/requirements.txt
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
echo "$want" > "$stamp"
echo "ray venv: $venv ($("$venv/bin/python" -c 'import ray; print(ray.__version__)'))"
