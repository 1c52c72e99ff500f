"""`python -m puller`: run a puller daemon (the same as `mgst puller`)."""

import sys

from puller.cli import main

sys.exit(main())
