"""A model folder on disk: complete-or-refused saves, checksummed loads, confined file reads.

The scheme (the same on a local dir and an ``s3://`` prefix, where a rename is not atomic):

* :func:`write_folder` first deletes ``config.json`` (so the folder reads as incomplete), writes
  the data files, then writes ``config.json`` **last**, holding each file's size and SHA-256
  under ``"files"``, and the SHA-256 of ``config.json`` itself under ``"config_sha256"`` (of
  its canonical JSON without that key). A save killed at any point leaves either no
  ``config.json`` or the new one.
* :func:`ModelFolder` reads ``config.json``, checks it against its own checksum, refuses unknown
  formats and versions, and checks every file against its recorded size and SHA-256 before
  parsing it: a half-written, mixed or edited folder fails loudly, naming the file, whatever
  format version it claims (so an edit cannot downgrade it to an unchecked format). A folder
  without the checksums (saved before they existed, or edited on purpose) loads only after
  :func:`reseal` (``swe reseal PATH``) records them for the bytes it holds now. Version 3 (int8
  matrices) is written only for int8 models, so float32/float16 folders stay readable by a swe
  that knows version 2.
* Every name a ``config.json`` gives is resolved inside the folder (no absolute paths, no
  ``..``, no symlink out of it) and must be a regular file under a size limit, so a model
  someone sent you cannot read ``/etc/passwd`` or ``/dev/zero``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import posixpath
import stat
from typing import Any

from swe import storage
from swe.artifacts import file_kind, kind_of

__all__ = ["CLUSTER_FORMAT_VERSION", "CONFIG", "FLOAT_FORMAT_VERSION", "FORMAT", "FORMAT_VERSION",
           "INT8_FORMAT_VERSION", "MAX_FILE_BYTES", "ModelFileError", "ModelFolder", "confined",
           "invalidate", "reseal", "sealed", "write_folder"]

FORMAT = "swe-static"
# 4: the matrix may be clustered (K centroids, an index and a norm per word; only clustered
# models are written as 4); 3: the matrix may be int8 with scales (only int8 models are written
# as 3, so an older swe refuses them with "upgrade swe"); 2: config.json records each file's
# size and SHA-256; 1: no checksums. FORMAT_VERSION is the newest this swe reads.
FORMAT_VERSION = 4
FLOAT_FORMAT_VERSION = 2  # written for float32 and float16 models
INT8_FORMAT_VERSION = 3  # written for int8 models
CLUSTER_FORMAT_VERSION = 4  # written for clustered models
CONFIG = "config.json"
MAX_CONFIG_BYTES = 16 << 20
# The largest file a model folder may hold; a bigger one (or /dev/zero) is refused before reading.
MAX_FILE_BYTES = int(os.environ.get("SWE_MAX_MODEL_FILE_BYTES", 64 << 30))


class ModelFileError(ValueError):
    """A model folder that is incomplete, corrupt, or names files outside itself."""


SEAL = "config_sha256"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seal_of(config: dict[str, Any]) -> str:
    """The checksum of ``config`` without its seal (canonical JSON: sorted keys, no spaces)."""
    body = {k: v for k, v in config.items() if k != SEAL}
    return _sha256(json.dumps(body, sort_keys=True, ensure_ascii=False,
                              separators=(",", ":")).encode("utf-8"))


def sealed(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its own checksum under ``config_sha256`` (what a writer records)."""
    return {**config, SEAL: _seal_of(config)}


def _json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float (a provenance score that could not be
    computed) replaced by ``None``: ``json.dumps`` would write ``NaN``, which is not JSON, and
    other languages' parsers (model2vec's Rust loader, JavaScript) refuse the whole file."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _write_config(target: str, config: dict[str, Any], files: dict[str, bytes]) -> None:
    config = sealed({**_json_safe(config), "files": {n: {"bytes": len(d), "sha256": _sha256(d)}
                                                    for n, d in files.items()}})
    storage.write_bytes_atomic(target, json.dumps(config, indent=2, ensure_ascii=False,
                                                  allow_nan=False).encode("utf-8"))


