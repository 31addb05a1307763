"""`ray job submit -- python pipelines/encode.py …`: the same job as `swe encode`
(swe/commands/encode.py); `python pipelines/encode.py --help` lists its options."""

import sys

from swe.commands.encode import main

if __name__ == "__main__":
    sys.exit(main(prog="pipelines/encode.py"))
