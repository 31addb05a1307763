"""Bulk encoding: every row of a Parquet/JSONL/text dataset → Parquet embeddings, on Ray Data.

    python pipelines/encode.py --model PATH --input PATH_OR_GLOB --output DIR \
        [--text-column text] [--id-column id] [--dtype float16]

Inputs and output may be local or s3:// (credentials and AWS_ENDPOINT_URL from the environment);
inputs may be gzip/xz/zstd/bz2 compressed. Runs on a local Ray, or on the cluster in RAY_ADDRESS
(e.g. under `ray job submit`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="saved swe model (dir or s3:// prefix)")
    p.add_argument("--input", required=True, nargs="+", help="files, globs or directories")
    p.add_argument("--output", required=True, help="output dir or s3:// prefix (replaced)")
    p.add_argument("--text-column", default="text", help="text column/field (Parquet, JSONL)")
    p.add_argument("--id-column", help="id column/field to carry over; default: file + row")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    p.add_argument("--format", default="auto", choices=["auto", "parquet", "jsonl", "text"])
    p.add_argument("--actors", type=int, help="encoder actors (default: one per cluster CPU)")
    p.add_argument("--cpus-per-actor", type=float, default=0.5)
    p.add_argument("--batch-size", type=int, default=4096)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from swe.bulk import encode_files

    try:
        summary = encode_files(
            args.model, args.input, args.output, text_column=args.text_column,
            id_column=args.id_column, dtype=args.dtype, fmt=args.format, actors=args.actors,
            cpus_per_actor=args.cpus_per_actor, batch_size=args.batch_size)
    except (FileNotFoundError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in asdict(summary).items() if k != "output_files"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
