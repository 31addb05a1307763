"""Translation retrieval (Tatoeba, or any aligned pairs in Parquet): each sentence's nearest
neighbour on the other side."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from swe.eval.encoders import Encoder
from swe.eval.metrics import macro_f1, top_k

__all__ = ["pair_retrieval", "read_pairs", "read_tatoeba", "tatoeba"]


def read_tatoeba(lang: str, root: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The aligned ``lang`` and English sentences of ``tatoeba.{lang}-eng.*`` under ``root``."""
    root = Path(root)
    files = [root / f"tatoeba.{lang}-eng.{lang}", root / f"tatoeba.{lang}-eng.eng"]
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"Tatoeba file not found: {f}")
    xs, en = (f.read_text(encoding="utf-8").rstrip("\n").split("\n") for f in files)
    if len(xs) != len(en):
        raise ValueError(f"{files[0]} and {files[1]} differ in length")
    return xs, en


def tatoeba(encoder: Encoder, lang: str, root: str | os.PathLike) -> dict[str, float]:
    """Tatoeba translation retrieval for ``lang``-eng: nearest neighbour by cosine in both
    directions; accuracy × 100 each way and MTEB's F1 (``lang`` → eng, macro) × 100."""
    xs, en = read_tatoeba(lang, root)
    ex, ee = encoder.encode(xs), encoder.encode(en)
    gold = np.arange(len(xs))
    x2e = top_k(ex, ee, 1)[1][:, 0]
    e2x = top_k(ee, ex, 1)[1][:, 0]
    acc_x2e, acc_e2x = 100 * float(np.mean(x2e == gold)), 100 * float(np.mean(e2x == gold))
    return {"acc": (acc_x2e + acc_e2x) / 2, f"acc_{lang}_eng": acc_x2e,
            f"acc_eng_{lang}": acc_e2x, "f1": 100 * macro_f1(gold, x2e)}


def read_pairs(path: str | os.PathLike) -> tuple[list[str], list[str], list[str]]:
    """Aligned ``src``/``tgt`` columns of a Parquet file or folder of them (e.g. a build's
    held-out ``work/train_data/dev``), files in name order, and each row's ``pair`` (its
    language pair, as train_data writes it; ``""`` where the files have no such column)."""
    import pyarrow as pa

    from swe import inputs, storage

    files = [u for u in inputs.expand_inputs([os.fspath(path)]) if u.endswith(".parquet")]
    if not files:
        raise FileNotFoundError(f"no Parquet files in {path}")
    try:
        tables = [storage.read_parquet(u) for u in files]
        t = pa.concat_tables([x.select(["src", "tgt"]) for x in tables])
    except (KeyError, pa.ArrowInvalid) as e:
        raise ValueError(f"{path}: pairs need 'src' and 'tgt' columns ({e})") from None
    groups = [x.column("pair").to_pylist() if "pair" in x.column_names else [""] * len(x)
              for x in tables]
    return (t.column("src").to_pylist(), t.column("tgt").to_pylist(),
            [p for g in groups for p in g])


def pair_retrieval(encoder: Encoder, path: str | os.PathLike) -> dict[str, float]:
    """Retrieval on aligned pairs: accuracy × 100 of ``src`` → ``tgt`` and back, and their mean
    (``acc``): the held-out dev signal for cross-lingual choices, never Tatoeba.

    Rows are searched among the rows of their own language pair (the ``pair`` column), and
    the accuracies are averaged over pairs: a many-language dev set repeats each English
    sentence once per language, so one search over all rows would have many right answers."""
    src, tgt, pair = read_pairs(path)
    if not src:
        raise ValueError("no pairs: retrieval accuracy is undefined")
    es, et = encoder.encode(src), encoder.encode(tgt)
    pair_arr = np.asarray(pair, dtype=object)
    s2t, t2s = [], []
    for key in sorted(set(pair)):
        rows = np.flatnonzero(pair_arr == key)
        _check_defined(key, es[rows], et[rows])
        gold = np.arange(len(rows))
        s2t.append(100 * float(np.mean(top_k(es[rows], et[rows], 1)[1][:, 0] == gold)))
        t2s.append(100 * float(np.mean(top_k(et[rows], es[rows], 1)[1][:, 0] == gold)))
    a, b = float(np.mean(s2t)), float(np.mean(t2s))
    return {"acc": (a + b) / 2, "acc_src_tgt": a, "acc_tgt_src": b, "pairs": len(src),
            "language_pairs": len(s2t)}


def _check_defined(key: str, es: np.ndarray, et: np.ndarray) -> None:
    """Retrieval is undefined among fewer than 2 candidates, or where every text on a side has
    the same vector (no known word, say): the accuracy would be argmax's tie-breaking."""
    what = f"the {key} pairs" if key else "the pairs"
    if len(es) < 2:
        raise ValueError(f"{what} hold {len(es)} row: retrieval among fewer than 2 "
                         "candidates is undefined; give at least 2 pairs")
    for side, vectors in (("src", es), ("tgt", et)):
        if float(np.ptp(vectors, axis=0).max()) <= 1e-6:
            raise ValueError(f"every {side} text of {what} has the same vector (e.g. no "
                             "word the model knows): retrieval accuracy is undefined")
