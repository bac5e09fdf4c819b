#!/usr/bin/env bash
# No function in crates/ or kernels/ over 120 lines outside tests and
# generated protobuf code (issue 31: functions a reader can hold).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 scripts/fn-lengths.py --max 120
echo "fn-lengths: every function within 120 lines"
