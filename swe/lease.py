"""A lease on an output folder (local or ``s3://``): one writer at a time, named when refused.

The lease is ``<output>/_LEASE.json``: owner, host, pid, purpose, when it was taken, and a
heartbeat that a daemon thread refreshes every ``heartbeat_s`` seconds. Another run into the same
output stops at once with :class:`LeaseHeldError` naming the holder. A lease is taken over, with
a warning, when it is *stale*: no heartbeat for ``timeout_s`` seconds, or its holder ran on this
host and that process is gone (a killed run is resumed at once, without waiting the timeout).
A ``_LEASE.json`` that is not a swe lease (not JSON, or without a token and a heartbeat) is a
user's file: refused in one line, never taken over or removed (swe writes its lease whole).

On a local folder, contenders judge and replace the lease one at a time under an ``flock`` on a
lock file kept outside the output (in the temp folder, named by the output's real path), and
create the lease exclusively, so two runs never both hold it. Object stores
have neither: there the lease is written, then read back after ``settle_s``; the later writer of
two simultaneous contenders wins and the other stops (best effort, documented in
docs/reliability.md). Torch-free: the build and the bulk encoder both use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import hashlib
import json
import logging
import os
import re
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from swe import storage
from swe.artifacts import is_regular

__all__ = ["LEASE_FILE", "USES", "Lease", "LeaseHeldError", "LeaseLostError", "live_uses",
           "use_lease"]

log = logging.getLogger("swe.lease")

LEASE_FILE = "_LEASE.json"
USES = "_IN_USE"  # a folder many runs use at once: one lease file each (use_lease)
USE_FILE = re.compile(rf"{USES}/[0-9a-f]{{32}}\.json(\.[0-9a-f]{{32}}\.tmp)?")
TIMEOUT_S = float(os.environ.get("SWE_LEASE_TIMEOUT_S", 120))


class LeaseHeldError(OSError):
    """Another live run holds the output's lease."""


class LeaseLostError(OSError):
    """This run's lease was taken over (its heartbeat stopped for longer than the timeout)."""


