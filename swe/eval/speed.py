"""Encoding speed, memory, load time and size on disk of one encoder, in a fresh process.

    python -m swe.eval.speed --spec out/en-30k/step3 --spec teacher:minilm \\
        --spec potion-base-8m --sentences 10000 --limit teacher:minilm=2000 \\
        --threads 1 --threads 2 --json out/results/speed.json

``--texts`` defaults to STS-B train in the data dir (:func:`swe.eval.data.data_root`).
:func:`measure` starts ``python -m swe.eval.speed --worker`` for each call, so every encoder is
loaded into a clean interpreter: its peak RSS (Linux ``VmHWM``, else ``ru_maxrss``) and the
RSS after loading are its own, not left over from an encoder measured before it. The thread
count is fixed before any library is imported, in every pool an encoder may use: OpenMP, MKL,
OpenBLAS (``*_NUM_THREADS``), Rayon (the Rust ``tokenizers`` that model2vec, WordLlama and the
teacher's tokenizer use) and torch (``torch.set_num_threads`` for the teacher). ``threads=None``
leaves every library at its default, reported as ``"default"``.

As ``benchmarks/bench_encode.py`` does, every encoder first encodes all the texts once (warm-up:
caches, memo tables, lazy initialisation; its rate is kept as ``cold_sentences_per_s``), then
``repeats`` timed runs; the median is reported (and the fastest run). CPU time over wall time
of the timed runs (``cpu_per_wall``) shows how many cores the encoder really kept busy: below
``threads`` on a machine shared with other work, or for an encoder that does not parallelise.

Sizes on disk (:func:`swe.eval.encoders.model_files`) are the files the encoder loads: the
whole model dir for a swe model, a ``model2vec:DIR``, potion-base-8M and the teacher;
WordLlama's 256-d ``l2_supercat`` weights plus its tokenizer config, as the package resolves
them; GloVe's two package data files and the MiniLM ``tokenizer.json`` it uses for the OOV rule.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swe import storage
from swe.eval.data import stsb_file
from swe.eval.encoders import load_encoder, model_files
from swe.eval.similarity import read_sts

__all__ = ["THREAD_VARS", "main", "markdown", "measure", "peak_rss_bytes", "ratio_to",
           "read_texts"]

#: Environment variables that cap the thread pools of the libraries the encoders use.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS",
               "RAYON_RS_NUM_CPUS")


# -- texts ----------------------------------------------------------------------------------------


def read_texts(path: str | os.PathLike, n: int | None = None) -> list[str]:
    """The first ``n`` sentences of a file: an STS TSV/CSV (all ``sentence1`` then all
    ``sentence2``), or one sentence per line (plain or ``.xz``)."""
    path = Path(path)
    if path.suffix.lower() in (".tsv", ".csv"):
        a, b, _ = read_sts(path)
        texts = a + b
        return texts[:n] if n is not None else texts
    if path.suffix == ".xz":
        import lzma

        opener = lzma.open
    else:
        opener = open
    texts: list[str] = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if n is not None and len(texts) >= n:
                break
            texts.append(line.rstrip("\n"))
    return texts


# -- the worker (a fresh process per measurement) --------------------------------------------------


def _rss_bytes() -> int | None:
    """Current resident set size (Linux ``/proc``); ``None`` where unavailable."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss_bytes() -> int:
    """This process's peak RSS. On Linux ``VmHWM`` (reset by exec): ``ru_maxrss`` survives
    fork + exec, so a worker started by a big parent would report the parent's size."""
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB elsewhere


