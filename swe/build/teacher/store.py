"""The teacher-output store: every sentence through the teacher once, across builds.

A store is a folder or ``s3://`` prefix that builds share by naming it (``extraction.store``).
It holds one *namespace* per teacher output format, and in it one row per encoded sentence::

    <store>/_SWE_STORE.json                   marks the folder as a store
    <store>/ns-<id>/_NAMESPACE.json            teacher sha256, runtime, max tokens, segmentation,
                                               value format, dim: what the rows were made with
    <store>/ns-<id>/b<k>/<sid>-<writer>.parquet   rows whose key falls in bucket k (0-f)

A row is keyed by ``sha256(lang NUL text)[:16]``; its value is the vector of **every** unit
of the sentence (its first occurrence: the mean of the teacher's last hidden states over the
unit's tokens, float16) and the teacher's pooled sentence embedding (float32), with a checksum.
A later build with a larger V finds the vectors of its new words in sentences already stored.

Rows are written by the teacher actors, one file per bucket per batch under a name no other
writer uses, in one atomic write: concurrent builds never clobber each other and a kill loses at
most the batches in flight. A build looks its sentences up bucket by bucket in tasks (the
driver sees counts), encodes only what is missing, and takes a word's vector from the float16
value whether it was just encoded or read back, so warm and cold stores give the same model.
A row whose checksum fails, or a file that cannot be read, is reported and encoded again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import stat
import time
import uuid
from dataclasses import dataclass

import numpy as np

from swe import storage
from swe.artifacts import file_kind, modified, parquet_footer
from swe.lease import USE_FILE, Lease, live_uses
from swe.leftovers import is_swes_file

log = logging.getLogger("swe.build")

__all__ = ["BUCKETS", "SEGMENTATION", "Namespace", "StoreError", "bucket_of", "descriptor",
           "list_store", "open_namespace", "prune", "prune_problem", "read_bucket_keys",
           "read_rows", "restore_descriptor", "row_check", "sentence_key", "size", "unit_vectors",
           "write_rows"]

MARKER = "_SWE_STORE.json"
FORMAT = "swe-teacher-store"
VALUE_FORMAT = 1  # unit vectors float16, sentence embedding float32, 8-byte checksum
SEGMENTATION = "swe.text.units/2"  # bump when units() changes what a key covers (2: more
# invisible characters dropped inside a word, swe.text.INVISIBLE)
BUCKETS = 16


class StoreError(ValueError):
    """The store cannot be used as named (the message says why and what to do)."""


def sentence_key(lang: str, text: str) -> bytes:
    """A sentence's 16-byte key."""
    return hashlib.sha256(f"{lang}\0{text}".encode()).digest()[:16]


def bucket_of(key: bytes) -> int:
    """The bucket (0..15) of a key."""
    return key[0] >> 4


def row_check(key: bytes, units: list[str], vectors: bytes, sentence: bytes) -> bytes:
    """The 8-byte checksum of one row's content."""
    h = hashlib.sha256(key)
    h.update("\0".join(units).encode())
    h.update(vectors)
    h.update(sentence)
    return h.digest()[:8]


@dataclass(frozen=True)
class Namespace:
    """One teacher output format in a store: where its rows live and what they hold."""

    url: str
    descriptor: dict

    def bucket(self, k: int) -> str:
        """The folder of bucket ``k``."""
        return storage.join(self.url, f"b{k:x}")

    def new_file(self, k: int, first_sid: int) -> str:
        """A file name in bucket ``k`` no other writer uses."""
        return storage.join(self.bucket(k), f"{first_sid:020d}-{uuid.uuid4().hex[:12]}.parquet")

    @property
    def dim(self) -> int:
        """The teacher's hidden size."""
        return int(self.descriptor["dim"])


def descriptor(teacher_sha: str, runtime: str, max_tokens: int, dim: int) -> dict:
    """What a namespace's rows were made with (its id is a hash of this)."""
    return {"format": FORMAT, "value_format": VALUE_FORMAT, "teacher_sha256": teacher_sha,
            "runtime": runtime, "max_tokens": max_tokens, "segmentation": SEGMENTATION,
            "dim": dim, "unit_dtype": "float16", "sentence_dtype": "float32"}


