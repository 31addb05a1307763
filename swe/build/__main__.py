"""``python -m swe.build [--markdown]``: every build config key with its type, default, allowed
values and meaning, read from the fields' declarations (the same ones validation reads)."""

from __future__ import annotations

import sys

from swe.build.config import describe, markdown_table
from swe.commands import quiet_broken_pipe


def main() -> None:
    """Print the table (``| head`` ends it quietly)."""
    if "--markdown" in sys.argv:
        print(markdown_table())
        return
    for key, kind, default, allowed, meaning in describe():
        print(f"{key:30} {kind:9} {default:>10}  {allowed:26} {meaning}")


sys.exit(quiet_broken_pipe(main))
