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
import math
import os
import sys
from pathlib import Path

from swe import storage
from swe.cli import ArgumentParser, HelpFormatter
from swe.commands import failed
from swe.commands.report_file import check_report_file, write_report_file
from swe.eval.analysis import analyze
from swe.inputs import check_path_text, check_regular_file, open_input
from swe.modelfiles import ModelFolder

#: What ``--speed`` holds, for the messages that refuse it.
SPEED_FORM = ('{"results": [{"spec", "threads", "sentences_per_s", "size_bytes"}, …]} (python '
              '-m swe.eval.speed --json) or {"speed": {SPEC: {…}}} (swe evaluate --speed N '
              '--json)')


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.rpartition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected SPEC=VALUE, got {item!r}")
    return key, value


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments (shared with `swe analyze`)."""
    p = ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
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


def _scores(pairs: list[tuple[str, str]]) -> dict[str, float]:
    """``--quality`` as ``{spec: score}``; a score that is not a finite number is refused."""
    scores = {}
    for spec, value in pairs:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise ValueError(f"--quality {spec}={value}: expected SPEC=SCORE with SCORE a "
                             f"number, e.g. --quality {spec}=78.5")
        if spec in scores:
            raise ValueError(f"--quality names {spec} twice ({scores[spec]:g} and {score:g}); "
                             "give each spec once")
        scores[spec] = score
    return scores


def _model_inputs(model: str) -> list[str]:
    """Refuse a ``--model`` that is not a whole saved model (its config.json a regular file,
    sealed; every recorded file present at its recorded size): what the analysis reads of it."""
    check_path_text(model, "--model")
    if storage.is_local(model) and os.path.isfile(model):
        raise ValueError(f"--model {model} is a file: give a model folder (the one holding "
                         "config.json)")
    folder = ModelFolder(model)
    folder.check_sizes()
    inputs = [model]
    languages = folder.get("languages", list, [])
    vocab = Path(model).resolve().parent / "work" / "vocab"  # a multi-language build's ranks
    if storage.is_local(model) and len(languages) > 1 and vocab.exists():
        inputs.append(str(vocab))
    return inputs


def _speed_results(path: str) -> list[dict]:
    """The results in the ``--speed`` file (see :data:`SPEED_FORM`), each checked to name its
    spec and thread count."""
    check_path_text(path, "--speed")
    if storage.is_local(path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"--speed {path}: no such file")
        if os.path.isdir(path):
            raise ValueError(f"--speed {path} is a folder: give the JSON file of speed results")
        try:
            check_regular_file(path)  # a pipe or a device: reading it would never end
        except ValueError as e:
            raise ValueError(f"--speed {e}") from None
    with open_input(path) as f:
        raw = f.read()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested past any use
        raise ValueError(f"--speed {path} is not JSON ({e}); expected {SPEED_FORM}") from None
    if isinstance(data, dict) and isinstance(data.get("speed"), dict):
        results = list(data["speed"].values())
    elif isinstance(data, dict) and isinstance(data.get("results"), list):
        results = data["results"]
    else:
        raise ValueError(f"--speed {path} holds no speed results; expected {SPEED_FORM}")
    for i, r in enumerate(results):
        if not isinstance(r, dict) or not isinstance(r.get("spec"), str) or "threads" not in r:
            raise ValueError(f"--speed {path}: result {i + 1} is not a speed result with "
                             f"'spec' and 'threads'; expected {SPEED_FORM}")
    return results


def _speed(path: str, quality: dict[str, float], threads: str) -> dict:
    """``{"results": [...]}`` from ``--speed``, with a usable result at ``--threads`` for each
    ``--quality`` spec (``sentences_per_s`` > 0; ``size_bytes`` a size or absent)."""
    results = _speed_results(path)
    by_spec: dict[str, dict] = {}
    for r in (r for r in results if str(r["threads"]) == str(threads)):
        if r["spec"] in by_spec and r["spec"] in quality:
            raise ValueError(f"--speed {path} holds two results for {r['spec']} at threads "
                             f"{threads}; keep one")
        by_spec[r["spec"]] = r
    missing = sorted(set(quality) - set(by_spec))
    if missing:
        have = sorted({f"{r['spec']} (threads {r['threads']})" for r in results}) or ["none"]
        raise ValueError(f"--speed {path} has no result at --threads {threads} for --quality "
                         f"{', '.join(missing)}; it has: {', '.join(have)}")
    for spec in quality:
        r = by_spec[spec]
        rate, size = r.get("sentences_per_s"), r.get("size_bytes")
        if not _number(rate) or not rate > 0:
            raise ValueError(f"--speed {path}: {spec} at threads {threads} has sentences_per_s ="
                             f" {rate!r}; expected a number > 0")
        if size is not None and (not _number(size) or size < 0):
            raise ValueError(f"--speed {path}: {spec} at threads {threads} has size_bytes = "
                             f"{size!r}; expected a number of bytes")
        r["size_bytes"] = size  # absent: the plot's fixed marker size
    return {"results": results}


def _number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _check(args: argparse.Namespace) -> tuple[dict | None, dict[str, float]]:
    """Refuse, before any work, what the analysis cannot use and outputs that would overwrite
    an input or a folder: ``(speed results or None, --quality scores)``."""
    for flag, value in (("--components", args.components), ("--words", args.words)):
        if value < 1:
            raise ValueError(f"{flag} {value}: expected a whole number >= 1, e.g. {flag} 3")
    quality = _scores(args.quality)
    inputs = [given for model in args.model for given in _model_inputs(model)]
    if args.speed:
        check_path_text(args.speed, "--speed")
        inputs.append(args.speed)
    for spec in quality:  # a spec that names a local model: the folder measured
        kind, _, rest = spec.partition(":")
        path = rest if kind in ("teacher", "model2vec", "gem") else spec
        if path and "://" not in path and "\0" not in path and os.path.exists(path):
            inputs.append(path)
    outputs = [(flag, path) for flag, path in (("--json", args.json), ("--png", args.png))
               if path is not None]
    for flag, path in outputs:
        check_report_file(flag, path, inputs, "swe analyze", "analysis")
    if len(outputs) == 2 and storage.overlaps(args.json, args.png):
        raise ValueError(f"--json and --png are the same file ({args.json}): one would "
                         "overwrite the other; name two files")
    return (_speed(args.speed, quality, args.threads) if args.png else None), quality


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse arguments and run the job; the exit status."""
    args = _args(argv, prog)
    try:
        speed, quality = _check(args)
        report, text = analyze(args.model, args.components, args.words, png=args.png,
                               speed=speed, quality=quality, threads=args.threads,
                               names=dict(args.name), ylabel=args.ylabel)
        if text:
            print(text)
        if args.png:
            print(f"\nwrote {args.png}", file=sys.stderr)
        if args.json:
            write_report_file(args.json, json.dumps(report, indent=2, ensure_ascii=False))
    except Exception as e:  # one error line for a user's mistake; failed re-raises a bug
        return failed(e, [*args.model, *(p for p in (args.speed, args.json, args.png) if p)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
