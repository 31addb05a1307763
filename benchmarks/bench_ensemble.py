"""Ensemble weights chosen on a dev STS set: every weight vector of a grid, scored at once.

    python benchmarks/bench_ensemble.py --member out/en-60k/step3 --member out/en-mpnet/step3 \\
        --member out/en-de/model --grid 0 0.25 0.5 0.75 1 --json out/eval/ens-grid.json
    python benchmarks/bench_ensemble.py --smoke   # two tiny random members

Needs only the library and the shared data. An ensemble's cosine is the weighted mean of its
members' cosines, with weights aᵢ² / Σ aⱼ² (:mod:`swe.ensemble`), so each member encodes the
dev pairs once and every weight vector is scored from those cosines. The first member's weight
is 1; each other member takes every value of ``--grid`` (0 leaves it out). Prints the best
``--top`` weight vectors by Spearman × 100 on ``--sts`` (default STS-B dev; tune on dev only),
with each member alone for reference. Build the chosen one with
``EnsembleModel([...], weights).save(DIR)`` and score it with ``pipelines/evaluate.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
from _smoke import parse

SMOKE = {"grid": [0.0, 0.5, 1.0]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--member", action="append", default=[],
                   help="a swe model dir (repeat; at least two, unless --smoke)")
    p.add_argument("--grid", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0],
                   help="weights tried for every member after the first (default: %(default)s)")
    p.add_argument("--sts", type=Path, help="a dev STS file (default: STS-B dev)")
    p.add_argument("--top", type=int, default=10, help="weight vectors printed")
    p.add_argument("--json", type=Path, help="write every weight vector's score here")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, tiny members")
    return p


def member_cosines(path: str, a: list[str], b: list[str]) -> np.ndarray:
    """The cosine of each dev pair under one member."""
    from swe.model import StaticModel

    model = StaticModel.load(path)
    return np.einsum("ij,ij->i", model.encode(a), model.encode(b))


def score_grid(cosines: list[np.ndarray], gold: np.ndarray, grid: list[float]) -> list[dict]:
    """Spearman × 100 of every weight vector (first member 1), best first."""
    from swe.eval.metrics import spearman

    rows = []
    for rest in itertools.product(grid, repeat=len(cosines) - 1):
        squares = np.square([1.0, *rest])
        mixed = sum(s * c for s, c in zip(squares, cosines, strict=True)) / squares.sum()
        rows.append({"weights": [1.0, *rest], "spearman": round(100 * spearman(mixed, gold), 2)})
    return sorted(rows, key=lambda r: -r["spearman"])


def _smoke_members(sentences: list[str], tmp: Path) -> list[str]:
    """Two 2,000-word models of the sentences' most frequent words, random 32-d vectors."""
    from swe.model import StaticModel

    words = [w for w, _ in Counter(" ".join(sentences).lower().split()).most_common(2000)]
    paths = []
    for seed in (0, 1):
        vectors = np.random.default_rng(seed).standard_normal((len(words), 32), dtype=np.float32)
        StaticModel.from_vectors(words, vectors).save(tmp / f"m{seed}")
        paths.append(str(tmp / f"m{seed}"))
    return paths


def main(argv: list[str] | None = None) -> int:
    from swe.eval.data import stsb_file
    from swe.eval.metrics import spearman
    from swe.eval.similarity import read_sts

    p = parser()
    args = parse(p, argv, SMOKE)
    if len(args.member) < 2 and not args.smoke:
        p.error("give at least two --member model dirs (or --smoke)")
    a, b, gold = read_sts(args.sts or stsb_file("dev"))
    with tempfile.TemporaryDirectory() as tmp:
        members = args.member or _smoke_members(a + b, Path(tmp))
        cosines = [member_cosines(m, a, b) for m in members]
    for m, c in zip(members, cosines, strict=True):
        print(f"alone: {100 * spearman(c, gold):.2f}  {m}")
    rows = score_grid(cosines, gold, args.grid)
    for r in rows[: args.top]:
        print(f"{r['spearman']:.2f}  weights {r['weights']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"members": members, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
