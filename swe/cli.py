"""The ``swe`` command: ``swe build|encode|evaluate|analyze|quantize|finetune|export|info|…``.

``build``, ``encode``, ``evaluate``, ``analyze``, ``quantize`` and ``finetune`` are the jobs in
``swe.commands`` (their parser and ``main``); ``pipelines/*.py`` wrap the first four for ``ray
job submit``, so both take the same arguments. ``export``, ``info``, ``reseal`` and ``store`` live
here. Nothing heavy is imported until a subcommand runs: no torch, no Ray at import time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import IO

from swe.commands import failed, quiet_broken_pipe
from swe.signals import quiet_exit, shielded, sigterm_is_ctrl_c

__all__ = ["ArgumentParser", "HelpFormatter", "command_parser", "info", "main"]

JOBS = {"build": "build a model from a config",
        "encode": "bulk-encode files with a model (Ray Data)",
        "evaluate": "evaluate encoders on STS, retrieval, mining, classification",
        "analyze": "paper §5 analyses and the quality/speed plot",
        "quantize": "cluster a model's rows into K shared vectors: a smaller model (Ray)",
        "finetune": "train a classifier head with the static table on labelled data (Ray Train)"}
LOCAL = {"export": "write a model as a model2vec or sentence-transformers folder",
         "info": "check a model's files and print its dimension, vocabulary, languages, "
                 "provenance and file sizes",
         "reseal": "trust a model folder as it is now: record its files' checksums again",
         "store": "list or prune a teacher-output store (extraction.store)"}


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's layout (its examples) and appends each option's real default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False, []) or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that help and usage that cannot be written (a full disk, a
    closed pipe) raise, where argparse drops them and exits 0; ``quiet_broken_pipe`` turns that
    into one line and exit status 1."""

    def print_help(self, file: IO[str] | None = None) -> None:  # noqa: D102
        (file or sys.stdout).write(self.format_help())

    def print_usage(self, file: IO[str] | None = None) -> None:  # noqa: D102
        (file or sys.stdout).write(self.format_usage())


def info(path: str) -> dict:
    """What ``swe info`` prints: dim, vocabulary, languages, provenance and file sizes, after
    loading the model (every file checked against its checksum, the config's claims against
    the matrix)."""
    from swe import storage
    from swe.ensemble import ENSEMBLE
    from swe.model import StaticModel
    from swe.modelfiles import CONFIG, ModelFolder

    fs, p = storage.filesystem(storage.join(path, ENSEMBLE))
    if fs.exists(p):
        return _ensemble_info(path)
    model = StaticModel.load(path)  # checks the config's dim and vocab_size against the files
    folder = ModelFolder(path)
    files = dict(folder.get("files", dict, {}))
    files[CONFIG] = {"bytes": len(storage.read_bytes(storage.join(path, CONFIG)))}
    return {"path": path, "dim": model.dim, "vocab_size": len(model),
            "dtype": folder.get("dtype", str, "float32"),
            "clusters": folder.get("clusters", int, None),
            "languages": folder.get("languages", list), "lowercase": folder.get("lowercase", bool),
            "oov_tokenizer": folder.get("tokenizer", (str, type(None)), None),
            "provenance": folder.get("provenance", (dict, type(None)), None) or {},
            "files": {n: f["bytes"] for n, f in files.items()},
            "total_bytes": sum(f["bytes"] for f in files.values())}


def _ensemble_info(path: str) -> dict:
    """What ``swe info`` prints for an ensemble: its weights and each member's facts."""
    from swe import storage
    from swe.ensemble import EnsembleModel

    ensemble = EnsembleModel.load(path)  # every member checked as a model is
    members = [info(storage.join(path, f"member_{i}")) for i in range(len(ensemble.models))]
    return {"path": path, "ensemble": True, "dim": ensemble.dim,
            "weights": list(ensemble.weights), "members": members,
            "total_bytes": sum(m["total_bytes"] for m in members)}


