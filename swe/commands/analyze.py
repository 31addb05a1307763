"""Paper §5 analyses of built models: norm vs frequency, top principal-component words, and a
quality / speed plot.

    swe analyze --model out/quickstart/model --json out/results/analysis.json

(`python pipelines/analyze.py …` is the same job, for `ray job submit`; ``--png`` with
``--speed`` and ``--quality`` also draws the quality / speed plot.)

Prints a Markdown table of Spearman's ρ between word-vector L2 norm and frequency rank per model
(per language for a multi-language model, from its build's ``work/vocab``), then each model's
top principal components with the words at both ends. ``--png`` plots ``--quality`` scores
(``SPEC=SCORE``, e.g. STS-B test ×100) against the sentences/s that ``python -m swe.eval.speed``
measured for the same spec at ``--threads`` (in ``--speed``), marker area ∝ size on disk;
``--name SPEC=LABEL`` relabels a point.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from swe.cli import HelpFormatter
from swe.eval.analysis import analyze


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.rpartition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected SPEC=VALUE, got {item!r}")
    return key, value


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments (shared with `swe analyze`)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--model", action="append", default=[], help="a swe model dir (repeatable)")
    p.add_argument("--components", type=int, default=3, help="principal components to show")
    p.add_argument("--words", type=int, default=10, help="words per end of each component")
    p.add_argument("--json", help="write norm/frequency and component words here")
    p.add_argument("--png", help="write the quality / speed plot here (needs --speed, --quality)")
    p.add_argument("--speed", help="JSON written by python -m swe.eval.speed --json or by "
                   "pipelines/evaluate.py --speed")
    p.add_argument("--threads", default="1", help="which thread count's speed to plot")
    p.add_argument("--quality", type=_pair, action="append", default=[],
                   help="SPEC=SCORE (repeatable)")
    p.add_argument("--name", type=_pair, action="append", default=[],
                   help="SPEC=LABEL for the plot (repeatable)")
    p.add_argument("--ylabel", default="STS-B test Spearman × 100")
    return p


def _args(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    p = parser(prog)
    args = p.parse_args(argv)
    if not args.model and not args.png:
        p.error("nothing to do: give --model and/or --png")
    if args.png and not (args.speed and args.quality):
        p.error("--png needs --speed and --quality")
    return args


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse arguments and run the job; the exit status."""
    args = _args(argv, prog)
    speed = json.loads(Path(args.speed).read_text(encoding="utf-8")) if args.png else None
    try:
        report, text = analyze(args.model, args.components, args.words, png=args.png,
                               speed=speed, quality={s: float(q) for s, q in args.quality},
                               threads=args.threads, names=dict(args.name), ylabel=args.ylabel)
    except ValueError as e:
        from swe.commands import failed

        return failed(e)
    if text:
        print(text)
    if args.png:
        print(f"\nwrote {args.png}", file=sys.stderr)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False),
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
