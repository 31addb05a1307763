"""Agreement between a swe model and its model2vec / sentence-transformers exports.

    python benchmarks/bench_export.py --model out/gate/int8/model --wiki 10000 \
        --json out/bench_export_en10k.json
    python benchmarks/bench_export.py --model out/ende/int8/model --ntrex deu --wiki 10000
    python benchmarks/bench_export.py --smoke   # a tiny random model; both parts below

Needs model2vec and sentence-transformers (the test extra; model2vec is also in the baselines
extra); ``--smoke`` skips a comparison whose package is not installed. For each model (``--vocab
N`` keeps its N most frequent words; 0 keeps all): export to both formats (timed; the export
prints the agreement it measured on its own held-out sample lines), load each in the real
package, encode the STS-B test and dev sentences, the first ``--wiki`` Wikipedia sentences and,
with ``--ntrex LANG``, NTREX-128's sentences in LANG (``deu``: the German side of
``parallel/ntrex128/en-deu.tsv.gz``), and report the mean cosine to our embeddings (rows where
either side is zero — no known word — are counted separately), each one's STS-B test Spearman ×
100 and the exported files' sizes.

    python benchmarks/bench_export.py --model out/glove-50d --truncate 50 40 32 24 16 8 \
        --sentence-pca 100000

``--truncate``: STS-B dev/test Spearman × 100 of ``StaticModel.load(model, dim=k)`` for each k.
A model that is not PCA-ordered (GloVe) first gets step 2's sentence-level PCA
(``swe.build.stages.pca.fit`` on the mean vectors of ``--sentence-pca`` Wikipedia sentences,
all dimensions kept), saved to a temporary dir. ``--smoke`` runs both parts on a 2,000-word
model with random 64-d vectors and the MiniLM tokenizer, made from the Wikipedia sentences.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import lzma
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _smoke import parse, smoke_model

SMOKE = {"wiki": 200, "truncate": [32, 8], "sentence_pca": 200}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="a swe model dir (required unless --smoke)")
    p.add_argument("--vocab", type=int, action="append",
                   help="keep the N first words (0: all; default 0, with --smoke 1000 and 0)")
    p.add_argument("--wiki", type=int, default=10_000, help="Wikipedia sentences")
    p.add_argument("--ntrex", metavar="LANG", action="append", default=[],
                   help="also NTREX-128's sentences in LANG (its file code: deu, fra, ...)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--truncate", type=int, nargs="+", help="kept dimensions to score instead")
    p.add_argument("--sentence-pca", type=int, default=0,
                   help="with --truncate: fit sentence-level PCA on this many sentences first")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, a tiny model")
    return p


def _have(module: str, extra: str, smoke: bool) -> bool:
    """Whether to run the comparison that needs ``module``: always, except under ``--smoke``
    when it is not installed (a note says so)."""
    if not smoke or importlib.util.find_spec(module):
        return True
    print(f"smoke: {module} not installed ({extra}); skipped", file=sys.stderr)
    return False


def _cos(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    ok = (na > 0) & (nb > 0)
    return float(((a * b).sum(1)[ok] / (na[ok] * nb[ok])).mean()), int((~ok).sum())


def _sts(encode, a: list[str], b: list[str], gold: np.ndarray) -> float:
    from swe.eval.metrics import spearman

    ea, eb = encode(a), encode(b)
    na = np.maximum(np.linalg.norm(ea, axis=1), 1e-12)
    nb = np.maximum(np.linalg.norm(eb, axis=1), 1e-12)
    return 100 * spearman((ea * eb).sum(1) / (na * nb), gold)


def _exported(model, to: str, out: Path) -> tuple[str, dict]:
    """Export ``model``; the path and what it cost: seconds, bytes per file, the agreement the
    export measured."""
    from swe.export import export

    t0 = time.perf_counter()
    path = export(model, to, out)
    info = {"export_seconds": round(time.perf_counter() - t0, 1),
            "bytes": {str(f.relative_to(out)): f.stat().st_size for f in sorted(out.rglob("*"))
                      if f.is_file()},
            "export_agreement": round(path.agreement.mean, 4)}
    return str(path), info


def _encoders(model, tmp: Path, smoke: bool) -> dict:
    """Name → (encode, export info) for swe and each installed package."""
    encoders = {"swe": (model.encode, {})}
    if _have("model2vec", "the test or baselines extra", smoke):
        import model2vec

        path, info = _exported(model, "model2vec", tmp / "m2v")
        encoders["model2vec"] = (model2vec.StaticModel.from_pretrained(path).encode, info)
    if _have("sentence_transformers", "the test extra", smoke):
        from sentence_transformers import SentenceTransformer

        path, info = _exported(model, "sentence-transformers", tmp / "st")
        st = SentenceTransformer(path, device="cpu")
        encoders["sentence-transformers"] = (
            lambda s: st.encode(s, convert_to_numpy=True, batch_size=1024), info)
    return encoders


def ntrex_sentences(lang: str) -> list[str]:
    """NTREX-128's sentences in ``lang`` (the second column of ``en-<lang>.tsv.gz``)."""
    import csv
    import gzip

    from swe.eval.data import data_root

    path = data_root() / "parallel" / "ntrex128" / f"en-{lang}.tsv.gz"
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r[1] for r in rows[1:] if len(r) > 1]


