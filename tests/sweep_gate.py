"""A sweep cell for tests/test_sweep_slurm.py: the real cell, but only the first call goes through at once; the
others wait until the gate file (``MGST_TEST_GATE``) exists. So a sweep whose workers are cancelled after its first
row has certainly not finished every cell, however fast the cells are."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mgst.model import Experiment
from mgst.sweep.cells import default_cell

WAIT_AT_MOST = 300.0  # seconds a held cell waits for its gate (a test that never opens it fails, it does not hang)
POLL = 0.05


def cell(experiment: Experiment, replication: int) -> Mapping[str, Any]:
    gate = Path(os.environ["MGST_TEST_GATE"])
    try:  # the first call of the sweep's run (one marker file, made atomically) goes through
        os.close(os.open(gate.with_name(gate.name + ".first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        deadline = time.monotonic() + WAIT_AT_MOST
        while not gate.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gate {gate} was not opened within {WAIT_AT_MOST:g} s") from None
            time.sleep(POLL)
    return default_cell(experiment, replication)
