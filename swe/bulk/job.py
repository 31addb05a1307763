"""The bulk encoding job: check the target, resume or start a run, encode on Ray Data, verify the
row counts, publish.

1. *Check* (driver, before any work): inputs exist and have a known format; the model loads; the
   output is not the model or an input and holds nothing but an earlier encode output
   (``--overwrite`` to replace something else); Parquet footers and each JSONL file's first
   record have the columns asked for.
2. *Run*: named by a hash of inputs (name, size, mtime/ETag), model and options. A rerun of the
   same command finds its verified parts and encodes only the rest; a changed input, model or
   option starts a new run, and the log says which.
3. *Encode*: read tasks stream chunks; an elastic actor pool (``--actors`` … ``--max-actors``)
   encodes each chunk and writes its part and receipt straight to storage.
4. *Verify and publish*: rows per file from the receipts must equal each file's independent count
   (Parquet footer, or a streaming pass run alongside); then ``_manifest.json`` is written in one
   atomic write and the previous version is removed.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import hashlib
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from swe import storage
from swe.bulk import layout
from swe.bulk.encoder import Encoder
from swe.bulk.options import DTYPES, EncodeOptions
from swe.bulk.read import check_types, plan, read_task
from swe.inputs import check_path_text, expand_inputs, input_format
from swe.lease import Lease
from swe.raysetup import user_error

__all__ = ["EncodeOptions", "EncodeSummary", "encode_files"]

log = logging.getLogger("swe.bulk")


@dataclass
class EncodeSummary:
    """What a bulk encoding job did; also stored in the output's ``_manifest.json``."""

    output: str
    model: str
    run: str
    files: int
    rows: int
    parts: int
    resumed_parts: int
    null_texts: int
    non_text_values: int  # JSON text values that were not strings: encoded as zero vectors
    empty_texts: int
    invalid_utf8_rows: int
    nodes: int
    dim: int
    dtype: str
    seconds: float
    rows_per_s: float


def _validate(opts: EncodeOptions, files: list[str], actors: int, max_actors: int | None,
              cpus_per_actor: float = 0.5) -> None:
    if opts.dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {opts.dtype!r}")
    if opts.dim is not None and opts.dim < 1:
        raise ValueError(f"--dim must be positive, got {opts.dim}")
    if opts.part_rows < 1 or actors < 1 or (max_actors is not None and max_actors < actors):
        raise ValueError("need --part-rows ≥ 1, --actors ≥ 1 and --max-actors ≥ --actors")
    if not (math.isfinite(cpus_per_actor) and cpus_per_actor >= 1e-4):
        raise ValueError(f"--cpus-per-actor must be a number of at least 0.0001 (Ray's smallest "
                         f"share of a CPU), got {cpus_per_actor}")
    if opts.tokens and opts.dtype == "int8":
        raise ValueError("--tokens writes float32 or float16 word vectors; use --dtype float16 "
                         "(or float32) with --tokens")
    ours = ["embedding", *(["tokens", "token_vectors"] if opts.tokens else []),
            *(["label", "scores"] if opts.predict else []),
            *([] if opts.id_column else ["file", "row"])]
    taken = [c for c in (*opts.keep_columns, opts.id_column) if c in ours]
    if taken:
        raise ValueError(f"the output's own column {taken[0]!r} would replace the input's "
                         f"column of that name; the output has {', '.join(ours)} (keep the "
                         "input's under another name, or give --id-column)")
    for p in files:  # unknown formats fail here, before anything starts
        if input_format(p, opts.fmt)[0] == "text" and (opts.id_column or opts.keep_columns):
            raise ValueError(f"{p} is plain text (one text per line): it has no columns; drop "
                             "--id-column/--keep-columns (rows are numbered)")


def _spec(model: str, files: list[str], opts: EncodeOptions) -> tuple[str, dict]:
    """The run's name and what it is made of."""
    spec = {"model": model, "model_fingerprint": storage.fingerprint(model),
            "inputs": [[f, storage.fingerprint(f)] for f in files], "options": opts.hashed()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12], spec