def truncation(path: str, dims: list[int], pca_sentences: int, wiki: list[str]) -> None:
    """Print STS-B dev/test per kept dimension of ``StaticModel.load(path, dim=k)``."""
    from swe.build.stages.pca import PCAStats, fit
    from swe.eval.data import stsb_file
    from swe.eval.similarity import read_sts
    from swe.model import StaticModel

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


def compare(path: str, vocab: list[int], wiki: list[str], smoke: bool,
            ntrex: list[str] = ()) -> list[dict]:
    """One row per kept vocabulary and export: cosines to our embeddings, STS-B test."""
    from swe.eval.data import stsb_file
    from swe.eval.similarity import read_sts
    from swe.model import StaticModel

    full = StaticModel.load(path)
    dev_a, dev_b, _ = read_sts(stsb_file("dev"))
    test_a, test_b, gold = read_sts(stsb_file("test"))
    texts = {"stsb-test": test_a + test_b, "stsb-dev": dev_a + dev_b, "wikipedia": wiki,
             **{f"ntrex-{lang}": ntrex_sentences(lang) for lang in ntrex}}
    rows = []
    for n in vocab:
        model = full if not n else StaticModel.from_vectors(
            full.words[:n], full.vectors[:n], tokenizer=full.tokenizer,
            lowercase=full.lowercase, language=full.languages, provenance=full.provenance)
        with tempfile.TemporaryDirectory() as tmp:
            encoders = _encoders(model, Path(tmp), smoke)
            ours = {k: model.encode(t) for k, t in texts.items()}
            for name, (encode, info) in encoders.items():
                t0 = time.perf_counter()
                row = {"model": path, "vocab": len(model), "export": name,
                       "stsb_test": round(_sts(encode, test_a, test_b, gold), 2), **info}
                for k, t in texts.items():
                    cos, zero = _cos(ours[k], encode(t))
                    row[f"cos_{k}"], row[f"zero_{k}"] = round(cos, 4), zero
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    from swe.eval.data import wikipedia_files

    p = parser()
    args = parse(p, argv, SMOKE, required="model")
    with lzma.open(wikipedia_files()[0], "rt", encoding="utf-8") as f:
        wiki = [line.strip() for line in itertools.islice(f, max(args.wiki, args.sentence_pca))]
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or smoke_model(wiki, Path(tmp) / "smoke", lowercase=True)
        if args.truncate:
            truncation(path, args.truncate, args.sentence_pca, wiki)
            if not args.smoke:  # --smoke runs both parts
                return 0
        vocab = args.vocab or ([1000, 0] if args.smoke else [0])
        rows = compare(path, vocab, wiki[:args.wiki], args.smoke, args.ntrex)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
    cols = [k[4:] for k in rows[0] if k.startswith("cos_")] if rows else []
    print("\n| vocab | export | " + " | ".join(f"mean cos {c}" for c in cols)
          + " | STS-B test | export s | files (bytes) |")
    print("|---|---|" + "---|" * len(cols) + "---|---|---|")
    for r in rows:
        size = sum(r.get("bytes", {}).values())
        print(f"| {r['vocab']:,} | {r['export']} | "
              + " | ".join(f"{r['cos_' + c]:.4f}" for c in cols)
              + f" | {r['stsb_test']:.2f} | {r.get('export_seconds', '')} | "
              + (f"{size:,} |" if size else " |"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
