#!/usr/bin/env bash
# One prepared GPU build in two uploads of at most 64 MiB (tools/gpu_check.py says what each does):
#   tools/gpu_check.sh assets ASSETS          here, on CPU, beforehand: the second upload's files
#   tools/gpu_check.sh install BUNDLE         first upload: the offline bundle into .gpu/venv
#   tools/gpu_check.sh run ASSETS REPORT      second upload: the GPU build, encode and report
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  install) exec python3 tools/gpu_check.py "$@" ;;
  run) exec .gpu/venv/bin/python tools/gpu_check.py "$@" ;;
  assets) exec python tools/gpu_check.py "$@" ;;
  *) echo "usage: tools/gpu_check.sh assets ASSETS | install BUNDLE | run ASSETS REPORT" >&2; exit 2 ;;
esac
