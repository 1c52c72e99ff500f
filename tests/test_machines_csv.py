"""machines.csv's totals of a machine's up periods: its seconds up in the run, and the times it went down."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

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
    assert down_periods(m, {110.0}, 100.0) == 1
    # A puller started again while the pullers registered (at 99.8, before the run began at 100): its old
    # incarnation's period ends there, but the machine did not fail in the run.
    restarted = MachineLog("M3", 1.0, periods=[[99.0, 99.8], [99.8, 105.0], [107.0, None]])
    assert down_periods(restarted, set(), 100.0) == 1
    assert up_seconds(MachineLog("M2", 1.0), 100.0, 130.0) == 0.0  # never registered


def test_a_resumed_run_counts_up_seconds_from_its_first_start():
    # The run began at 1000; its mapper died after 1100 and a successor resumed at 1135, running its clock again at
    # 1140 with model time 0 at 1040 (the held 100 s). machines.csv counts from 1000, the journal's first begin, not
    # from the last clock's model time 0 (1040): a machine up all along is up 100 s before the crash and 105 s from
    # its registration with the successor at 1135 (where it would read 60 + 105).
    from mgst.config import load_experiment
    from mgst.testbed.journal import Journal

    journal = Journal(load_experiment(Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml"))
    journal.began(1000.0)
    journal.tick(1100.0)
    journal.resumed(1135.0, 1040.0)
    journal.began(1140.0)
    assert (journal.first_start, journal.start) == (1000.0, 1140.0)
    m = MachineLog("M1", 1.0, periods=[[999.0, 1100.0], [1135.0, None]])
    assert up_seconds(m, journal.first_start, 1240.0) == pytest.approx(100.0 + 105.0)


def test_machines_csv_of_a_resumed_run_counts_from_its_first_start(tmp_path):
    import csv

    from test_testbed_summary import hand_made_run

    from mgst.testbed.machines_csv import write_machines_csv

    run = hand_made_run({0: [1.0]}, [[], []])
    run.t0, run.end = 1040.0, 1240.0  # (the last clock's model time 0, as above)
    run.journal.first_start, run.journal.outages = 1000.0, [(1100.0, 1135.0)]
    run.journal.machines[0].periods = [[999.0, 1100.0], [1135.0, None]]
    run.core.machines = [SimpleNamespace(stats=SimpleNamespace(suspicions=0, timed_out=0)) for _ in range(2)]
    for m in run.journal.machines:
        m.speed = 1.0
    for r in run.journal.replicas.values():
        r.outcome = "done"
    write_machines_csv(run, tmp_path / "machines.csv")
    with open(tmp_path / "machines.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert (rows[0]["Up (s)"], rows[0]["Down Periods"]) == ("205.000", "0")  # (the outage is not a failure)
    # summary.json and report.html's timeline say the same
    from mgst.testbed.report import _events
    from mgst.testbed.summary import summarize_testbed

    for m in run.core.machines:
        m.cpus, m.stats = 1, SimpleNamespace(suspicions=0, timed_out=0, busy_time=0.0, discarded=0, discarded_time=0.0)
    assert summarize_testbed(run)[1]["machines_detail"][0]["down_periods"] == 0
    assert [e["kind"] for e in _events(run) if e["machine"] == "M1"] == ["registered", "mapper outage", "up"]


def test_a_policys_suspicions_are_not_failures():
    """LPAS_DG's time-out with suspicion took a machine down 381 times in a run with one injected failure:
    machines.csv said 381 Down Periods and machine_periods.csv 381 periods ended by 'down'. A suspicion journalled
    as one ends its period as 'suspected', counted in the Suspicions column, not as a failure."""
    from mgst.testbed.journal import Journal  # noqa: PLC0415
    from mgst.testbed.machines_csv import ended_by, state_at_end  # noqa: PLC0415

    journal = Journal.__new__(Journal)  # (the records' effects alone: no store, no experiment)
    journal.store = None
    journal.machines = [MachineLog("M1", 1.0)]
    journal._saw = lambda wall: None  # type: ignore[method-assign]
    journal.machine_up(0, 100.0)
    journal.machine_down(0, 105.0)  # a failure
    journal.machine_up(0, 107.0)
    journal.machine_suspected(0, 110.0)  # the policy's
    journal.machine_up(0, 110.5)
    journal.machine_suspected(0, 120.0)  # ...and still suspected at the end
    m = journal.machines[0]
    assert [ended_by(m, down, set()) for _, down in m.periods] == ["down", "suspected", "suspected"]
    assert down_periods(m, set(), 100.0) == 1 and state_at_end(m) == "suspected"
    journal.machine_up(0, 121.0)
    journal.machine_down(0, 125.0)
    assert state_at_end(m) == "down" and down_periods(m, set(), 100.0) == 2


def test_a_puller_that_left_did_not_fail():
    """A GridBot overlay's hosts leave by themselves when idle (--idle-exit), and a puller stopped says so (its Bye):
    each was journalled as a failure, so machines.csv counted Down Periods and machine_periods.csv 'down' where no
    failure happened. A Bye ends the period as 'left', and the state at the end of a machine not back since."""
    from mgst.testbed.journal import Journal  # noqa: PLC0415
    from mgst.testbed.machines_csv import ended_by, state_at_end  # noqa: PLC0415

    journal = Journal.__new__(Journal)  # (the records' effects alone: no store, no experiment)
    journal.store = None
    journal.machines = [MachineLog("M1", 1.0)]
    journal._saw = lambda wall: None  # type: ignore[method-assign]
    journal.machine_up(0, 100.0)
    journal.machine_left(0, 104.0)  # idle, it left
    journal.machine_up(0, 106.0)  # a pilot of the same name, later
    journal.machine_down(0, 108.0)  # a failure
    journal.machine_up(0, 109.0)
    journal.machine_left(0, 112.0)
    m = journal.machines[0]
    assert [ended_by(m, down, set()) for _, down in m.periods] == ["left", "down", "left"]
    assert down_periods(m, set(), 100.0) == 1 and state_at_end(m) == "left"
