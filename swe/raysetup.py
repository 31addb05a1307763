"""Connecting to Ray, handing object storage to Ray Data, and the driver's console.

The console (:func:`configure_console`, called by the jobs in ``pipelines/``) is quiet by
default: swe's own lines (a start and an end line per stage, progress with an ETA, warnings), no
Ray INFO logs, no Ray Data progress output or execution plans (they stay in the Ray session's
``logs/ray-data*.log``), and not the one core-worker line that every Ray Data actor pool prints
(see :data:`HARMLESS`). ``verbose=True`` (``-v``) shows all of it again, with per-pass task
lines and each stage's whole result.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import select
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swe import signals

__all__ = ["AUTH_LOGGER", "HARMLESS", "check_reachable", "clear_status", "configure_console",
           "console", "fit", "get",
           "init_ray", "show_status", "user_error"]

log = logging.getLogger("swe")

_CONSOLE: dict[str, Any] = {"verbose": False, "tty": False, "status": False}

# Lines Ray's C++ core worker writes to the driver's stderr that say nothing about this program:
# every Ray Data actor pool (`ActorPoolStrategy`) passes its own DataContext and UDF to each
# actor as object-store references and asks for actor restarts (`max_restarts=-1`), and Ray 2.60
# logs this error for each such actor (ray-project/ray#57733). The references are put by the
# driver and held by the pool for its whole life, so a restarted actor finds them (only losing
# the driver's node loses them, and that ends the job anyway). The line stays in the session's
# python-core-driver log and is shown with -v. The raylet's "N PYTHON worker processes have been
# started … Nx the maximum expected startup concurrency" warning, which it forwards to the driver
# whenever a stage's tasks (0.5 CPU each) start more workers than the node has CPUs, says nothing
# a user can act on either: the stages size their tasks on purpose.
HARMLESS = (b"has constructor arguments in the object store and max_restarts > 0",
            b"PYTHON worker processes have been started on node")


def console() -> dict[str, Any]:
    """The console settings: ``verbose`` and ``tty`` (stderr is a terminal)."""
    return _CONSOLE


def configure_console(verbose: bool = False) -> None:
    """Set up a job's console: ``HH:MM:SS message`` lines on stderr, swe at INFO (DEBUG when
    ``verbose``), Ray and Ray Data quiet unless ``verbose``; see the module's docstring."""
    _CONSOLE.update(verbose=verbose, tty=sys.stderr.isatty(), job=True)
    signals.sigterm_is_ctrl_c()  # from the job's first line, not only once Ray is up
    handler = _ConsoleHandler()
    handler.setFormatter(_ConsoleFormatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    logging.getLogger("swe").setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in ("botocore", "aiobotocore", "s3fs", "fsspec"):  # "Found credentials in ..."
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    if not verbose:
        _filter_stderr(HARMLESS)
    if "ray.data" in sys.modules:  # Ray already up (a test calling a job's main())
        _quiet_ray_data()


class _ConsoleFormatter(logging.Formatter):
    """``warning: …`` / ``error: …`` before a message of that level; nothing before INFO."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The record's line."""
        line = super().formatMessage(record)
        if record.levelno >= logging.WARNING:
            stamp, _, rest = line.partition(" ")
            line = f"{stamp} {record.levelname.lower()}: {rest}"
        return line


class _ConsoleHandler(logging.StreamHandler):
    """stderr, clearing the status line (:func:`show_status`) before each record."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record below (not across) a progress line."""
        clear_status()
        super().emit(record)


def show_status(text: str) -> None:
    """Show ``text`` as the one line that updates in place at the bottom of a terminal."""
    sys.stderr.write(f"\r\x1b[K{text}")
    sys.stderr.flush()
    _CONSOLE["status"] = True


def clear_status() -> None:
    """Remove the status line, if one is shown."""
    if _CONSOLE["status"]:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
        _CONSOLE["status"] = False


def _configure_ray_data() -> None:
    """This process's Ray Data settings: quiet (:func:`_quiet_ray_data`), and Parquet read by
    Ray Data's first datasource. Its second (the default since Ray 2.5x) starts up to 32
    ``FooterReader`` actors for every ``read_parquet``, one Python process each, to read file
    footers: measured here on 2 CPUs, a 6-file read took 1.1-2.0 s (and about 1.2 CPU-s per
    read) against 0.15 s; tests/test_refine.py spent 48 of its ~300 CPU-s starting them. The
    rows read are the same: a quickstart build's model.safetensors is byte-identical (cmp)."""
    import ray.data

    ray.data.DataContext.get_current().use_datasource_v2 = False
    _quiet_ray_data()


def _quiet_ray_data() -> None:
    """Ray Data without progress output, INFO lines or its copies of task errors on the console
    unless verbose (its ``logs/ray-data.log`` keeps everything)."""
    if _CONSOLE["verbose"]:
        return
    import ray.data
    from ray.util.debug import log_once

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    # Its "issue detectors" repeat a hint every 30 s (e.g. that a teacher actor uses more memory
    # than it requested, which a stage's memory check already covers); -v shows them.
    context.issue_detectors_config.detectors = []
    log_once("ray_data_progress_manager_disabled")  # its "Progress bars disabled" hint: said
    # A failed task's error reaches the job, which prints it as one `error:` line (or raises
    # it when it is not a user's mistake); Ray Data's own copy of it, ~130 lines of traceback,
    # stays in its log file.
    for handler in logging.getLogger("ray.data").handlers:
        if handler.name == "console":
            handler.setLevel(logging.CRITICAL)


def _filter_stderr(drop: tuple[bytes, ...]) -> None:
    """Leave out of this process's stderr (fd 2, where Ray's C++ core writes too) the lines
    containing one of ``drop``; everything else passes unchanged. Not under a test runner or
    anything else that has replaced ``sys.stderr``; once per process."""
    if _CONSOLE.get("filtered") or sys.stderr is not sys.__stderr__:
        return
    _CONSOLE["filtered"] = True
    sys.stderr.flush()
    keep = os.dup(2)
    read_end, write_end = os.pipe()
    stop_read, stop_write = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    pump = threading.Thread(target=_pump, args=(read_end, keep, drop, stop_read), daemon=True,
                            name="swe-stderr")
    pump.start()

    def restore() -> None:  # at exit: the real stderr again, after what is still in the pipe
        sys.stderr.flush()
        os.dup2(keep, 2)
        os.write(stop_write, b"x")  # the pump writes what the pipe holds, then returns
        pump.join(timeout=5)

    atexit.register(restore)


def _pump(read_end: int, out: int, drop: tuple[bytes, ...], stop: int) -> None:
    """Copy ``read_end`` to ``out`` line by line without the dropped lines; a partial line
    (a progress line ending in ``\\r``) goes out after 50 ms without more input. When ``stop``
    is readable (at exit), write what the pipe still holds and return: the only reader of the
    pipe is this thread, so nothing read is ever lost between two readers."""
    pending, stopping = b"", False
    try:
        while True:
            waits = [read_end] if stopping else [read_end, stop]
            timeout = 0.1 if stopping else (0.05 if pending else None)
            ready, _, _ = select.select(waits, [], [], timeout)
            if stop in ready:  # at exit: read on until the pipe stays empty for 0.1 s
                stopping = True
                continue
            if not ready:
                if stopping:
                    break
                os.write(out, pending)
                pending = b""
                continue
            data = os.read(read_end, 1 << 16)
            if not data:
                break
            pending = _write_lines(pending + data, out, drop)
        os.write(out, pending)
    except (OSError, ValueError):  # the real stderr is gone: nothing left to write to
        return


def _write_lines(data: bytes, out: int, drop: tuple[bytes, ...]) -> bytes:
    """Write the complete lines of ``data`` not containing ``drop``; the incomplete rest."""
    *lines, rest = data.split(b"\n")
    kept = [line for line in lines if not any(d in line for d in drop)]
    if kept:
        os.write(out, b"\n".join(kept) + b"\n")
    return rest


def init_ray(**kwargs) -> None:
    """Join the cluster in ``RAY_ADDRESS`` (as under ``ray job submit``) or start a local one.

    Idempotent. Locally the dashboard and usage stats stay off, worker logs stay out of the
    driver's output unless ``SWE_RAY_LOGS=1``, and Ray's token authentication is on as Ray sets
    it for every new local cluster, without Ray's warning saying so (see :data:`AUTH_LOGGER`).
    Logs one line naming the cluster's resources.
    """
    import ray

    if ray.is_initialized():
        _configure_ray_data()
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # swe reports the first failed task in one line; Ray would also print, as "Unhandled error",
    # the traceback of every other failed task whose result nobody fetched.
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    if not _CONSOLE["verbose"]:
        kwargs.setdefault("logging_level", logging.WARNING)  # not "Started a local Ray ..."
    address = os.environ.get("RAY_ADDRESS")
    with signals.sigterm_during_ray_init(bool(_CONSOLE.get("job"))):
        if address:
            check_reachable(address)
            _join(ray, address, kwargs)
        else:
            _local_defaults(kwargs)
            with _silenced(AUTH_LOGGER):
                _start_local(ray, kwargs)
    _configure_ray_data()
    _log_cluster(address)
    if _CONSOLE.get("job"):
        signals.quiet_exit()


def _join(ray: Any, address: str, kwargs: dict) -> None:
    """``ray.init`` joining the cluster at ``address``; a client time-out said in one line."""
    try:
        with warnings.catch_warnings():  # the client's "connection timed out": said below
            warnings.filterwarnings("ignore", "Ray Client connection timed out", UserWarning)
            ray.init(**kwargs)
    except ConnectionError as e:  # e.g. a ray:// address whose client connection timed out
        raise ConnectionError(f"cannot join the cluster at RAY_ADDRESS={address} ({e}): "
                              "fix RAY_ADDRESS, or unset it to start a local Ray") from None


#: Seconds a cluster named by ``RAY_ADDRESS`` may take to accept a connection.
JOIN_TIMEOUT_S = 60


def check_reachable(address: str, timeout: float = JOIN_TIMEOUT_S) -> None:
    """Refuse, within ``timeout`` seconds, a ``RAY_ADDRESS`` where nothing accepts a connection
    (Ray itself retries for ever, printing its own lines). ``auto``, ``local`` and ``ray://``
    addresses are left to Ray."""
    import socket
    import time

    if address in ("auto", "local") or address.startswith("ray://"):
        return
    if "://" in address:  # Ray reads another scheme as a module's name (a cluster provider)
        web = " (an http:// address is a dashboard's, for ray job submit)" \
            if address.startswith(("http://", "https://")) else ""
        raise ConnectionError(f"RAY_ADDRESS={address} is not HOST:PORT or ray://HOST:PORT (e.g. "
                              f"10.0.0.5:6379){web}; fix it, or unset it to start a local Ray")
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:6379, an IPv6 address
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConnectionError(f"RAY_ADDRESS={address} is not HOST:PORT with a port of 1-65535 "
                              "(e.g. 10.0.0.5:6379); fix it, or unset it to start a local Ray")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                speaks_grpc = _speaks_grpc(conn)
        except socket.gaierror as e:  # no name to retry: it will not resolve later either
            raise ConnectionError(f"RAY_ADDRESS={address}: the host {host!r} cannot be resolved "
                                  f"({e}); fix RAY_ADDRESS, or unset it to start a local Ray"
                                  ) from None
        except OSError as e:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"nothing answers at RAY_ADDRESS={address} ({e}) after {timeout:.0f} s: "
                    "start the cluster's head there, fix RAY_ADDRESS, or unset it to start a "
                    "local Ray") from None
            time.sleep(1)
            continue
        if not speaks_grpc:
            raise ConnectionError(f"something answers at RAY_ADDRESS={address}, but it is not a "
                                  "Ray cluster's head (its GCS port speaks gRPC, this does not): "
                                  "give the head's GCS address (ray start --head prints it, "
                                  "usually port 6379), or unset RAY_ADDRESS to start a local Ray")
        return


