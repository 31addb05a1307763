"""The comparison users make: Tatoeba per language for a swe model, beside the published
scores of the static and transformer models they would pick instead.

    python benchmarks/bench_languages.py --model out/many/model --json out/languages.json --card
    python benchmarks/bench_languages.py --model out/many/model \\
        --teacher teacher:out/teachers/multilingual-e5-small      # also our teacher, measured
    python benchmarks/bench_languages.py --smoke   # German only, a 2,000-word random model

For every language of the model that has a Tatoeba set (``swe/data/languages.tsv``): swe's
``acc_<lang>_eng`` (each non-English sentence retrieves its English translation: the one
direction MTEB scores) and the mean of both directions, beside
``eval/tatoeba_mteb_published.tsv`` (MTEB's published ``<lang>`` → eng accuracy of
static-similarity-mrl-multilingual-v1, potion-multilingual-128M and multilingual-e5-small).
Prints one Markdown table with means and how many languages swe wins against each static model.
Needs only the library and the shared data.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from _smoke import random_model

SMOKE = {"languages": ["deu"]}
PUBLISHED = ("static-similarity-mrl-multilingual-v1", "potion-multilingual-128M",
             "multilingual-e5-small")
SHORT = {"static-similarity-mrl-multilingual-v1": "static-mrl",
         "potion-multilingual-128M": "potion-128M", "multilingual-e5-small": "e5-small"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="a swe model dir (required unless --smoke)")
    p.add_argument("--teacher", default="",
                   help="an encoder spec to measure too (e.g. teacher:DIR); slow on CPU")
    p.add_argument("--json", help="write every score here")
    p.add_argument("--card", action="store_true",
                   help="also put the table in the model's card (its README.md)")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def published(data: Path) -> dict[str, dict[str, float]]:
    """Per Tatoeba code, the published ``<lang>`` → eng accuracy of each reference model."""
    with open(data / "eval/tatoeba_mteb_published.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return {r["tatoeba_code"]: {m: float(r[m]) for m in PUBLISHED} for r in rows}


def scores(spec: str, codes: list[str], data: Path) -> dict[str, dict[str, float]]:
    """Tatoeba of one encoder for each NTREX code: ``x2e`` and ``both`` (× 100)."""
    from swe.eval.encoders import load_encoder
    from swe.eval.retrieval import tatoeba
    from swe.text import language

    encoder = load_encoder(spec)
    out = {}
    for code in codes:
        t = language(code).tatoeba
        r = tatoeba(encoder, t, data / "eval/tatoeba_v1")
        out[code] = {"x2e": r[f"acc_{t}_eng"], "both": r["acc"]}
    return out


def table(codes: list[str], swe: dict, teacher: dict, pub: dict) -> list[str]:
    """The Markdown table: per language, then means and wins."""
    from swe.text import language

    head = ["language", "Tatoeba", "swe →eng", "swe both"] + \
        (["teacher →eng", "teacher both"] if teacher else []) + \
        [f"{SHORT[m]} →eng" for m in PUBLISHED]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for code in codes:
        t = language(code).tatoeba
        cells = [f"{swe[code]['x2e']:.2f}", f"{swe[code]['both']:.2f}"]
        cells += [f"{teacher[code]['x2e']:.2f}", f"{teacher[code]['both']:.2f}"] if teacher \
            else []
        cells += [f"{pub[t][m]:.2f}" for m in PUBLISHED]
        lines.append(f"| {language(code).name} ({code}) | {t} | " + " | ".join(cells) + " |")
    mean = summary(codes, swe, teacher, pub)
    cells = [f"**{mean['swe_x2e']:.2f}**", f"**{mean['swe_both']:.2f}**"]
    cells += [f"**{mean['teacher_x2e']:.2f}**", f"**{mean['teacher_both']:.2f}**"] if teacher \
        else []
    cells += [f"**{mean[m]:.2f}**" for m in PUBLISHED]
    lines.append(f"| **mean of {len(codes)}** | | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- swe →eng above {SHORT[m]} in {mean['wins'][m]} of {len(codes)} languages"
              for m in PUBLISHED]
    return lines


def summary(codes: list[str], swe: dict, teacher: dict, pub: dict) -> dict:
    """Means over ``codes`` and swe's wins (strictly above) against each published model."""
    from swe.text import language

    tat = {c: language(c).tatoeba for c in codes}
    out = {"swe_x2e": float(np.mean([swe[c]["x2e"] for c in codes])),
           "swe_both": float(np.mean([swe[c]["both"] for c in codes]))}
    if teacher:
        out["teacher_x2e"] = float(np.mean([teacher[c]["x2e"] for c in codes]))
        out["teacher_both"] = float(np.mean([teacher[c]["both"] for c in codes]))
    for m in PUBLISHED:
        out[m] = float(np.mean([pub[tat[c]][m] for c in codes]))
    out["wins"] = {m: sum(swe[c]["x2e"] > pub[tat[c]][m] for c in codes) for m in PUBLISHED}
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from swe.eval.data import data_root
    from swe.model import StaticModel
    from swe.text import language

    data = Path(data_root())
    pub = published(data)
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            words = [f"w{i}" for i in range(2000)]
            spec = str(random_model(words, Path(tmp) / "model", dim=8, language=["deu"]))
        elif args.model:
            spec = args.model
        else:
            parser().error("--model is required unless --smoke")
        codes = [c for c in StaticModel.load(spec).languages
                 if c != "en" and language(c).tatoeba in pub]
        swe = scores(spec, codes, data)
    teacher = scores(args.teacher, codes, data) if args.teacher else {}
    lines = table(codes, swe, teacher, pub)
    print("\n".join(lines))
    if args.card and args.model:
        from swe.build.card import add_scores

        add_scores(args.model, [f"Tatoeba accuracy × 100 (`python benchmarks/{Path(__file__).name}"
                                f" --model DIR --card`; published scores from MTEB):", "",
                                *lines])
    if args.json:
        Path(args.json).write_text(json.dumps({
            "swe": swe, "teacher": teacher, "summary": summary(codes, swe, teacher, pub)},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