def _start_run(output: str, run: str, spec: dict) -> dict[str, dict]:
    """Say whether this run resumes or replaces an earlier one; record its spec; return its
    verified parts."""
    current = layout.read_manifest(output)
    if current and current["run"] != run:
        old = current["spec"]
        changed = [k for k in ("model", "model_fingerprint", "inputs") if old.get(k) != spec[k]]
        options = json.loads(json.dumps(spec["options"]))  # as the manifest holds them
        changed += [f"--{k.replace('_', '-')}" for k, v in options.items()  # (tuples: lists)
                    if old.get("options", {}).get(k) != v]
        log.warning("%s holds run %s; its %s changed: starting a new run %s (the current "
                    "output stays until this one is complete)", output, current["run"],
                    ", ".join(changed) or "spec", run)
    run_spec = storage.join(layout.run_dir(output, run), "_run.json")
    fs, path = storage.filesystem(run_spec)
    if not fs.exists(path):
        storage.write_bytes_atomic(run_spec, json.dumps({"format": layout.FORMAT, "run": run,
                                                         "spec": spec}, indent=1).encode())
        return {}
    done = layout.find_receipts(output, run)
    log.info("resuming run %s: %d parts already written and verified", run, len(done))
    return done


def _progress(done_rows: int, counts: list, last: list) -> None:
    """A progress line at most every ~10 s, the first 10 s after the job started: rows, rows/s
    since the start (so never a rate over a burst of parts), and an ETA once the input is
    counted. ``last``: [start, time of the last line, rows done before this run]."""
    import ray

    now = time.perf_counter()
    if now - last[1] < 10:
        return
    last[1] = now
    rate = done_rows / max(now - last[0], 1e-9)
    ready, _ = ray.wait(counts, num_returns=len(counts), timeout=0)
    line = f"{done_rows:,} rows encoded, {rate:,.0f} rows/s"
    if len(ready) == len(counts):
        total = sum(ray.get(counts)) - last[2]
        eta = max(total - done_rows, 0) / max(rate, 1e-9)
        line += f", {100 * done_rows / max(total, 1):.0f}% of {total:,}, ETA {eta:,.0f}s"
    print(line, file=sys.stderr, flush=True)


def _encode(model: str, output: str, run: str, opts: EncodeOptions, tasks: list[dict],
            done: dict, counts: list, pool: tuple[int, int | None, float]) -> list[dict]:
    """Run the Ray Data job over the chunks not yet done; the receipts of the new parts."""
    import ray

    by_file: dict[int, list[int]] = {}
    for part in done:
        f, c = part.split("-")
        by_file.setdefault(int(f), []).append(int(c))
    if not tasks:
        return []
    ds = ray.data.from_items(tasks, override_num_blocks=len(tasks))
    ds = ds.map_batches(read_task, batch_size=1, batch_format="pyarrow", num_cpus=0.25,
                        fn_kwargs={"opts": opts, "done": by_file})
    actors, max_actors, cpus = pool
    ds = ds.map_batches(Encoder, batch_size=1, batch_format="pyarrow", num_cpus=cpus,
                        compute=ray.data.ActorPoolStrategy(min_size=actors, max_size=max_actors),
                        fn_constructor_kwargs={
                            "model": model, "run_dir": layout.run_dir(output, run), "opts": opts})
    new: list[dict] = []
    start = time.perf_counter()
    last = [start, start, sum(r["rows"] for r in done.values())]
    rows = 0
    for receipt in ds.iter_rows():
        new.append(dict(receipt))
        rows += receipt["rows"]
        _progress(rows, counts, last)
    return new