#: An HTTP/2 client's connection preface and an empty SETTINGS frame: a Ray head's GCS (gRPC,
#: HTTP/2) answers with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _speaks_grpc(conn: Any) -> bool:
    """Whether what accepted ``conn`` answers an HTTP/2 preface as a Ray head's GCS (gRPC)
    does, with a SETTINGS frame: a web server or a database at ``RAY_ADDRESS`` would have Ray
    retry "Failed to get cluster ID from GCS" for ever. True with ``RAY_USE_TLS`` (the GCS then
    speaks TLS first)."""
    if os.environ.get("RAY_USE_TLS", "0").lower() not in ("", "0", "false"):
        return True
    reply = b""
    with contextlib.suppress(OSError):  # a time-out or a reset: no Ray head either
        conn.sendall(_HTTP2_PREFACE)
        while len(reply) < 9 and (chunk := conn.recv(9 - len(reply))):
            reply += chunk
    return len(reply) == 9 and reply[3] == 0x04  # byte 3 of a frame header: its type (SETTINGS)


class LocalRayStartError(OSError):
    """A local Ray did not come up (its start-up wait is fixed by Ray, not configurable)."""


#: What Ray raises when a new local node's raylet does not register within its fixed 30 s.
RAY_STARTUP_TIMEOUT = "timed out during startup"


