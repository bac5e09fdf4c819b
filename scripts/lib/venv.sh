# Sourced by scripts/setup.d/*.sh: a Python venv rebuilt only when what it
# was built from changed.
#
#   venv_current VENV STAMP WANT   true when VENV/STAMP holds WANT (skip)
#   venv_build VENV BASE REQ STAMP WANT [IMPORTS]
#       VENV anew from interpreter BASE, REQ installed, IMPORTS (a Python
#       import list) checked, then WANT written to VENV/STAMP.
venv_current() {
  [ -x "$1/bin/python" ] && [ -f "$1/$2" ] && [ "$(cat "$1/$2")" = "$3" ]
}

venv_build() {
  local venv=$1 base=$2 req=$3 stamp=$4 want=$5 imports=${6:-}
  rm -rf "$venv"
  "$base" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  if [ -n "$imports" ]; then
    "$venv/bin/python" -c "import $imports"
  fi
  echo "$want" > "$venv/$stamp"
}
