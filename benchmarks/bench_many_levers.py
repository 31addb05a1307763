"""What each lever of a many-language build gives, from the one build (no rebuild): dev
retrieval (the held-out pairs, ``work/train_data/dev``: the signal settings are chosen on) and
the Tatoeba means (reported only), for

* ``step2``: the vectors before refinement;
* ``model``: the published model;
* ``model, no listed words``: without the rows that only a word list admitted (words seen fewer
  than ``vocab.min_count`` times; an ablation at lookup: the build's PCA and refinement saw them);
* ``model, no Latin reading``: Cyrillic units not read in the Latin spelling of Serbian and Uzbek
  (``swe.transliteration``), scored on Serbian and Uzbek.

    python benchmarks/bench_many_levers.py --output out/many --json out/levers.json
    python benchmarks/bench_many_levers.py --smoke   # a 2-language quickstart-size model

Needs only the library, the build's output folder and the shared data.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from _smoke import random_model

SMOKE = {"languages": ["deu"], "dev_pairs": 50}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--output", help="a build's output folder (required unless --smoke)")
    p.add_argument("--json", help="write every score here")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def listed_only(output: Path, languages: list[str]) -> set[str]:
    """The words that every language holding them admitted only through its word list (the
    last ``listed`` rows of its vocabulary, as the vocab stage's ``_DONE.json`` counts them)."""
    import pyarrow.parquet as pq

    counts = json.loads((output / "work/vocab/_DONE.json").read_text())["stats"]
    listed, kept = set(), set()
    for lang in languages:
        words = pq.read_table(output / "work/vocab" / f"{lang}.parquet").column("word")
        words = words.to_pylist()
        n = len(words) - counts.get("listed", {}).get(lang, 0)
        kept.update(words[:n])
        listed.update(words[n:])
    return listed - kept


def without(model, words: set[str], languages: list[str] | None = None):
    """``model`` without the rows of ``words`` (and with ``languages`` if given)."""
    from swe.model import StaticModel

    keep = [i for i, w in enumerate(model.words) if w not in words]
    return StaticModel([model.words[i] for i in keep], model.vectors[keep],
                       tokenizer=model.tokenizer, lowercase=model.lowercase,
                       languages=languages or model.languages, oov=model.oov)


def scores(model, dev: Path | None, codes: list[str], data: Path) -> dict[str, float]:
    """Dev retrieval and the Tatoeba means (→eng and both directions) over ``codes``."""
    from swe.eval.retrieval import pair_retrieval, tatoeba
    from swe.text import language

    out = {"dev": pair_retrieval(model, dev)["acc"]} if dev else {}
    rows = [tatoeba(model, language(c).tatoeba, data / "eval/tatoeba_v1") for c in codes]
    out["tatoeba_x2e"] = float(np.mean([r[k] for r in rows for k in r
                                        if k.startswith("acc_") and k.endswith("_eng")]))
    out["tatoeba_both"] = float(np.mean([r["acc"] for r in rows]))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from swe.eval.data import data_root
    from swe.model import StaticModel

    data = Path(data_root())
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            words = [f"w{i}" for i in range(500)]
            model = StaticModel.load(random_model(words, Path(tmp) / "m", dim=8,
                                                  language=["deu"]))
            results = {"model": scores(model, None, SMOKE["languages"], data)}
        elif args.output:
            results = _levers(Path(args.output), data)
        else:
            parser().error("--output is required unless --smoke")
    for name, r in results.items():
        print(f"{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def _levers(output: Path, data: Path) -> dict[str, dict[str, float]]:
    from swe.model import StaticModel
    from swe.text import language

    model = StaticModel.load(output / "model")
    codes = [c for c in model.languages if c != "en" and language(c).tatoeba]
    dev = output / "work/train_data/dev"
    out = {"step2": scores(StaticModel.load(output / "step2"), dev, codes, data),
           "model": scores(model, dev, codes, data)}
    out["model, no listed words"] = scores(
        without(model, listed_only(output, model.languages)), dev, codes, data)
    two = [c for c in ("srp-Latn", "uzb") if c in codes]
    if two:
        plain = without(model, set(), [c for c in model.languages if c not in two])
        out["model, Serbian + Uzbek"] = scores(model, None, two, data)
        out["model, no Latin reading, Serbian + Uzbek"] = scores(plain, None, two, data)
    return out


if __name__ == "__main__":
    sys.exit(main())
