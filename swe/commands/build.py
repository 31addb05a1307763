"""Build a static word embedding model from a teacher and a corpus, on Ray.

    swe build --config quickstart --output out/quickstart
    ray job submit --working-dir . -- python pipelines/build.py --config en \\
        --output s3://bucket/models/en

Stages: corpus → sentences → vocab → selection → extraction → pca → train_data → refine
(one module each in swe/build/stages/). A rerun with the same output resumes: finished stages
and shards are skipped. --until STAGE stops early. The config is validated before any work.

The log has a start and an end line per stage (counts, seconds, throughput) and progress with an
ETA; each stage's whole result is in <output>/work/<stage>/_DONE.json. -v shows Ray's and Ray
Data's own output, one line per pass of tasks and every result (also printed as JSON at the end).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments (shared with `swe build`)."""
    from swe.build.stages import STAGE_NAMES
    from swe.cli import ArgumentParser, HelpFormatter

    p = ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter,
                                epilog="every config key with its type, default, range and "
                                       "meaning: python -m swe.build")
    p.add_argument("--config", required=True,
                   help="a TOML config, or the name of one that ships with swe: quickstart, "
                        "en-10k, en-60k, en-de … (swe/configs/)")
    p.add_argument("--output", help="output dir or s3:// prefix (overrides the config's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set vocab.size=20000 (repeatable)")
    p.add_argument("--until", choices=STAGE_NAMES, help="stop after this stage")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also Ray and Ray Data progress and logs, per-pass task lines, results")
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse arguments, validate the config, run the build; the exit status."""
    args = parser(prog).parse_args(argv)
    from swe.raysetup import configure_console

    configure_console(verbose=args.verbose)
    from swe.build import build, load_config
    from swe.commands import failed, kept

    urls = [args.output or "", *args.set]
    try:
        cfg = load_config(args.config, args.set, output=args.output)
    except Exception as e:  # one line and its exit status (swe.commands); others re-raised
        return failed(e, urls)
    start = time.perf_counter()
    try:
        results = build(cfg, until=args.until)
    except BaseException as e:  # one line and its exit status (swe.commands); others re-raised
        return failed(e, [cfg.output, *(p for c in cfg.corpus.values() for p in c.paths)],
                      kept=kept(f"{cfg.output}/work", f"the finished stages and shards under "
                                f"{cfg.output}/work are kept"))
    if args.verbose:
        print(json.dumps({name: {k: v for k, v in r.to_json().items() if k != "shards"}
                          for name, r in results.items()}, indent=2))
    _finished(cfg.output, time.perf_counter() - start, whole=args.until is None)
    return 0


def _finished(output: str, seconds: float, whole: bool) -> None:
    """The last line: how long the build took and where the model is (``whole``: the build
    ran to its last stage)."""
    from swe import storage
    from swe.build.tasks import duration

    model = storage.join(storage.output_url(output), "model")
    fs, path = storage.filesystem(model)
    where = f"the model is in {model}" if whole and fs.exists(path) else f"output in {output}"
    logging.getLogger("swe.build").info("build finished in %s: %s (stage results: "
                                        "work/<stage>/_DONE.json)", duration(seconds), where)


if __name__ == "__main__":
    sys.exit(main())
