"""Bulk encoding: every row of a Parquet/JSONL/text dataset → Parquet embeddings, on Ray Data.

    swe encode --model PATH --input PATH_OR_GLOB --output DIR \\
        [--text-column text] [--id-column id] [--keep-columns a b] [--dtype float16] [--dim 128]

Inputs and output may be local or s3:// (credentials and AWS_ENDPOINT_URL from the environment);
inputs may be gzip/xz/zstd/bz2 compressed. Rerunning a killed job resumes it; the previous output
stays readable until the new one is complete (readers: swe.bulk.read_output). Runs on a local
Ray, or on the cluster in RAY_ADDRESS (e.g. under `ray job submit`). See docs/bulk.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments (shared with `swe encode`)."""
    from swe.bulk.options import add_arguments
    from swe.cli import ArgumentParser, HelpFormatter

    p = ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--model", required=True, help="saved swe model (dir or s3:// prefix)")
    p.add_argument("--input", required=True, nargs="+", help="files, globs or directories")
    p.add_argument("--output", required=True, help="output dir or s3:// prefix")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an output path that is not an earlier encode output")
    add_arguments(p)
    p.add_argument("--actors", type=int, default=1, help="encoder actors at least")
    p.add_argument("--max-actors", type=int,
                   help="encoder actors at most (default: as many as the cluster has room for)")
    p.add_argument("--cpus-per-actor", type=float, default=0.5, help="CPUs each actor reserves")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also Ray's and Ray Data's own progress output and logs")
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the job; one ``error: …`` line and its exit status (:mod:`swe.commands`)."""
    args = parser(prog).parse_args(argv)
    from swe.raysetup import configure_console

    configure_console(verbose=args.verbose)
    from swe.bulk import EncodeOptions, encode_files
    from swe.commands import failed

    opts = EncodeOptions.from_args(args)
    try:
        summary = encode_files(args.model, args.input, args.output, options=opts,
                               actors=args.actors, max_actors=args.max_actors,
                               cpus_per_actor=args.cpus_per_actor, overwrite=args.overwrite)
    except BaseException as e:  # one line and its exit status (swe.commands); others re-raised
        return failed(e, [args.model, args.output, *args.input],
                      kept=f"the parts written so far under {args.output} are kept (the "
                           "previous output, if any, is untouched)")
    print(json.dumps(asdict(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