def _info_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="swe info", formatter_class=HelpFormatter,
                                description=LOCAL["info"]
                                + "\n\nexample: swe info out/quickstart/model")
    p.add_argument("model", help="a saved swe model (dir or s3:// prefix)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def _info_main(argv: list[str]) -> int:
    args = _info_parser().parse_args(argv)

    try:
        facts = info(args.model)
    except Exception as e:  # one error line for a user's mistake or the object store
        return failed(e, [args.model])
    if args.json:
        print(json.dumps(facts, indent=2, ensure_ascii=False))
        return 0
    if facts.get("ensemble"):
        print(f"{'path':14} {facts['path']}\n{'ensemble':14} {len(facts['members'])} members, "
              f"weights {facts['weights']}\n{'dim':14} {facts['dim']}")
        for i, m in enumerate(facts["members"]):
            print(f"{f'member_{i}':14} dim {m['dim']}, {m['vocab_size']:,} words, {m['dtype']}, "
                  f"languages {m['languages']}")
        print(f"{'total':14} {facts['total_bytes']:,} bytes")
        return 0
    for key in ("path", "dim", "vocab_size", "dtype", "clusters", "languages", "lowercase",
                "oov_tokenizer"):
        print(f"{key:14} {facts[key]}")
    print(f"{'provenance':14} {json.dumps(facts['provenance'], ensure_ascii=False)}")
    for name, size in sorted(facts["files"].items()):
        print(f"{'file':14} {name}: {size:,} bytes")
    print(f"{'total':14} {facts['total_bytes']:,} bytes")
    return 0


def _reseal_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="swe reseal", formatter_class=HelpFormatter,
        description=LOCAL["reseal"] + ": for a folder saved by an older swe, or a config.json "
        "edited on purpose. A model whose files do not match their recorded checksums refuses to"
        " load; reseal only what you trust.\n\nexample: swe reseal out/old/model")
    p.add_argument("model", help="a saved swe model or ensemble (dir or s3:// prefix)")
    return p


def _reseal_main(argv: list[str]) -> int:
    args = _reseal_parser().parse_args(argv)
    from swe import storage
    from swe.ensemble import ENSEMBLE

    try:
        fs, p = storage.filesystem(storage.join(args.model, ENSEMBLE))
        members, names = _reseal_checked(args.model, fs.exists(p))
    except Exception as e:  # one error line for a user's mistake or the object store
        return failed(e, [args.model])
    if members is None:
        print(f"resealed {args.model}: config.json and {', '.join(names)}")
    else:
        print(f"resealed the ensemble {args.model} and its {members} members")
    return 0


def _reseal_checked(model: str, ensemble: bool) -> tuple[int | None, list[str]]:
    """Reseal the model (or the ensemble and each member); the member count and the files the
    last config sealed. When what was sealed does not load (a cut or damaged file), every config
    is put back as it was, so the checksums that would catch the damage are not replaced by the
    damaged file's."""
    from swe import storage
    from swe.ensemble import ENSEMBLE, FORMAT, MAX_MEMBERS, EnsembleModel
    from swe.model import StaticModel
    from swe.modelfiles import CONFIG, ModelFileError, ModelFolder, reseal

    own = (ENSEMBLE, FORMAT, 1) if ensemble else (CONFIG,)
    top = ModelFolder(model, *own[1:], config_name=own[0], verify=False)
    members = top.get("members", int) if ensemble else None
    if members is not None and not 1 <= members <= MAX_MEMBERS:
        raise ModelFileError(f"{top.config_path}: members = {members} should be 1 to "
                             f"{MAX_MEMBERS}")
    folders = [storage.join(model, f"member_{i}") for i in range(members or 0)]
    # each config opened as a model's first (a pipe, a huge or missing file: refused as ever)
    configs = [ModelFolder(f, verify=False).config_path for f in folders] + [top.config_path]
    before = {url: storage.read_bytes(url) for url in configs}
    try:
        for folder in folders:
            reseal(folder)
        names = reseal(model, *own)
        (EnsembleModel if ensemble else StaticModel).load(model)  # what was sealed must load
    except BaseException:  # a Ctrl-C too; a second one must not cut the putting back
        with shielded():
            for url, data in before.items():
                storage.write_bytes_atomic(url, data)
        raise
    return members, names


def _export_parser() -> argparse.ArgumentParser:
    from swe.export import TARGETS

    p = ArgumentParser(
        prog="swe export", formatter_class=HelpFormatter,
        description=LOCAL["export"] + " (docs/export.md)\n\nexample:\n"
        "  swe export out/quickstart/model --to model2vec out/quickstart-m2v\n"
        "  swe export out/quickstart/model --to sentence-transformers out/quickstart-st")
    p.add_argument("model", help="a saved swe model (dir or s3:// prefix)")
    p.add_argument("--to", required=True, choices=TARGETS, help="the target library's format")
    p.add_argument("out", help="output directory (must be empty or absent)")
    return p


def _export_main(argv: list[str]) -> int:
    args = _export_parser().parse_args(argv)
    from swe.export import export

    try:
        written = export(args.model, args.to, args.out)
    except Exception as e:  # one error line for a user's mistake or the object store
        return failed(e, [args.model, args.out])
    print(f"wrote {args.to} model to {written}")
    return 0


