"""Evaluate encoders on STS, Tatoeba, bitext mining and classification; measure their speed and
size; print a Markdown table and write JSON.

    swe evaluate --model out/quickstart/model --model teacher:minilm \\
        --tasks stsb-dev stsb-test --json out/results/quickstart.json
    swe evaluate --model out/quickstart/model --tasks classification --speed 10000

(`python pipelines/evaluate.py …` is the same job, for `ray job submit`.)

SPEC: a model dir (StaticModel or EnsembleModel, local or s3://), teacher:DIR|minilm,
model2vec:DIR, gem:DIR (GEM pooling over a StaticModel), potion-base-8m, wordllama-256,
glove-50d or use-multilingual (see swe.eval.encoders).
TASKS: stsb-dev, stsb-test, sts:PATH (a TSV/CSV with sentence1, sentence2, score, or a dir of
them: their mean), tatoeba-XXX (e.g. tatoeba-deu), pairs:PATH (retrieval on src/tgt Parquet
pairs, e.g. a build's held-out OUT/work/train_data/dev), bucc-XXX (Tatoeba XXX-eng pairs mined among
--distractors sentences per side; XXX in deu, cmn, jpn), mr, cr, subj, mpqa, sst2, trec, agnews,
or `classification` for all seven (see swe.eval.tasks).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from swe import storage
from swe.cli import ArgumentParser, HelpFormatter
from swe.commands import failed
from swe.commands.report_file import check_report_file, write_report_file
from swe.eval.data import data_root
from swe.eval.report import evaluate


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments (shared with `swe evaluate`)."""
    p = ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--model", action="append", required=True, metavar="SPEC",
                   help="an encoder (above); repeatable")
    p.add_argument("--tasks", nargs="+", default=["stsb-dev", "stsb-test"], help="tasks (above)")
    p.add_argument("--data", type=Path, default=None,
                   help=f"the shared data dir (default: $SWE_DATA or {data_root()})")
    p.add_argument("--distractors", type=int, default=20_000,
                   help="bucc-XXX: distractor sentences per side")
    p.add_argument("--speed", type=int, default=0, metavar="N",
                   help="also measure sentences/s, memory and size on N STS-B train sentences, "
                        "each encoder in a fresh process")
    p.add_argument("--threads", type=int, default=None, help="threads for --speed (default: "
                   "the libraries' own defaults)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write the Markdown table here")
    return p


def _check(args: argparse.Namespace) -> None:
    """Refuse, before any work, numbers out of range and report paths that cannot be written."""
    for name, value, low in (("--threads", args.threads, 1), ("--speed", args.speed, 0),
                             ("--distractors", args.distractors, 1)):
        if value is not None and value < low:
            raise ValueError(f"{name} {value}: must be at least {low}")
    for spec in args.model:
        if not spec.strip() or spec.endswith(":"):
            raise ValueError(f"--model {spec!r} names no model: give a folder or a spec (above)")
    for spec in [*args.model, *args.tasks]:  # s3://B/M, gem:s3://B/M, pairs:s3://B/P
        rest = spec.partition(":")[2]
        storage.check_bucket(rest if "://" in rest else spec)
    for flag, specs in (("--model", args.model), ("--tasks", args.tasks)):
        seen: dict[str, str] = {}
        for spec in specs:
            first = seen.setdefault(_same(spec), spec)
            if first != spec or specs.count(spec) > 1:
                raise ValueError(f"{flag} names {first} twice ({spec}): it would count twice in "
                                 "the average; give it once")
    inputs = [str(p) for p in _inputs(args)]
    for name in ("json", "markdown"):
        if getattr(args, name) is not None:
            check_report_file(f"--{name}", getattr(args, name), inputs, "swe evaluate",
                              "evaluation")
    if args.json and args.markdown and Path(args.json).resolve() == Path(args.markdown).resolve():
        raise ValueError(f"--json and --markdown are the same file ({args.json}): one would "
                         "overwrite the other; name two files")


def _same(spec: str) -> str:
    """A spec with a local path resolved, so ``sts:x.tsv`` and ``sts:./x.tsv`` compare equal."""
    kind, sep, rest = spec.partition(":")
    if sep and "://" not in spec and kind in ("sts", "pairs", "teacher", "model2vec", "gem"):
        return f"{kind}:{os.path.realpath(rest)}" if rest else spec
    return os.path.realpath(spec) if "://" not in spec and os.path.exists(spec) else spec


def _inputs(args: argparse.Namespace) -> list[Path]:
    """The local folders and files this evaluation reads: model folders and task paths."""
    paths = []
    for spec in args.model:
        kind, _, rest = spec.partition(":")
        path = rest if kind in ("teacher", "model2vec", "gem") else spec
        if path and "://" not in path and Path(path).exists():
            paths.append(Path(path).resolve())
    for task in args.tasks:
        kind, _, path = task.partition(":")
        if kind in ("sts", "pairs") and path and Path(path).exists():
            paths.append(Path(path).resolve())
    return paths


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse arguments and run the job; the exit status."""
    args = parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        _check(args)
        report = evaluate(args.model, args.tasks, args.data, args.distractors, args.speed,
                          args.threads)
    except BaseException as e:  # one line and its exit status (swe.commands); others re-raised
        return failed(e, [*args.model, *(t.partition(":")[2] for t in args.tasks)])
    table = report.markdown()
    print(table)
    try:
        for path, text in ((args.markdown, table + "\n"),
                           (args.json, json.dumps(report.to_dict(), indent=1))):
            if path:
                write_report_file(path, text)
    except OSError as e:  # the table is printed above: nothing is lost
        return failed(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
