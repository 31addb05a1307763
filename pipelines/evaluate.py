"""`ray job submit -- python pipelines/evaluate.py …`: the same job as `swe evaluate`
(swe/commands/evaluate.py); `python pipelines/evaluate.py --help` lists its options."""

import sys

from swe.commands.evaluate import main

if __name__ == "__main__":
    sys.exit(main(prog="pipelines/evaluate.py"))
