"""All I/O: paths as fsspec URLs (local and ``s3://`` behave the same), input files in every
format and compression, Parquet, numpy archives, tokenizers, and pyarrow filesystems for Ray.

Credentials and endpoints come from the environment (``AWS_*``), never from configs or logs.
Named ``storage`` rather than ``io`` so it never shadows the standard library's ``io``.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

log = logging.getLogger("swe.storage")

__all__ = ["ATOMIC_TEMP", "absolute", "access_hint", "check_bucket", "check_writable",
           "child_names", "data_path", "filesystem", "find", "fingerprint", "is_local", "join",
           "load_npz", "load_tokenizer", "naming", "output_url", "overlaps", "pyarrow_filesystem",
           "read_bytes", "read_parquet", "read_text", "refuse_file_output", "refuse_line_break",
           "remove_tree", "save_npz", "within", "write_bytes", "write_bytes_atomic",
           "write_parquet"]

def filesystem(url: str) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem for ``url`` and the path within it."""
    url = os.fspath(url)
    opts = {}
    if url.startswith(("s3://", "s3a://")):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            opts["endpoint_url"] = endpoint
    return fsspec.core.url_to_fs(url, **opts)


def is_local(url: str) -> bool:
    """True for plain paths and ``file://`` URLs."""
    return "://" not in os.fspath(url) or os.fspath(url).startswith("file://")


def absolute(url: str) -> str:
    """A plain local path made absolute (workers may run in another directory); URLs as given.
    An empty path is refused: made absolute, it would name the current folder."""
    if not os.fspath(url).strip():
        raise ValueError(f"an empty path ({url!r}) was given: name a file or folder")
    return os.path.abspath(url) if "://" not in os.fspath(url) else url


def output_url(url: str, flag: str = "--output") -> str:
    """``url`` as an output may use it: local paths made absolute with symlinks resolved, URLs
    without a trailing ``/``. Refuses, naming ``flag``, what a job that replaces its output's
    content must never touch: the filesystem root, a bucket's root, the home directory, and the
    current directory or any folder above it."""
    url = os.fspath(url).strip()
    if not url:
        raise ValueError(f"{flag} is empty: pass a folder (or s3:// prefix) for the output")
    if "\0" in url:
        raise ValueError(f"{flag} {url!r} holds a NUL byte: no path can; check how it was made")
    refuse_line_break(url, flag)
    if url.startswith("~"):
        full = os.path.expanduser(url)
        raise ValueError(f"{flag} {url} starts with '~', which only a shell expands: write "
                         f"the full path{f', e.g. {full}' if full != url else ''} (or ./{url})")
    if not is_local(url):
        scheme, rest = url.split("://", 1)
        rest = rest.strip("/")
        if "/" not in rest:
            raise ValueError(f"{flag} {url} is a bucket's root: name a prefix inside it, "
                             f"e.g. {scheme}://{rest or 'bucket'}/swe-out")
        return f"{scheme}://{rest}"
    path = os.path.realpath(url.removeprefix("file://"))
    _refuse_loop(path, url, flag)
    cwd = os.path.realpath(os.getcwd())
    home = os.path.realpath(os.path.expanduser("~"))
    if path == os.path.dirname(path):
        why = f"the filesystem root ({path})"
    elif path == home:
        why = f"your home directory ({path})"
    elif cwd == path:
        why = f"the current directory ({path})"
    elif cwd.startswith(path.rstrip(os.sep) + os.sep):
        why = f"{path}, a folder above the current directory {cwd}"
    else:
        return path
    raise ValueError(f"{flag} {url} resolves to {why}; the job writes and removes files "
                     "in its output, so name a folder of its own, e.g. out/run1")


def refuse_file_output(url: str, flag: str = "--output", file_ok: bool = False) -> None:
    """Refuse a local output folder that is an existing file (unless ``file_ok``: a command
    that replaces it says so itself), or lies under one (every write would fail with "Not a
    directory"), naming ``flag``."""
    if not is_local(url):
        return
    path = os.path.abspath(os.fspath(url).removeprefix("file://"))
    above = path
    while not os.path.lexists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    regular = os.path.isfile(above) or os.path.islink(above)  # not a device, pipe or socket
    if os.path.isdir(above) or (file_ok and above == path and regular):
        return
    if above == path:
        kind = "an existing file" if regular else "a device, named pipe or socket"
        raise ValueError(f"{flag} {url} is {kind}, not a folder: name a folder instead")
    raise ValueError(f"{flag} {url} lies under {above}, which is a file, not a folder: name "
                     "another path")


