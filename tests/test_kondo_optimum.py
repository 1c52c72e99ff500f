"""The omniscient optimum (mgst.papers.kondo.optimum): hand-solved traces A-H, a brute-force check, the tie rule."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgst.availability.process import State
from mgst.availability.trace_files import Interval
from mgst.papers.kondo.experiment import kondo_experiment
from mgst.papers.kondo.metrics import simulate_run
from mgst.papers.kondo.optimum import HostTrace, NotEnoughCapacity, Optimum, host_traces, optimal_makespan

INF = math.inf
S = 10.0  # every hand trace's task size (optimum.md, section 4): time in minutes, power in work per minute


def up(*segments):
    return tuple(segments)


def makespans(hosts, tasks, t0=0.0):
    return [optimal_makespan(hosts, S, t, t0) for t in tasks]


def test_a_dedicated_heterogeneous_hosts():
    # H1 completes at 10, 20, 30...; H2 (twice as fast) at 5, 10, 15, 20: sorted 5, 10, 10, 15, 20.
    hosts = [HostTrace(1.0, up((0, INF, 1.0))), HostTrace(2.0, up((0, INF, 1.0)))]
    assert makespans(hosts, range(1, 6)) == [5, 10, 10, 15, 20]


def test_b_an_interruption_kills_the_running_task():
    # H1's task started at 0 would end at 10 > 8 (DOWN at 8): killed; greedy restarts at 12 -> 22.
    hosts = [HostTrace(1.0, up((0, 8, 1.0), (12, INF, 1.0))), HostTrace(1.0, up((0, INF, 1.0)))]
    assert makespans(hosts, (1, 2, 3)) == [10, 20, 22]


def test_c_cpu_share_below_one():
    # H1: 3 work by 6 at share 0.5, 7 more at rate 1 -> 13, then 23. H2: rate 2 x 0.5 -> 10, 20.
    hosts = [HostTrace(1.0, up((0, 6, 0.5), (6, INF, 1.0))), HostTrace(2.0, up((0, INF, 0.5)))]
    assert makespans(hosts, (1, 2, 3, 4)) == [10, 13, 20, 23]


def test_d_hosts_that_never_finish_a_task():
    # H1's up runs are all shorter than a task; H2 is up at share 0 (no progress, no division by 0).
    hosts = [HostTrace(1.0, up((0, 5, 1.0), (6, 11, 1.0), (12, 21, 1.0), (22, 31, 1.0))),
             HostTrace(3.0, up((0, INF, 0.0))), HostTrace(1.0, up((0, INF, 1.0)))]
    assert makespans(hosts, (1, 2)) == [10, 20]


def test_e_combined_with_a_late_start():
    # optimum.md section 4, E: completions 110, 120, 130, 140, 142, 150, 160, 162.5 after t0 = 100.
    hosts = [HostTrace(2.0, up((100, 104, 1.0), (110, 200, 0.5))),
             HostTrace(1.0, up((90, 115, 1.0), (117, 122, 1.0), (122, 200, 0.25))),
             HostTrace(4.0, up((100, 102, 1.0), (160, 200, 1.0)))]
    assert makespans(hosts, range(1, 9), t0=100.0) == [10, 20, 30, 40, 42, 50, 60, 62.5]


def test_f_a_completion_at_the_instant_of_a_failure_counts():
    hosts = [HostTrace(1.0, up((0, 10, 1.0), (12, INF, 1.0)))]
    assert optimal_makespan(hosts, S, 1) == 10  # (were the DOWN to win: 22)


def test_g_the_earliest_available_host_is_not_the_best():
    hosts = [HostTrace(1.0, up((0, INF, 1.0))), HostTrace(10.0, up((1, INF, 1.0)))]
    assert makespans(hosts, (1, 2, 3)) == [2, 3, 4]


def test_h_not_enough_capacity_is_an_error():
    hosts = [HostTrace(1.0, up((0, 25, 1.0)))]
    assert optimal_makespan(hosts, S, 2) == 20
    with pytest.raises(NotEnoughCapacity, match="only 2 of 3 tasks"):
        optimal_makespan(hosts, S, 3)


def test_the_schedule_lists_the_t_earliest_completions():
    hosts = [HostTrace(1.0, up((0, INF, 1.0))), HostTrace(2.0, up((0, INF, 1.0)))]
    assert list(Optimum(hosts).completions(0.0, S, 4)) == [5, 10, 10, 15]


def test_a_trace_as_the_simulator_plays_it():
    # Left out: up at share 1 (before 5, and after the host's last interval); reclaimed without a share: 0.
    intervals = {"a": [Interval(5, 20, State.UP, 0.5), Interval(20, 30, State.RECLAIMED, None),
                       Interval(30, 40, State.DOWN, None)],
                 "b": [Interval(0, 10, State.DOWN, None), Interval(10, 50, State.UP, None)]}
    a, b = host_traces(intervals, {"a": 2.0, "b": 1.0})
    assert a == HostTrace(2.0, ((0, 5, 1.0), (5, 20, 0.5), (20, 30, 0.0), (40, INF, 1.0)))
    assert b == HostTrace(1.0, ((10, INF, 1.0),))
    a, = host_traces({"a": intervals["a"]}, {"a": 2.0}, up_after=False)
    assert a.up[-1] == (20, 30, 0.0)


# --- against a brute force: every host's greedy completions are the most any schedule reaches -------

SLOTS = 12  # brute_check.py's random hosts: 12 unit slots, each down or up at share 1/2 or 1


def _best_count(rate: int, slots: tuple, size: int, by: int) -> int:
    """The most tasks any schedule with integer start times completes on one host by ``by`` (a DP)."""

    def finish(x: int) -> Fraction | None:
        need, t = Fraction(size), x
        while t < len(slots) and slots[t] != 0:
            cap = rate * slots[t]
            if cap >= need:
                return t + need / cap
            need -= cap
            t += 1
        return None

    @lru_cache(None)
    def best(x: int) -> int:
        if x >= len(slots):
            return 0
        out = best(x + 1)
        y = finish(x)
        if y is not None and y <= by:
            out = max(out, 1 + best(math.ceil(y)))
        return out

    return best(0)


def _exact_completions(rate: int, slots: tuple, size: int) -> list[Fraction]:
    """The greedy's completions on one host in exact arithmetic (opt_ref.py's walk, slot by slot)."""
    out: list[Fraction] = []
    x = Fraction(0)
    while x < len(slots):
        if slots[math.floor(x)] == 0:
            x = Fraction(math.floor(x) + 1)
            continue
        need, t, y = Fraction(size), x, None
        while t < len(slots) and slots[math.floor(t)] != 0:
            end = Fraction(math.floor(t) + 1)
            cap = rate * slots[math.floor(t)] * (end - t)
            if cap >= need:
                y = t + need / (rate * slots[math.floor(t)])
                break
            need -= cap
            t = end
        if y is None:  # cannot fit before the next DOWN (or the end): skip to it
            x = Fraction(math.floor(t) + 1)
            continue
        out.append(y)
        x = y
    return out


def _host(rate: int, slots: tuple) -> HostTrace:
    return HostTrace(float(rate), tuple((i, i + 1, float(c)) for i, c in enumerate(slots) if c != 0))


host_st = st.tuples(st.sampled_from((1, 2, 3)),
                    st.tuples(*[st.sampled_from((0, Fraction(1, 2), 1, 1, 1))] * SLOTS))


@settings(max_examples=150, deadline=None)
@given(hosts=st.lists(host_st, min_size=1, max_size=3), size=st.sampled_from((1, 2, 3)))
def test_no_schedule_completes_more_tasks_by_any_time(hosts, size):
    opt = Optimum([_host(r, slots) for r, slots in hosts])
    exact = sorted(y for r, slots in hosts for y in _exact_completions(r, slots, size))
    found = opt.completions_by(0.0, float(SLOTS), float(size))
    assert sorted(found) == pytest.approx([float(y) for y in exact], abs=1e-9)
    for by in range(SLOTS + 1):
        brute = sum(_best_count(r, slots, size, by) for r, slots in hosts)
        assert sum(1 for y in found if y <= by + 1e-9) >= brute
    for t in range(1, len(exact) + 1):
        assert opt.makespan(0.0, float(size), t) == pytest.approx(float(exact[t - 1]), abs=1e-9)


# --- the simulator plays the same model -----------------------------------------------------------

def _platform(directory, clock: dict[str, float], lines: list[str]):
    directory.mkdir(exist_ok=True)
    (directory / "hosts.csv").write_text("host,clock_ghz\n" + "".join(f"{h},{c}\n" for h, c in clock.items()))
    (directory / "availability.csv").write_text("machine,start,end,state,cpu_share\n" + "\n".join(lines) + "\n")
    return directory


def test_the_simulator_counts_a_completion_at_the_instant_of_a_failure(tmp_path):
    # Trace F in seconds: a 1.5 GHz host (power 1) up [0, 600), DOWN [600, 720); a task of 10 minutes (600 s)
    # started at 0 ends exactly at the DOWN. The simulator handles the completion first: makespan 600, not 1320.
    d = _platform(tmp_path / "f", {"H": 1.5}, ["H,0,600,up,1.0", "H,600,720,down,", "H,720,5000,up,1.0"])
    exp = kondo_experiment(d, "FCFS", 1, 10, 0.0, history=0.0)
    run = simulate_run(exp)
    assert (run.makespan, run.optimal) == (600.0, 600.0)


def test_a_platform_of_an_fta_trace_alone_runs_as_its_csv_twin(tmp_path):
    """A platform folder holding availability.fta (the archive's format, as `mgst traces generate --fta` writes it)
    and no availability.csv: `mgst traces summary` read it, a Kondo run said 'is not a platform directory'."""
    lines = ["H,0,600,up,", "H,600,720,down,", "H,720,5000,up,"]
    csv_dir = _platform(tmp_path / "csv", {"H": 1.5}, lines)
    fta_dir = tmp_path / "fta"
    fta_dir.mkdir()
    (fta_dir / "hosts.csv").write_text((csv_dir / "hosts.csv").read_text())
    (fta_dir / "availability.fta").write_text(  # the same periods: event_type 1 up, 0 down
        "1\t0\t1\t1\tH\t1\t0\t600\t0\n2\t0\t1\t1\tH\t0\t600\t720\t0\n3\t0\t1\t1\tH\t1\t720\t5000\t0\n")
    runs = [simulate_run(kondo_experiment(d, "FCFS", 1, 11, 0.0, history=0.0)) for d in (csv_dir, fta_dir)]
    assert runs[0].makespan == runs[1].makespan == 720.0 + 660.0  # (killed at 600, run again from 720)


def _random_lines(rng, hosts: int, slots: int, slot: float) -> list[str]:
    lines = []
    for h in range(hosts):
        for k in range(slots):
            state = rng.choice(("down", "up", "up", "up", "reclaimed"))
            share = {"down": "", "up": rng.choice(("1.0", "0.5")), "reclaimed": "0"}[state]
            lines.append(f"H{h},{k * slot},{(k + 1) * slot},{state},{share}")
    return lines


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), tasks=st.integers(1, 6), minutes=st.sampled_from((1, 2, 5)))
def test_no_simulated_policy_beats_the_optimum(tmp_path_factory, seed, tasks, minutes):
    import random

    rng = random.Random(seed)
    clock = {f"H{h}": rng.choice((0.75, 1.5, 3.0)) for h in range(3)}
    d = _platform(tmp_path_factory.mktemp("p"), clock, _random_lines(rng, 3, 40, 60.0))
    start = 60.0 * rng.randrange(0, 20)
    run = simulate_run(kondo_experiment(d, "FCFS", tasks, minutes, start, history=min(start, 300.0)))
    assert run.makespan >= run.optimal - 1e-6 * run.optimal
