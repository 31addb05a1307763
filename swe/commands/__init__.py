"""The jobs behind ``swe build|encode|evaluate|analyze``: each module has ``parser(prog)`` and
``main(argv, prog)``. ``pipelines/*.py`` are thin wrappers of these for ``ray job submit``."""

from __future__ import annotations

import sys
from collections.abc import Iterable


def object_store_failure(error: Exception, urls: Iterable[str]) -> int:
    """Print the one-line message for an object-store failure (no credentials, an unreachable
    endpoint; see ``swe.storage.object_store_error``) and return exit status 1; re-raise any
    other error."""
    from swe.storage import object_store_error

    message = object_store_error(error, urls)
    if message is None:
        raise error
    print(f"error: {message}", file=sys.stderr)
    return 1
