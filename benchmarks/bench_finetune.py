"""Fine-tuning on labels, three ways, on the seven classification tasks of ``swe evaluate --tasks
classification`` and its protocol: a logistic regression on frozen swe vectors (today's
evaluation), ``swe finetune`` (head + static table), and model2vec's
``StaticModelForClassification`` on the same swe model (exported to model2vec).

    python benchmarks/bench_finetune.py --model out/en-60k/model --json out/bench_finetune.json
    python benchmarks/bench_finetune.py --smoke   # GloVe's 5k words, SST-2 (300 rows), 1 epoch

Protocol: SST-2 and TREC train on train, stop (or choose C) on dev, report test; MR, CR, SUBJ,
MPQA and AG News use the same ``--folds``-fold cross-validation as ``classify`` (each fold's
train split gives a tenth as dev), and report the mean test accuracy. Per method and task:
accuracy × 100, training seconds (all folds), and predict throughput (texts/s over the task's
test texts on one thread, best of 3). model2vec's column needs ``pip install
'model2vec[train]'`` and is skipped without it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _smoke import parse

TASKS = ["mr", "cr", "subj", "mpqa", "sst2", "trec", "agnews"]
SMOKE = {"tasks": ["sst2"], "epochs": 1, "limit": 300, "methods": ["frozen", "finetune"]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="a swe model (required unless --smoke)")
    p.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS)
    p.add_argument("--methods", nargs="+", default=["frozen", "finetune", "model2vec"],
                   choices=["frozen", "finetune", "model2vec"])
    p.add_argument("--folds", type=int, default=10, help="cross-validation folds (as classify)")
    p.add_argument("--epochs", type=int, default=10, help="swe finetune --epochs")
    p.add_argument("--head", choices=["linear", "mlp"], default="linear",
                   help="swe finetune --head (mlp: one hidden layer, swe finetune's --hidden)")
    p.add_argument("--limit", type=int, help="use only the first N training rows (smoke)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def splits(task: str, folds: int) -> list[dict[str, tuple[list[str], np.ndarray]]]:
    """The task's (train, dev, test) splits: one, or one per fold (``classify``'s folds)."""
    from swe.eval.classification import load_task

    data = load_task(task)
    if "all" not in data:
        return [data]
    texts, y = data["all"]
    order = np.random.default_rng(0).permutation(len(y))
    out = []
    for f in range(folds):
        test = order[f::folds]
        train = np.setdiff1d(order, test, assume_unique=True)
        dev, train = train[: len(train) // 10], train[len(train) // 10:]
        out.append({name: ([texts[i] for i in idx], y[idx])
                    for name, idx in (("train", train), ("dev", dev), ("test", test))})
    return out


def _speed(predict, texts: list[str]) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        predict(texts)
        best = min(best, time.perf_counter() - t0)
    return len(texts) / best


def _write(path: Path, texts: list[str], y: np.ndarray) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts, "label": [str(v) for v in y]}), path)
    return str(path)


def run_finetune(model: str, split: dict, work: Path, epochs: int,
                 head: str = "linear") -> tuple[float, float, object]:
    """Accuracy on test, training seconds, the classifier."""
    import shutil

    from swe import StaticClassifier
    from swe.finetune import finetune

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.perf_counter()
    finetune(model, _write(work / "train.parquet", *split["train"]), str(work / "clf"),
             dev=_write(work / "dev.parquet", *split["dev"]), epochs=epochs, head=head)
    secs = time.perf_counter() - t0
    clf = StaticClassifier.load(work / "clf")
    texts, y = split["test"]
    pred = clf.predict(texts)
    return 100 * float(np.mean([p == str(t) for p, t in zip(pred, y, strict=True)])), secs, clf


def run_model2vec(m2v_path: str, split: dict) -> tuple[float, float, object]:
    """model2vec's StaticModelForClassification on the exported model: accuracy, seconds."""
    from model2vec import StaticModel as M2V
    from model2vec.train import StaticModelForClassification

    t0 = time.perf_counter()
    clf = StaticModelForClassification.from_static_model(model=M2V.from_pretrained(m2v_path),
                                                         out_dim=len(set(split["train"][1])))
    xs, ys = split["train"]
    xd, yd = split["dev"]
    clf.fit(list(xs), [str(v) for v in ys], X_val=list(xd), y_val=[str(v) for v in yd],
            device="cpu", random_seed=0)
    secs = time.perf_counter() - t0
    texts, y = split["test"]
    pred = clf.predict(list(texts))
    return 100 * float(np.mean([str(p) == str(t) for p, t in zip(pred, y, strict=True)])), \
        secs, clf


def bench_task(task: str, args: argparse.Namespace, work: Path, m2v: str | None) -> dict:
    """One task: each method's accuracy, training seconds and predict texts/s."""
    from swe import StaticModel
    from swe.eval.classification import classify

    parts = splits(task, args.folds)
    if args.limit:
        parts = [{**p, "train": (p["train"][0][:args.limit], p["train"][1][:args.limit])}
                 for p in parts]
    row: dict = {"task": task, "folds": len(parts)}
    test_texts = parts[0]["test"][0]
    if "frozen" in args.methods:
        model = StaticModel.load(args.model)
        t0 = time.perf_counter()
        row["frozen"] = {"acc": round(classify(model, task, folds=args.folds)["acc"], 2),
                         "seconds": round(time.perf_counter() - t0, 1),
                         "encode_per_s": round(_speed(model.encode, test_texts))}
    for method in ("finetune", "model2vec"):
        if method not in args.methods or (method == "model2vec" and m2v is None):
            continue
        accs, secs = [], 0.0
        for i, split in enumerate(parts):
            acc, s, clf = (run_finetune(args.model, split, work / f"{task}-{i}", args.epochs,
                                        args.head)
                           if method == "finetune" else run_model2vec(m2v, split))
            accs.append(acc)
            secs += s
        row[method] = {"acc": round(float(np.mean(accs)), 2), "seconds": round(secs, 1),
                       "predict_per_s": round(_speed(clf.predict, list(test_texts)))}
    print(json.dumps(row), flush=True)
    return row


def _model2vec(model: str, work: Path, methods: list[str]) -> str | None:
    if "model2vec" not in methods:
        return None
    try:
        import model2vec.train  # noqa: F401
    except ImportError as e:
        print(f"model2vec column skipped: {e}", file=sys.stderr)
        return None
    from swe.export import export

    return str(export(model, "model2vec", work / "m2v", report=None, measure=False))


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = parse(p, argv, SMOKE, required="model")
    os.environ["OMP_NUM_THREADS"] = "1"  # one thread: the speeds are per core
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.smoke:
            from swe import StaticModel
            from swe.eval.baselines import glove_50d

            glove = glove_50d()
            args.model = str(work / "glove-5k")
            StaticModel.from_vectors(glove.words[:5000], glove.vectors[:5000],
                                     tokenizer=glove.tokenizer).save(args.model)
        m2v = _model2vec(args.model, work, args.methods)
        rows = [bench_task(t, args, work, m2v) for t in args.tasks]
    means = {m: round(float(np.mean([r[m]["acc"] for r in rows])), 2)
             for m in args.methods if all(m in r for r in rows)}
    print(json.dumps({"mean_acc": means}))
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "rows": rows, "mean_acc": means},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