def open_namespace(store: str, desc: dict) -> Namespace:
    """The namespace of ``desc`` in ``store``, created if new. Refuses a folder that is not a
    store, a namespace whose recorded descriptor differs, and a store that cannot be written."""
    store = storage.output_url(store, "extraction.store")
    fs, root = storage.filesystem(store)
    marker = storage.join(store, MARKER)
    try:
        if storage.is_local(store) and os.path.exists(root) and not os.path.isdir(root):
            raise StoreError(f"extraction.store {store} is {file_kind(os.stat(root).st_mode)}, "
                             "not a folder: name a teacher store's folder, or a new one")
        if fs.exists(root) and not fs.exists(storage.filesystem(marker)[1]) and (
                fs.isfile(root) or fs.ls(root)):
            raise StoreError(f"extraction.store {store} is not a teacher store (no {MARKER}) "
                             "and is not empty: name an empty or new folder")
        if not fs.exists(storage.filesystem(marker)[1]):
            storage.write_bytes(marker, json.dumps({"format": FORMAT}).encode())
        if json.loads(storage.read_bytes(marker)).get("format") != FORMAT:
            raise StoreError(f"{marker} is not a teacher store's marker")
        ns_id = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
        ns = Namespace(storage.join(store, f"ns-{ns_id}"), desc)
        meta = storage.join(ns.url, "_NAMESPACE.json")
        if fs.exists(storage.filesystem(meta)[1]):
            found = json.loads(storage.read_bytes(meta))
            if found != desc:
                diff = sorted(k for k in {*found, *desc} if found.get(k) != desc.get(k))
                raise StoreError(f"{meta} was written by another teacher or runtime "
                                 f"({', '.join(diff)} differ from this build's); its rows cannot "
                                 "serve this build. Remove that namespace or name another store")
        else:
            storage.write_bytes(meta, json.dumps(desc, indent=1).encode())
        storage.check_writable(ns.url)
    except (PermissionError, FileNotFoundError, NotADirectoryError) as e:
        raise StoreError(f"extraction.store {store} cannot be written ({e}); "
                         f"{storage.access_hint(store)}") from None
    except ValueError as e:
        if isinstance(e, StoreError):
            raise
        raise StoreError(f"extraction.store {store}: a store file is damaged ({e}); "
                         "remove the store's marker files or name another store") from None
    return ns


def write_rows(ns: Namespace, rows: list[tuple[bytes, str, list[str], bytes, bytes]],
               first_sid: int) -> int:
    """Write ``(key, lang, units, vectors, sentence)`` rows, one new file per bucket; bytes."""
    import pyarrow as pa

    by_bucket: dict[int, list] = {}
    for row in rows:
        by_bucket.setdefault(bucket_of(row[0]), []).append(row)
    written = 0
    for k, group in sorted(by_bucket.items()):
        key, lang, units, vec, sent = (list(c) for c in zip(*group, strict=True))
        table = pa.table({
            "key": pa.array(key, pa.binary(16)), "lang": pa.array(lang, pa.string()),
            "units": pa.array(units, pa.list_(pa.string())), "vectors": pa.array(vec, pa.binary()),
            "sentence": pa.array(sent, pa.binary()),
            "check": pa.array([row_check(*r[:1], r[2], r[3], r[4]) for r in group],
                              pa.binary(8))})
        data = _parquet_bytes(table)
        storage.write_bytes_atomic(ns.new_file(k, first_sid), data)
        written += len(data)
    return written


