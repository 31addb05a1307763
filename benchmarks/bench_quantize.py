"""Size and quality of a swe model saved as float32, float16, int8 (per-row scales) and int8
(one global scale), optionally also cut to fewer dimensions with ``load(dim=k)``.

    python benchmarks/bench_quantize.py --model out/quickstart/model --model out/glove-50d \\
        --dims 128 64 --json out/bench_quantize.json
    python benchmarks/bench_quantize.py --smoke   # a tiny random model

Needs only the library and the shared data. For each model and scheme: save to a temporary
folder (``--keep DIR`` keeps them), then report the bytes of ``model.safetensors`` and of the
whole folder, the load time (median of 3; int8 is dequantised to float32 while loading, so
encoding runs on the same float32 matrix and at the same speed for every scheme), STS-B dev and
test Spearman × 100 (``swe.eval.similarity.sts``), and the mean and smallest cosine between each
STS-B dev sentence's embedding and the float32 model's at the same number of dimensions
(sentences with no known word left out). ``--dims`` applies only to PCA-ordered models
(``provenance.step`` is step2 or step3); for others it is skipped, since their first columns
are not the leading directions. ``--smoke`` scores a 2,000-word model with random 64-d vectors
made from the STS-B dev sentences' words.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _smoke import parse, smoke_model

SCHEMES = [("float32", "row"), ("float16", "row"), ("int8", "row"), ("int8", "global")]


SMOKE = {"dims": [32]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", action="append", help="a swe model dir (repeat; required unless "
                   "--smoke)")
    p.add_argument("--dims", type=int, nargs="*", default=[],
                   help="also score load(dim=k) for these k (PCA-ordered models only)")
    p.add_argument("--keep", type=Path, help="keep the saved folders under this dir")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, a tiny model")
    return p


def _name(dtype: str, scale: str) -> str:
    return dtype if dtype != "int8" else f"int8-{scale}"


def _load_seconds(path: Path, repeats: int = 3) -> float:
    from swe.model import StaticModel

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        StaticModel.load(path)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cosines(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    na, ng = np.linalg.norm(ref, axis=1), np.linalg.norm(got, axis=1)
    ok = (na > 0) & (ng > 0)
    cos = (ref * got).sum(1)[ok] / (na[ok] * ng[ok])
    return float(cos.mean()), float(cos.min())


def bench_model(path: str, dims: list[int], keep: Path | None, sentences: list[str]) -> list[dict]:
    """One row per scheme and kept dimension of the model at ``path``."""
    from swe.eval.data import stsb_file
    from swe.eval.similarity import sts
    from swe.model import StaticModel

    model = StaticModel.load(path)
    pca = model.provenance.get("step") in ("step2", "step3")  # step 1 is not PCA-ordered
    kept = [model.dim] + ([k for k in dims if k < model.dim] if pca else [])
    refs = {k: StaticModel.load(path, dim=k).encode(sentences) for k in kept}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, scale in SCHEMES:
            name = _name(dtype, scale)
            out = (keep or Path(tmp)) / f"{Path(path).name}-{name}"
            model.save(out, dtype=dtype, scale=scale)
            files = json.loads((out / "config.json").read_text())["files"]
            matrix = files["model.safetensors"]["bytes"]
            total = sum(f["bytes"] for f in files.values()) + (out / "config.json").stat().st_size
            load_s = _load_seconds(out)
            for k in kept:
                m = StaticModel.load(out, dim=k)
                mean, least = _cosines(refs[k], m.encode(sentences))
                row = {"model": path, "scheme": name, "dtype": dtype,
                       "scale": scale if dtype == "int8" else None, "dim": k,
                       "matrix_bytes": matrix, "folder_bytes": total,
                       "load_seconds": round(load_s, 3),
                       "stsb_dev": round(sts(m, stsb_file("dev")), 2),
                       "stsb_test": round(sts(m, stsb_file("test")), 2),
                       "cos_dev_mean": mean, "cos_dev_min": least}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """The rows as a table, file sizes relative to the same model's float32 file."""
    full = {r["model"]: r["matrix_bytes"] for r in rows if r["scheme"] == "float32"}
    lines = ["| model | scheme | dim | model.safetensors | × float32 | folder | load s | "
             "STS-B dev | STS-B test | 1 − mean cos to float32 (dev) | 1 − min cos |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['scheme']} | {r['dim']} | {r['matrix_bytes']:,} | "
            f"{r['matrix_bytes'] / full[r['model']]:.3f} | {r['folder_bytes']:,} | "
            f"{r['load_seconds']:.2f} | {r['stsb_dev']:.2f} | {r['stsb_test']:.2f} | "
            f"{1 - r['cos_dev_mean']:.1e} | {1 - r['cos_dev_min']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from swe.eval.data import stsb_file
    from swe.eval.similarity import read_sts

    p = parser()
    args = parse(p, argv, SMOKE, required="model")
    a, b, _ = read_sts(stsb_file("dev"))
    with tempfile.TemporaryDirectory() as tmp:
        models = args.model or [smoke_model(
            a + b, Path(tmp) / "smoke", minilm_tokenizer=False,
            provenance={"source": "bench_quantize.py --smoke"})]
        rows = [r for path in models for r in bench_model(path, args.dims, args.keep, a + b)]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    print("\n" + markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
