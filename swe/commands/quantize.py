"""Vocabulary quantisation: cluster a model's rows into K shared vectors, a model K/V the size.

    swe quantize out/en-60k/model --clusters 8192 --exact 1024 --output out/en-60k-k8k
    swe quantize out/en-60k/model --clusters 8192 --exact 1024 --dtype int8 --output out/k8k-int8

Each word keeps its cluster index and its norm; the centroids are saved as --dtype. The result
loads with swe.StaticModel.load and encodes with the same rule (docs/using.md). Spherical k-means
runs in Ray tasks (local Ray, or the cluster in RAY_ADDRESS); the driver holds only the
centroids, and a seed fixes the result. The output must be a new folder.
"""

from __future__ import annotations

import argparse
import json
import sys


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments."""
    from swe.cli import ArgumentParser, HelpFormatter
    from swe.matrix import DTYPES, SCALES

    p = ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("model", help="a saved swe model (dir or s3:// prefix)")
    p.add_argument("--clusters", type=int, required=True, help="K, the shared vectors (>= 2)")
    p.add_argument("--output", required=True, help="a new folder or s3:// prefix")
    p.add_argument("--dtype", default="float16", choices=DTYPES, help="the centroids' type")
    p.add_argument("--scale", default="row", choices=SCALES, help="int8: one scale per "
                   "centroid (row) or one for all (global)")
    p.add_argument("--seed", type=int, default=0, help="draws the initial centroids")
    p.add_argument("--iterations", type=int, default=20, help="k-means passes at most")
    p.add_argument("--exact", type=int, default=0, help="the first N rows (the most frequent "
                   "words) keep their own direction, as N of the K centroids")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also Ray's own output, and one line per k-means pass")
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the job; one ``error: …`` line and its exit status (:mod:`swe.commands`)."""
    args = parser(prog).parse_args(argv)
    import logging

    from swe.raysetup import configure_console

    configure_console(verbose=args.verbose)
    if args.verbose:
        logging.getLogger("swe.quantize").setLevel(logging.INFO)
    from dataclasses import asdict

    from swe.clustering import quantize_model
    from swe.commands import failed

    try:
        report = quantize_model(args.model, args.output, args.clusters, dtype=args.dtype,
                                scale=args.scale, seed=args.seed, iterations=args.iterations,
                                exact=args.exact)
    except BaseException as e:  # one line and its exit status (swe.commands); others re-raised
        return failed(e, [args.model, args.output],
                      kept="nothing was written to the output")
    print(json.dumps(asdict(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
