#!/usr/bin/env bash
# AutoResearch track (crates/wmrl-autoresearch, envs/mledojo): bubblewrap for
# the sandbox (network/pid/mount namespaces; the crate falls back to
# `unshare -n` or rlimits only where it is missing, see docs/autoresearch.md)
# and a Python venv at .venv/ with the pinned numpy, pandas, scikit-learn,
# pyzmq and msgpack of envs/mledojo/requirements.txt. Idempotent: the venv is
# rebuilt only when the requirements file changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || true
    apt-get install -y -qq bubblewrap || echo "warning: bubblewrap not installed; sandbox falls back"
  fi
fi
venv=.venv
req=envs/mledojo/requirements.txt
# The system interpreter, not a per-user one (pyenv under /root): the sandbox
# drops to an unprivileged uid that must be able to execute it.
base=python3
[ -x /usr/bin/python3 ] && base=/usr/bin/python3
source scripts/lib/venv.sh
stamp=.mledojo-requirements.sha256
want="$(sha256sum "$req" | cut -d' ' -f1) $base"
venv_current "$venv" "$stamp" "$want" && exit 0
venv_build "$venv" "$base" "$req" "$stamp" "$want" "numpy, pandas, sklearn, zmq, msgpack"
ver=$("$venv/bin/python" -c 'import sklearn; print(sklearn.__version__)')
echo "python ml venv: $venv (scikit-learn $ver)"
