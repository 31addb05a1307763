"""Evaluate encoders on STS, Tatoeba, bitext mining and classification; measure their speed and
size; print a Markdown table and write JSON.

    python pipelines/evaluate.py --model out/en-30k/step3 --model teacher:minilm \\
        --model potion-base-8m --tasks stsb-dev stsb-test classification --speed 10000 \\
        --json out/results/en.json --markdown out/results/en.md
    python pipelines/evaluate.py --model out/en-de/model --tasks tatoeba-deu bucc-deu

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
import sys
from pathlib import Path

from swe.cli import HelpFormatter
from swe.commands import failed
from swe.eval.data import data_root
from swe.eval.report import EvaluationError, evaluate
from swe.eval.tasks import UnknownTaskError


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments (shared with `swe evaluate`)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
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


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse arguments and run the job; the exit status."""
    args = parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        report = evaluate(args.model, args.tasks, args.data, args.distractors, args.speed,
                          args.threads)
    except (UnknownTaskError, EvaluationError) as e:
        return failed(e)
    table = report.markdown()
    print(table)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
