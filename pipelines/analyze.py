"""`ray job submit -- python pipelines/analyze.py …`: the same job as `swe analyze`
(swe/commands/analyze.py); `python pipelines/analyze.py --help` lists its options."""

import sys

from swe.commands.analyze import main

if __name__ == "__main__":
    sys.exit(main(prog="pipelines/analyze.py"))
