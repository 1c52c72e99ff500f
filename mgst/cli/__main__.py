"""`python -m mgst.cli` runs the mgst command (as `python -m mgst` does)."""

import sys

from mgst.cli import main

sys.exit(main())
