"""How much bf16 autocast (the GPU default) changes step-1 word vectors, measured on the CPU.

    python benchmarks/bf16_vectors.py --build out/quickstart --sentences 2000

Extracts the same selected sentences of an existing build twice with the teacher, fp32 and bf16
autocast, aligns every (sentence, word) as the build does, and reports the cosine between the
two per-word mean vectors, and between per-occurrence vectors.
"""

from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _vectors(teacher, table: pa.Table, words: list[str]) -> dict[int, list[np.ndarray]]:
    from swe.build.stages.extraction import align
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


def main() -> None:
    """Print the cosine statistics as JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--sentences", type=int, default=2000)
    args = p.parse_args()

    from swe.build.teacher import Teacher, minilm_dir

    parts = sorted(glob.glob(os.path.join(args.build, "work/selection/parts/*.parquet")))
    table = pa.concat_tables([pq.read_table(f) for f in parts]).slice(0, args.sentences)
    words = pq.read_table(os.path.join(args.build, "work/vocab/en.parquet")).column(
        "word").to_pylist()
    fp32 = _vectors(Teacher(str(minilm_dir()), bf16=False), table, words)
    bf16 = _vectors(Teacher(str(minilm_dir()), bf16=True), table, words)

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    per_word = [cos(np.mean(fp32[w], 0), np.mean(bf16[w], 0)) for w in fp32]
    per_use = [cos(a, b) for w in fp32 for a, b in zip(fp32[w], bf16[w], strict=True)]
    print(json.dumps({"sentences": table.num_rows, "words": len(per_word),
                      "word_vector_cosine": {"mean": np.mean(per_word), "min": np.min(per_word)},
                      "occurrence_cosine": {"mean": np.mean(per_use), "min": np.min(per_use)}},
                     indent=2, default=float))


if __name__ == "__main__":
    main()
