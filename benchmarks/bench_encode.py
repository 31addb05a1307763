"""Single-process encoding speed: swe.StaticModel vs model2vec (potion-base-8M) vs WordLlama.

    python benchmarks/bench_encode.py --sentences 100000 --threads 1

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
import json
import lzma
import os
import platform
import statistics
import sys
import time
from pathlib import Path


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", help="the shared data dir (default: $SWE_DATA or ../shared/data)")
    p.add_argument("--corpus", help="one sentence per line (.xz); default: from --data")
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=0, help="0 = library defaults (all cores)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, default=150_000)
    p.add_argument("--model", help="a saved swe model to time instead of the synthetic one")
    p.add_argument("--save-model", help="also save the synthetic swe model here (for bench_bulk)")
    p.add_argument("--json", help="write the results here")
    return p.parse_args()


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


def main() -> None:
    args = _args()
    if args.threads:  # before numpy, tokenizers or anything else is imported
        for var in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    import numpy as np

    from swe.eval.data import wikipedia_files
    from swe.eval.encoders import load_encoder

    corpus = args.corpus or wikipedia_files(args.data)[0]
    with lzma.open(corpus, "rt", encoding="utf-8") as f:
        texts = [next(f).rstrip("\n") for _ in range(args.sentences)]
    print(f"{len(texts)} sentences from {corpus}", file=sys.stderr)
    encoders = {"swe.StaticModel": _swe_model(args),
                "model2vec potion-base-8M": load_encoder("potion-base-8m"),
                "WordLlama l2_supercat 256": load_encoder("wordllama-256")}
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
    ratio = (results["swe.StaticModel"]["sentences_per_s"]
             / results["model2vec potion-base-8M"]["sentences_per_s"])
    report = {"sentences": len(texts), "threads": args.threads or "default",
              "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
              "results": results, "swe_over_model2vec": ratio}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
