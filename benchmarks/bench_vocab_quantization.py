"""Vocabulary quantisation (``swe quantize``): folder size, load time, encode speed and dev
quality of a model clustered into K shared vectors, with float16 and int8 centroids, beside
the float32 / float16 / int8 model and int8 with its dimensions cut to the same folder size.

    python benchmarks/bench_vocab_quantization.py --model out/en-60k/model \\
        --clusters 2048 4096 8192 16384 32768 --json out/vq-en-60k.json \\
        --plot docs/img/vocab_quantization_en-60k.png
    python benchmarks/bench_vocab_quantization.py --model out/many/model \\
        --dev-pairs out/many/work/train_data/dev --clusters 8192 32768 --json out/vq-many.json
    python benchmarks/bench_vocab_quantization.py --smoke   # GloVe's 5k words, K 64

Needs the pipeline extra (Ray runs the clustering) and the shared data. Dev signals only
(settings are chosen on these): STS-B dev Spearman × 100, SST-2 dev and TREC dev accuracy of
``swe evaluate``'s logistic regression (``classify``'s ``dev_acc``), and with ``--dev-pairs``
(a build's ``work/train_data/dev``) pair retrieval accuracy. Speed: sentences/s encoding STS-B
dev's sentences ×10 on one thread (best of 3); load: median of 3. "int8 cut" keeps the first d′
dimensions (``load(dim=d′)``, PCA-ordered models only) with d′ the largest whose int8 folder is
no bigger than the clustered one's. k-means runs once per K (for the first ``--dtypes``); the
other types store the same centroids again (float16 centroids read back: their rounding is
far below an int8 step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _smoke import parse

SMOKE = {"clusters": [64], "signals": ["stsb"], "speed_copies": 1}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="a swe model (required unless --smoke)")
    p.add_argument("--clusters", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 32768])
    p.add_argument("--dtypes", nargs="+", default=["float16", "int8"], help="centroid types")
    p.add_argument("--signals", nargs="+", default=["stsb", "sst2", "trec"],
                   choices=["stsb", "sst2", "trec"])
    p.add_argument("--dev-pairs", help="a build's work/train_data/dev: also pair retrieval")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--speed-copies", type=int, default=10,
                   help="speed: encode STS-B dev's sentences this many times over (best of 3)")
    p.add_argument("--exact", type=int, default=0,
                   help="swe quantize --exact: the first N rows keep their own direction")
    p.add_argument("--work", help="keep the folders here (default: a temporary folder)")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--plot", type=Path, help="write the size / quality plot here (PNG)")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, GloVe 5k words")
    return p


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def _speed(model, texts: list[str]) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        model.encode(texts)
        best = min(best, time.perf_counter() - t0)
    return len(texts) / best


def score(path: Path, signals: list[str], dev_pairs: str | None, copies: int,
          dim: int | None = None) -> dict:
    """Size, load seconds, speed (STS-B dev's sentences ``copies`` times over) and the dev
    signals of the model folder at ``path``."""
    from swe.eval.classification import classify
    from swe.eval.data import stsb_file
    from swe.eval.retrieval import pair_retrieval
    from swe.eval.similarity import read_sts, sts
    from swe.model import StaticModel

    loads = []
    for _ in range(3):
        t0 = time.perf_counter()
        model = StaticModel.load(path, dim=dim)
        loads.append(time.perf_counter() - t0)
    a, b, _ = read_sts(stsb_file("dev"))
    row = {"folder_bytes": _folder_bytes(path), "load_s": round(statistics.median(loads), 3),
           "sentences_per_s": round(_speed(model, (a + b) * copies))}
    if "stsb" in signals:
        row["stsb_dev"] = round(sts(model, stsb_file("dev")), 2)
    for task in ("sst2", "trec"):
        if task in signals:
            row[f"{task}_dev"] = round(classify(model, task)["dev_acc"], 2)
    if dev_pairs:
        row["dev_retrieval"] = round(pair_retrieval(model, dev_pairs)["acc"], 2)
    return row


def _cut_int8(model_path: str, budget: int, work: Path, signals: list[str],
              dev_pairs: str | None, copies: int) -> dict | None:
    """int8 with the most leading dimensions whose folder fits ``budget`` bytes."""
    from swe.model import StaticModel

    model = StaticModel.load(model_path)
    if model.provenance.get("step") not in ("step2", "step3"):
        return None  # its first columns are not the leading directions
    probe = work / "int8-probe"
    StaticModel.load(model_path, dim=1).save(probe, dtype="int8")
    per_dim = len(model)  # one int8 byte per word and dimension
    dim = min(model.dim, (budget - _folder_bytes(probe) + per_dim) // per_dim)
    if dim < 1:
        return None
    out = work / f"int8-d{dim}"
    if not out.exists():
        StaticModel.load(model_path, dim=dim).save(out, dtype="int8")
    return {"kind": "int8 cut", "dim": dim, **score(out, signals, dev_pairs, copies)}


def resave(folder: Path, out: Path, dtype: str) -> None:
    """The clustering in ``folder`` with its centroids saved as ``dtype`` (no second k-means:
    the centroids are read back as float32 and stored again)."""
    from safetensors.numpy import load_file
    from safetensors.numpy import save as st_save

    from swe.matrix import CLUSTERS, NORMS, clustered_tensors
    from swe.model import StaticModel
    from swe.modelfiles import write_folder

    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(folder / "model.safetensors")
    StaticModel.load(folder)  # every file checked
    centroids = tensors["embeddings"].astype("float32")  # float16 (or float32) centroids
    new, scheme = clustered_tensors(centroids, tensors[CLUSTERS], tensors[NORMS], dtype, "row")
    files = {name: (folder / name).read_bytes() for name in config["files"]
             if name != "model.safetensors"}
    files["model.safetensors"] = st_save(new)
    kept = {k: v for k, v in config.items() if k not in ("files", "config_sha256", "scale")}
    write_folder(str(out), files, {**kept, **scheme})


def run(args: argparse.Namespace, work: Path) -> list[dict]:
    """Every row: the model as saved, each (K, dtype) clustering, and its int8-cut twin."""
    from swe.clustering import quantize_model
    from swe.model import StaticModel

    model = StaticModel.load(args.model)
    rows = []
    for dtype in ("float32", "float16", "int8"):
        out = work / f"full-{dtype}"
        model.save(out, dtype=dtype)
        rows.append({"kind": "full", "dtype": dtype, "dim": model.dim,
                     **score(out, args.signals, args.dev_pairs, args.speed_copies)})
        print(json.dumps(rows[-1]), flush=True)
    for k in args.clusters:
        first = work / f"k{k}-{args.dtypes[0]}"
        t0 = time.perf_counter()
        rep = quantize_model(args.model, str(first), k, dtype=args.dtypes[0],
                             iterations=args.iterations, exact=min(args.exact, k - 1))
        secs = round(time.perf_counter() - t0, 1)
        for dtype in args.dtypes:
            out = work / f"k{k}-{dtype}"
            if out != first:
                resave(first, out, dtype)
            rows.append({"kind": "clustered", "clusters": k, "dtype": dtype, "exact": args.exact,
                         "quantize_s": secs, "passes": rep.iterations,
                         "mean_cosine": rep.mean_cosine,
                         **score(out, args.signals, args.dev_pairs, args.speed_copies)})
            print(json.dumps(rows[-1]), flush=True)
            cut = _cut_int8(args.model, rows[-1]["folder_bytes"], work, args.signals,
                            args.dev_pairs, args.speed_copies)
            if cut:
                rows.append({**cut, "matches": f"k{k}-{dtype}"})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Folder size (log) against each dev signal, one panel per signal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    signals = [s for s in ("stsb_dev", "sst2_dev", "trec_dev", "dev_retrieval") if s in rows[0]]
    fig, axes = plt.subplots(1, len(signals), figsize=(4.2 * len(signals), 3.6), squeeze=False)
    groups = {"clustered float16": lambda r: r["kind"] == "clustered" and r["dtype"] == "float16",
              "clustered int8": lambda r: r["kind"] == "clustered" and r["dtype"] == "int8",
              "int8, dims cut": lambda r: r["kind"] == "int8 cut",
              "full (f32, f16, int8)": lambda r: r["kind"] == "full"}
    for ax, signal in zip(axes[0], signals, strict=True):
        for label, keep in groups.items():
            pts = sorted((r["folder_bytes"] / 1e6, r[signal]) for r in rows if keep(r))
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xscale("log")
        ax.minorticks_off()
        sizes = [r["folder_bytes"] / 1e6 for r in rows]
        ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
                 if min(sizes) / 1.5 <= t <= max(sizes) * 1.5]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("folder size (MB)")
        ax.set_title(signal)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = parse(p, argv, SMOKE, required="model")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.smoke:
            from swe.eval.baselines import glove_50d
            from swe.model import StaticModel

            glove = glove_50d()
            args.model = str(work / "glove-5k")
            StaticModel.from_vectors(glove.words[:5000], glove.vectors[:5000],
                                     tokenizer=glove.tokenizer).save(args.model)
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        rows = run(args, work)
        if args.plot:
            plot(rows, args.plot, f"vocabulary quantisation of {args.model}")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
