"""``python -m swe.build [--markdown]``: every build config key with its type, default, allowed
values and meaning, read from the fields' declarations (the same ones validation reads)."""

from __future__ import annotations

import sys

from swe.build.config import describe, markdown_table

if "--markdown" in sys.argv:
    print(markdown_table())
else:
    for key, kind, default, allowed, meaning in describe():
        print(f"{key:30} {kind:9} {default:>10}  {allowed:26} {meaning}")
