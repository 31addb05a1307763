"""The jobs behind ``swe build|encode|evaluate|analyze``: each module has ``parser(prog)`` and
``main(argv, prog)``. ``pipelines/*.py`` are thin wrappers of these for ``ray job submit``.

Every command ends with one exit status, from one mapping (:func:`failed`; docs/using.md):

- 0: done;
- 1: the environment failed: a path that cannot be written or read for lack of permission or
  space, an object store or Ray that does not answer, an output another run holds, an
  run that could not finish (``OSError`` other than a missing path, ``RuntimeError``);
- 2: what was given is wrong: the command line, the config, or an input, model, teacher or
  store that is missing, corrupt or unusable (argparse's own errors, ``ValueError`` and
  ``TypeError`` with every swe error built on them, ``FileNotFoundError``, ``FileExistsError``,
  ``NotADirectoryError``, ``IsADirectoryError``);
- 130: interrupted (Ctrl-C, or SIGTERM in a job: ``swe.signals``).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterable

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "failed", "kept",
           "object_store_failure", "quiet_broken_pipe"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_WRONG_INPUT = (ValueError, TypeError, FileNotFoundError, FileExistsError, NotADirectoryError,
                IsADirectoryError)
_ENVIRONMENT = (OSError, RuntimeError)
# Ray's errors for a task or actor whose process died (not a bug in swe: the machine's)
_WORKER_DIED = ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError", "ActorDiedError")


def failed(error: BaseException, urls: Iterable[str] = (), kept: str = "") -> int:
    """Print ``error: …`` (one line) for ``error`` and return its exit status; re-raise an
    error that is none of the kinds above (a bug: its traceback is what helps). ``kept``: what
    an interrupted run leaves for the rerun to resume from."""
    from swe.storage import object_store_error

    if isinstance(error, KeyboardInterrupt):
        print(f"error: interrupted{'; ' + kept if kept else ''}; rerun the same command to "
              "resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    message = object_store_error(error, urls)
    cause = _cause(error)
    # a full disk, here or in a Ray task (whose error may arrive as text only)
    if (isinstance(cause, OSError) and cause.errno == errno.ENOSPC) or (
            message is None and type(error).__module__.startswith("ray.")
            and f"[Errno {errno.ENOSPC}]" in str(error)):
        where = getattr(cause, "filename", None) or "the output"
        message = f"no space left on the device of {where}: free space, then rerun the command"
    if message is None and type(cause).__name__ in _WORKER_DIED and type(
            cause).__module__.startswith("ray."):
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        message = (f"a Ray worker died and its retries were used up ({type(cause).__name__}"
                   f"{': ' + first[:200] if first else ''}): out of memory, killed, or its node "
                   "lost; give the job more memory or workers, then rerun the command")
    if message is None and not isinstance(cause, _WRONG_INPUT + _ENVIRONMENT):
        raise error
    print(f"error: {message or cause}", file=sys.stderr)
    if message is not None or not isinstance(cause, _WRONG_INPUT):
        return EXIT_FAILED
    return EXIT_USAGE


def kept(folder: str, what: str, pattern: str = "*") -> str:
    """``what`` (an interrupted job's "… are kept") when ``folder`` holds something matching
    the glob ``pattern``; "nothing was written" otherwise: an interrupt before the job wrote
    anything. One shallow listing, not a walk of a large build's work tree; ``what`` when
    ``folder`` cannot be listed."""
    from swe.storage import filesystem

    try:
        fs, path = filesystem(folder)
        found = fs.glob(f"{path.rstrip('/')}/{pattern}")
    except Exception:  # an interrupted job's message must not fail
        return what
    return what if found else "nothing was written"


def _cause(error: BaseException) -> BaseException:
    """The user's error inside ``error``: the first of the kinds above along a Ray task's
    ``cause`` and ``__cause__`` (Ray Data wraps a task's error twice), without Ray's
    traceback; ``error`` itself when there is none."""
    seen: BaseException | None = error
    for _ in range(8):
        from_ray = seen is not None and type(seen).__module__.startswith("ray.")
        if isinstance(seen, _WRONG_INPUT + _ENVIRONMENT) and not from_ray:
            return seen
        if not from_ray:  # only Ray's wrappers are looked through: a bug keeps its traceback
            break
        seen = getattr(seen, "cause", None) or seen.__cause__
    return getattr(error, "cause", None) or error


def object_store_failure(error: BaseException, urls: Iterable[str]) -> int:
    """Print the one-line message for an object-store failure (no credentials, an unreachable
    endpoint; see ``swe.storage.object_store_error``) and return exit status 1; re-raise any
    other error."""
    from swe.storage import object_store_error

    message = object_store_error(error, urls)
    if message is None:
        raise error
    print(f"error: {message}", file=sys.stderr)
    return EXIT_FAILED


def quiet_broken_pipe(run: Callable[[], int | None]) -> int:
    """``run()``'s exit status, its output flushed; when whoever read the output stopped early
    (``swe … | head -1``), exit status 1 and no traceback. Standard output is pointed at
    ``/dev/null`` then, so the interpreter's own flush at exit fails no second time."""
    try:
        status = run()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as e:  # output to a full disk (``swe info M > /dev/full``)
        if e.errno != errno.ENOSPC:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"error: cannot write the output ({e.strerror}): free space where it goes",
              file=sys.stderr)
        return EXIT_FAILED
    return int(status or 0)
