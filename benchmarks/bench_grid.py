"""Quality per teacher compute: step 2 (extraction + PCA, no training) of a V × N grid, every
cell through one teacher-output store, so each cell pays only for the sentences the cells
before it did not encode.

    python benchmarks/bench_grid.py --config en-60k --vs 30000 60000 100000 --ns 8 16 32 \\
        --store out/store-en --work out/grid --json out/grid.json --svg docs/img/grid.svg
    python benchmarks/bench_grid.py --report out/grid.json --svg docs/img/grid.svg
    python benchmarks/bench_grid.py --smoke   # a tiny quickstart, one V, two N

Each cell is ``build --until pca`` with ``vocab.size=V``, ``selection.n=N`` and
``extraction.store``; the cells share the corpus and sentences stages (hard links of the first
cell's), and cells of one V share the vocabulary. Per cell, from the stages' ``_DONE.json``:

* ``sentences``: the unique sentences the cell's word vectors come from (teacher passes + store
  hits): the cell's cost from an empty store;
* ``teacher_hours``: ``sentences`` at this run's measured teacher rate (the passes over the
  teacher's seconds of the cells that encoded at least 10,000 sentences);
* the dev signals of step 2: ``stsb_dev`` (Spearman × 100) and ``cls_dev``, the mean dev
  accuracy of SST-2 (its dev split) and TREC (a fixed tenth of its train split).

``--svg`` draws both dev signals against ``sentences``, one line per V (no plotting library).
Needs the pipeline extra and the teacher; ``--report`` needs neither.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _smoke import parse

SMOKE = {"config": "quickstart", "vs": [150], "ns": [8, 4], "tasks": ["stsb-dev", "trec"],
         "set": ["corpus.en.max_lines=1000", "vocab.min_count=3", "vocab.partitions=2",
                 "selection.candidates=40", "pca.sample=200", "pca.dim=32",
                 "extraction.actors=1", "extraction.batch_size=128"]}
TASKS = ["stsb-dev", "sst2", "trec"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default="en-60k", help="a config file or a shipped config")
    p.add_argument("--vs", type=int, nargs="+", default=[30000, 60000, 100000])
    p.add_argument("--ns", type=int, nargs="+", default=[8, 16, 32])
    p.add_argument("--set", action="append", default=[], help="more config overrides")
    p.add_argument("--store", help="the teacher-output store (default: <work>/store)")
    p.add_argument("--work", help="where the cells' builds go (default: a temporary dir)")
    p.add_argument("--tasks", nargs="+", default=TASKS, help=argparse.SUPPRESS)
    p.add_argument("--json", help="write the cells here (and read the finished ones back)")
    p.add_argument("--svg", help="draw the grid here")
    p.add_argument("--report", help="only draw and print an earlier --json")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def _done(out: Path, stage: str) -> dict:
    return json.loads((out / "work" / stage / "_DONE.json").read_text())["stats"]


def _seed_from(out: Path, work: Path, v: int) -> None:
    """Hard-link the stages an earlier cell finished that this cell would redo unchanged."""
    for other in sorted(work.glob("v*n*")):
        same_v = other.name.startswith(f"v{v}n")
        for stage in ("corpus", "sentences", *(["vocab"] if same_v else [])):
            src, dst = other / "work" / stage, out / "work" / stage
            if (src / "_DONE.json").exists() and not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(src, dst, copy_function=os.link)


def run_cell(args: argparse.Namespace, work: Path, store: str, v: int, n: int) -> dict:
    """Build one cell to step 2, evaluate it, drop its large work files; its row."""
    from swe.build import build, load_config
    from swe.eval.report import evaluate

    out = work / f"v{v}n{n}"
    _seed_from(out, work, v)
    cfg = load_config(args.config, [*args.set, f"vocab.size={v}", f"selection.n={n}",
                                    f"extraction.store={store}"], output=str(out))
    build(cfg, until="pca")
    ext, sel = _done(out, "extraction"), _done(out, "selection")
    scores = evaluate([str(out / "step2")], args.tasks).to_dict()["results"][str(out / "step2")]
    cls = [scores[t]["dev_acc"] for t in ("sst2", "trec") if t in scores]
    row = {"v": v, "n": n, "sentences": sel["unique_sentences"],
           "teacher_passes": ext["teacher_passes"], "store_hits": ext["store_hits"],
           "teacher_seconds": ext["teacher_passes"] / ext["sentences_per_s"]
           if ext["teacher_passes"] else 0.0,
           "extraction_seconds": ext["seconds"], "stsb_dev": scores["stsb-dev"]["spearman"],
           "cls_dev": sum(cls) / len(cls), "scores": scores}
    for stage in ("selection", "extraction"):
        shutil.rmtree(out / "work" / stage, ignore_errors=True)
    shutil.rmtree(out / "step1", ignore_errors=True)
    return row


def teacher_rate(rows: list[dict], min_passes: int = 10_000) -> tuple[float, int, int]:
    """Sentences/s, passes and cells over the cells with at least ``min_passes`` teacher passes
    (a handful of passes measures the actors' start, not the rate); rate 0 when none has."""
    timed = [r for r in rows if r["teacher_passes"] >= min_passes]
    passes = sum(r["teacher_passes"] for r in timed)
    seconds = sum(r["teacher_seconds"] for r in timed)
    return (passes / seconds if seconds else 0.0), passes, len(timed)


def with_hours(rows: list[dict]) -> list[dict]:
    """``rows`` with ``teacher_hours``: each cell's sentences at :func:`teacher_rate`."""
    rate = teacher_rate(rows)[0]
    return [{**r, "teacher_hours": r["sentences"] / rate / 3600 if rate else 0.0} for r in rows]


def markdown(rows: list[dict]) -> str:
    """The grid as a table, by V then N."""
    lines = ["| V | N | unique sentences | teacher-hours | STS-B dev | SST-2 dev | TREC dev "
             "| classification dev (mean) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["v"], r["n"])):
        cls = [f"{r['scores'][t]['dev_acc']:.2f}" if t in r["scores"] else "–"
               for t in ("sst2", "trec")]
        lines.append(f"| {r['v']:,} | {r['n']} | {r['sentences']:,} | {r['teacher_hours']:.2f} "
                     f"| {r['stsb_dev']:.2f} | {' | '.join(cls)} | {r['cls_dev']:.2f} |")
    return "\n".join(lines)


def svg(rows: list[dict], width: int = 720, height: int = 300) -> str:
    """Two panels (STS-B dev, classification dev) against unique sentences, one line per V."""
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    vs = sorted({r["v"] for r in rows})
    xs = [r["sentences"] for r in rows]
    x0, x1 = min(xs) * 0.9, max(xs) * 1.1
    hours_per = max(r.get("teacher_hours", 0.0) / r["sentences"] for r in rows)
    panel, pad = (width - 60) // 2, 45
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11"><rect width="100%" height="100%" '
             f'fill="white"/>']
    for p, (key, title) in enumerate([("stsb_dev", "STS-B dev"),
                                      ("cls_dev", "SST-2 + TREC dev acc.")]):
        ys = [r[key] for r in rows]
        y0, y1 = min(ys) - 0.5, max(ys) + 0.5
        left = pad + p * (panel + 20)

        def at(x: float, y: float, left: int = left, y0: float = y0, y1: float = y1) -> str:
            px = left + (x - x0) / (x1 - x0) * (panel - pad)
            py = height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)
            return f"{px:.1f},{py:.1f}"

        parts.append(f'<text x="{left}" y="20" font-weight="bold">{title}</text>')
        parts.append(f'<polyline fill="none" stroke="black" points="{at(x0, y1)} {at(x0, y0)} '
                     f'{at(x1, y0)}"/>')
        for y in (y0 + 0.5, (y0 + y1) / 2, y1 - 0.5):
            px, py = at(x0, y).split(",")
            parts.append(f'<text x="{float(px) - 4}" y="{py}" text-anchor="end">{y:.1f}</text>')
        for x in (x0 / 0.9, x1 / 1.1):
            px, py = at(x, y0).split(",")
            parts.append(f'<text x="{px}" y="{float(py) + 14}" text-anchor="middle">'
                         f'{x / 1e3:,.0f}k' + (f" ({x * hours_per:.2f} h)" if hours_per else "")
                         + '</text>')
        for i, v in enumerate(vs):
            line = sorted((r["sentences"], r[key], r["n"]) for r in rows if r["v"] == v)
            c = colours[i % len(colours)]
            points = " ".join(at(x, y) for x, y, _ in line)
            parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" '
                         f'points="{points}"/>')
            for x, y, n in line:
                px, py = at(x, y).split(",")
                parts.append(f'<circle cx="{px}" cy="{py}" r="3" fill="{c}"/>'
                             f'<text x="{float(px) + 4}" y="{float(py) - 4}">N={n}</text>')
            if p == 0:
                parts.append(f'<text x="{left + 8}" y="{38 + 14 * i}" fill="{c}">'
                             f'V = {v:,}</text>')
        parts.append(f'<text x="{left + (panel - pad) / 2}" y="{height - 8}" '
                     'text-anchor="middle">unique sentences through the teacher '
                     '(teacher-hours)</text>')
    return "\n".join([*parts, "</svg>"]) + "\n"


