"""The output's layout and its commit protocol: what is ours, resume state, publishing, readers.

An output is a directory (or ``s3://`` prefix)::

    <output>/_manifest.json              the current version: its parts, rows, checksums, options
    <output>/v-<run>/_run.json           a run's spec (inputs, model, options), written first
    <output>/v-<run>/<file>-<chunk>.parquet   parts, each written once under a deterministic name
    <output>/v-<run>/_receipts/<file>-<chunk>.json   rows, bytes, checksum; written after its part

A run is named by a hash of its inputs, model and options, so a rerun of the same command finds
its own receipts and encodes only the missing parts. ``_manifest.json`` is written last, in one
atomic write; the previous version stays readable until then and is removed only after.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from swe import storage
from swe.artifacts import is_regular, parquet_footer, refuse_inside, swe_folder_at_or_in
from swe.lease import LEASE_FILE

__all__ = ["FORMAT", "MANIFEST", "check_target", "find_receipts", "output_parts", "publish",
           "read_manifest", "read_output", "run_dir"]

log = logging.getLogger("swe.bulk")

FORMAT = "swe-bulk-encode"
MANIFEST = "_manifest.json"
RUN_PREFIX = "v-"


def run_dir(output: str, run: str) -> str:
    """Where run ``run``'s parts live."""
    return storage.join(output, RUN_PREFIX + run)


def read_manifest(output: str) -> dict | None:
    """The current manifest of an encode output, or None when there is none."""
    try:
        data = json.loads(storage.read_bytes(storage.join(output, MANIFEST)))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _entries(output: str) -> list[tuple[str, str]] | None:
    """``(name, type)`` of the entries directly under ``output``; None when nothing is there;
    ``[("", "file")]`` when ``output`` is itself a file."""
    fs, path = storage.filesystem(output)
    fs.invalidate_cache()
    if not fs.exists(path):
        return None
    if not fs.isdir(path):
        return [("", "file")]
    return [(os.path.basename(e["name"].rstrip("/")), e["type"])
            for e in fs.ls(path, detail=True)]


def _ours(output: str, entries: list[tuple[str, str]]) -> bool:
    """Everything under ``output`` was written by this job (a manifest, or run dirs)."""
    if entries == [("", "file")]:
        return False
    if read_manifest(output) is not None:
        return True
    fs, path = storage.filesystem(output)
    for name, kind in entries:
        if _manifest_temp(name, kind) or name.startswith(LEASE_FILE):
            continue  # a manifest write cut short; the lease (ours, or a killed encode's)
        if kind != "directory" or not name.startswith(RUN_PREFIX):
            return False
        if not fs.exists(f"{path}/{name}/_run.json"):
            return False
    return bool(entries)


def _manifest_temp(name: str, kind: str) -> bool:
    """Whether entry ``name`` is a manifest write cut short: a file named as
    :func:`storage.write_bytes_atomic` names its temporary (``_manifest.json.tmp-<pid>-<hex>``);
    any other name, a user's ``_manifest.json.tmp-notes`` say, is not this job's."""
    return kind == "file" and _MANIFEST_TEMP.fullmatch(name) is not None


_MANIFEST_TEMP = re.compile(re.escape(MANIFEST) + storage.ATOMIC_TEMP)


def _not_a_runs(output: str, name: str) -> list[str]:
    """The files under run folder ``name`` that its run did not write (a user's), by relative
    path, judged by content, not by name alone: the run's ``_run.json`` (naming this run), each
    part with its receipt (the receipt names the part and its size), a part a kill cut off
    before its receipt (Parquet with the encoder's ``embedding`` column), and temporaries of
    cut-short writes."""
    fs, path = storage.filesystem(output)
    root = f"{path}/{name}/"
    receipts = find_receipts(output, name.removeprefix(RUN_PREFIX))
    foreign = []
    for file in sorted(fs.find(root)):
        rel = file.removeprefix(root)
        kind = _RUN_FILE.fullmatch(rel)
        url = storage.join(output, name, rel)
        ours = kind is not None and (
            kind["temp"] is not None
            or (kind["spec"] and _names_run(url, name.removeprefix(RUN_PREFIX)))
            or (kind["receipt"] or kind["part"]) in receipts
            or (kind["part"] and _is_a_part(url)))
        if not ours:
            foreign.append(rel)
    return foreign


# What a run writes in its folder (and a cut-short atomic write's temporary)
_RUN_FILE = re.compile(r"(?:(?P<spec>_run\.json)|(?P<part>\d+-\d+)\.parquet"
                       r"|_receipts/(?P<receipt>\d+-\d+)\.json)"
                       rf"(?P<temp>{storage.ATOMIC_TEMP})?")


def _names_run(url: str, run: str) -> bool:
    """Whether ``url`` is a run spec that names run ``run``."""
    try:
        spec = json.loads(storage.read_bytes(url))
    except (OSError, ValueError):
        return False
    return isinstance(spec, dict) and spec.get("format") == FORMAT and spec.get("run") == run


def _is_a_part(url: str) -> bool:
    """Whether ``url`` is Parquet with the encoder's ``embedding`` column (its footer only)."""
    footer = parquet_footer(url)
    return footer is not None and "embedding" in footer[0]


