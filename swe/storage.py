"""Paths as fsspec URLs: local paths and ``s3://`` behave the same.

Credentials and endpoints come from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``), never from configs or logs.
"""

from __future__ import annotations

import io
import os
from contextlib import contextmanager

import fsspec
from fsspec import AbstractFileSystem

__all__ = ["access_hint", "check_writable", "filesystem", "find", "is_local", "join", "load_npz",
           "naming", "read_bytes", "read_text", "save_npz", "write_bytes"]


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


def access_hint(url: str) -> str:
    """What to check when ``url`` cannot be read or written."""
    if is_local(url):
        return "check the path and its directory's permissions"
    return ("check the bucket name and the credentials in the environment (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL) and their rights on that path")


@contextmanager
def naming(url: str, action: str):
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
    """Whole file as bytes; ``FileNotFoundError``/``PermissionError`` naming ``url``."""
    fs, path = filesystem(url)
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
