"""`ray job submit -- python pipelines/build.py …`: the same job as `swe build`
(swe/commands/build.py); `python pipelines/build.py --help` lists its options."""

import sys

from swe.commands.build import main

if __name__ == "__main__":
    sys.exit(main(prog="pipelines/build.py"))
