"""machines.csv's totals of a machine's up periods: its seconds up in the run, and the times it went down."""

from __future__ import annotations

import pytest

from mgst.testbed.journal import MachineLog
from mgst.testbed.machines_csv import down_periods, up_seconds


def test_up_seconds_count_the_run_only_and_down_periods_the_failures_only():
    # The run from 100 to 130, a mapper outage from 110 (its successor's clock held until 114). The machine
    # registered at 99.6, before the run began, and went down at 105 (a failure); back at 107, cut by the outage at
    # 110; back at 114 until it was expelled at 120; back at 125 (up at the end). Up in the run: 5 + 3 + 6 + 5 = 19 s
    # (not 19.4: the 0.4 s before the run); down once (not 3: the outage and the expulsion are not failures).
    m = MachineLog("M1", 1.0, periods=[[99.6, 105.0], [107.0, 110.0], [114.0, 120.0], [125.0, None]],
                   expelled=(120.0, "refused the run's commands"))
    assert up_seconds(m, 100.0, 130.0) == pytest.approx(19.0)
    assert down_periods(m, {110.0}) == 1
    assert up_seconds(MachineLog("M2", 1.0), 100.0, 130.0) == 0.0  # never registered