def write_folder(path: str, files: dict[str, bytes], config: dict[str, Any],
                 config_name: str = CONFIG) -> None:
    """Write ``files`` then ``config_name`` (with their sizes and checksums) under ``path``."""
    target = storage.join(path, config_name)
    invalidate(target)  # from here until the new config lands, the folder is incomplete
    for name, data in files.items():  # a new file each: a hard-linked copy keeps its own
        storage.write_bytes_atomic(storage.join(path, name), data)
    _write_config(target, config, files)


def write_new_folder(path: str, files: dict[str, bytes]) -> None:
    """Write ``files`` into ``path``, a new (or empty) folder; when a write fails (a full disk)
    the folder is removed, so the rerun does not find a half-written output in its way."""
    fs, local = storage.filesystem(path)
    new = not fs.exists(local)
    try:
        for name, data in files.items():
            storage.write_bytes(storage.join(path, name), data)
    except BaseException:
        with contextlib.suppress(OSError):  # the first error is the one to report
            for name in files:
                storage.remove_tree(storage.join(path, name))
            if new:
                storage.remove_tree(path)
        raise


def reseal(path: str, config_name: str = CONFIG, fmt: str = FORMAT,
           version: int = FORMAT_VERSION) -> list[str]:
    """Trust a model folder as it is now: record the sizes and checksums of the files its
    ``config_name`` names, and the config's own checksum (for a folder saved by a swe without
    them, or a ``config.json`` edited on purpose). The names of the files it sealed.
    ``fmt``, ``version``: the config's format (an ensemble's ``ensemble.json`` has its own)."""
    folder = ModelFolder(path, fmt, version, config_name=config_name, verify=False)
    config = dict(folder.config)
    names = sorted(folder.files) if isinstance(folder.files, dict) else \
        [n for n in ("model.safetensors", "vocab.txt", config.get("tokenizer")) if n]
    files = {n: _read_limited(confined(path, n, n), MAX_FILE_BYTES) for n in names}
    for name, data in files.items():  # sealed, a BOM would make the first word another
        if name != "model.safetensors":
            _refuse_bom(storage.join(path, name), data)
    if config.get("format_version", 1) < FLOAT_FORMAT_VERSION and config_name == CONFIG:
        config["format_version"] = FLOAT_FORMAT_VERSION  # version 1 differs only in its checks
    _write_config(folder.config_path, config, files)
    return names


def invalidate(url: str) -> None:
    """Remove a folder's completion file ``url`` (if any) before rewriting the folder."""
    fs, path = storage.filesystem(url)
    with storage.naming(url, "writing"):
        if fs.exists(path):
            fs.rm(path)


def confined(folder: str, name: Any, what: str) -> str:
    """``folder/name`` when ``name`` is a relative path that stays inside ``folder``; else a
    :class:`ModelFileError` naming ``what`` (the config key) and the folder."""
    bad = (not isinstance(name, str) or not name or "\\" in name or "\x00" in name
           or "://" in name or posixpath.isabs(name) or os.path.isabs(name)
           or ".." in name.split("/"))
    if bad:
        raise ModelFileError(f"{storage.join(folder, CONFIG)}: {what} = {name!r} must name a "
                             "file inside the model folder (a relative path without '..')")
    path = storage.join(folder, name)
    if storage.is_local(folder):
        root = os.path.realpath(folder)
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise ModelFileError(f"{path}: {what} is a link that leads outside the model folder "
                                 f"{folder}; copy the file into the folder instead")
    return path


def _read_limited(path: str, limit: int) -> bytes:
    """A regular file of at most ``limit`` bytes, else a :class:`ModelFileError` naming it."""
    fs, p = storage.filesystem(path)
    with storage.naming(path, "reading"):
        if storage.is_local(path):
            st = os.stat(p)
            kind, size = ("file" if stat.S_ISREG(st.st_mode) else "other"), st.st_size
        else:
            info = fs.info(p)
            kind, size = info.get("type"), int(info.get("size") or 0)
        if kind != "file":
            raise ModelFileError(f"{path} is not a regular file; a model folder holds only "
                                 "regular files")
        if size > limit:
            raise ModelFileError(f"{path} is {size:,} bytes, over the {limit:,}-byte limit "
                                 "(SWE_MAX_MODEL_FILE_BYTES raises it)")
        with fs.open(p, "rb") as f:
            data = f.read(size + 1)  # a file that grew since: caught by the limit or checksum
    if len(data) > limit:
        raise ModelFileError(f"{path} is over the {limit:,}-byte limit")
    return data