def _stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of a process from ``/proc`` (Linux): the start time (clock ticks
    since boot) tells a reused pid apart; state ``Z`` is a dead process not yet reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def _alive(pid: int, started: str | None) -> bool:
    """Whether the process ``pid`` (started at ``started``) still runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _stat(pid)
    if stat is None:
        return True
    return stat[0] != "Z" and (started is None or stat[1] == started)


class Lease:
    """The lease on one output folder; ``with Lease(output):`` holds it for the block."""

    def __init__(self, output: str, purpose: str = "build", timeout_s: float = TIMEOUT_S,
                 heartbeat_s: float | None = None, settle_s: float = 0.5,
                 writes: Sequence[str] = (), file: str = LEASE_FILE) -> None:
        self.output = output
        self.url = storage.join(output, file)
        self.shared = file != LEASE_FILE  # one of many runs' uses (use_lease), not the writer's
        self.purpose = purpose
        self.timeout_s = float(timeout_s)
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else max(self.timeout_s / 6,
                                                                           0.05)
        self.settle_s = settle_s
        self.token = uuid.uuid4().hex
        self.lost: str | None = None
        self.took_over: dict[str, Any] | None = None  # the stale lease this one replaced
        self._writing = threading.Lock()  # the heartbeat and record_files write one file
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record = {"owner": _user(), "host": socket.gethostname(), "pid": os.getpid(),
                        "pid_started": _start_time(os.getpid()), "purpose": purpose,
                        "token": self.token, **({"writes": list(writes)} if writes else {})}

    # -- reading ------------------------------------------------------------------------------

    def holder(self) -> dict[str, Any] | None:
        """The lease as written (``heartbeat_age_s`` added), or ``None`` when there is none;
        ``{"foreign": why}`` for a ``_LEASE.json`` that is not a swe lease (swe writes its
        lease whole, so one that does not parse is somebody else's file)."""
        fs, path = storage.filesystem(self.url)
        fs.invalidate_cache(path)  # never judge by a cached listing of the output (s3fs)
        if storage.is_local(self.url) and os.path.exists(self.url) and not os.path.isdir(
                self.url) and not is_regular(self.url):
            return {"foreign": "not a regular file"}  # a named pipe would block the read
        try:
            info = json.loads(storage.read_bytes(self.url).decode("utf-8"))
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return {"foreign": "a folder"}
        except (ValueError, UnicodeDecodeError):
            return {"foreign": "not JSON"}
        if not (isinstance(info, dict) and isinstance(info.get("token"), str)
                and isinstance(info.get("heartbeat"), int | float)):
            return {"foreign": "JSON without a lease's token and heartbeat"}
        info["heartbeat_age_s"] = time.time() - info["heartbeat"]
        return info

    def _stale_reason(self, info: dict[str, Any]) -> str | None:
        if info["heartbeat_age_s"] > self.timeout_s:
            return f"no heartbeat for {info['heartbeat_age_s']:.0f} s"
        pid = info.get("pid")
        if info.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(
                pid, info.get("pid_started")):
            return f"its process {pid} on this host is gone"
        return None

    def describe(self, info: dict[str, Any]) -> str:
        """``user@host pid N (build, since T, heartbeat 3 s ago)``."""
        since = info.get("taken")
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(
            since, int | float) else "?"
        return (f"{info.get('owner', '?')}@{info.get('host', '?')} pid {info.get('pid', '?')} "
                f"({info.get('purpose', '?')}, since {since}, heartbeat "
                f"{info['heartbeat_age_s']:.0f} s ago)")

    # -- taking, keeping, giving back ---------------------------------------------------------

    @contextlib.contextmanager
    def _local_lock(self) -> Iterator[None]:
        """On a local folder, contenders judge and replace the lease one at a time (``flock``
        on a lock file outside the output, so the output holds only the lease); on an object
        store, a no-op."""
        if not storage.is_local(self.url):
            yield
            return
        os.makedirs(os.path.dirname(self.url), exist_ok=True)
        fd = os.open(_lock_path(self.url), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def acquire(self) -> Lease:
        """Take the lease, or raise :class:`LeaseHeldError` naming the live holder."""
        with self._local_lock():
            return self._acquire()

    def _acquire(self) -> Lease:
        for _ in range(5):
            info = self.holder()
            if info is not None and "foreign" in info:
                raise LeaseHeldError(
                    f"{self.url} is not a swe lease ({info['foreign']}), and swe keeps its lease "
                    "on the output in that file: move it away, or write to another output")
            if info is not None and info.get("token") != self.token:
                reason = self._stale_reason(info)
                if reason is None:
                    raise LeaseHeldError(
                        f"{self.output} is in use by {self.describe(info)}: wait for that run "
                        f"to finish or stop it, or write to another output (a lease with no "
                        f"heartbeat for {self.timeout_s:.0f} s is taken over)")
                log.warning("taking over the lease on %s from %s: %s", self.output,
                            self.describe(info), reason)
                if not self._remove_stale():
                    continue  # another contender removed it first: look again
                self.took_over = info
            if self._create():
                self._start_heartbeat()
                return self
        raise LeaseHeldError(f"{self.output}: could not take the lease ({self.url}) after 5 "
                             "tries; another run keeps taking it")

    def _payload(self, taken: float | None = None) -> bytes:
        now = time.time()
        return json.dumps({**self._record, "taken": taken or self._record.get("taken", now),
                           "heartbeat": now}).encode()

    def _create(self) -> bool:
        """Write a fresh lease; ``False`` when another contender's got there first."""
        self._record["taken"] = time.time()
        if storage.is_local(self.url):
            os.makedirs(os.path.dirname(self.url), exist_ok=True)
            tmp = f"{self.url}.{self.token}.tmp"
            with _removed_on_error(tmp), open(tmp, "wb") as f:  # a full disk leaves no file
                f.write(self._payload())
            try:  # whole or not at all, and only where no lease is: a hard link of the file
                os.link(tmp, self.url)
            except FileExistsError:
                return False
            finally:
                os.remove(tmp)
            return True
        storage.write_bytes(self.url, self._payload())
        time.sleep(self.settle_s)  # a contender writing at the same moment: the later one wins
        info = self.holder()
        return info is not None and info.get("token") == self.token

    def _remove_stale(self) -> bool:
        """Remove a stale lease; ``False`` when another contender removed it first."""
        fs, path = storage.filesystem(self.url)
        try:
            if storage.is_local(self.url):
                aside = f"{self.url}.stale-{self.token}"
                os.rename(self.url, aside)  # atomic: exactly one contender wins
                os.remove(aside)
            else:
                fs.rm(path)
        except FileNotFoundError:
            return False
        return True

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"lease {self.url}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                info = self.holder()
                if not self.shared and (info is None or info.get("token") != self.token):
                    self.lost = (f"the lease on {self.output} was taken over by "
                                 f"{self.describe(info) if info else 'another run'}")
                    log.error("%s; this run stops at its next step", self.lost)
                    return
                if self.shared and storage.is_local(self.url):  # a use removed: written again
                    os.makedirs(os.path.dirname(self.url), exist_ok=True)
                self._write_over(self._payload())
            except OSError as e:  # a transient storage error: try again at the next beat
                log.warning("lease heartbeat on %s failed: %s", self.url, e)

    def _write_over(self, data: bytes) -> None:
        """Replace the lease file whole (readers never see half of it)."""
        with self._writing:
            if storage.is_local(self.url):
                tmp = f"{self.url}.{self.token}.tmp"
                with _removed_on_error(tmp), open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.url)
            else:
                storage.write_bytes(self.url, data)

    def record_files(self, files: dict[str, bytes]) -> None:
        """Record in the lease the checksum and size of each file (by path under the output)
        the run is about to write: the rerun that takes over a killed run's lease removes such
        a file only when it still holds those bytes, never a file someone wrote under its name
        since."""
        facts = {rel: [hashlib.sha256(data).hexdigest(), len(data)] for rel, data in files.items()}
        self._record["files"] = {**self._record.get("files", {}), **facts}
        self._write_over(self._payload())

    def check(self) -> None:
        """Raise :class:`LeaseLostError` when another run took this lease over."""
        if self.lost:
            raise LeaseLostError(f"{self.lost}; stopped so as not to write over its output")

    def release(self) -> None:
        """Stop the heartbeat and remove the lease if it is still this run's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(self.heartbeat_s * 2, 5))
            self._thread = None
        info = self.holder()
        if info is not None and info.get("token") == self.token:
            fs, path = storage.filesystem(self.url)
            with contextlib.suppress(FileNotFoundError):
                fs.rm(path)

    def __getstate__(self) -> dict[str, Any]:
        """A copy shipped to a worker holds the facts, not the heartbeat thread."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_stop", "_thread", "_writing")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _stop=threading.Event(), _thread=None,
                             _writing=threading.Lock())

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def use_lease(folder: str, purpose: str) -> Lease:
    """Take a *use* of ``folder``, which many runs may hold at once (each its own lease file in
    ``folder/_IN_USE/``, with a heartbeat): a command that would remove the folder asks
    :func:`live_uses` first. Release it like any lease."""
    return Lease(folder, purpose, file=f"{USES}/{uuid.uuid4().hex}.json").acquire()


def live_uses(folder: str) -> list[str]:
    """Who uses ``folder`` now (:func:`use_lease`), described; a dead run's use is not live."""
    fs, path = storage.filesystem(storage.join(folder, USES))
    fs.invalidate_cache(path)
    try:
        names = [n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(path, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    live = []
    for name in names:
        if USE_FILE.fullmatch(f"{USES}/{name}") and name.endswith(".json"):
            probe = Lease(folder, file=f"{USES}/{name}")
            info = probe.holder()
            if info is not None and "foreign" not in info and probe._stale_reason(info) is None:
                live.append(probe.describe(info))
    return live


@contextlib.contextmanager
def _removed_on_error(path: str) -> Iterator[None]:
    """Remove ``path`` (a temporary) when the block fails."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path)
        raise


def _lock_path(url: str) -> str:
    """The local lock file of the lease at ``url``: in the temp folder, named by its real path."""
    real = os.path.realpath(url.removeprefix("file://"))
    folder = os.path.join(tempfile.gettempdir(), f"swe-lease-locks-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, hashlib.sha256(real.encode()).hexdigest()[:24] + ".lock")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return f"uid{os.getuid()}"
