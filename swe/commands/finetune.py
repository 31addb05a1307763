"""Fine-tune a model on labelled data: a classifier head trained with the static table itself.

    swe finetune --model out/en-60k/model --data reviews.parquet --text-column text \\
        --label-column label --output out/reviews-clf
    swe encode --model out/reviews-clf --input more.parquet --output out/scored --predict

Data: Parquet, JSONL or CSV (local or s3://, plain or compressed); a label is a string or an
integer, a list of them makes the task multi-label. Dev: --dev FILE, else a seeded tenth of the
distinct texts; training stops once the dev loss has not improved for --patience evaluations,
and the best table and head are kept. Runs on Ray Train (local Ray, or the cluster in
RAY_ADDRESS); a rerun of a killed job resumes from its last checkpoint. The result loads with
swe.StaticClassifier.load(OUT).predict(texts) (no torch) and with swe.StaticModel.load(OUT).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import MISSING, asdict, fields


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's arguments: one flag per FinetuneJob option (its default and help)."""
    from swe.cli import ArgumentParser, HelpFormatter
    from swe.finetune import FinetuneJob

    p = ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--model", required=True, help="a saved swe model (dir or s3:// prefix)")
    p.add_argument("--data", required=True, help="the labelled training file")
    p.add_argument("--output", required=True, help="a new folder (or s3:// prefix)")
    helps = {"dev": "a labelled dev file (default: --dev-share of --data)",
             "head": "linear, or mlp (one hidden ReLU layer of --hidden units)",
             "lr": "the head's Adam learning rate",
             "table_lr": "the static table's (row-sparse Adam); 0 keeps it frozen",
             "eval_every": "steps between dev evaluations; 0: once per epoch",
             "patience": "stop after this many evaluations without a lower dev loss",
             "hidden": "the mlp head's hidden units", "dev_share": "the dev share of --data "
             "without --dev (by text)", "seed": "fixes the head's start, the order and the "
             "dev share"}
    for f in fields(FinetuneJob):
        if f.name in ("model", "data", "output"):
            continue
        default = None if f.default is MISSING else f.default
        kind = type(default) if default is not None else str
        p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kind, default=default,
                       help=helps.get(f.name, f.name.replace("_", " ")))
    p.add_argument("-v", "--verbose", action="store_true", help="also Ray's own output")
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the job; one ``error: …`` line and its exit status (:mod:`swe.commands`)."""
    args = parser(prog).parse_args(argv)
    from swe.raysetup import configure_console

    configure_console(verbose=args.verbose)
    from swe.commands import failed, kept
    from swe.finetune import finetune

    options = {k: v for k, v in vars(args).items()
               if k not in ("model", "data", "output", "verbose") and v is not None}
    try:
        report = finetune(args.model, args.data, args.output, **options)
    except BaseException as e:  # one line and its exit status (swe.commands); others re-raised
        return failed(e, [args.model, args.data, args.output],
                      kept=kept(f"{args.output}/work", f"the last checkpoint under "
                                f"{args.output}/work is kept", pattern="runs/*/checkpoint_*"))
    print(json.dumps(asdict(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