def refuse_line_break(path: str, what: str = "") -> None:
    """Refuse a path holding a line break (legal on Linux, but logs, manifests and copied shell
    commands would split it); ``what``: the option named."""
    if "\n" in path or "\r" in path:
        raise ValueError(f"{what + ' ' if what else ''}{path!r} holds a line break: swe refuses "
                         "one in a path (logs, manifests and shell commands would split it); "
                         "check the quoting")


def _refuse_loop(path: str, url: str, flag: str) -> None:
    """Refuse ``path`` when a symbolic link on it loops (``realpath`` leaves such a link as it
    is, and every later file operation would fail with ELOOP)."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(f"{flag} {url}: a symbolic link on this path points back at itself "
                             f"({e.strerror}); remove or repoint it, or name another "
                             "folder") from None


def _comparable(url: str) -> str:
    """A real local path, or ``bucket/key`` on object stores (globs cut at their first ``*?[``)."""
    url = os.fspath(url)
    if not url.strip():  # no path: it overlaps nothing (and is refused where it is named)
        return "\0"
    url = url[:min([url.find(c) for c in "*?[" if c in url] or [len(url)])]
    if "\0" in url:  # no real path: it overlaps nothing (and is refused where it is named)
        return url
    if is_local(url):
        return os.path.realpath(url.removeprefix("file://") or ".").rstrip("/") or "/"
    check_bucket(url)
    return url.split("://", 1)[1].strip("/")


def check_bucket(url: str) -> None:
    """Refuse an object-store URL that names no bucket (``s3://``, ``s3:///key``)."""
    scheme, _, key = os.fspath(url).partition("://")
    if _ and not is_local(url) and not key.split("/", 1)[0].strip():
        raise ValueError(f"{url} names no bucket: give {scheme}://BUCKET/PREFIX")


def overlaps(a: str, b: str) -> bool:
    """``a`` and ``b`` are the same place, or one lies inside the other; locally also when one
    is a hard link of the other or of a file inside it (writing it would change the other)."""
    local_a, local_b = is_local(a), is_local(b)
    a, b = _comparable(data_path(a)), _comparable(data_path(b))
    if local_a != local_b:  # a path here and a key in an object store
        return False
    if a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/"):
        return True
    return local_a and (_hard_link_in(a, b) or _hard_link_in(b, a))


def _hard_link_in(file: str, place: str) -> bool:
    """``file`` is a file with other names, one of them ``place`` or a file under it."""
    try:
        st = os.stat(file)
        if not (os.path.isfile(file) and st.st_nlink > 1 and os.path.exists(place)):
            return False
        if os.path.isfile(place):
            return os.path.samefile(file, place)
        key = (st.st_dev, st.st_ino)
        for root, _, names in os.walk(place):
            for name in names:
                other = os.stat(os.path.join(root, name))
                if (other.st_dev, other.st_ino) == key:
                    return True
    except (OSError, ValueError):  # unreadable, or no real path (a NUL byte: refused elsewhere)
        return False
    return False


def within(child: str, parent: str) -> bool:
    """``child`` lies strictly inside ``parent``."""
    child, parent = _comparable(data_path(child)), _comparable(data_path(parent))
    return child.startswith(parent.rstrip("/") + "/")


def child_names(url: str) -> list[str]:
    """The names of the entries directly under folder ``url`` (none when it does not exist),
    read afresh (a listing cached before another process wrote there is not trusted)."""
    fs, path = filesystem(url)
    fs.invalidate_cache()
    if not fs.exists(path):
        return []
    return [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(path, detail=False)]


def remove_tree(url: str) -> None:
    """Remove a file or directory tree if it exists (local or object store)."""
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def join(url: str, *parts: str) -> str:
    """Join URL parts with ``/`` (``os.path.join`` for local paths)."""
    url = os.fspath(url)
    if is_local(url):
        return os.path.join(url, *parts)
    return "/".join([url.rstrip("/"), *parts])


def find(url: str) -> list[str]:
    """Every file under ``url`` (recursively), as sorted URLs of the same kind as ``url``."""
    fs, path = filesystem(url)
    proto = "" if is_local(url) else os.fspath(url).split("://", 1)[0] + "://"
    return sorted(proto + p for p in fs.find(path))


def file_sizes(url: str) -> dict[str, int]:
    """Every file under ``url`` (recursively) by its path relative to ``url``, with its size."""
    fs, path = filesystem(url)
    if not fs.exists(path):
        return {}
    root = path.rstrip("/") + "/"
    return {p.removeprefix(root): int(info.get("size") or 0)
            for p, info in fs.find(path, detail=True).items()}


def access_hint(url: str) -> str:
    """What to check when ``url`` cannot be read or written."""
    if is_local(url):
        return "check the path and its directory's permissions"
    return ("check the bucket name and the credentials in the environment (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL) and their rights on that path")


def object_store_error(e: BaseException, urls: Iterable[str] = ()) -> str | None:
    """One line for an object-store failure that botocore raises as itself (no credentials, an
    unreachable endpoint), naming the bucket and what to set; ``None`` for any other error.
    ``urls``: the job's paths, to name the bucket when the error does not."""
    seen: BaseException | None = e
    while seen is not None and type(seen).__name__ not in _BOTO_ERRORS:
        cause = getattr(seen, "cause", None)  # a Ray task's error holds the task's own
        seen = (cause if isinstance(cause, BaseException) and cause is not seen else None) \
            or seen.__cause__ or seen.__context__
    if seen is None:
        return None
    text = str(seen)
    found = re.search(r'endpoint URL: "(\w+://[^/"]+)/?([^/?"]*)', text)
    buckets = sorted({u.split("://", 1)[1].split("/", 1)[0] for u in map(str, urls)
                      if "://" in u and not u.startswith("file://")})
    bucket = (found and found.group(2)) or ", ".join(buckets) or "?"
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if type(seen).__name__ == "NoCredentialsError":
        return (f"no credentials for the object store (bucket {bucket}): set AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment")
    where = found.group(1) if found else endpoint or "the default AWS endpoint"
    setting = f"AWS_ENDPOINT_URL is {endpoint}" if endpoint else "AWS_ENDPOINT_URL is not set"
    return (f"cannot reach the object store at {where} (bucket {bucket}): {setting}; check it "
            "and the network")


_BOTO_ERRORS = {"NoCredentialsError", "EndpointConnectionError", "ConnectTimeoutError",
                "ConnectionClosedError", "ReadTimeoutError"}


@contextmanager
def naming(url: str, action: str) -> Iterator[None]:
    """Re-raise a storage error of ``action`` ("reading"/"writing") with ``url`` and a hint in
    its message: object stores answer just "Forbidden" or "Access Denied"."""
    try:
        yield
    except PermissionError as e:
        raise PermissionError(f"permission denied {action} {url} ({e}): {access_hint(url)}") \
            from None
    except FileNotFoundError as e:
        if action == "reading":
            raise FileNotFoundError(f"no such file: {url}") from None
        raise FileNotFoundError(f"cannot write {url} ({e}): {access_hint(url)}") from None


def read_bytes(url: str) -> bytes:
    """Whole file as bytes; ``FileNotFoundError``/``PermissionError`` naming ``url``, and an
    ``OSError`` for a named pipe or a device, which would block or never end."""
    fs, path = filesystem(url)
    if is_local(url) and os.path.exists(path) and not (os.path.isdir(path) or os.path.isfile(path)):
        raise OSError(f"{url} is not a regular file (a named pipe or a device): name a file")
    with naming(url, "reading"), fs.open(path, "rb") as f:
        return f.read()


def read_text(url: str) -> str:
    """Whole file decoded as UTF-8."""
    return read_bytes(url).decode("utf-8")


def write_bytes(url: str, data: bytes) -> None:
    """Write a whole file, creating parent directories as needed (local paths only: on object
    stores ``makedirs`` would silently create a missing bucket)."""
    fs, path = filesystem(url)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    with naming(url, "writing"):
        if parent and is_local(url):
            fs.makedirs(parent, exist_ok=True)
        with fs.open(path, "wb") as f:
            f.write(data)


#: The suffix :func:`write_bytes_atomic` gives its temporary (a regular expression): a file named
#: so beside one swe writes is that write cut short.
ATOMIC_TEMP = r"\.tmp-\d+-[0-9a-f]{8}"


def write_bytes_atomic(url: str, data: bytes) -> None:
    """Write a whole file so that readers see the old content or all of the new, never part:
    a temporary name then a rename locally; one PUT (atomic by itself) on object stores."""
    if not is_local(url):
        write_bytes(url, data)
        return
    _, path = filesystem(url)
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        write_bytes(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def fingerprint(url: str) -> str:
    """A short hash of every file under ``url`` (name, size, and mtime or ETag): changes when any
    file is added, removed, rewritten or touched; no file is read."""
    import hashlib

    fs, path = filesystem(url)
    with naming(url, "reading"):
        infos = fs.find(path, detail=True)
    h = hashlib.sha256()
    for name in sorted(infos):
        info = infos[name]
        stamp = info.get("ETag") or info.get("mtime") or info.get("LastModified") or ""
        h.update(f"{name[len(path):]}\0{info.get('size')}\0{stamp}\n".encode())
    return h.hexdigest()[:16]


def check_writable(url: str) -> None:
    """Write and remove a small probe file under ``url``, so a build fails at once, naming the
    path, when its output cannot be written (no bucket, wrong credentials, no permission)."""
    probe = join(url, "_write_probe")
    write_bytes(probe, b"")
    fs, path = filesystem(probe)
    fs.rm(path)


def save_npz(url: str, **arrays) -> None:
    """Write numpy arrays as one ``.npz`` (no pickle)."""
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(url, buf.getvalue())


def load_npz(url: str) -> dict:
    """Arrays of an ``.npz`` written by :func:`save_npz` (pickle refused)."""
    import numpy as np

    with np.load(io.BytesIO(read_bytes(url)), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def pyarrow_filesystem(url: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, path)`` for ``url``, backed by the same fsspec filesystem."""
    from pyarrow.fs import FSSpecHandler, LocalFileSystem, PyFileSystem

    fs, path = filesystem(url)
    if is_local(url):
        return LocalFileSystem(), os.path.abspath(path)
    return PyFileSystem(FSSpecHandler(fs)), path


SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sample")


def data_path(path: str) -> str:
    """An input path with its root resolved: ``{sample}/…`` is the sample corpus shipped with the
    package, ``{data}/…`` the data root (``$SWE_DATA``, else ``../shared/data`` beside the
    checkout; see ``swe.eval.data.data_root``); any other path is returned as it is."""
    path = os.fspath(path)
    if path.startswith("{sample}/"):
        return os.path.join(SAMPLE, path.removeprefix("{sample}/"))
    if path.startswith("{data}/"):
        from swe.eval.data import data_root

        return os.path.join(data_root(), path.removeprefix("{data}/"))
    return path


# -- Parquet and tokenizers ------------------------------------------------------------------------


def write_parquet(url: str, table: Any) -> None:
    """Write a pyarrow table as one Parquet file (row groups of 4,096 rows)."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=4096)
    write_bytes(url, buf.getvalue())


def read_parquet(url: str, columns: list[str] | None = None) -> Any:
    """A Parquet file (local or s3://) as a pyarrow table."""
    import pyarrow.parquet as pq

    fs, path = filesystem(url)
    with fs.open(path, "rb") as f:
        return pq.read_table(f, columns=columns)


def load_tokenizer(spec: Any) -> Any:
    """A ``tokenizers.Tokenizer`` from a model dir, a tokenizer.json path or an instance (copied
    if it pads or truncates), with padding and truncation off (MiniLM's pad and truncate)."""
    from tokenizers import Tokenizer

    if isinstance(spec, Tokenizer):
        if spec.padding is None and spec.truncation is None:
            return spec
        tok = Tokenizer.from_str(spec.to_str())
    else:
        path = os.fspath(spec)
        if is_local(path) and os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        elif not path.endswith(".json"):
            path = join(path, "tokenizer.json")
        try:
            tok = Tokenizer.from_str(read_text(path))
        except FileNotFoundError:
            raise FileNotFoundError(f"tokenizer not found: {path} (pass a teacher model dir "
                                    "holding tokenizer.json, or the file itself)") from None
    tok.no_padding()
    tok.no_truncation()
    return tok
