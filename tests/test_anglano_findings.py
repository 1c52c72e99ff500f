"""Seed 000's findings: the checks themselves on hand-made cells, and findings 1 and 2 at a small scale."""

from __future__ import annotations

import math

import pytest

from mgst.papers.anglano import scenario as anglano
from mgst.papers.anglano.findings import Cell, finding_1, finding_2, finding_3, finding_5, load_cells
from mgst.sim.bag_cell import simulate_cell

POLICIES = ("fcfs_excl", "fcfs_share", "rr", "rr_nrf", "long_idle")


def cells_for(setting: tuple[str, str, str, str], **by_policy: tuple[float, float, int]) -> dict:
    """{(policy, *setting): Cell(avt, rwt, unbounded of 1 replication)}."""
    return {(p, *setting): Cell(avt, rwt, unb, 1) for p, (avt, rwt, unb) in by_policy.items()}


def test_finding_1_checks_each_mix_as_the_paper_states_it():
    good = {}
    for mix, rr, others in (("All_VS", 120.0, 100.0), ("All_S", 130.0, 110.0)):
        good |= cells_for(("high", "homogeneous", mix, "low"), rr=(rr, 0.01, 0), rr_nrf=(rr, 0.01, 0),
                          fcfs_excl=(others, 0.02, 0), fcfs_share=(others, 0.02, 0), long_idle=(others, 0.02, 0))
    good |= cells_for(("high", "homogeneous", "All_L", "low"), rr=(200.0, 0.3, 0), rr_nrf=(210.0, 0.3, 0),
                      fcfs_excl=(math.nan, 0.7, 1), fcfs_share=(250.0, 0.4, 0), long_idle=(260.0, 0.4, 0))
    assert finding_1(good).holds is True
    # FCFS-Excl bounded on All_L: the finding fails there, and says so
    bad = dict(good)
    bad[("fcfs_excl", "high", "homogeneous", "All_L", "low")] = Cell(300.0, 0.7, 0, 1)
    f = finding_1(bad)
    assert f.holds is False and f.failed == [
        "All_L: FCFS-Excl bounded (unbounded 0 of 1), AVT 300, not unbounded; RR/RR-NRF 200/210 below "
        "FCFS-Share/LongIdle 250/260 (this part holds)"]
    # RR above another policy on All_L as well: both parts said, neither as holding
    bad[("rr_nrf", "high", "homogeneous", "All_L", "low")] = Cell(255.0, 0.3, 0, 1)
    assert finding_1(bad).failed == [
        "All_L: RR/RR-NRF 200/255 not below FCFS-Share/LongIdle 250/260; FCFS-Excl bounded (unbounded 0 of 1), AVT "
        "300, not unbounded"]
    # FCFS-Excl unbounded, RR not below: the order fails, the rest holds
    bad[("fcfs_excl", "high", "homogeneous", "All_L", "low")] = Cell(math.nan, 0.7, 1, 1)
    assert finding_1(bad).failed == [
        "All_L: RR/RR-NRF 200/255 not below FCFS-Share/LongIdle 250/260; FCFS-Excl unbounded (this part holds)"]
    # RR below another policy on All_VS
    bad = dict(good)
    bad[("rr", "high", "homogeneous", "All_VS", "low")] = Cell(90.0, 0.01, 0, 1)
    assert finding_1(bad).holds is False
    # a missing cell: nothing to say
    del bad[("rr", "high", "homogeneous", "All_VS", "low")]
    assert finding_1(bad).holds is None


def test_findings_2_3_and_5_on_hand_made_cells():
    s = ("high", "heterogeneous", "All_M", "high")
    cells = cells_for(s, rr=(100.0, 0.01, 0), rr_nrf=(100.0, 0.02, 0), fcfs_excl=(math.nan, 0.05, 1),
                      fcfs_share=(math.nan, 0.03, 1), long_idle=(math.nan, 0.03, 1))
    assert finding_2(cells).holds is True
    assert finding_3(cells).holds is True and finding_3(cells).checked == 1
    assert finding_5(cells).holds is True
    cells[("long_idle", *s)] = Cell(500.0, 0.015, 0, 1)  # bounded, and RWT below RR-NRF's
    assert finding_2(cells).holds is False
    assert finding_3(cells).holds is False
    assert finding_5(cells).holds is False
    assert finding_5(cells).failed == ["high/heterogeneous/All_M/high: fcfs_share unbounded (unbounded 1 of 1), "
                                       "long_idle bounded, AVT 500"]  # which one, not "one unbounded"


