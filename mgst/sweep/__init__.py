"""Sweeps: grids of simulation cells run on a process pool or Dask, with their tables and plots."""

from mgst.sweep.runner import SweepError, estimated_cost, run_cell, run_sweep
from mgst.sweep.spec import Cell, SweepSpec, load_sweep, parse_sweep

__all__ = ["Cell", "SweepError", "SweepSpec", "estimated_cost", "load_sweep", "parse_sweep", "run_cell", "run_sweep"]
