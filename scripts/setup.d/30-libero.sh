#!/usr/bin/env bash
# Real LIBERO server (envs/libero): Debian GL libraries for offscreen
# rendering, and a Python venv at envs/libero/.venv with the pinned
# requirements. The venv (~0.8 GB download) is created only when missing or
# when requirements.txt changed since it was built, so CI can cache it.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
for pkg in libosmesa6 libegl1 libgl1-mesa-dri libgl1 libglib2.0-0; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
venv=envs/libero/.venv
req=envs/libero/requirements.txt
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$req"
echo "$want" > "$stamp"
