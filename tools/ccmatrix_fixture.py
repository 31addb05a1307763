"""The shared translation pairs written as the two CCMatrix releases, for tests and benchmarks:
``DIR/de-en.txt.zip`` (OPUS Moses zip: ``CCMatrix.de-en.de``, ``CCMatrix.de-en.en``,
``CCMatrix.de-en.scores``, plus README/LICENSE/.xml members readers must ignore) and
``DIR/de-en.tsv.xz`` (headerless ``score<TAB>de<TAB>en``). Languages in a file name are in
alphabetical order, as both releases name them. ``--repeat K`` writes every pair K times, each
with a new random score (for growth benchmarks; the stage's dedup collapses the repeats unless
``dedup = false``). ``--bench`` then times swe.build.pairs.sources on every format in this process.

    python tools/ccmatrix_fixture.py --pair en-de --out DIR [--repeat K] [--seed S] [--bench]
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from swe.eval.data import data_root


def load_pairs(pair: str, root: Path | None = None) -> tuple[list[str], list[str]]:
    """``(src texts, tgt texts)`` of ``parallel/<pair>/*.tsv.gz`` (headered TSV), parsed the way
    ``pair_dataset.read_pairs`` does: fields stripped, rows with an empty side or bad bytes
    skipped."""
    src, tgt = pair.split("-")
    xs: list[str] = []
    ys: list[str] = []
    for path in sorted((Path(root or data_root()) / "parallel" / pair).glob("*.tsv.gz")):
        raw = gzip.decompress(path.read_bytes()).split(b"\n")
        if raw and raw[-1] == b"":
            raw.pop()
        header = raw[0].decode().rstrip("\r\n").split("\t")
        i, j = header.index(src), header.index(tgt)
        for line in raw[1:]:
            try:
                fields = line.decode("utf-8").rstrip("\r\n").split("\t")
            except UnicodeDecodeError:
                continue
            x = fields[i].strip() if i < len(fields) else ""
            y = fields[j].strip() if j < len(fields) else ""
            if x and y:
                xs.append(x)
                ys.append(y)
    return xs, ys


def random_scores(n: int, seed: int) -> np.ndarray:
    """CCMatrix-like margin scores (1.0–1.3), rounded as written (7 decimals)."""
    return np.round(np.random.default_rng(seed).uniform(1.0, 1.3, n), 7)


def _ordered(pair: str, src: Sequence[str], tgt: Sequence[str]) -> tuple[str, list, list]:
    """The alphabetical ``a-b`` name and the texts in that order."""
    a, b = pair.split("-")
    return (f"{a}-{b}", list(src), list(tgt)) if a < b else (f"{b}-{a}", list(tgt), list(src))


def _blocks(texts: list[str], repeat: int) -> bytes:
    block = ("\n".join(texts) + "\n").encode() if texts else b""
    return block * repeat


def _score_lines(scores: np.ndarray) -> bytes:
    return "".join(f"{s:.7f}\n" for s in scores).encode()


def write_moses_zip(path: str | Path, pair: str, src: Sequence[str], tgt: Sequence[str],
                    scores: np.ndarray | None = None, repeat: int = 1) -> int:
    """An OPUS-style Moses zip of ``repeat`` copies of the pairs; returns the pair count."""
    name, first, second = _ordered(pair, src, tgt)
    a, b = name.split("-")
    stem = f"CCMatrix.{name}"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("README", f"CCMatrix {name} (test fixture)\n")
        z.writestr("LICENSE", "test fixture\n")
        z.writestr(f"{stem}.xml", "<linkGrp/>\n")
        for lang, texts in ((a, first), (b, second)):
            with z.open(f"{stem}.{lang}", "w", force_zip64=True) as f:
                f.write(_blocks(texts, repeat))
        if scores is not None:
            z.writestr(f"{stem}.scores", _score_lines(scores))
    return len(first) * repeat


def _open_write(path: str | Path) -> BinaryIO:
    p = str(path)
    if p.endswith(".gz"):
        return gzip.open(p, "wb", compresslevel=1)
    if p.endswith(".xz"):
        return lzma.open(p, "wb", preset=1)
    return open(p, "wb")


def write_ccmatrix_tsv(path: str | Path, pair: str, src: Sequence[str], tgt: Sequence[str],
                       scores: np.ndarray, repeat: int = 1) -> int:
    """A headerless CCMatrix TSV ``score<TAB>text<TAB>text``, text columns in alphabetical
    language order (de, en for en-de); gzip/xz by extension. Returns the pair count."""
    _, first, second = _ordered(pair, src, tgt)
    n = len(first)
    with _open_write(path) as f:
        for r in range(repeat):
            f.write("".join(f"{s:.7f}\t{x}\t{y}\n" for s, x, y in
                            zip(scores[r * n:(r + 1) * n], first, second, strict=True)).encode())
    return n * repeat


def write_aligned(stem: str | Path, pair: str, src: Sequence[str], tgt: Sequence[str],
                  scores: np.ndarray | None = None, repeat: int = 1,
                  compression: str = "") -> list[str]:
    """Plain aligned files ``<stem>.<src>``, ``<stem>.<tgt>`` (+ ``<stem>.scores``);
    ``compression`` ``.gz``/``.xz`` or ``""``. Returns the paths written."""
    a, b = pair.split("-")
    out = []
    for suffix, data in ((a, _blocks(list(src), repeat)), (b, _blocks(list(tgt), repeat)),
                         ("scores", None if scores is None else _score_lines(scores))):
        if data is None:
            continue
        path = f"{stem}.{suffix}{compression}"
        with _open_write(path) as f:
            f.write(data)
        out.append(path)
    return out


def write_fixture(out: Path, pair: str, repeat: int, seed: int) -> dict:
    """The two CCMatrix releases of the shared pairs under ``out``; counts and paths."""
    out.mkdir(parents=True, exist_ok=True)
    src, tgt = load_pairs(pair)
    name = _ordered(pair, src, tgt)[0]
    zip_path, tsv_path = out / f"{name}.txt.zip", out / f"{name}.tsv.xz"
    scores = random_scores(len(src) * repeat, seed)
    write_moses_zip(zip_path, pair, src, tgt, scores, repeat)
    write_ccmatrix_tsv(tsv_path, pair, src, tgt, random_scores(len(src) * repeat, seed + 1),
                       repeat)
    return {"pairs": len(src), "repeat": repeat, "written": len(src) * repeat,
            "moses_zip": str(zip_path), "ccmatrix_tsv": str(tsv_path),
            "zip_mib": round(zip_path.stat().st_size / 2**20, 2),
            "tsv_xz_mib": round(tsv_path.stat().st_size / 2**20, 2)}


def bench(out: Path, pair: str, repeat: int, seed: int) -> dict:
    """Read throughput (pairs/s, one process) of every format, and of hashing."""
    import pyarrow as pa

    from swe.build.pairs.readers import read_source
    from swe.build.pairs.sources import PairsConfig, plan_sources
    from swe.build.pairs.text import normalize, pair_hash
    from swe.build.shuffle import shuffle_key

    normalize(pa.array(["warm-up"]))  # the once-per-process casefold table, not timed
    src, tgt = load_pairs(pair)
    name = _ordered(pair, src, tgt)[0]
    scores = random_scores(len(src) * repeat, seed)
    extra = out / "bench"
    extra.mkdir(exist_ok=True)
    write_ccmatrix_tsv(extra / f"{name}.tsv.gz", pair, src, tgt, scores, repeat)
    write_aligned(extra / "plain", pair, src, tgt, scores, repeat)
    with gzip.open(extra / f"{pair}.headered.tsv.gz", "wb", compresslevel=1) as f:
        f.write(("\t".join(pair.split("-")) + "\n").encode())
        f.write("".join(f"{x}\t{y}\n" for x, y in zip(src, tgt, strict=True)).encode() * repeat)
    cases = {"moses zip": [str(out / f"{name}.txt.zip")],
             "ccmatrix-tsv xz": [str(out / f"{name}.tsv.xz")],
             "ccmatrix-tsv gz": [str(extra / f"{name}.tsv.gz")],
             "aligned plain": [str(extra / f"plain.{lang}") for lang in (*pair.split("-"),
                                                                           "scores")],
             "tsv gz (headered)": [str(extra / f"{pair}.headered.tsv.gz")]}
    result = {}
    for label, paths in cases.items():
        cfg = PairsConfig(paths=paths)
        stats: dict[str, int] = {}
        with _timer() as tm:
            tables = [tb for s in plan_sources(pair, cfg) for tb in read_source(s, cfg, stats)]
        result[label] = {"read": stats["read"], "kept": stats["kept"], **tm.rates(stats["read"])}
    rows = sum(tb.num_rows for tb in tables)
    with _timer() as tm:
        hashes = np.concatenate([pair_hash(tb["src"], tb["tgt"]) for tb in tables])
    result["pair_hash"] = {"rows": rows, **tm.rates(rows)}
    with _timer() as tm:
        shuffle_key(hashes, seed)
    result["shuffle_key"] = {"rows": rows, **tm.rates(rows)}
    return result


class _timer:
    """Wall and CPU seconds of a block (the CPU rate is steadier on a shared machine)."""

    def __enter__(self) -> _timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    def rates(self, n: int) -> dict:
        return {"wall_s": round(self.wall, 3), "cpu_s": round(self.cpu, 3),
                "per_s_wall": round(n / max(self.wall, 1e-9)),
                "per_s_cpu": round(n / max(self.cpu, 1e-9))}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"tools/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pair", default="en-de", help="a directory under parallel/, e.g. en-de")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--repeat", type=int, default=1, help="write every pair K times")
    p.add_argument("--seed", type=int, default=0, help="seed of the random scores")
    p.add_argument("--bench", action="store_true", help="time the readers on every format")
    return p


def main(argv: list[str] | None = None) -> int:
    """Write the fixture, print its counts (and the benchmark) as JSON."""
    args = parser().parse_args(argv)
    report = write_fixture(args.out, args.pair, args.repeat, args.seed)
    print(json.dumps(report))
    if args.bench:
        print(json.dumps(bench(args.out, args.pair, args.repeat, args.seed), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
