"""`python -m mgst` runs the mgst command."""

import sys

from mgst.cli import main

sys.exit(main())