def _parquet_bytes(table: object) -> bytes:
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def read_bucket_keys(ns: Namespace, k: int) -> tuple[dict[bytes, tuple[str, int]], list[str]]:
    """Every key stored in bucket ``k`` → ``(file, row)`` of its first copy (files in name
    order), and the files that could not be read (reported, then ignored)."""
    import pyarrow.parquet as pq

    fs, path = storage.filesystem(ns.bucket(k))
    fs.invalidate_cache()
    if not fs.exists(path):
        return {}, []
    index: dict[bytes, tuple[str, int]] = {}
    bad = []
    for name in sorted(p for p in fs.find(path) if p.endswith(".parquet")):
        url = name if storage.is_local(ns.url) else ns.url.split("://")[0] + "://" + name
        try:
            with fs.open(name, "rb") as f:
                keys = pq.read_table(f, columns=["key"]).column("key").to_pylist()
        except Exception:  # a file cut short by a kill, or damaged: its rows are encoded again
            bad.append(url)
            continue
        for row, key in enumerate(keys):
            index.setdefault(key, (url, row))
    return index, bad


def read_rows(url: str, rows: list[int]) -> list[dict | None]:
    """Rows of one store file as dicts, None where the checksum fails."""
    t = storage.read_parquet(url).take(rows).to_pylist()
    return [r if row_check(r["key"], r["units"], r["vectors"], r["sentence"]) == r["check"]
            else None for r in t]


def unit_vectors(row: dict, dim: int) -> dict[str, np.ndarray]:
    """A stored row's unit → float16 vector."""
    vec = np.frombuffer(row["vectors"], np.float16).reshape(len(row["units"]), dim)
    return dict(zip(row["units"], vec, strict=True))


# -- listing and pruning ---------------------------------------------------------------------


def list_store(store: str) -> list[dict]:
    """One entry per namespace: its descriptor, rows, bytes, files, oldest and newest write."""
    fs, root = storage.filesystem(store)
    _check_marker(store)
    out = []
    for entry in sorted(fs.ls(root, detail=False)):
        base = entry.rstrip("/").rsplit("/", 1)[-1]
        if not base.startswith("ns-"):
            continue
        url = storage.join(store, base)
        if fs.isdir(entry) and not fs.exists(f"{entry.rstrip('/')}/_NAMESPACE.json"):
            log.warning("skipped %s: it has no _NAMESPACE.json (rows a build wrote while the "
                        "namespace was pruned?); the next build with its teacher writes it "
                        "again, or remove the folder", url)
            continue
        desc = _namespace_descriptor(url)
        infos = fs.find(storage.filesystem(url)[1], detail=True)
        root_ns = storage.filesystem(url)[1].rstrip("/") + "/"
        rows, files, foreign = _judge_files(url, infos, root_ns)
        stamps = [modified(v) for v in infos.values()]  # the namespace file counts as a write
        out.append({"namespace": base, **{k: desc[k] for k in ("teacher_sha256", "runtime",
                                                               "max_tokens", "dim")},
                    "sentences": rows, "bytes": sum(int(infos[k]["size"]) for k in files),
                    "files": len(files), "oldest": min(stamps, default=None),
                    "newest": max(stamps, default=None), "foreign": foreign})
    return out


# What a namespace holds: its descriptor, the rows' Parquet files (named as Namespace.new_file
# names them; a cut-short atomic write's temporary too: storage.write_bytes_atomic), and the
# builds' uses of it (swe.lease.use_lease); anything else is not the store's.
_STORE_FILE = re.compile(rf"(_NAMESPACE\.json|b[0-9a-f]/\d{{20}}-[0-9a-f]{{12}}\.parquet)"
                         rf"({storage.ATOMIC_TEMP})?|{USE_FILE.pattern}")
ROW_COLUMNS = ["key", "lang", "units", "vectors", "sentence", "check"]


def _judge_files(url: str, infos: dict, root: str) -> tuple[int, list[str], list[str]]:
    """``(rows, row files, foreign files)`` of namespace ``url``'s listing, judged by name and
    content (a row file by its footer: Parquet with the store's columns). A file named like one
    that is not (a user's, or a damaged one) is foreign: prune never removes it."""
    rows, files, foreign = 0, [], []
    for name in sorted(infos):
        rel = name.removeprefix(root)
        footer = parquet_footer(storage.join(url, rel)) if rel.endswith(".parquet") else None
        if not _STORE_FILE.fullmatch(rel) or not _is_the_stores(url, rel, footer):
            foreign.append(rel)
        elif footer is not None:
            rows += footer[1]
            files.append(name)
    return rows, files, foreign


