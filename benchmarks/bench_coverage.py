"""How much of each language's Tatoeba text a model's vocabulary covers, and the most that any
vocabulary made from the language's NTREX text could cover.

    python benchmarks/bench_coverage.py --model out/ntrex/model --json out/coverage.json
    python benchmarks/bench_coverage.py --smoke   # German only, a 2,000-word random model

For every language of the model that has a Tatoeba set (``swe/data/languages.tsv``), over the
word units of the Tatoeba side (punctuation left out, as the model tokenises it):

* ``exact``: found in the vocabulary as is or lowercased;
* ``fallback``: found through the model's OOV rule (a prefix or teacher-subword entry);
* ``none``: not found (the unit adds nothing to the sentence vector);
* ``ntrex_1`` / ``ntrex_2``: the share of units (lowercased) that occur at least once / twice in
  the language's NTREX-128 side: a ceiling for ``exact`` with ``vocab.min_count`` 1 / 2 and no
  size cap (languages written without spaces are left out of these two);
* ``all_2``: likewise, twice in all of the language's text (NTREX, the ``multilingual/`` pairs'
  side and ``<code>.txt.xz``: what the ``many`` config reads); ``listed``: in its word list
  (``multilingual/vocab/<code>.tsv.xz``), when it has one.

Needs only the library and the shared data.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
from _smoke import random_model

SMOKE = {"languages": ["deu"], "sentences": 200}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="a swe model dir (required unless --smoke)")
    p.add_argument("--sentences", type=int, default=0,
                   help="Tatoeba sentences per language; 0 = all")
    p.add_argument("--json")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def _ntrex_counts(data: Path, code: str) -> Counter:
    with gzip.open(data / "parallel/ntrex128" / f"en-{code}.tsv.gz", "rt", encoding="utf-8") as f:
        next(f)
        return _counts(line.rstrip("\n").split("\t")[1] for line in f)


def _counts(lines) -> Counter:
    from swe.text import is_punctuation, words

    counts: Counter = Counter()
    for line in lines:
        counts.update(w.lower() for w in words(line) if not is_punctuation(w))
    return counts


def _all_counts(data: Path, code: str) -> Counter:
    """Word counts of all of a language's text: NTREX, its multilingual/ pairs and text."""
    counts = _ntrex_counts(data, code)
    ml = data / "multilingual"
    if (ml / f"en-{code}.tsv.xz").is_file():
        with lzma.open(ml / f"en-{code}.tsv.xz", "rt", encoding="utf-8") as f:
            next(f)
            counts.update(_counts(line.rstrip("\n").split("\t")[1] for line in f))
    if (ml / f"{code}.txt.xz").is_file():
        with lzma.open(ml / f"{code}.txt.xz", "rt", encoding="utf-8") as f:
            counts.update(_counts(f))
    return counts


def _listed(data: Path, code: str) -> set[str] | None:
    path = data / "multilingual/vocab" / f"{code}.tsv.xz"
    if not path.is_file():
        return None
    with lzma.open(path, "rt", encoding="utf-8") as f:
        next(f)
        return {line.split("\t")[0].lower() for line in f}


def coverage(model, data: Path, code: str, tatoeba: str, sentences: int) -> dict[str, float]:
    """The shares above for one language, × 100."""
    from swe.eval.retrieval import read_tatoeba
    from swe.text import has_unspaced_script

    xs, _ = read_tatoeba(tatoeba, data / "eval/tatoeba_v1")
    units = [(u, w) for t in xs[: sentences or None] for u, w in model.tokenize(t)]
    n = max(1, len(units))
    exact = sum(w is not None and (w == u or w == u.lower()) for u, w in units)
    none = sum(w is None for _, w in units)
    row = {"units": len(units), "exact": 100 * exact / n, "none": 100 * none / n,
           "fallback": 100 * (len(units) - exact - none) / n}
    spaced = [u.lower() for u, _ in units if not has_unspaced_script(u)]
    if spaced and len(spaced) == len(units):
        counts = _ntrex_counts(data, code)
        row["ntrex_1"] = 100 * float(np.mean([counts[u] >= 1 for u in spaced]))
        row["ntrex_2"] = 100 * float(np.mean([counts[u] >= 2 for u in spaced]))
        counts = _all_counts(data, code)
        row["all_2"] = 100 * float(np.mean([counts[u] >= 2 for u in spaced]))
        if (listed := _listed(data, code)) is not None:
            row["listed"] = 100 * float(np.mean([u in listed for u in spaced]))
    return row


def _smoke_model(data: Path, tmp: str):
    """The 2,000 most frequent German NTREX words (alphabetic), random vectors."""
    from swe.model import StaticModel

    top = [w for w, _ in _ntrex_counts(data, "deu").most_common(2000) if w.isalpha()]
    return StaticModel.load(random_model(top, Path(tmp) / "model", dim=8, language=["deu"],
                                         oov="prefix"))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from swe.eval.data import data_root
    from swe.model import StaticModel
    from swe.text import language

    data = Path(data_root())
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            model, sentences = _smoke_model(data, tmp), SMOKE["sentences"]
        elif args.model:
            model, sentences = StaticModel.load(args.model), args.sentences
        else:
            parser().error("--model is required unless --smoke")
        rows = {code: coverage(model, data, code, language(code).tatoeba, sentences)
                for code in model.languages if language(code).tatoeba and code != "en"}
    keys = ("exact", "fallback", "none", "ntrex_1", "ntrex_2", "all_2", "listed")
    print("| language | units | " + " | ".join(keys) + " |")
    print("|---|---:|" + "---:|" * len(keys))
    for code, r in rows.items():
        print(f"| {code} | {r['units']:,} | " + " | ".join(
            f"{r[k]:.1f}" if k in r else "–" for k in keys) + " |")
    means = {k: float(np.mean([r[k] for r in rows.values() if k in r])) for k in keys
             if any(k in r for r in rows.values())}
    print("| **mean** | | " + " | ".join(f"{means[k]:.1f}" if k in means else "–"
                                       for k in keys) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"languages": rows, "mean": means}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