def _schema(output: str, parts: list[dict], opts: EncodeOptions, dim: int, model: str) -> str:
    """The output's Arrow schema (from the first part's footer), base64 IPC."""
    if parts:
        fs, path = storage.filesystem(storage.join(output, parts[0]["path"]))
        with fs.open(path, "rb") as f:
            schema = pq.ParquetFile(f).schema_arrow
    else:
        fields = ([(opts.id_column, pa.string())] if opts.id_column
                  else [("file", pa.string()), ("row", pa.int64())])
        fields += [(c, pa.string()) for c in opts.keep_columns if c != opts.id_column]
        vector = pa.list_(pa.from_numpy_dtype(opts.dtype), opts.dim or dim)
        fields.append(("embedding", vector))
        if opts.tokens:
            fields += [("tokens", pa.list_(pa.string())), ("token_vectors", pa.list_(vector))]
        if opts.predict:
            from swe.bulk.encoder import predictions
            from swe.classifier import StaticClassifier

            empty = pa.table(predictions(StaticClassifier.load(model), []))
            fields += list(zip(empty.column_names, empty.schema.types, strict=True))
        schema = pa.schema(fields)
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def _check_rows(files: list[str], counts: list[int], receipts: dict) -> None:
    """Exactly one output row per input row, file by file."""
    written = [0] * len(files)
    for r in receipts.values():
        written[r["file_index"]] += r["rows"]
    for path, n, w in zip(files, counts, written, strict=True):
        if n != w:
            raise RuntimeError(f"{path}: wrote {w} rows for its {n} input rows; the previous "
                               "output was left in place. Rerun the same command to retry")


def encode_files(model: str, inputs: list[str], output: str, *,
                 options: EncodeOptions | None = None, actors: int = 1,
                 max_actors: int | None = None, cpus_per_actor: float = 0.5,
                 overwrite: bool = False) -> EncodeSummary:
    """Encode every row of ``inputs`` with the model at ``model`` into Parquet at ``output``."""
    from swe.model import StaticModel

    opts = options or EncodeOptions()
    for p in inputs:  # before absolute(), which would read '' as the working directory
        check_path_text(p, "--input")
    model, output = storage.absolute(model), storage.output_url(output)
    storage.refuse_file_output(output, file_ok=True)  # replacing a file: check_target says
    inputs = [storage.absolute(p) for p in inputs]  # workers may run in another directory
    files = expand_inputs(inputs)
    _validate(opts, files, actors, max_actors, cpus_per_actor)
    dim = StaticModel.load(model).dim  # fail fast on a bad model path
    if opts.predict:
        from swe.classifier import StaticClassifier

        StaticClassifier.load(model)  # --predict needs a classifier: one line if it is not
    if opts.dim is not None and opts.dim > dim:
        raise ValueError(f"--dim {opts.dim} exceeds the {dim} dimensions of the model at "
                         f"{model}; use --dim {dim} or less")
    layout.check_target(output, model, inputs, files, overwrite)
    new_folder = storage.is_local(output) and not os.path.exists(output)
    try:
        with Lease(output, purpose=f"encode with {model}") as lease:  # one writer per output
            return _run(model, files, output, opts, (actors, max_actors, cpus_per_actor),
                        overwrite, lease, dim)
    except BaseException:
        if new_folder:  # a refused input leaves no empty output folder behind (rmdir: if empty)
            with contextlib.suppress(OSError):
                os.rmdir(output)
        raise