def _write(rows: list[dict], args: argparse.Namespace) -> None:
    rows = with_hours(rows)
    rate, passes, cells = teacher_rate(rows)
    if rate:
        print(f"teacher rate: {rate:,.0f} sentences/s over {passes:,} passes in {cells} cells")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.svg:
        Path(args.svg).parent.mkdir(parents=True, exist_ok=True)
        Path(args.svg).write_text(svg(rows))
    print(markdown(rows))


def main(argv: list[str] | None = None) -> int:
    """Run the grid's missing cells (or only report), then print and write the results."""
    p = parser()
    args = parse(p, argv, SMOKE)
    if args.report:
        if not Path(args.report).is_file():
            print(f"error: --report {args.report}: no such file (an earlier run's --json)",
                  file=sys.stderr)
            return 2
        _write(json.loads(Path(args.report).read_text()), args)
        return 0
    if args.work:
        from swe.storage import output_url

        try:  # the cells' folders are written and their work files removed
            args.work = output_url(args.work, "--work")
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    from swe.raysetup import init_ray

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # stage lines

    init_ray()
    with tempfile.TemporaryDirectory(prefix="swe-grid-") as tmp:
        work = Path(args.work or tmp).resolve()
        store = args.store or str(work / "store")
        rows = json.loads(Path(args.json).read_text()) if args.json and \
            Path(args.json).exists() else []
        for v in args.vs:
            for n in args.ns:
                if not any(r["v"] == v and r["n"] == n for r in rows):
                    rows.append(run_cell(args, work, store, v, n))
                    _write(rows, args)  # a finished cell is kept even if a later one fails
    return 0


if __name__ == "__main__":
    sys.exit(main())
