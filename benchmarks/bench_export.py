"""Agreement between a swe model and its model2vec / sentence-transformers exports.

    python benchmarks/bench_export.py --model out/glove-50d --vocab 30000 --vocab 0 \
        --wiki 10000 --json out/bench_export.json

For each model (``--vocab N`` keeps its N most frequent words; 0 keeps all): export to both
formats, load each in the real package, encode STS-B dev sentences and the first ``--wiki``
Wikipedia sentences, and report the mean cosine to our embeddings (rows where either side is
zero — no known word — are counted separately), plus each one's STS-B test Spearman × 100.

    python benchmarks/bench_export.py --model out/glove-50d --truncate 50 40 32 24 16 8 \
        --sentence-pca 100000

``--truncate``: STS-B dev/test Spearman × 100 of ``StaticModel.load(model, dim=k)`` for each k.
A model that is not PCA-ordered (GloVe) first gets step 2's sentence-level PCA
(``swe.build.stages.pca.fit`` on the mean vectors of ``--sentence-pca`` Wikipedia sentences,
all dimensions kept), saved to a temporary dir.
"""

from __future__ import annotations

import argparse
import itertools
import json
import lzma
import tempfile
import time
from pathlib import Path

import numpy as np

from swe.eval.data import stsb_file, wikipedia_files
from swe.eval.metrics import spearman
from swe.eval.similarity import read_sts
from swe.export import export
from swe.model import StaticModel


def _cos(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    ok = (na > 0) & (nb > 0)
    return float(((a * b).sum(1)[ok] / (na[ok] * nb[ok])).mean()), int((~ok).sum())


def _sts(encode, a: list[str], b: list[str], gold: np.ndarray) -> float:
    ea, eb = encode(a), encode(b)
    na = np.maximum(np.linalg.norm(ea, axis=1), 1e-12)
    nb = np.maximum(np.linalg.norm(eb, axis=1), 1e-12)
    return 100 * spearman((ea * eb).sum(1) / (na * nb), gold)


def _encoders(model: StaticModel, tmp: Path) -> dict:
    import model2vec
    from sentence_transformers import SentenceTransformer

    m2v = model2vec.StaticModel.from_pretrained(export(model, "model2vec", tmp / "m2v"))
    st = SentenceTransformer(str(export(model, "sentence-transformers", tmp / "st")),
                             device="cpu")
    return {"swe": model.encode, "model2vec": m2v.encode,
            "sentence-transformers": lambda s: st.encode(s, convert_to_numpy=True,
                                                         batch_size=1024)}


def truncation(path: str, dims: list[int], pca_sentences: int, wiki: list[str]) -> None:
    """Print STS-B dev/test per kept dimension of ``StaticModel.load(path, dim=k)``."""
    from swe.build.stages.pca import PCAStats, fit

    dev, test = read_sts(stsb_file("dev")), read_sts(stsb_file("test"))
    with tempfile.TemporaryDirectory() as tmp:
        if pca_sentences:
            model = StaticModel.load(path)
            pca = fit(PCAStats.of(model.encode(wiki[:pca_sentences], normalize=False)),
                      model.dim, abtt=False)
            StaticModel.from_vectors(model.words, pca.transform(model.vectors),
                                     tokenizer=model.tokenizer, lowercase=model.lowercase,
                                     language=model.languages).save(tmp)
            path = tmp
        print("| kept dims | STS-B dev | STS-B test |\n|---|---|---|")
        for k in dims:
            m = StaticModel.load(path, dim=k)
            print(f"| {k} | {_sts(m.encode, *dev):.2f} | {_sts(m.encode, *test):.2f} |",
                  flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="a swe model dir")
    p.add_argument("--vocab", type=int, action="append", help="keep the N first words (0: all)")
    p.add_argument("--wiki", type=int, default=10_000, help="Wikipedia sentences")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--truncate", type=int, nargs="+", help="kept dimensions to score instead")
    p.add_argument("--sentence-pca", type=int, default=0,
                   help="with --truncate: fit sentence-level PCA on this many sentences first")
    args = p.parse_args()
    with lzma.open(wikipedia_files()[0], "rt", encoding="utf-8") as f:
        wiki = [line.strip() for line in itertools.islice(f, max(args.wiki, args.sentence_pca))]
    if args.truncate:
        truncation(args.model, args.truncate, args.sentence_pca, wiki)
        return
    wiki = wiki[:args.wiki]
    full = StaticModel.load(args.model)
    dev_a, dev_b, _ = read_sts(stsb_file("dev"))
    test_a, test_b, gold = read_sts(stsb_file("test"))
    texts = {"stsb-dev": dev_a + dev_b, "wikipedia": wiki}
    rows = []
    for n in args.vocab or [0]:
        model = full if not n else StaticModel.from_vectors(
            full.words[:n], full.vectors[:n], tokenizer=full.tokenizer,
            lowercase=full.lowercase, language=full.languages, provenance=full.provenance)
        with tempfile.TemporaryDirectory() as tmp:
            encoders = _encoders(model, Path(tmp))
            ours = {k: model.encode(t) for k, t in texts.items()}
            for name, encode in encoders.items():
                t0 = time.perf_counter()
                row = {"model": args.model, "vocab": len(model), "export": name,
                       "stsb_test": round(_sts(encode, test_a, test_b, gold), 2)}
                for k, t in texts.items():
                    cos, zero = _cos(ours[k], encode(t))
                    row[f"cos_{k}"], row[f"zero_{k}"] = round(cos, 4), zero
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| vocab | export | mean cos STS-B dev | mean cos Wikipedia | STS-B test |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['vocab']:,} | {r['export']} | {r['cos_stsb-dev']:.4f} | "
              f"{r['cos_wikipedia']:.4f} | {r['stsb_test']:.2f} |")


if __name__ == "__main__":
    main()
