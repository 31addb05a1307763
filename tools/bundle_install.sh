#!/usr/bin/env bash
# Install this offline bundle (tools/offline_bundle.sh) into PYTHON's environment, with no index:
#   ./install.sh /path/to/python
# The image's own packages (torch, transformers, pyarrow, ...) are used as they are (--no-deps);
# `pip check` then reports any version that differs from swe's pins.
set -euo pipefail
py=${1:?usage: install.sh PYTHON (the interpreter whose environment gets swe)}
here=$(cd "$(dirname "$0")" && pwd)
want=$(sed -n 's/.*"python": "\(3\.[0-9]*\)".*/\1/p' "$here/MANIFEST.json")
have=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if [[ "$want" != "$have" ]]; then
  echo "this bundle is for Python $want, but $py is $have: build one with tools/offline_bundle.sh --python $have" >&2
  exit 2
fi
"$py" -m pip install -q --no-index --no-deps --force-reinstall "$here"/wheels/*.whl
"$py" -m pip check || echo "(pip check: the versions above differ from swe's pins; the checks below decide)"
"$py" -c 'import blingfire, ray, ray.data, ray.train.torch, s3fs, swe, swe.cli; print(f"swe {swe.__version__}, Ray {ray.__version__}: installed")'