def _worker(spec: str, texts: list[str], threads: int | None, repeats: int) -> dict:
    """Runs in the fresh process: load, warm up, time; numbers for one encoder."""
    import numpy as np

    rss_start = _rss_bytes()
    t = time.perf_counter()
    encoder = load_encoder(spec, threads)
    load_s = time.perf_counter() - t
    rss_loaded = _rss_bytes()
    peak_loaded = peak_rss_bytes()

    t = time.perf_counter()
    out = np.asarray(encoder.encode(texts))
    cold = time.perf_counter() - t
    walls, cpus = [], []
    for _ in range(repeats):
        c, t = time.process_time(), time.perf_counter()
        encoder.encode(texts)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    median = statistics.median(walls)
    torch_threads = None
    if "torch" in sys.modules:
        torch_threads = int(sys.modules["torch"].get_num_threads())
    return {
        "spec": spec,
        "sentences": len(texts),
        "threads": threads if threads else "default",
        "torch_threads": torch_threads,
        "dim": int(out.shape[1]),
        "sentences_per_s": len(texts) / median,
        "best_sentences_per_s": len(texts) / min(walls),
        "cold_sentences_per_s": len(texts) / cold,
        "seconds": walls,
        "cpu_per_wall": sum(cpus) / sum(walls),
        "load_s": load_s,
        "rss_start_bytes": rss_start,
        "rss_after_load_bytes": rss_loaded,
        "peak_rss_after_load_bytes": peak_loaded,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def _set_threads(env: dict, threads: int | None) -> dict:
    env = dict(env)
    for var in THREAD_VARS:
        if threads:
            env[var] = str(threads)
        else:
            env.pop(var, None)
    return env


# -- the API --------------------------------------------------------------------------------------


def measure(spec: str, texts: list[str], threads: int | None = None, repeats: int = 3,
            timeout: float | None = None) -> dict:
    """Speed, memory, load time and size on disk of the encoder ``spec`` on ``texts``.

    Runs in a fresh ``python -m swe.eval.speed --worker`` process with every thread pool capped at
    ``threads`` (``None``: library defaults). Returns ``spec``, ``sentences``, ``threads``,
    ``torch_threads`` (the teacher's torch pool, else ``None``), ``dim``, ``sentences_per_s``
    (median of ``repeats`` timed runs after one warm-up run), ``best_sentences_per_s`` (the
    fastest timed run: less sensitive to other work on the machine), ``cold_sentences_per_s``
    (the warm-up run), ``seconds`` (each timed run), ``cpu_per_wall``, ``load_s``,
    ``rss_start_bytes`` (the interpreter before loading), ``rss_after_load_bytes``,
    ``peak_rss_bytes`` (peak RSS at the end), ``size_bytes`` and ``files``, plus
    ``cpu_count`` and the 1-minute ``loadavg`` before the run (other work on the machine).
    """
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    texts = list(texts)
    if not texts:
        raise ValueError("measure needs at least one text")
    files = model_files(spec)
    with tempfile.TemporaryDirectory(prefix="swe-speed-") as tmp:
        src, dst = Path(tmp) / "texts.json", Path(tmp) / "result.json"
        src.write_text(json.dumps(texts), encoding="utf-8")
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        proc = subprocess.run(
            [sys.executable, "-m", "swe.eval.speed", "--worker", spec, str(src), str(dst),
             str(threads or 0), str(repeats)],
            env=_set_threads(os.environ, threads), capture_output=True, text=True,
            timeout=timeout, check=False)
        if proc.returncode != 0 or not dst.exists():
            raise RuntimeError(f"measuring {spec} failed (exit {proc.returncode}):\n"
                               f"{proc.stderr[-4000:]}")
        result = json.loads(dst.read_text(encoding="utf-8"))
    result.update(size_bytes=sum(p.stat().st_size for p in files),
                  files=[str(p) for p in files], cpu_count=os.cpu_count(),
                  loadavg_1min_before=load_before,
                  machine=platform.processor() or platform.machine())
    return result


def ratio_to(results: list[dict], reference_spec: str, threads: int | str | None = None
             ) -> dict[str, float]:
    """``sentences_per_s`` of each result over that of ``reference_spec`` (e.g. the teacher):
    ``{spec: ratio}``. Only results measured with the same thread count are compared: pass
    ``threads`` to pick one when ``results`` hold several (``None`` picks the reference's, and
    is an error if the reference was measured at more than one)."""
    refs = [r for r in results if r["spec"] == reference_spec]
    if threads is not None:
        want = threads if threads else "default"
        refs = [r for r in refs if r["threads"] == want]
    if not refs:
        raise ValueError(f"no result for {reference_spec!r}"
                         + (f" at threads={threads}" if threads is not None else ""))
    if len(refs) > 1:
        raise ValueError(f"{reference_spec!r} was measured {len(refs)} times; pass threads= "
                         "to pick one thread count")
    ref = refs[0]
    return {r["spec"]: r["sentences_per_s"] / ref["sentences_per_s"]
            for r in results if r["threads"] == ref["threads"]}


# -- CLI ------------------------------------------------------------------------------------------


def _mib(n: int | None) -> str:
    return "–" if n is None else f"{n / 2**20:.0f}"


def markdown(results: list[dict], reference_spec: str | None = None) -> str:
    """A Markdown table of results (one row per spec and thread count)."""
    lines = ["| encoder | threads | sentences | sent/s | × ref | cpu/wall | load s | "
             "RSS loaded MiB | peak RSS MiB | size MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ratio = "–"
        if reference_spec:
            with contextlib.suppress(KeyError, ValueError):
                ratio = f"{ratio_to(results, reference_spec, r['threads'])[r['spec']]:.1f}"
        lines.append(f"| {r['spec']} | {r['threads']} | {r['sentences']} | "
                     f"{r['sentences_per_s']:,.0f} | {ratio} | {r['cpu_per_wall']:.2f} | "
                     f"{r['load_s']:.2f} | {_mib(r['rss_after_load_bytes'])} | "
                     f"{_mib(r['peak_rss_bytes'])} | {_mib(r['size_bytes'])} |")
    return "\n".join(lines)


def _limit(item: str) -> tuple[str, int]:
    spec, sep, n = item.rpartition("=")
    if not sep or not n.isdigit():
        raise argparse.ArgumentTypeError(f"--limit wants SPEC=N, got {item!r}")
    return spec, int(n)


def main(argv: list[str] | None = None) -> None:
    """The command line (and, with ``--worker``, the fresh process :func:`measure` starts)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        spec, src, dst, threads, repeats = argv[1:6]
        texts = json.loads(Path(src).read_text(encoding="utf-8"))
        result = _worker(spec, texts, int(threads) or None, int(repeats))
        Path(dst).write_text(json.dumps(result), encoding="utf-8")
        return
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", action="append", required=True, help="encoder spec (repeatable)")
    p.add_argument("--texts", type=Path, default=None,
                   help="STS TSV/CSV or one sentence per line (.xz); default: STS-B train")
    p.add_argument("--sentences", type=int, default=10_000)
    p.add_argument("--limit", type=_limit, action="append", default=[],
                   help="SPEC=N: only the first N of the sentences for SPEC (slow encoders)")
    p.add_argument("--threads", type=int, action="append",
                   help="thread count (repeatable; 0 = library defaults); default 1")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--reference", default=None, help="spec the speed ratios are relative to")
    p.add_argument("--json", help="write {'results': [...], ...} here")
    args = p.parse_args(argv)
    args.texts = args.texts or stsb_file("train")
    texts = read_texts(args.texts, args.sentences)
    limits = dict(args.limit)
    results = []
    for threads in args.threads or [1]:
        for spec in args.spec:
            sub = texts[: limits.get(spec, len(texts))]
            r = measure(spec, sub, threads or None, args.repeats)
            print(f"{spec} threads={r['threads']}: {r['sentences_per_s']:,.0f} sent/s, "
                  f"peak RSS {_mib(r['peak_rss_bytes'])} MiB", file=sys.stderr)
            results.append(r)
    print(markdown(results, args.reference))
    if args.json:
        report = {"texts": str(args.texts), "sentences": len(texts), "limits": limits,
                  "repeats": args.repeats, "cpu_count": os.cpu_count(), "results": results}
        if args.reference:
            report["reference"] = args.reference
            report["ratios"] = {str(t): ratio_to(results, args.reference, t)
                                for t in dict.fromkeys(r["threads"] for r in results)}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        storage.write_bytes_atomic(os.path.abspath(args.json),
                                   json.dumps(report, indent=2).encode())


if __name__ == "__main__":
    main()
