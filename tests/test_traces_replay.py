"""Lazy trace replay: the periods a bisection at the offset yields are those of a brute-force merge, a run reads only
the intervals it plays, and capacity looks at the run's window."""

from __future__ import annotations

import math
import random

import pytest

from mgst.availability import Period, State, make_process
from mgst.availability.registry import capacity
from mgst.availability.trace import TraceAvailability, replay
from mgst.availability.trace_files import Interval
from mgst.model import Experiment, JobClass, Machine, PolicySpec, SimulationSettings

UP, RECLAIMED, DOWN = State.UP, State.RECLAIMED, State.DOWN


def random_source(rng: random.Random, n: int) -> list[Interval]:
    """Sorted, non-overlapping intervals on a 1-second grid (touching or with gaps), any state and share."""
    out, t = [], float(rng.randint(0, 3))
    for _ in range(n):
        start = t + rng.choice([0, 0, 1, 2])
        end = start + rng.randint(1, 4)
        state = rng.choice([UP, RECLAIMED, DOWN])
        share = None if state is DOWN or rng.random() < 0.4 else rng.choice([0.0, 0.25, 0.5, 1.0])
        out.append(Interval(start, end, state, share))
        t = end
    return out


def brute_force(sources, offset, scale, a_j):
    """Each second-long cell of the grid after ``offset`` on its own, then equal neighbours joined (durations
    summed), a last UP at a_j dropped."""
    ends = [iv.end for src in sources for iv in src]
    last = max(ends, default=offset)
    cells = []
    t = offset
    while t < last:
        right = min(math.floor(t) + 1.0, last)
        state, share = UP, a_j
        for src in sources:
            for iv in src:
                if iv.start <= t < iv.end:
                    state = max(state, iv.state)
                    own = a_j if iv.state is UP else 0.0
                    share = min(share, own if iv.share is None else iv.share)
        cells.append(((right - t) * scale, state, 0.0 if state is DOWN else share))
        t = right
    out = []
    for d, s, c in cells:
        if out and out[-1][1:] == (s, c):
            out[-1] = (out[-1][0] + d, s, c)
        else:
            out.append((d, s, c))
    if out and out[-1][1:] == (UP, a_j):
        out.pop()
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_lazy_replay_is_the_brute_force_merge(seed):
    rng = random.Random(seed)
    sources = [random_source(rng, rng.randint(0, 12)) for _ in range(rng.randint(1, 3))]
    offset = rng.choice([0.0, 2.0, 5.5, 11.0, 30.0])
    a_j = rng.choice([1.0, 0.5])
    got = [tuple(p) for p in replay(sources, offset, 2.0, a_j)]
    want = brute_force(sources, offset, 2.0, a_j)
    assert [(s, c) for _, s, c in got] == [(s, c) for _, s, c in want]
    assert [d for d, _, _ in got] == pytest.approx([d for d, _, _ in want], abs=1e-9)


class CountingList(list):
    """A list that remembers which items were read."""

    def __init__(self, items):
        super().__init__(items)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)


def test_a_run_reads_only_the_intervals_it_plays():
    month = CountingList([Interval(60.0 * k, 60.0 * k + 30, DOWN if k % 2 else UP, None) for k in range(40_000)])
    periods = replay([month], 1_200_000.0, 1.0, 1.0)  # day 14 of a month of minute-long intervals
    played = [next(periods) for _ in range(5)]
    # Interval 20,000 (up) and the gap after it, a down, then gap, up, gap as one period, and so on.
    assert played == [Period(60.0, UP, 1.0), Period(30.0, DOWN, 0.0), Period(90.0, UP, 1.0), Period(30.0, DOWN, 0.0),
                      Period(90.0, UP, 1.0)]
    assert len(month.read) < 60  # a bisection (~16 reads) and the few intervals played, of 40,000


def test_a_process_at_any_offset_and_capacity_over_the_run_s_window(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("M1,0,100,up,0.5\nM1,100,200,down,\nM1,1000,1100,reclaimed,0\n")
    machines = (Machine("M1", (1.0,), 1.0),)

    def experiment(offset, horizon):
        return Experiment("t", (JobClass("1", 1.0),), machines, PolicySpec("fcfs"),
                          failures=TraceAvailability(str(trace), "csv", offset=offset),
                          simulation=SimulationSettings(horizon=horizon, warmup=0.0))

    process = make_process(experiment(50.0, 10.0), 1, 0, 0)
    assert [process.next() for _ in range(5)] == [Period(50.0, UP, 0.5), Period(100.0, DOWN, 0.0),
                                                  Period(800.0, UP, 1.0), Period(100.0, RECLAIMED, 0.0),
                                                  Period(math.inf, UP, 1.0)]
    # Capacity over two horizons of trace from the offset: [50, 250) is 50 s at 0.5, 100 s down, 50 s at 1.
    fractions, note = capacity(experiment(50.0, 100.0))
    assert fractions == [pytest.approx((50 * 0.5 + 50 * 1.0) / 200)] and "first 200 time units" in note
    # Past the trace's end the machine is up at a_j: [1050, 1450) is 50 s reclaimed at 0, then 350 s at 1.
    assert capacity(experiment(1050.0, 200.0))[0] == [pytest.approx(350 / 400)]