def _refuse_bom(path: str, data: bytes) -> None:
    """Refuse a model text file starting with a UTF-8 byte-order mark (an editor's): read as
    UTF-8 it would be part of the first line (in vocab.txt the first word, ``\\ufeffthe``,
    whose vector text would then never find)."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise ModelFileError(f"{path} starts with a UTF-8 byte-order mark (BOM), which would be "
                             "read as part of its first line: strip it (sed -i "
                             f"'1s/^\\xEF\\xBB\\xBF//' {path}), then swe reseal the folder")


def _not_a_folder(path: str, config_name: str) -> str:
    """Why ``path``, a file (or a pipe, a device), is not a model folder."""
    kind, hint = "a file", ""
    if posixpath.basename(path.rstrip("/")) == config_name:
        hint = f" ({posixpath.dirname(path.rstrip('/')) or '.'})"
    elif storage.is_local(path):
        with contextlib.suppress(OSError):
            mode = os.stat(path.removeprefix("file://")).st_mode
            kind = file_kind(mode)
    return (f"{path} is {kind}, not a model folder: give the folder that holds "
            f"{config_name}{hint}")


def _missing(path: str, config_name: str) -> str:
    """Why a folder without its config is not a model, and where the model may be instead. On
    an object store, listing the folder first raises what an unreachable endpoint raises:
    reading one file reports that as a missing file."""
    if not storage.is_local(path):
        fs, p = storage.filesystem(path)
        try:
            fs.ls(p)
        except Exception as e:  # only an endpoint that does not answer is worth saying
            if storage.object_store_error(e, [path]) is not None or (isinstance(e, OSError) and
                    not isinstance(e, FileNotFoundError | PermissionError)):
                raise
    inner = storage.join(path, "model")
    try:
        fs, p = storage.filesystem(storage.join(inner, config_name))
        built = fs.exists(p)
    except OSError:
        built = False
    if built:
        return (f"{path} is a build folder, not a model: its model is {inner} (pass that "
                "instead)")
    if storage.is_local(path) and not os.path.lexists(path):
        return f"no swe model at {path}: no such file or folder (check the path)"
    kind = kind_of(path) if storage.is_local(path) else ""
    if kind and os.path.isfile(os.path.join(path, "ensemble.json")):
        return (f"{path} is an ensemble (ensemble.json), not one model: this command takes one "
                f"model, e.g. a member ({storage.join(path, 'member_0')}); an ensemble encodes "
                "in Python (swe.EnsembleModel.load) and in swe evaluate")
    if kind:
        return f"{path} is {kind.replace('the ', 'a ', 1)}, not a model: name a model's folder"
    return (f"no swe model at {path}: {config_name} is missing (was the save interrupted? save "
            "the model again)")


def _damaged(path: str, differs: str) -> ModelFileError:
    """The error for a model file that differs (``differs``: how) from what config.json records."""
    return ModelFileError(f"{path} does not match the size and checksum in {CONFIG} ({differs}): "
                          "the save was interrupted or the file was changed; save the model again")


class ModelFolder:
    """A saved model's folder: its checked ``config.json`` and checksummed, confined files."""

    def __init__(self, path: str, fmt: str = FORMAT, version: int = FORMAT_VERSION,
                 config_name: str = CONFIG, verify: bool = True) -> None:
        if not str(path).strip():
            raise ValueError(f"no model path given ({path!r}): name a saved model's folder")
        self.path = path
        self.config_path = storage.join(path, config_name)
        try:
            raw = _read_limited(self.config_path, MAX_CONFIG_BYTES)
        except FileNotFoundError:
            raise FileNotFoundError(_missing(path, config_name)) from None
        except NotADirectoryError:
            raise ModelFileError(_not_a_folder(path, config_name)) from None
        try:
            config = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ModelFileError(f"{self.config_path} is not valid UTF-8 JSON ({e}); save the "
                                 "model again") from None
        if not isinstance(config, dict) or config.get("format") != fmt:
            raise ModelFileError(f"{path} is not a {'swe StaticModel' if fmt == FORMAT else fmt}"
                                 f" ({config_name} format != {fmt})")
        v = config.get("format_version", 1)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ModelFileError(f"{self.config_path}: format_version = {v!r} is not a "
                                 "positive integer; the file is damaged: save the model again")
        if v > version:
            raise ModelFileError(f"{path} has format version {v}; this swe reads <= {version}: "
                                 "upgrade swe")
        if fmt == FORMAT:  # what a StaticModel does, stated in its config: nothing else is read
            for key, only in (("pooling", "mean"), ("normalize", True)):
                if key in config and config[key] != only:
                    raise ModelFileError(
                        f"{self.config_path}: {key} = {config[key]!r}, but a swe StaticModel "
                        f"always has {key} = {json.dumps(only)} (mean of the word vectors, "
                        "normalised); restore the value, or pool the vectors yourself")
        self.config = config
        self.files = config.get("files")
        if verify:
            self._verify()

    def _verify(self) -> None:
        """The config matches its own checksum and records every file's (any version)."""
        fix = f"if you made that change on purpose and trust the folder: swe reseal {self.path}"
        if SEAL not in self.config:
            raise ModelFileError(f"{self.config_path} carries no checksum of itself (saved by an "
                                 f"older swe, or edited): {fix}")
        if self.config[SEAL] != _seal_of(self.config):
            raise ModelFileError(f"{self.config_path} was changed after the save (it does not "
                                 f"match its checksum): save the model again, or {fix}")
        if not isinstance(self.files, dict):
            raise ModelFileError(f"{self.config_path}: 'files' (sizes and checksums) is missing;"
                                 " save the model again")

    def check_sizes(self) -> None:
        """Every recorded file has its recorded size (metadata only, no file read): a job that
        hands the folder to its workers refuses a truncated file before any work."""
        for name, entry in (self.files or {}).items():
            path = confined(self.path, name, name)
            fs, local = storage.filesystem(path)
            try:
                size = fs.size(local)
            except FileNotFoundError:
                raise FileNotFoundError(f"{path} is missing; save the model again") from None
            if isinstance(entry, dict) and size != entry.get("bytes"):
                raise _damaged(path, f"{size:,} bytes, {entry.get('bytes')!r} recorded")

    def get(self, key: str, kinds: type | tuple[type, ...], default: Any = ...) -> Any:
        """A ``config.json`` value of the expected type, else an error naming key and file."""
        if key not in self.config:
            if default is not ...:
                return default
            raise ModelFileError(f"{self.config_path} lacks the key {key!r}; the file is "
                                 "incomplete or from another program: save the model again")
        value = self.config[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in (
                kinds if isinstance(kinds, tuple) else (kinds,))):
            raise ModelFileError(f"{self.config_path}: {key} = {value!r} has the wrong type")
        return value

    def read(self, name: str, what: str, limit: int = MAX_FILE_BYTES) -> bytes:
        """A file of the folder, confined, size-limited, and checked against its checksum."""
        path = confined(self.path, name, what)
        entry = None
        if self.files is not None:
            entry = self.files.get(name)
            if not isinstance(entry, dict):
                raise ModelFileError(f"{self.config_path} records no checksum for {name!r}; save "
                                     "the model again")
        data = _read_limited(path, limit)
        if entry is not None and (len(data) != entry.get("bytes")
                                  or _sha256(data) != entry.get("sha256")):
            raise _damaged(path, f"{len(data):,} bytes read, {entry.get('bytes')!r} recorded"
                           if len(data) != entry.get("bytes") else "same size, different SHA-256")
        return data

    def read_text(self, name: str, what: str, limit: int = MAX_FILE_BYTES) -> str:
        """A UTF-8 file of the folder; a non-UTF-8 one, or one starting with a byte-order mark,
        is an error naming it (and the byte)."""
        data = self.read(name, what, limit)
        _refuse_bom(storage.join(self.path, name), data)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelFileError(f"{storage.join(self.path, name)} is not UTF-8 (bad byte at "
                                 f"offset {e.start}); re-save it as UTF-8 text") from None
