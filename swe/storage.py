"""Paths as fsspec URLs: local paths and ``s3://`` behave the same.

Credentials and endpoints come from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``), never from configs or logs.
"""

from __future__ import annotations

import io
import os

import fsspec
from fsspec import AbstractFileSystem

__all__ = ["filesystem", "find", "is_local", "join", "load_npz", "read_bytes", "read_text",
           "save_npz", "write_bytes"]


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


def read_bytes(url: str) -> bytes:
    """Whole file as bytes; ``FileNotFoundError`` naming ``url`` when absent."""
    fs, path = filesystem(url)
    try:
        with fs.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {url}") from None


def read_text(url: str) -> str:
    """Whole file decoded as UTF-8."""
    return read_bytes(url).decode("utf-8")


def write_bytes(url: str, data: bytes) -> None:
    """Write a whole file, creating parent directories as needed."""
    fs, path = filesystem(url)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "wb") as f:
        f.write(data)


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
