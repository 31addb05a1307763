"""Bulk offline encoding as a Ray Data job: files in, Parquet embeddings out.

Shape of the job:

1. *Plan* (driver): expand the input globs into files; count each file's rows in parallel tasks
   (Parquet from its footer, text/JSONL by one streaming pass alongside the job) — the
   independent count the output is checked against.
2. *Read* (tasks): one task per text/JSONL file (a compressed stream cannot be split) or per
   Parquet row group, streaming fixed-size chunks with each row's file and row number.
3. *Encode* (actor pool): each actor loads the model once; embeddings as a fixed-size-list column.
4. *Write* into a staging prefix, verify output rows == input rows, then swap it into place: a
   rerun replaces the output and never mixes old and new parts. ``_SUCCESS`` holds the summary.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from swe import storage
from swe.storage import expand_inputs, input_format, iter_lines, open_input, pyarrow_filesystem

__all__ = ["EncodeSummary", "encode_files"]

log = logging.getLogger("swe.bulk")

CHUNK_ROWS = 8192


@dataclass
class EncodeSummary:
    """What a bulk encoding job did; also written to ``<output>/_SUCCESS``."""

    output: str
    model: str
    files: int
    rows: int
    null_texts: int
    empty_texts: int
    invalid_utf8_rows: int
    dim: int
    dtype: str
    seconds: float
    rows_per_s: float
    output_files: list[str] = field(default_factory=list)


# -- reading (runs in Ray tasks) -------------------------------------------------------------


def count_rows(path: str, fmt: str) -> int:
    """Rows a file holds: Parquet footer, or lines (JSONL: non-blank lines)."""
    if fmt == "parquet":
        with open_input(path) as f:
            return pq.ParquetFile(f).metadata.num_rows
    n = 0
    last = b"\n"
    with open_input(path) as f:
        if fmt == "text":
            while chunk := f.read(1 << 22):
                n += chunk.count(b"\n")
                last = chunk[-1:]
            return n + (last != b"\n")
        return sum(1 for line in iter_lines(f) if line.strip())


def _text_chunks(path: str, fmt: str, text_col: str, id_col: str | None):
    """Yield ``(texts, ids, invalid_utf8)`` chunks of a text or JSONL file, in order."""
    texts: list = []
    ids: list = []
    bad = 0
    with open_input(path) as f:
        for lineno, raw in enumerate(iter_lines(f), 1):
            if fmt == "jsonl" and not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                bad += 1
            if fmt == "text":
                texts.append(line.removesuffix("\r"))
            else:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
                if not isinstance(obj, dict) or text_col not in obj:
                    raise ValueError(f"{path}:{lineno}: no {text_col!r} field (use --text-column)")
                if id_col is not None and id_col not in obj:
                    raise ValueError(f"{path}:{lineno}: no {id_col!r} field (use --id-column)")
                text = obj[text_col]
                texts.append(text if text is None or isinstance(text, str) else str(text))
                if id_col is not None:
                    ids.append(obj[id_col])
            if len(texts) == CHUNK_ROWS:
                yield texts, ids, bad
                texts, ids, bad = [], [], 0
    if texts:
        yield texts, ids, bad


def read_task(batch: dict, text_col: str, id_col: str | None, stats: Any) -> object:
    """Ray Data UDF: one input descriptor → chunks of rows ``(file, row, text[, id])``."""
    path = str(batch["path"][0])
    fmt = str(batch["format"][0])
    file_index = int(batch["file_index"][0])
    row = int(batch["row_offset"][0])
    if fmt == "parquet":
        rg = int(batch["row_group"][0])
        cols = [text_col] + ([id_col] if id_col else [])
        with open_input(path) as f:
            pf = pq.ParquetFile(f)
            for k, rb in enumerate(pf.iter_batches(batch_size=CHUNK_ROWS, row_groups=[rg],
                                                   columns=cols)):
                texts = rb.column(text_col)
                if not pa.types.is_string(texts.type) and not pa.types.is_large_string(
                        texts.type):
                    raise ValueError(f"{path}: column {text_col!r} is {texts.type}, not text")
                ids = rb.column(id_col) if id_col else None
                yield _chunk(file_index, path, row, texts.to_pylist(), ids, 0, stats, (rg, k))
                row += rb.num_rows
        return
    for k, (texts, ids, bad) in enumerate(_text_chunks(path, fmt, text_col, id_col)):
        yield _chunk(file_index, path, row, texts, ids or None, bad, stats, (k,))
        row += len(texts)


def _chunk(file_index: int, path: str, row: int, texts: list, ids: list | None, bad: int,
           stats: Any, key: tuple) -> pa.Table:
    import ray

    n = len(texts)
    null = sum(t is None for t in texts)
    empty = sum(1 for t in texts if t is not None and not t.strip())
    # Keyed by chunk, so a retried read task does not count twice; waited for, so the totals
    # are complete once the job is.
    ray.get(stats.put.remote(("read", file_index, *key),
                             {"rows": n, "null_texts": null, "empty_texts": empty,
                              "invalid_utf8_rows": bad}))
    cols = {"file": pa.array([path] * n, pa.string()),
            "row": pa.array(np.arange(row, row + n, dtype=np.int64)),
            "text": pa.array(texts, pa.string())}
    if ids is not None:
        cols["id"] = ids if isinstance(ids, pa.Array) else pa.array(ids)
    return pa.table(cols)


class Encoder:
    """Ray Data actor: loads the model once, turns ``text`` into an ``embedding`` column."""

    def __init__(self, model: str, dtype: str, id_col: str | None) -> None:
        from swe.model import StaticModel

        self.model = StaticModel.load(model)
        self.dtype = np.dtype(dtype)
        self.id_col = id_col

    def __call__(self, table: pa.Table) -> pa.Table:
        vectors = self.model.encode(table.column("text").to_pylist()).astype(self.dtype)
        emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
        if self.id_col:
            return pa.table({self.id_col: table.column("id"), "embedding": emb})
        return pa.table({"file": table.column("file"), "row": table.column("row"),
                         "embedding": emb})


def _stats_actor():
    import ray

    @ray.remote(num_cpus=0)
    class Stats:
        def __init__(self) -> None:
            self.parts: dict = {}

        def put(self, key: tuple, value: dict) -> None:
            self.parts[key] = value

        def totals(self) -> dict:
            out: dict = {}
            for v in self.parts.values():
                for k, x in v.items():
                    out[k] = out.get(k, 0) + x
            return out

    return Stats.remote()


# -- the job ----------------------------------------------------------------------------------


def _plan(files: list[str], fmt: str, text_col: str, id_col: str | None
          ) -> tuple[list[dict], list]:
    """Read descriptors (one per text file or Parquet row group) and refs to each file's row
    count. Parquet footers are read now (they define the row groups); text files are counted by
    tasks that run alongside the job, so the check costs no extra wall time on a busy cluster."""
    import ray

    from swe.raysetup import get

    @ray.remote(num_cpus=0.25)
    def describe(index: int, path: str) -> tuple[list[dict], int]:
        with open_input(path) as f:
            pf = pq.ParquetFile(f)
            meta, names = pf.metadata, pf.schema_arrow.names
        for col in (text_col, id_col):
            if col is not None and col not in names:
                raise ValueError(f"{path}: no column {col!r}; columns are {names} "
                                 "(use --text-column/--id-column)")
        out, offset = [], 0
        for rg in range(meta.num_row_groups):
            out.append({"file_index": index, "path": path, "format": "parquet",
                        "row_group": rg, "row_offset": offset})
            offset += meta.row_group(rg).num_rows
        return out, meta.num_rows

    count = ray.remote(num_cpus=0.25)(count_rows)
    tasks: list[dict] = []
    counts: list = []
    parquet: list = []
    for i, path in enumerate(files):
        kind = input_format(path, fmt)[0]
        if kind == "parquet":
            parquet.append(describe.remote(i, path))
        else:
            tasks.append({"file_index": i, "path": path, "format": kind, "row_group": 0,
                          "row_offset": 0})
            counts.append(count.remote(path, kind))
    for rg_tasks, n in get(parquet):
        tasks.extend(rg_tasks)
        counts.append(ray.put(n))
    return tasks, counts


def _swap_into_place(staging: str, output: str) -> None:
    """Replace ``output`` by ``staging``: renames locally, delete-then-move on object stores."""
    fs, out_path = storage.filesystem(output)
    _, stage_path = storage.filesystem(staging)
    if storage.is_local(output):
        old = None
        if os.path.exists(out_path):
            old = f"{out_path}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out_path, old)
        os.replace(stage_path, out_path)
        if old:
            fs.rm(old, recursive=True)
        return
    fs.invalidate_cache()
    if fs.exists(out_path):
        fs.rm(out_path, recursive=True)
    for src in fs.find(stage_path):  # object stores have no rename: copy, then delete
        fs.copy(src, out_path + src[len(stage_path):])
    fs.rm(stage_path, recursive=True)


def encode_files(
    model: str,
    inputs: list[str],
    output: str,
    *,
    text_column: str = "text",
    id_column: str | None = None,
    dtype: str = "float32",
    fmt: str = "auto",
    actors: int | None = None,
    cpus_per_actor: float = 0.5,
    batch_size: int = 4096,
) -> EncodeSummary:
    """Encode every row of ``inputs`` with the model at ``model`` into Parquet at ``output``.

    Exactly one output row per input row (checked against an independent count before the
    output is replaced); ``None``/empty texts give zero vectors and are counted.
    """
    import ray

    from swe.model import StaticModel
    from swe.raysetup import get, init_ray

    if dtype not in ("float32", "float16"):
        raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
    output = output.rstrip("/")
    files = expand_inputs(inputs)
    for p in files:  # fail on unknown formats before starting anything
        if input_format(p, fmt)[0] == "text" and id_column:
            raise ValueError(f"{p} is plain text (one text per line): it has no id column; "
                             "drop --id-column (rows are numbered)")
    probe = StaticModel.load(model)  # fail fast on a bad model path, and learn its dim
    init_ray()
    start = time.perf_counter()
    tasks, counts = _plan(files, fmt, text_column, id_column)
    log.info("encoding %d files (%d read tasks) with %s", len(files), len(tasks), model)

    stats = _stats_actor()
    n_actors = actors or max(1, int(ray.available_resources().get("CPU", 1)))
    ds = ray.data.from_items(tasks, override_num_blocks=max(1, len(tasks)))
    ds = ds.map_batches(read_task, batch_size=1, batch_format="pyarrow", num_cpus=0.25,
                        fn_kwargs={"text_col": text_column, "id_col": id_column, "stats": stats})
    ds = ds.map_batches(Encoder, batch_size=batch_size, batch_format="pyarrow",
                        compute=ray.data.ActorPoolStrategy(size=n_actors), num_cpus=cpus_per_actor,
                        fn_constructor_kwargs={"model": model, "dtype": dtype,
                                               "id_col": id_column})
    staging = f"{output}.staging-{uuid.uuid4().hex[:8]}"
    pafs, stage_path = pyarrow_filesystem(staging)
    fs, stage_p = storage.filesystem(staging)
    try:
        ds.write_parquet(stage_path, filesystem=pafs, min_rows_per_file=256 * 1024)
        fs.invalidate_cache()  # the files were written by other processes
        parts = sorted(p for p in fs.find(stage_p) if p.endswith(".parquet"))
        written = 0
        for p in parts:
            with fs.open(p, "rb") as f:
                written += pq.ParquetFile(f).metadata.num_rows
        total = sum(get(counts))
        if written != total:
            raise RuntimeError(f"wrote {written} rows for {total} input rows; the output at "
                               f"{output} was left unchanged")
        _swap_into_place(staging, output)
    except BaseException:
        if fs.exists(stage_p):
            fs.rm(stage_p, recursive=True)
        raise
    seconds = time.perf_counter() - start
    counts = ray.get(stats.totals.remote())
    ray.kill(stats)
    summary = EncodeSummary(
        output=output, model=model, files=len(files), rows=total,
        null_texts=counts.get("null_texts", 0), empty_texts=counts.get("empty_texts", 0),
        invalid_utf8_rows=counts.get("invalid_utf8_rows", 0), dim=probe.dim, dtype=dtype,
        seconds=round(seconds, 3), rows_per_s=round(total / seconds, 1),
        output_files=[os.path.basename(p) for p in parts])
    storage.write_bytes(storage.join(output, "_SUCCESS"),
                        json.dumps(asdict(summary), indent=2).encode())
    print(f"encoded {summary.rows} rows ({summary.null_texts} null, {summary.empty_texts} "
          f"empty, {summary.invalid_utf8_rows} with invalid UTF-8) in {seconds:.1f}s = "
          f"{summary.rows_per_s:.0f} rows/s -> {output} ({len(parts)} Parquet files)",
          file=sys.stderr)
    return summary
