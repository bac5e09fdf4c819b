#!/usr/bin/env bash
# Dataset import/export (envs/datasets): a Python venv at envs/datasets/.venv
# with the pinned h5py, pyarrow, msgpack, numpy, pillow, PyAV and the LeRobot
# dataset package (lerobot-dataset, with torch from PyPI) of
# envs/datasets/requirements.txt. lerobot-dataset needs Python >= 3.12: the
# first of python3.13, python3.12 (PATH, then pyenv's versions) that runs is
# used. Idempotent: the venv is rebuilt only when the requirements file or the
# interpreter changed (about 8 GB, most of it torch's CUDA libraries).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=envs/datasets/.venv
req=envs/datasets/requirements.txt
base=""
for cand in python3.13 python3.12 \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3 \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3; do
  if "$cand" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
    base=$("$cand" -c 'import sys; print(sys.executable)')
    break
  fi
done
if [ -z "$base" ]; then
  echo "error: envs/datasets needs Python >= 3.12 with venv and ensurepip (lerobot-dataset requires it); none found among python3.13, python3.12 and ${PYENV_ROOT:-$HOME/.pyenv}/versions/3.1[23]*. Install one (e.g. pyenv install 3.12) and run scripts/setup again; ./scripts/quickstart does not need it." >&2
  exit 1
fi
source scripts/lib/venv.sh
stamp=.requirements.sha256
want="$(sha256sum "$req" | cut -d' ' -f1) $base"
venv_current "$venv" "$stamp" "$want" && exit 0
venv_build "$venv" "$base" "$req" "$stamp" "$want" \
  "h5py, pyarrow, msgpack, numpy, PIL, av, ledataset.datasets.lerobot_dataset"
echo "datasets venv: $venv ($("$base" --version), lerobot-dataset $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lerobot-dataset"))'))"