def _is_the_stores(url: str, rel: str, footer: tuple | None) -> bool:
    """Whether ``rel``, named as the store names its files, holds what the store writes there:
    a row file the store's columns, a use a swe lease, a descriptor or a temporary their first
    bytes (:func:`swe.leftovers.is_swes_file`)."""
    if rel.endswith(".parquet"):
        return footer is not None and footer[0] == ROW_COLUMNS
    if USE_FILE.fullmatch(rel):
        return "foreign" not in (Lease(url, file=rel).holder() or {"foreign": "gone"})
    return is_swes_file(storage.join(url, rel))


def restore_descriptor(ns: Namespace) -> None:
    """Write ``ns``'s ``_NAMESPACE.json`` again when a prune removed the namespace while a build
    used it (that build's rows are kept and listed again)."""
    meta = storage.join(ns.url, "_NAMESPACE.json")
    fs, path = storage.filesystem(meta)
    fs.invalidate_cache(path)
    if not fs.exists(path):
        storage.write_bytes(meta, json.dumps(ns.descriptor, indent=1).encode())


def _check_marker(store: str) -> None:
    """Refuse a path that is not a store: an empty one (the working folder), a line break, no
    marker, or a marker that is not a store's (damaged, or a folder)."""
    from swe.inputs import check_path_text

    try:
        check_path_text(store, "the store")
    except ValueError as e:
        raise StoreError(str(e)) from None
    if storage.is_local(store):
        _check_local_folder(storage.filesystem(store)[1], store)
    marker = storage.join(store, MARKER)
    if not storage.filesystem(marker)[0].exists(storage.filesystem(marker)[1]):
        raise StoreError(f"{store} is not a teacher store (no {MARKER})")
    try:
        found = json.loads(storage.read_bytes(marker))
    except (OSError, ValueError) as e:
        raise StoreError(f"{marker} cannot be read as a store's marker ({e}): is {store} a "
                         "teacher store? Restore the file, or name the store's folder") from None
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        raise StoreError(f"{marker} is not a teacher store's marker (no format "
                         f"{FORMAT!r}): is {store} a teacher store?")


