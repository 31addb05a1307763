"""Paper §5 analyses of built models: norm vs frequency, top principal-component words, and a
quality / speed plot.

    python pipelines/analyze.py --model out/en-30k/step1 --model out/results/step2 \\
        --model out/en-30k/step3 --json out/results/analysis.json \\
        --speed out/results/speed.json --threads 1 \\
        --quality out/en-30k/step3=74.68 --quality teacher:minilm=82.03 \\
        --png out/results/quality_speed.png

Prints a Markdown table of Spearman's ρ between word-vector L2 norm and frequency rank per model
(per language for a multi-language model, from its build's ``work/vocab``), then each model's
top principal components with the words at both ends. ``--png`` plots ``--quality`` scores
(``SPEC=SCORE``, e.g. STS-B test ×100) against the sentences/s that ``python -m swe.speed``
measured for the same spec at ``--threads`` (in ``--speed``), marker area ∝ size on disk;
``--name SPEC=LABEL`` relabels a point.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from swe.analysis import (
    norm_by_frequency_bins,
    norm_frequency_spearman,
    norm_frequency_table,
    quality_speed_plot,
    top_component_words,
)


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.rpartition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected SPEC=VALUE, got {item!r}")
    return key, value


def _args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], help="a swe model dir (repeatable)")
    p.add_argument("--components", type=int, default=3)
    p.add_argument("--words", type=int, default=10, help="words per end of each component")
    p.add_argument("--json", help="write norm/frequency and component words here")
    p.add_argument("--png", help="write the quality / speed plot here (needs --speed, --quality)")
    p.add_argument("--speed", help="JSON written by python -m swe.speed --json or by "
                   "pipelines/evaluate.py --speed")
    p.add_argument("--threads", default="1", help="which thread count's speed to plot")
    p.add_argument("--quality", type=_pair, action="append", default=[],
                   help="SPEC=SCORE (repeatable)")
    p.add_argument("--name", type=_pair, action="append", default=[],
                   help="SPEC=LABEL for the plot (repeatable)")
    p.add_argument("--ylabel", default="STS-B test Spearman × 100")
    args = p.parse_args(argv)
    if not args.model and not args.png:
        p.error("nothing to do: give --model and/or --png")
    if args.png and not (args.speed and args.quality):
        p.error("--png needs --speed and --quality")
    return args


def plot_points(speed: dict, quality: dict[str, float], threads: str,
                names: dict[str, str]) -> list[dict]:
    """Points for :func:`quality_speed_plot`: each ``quality`` spec joined with its speed
    result at ``threads``."""
    by_spec = {r["spec"]: r for r in speed["results"] if str(r["threads"]) == str(threads)}
    missing = sorted(set(quality) - set(by_spec))
    if missing:
        raise SystemExit(f"no speed result at threads={threads} for {missing}")
    return [{"name": names.get(s, s), "quality": q, "sentences_per_s":
             by_spec[s]["sentences_per_s"], "size_bytes": by_spec[s]["size_bytes"]}
            for s, q in quality.items()]


def main(argv=None) -> None:
    args = _args(argv)
    report: dict = {"models": {}}
    if args.model:
        print("| model | language | ρ(norm, rank) | ρ, top 1,000 words | mean norm by rank "
              "decile (frequent → rare) |")
        print("|---|---|---:|---:|---|")
    for model in args.model:
        table = norm_frequency_table(model)
        entry: dict = {"norm_frequency_spearman": table}
        for lang, rho in table.items():
            single = len(table) == 1
            top = bins = None
            if rho is not None:
                top = norm_frequency_spearman(model, None if single else lang, top=1000)
                bins = norm_by_frequency_bins(model, 10, None if single else lang)
                entry.setdefault("norm_frequency_spearman_top1000", {})[lang] = top
                entry.setdefault("norm_by_rank_decile", {})[lang] = bins
            print(f"| {model} | {lang} | {'–' if rho is None else f'{rho:+.3f}'} | "
                  f"{'–' if top is None else f'{top:+.3f}'} | "
                  f"{' '.join(format(b['mean_norm'], '.2f') for b in bins or [])} |")
        report["models"][model] = entry
    for model in args.model:
        comps = top_component_words(model, args.components, args.words)
        report["models"][model]["top_components"] = comps
        print(f"\n### {model}\n")
        print("| PC | var. | + end | − end |")
        print("|---|---:|---|---|")
        for c in comps:
            print(f"| {c['component']} | {100 * c['explained_variance_ratio']:.1f}% | "
                  f"{' '.join(c['positive'])} | {' '.join(c['negative'])} |")
    if args.png:
        speed = json.loads(Path(args.speed).read_text(encoding="utf-8"))
        if isinstance(speed.get("speed"), dict):  # pipelines/evaluate.py --speed output
            speed = {"results": list(speed["speed"].values())}
        quality = {s: float(q) for s, q in args.quality}
        points = plot_points(speed, quality, args.threads, dict(args.name))
        first = speed["results"][0]
        title = (f"quality vs speed: {args.threads} thread{'s' if args.threads != '1' else ''}"
                 f", {first.get('machine', '')} with {first.get('cpu_count', '?')} CPUs")
        quality_speed_plot(points, args.png, ylabel=args.ylabel, title=title)
        report["plot"] = {"png": args.png, "threads": args.threads, "points": points}
        print(f"\nwrote {args.png}", file=sys.stderr)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False),
                                   encoding="utf-8")


if __name__ == "__main__":
    main()
