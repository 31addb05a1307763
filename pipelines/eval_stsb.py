"""STS-B dev/test Spearman (×100) of cosine similarities, for swe models and baselines.

    python pipelines/eval_stsb.py out/en/step1 out/en/step2 --teacher minilm \
        --model2vec out/m2v-distilled

Positional arguments are swe model paths; ``--teacher`` is a teacher dir (or ``minilm``) run
with its own pooling; ``--model2vec`` is a Model2Vec model dir (loaded with the model2vec
package). The full evaluation suite (more tasks, speed, size) is pipelines/evaluate.py's job.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

STSB = Path("../shared/data/eval/sts/stsb")


def stsb(split: str):
    with open(STSB / f"{split}.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return ([r["sentence1"] for r in rows], [r["sentence2"] for r in rows],
            np.array([float(r["score"]) for r in rows]))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def score(encode) -> dict[str, float]:
    out = {}
    for split in ("dev", "test"):
        a, b, gold = stsb(split)
        ea, eb = encode(a), encode(b)
        na = np.linalg.norm(ea, axis=1) * np.linalg.norm(eb, axis=1)
        cos = (ea * eb).sum(1) / np.maximum(na, 1e-12)
        out[split] = round(100 * spearman(cos, gold), 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("models", nargs="*")
    p.add_argument("--teacher")
    p.add_argument("--model2vec", action="append", default=[])
    args = p.parse_args()
    from swe import StaticModel

    results = {}
    for path in args.models:
        results[path] = score(StaticModel.load(path).encode)
    if args.teacher:
        from swe.config import BuildConfig
        from swe.teacher import Teacher

        teacher = Teacher(BuildConfig(teacher=args.teacher).teacher_dir())

        def enc(texts):
            return np.concatenate([teacher.embed(texts[i:i + 256])
                                   for i in range(0, len(texts), 256)])

        results[f"teacher:{args.teacher}"] = score(enc)
    for path in args.model2vec:
        from model2vec import StaticModel as M2V

        results[f"model2vec:{path}"] = score(M2V.from_pretrained(path).encode)
    for name, r in results.items():
        print(f"{name:50s} dev {r['dev']:6.2f}  test {r['test']:6.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
