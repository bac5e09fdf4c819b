#!/usr/bin/env bash
# Datasets in and out (envs/datasets, docs/datasets.md): LIBERO HDF5 and
# LeRobot v3 fixtures written with h5py and pyarrow in the published
# layouts, plus one written by LeRobot's own writer, imported and compared
# field by field; `wmrl episodes` and a 3-step `wmrl sft` on the imported
# LIBERO demos; native demos exported to LeRobot v3 (video and images), read
# back by the LeRobot package's LeRobotDataset, re-imported and compared;
# truncated inputs refused cleanly. Needs envs/datasets/.venv
# (scripts/setup.d/70-datasets.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
py=envs/datasets/.venv/bin/python
if [ ! -x "$py" ]; then
  echo "error: $py missing: run scripts/setup.d/70-datasets.sh" >&2
  exit 1
fi
"$py" envs/datasets/check.py --wmrl "$bin"