def test_a_cell_is_unbounded_when_most_of_its_replications_are():
    rows = [{"policy": "rr", "availability": "high", "heterogeneity": "homogeneous", "mix": "All_L",
             "intensity": "high", "avt": a, "rwt": "0.1", "unbounded": u, "error": ""}
            for a, u in (("nan", "True"), ("nan", "True"), ("100.0", "False"))]
    (cell,) = load_cells(rows).values()
    assert cell.is_unbounded and cell.unbounded == 2 and cell.replications == 3 and cell.avt == 100.0


@pytest.mark.parametrize(("unbounded", "replications", "verdict"), [
    (0, 1, "bounded"), (1, 1, "unbounded"), (1, 2, "undecided"), (2, 2, "unbounded"), (1, 3, "bounded"),
    (2, 3, "unbounded"), (2, 4, "undecided"), (3, 5, "unbounded"),
])
def test_a_verdict_needs_a_strict_majority_and_a_tie_decides_nothing(unbounded, replications, verdict):
    c = Cell(100.0, 0.1, unbounded, replications)
    assert c.verdict == verdict
    assert (c.is_unbounded, c.is_bounded) == (verdict == "unbounded", verdict == "bounded")


def test_a_tied_cell_leaves_its_setting_undecided_not_bounded():
    # Finding 3's High/homogeneous/All_M on 2 replications: FCFS-Share unbounded in one, bounded in
    # the other. The old majority (2 x 1 > 2 is false) called it bounded and the finding failed on it;
    # a tie is neither.
    s = ("high", "homogeneous", "All_M", "high")
    cells = {(p, *s): Cell(math.nan if unb else 100.0, 0.05, unb, 2)
             for p, unb in (("rr", 0), ("rr_nrf", 0), ("fcfs_excl", 2), ("fcfs_share", 1), ("long_idle", 2))}
    f = finding_3(cells)
    assert f.holds is None and f.failed == [] and f.checked == 1
    assert f.undecided == ["homogeneous All_M: fcfs_share unbounded 1 of 2"]
    assert f.line().startswith("3. undecided (1 settings) (undecided, replications tied: homogeneous All_M")
    # A third replication decides it, either way.
    cells[("fcfs_share", *s)] = Cell(math.nan, 0.05, 2, 3)
    assert finding_3(cells).holds is True
    cells[("fcfs_share", *s)] = Cell(100.0, 0.05, 1, 3)
    f = finding_3(cells)
    assert f.holds is False and f.failed == ["homogeneous All_M: fcfs_share bounded (unbounded 1 of 3)"]
    # Finding 5 leaves a tied pair open too, rather than call them "one unbounded".
    cells[("fcfs_share", *s)] = Cell(100.0, 0.05, 1, 2)
    f = finding_5(cells)
    assert f.holds is None and f.failed == [] and len(f.undecided) == 1


@pytest.mark.parametrize("replications", [3])
def test_findings_1_and_2_hold_at_a_small_scale(replications):
    """High-Avail, homogeneous, low intensity, at a fifth of the paper's grid and application size
    (20 machines; tasks per machine, task sizes and the load factor are the paper's)."""
    rows = []
    for mix in ("All_VS", "All_S", "All_L"):
        for policy in POLICIES:
            exp = anglano.experiment("high", "homogeneous", mix, "low", policy, horizon=300_000.0, warmup=30_000.0,
                                     replications=replications, seed=1, checkpoint_interval=600.0, scale=0.2)
            assert len(exp.machines) == 20
            for r in range(replications):
                m = simulate_cell(exp, r)
                rows.append({"policy": policy, "availability": "high", "heterogeneity": "homogeneous", "mix": mix,
                             "intensity": "low", "avt": repr(m["avt"]), "rwt": repr(m["rwt"]),
                             "unbounded": str(m["unbounded"]), "error": ""})
    cells = load_cells(rows)
    f1, f2 = finding_1(cells), finding_2(cells)
    assert f1.holds is True, f1.line()
    assert f2.holds is True and f2.checked == 3, f2.line()
