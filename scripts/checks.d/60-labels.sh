#!/usr/bin/env bash
# The label page in real browsers (docs/labels.md): a three-step run whose
# anchor labels people give (`labels.source = "human"`), labelled through
# the page with keyboard and mouse from the simulator's hidden flag, in
# headless Chromium (the trainer and the page server killed and restarted
# half-way) and then headless Firefox; it must end with the simulator-label
# run's metrics, every label used once. Screenshots are kept in $WMRL_ARTIFACTS/labels (default
# runs/artifacts/labels). The browsers and their drivers come from
# scripts/setup.d/80-browser.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/debug/wmrl
[ -x "$bin" ] || cargo build -q -p wmrl-cli
art=${WMRL_ARTIFACTS:-runs/artifacts}/labels
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
/usr/bin/python3 scripts/lib/label_page_test.py "$bin" "$root" "$art"
