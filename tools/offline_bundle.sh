#!/usr/bin/env bash
# An offline install bundle for an air-gapped node: tools/offline_bundle.sh --python 3.12 --output DIR
# (what it carries and leaves out: tools/offline_bundle.py; docs/install.md, "Offline").
set -euo pipefail
exec python3 "$(dirname "$0")/offline_bundle.py" "$@"