def _run(model: str, files: list[str], output: str, opts: EncodeOptions,
         pool: tuple[int, int | None, float], overwrite: bool, lease: Lease,
         dim: int) -> EncodeSummary:
    """Resume or start the run, encode, verify and publish (under the output's lease)."""
    from swe.raysetup import get, init_ray
    from swe.resources import Request, check_grantable

    run, spec = _spec(model, files, opts)
    init_ray()
    check_grantable([Request("encoder actors", "lower --cpus-per-actor or --actors",
                             count=pool[0], cpus=pool[2])])
    start = time.perf_counter()
    cols = [opts.text_column, *([opts.id_column] if opts.id_column else []),
            *opts.keep_columns]
    error, encoding = None, False
    try:
        # every input checked (footers, first lines) before the run is recorded: a refused
        # input leaves no run folder behind
        tasks, counts = plan(files, opts.fmt, cols, opts.part_rows)
        done = _start_run(output, run, spec)
        tasks = [t for t in tasks if not _group_done(t, done)]
        encoding = True
        new = _encode(model, output, run, opts, tasks, done, counts, pool)
        counts = get(counts)
    except Exception as e:
        if (error := user_error(e)) is e:
            raise
        e.__traceback__ = None  # its frames hold the failed job's actors (and their CPUs)
    if error is not None:
        if encoding:  # ... through reference cycles: free them (a full collection, seconds in
            gc.collect()  # a large process: only once the job has started actors)
        raise error
    receipts = {**done, **{r["part"]: r for r in new}}
    _check_rows(files, counts, receipts)
    order = sorted(receipts.values(), key=lambda r: tuple(map(int, r["part"].split("-"))))
    typed: dict = {}
    for r in order:
        check_types(typed, r.get("types", {}), r.get("file", r["part"]))
    parts = [{"path": f"{layout.RUN_PREFIX}{run}/{r['part']}.parquet", "rows": r["rows"],
              "bytes": r["bytes"], "sha256": r["sha256"]} for r in order]
    seconds = time.perf_counter() - start
    total = sum(counts)
    summary = EncodeSummary(
        output=output, model=model, run=run, files=len(files), rows=total, parts=len(parts),
        resumed_parts=len(done), null_texts=sum(r["nulls"] for r in order),
        non_text_values=sum(r.get("non_text", 0) for r in order),
        empty_texts=sum(r["empty"] for r in order),
        invalid_utf8_rows=sum(r["invalid_utf8"] for r in order),
        nodes=len({r.get("node") for r in new}), dim=opts.dim or dim,
        dtype=opts.dtype, seconds=round(seconds, 3), rows_per_s=round(total / seconds, 1))
    manifest = {"format": layout.FORMAT, "version": 1, "run": run, "spec": spec,
                "rows": total, "files": [{"path": f, "rows": n}
                                         for f, n in zip(files, counts, strict=True)],
                "parts": parts, "scale": 1 / 127 if opts.dtype == "int8" else 1.0,
                "schema": _schema(output, parts, opts, dim, model), "summary": asdict(summary)}
    lease.check()  # taken over while encoding: the other run owns the output now
    layout.publish(output, run, manifest, overwrite)
    _print_summary(summary, next((r["first_non_text"] for r in order
                                  if r.get("first_non_text")), ""))
    return summary


def _print_summary(summary: EncodeSummary, first_non_text: str) -> None:
    """The job's last lines on stderr: a warning for non-text values, then the counts."""
    if summary.non_text_values:
        print(f"warning: {summary.non_text_values} text values were not strings (numbers, "
              f"booleans, lists or objects) and were encoded as zero vectors, like nulls; the "
              f"first is at {first_non_text}", file=sys.stderr)
    if summary.invalid_utf8_rows:
        print(f"warning: {summary.invalid_utf8_rows} of {summary.rows} rows were not valid UTF-8 "
              "and were encoded with their undecodable bytes replaced (U+FFFD): is the input "
              "text in another encoding (convert it: iconv -f CP1252 -t UTF-8), or not text at "
              "all?", file=sys.stderr)
    print(f"encoded {summary.rows} rows ({summary.null_texts} null, {summary.non_text_values} "
          f"not text, {summary.empty_texts} empty, "
          f"{summary.invalid_utf8_rows} with invalid UTF-8) in {summary.seconds:.1f}s = "
          f"{summary.rows_per_s:.0f} rows/s -> {summary.output} ({summary.parts} parts, "
          f"{summary.resumed_parts} resumed; encoded on {summary.nodes} nodes)", file=sys.stderr)


def _group_done(task: dict, done: dict) -> bool:
    """A Parquet row group whose chunks are all written already needs no read task."""
    if task["format"] != "parquet" or task["n_chunks"] == 0:
        return False
    first = task["first_chunk"]
    return all(f"{task['file_index']}-{c}" in done for c in range(first, first + task["n_chunks"]))
