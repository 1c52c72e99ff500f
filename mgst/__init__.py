"""mgst: a testbed for desktop-grid scheduling policies, in simulation and on real machines."""

# First of all: decide whether the mypyc-compiled modules or their sources run (see build_info).
from mgst.build_info import _guard

_guard()
del _guard