def _check_local_folder(path: str, store: str) -> None:
    """Name what a local store path is when it is not a folder: missing, a dangling link, a
    link loop, a named pipe or another file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        what = "a dangling symbolic link" if os.path.islink(path) else "missing"
        raise StoreError(f"{store} is {what}: name a teacher store's folder") from None
    except OSError as e:  # ELOOP: a symbolic link loop
        raise StoreError(f"{store} cannot be opened ({e.strerror}): name a teacher store's "
                         "folder") from None
    if not stat.S_ISDIR(mode):
        raise StoreError(f"{store} is {file_kind(mode)}, not a teacher store's folder")


def _namespace_descriptor(url: str) -> dict:
    """A namespace's ``_NAMESPACE.json``; a missing or damaged one is a :class:`StoreError`
    naming it (the namespace can be removed by hand, or with ``prune`` once it is readable)."""
    path = storage.join(url, "_NAMESPACE.json")
    try:
        desc = json.loads(storage.read_bytes(path))
        if not isinstance(desc, dict) or not all(
                k in desc for k in ("teacher_sha256", "runtime", "max_tokens", "dim")):
            raise ValueError("not a namespace descriptor")
        for key, kind in (("teacher_sha256", str), ("runtime", str), ("max_tokens", int),
                          ("dim", int)):
            if not isinstance(desc[key], kind) or isinstance(desc[key], bool):
                raise ValueError(f"its {key} is not {'a string' if kind is str else 'an integer'}")
    except (FileNotFoundError, NotADirectoryError):
        raise StoreError(f"{path} is missing: {url} is not a complete namespace; remove it, "
                         "or restore the file") from None
    except IsADirectoryError:
        raise StoreError(f"{path} is a folder, not a namespace's descriptor: remove {url}, or "
                         "restore the file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise StoreError(f"{path} is damaged ({e}); restore it from a backup, or remove "
                         f"{url} (its sentences are encoded again when a build needs them)"
                         ) from None
    return desc


MIN_AGE_DAYS = 1 / 24


def prune_problem(teacher: str | None, runtime: str | None,
                  older_than_days: float | None) -> str | None:
    """What is wrong with prune's filters, or ``None``. Every filter must be able to match less
    than everything: no filter at all, an empty teacher prefix, an unknown runtime, or an age
    that is not a finite number of days above 0 would remove every namespace."""
    from swe.build.teacher.runtime import RUNTIMES

    if teacher is None and runtime is None and older_than_days is None:
        return ("prune needs --teacher, --runtime or --older-than-days: it removes the "
                "namespaces that match every filter given (see them with `swe store list`)")
    if teacher is not None and not re.fullmatch(r"[0-9a-f]{1,64}", teacher):
        return (f"--teacher {teacher!r} is not a teacher: give hex digits of its "
                "sha256, as `swe store list` shows it (an empty value would match every "
                "namespace)")
    if runtime is not None and runtime not in RUNTIMES:
        return f"--runtime {runtime!r} is not a runtime; choose {', '.join(RUNTIMES)}"
    if older_than_days is not None and not (math.isfinite(older_than_days)
                                            and older_than_days >= MIN_AGE_DAYS):
        return (f"--older-than-days {older_than_days} must be a finite number of days, at least "
                f"{MIN_AGE_DAYS:.4g} (an hour): a smaller age, a negative value or nan would "
                "match every namespace not written this very moment")
    return None


def prune(store: str, teacher: str | None = None, runtime: str | None = None,
          older_than_days: float | None = None, dry_run: bool = False) -> list[dict]:
    """Remove the namespaces matching every given filter (teacher: a sha256 prefix; age: the
    newest write); the removed entries (with ``dry_run``, the ones that would be removed, and
    nothing is). Filters that could match everything are refused (:func:`prune_problem`)."""
    teacher = teacher.lower() if isinstance(teacher, str) else teacher  # as list shows it
    problem = prune_problem(teacher, runtime, older_than_days)
    if problem:
        raise StoreError(problem)
    cutoff = time.time() - older_than_days * 86400 if older_than_days is not None else None
    matched = [ns for ns in list_store(store)
               if (teacher is None or ns["teacher_sha256"].startswith(teacher))
               and (runtime is None or ns["runtime"] == runtime)
               and (cutoff is None or (ns["newest"] or 0) <= cutoff)]
    for ns in matched:
        users = live_uses(storage.join(store, ns["namespace"]))
        if users:
            raise StoreError(f"{storage.join(store, ns['namespace'])} is in use by {users[0]}"
                             f"{f' and {len(users) - 1} more' if len(users) > 1 else ''}: wait "
                             "for the build to finish (nothing was removed)")
        if ns["foreign"]:
            raise StoreError(f"{storage.join(store, ns['namespace'])} holds files that are not "
                             f"the store's, or are damaged ({', '.join(ns['foreign'][:3])}"
                             f"{', ...' if len(ns['foreign']) > 3 else ''}); prune would delete "
                             "them: move them out of the store first (nothing was removed)")
    for ns in matched if not dry_run else []:
        storage.remove_tree(storage.join(store, ns["namespace"]))
    return matched


def size(ns: Namespace) -> tuple[int, int]:
    """``(files, bytes)`` of a namespace."""
    fs, path = storage.filesystem(ns.url)
    fs.invalidate_cache()
    infos = fs.find(path, detail=True)
    files = [v for k, v in infos.items() if k.endswith(".parquet")]
    return len(files), sum(int(v["size"]) for v in files)

