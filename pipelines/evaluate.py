"""Evaluate encoders on STS and Tatoeba; print a Markdown table, write JSON.

    python pipelines/evaluate.py --model out/en-30k/step3 --model teacher:minilm \
        --model potion-base-8m --tasks stsb-dev stsb-test --json out/results/en.json
    python pipelines/evaluate.py --model out/en-de/model --tasks tatoeba-deu tatoeba-cmn

SPEC: a model dir (StaticModel or EnsembleModel, local or s3://), teacher:DIR|minilm,
model2vec:DIR, potion-base-8m, wordllama-256 or glove-50d. Tasks: stsb-dev, stsb-test,
sts:PATH (TSV/CSV with sentence1, sentence2, score), tatoeba-XXX (e.g. tatoeba-deu).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def run_task(encoder, task: str, data: Path) -> dict[str, float]:
    from swe import evaluate as ev

    if task.startswith("stsb-"):
        return {"spearman": ev.sts(encoder, data / "eval/sts/stsb" / f"{task[5:]}.tsv")}
    if task.startswith("sts:"):
        return {"spearman": ev.sts(encoder, task[4:])}
    if task.startswith("tatoeba-"):
        return ev.tatoeba(encoder, task[8:], data / "eval/tatoeba_v1")
    raise ValueError(f"unknown task {task!r}; see --help")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", action="append", required=True, metavar="SPEC")
    p.add_argument("--tasks", nargs="+", default=["stsb-dev", "stsb-test"])
    p.add_argument("--data", type=Path, default=DATA, help="the shared data dir")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write the Markdown table here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    log = logging.getLogger("evaluate")

    from swe.evaluate import load_encoder

    results: dict[str, dict] = {}
    for spec in args.model:
        try:
            encoder = load_encoder(spec)
        except (FileNotFoundError, ImportError, ValueError) as e:
            print(f"error: {spec}: {e}", file=sys.stderr)
            return 1
        results[spec] = {}
        for task in args.tasks:
            t = time.perf_counter()
            try:
                results[spec][task] = run_task(encoder, task, args.data)
            except (FileNotFoundError, ValueError) as e:
                print(f"error: {task}: {e}", file=sys.stderr)
                return 1
            log.info("%s %s %s (%.1fs)", spec, task, {k: round(v, 2) for k, v in
                                                       results[spec][task].items()},
                     time.perf_counter() - t)
    headline = {t: ("spearman" if t.startswith("sts") else "acc") for t in args.tasks}
    lines = ["| model | " + " | ".join(args.tasks) + " | avg |",
             "|---|" + "---|" * (len(args.tasks) + 1)]
    for spec, r in results.items():
        vals = [r[t][headline[t]] for t in args.tasks]
        lines.append(f"| {spec} | " + " | ".join(f"{v:.2f}" for v in vals)
                     + f" | {sum(vals) / len(vals):.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