def _start_local(ray: Any, kwargs: dict) -> None:
    """``ray.init`` for a new local Ray; Ray's start-up timeout becomes a clear error that says
    why it happens and what to do."""
    try:
        ray.init(**kwargs)
    except Exception as e:
        if RAY_STARTUP_TIMEOUT not in str(e):
            raise
        stop_leftovers(os.getpid())
        load = os.getloadavg()[0]
        raise LocalRayStartError(
            f"a local Ray did not start: its raylet did not register within the 30 s Ray "
            f"allows, which happens when the machine is overloaded (load average {load:.1f} on "
            f"{os.cpu_count()} CPUs). Run again when the machine is less busy, or join a running "
            f"cluster with RAY_ADDRESS=<head>:6379.") from e


def stop_leftovers(driver_pid: int) -> None:
    """Kill what a failed local start left running: Ray's agents outlive their raylet, holding
    files open in the session folder named after the driver (``session_<time>_<pid>``). Linux
    only (``/proc``); elsewhere nothing is found."""
    session = re.compile(rf"/session_[\d_-]+_{driver_pid}/")
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):  # gone meanwhile, or another user's
            if int(proc.name) != os.getpid() and any(
                    session.search(os.readlink(fd)) for fd in (proc / "fd").iterdir()):
                os.kill(int(proc.name), signal.SIGKILL)


