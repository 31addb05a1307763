#!/usr/bin/env bash
# Make a venv (default .venv) and install into it (default: this checkout, editable, with the
# [pipeline,test] extras): `tools/venv.sh`, `tools/venv.sh -e ".[pipeline]"`,
# `VENV=/tmp/v tools/venv.sh "/tmp/src[pipeline]"`.
#
# uv installs it (uv from PyPI, into the venv first): 38 s here against pip's 119 s for the same
# wheels (docs/install.md). Where uv cannot be had, pip does it. uv reads none of pip's settings,
# so the ones that choose wheels (find-links, index-url, extra-index-url, constraint: where this
# box keeps its CPU-only torch) are handed on, with pip's rule for several indexes (the best
# version from any of them). Bytecode is compiled at install, as pip does: no process compiles
# the installed packages again (docs/install.md says why that matters here). UV_COMPILE_BYTECODE=0
# leaves it to the first process that imports each module (where Python may write bytecode).
#
# The interpreter: $PYTHON if set; an existing venv's own; else the system's /usr/bin/python3
# when it is >= 3.10 and makes a venv; else python3 from PATH. A distribution's Python is built
# with profile-guided optimisation and a static libpython, pyenv's default build with neither:
# Ray-heavy tests ran about 7% faster on the system's 3.11 here (docs/install.md).
set -euo pipefail
venv=${VENV-.venv}
if [[ -z $venv ]]; then
  echo "tools/venv.sh: VENV is empty: name a folder for the venv (default .venv)" >&2; exit 2
fi
if [[ -e $venv && ! -f $venv/pyvenv.cfg && -n $(ls -A "$venv" 2>/dev/null) ]]; then
  echo "tools/venv.sh: $venv exists and is not a venv: name a new folder (VENV=...)" >&2; exit 2
fi
(( $# )) || set -- -e ".[pipeline,test]"
fresh=(); [[ -e $venv ]] || fresh=(--clear)  # a new folder: a failed first try may be cleared
if [[ -n ${PYTHON-} ]]; then
  if ! "$PYTHON" -c 'import sys, venv; assert sys.version_info >= (3, 10)' 2>/dev/null; then
    echo "tools/venv.sh: PYTHON=$PYTHON is not a Python >= 3.10 with venv: name another" >&2
    exit 2
  fi
  "$PYTHON" -m venv "$venv"
elif [[ -x $venv/bin/python3 ]]; then
  "$venv/bin/python3" -m venv "$venv"  # an existing venv keeps its interpreter
elif ! { (( ${#fresh[@]} )) && /usr/bin/python3 -c 'import sys; assert sys.version_info >= (3, 10)' \
    2>/dev/null && /usr/bin/python3 -m venv "$venv" 2>/dev/null; }; then
  python3 -m venv "${fresh[@]}" "$venv"
fi
if ! "$venv/bin/pip" install -q uv 2>/dev/null; then
  echo "uv is not available: installing with pip (a few minutes)" >&2
  exec "$venv/bin/pip" install -q "$@"
fi
args=(--index-strategy unsafe-best-match)
while IFS= read -r line; do  # e.g. global.find-links='/opt/wheels'  :env:.constraint='c.txt'
  key=${line%%=*}; key=${key##*.}; value=${line#*=}; value=${value#\'}; value=${value%\'}
  case $key in
    find-links|index-url|extra-index-url|constraint)
      for v in $value; do args+=("--$key" "$v"); done ;;
  esac
done < <("$venv/bin/pip" config list 2>/dev/null)
UV_COMPILE_BYTECODE=${UV_COMPILE_BYTECODE-1} \
  "$venv/bin/uv" pip install -q --python "$venv/bin/python" "${args[@]}" "$@"
