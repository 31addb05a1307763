"""Sentence classification on frozen embeddings (SentEval-style transfer tasks).

A logistic regression (scikit-learn, an evaluation-only dependency) on the standardised sentence
vectors; its inverse regularisation C is chosen from :data:`C_GRID` on dev data only. Datasets
with a train/dev/test split report test accuracy; those without one (MR, CR, SUBJ, MPQA, and
AG News, of which only the test split is shipped) report 10-fold cross-validated accuracy, with
C chosen inside each fold on a held-out tenth of its training part.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from swe.eval.data import data_root
from swe.eval.encoders import Encoder

__all__ = ["C_GRID", "TASKS", "classify", "load_task"]

C_GRID = (1 / 64, 1 / 16, 1 / 4, 1.0)
TASKS = ("mr", "cr", "subj", "mpqa", "sst2", "trec", "agnews")


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"classification file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # SentEval's own reading of these files
    return [line.strip() for line in text.split("\n") if line.strip()]


def _binary(neg: Path, pos: Path) -> tuple[list[str], np.ndarray]:
    n, p = _lines(neg), _lines(pos)
    return n + p, np.array([0] * len(n) + [1] * len(p))


def _tsv(path: Path) -> tuple[list[str], np.ndarray]:
    rows = _lines(path)
    if rows and rows[0].split("\t")[-1] == "label":
        rows = rows[1:]
    texts, labels = [], []
    for n, row in enumerate(rows, start=1):
        text, sep, label = row.rpartition("\t")
        if not sep or not label.strip().isdigit():
            raise ValueError(f"{path}:{n}: expected 'sentence<TAB>label', got {row[:80]!r}")
        texts.append(text)
        labels.append(int(label))
    return texts, np.array(labels)


def _trec(path: Path) -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    for n, row in enumerate(_lines(path), start=1):
        label, sep, text = row.partition(" ")
        if not sep or ":" not in label:
            raise ValueError(f"{path}:{n}: expected 'COARSE:fine question', got {row[:80]!r}")
        texts.append(text)
        labels.append(label.split(":")[0])
    return texts, np.unique(labels, return_inverse=True)[1]


def _agnews(path: Path) -> tuple[list[str], np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"classification file not found: {path}")
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as f:
        for n, row in enumerate(csv.reader(f), start=1):
            if len(row) != 3 or not row[0].isdigit():
                raise ValueError(f"{path}:{n}: expected 'label,title,description'")
            texts.append(f"{row[1]} {row[2]}".replace("\\", " "))
            labels.append(int(row[0]))
    return texts, np.array(labels)


def load_task(name: str, data: str | os.PathLike | None = None
              ) -> dict[str, tuple[list[str], np.ndarray]]:
    """A task's splits, ``{"all": …}`` (cross-validated) or ``{"train", "dev", "test"}``, from
    the shared data dir (``eval/senteval_transfer`` and ``eval/classification``; default
    :func:`~swe.eval.data.data_root`)."""
    root = Path(data or data_root())
    st = root / "eval" / "senteval_transfer"
    cl = root / "eval" / "classification"
    if name == "mr":
        return {"all": _binary(st / "MR/rt-polarity.neg", st / "MR/rt-polarity.pos")}
    if name == "cr":
        return {"all": _binary(st / "CR/custrev.neg", st / "CR/custrev.pos")}
    if name == "subj":
        return {"all": _binary(st / "SUBJ/subj.objective", st / "SUBJ/subj.subjective")}
    if name == "mpqa":
        return {"all": _binary(st / "MPQA/mpqa.neg", st / "MPQA/mpqa.pos")}
    if name == "sst2":
        return {s: _tsv(cl / f"sst2_{s}.tsv") for s in ("train", "dev", "test")}
    if name == "trec":
        texts, labels = _trec(st / "TREC/train_5500.label")
        test = _trec(st / "TREC/TREC_10.label")
        order = np.random.default_rng(0).permutation(len(texts))
        cut = len(texts) // 10  # TREC has no dev split: a fixed tenth of train
        dev, train = order[:cut], order[cut:]
        return {"train": ([texts[i] for i in train], labels[train]),
                "dev": ([texts[i] for i in dev], labels[dev]), "test": test}
    if name == "agnews":
        return {"all": _agnews(cl / "agnews_test.csv")}
    raise ValueError(f"unknown classification task {name!r}; one of {', '.join(TASKS)}")


def _fit(x: np.ndarray, y: np.ndarray, c: float) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=1000)).fit(x, y)


def _choose_c(xtr: np.ndarray, ytr: np.ndarray, xdev: np.ndarray, ydev: np.ndarray) -> float:
    """The C of :data:`C_GRID` whose train-fitted model scores best on dev (ties: smaller C)."""
    scores = [(_fit(xtr, ytr, c).score(xdev, ydev), -c) for c in C_GRID]
    return -max(scores)[1]


def classify(encoder: Encoder, name: str, data: str | os.PathLike | None = None, folds: int = 10,
             seed: int = 0) -> dict[str, float]:
    """Accuracy × 100 of a logistic regression on ``encoder``'s embeddings for task ``name``."""
    splits = load_task(name, data)
    if "all" in splits:
        texts, y = splits["all"]
        x = np.asarray(encoder.encode(texts), dtype=np.float32)
        order = np.random.default_rng(seed).permutation(len(y))
        accs, cs = [], []
        for f in range(folds):
            test = order[f::folds]
            train = np.setdiff1d(order, test, assume_unique=True)
            dev, train = train[: len(train) // 10], train[len(train) // 10:]
            c = _choose_c(x[train], y[train], x[dev], y[dev])
            fit = np.concatenate([train, dev])
            model = _fit(x[fit], y[fit], c)
            accs.append(model.score(x[test], y[test]))
            cs.append(c)
        return {"acc": 100 * float(np.mean(accs)), "folds": folds, "n": len(y),
                "C_median": float(np.median(cs))}
    xs = {s: np.asarray(encoder.encode(t), dtype=np.float32) for s, (t, _) in splits.items()}
    ys = {s: y for s, (_, y) in splits.items()}
    c = _choose_c(xs["train"], ys["train"], xs["dev"], ys["dev"])
    model = _fit(xs["train"], ys["train"], c)
    return {"acc": 100 * model.score(xs["test"], ys["test"]),
            "dev_acc": 100 * model.score(xs["dev"], ys["dev"]), "C": c, "n": len(ys["test"])}
