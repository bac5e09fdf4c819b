#!/usr/bin/env bash
# System packages every component needs; apt runs only when one is missing.
set -euo pipefail
need=()
for pkg in build-essential pkg-config libfontconfig1-dev fonts-dejavu-core; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
