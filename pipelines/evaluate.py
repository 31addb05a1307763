"""Evaluate encoders on STS, Tatoeba, bitext mining and classification; measure their speed and
size; print a Markdown table and write JSON.

    python pipelines/evaluate.py --model out/en-30k/step3 --model teacher:minilm \\
        --model potion-base-8m --tasks stsb-dev stsb-test classification --speed 10000 \\
        --json out/results/en.json --markdown out/results/en.md
    python pipelines/evaluate.py --model out/en-de/model --tasks tatoeba-deu bucc-deu

SPEC: a model dir (StaticModel or EnsembleModel, local or s3://), teacher:DIR|minilm,
model2vec:DIR, gem:DIR (GEM pooling over a StaticModel), potion-base-8m, wordllama-256,
glove-50d or use-multilingual.
TASKS: stsb-dev, stsb-test, sts:PATH (a TSV/CSV with sentence1, sentence2, score, or a dir of
them: their mean), tatoeba-XXX (e.g. tatoeba-deu), bucc-XXX (Tatoeba XXX-eng pairs mined among
--distractors sentences per side; XXX in deu, cmn, jpn), mr, cr, subj, mpqa, sst2, trec, agnews,
or `classification` for all seven.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CLASSIFICATION = ("mr", "cr", "subj", "mpqa", "sst2", "trec", "agnews")
PREFIXES = ("stsb-", "sts:", "tatoeba-", "bucc-")


def known(task: str) -> bool:
    return task.startswith(PREFIXES) or task in CLASSIFICATION


def sts_dir(encoder, path: Path) -> dict[str, float]:
    """STS on one file, or the mean over every .tsv/.csv file of a directory."""
    from swe import evaluate as ev

    if not path.is_dir():
        return {"spearman": ev.sts(encoder, path)}
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".tsv", ".csv"))
    if not files:
        raise FileNotFoundError(f"no .tsv or .csv STS files in {path}")
    scores = {p.stem: ev.sts(encoder, p) for p in files}
    return {"spearman": sum(scores.values()) / len(scores), **scores}


def run_task(encoder, task: str, data: Path, distractors: int) -> dict[str, float]:
    from swe import classification
    from swe import evaluate as ev
    from swe.mining import bucc_tatoeba

    if task.startswith("stsb-"):
        return {"spearman": ev.sts(encoder, data / "eval/sts/stsb" / f"{task[5:]}.tsv")}
    if task.startswith("sts:"):
        return sts_dir(encoder, Path(task[4:]))
    if task.startswith("tatoeba-"):
        return ev.tatoeba(encoder, task[8:], data / "eval/tatoeba_v1")
    if task.startswith("bucc-"):
        return bucc_tatoeba(encoder, task[5:], data, distractors)
    if task in CLASSIFICATION:
        return classification.classify(encoder, task, data)
    raise ValueError(f"unknown task {task!r}; see --help")


def headline(task: str) -> str:
    """The metric a task's table column shows."""
    if task.startswith(("stsb-", "sts:")):
        return "spearman"
    return "f1" if task.startswith("bucc-") else "acc"


def markdown(results: dict[str, dict], tasks: list[str], speed: dict[str, dict]) -> str:
    """Rows = encoders; columns = each task's headline score, their average, speed and size."""
    extra = ["sent/s", "size MB"] if speed else []
    lines = ["| model | " + " | ".join([*tasks, "avg", *extra]) + " |",
             "|---|" + "---:|" * (len(tasks) + 1 + len(extra))]
    for spec, r in results.items():
        vals = [r[t][headline(t)] for t in tasks]
        cells = [f"{v:.2f}" for v in vals] + [f"{sum(vals) / len(vals):.2f}"]
        if speed:
            s = speed.get(spec, {})
            cells += [f"{s['sentences_per_s']:,.0f}" if "sentences_per_s" in s else "–",
                      f"{s['size_bytes'] / 1e6:.1f}" if s.get("size_bytes") else "–"]
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", action="append", required=True, metavar="SPEC")
    p.add_argument("--tasks", nargs="+", default=["stsb-dev", "stsb-test"])
    p.add_argument("--data", type=Path, default=DATA, help="the shared data dir")
    p.add_argument("--distractors", type=int, default=20_000,
                   help="bucc-XXX: distractor sentences per side (default 20000)")
    p.add_argument("--speed", type=int, default=0, metavar="N",
                   help="also measure sentences/s, memory and size on N STS-B train sentences, "
                        "each encoder in a fresh process")
    p.add_argument("--threads", type=int, default=None, help="threads for --speed (default: "
                   "the libraries' own defaults)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write the Markdown table here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    log = logging.getLogger("evaluate")
    tasks = [t for task in args.tasks
             for t in (CLASSIFICATION if task == "classification" else [task])]
    for t in tasks:  # fail before loading anything
        if not known(t):
            print(f"error: unknown task {t!r}; see --help", file=sys.stderr)
            return 2
    if not args.data.is_dir():
        print(f"error: data dir not found: {args.data} (pass --data)", file=sys.stderr)
        return 1

    from swe.evaluate import load_encoder

    results: dict[str, dict] = {}
    for m, spec in enumerate(args.model, start=1):
        try:
            encoder = load_encoder(spec)
        except (FileNotFoundError, ImportError, ValueError) as e:
            print(f"error: {spec}: {e}", file=sys.stderr)
            return 1
        results[spec] = {}
        for n, task in enumerate(tasks, start=1):
            t = time.perf_counter()
            try:
                results[spec][task] = run_task(encoder, task, args.data, args.distractors)
            except (FileNotFoundError, ValueError) as e:
                print(f"error: {task}: {e}", file=sys.stderr)
                return 1
            log.info("[model %d/%d, task %d/%d] %s %s %s=%.2f (%.1fs)", m, len(args.model), n,
                     len(tasks), spec, task, headline(task),
                     results[spec][task][headline(task)], time.perf_counter() - t)
    speed: dict[str, dict] = {}
    if args.speed:
        from swe import speed as sp

        texts = sp.read_texts(args.data / "eval/sts/stsb/train.tsv", args.speed)
        for spec in args.model:
            speed[spec] = sp.measure(spec, texts, threads=args.threads)
            log.info("speed %s: %.0f sentences/s", spec, speed[spec]["sentences_per_s"])
    table = markdown(results, tasks, speed)
    print(table)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"results": results, "speed": speed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
