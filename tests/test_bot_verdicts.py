"""A bag backlog is called unbounded only on enough evidence for the horizon; otherwise "undecided at this horizon"."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from mgst.bot_metrics import SETTLE_MAKESPANS, BagReplication, reduce_bags, summarize_bags
from mgst.sim.loop import Simulation
from mgst.sweep.spec import parse_sweep

SWEEP = Path(__file__).resolve().parents[1] / "experiments" / "bot" / "anglano-sweep.toml"


def _rep(growth: float, unfinished: int, window: float, settle: float) -> BagReplication:
    return BagReplication(1, [1.0], [0.0], [1.0], 0.0, 1.0, 10, 10, 12, unfinished, 2.0, growth, [],
                          window=window, settle_time=settle)


@pytest.mark.parametrize(("growth", "unfinished", "window", "settle", "verdict"), [
    (9.7, 0, 40_000.0, 18_364.0, "undecided"),  # the --quick preset's All_L: a window of 2.2 makespans
    (9.7, 2, 40_000.0, 18_364.0, "undecided"),  # a bag left unfinished over so short a run proves nothing either
    (9.7, 0, 40_000.0, 6_603.0, "unbounded"),  # 6.1 makespans: growth over them is evidence
    (0.0, 1, 40_000.0, 6_603.0, "unbounded"),
    (4.0, 0, 40_000.0, 18_364.0, "bounded"),  # under the threshold max(5, 2.0): no growth to judge
    (9.7, 0, 40_000.0, math.inf, "undecided"),  # no bag finished: no makespan, nothing to judge by
    (9.7, 0, SETTLE_MAKESPANS * 8_000.0, 8_000.0, "unbounded"),  # exactly at the limit
])
def test_a_verdict_needs_a_window_of_several_makespans(growth, unfinished, window, settle, verdict):
    assert _rep(growth, unfinished, window, settle).verdict == verdict


def test_a_run_where_no_bag_completed_says_so_rather_than_ask_for_a_longer_horizon():
    """No bag finished (every machine down for the run, or every task refused): the verdict is undecided, and the
    summary says why, where it said 'run a longer horizon' as if a backlog were filling up."""
    from mgst.bot_metrics import format_bags  # noqa: PLC0415

    idle = summarize_bags([_rep(9.7, 2, 40_000.0, math.inf)])
    assert idle.verdict == "undecided" and idle.idle_replications == 1
    assert "NO BAG COMPLETED in 1 of 1 replication" in format_bags(idle)
    assert "longer horizon" not in format_bags(idle)
    short = summarize_bags([_rep(9.7, 0, 40_000.0, 18_364.0)])  # bags finished, over too short a window
    assert short.idle_replications == 0 and "run a longer horizon" in format_bags(short)


def _cell(quick: bool, replication: int, **axes: str) -> BagReplication:
    """One replication of one cell of the Anglano sweep file (with its --quick preset's settings if ``quick``)."""
    data = tomllib.loads(SWEEP.read_text(encoding="utf-8"))
    data["axes"] = {k: [v] for k, v in axes.items()}
    data.setdefault("quick", {})["axes"] = data["axes"]
    spec = parse_sweep(data, "anglano", str(SWEEP), quick=quick)
    experiment = spec.experiment(next(c for c in spec.cells() if c.replication == replication))
    s = experiment.simulation
    return reduce_bags(Simulation(experiment, replication=replication).run(), s.warmup, s.horizon)


def test_a_bounded_setting_that_climbs_over_the_quick_horizon_is_undecided_not_unbounded():
    # FCFS-Share, High-Avail, All_L, low intensity (L = 0.5): 5 bags arrive at 13,103-28,091 s, each still in the
    # system when the next comes (bags take 18,000-30,000 s), so the backlog's trend over the 40,000 s window
    # is +9.7 bags, past the threshold of 5. Main called it unbounded.
    axes = {"policy": "fcfs_share", "availability": "high", "heterogeneity": "homogeneous", "mix": "All_L",
            "intensity": "low"}
    quick = _cell(True, 1, **axes)
    assert quick.backlog_growth > 5 and quick.window < SETTLE_MAKESPANS * quick.settle_time
    assert quick.verdict == "undecided" and not quick.unbounded
    summary = summarize_bags([quick])
    assert summary.verdict == "undecided" and summary.avt is None
    assert summary.as_dict()["avt"] == "undecided at this horizon"
    # and the sweep's own horizon (200,000 s, warm-up 20,000 s) finds it bounded: its trend is flat there
    full = _cell(False, 1, **axes)
    assert full.verdict == "bounded" and abs(full.backlog_growth) < 5


def test_a_truly_unbounded_setting_is_still_unbounded_at_the_quick_horizon():
    # FCFS-Excl, Low-Avail, All_VS, high intensity (finding 4: every policy unbounded): bags need ~6,600 s,
    # the 40,000 s window spans 6 of them, and the backlog grows by 7 bags across it.
    axes = {"policy": "fcfs_excl", "availability": "low", "heterogeneity": "homogeneous", "mix": "All_VS",
            "intensity": "high"}
    rep = _cell(True, 1, **axes)
    assert rep.window >= SETTLE_MAKESPANS * rep.settle_time and rep.backlog_growth > 5
    assert rep.verdict == "unbounded"



def test_the_comparison_says_undecided_where_a_side_is_undecided():
    """A testbed run shorter than five bag makespans is undecided, not unbounded: the comparison beside its
    simulation (summary.json's bag_comparison, and its table) must not call it unbounded."""
    from types import SimpleNamespace  # noqa: PLC0415

    from mgst.analysis.compare import bag_comparison  # noqa: PLC0415

    undecided = summarize_bags([_rep(9.7, 0, 40_000.0, 18_364.0)])
    unbounded = summarize_bags([_rep(9.7, 0, 40_000.0, 6_603.0)])
    rows = bag_comparison(SimpleNamespace(bags=undecided), SimpleNamespace(bags=unbounded))
    avt = next(r for r in rows if r["metric"] == "avt")
    assert (avt["testbed"], avt["simulation"]) == ("undecided at this horizon", "unbounded")


def _bag_list(bags: list[tuple[float, list[float]]], rates: list[float], requirements: str | None = None) -> str:
    """The text `mgst simulate` prints for a bag list on hosts of ``rates``, FCFS (GridBot's policy where a bag
    states requirements), one replication, the default horizon of 2000."""
    from mgst.bot_metrics import format_bags  # noqa: PLC0415
    from mgst.config import parse_experiment  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    listed = [{"at": at, "tasks": [[0, w] for w in tasks]} for at, tasks in bags]
    if requirements is not None:
        listed[-1]["attributes"] = {"JobRequirements": requirements}
    data = {"workload": {"kind": "bag_list", "bags": listed},
            "machines": {"rates": [rates], "attributes": {"grid": ["lab"] * len(rates)}},
            "policy": {"name": "fcfs" if requirements is None else "gridbot"},
            "simulation": {"replications": 1, "warmup": 0.0}}
    summary, _ = run_simulation(parse_experiment(data, "list"), workers=1)
    assert summary.bags is not None
    return format_bags(summary.bags)


def test_a_bag_list_that_ran_out_is_bounded_however_far_its_horizon():
    """Three bags of one 30-unit task at 0, 10 and 20 on one host end at 30, 60 and 90: AVT 50. The backlog's trend
    over their arrivals (0, 1, 2 bags) was stretched across the horizon of 2000 (200 bags) and called UNBOUNDED,
    with no mean given."""
    text = _bag_list([(0.0, [30.0]), (10.0, [30.0]), (20.0, [30.0])], [1.0])
    assert "AVT (turnaround) 50.0" in text and "UNBOUNDED" not in text and "UNFINISHED" not in text, text


def test_a_bag_list_s_bag_no_host_can_run_is_said_unfinished_and_the_others_have_their_means():
    """A requirement no host meets: the bag never completes. It was 'UNBOUNDED: the backlog grows without bound',
    hiding the AVT of the bag that did complete."""
    text = _bag_list([(0.0, [30.0]), (5.0, [10.0])], [1.0], requirements='Host.Grid == "nowhere"')
    assert "AVT (turnaround) 30.0" in text and "UNBOUNDED" not in text, text
    assert "UNFINISHED: 1 counted bag of 2 did not complete" in text, text


def test_a_bag_table_prints_tiny_times_with_the_places_they_need():
    """Tasks of a thousandth of a unit printed AVT 0.0 in (0.0, 0.0): the places grow until the mean lies in its
    interval and the interval is not one point; a mean without an interval gets two significant digits; large
    values keep one place."""
    import math  # noqa: PLC0415

    from mgst.bot_metrics import BagSummary, Metric, format_bags  # noqa: PLC0415

    def summary(avt: Metric, rwt: Metric) -> BagSummary:
        return BagSummary(replications=5, bags=40, tasks=400, unbounded=False, unbounded_replications=0, avt=avt,
                          makespan=Metric(1234.56, 1200.04, 1270.96), waiting=Metric(0.00042, math.nan, math.nan),
                          rwt=rwt, backlog_growth=0.0, interval="replications")

    lines = format_bags(summary(Metric(0.00213, 0.00201, 0.00228), Metric(0.000123, 0.000101, 0.000150))).splitlines()
    assert "AVT (turnaround) 0.0021  95 % CI (0.0020, 0.0023)" in lines, lines
    assert "Makespan         1234.6  95 % CI (1200.0, 1271.0)" in lines, lines
    assert any(line.startswith("Waiting          0.00042") for line in lines), lines
    assert "RWT              0.012%  95 % CI (0.010%, 0.015%)" in lines, lines