# Ray 2.60 turns token authentication on for a new local cluster when RAY_AUTH_MODE is unset and
# warns each time ("Token authentication is enabled for this Ray cluster. Set
# RAY_AUTH_MODE=disabled to opt out"). On is right: a local Ray listens on the node's address,
# and without a token anyone who can reach its ports can run code as this user. So the build
# keeps it and leaves out only the warning (RAY_AUTH_MODE set by the user is Ray's to apply, and
# joining a cluster changes nothing: its operator chose its mode).
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextlib.contextmanager
def _silenced(name: str) -> Iterator[None]:
    """The logger ``name`` says nothing below ERROR inside the block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _local_defaults(kwargs: dict) -> None:
    """What a local Ray started by a job gets, unless the caller says otherwise."""
    # Workers must see the same object-storage endpoint and credentials as the driver.
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("AWS_", "SWE_")) or k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    kwargs.setdefault("address", "local")  # never a stray `ray start` cluster on this machine
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", os.environ.get("SWE_RAY_LOGS") == "1")
    kwargs.setdefault("runtime_env", {"env_vars": env})


def _log_cluster(address: str | None) -> None:
    """One line: where the job runs and with what."""
    import ray

    res = ray.cluster_resources()
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    what = f"{res.get('CPU', 0):g} CPUs" + (f", {res['GPU']:g} GPUs" if res.get("GPU") else "")
    what += f", {res.get('memory', 0) / 2**30:.1f} GiB memory"
    where = f"cluster at {address}, {nodes} nodes" if address else "local Ray"
    log.info("ray: %s, %s", where, what)


def get(refs: Any) -> Any:
    """``ray.get`` that re-raises a task's own exception (e.g. ``ValueError``) as itself, so
    users see the clear message the task raised rather than a wrapped ``RayTaskError``."""
    import ray

    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        raise e.as_instanceof_cause() from None


#: Ray Train's controller takes a worker's report every ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``
#: (Ray's default 2 s) and the worker's next report waits for that (a queue of one): a 400-step
#: refine reporting every 40 steps took 44-45 s with 2 s, 26-30 s with this. Unless set.
TRAIN_POLL_S = "0.5"


def fit(trainer: Any) -> Any:
    """``trainer.fit()``, with a run stopped by a signal raised as ``KeyboardInterrupt``. On
    Ctrl-C, Ray Train's own handler aborts the run (its checkpoints stay, for the rerun to resume
    from) and the driver's wait ends in ``SystemExit``, which no command reports: the process
    would end with no word, as if it had finished or crashed, instead of "interrupted"."""
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", TRAIN_POLL_S)  # read by fit()
    try:
        return trainer.fit()
    except SystemExit:
        raise KeyboardInterrupt from None


_USER_ERRORS = {"ValueError": ValueError, "FileNotFoundError": FileNotFoundError,
                "PermissionError": PermissionError}


def user_error(e: BaseException) -> BaseException:
    """The user's own error inside a Ray task/actor failure (a ``ValueError`` naming a file, a
    ``PermissionError`` naming a path), without Ray's traceback; else ``e`` itself."""
    seen = e
    while (inner := getattr(seen, "cause", None) or seen.__cause__) not in (None, seen):
        seen = inner
    if isinstance(seen, tuple(_USER_ERRORS.values())):
        message = str(seen.args[0]) if seen.args else str(seen)
        try:
            return type(seen)(message.split("\n", 1)[0])  # without Ray Data's retry hint
        except TypeError:  # e.g. UnicodeEncodeError, made of five arguments
            return ValueError(str(seen).split("\n", 1)[0])
    # An actor's error arrives as text only (its cause is not kept): the first "Type: message"
    # line of the remote traceback is the original error.
    found = re.search(r"^(?:\w+\.)*(" + "|".join(_USER_ERRORS) + r"): (.+)$", str(e), re.M)
    return _USER_ERRORS[found.group(1)](found.group(2)) if found else e
