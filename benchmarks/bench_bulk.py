"""Bulk encoding throughput: pipelines/encode.py's job (Ray Data) vs one process.

    python benchmarks/bench_bulk.py --model out/bench-model --sentences 1000000

Writes the first ``--sentences`` English Wikipedia sentences (``corpora/en_wikipedia`` in
``--data``) to one plain-text file, then times
(a) one process reading that file and calling ``StaticModel.encode`` in batches, and (b)
``swe.bulk.encode_files`` on a local Ray with ``--cpus`` CPUs (planning, reading, encoding,
writing Parquet and the row-count check included; Ray start-up excluded).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import tempfile
import time
from pathlib import Path

from swe.eval.data import data_root, wikipedia_files


def _single_process(model, src: Path, parquet: Path | None) -> float:
    """Seconds for one process to read ``src`` and encode it (and write Parquet if asked)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    t = time.perf_counter()
    with open(src, encoding="utf-8") as f:
        batch: list[str] = []
        row = 0
        for line in f:
            batch.append(line.rstrip("\n"))
            if len(batch) == 65536:
                writer = _emit(model, batch, row, parquet, writer, pa, pq)
                row += len(batch)
                batch = []
        writer = _emit(model, batch, row, parquet, writer, pa, pq)
    if writer is not None:
        writer.close()
    return time.perf_counter() - t


def _emit(model, batch, row, parquet, writer, pa, pq):
    vectors = model.encode(batch)
    if parquet is None:
        return None
    emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
    table = pa.table({"row": pa.array(range(row, row + len(batch)), pa.int64()),
                      "embedding": emb})
    writer = writer or pq.ParquetWriter(parquet, table.schema)
    writer.write_table(table)
    return writer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--sentences", type=int, default=1_000_000)
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--data", type=Path, default=data_root(), help="the shared data dir")
    args = p.parse_args()

    from swe import StaticModel
    from swe.bulk import encode_files
    from swe.raysetup import init_ray

    tmp = Path(tempfile.mkdtemp(prefix="swe-bench-"))
    src = tmp / "sentences.txt"
    n = 0
    with open(src, "w", encoding="utf-8") as out:
        for corpus in wikipedia_files(args.data):
            with lzma.open(corpus, "rt", encoding="utf-8") as f:
                for line in f:
                    if n == args.sentences:
                        break
                    out.write(line)
                    n += 1
    print(f"{n} sentences in {src}")

    # A freshly loaded model each time: cold, like every encoder actor of the job.
    single = n / _single_process(StaticModel.load(args.model), src, None)
    single_write = n / _single_process(StaticModel.load(args.model), src, tmp / "single.parquet")

    init_ray(num_cpus=args.cpus)
    summary = encode_files(args.model, [str(src)], str(tmp / "out"))
    report = {"sentences": n, "cpus": args.cpus, "single_process_rows_per_s": round(single),
              "single_process_with_parquet_rows_per_s": round(single_write),
              "ray_job_rows_per_s": round(summary.rows_per_s),
              "ray_over_single": round(summary.rows_per_s / single, 2),
              "ray_job_seconds": summary.seconds, "cpu_count": os.cpu_count()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