def _run_dir(output: str, name: str, kind: str) -> bool:
    """Whether entry ``name`` of ``output`` is a run folder of this job (it holds ``_run.json``)."""
    fs, path = storage.filesystem(output)
    return kind == "directory" and name.startswith(RUN_PREFIX) and fs.exists(
        f"{path}/{name}/_run.json")


def _held(output: str, entries: list[tuple[str, str]]) -> str:
    """The swe folder other than an encode output that ``output`` is, or that one of its entries
    other than this job's own is or holds (a saved model kept inside an encode output); ``""``."""
    held = swe_folder_at_or_in(output, own="the swe encode output")
    if held or read_manifest(output) is None:
        return held  # not an encode output: the walk above went through all of it
    for name, kind in entries:
        if kind == "directory" and not _run_dir(output, name, kind):
            held = swe_folder_at_or_in(storage.join(output, name))
            if held:
                return held
    return ""


def check_target(output: str, model: str, patterns: list[str], files: list[str],
                 overwrite: bool) -> None:
    """Refuse, before any work, an output that is or holds the model or an input, or lies
    inside them; and one that holds something other than an earlier encode output, unless
    ``overwrite``. With ``overwrite``, a plain file at ``output`` is removed now."""
    plain = [p for p in patterns if not any(c in p for c in "*?[")]  # globs: their files
    for what, url in [("the model", model)] + [("an input", p) for p in (*plain, *files)]:
        if storage.overlaps(output, url):
            raise ValueError(f"--output {output} overlaps {what} ({url}): writing there would "
                             "replace it; choose an output path outside the model and inputs")
    refuse_inside(output)
    entries = _entries(output)
    held = _held(output, entries or [])
    if held:
        raise FileExistsError(f"--output {output} is or holds {held}; swe encode never replaces "
                              "one, even with --overwrite: choose another path")
    if not entries or _ours(output, entries):
        return
    if not overwrite:
        kind = "a file" if entries == [("", "file")] else "a folder that is not an encode output"
        raise FileExistsError(f"--output {output} is {kind} (no {MANIFEST}); refusing to "
                              "replace it. Choose another path, or pass --overwrite to replace "
                              "it (a folder's content is removed once the new output is "
                              "complete; a file at once)")
    if entries == [("", "file")]:
        fs, path = storage.filesystem(output)
        fs.rm(path)


def find_receipts(output: str, run: str) -> dict[str, dict]:
    """The verified parts of run ``run``: part name → receipt, for parts whose receipt exists
    and whose file has the size the receipt records (fetched concurrently on object stores)."""
    fs, root = storage.filesystem(run_dir(output, run))
    fs.invalidate_cache()
    if not fs.exists(f"{root}/_receipts"):
        return {}
    sizes = {os.path.basename(k): v["size"] for k, v in fs.find(root, detail=True).items()
             if k.endswith(".parquet")}
    names = [p for p in fs.find(f"{root}/_receipts") if p.endswith(".json")
             and (not storage.is_local(output) or is_regular(p))]  # a pipe would block
    blobs = fs.cat(names) if names else {}
    out = {}
    for blob in blobs.values():
        try:
            receipt = json.loads(blob)
        except ValueError:
            continue
        if sizes.get(receipt.get("part", "") + ".parquet") == receipt.get("bytes"):
            out[receipt["part"]] = receipt
    return out


def publish(output: str, run: str, manifest: dict, overwrite: bool = False) -> None:
    """Make run ``run`` the current version (one atomic manifest write), then remove what the
    previous versions left: other run dirs, and with ``overwrite`` anything else there."""
    storage.write_bytes_atomic(storage.join(output, MANIFEST),
                               json.dumps(manifest, indent=1).encode())
    fs, path = storage.filesystem(output)
    for name, kind in _entries(output) or []:
        ours = _manifest_temp(name, kind) or _run_dir(output, name, kind)
        if name in (MANIFEST, RUN_PREFIX + run) or name.startswith(LEASE_FILE) or not (
                ours or overwrite):
            continue
        foreign = [] if overwrite or kind != "directory" else _not_a_runs(output, name)
        if foreign:
            log.warning("kept %s/%s from a previous version: it holds files swe did not write "
                        "(%s); move them, then remove the folder", output, name,
                        ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else ""))
            continue
        try:
            fs.rm(f"{path}/{name}", recursive=True)
        except OSError as e:  # the new version is complete; the next run retries the cleanup
            log.warning("could not remove %s/%s from a previous version (%s); the next run "
                        "removes it", output, name, e)


def output_parts(output: str) -> list[str]:
    """URLs of the current version's Parquet parts, from its manifest."""
    manifest = read_manifest(output)
    if manifest is None:
        raise FileNotFoundError(f"{output} has no {MANIFEST}: it is not a finished encode "
                                "output (run pipelines/encode.py, or wait for it to finish)")
    return [storage.join(output, p["path"]) for p in manifest["parts"]]


def read_output(output: str) -> Any:
    """The current version of an encode output as a ``pyarrow.dataset.Dataset``."""
    import base64

    import pyarrow as pa
    import pyarrow.dataset as pds

    parts = output_parts(output)
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(read_manifest(output)["schema"])))
    fs, _ = storage.pyarrow_filesystem(output)
    paths = [storage.pyarrow_filesystem(p)[1] for p in parts]
    return pds.dataset(paths, schema=schema, format="parquet", filesystem=fs)