def _store_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="swe store", formatter_class=HelpFormatter,
        description=LOCAL["store"] + " (docs/teacher.md)\n\nexample:\n"
        "  swe store list out/teacher-store\n"
        "  swe store prune out/teacher-store --runtime onnx --older-than-days 30 --dry-run")
    p.add_argument("action", choices=["list", "prune"])
    p.add_argument("store", help="the store's folder or s3:// prefix")
    p.add_argument("--teacher", help="prune: a teacher sha256 prefix (as `list` shows it)")
    p.add_argument("--runtime", help="prune: torch, onnx or onnx-int8")
    p.add_argument("--older-than-days", type=float,
                   help="prune: last written more than this many days ago (at least 1/24: an hour)")
    p.add_argument("--dry-run", action="store_true",
                   help="prune: list what would be removed, and remove nothing")
    return p


def _store_main(argv: list[str]) -> int:
    args = _store_parser().parse_args(argv)
    from swe.build.teacher.store import list_store, prune

    given = [f"--{k.replace('_', '-')}" for k in ("teacher", "runtime", "older_than_days",
                                                  "dry_run")
             if getattr(args, k) not in (None, False)]
    if args.action == "list" and given:
        return failed(ValueError(f"{', '.join(given)}: prune's options; `swe store list` lists "
                                 "every namespace"))
    try:
        found = list_store(args.store) if args.action == "list" else prune(
            args.store, args.teacher, args.runtime, args.older_than_days, args.dry_run)
    except Exception as e:  # one error line for a user's mistake or the object store
        return failed(e, [args.store])
    verb = {"list": "", "prune": "would remove " if args.dry_run else "removed "}[args.action]
    for ns in found:
        print(f"{verb}{ns['namespace']}  teacher "
              f"{ns['teacher_sha256'][:12]}  {ns['runtime']:9}  {ns['sentences']:,} sentences  "
              f"{ns['bytes'] / 1e6:,.1f} MB  {ns['files']} files")
    if not found:
        print("nothing to list" if args.action == "list" else "nothing matched; nothing removed")
    return 0


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {n:9} {h}" for n, h in {**JOBS, **LOCAL}.items())
    return ArgumentParser(
        prog="swe", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="swe [-h] COMMAND [ARGS ...]",
        description=f"static word embeddings: build, encode, evaluate, export\n\n"
                    f"commands:\n{lines}",
        epilog="example: swe build --config quickstart --output out/quickstart\n"
               "`swe COMMAND --help` shows each command's options")


def command_parser(command: str) -> argparse.ArgumentParser:
    """The argument parser of ``swe COMMAND`` (what ``swe COMMAND --help`` prints)."""
    local = {"info": _info_parser, "export": _export_parser, "store": _store_parser,
             "reseal": _reseal_parser}
    if command in local:
        return local[command]()
    if command in JOBS:
        return importlib.import_module(f"swe.commands.{command}").parser(f"swe {command}")
    raise KeyError(f"unknown command {command!r}; choose from {', '.join([*JOBS, *LOCAL])}")


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``swe COMMAND ARGS…``; the exit status (1, quietly, when the reader of its
    output went away: ``swe store list … | head -1``)."""
    return quiet_broken_pipe(lambda: _dispatch(list(sys.argv[1:] if argv is None else argv)))


def _dispatch(argv: list[str]) -> int:
    """Run ``swe COMMAND ARGS…``; the exit status."""
    sigterm_is_ctrl_c()  # one line from here on (a job's own modules take a while to load)
    if not argv or argv[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    local = {"info": _info_main, "export": _export_main, "store": _store_main,
             "reseal": _reseal_main}
    if command in local:
        try:
            return local[command](rest)
        except KeyboardInterrupt as e:  # what was written is removed (export) or put back (reseal)
            return failed(e, kept="" if command == "store" else "nothing was changed")
    if command not in JOBS:
        _top_parser().error(f"unknown command {command!r}; choose from "
                            f"{', '.join([*JOBS, *LOCAL])}")
    try:  # a job says what an interrupt kept; one before its work began (loading) says this
        job = importlib.import_module(f"swe.commands.{command}")
        status = int(job.main(rest, prog=f"swe {command}") or 0)
    except KeyboardInterrupt as e:
        return failed(e)
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        quiet_exit()  # also where the job found Ray running (a test's, a notebook's)
    return status


if __name__ == "__main__":
    sys.exit(main())
